#!/usr/bin/env python3
"""docs/architecture.md's rules of what never depends on what, checked on
the built objects' symbols (who calls whom, not who includes whom: a
header included for a type is no dependency) and on the headers' text.

    architecture.py SOURCE_DIR BUILD_DIR

A file depends on another when it uses a symbol the other defines (nm's
U against T/D/B/R).  Each failed rule prints one line naming the files."""
import collections
import glob
import os
import re
import subprocess
import sys

# Circles of files outside src/nn that stand until they are taken apart:
# none since issue 65 took the last three apart (the collectives, the
# trainer, the options).  A new circle fails; so does one listed here that
# went (take it off).
KNOWN_CIRCLES = []


def symbols(build):
    """{source file: (defined, used)} for the project's own objects."""
    files = {}
    for obj in glob.glob(os.path.join(build, "**", "CMakeFiles", "*.dir", "**", "*.o"), recursive=True) + \
            glob.glob(os.path.join(build, "CMakeFiles", "*.dir", "**", "*.o"), recursive=True):
        name = obj.split(".dir/", 1)[1][:-2]
        if not (name.startswith("src/") or name.startswith("launcher/")) or name in files:
            continue
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        defined, used = set(), set()
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBRC":
                defined.add(p[2])
            elif len(p) == 2 and p[0] == "U":
                used.add(p[1])
        files[name] = (defined, used)
    return files


def graph(files):
    owner = {s: f for f, (d, _) in files.items() for s in d}
    g = collections.defaultdict(set)
    for f, (_, used) in files.items():
        for s in used:
            if s in owner and owner[s] != f:
                g[f].add(owner[s])
    return g


def circles(files, g):
    """Strongly connected sets of more than one file (Tarjan, iterative)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    for root in files:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = n[0]; n[0] += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n[0]; n[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop(); on.discard(w); comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def main():
    src, build = sys.argv[1], sys.argv[2]
    files = symbols(build)
    if not any(f.startswith("src/nn/") for f in files):
        print(f"FAIL: no objects of src/nn under {build}")
        return 1
    g = graph(files)
    owner = {s: f for f, (d, _) in files.items() for s in d}
    failed = []
    found = circles(files, g)
    # 1. the engine has no circle of files
    for c in found:
        if any(f.startswith("src/nn/") for f in c):
            failed.append(f"rule 1: files of src/nn call each other round a circle: {' '.join(sorted(c))}")
    # 2. elsewhere, no circle beyond the known ones, and each known one still there
    for c in found:
        if not any(f.startswith("src/nn/") for f in c) and c not in KNOWN_CIRCLES:
            failed.append(f"rule 2: a new circle of files: {' '.join(sorted(c))}")
    for c in KNOWN_CIRCLES:
        if c not in found:
            failed.append(f"rule 2: the circle {' '.join(sorted(c))} went: take it off KNOWN_CIRCLES")
    for f, (_, used) in sorted(files.items()):
        # 3. a backend is named in one place
        for b in ("nn_onednn_backend", "nn_reference_backend"):
            if b in used and f != "src/nn/backends.c":
                failed.append(f"rule 3: {f} names the backend {b} (only src/nn/backends.c does)")
        # 4. oneDNN is the oneDNN backend's alone
        dnnl = sorted(s for s in used if s.startswith("dnnl_"))
        if dnnl and f.startswith("src/") and not f.startswith("src/nn/onednn/"):
            failed.append(f"rule 4: {f} calls oneDNN ({dnnl[0]}), which only src/nn/onednn/ does")
        deps = g[f]
        # 5. the C kernels depend on nothing of the project but themselves
        if f.startswith("src/nn/kernels/"):
            for d in sorted(deps):
                if not d.startswith("src/nn/kernels/") and not d.startswith("src/common/"):
                    failed.append(f"rule 5: {f} calls {d} (the kernels depend on nothing above them)")
        # 6. the model text knows no net, backend or kernel
        if f.startswith("src/nn/model/"):
            for d in sorted(deps):
                if d.startswith("src/nn/") and not d.startswith("src/nn/model/"):
                    failed.append(f"rule 6: {f} calls {d} (model/ depends on no other room of src/nn)")
        # 7. the collectives know no engine, trainer or launcher, and the engine no collective
        if f.startswith("src/coll/"):
            for d in sorted(deps):
                if d.startswith(("src/nn/", "src/train/", "launcher/", "src/data/")):
                    failed.append(f"rule 7: {f} calls {d} (the collectives depend on no engine or trainer)")
        if f.startswith("src/nn/"):
            for d in sorted(deps):
                if d.startswith(("src/coll/", "src/train/", "launcher/")):
                    failed.append(f"rule 7: {f} calls {d} (the engine depends on no collective or trainer)")
    # 8. the net's header includes no backend's
    net_h = open(os.path.join(src, "src", "nn", "net.h")).read()
    for inc in re.findall(r'#include "((?:ref|onednn)/[^"]+)"', net_h):
        failed.append(f"rule 8: src/nn/net.h includes {inc}, a backend's header")
    for line in failed:
        print("FAIL:", line)
    if not failed:
        nn = sum(1 for f in files if f.startswith("src/nn/"))
        print(f"ok: {len(files)} files ({nn} of src/nn): no circle in src/nn, {len(KNOWN_CIRCLES)} known elsewhere, "
              "rules 3-8 hold")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
