#!/usr/bin/env python3
"""Mutation testing: does the suite catch planted bugs?

    scripts/mutate.py [--only REGEX] [--tests REGEX] [--without-label L] [--list FILE] [--work DIR] [--jobs N]
    make mutate [MUTANTS=REGEX]

Each mutant of tests/mutants/mutants.txt (one line: FILE @@ ORIGINAL @@
MUTATED @@ the bug) is applied alone to a copy of the working tree (DIR,
default build-mutate/; the tree itself is never touched), the copy is
rebuilt, and the whole ctest suite runs, stopping at its first failure.
A mutant is "killed" when a test fails, "survived" when the suite passes,
"no build" when the compiler refuses it (not counted), "stale" when its
ORIGINAL text is not in the file exactly once (fix the list).

--tests REGEX runs only the ctest tests it matches (ctest -R) against each
mutant: a quick first pass over a module's mutants; "killed" there is
killed, a survivor is then run against the whole suite before it counts.
--without-label long leaves out the tests `make test` leaves out: which
mutants only `make test-long` kills (docs/testing.md lists them).

Too slow for CI (a rebuild and a suite run per mutant: one to several
minutes each on 2 cores; a suite run past three times the unmutated one's
counts as a hang, killed); run it when a module changes, and give every
survivor a test or a line in docs/testing.md saying why it cannot be caught.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(path):
    mutants = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split(" @@ ")
            if len(parts) != 4:
                sys.exit(f"mutate: {path}:{number}: expected FILE @@ ORIGINAL @@ MUTATED @@ BUG")
            file, original, mutated, bug = (p.strip() if i in (0, 3) else p.replace("\\n", "\n")
                                            for i, p in enumerate(parts))
            mutants.append({"line": number, "file": file, "original": original, "mutated": mutated, "bug": bug})
    return mutants


def run(cmd, cwd, log, timeout):
    """Its exit status; 124 when it ran past `timeout` (a mutant that hangs
    the collectives), after killing it with everything it started."""
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            out.write(f"\nmutate: killed after {timeout} s\n")
            return 124


def copy_tree(work):
    """The files git would commit (tracked, and untracked ones it does not
    ignore) into work/src, rewriting only those that differ, so that the
    copy's build stays incremental between runs."""
    src = os.path.join(work, "src")
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        a, b = os.path.join(ROOT, name), os.path.join(src, name)
        if not os.path.isfile(a):
            continue
        with open(a, "rb") as f:
            data = f.read()
        if os.path.exists(b):
            with open(b, "rb") as f:
                if f.read() == data:
                    continue
        os.makedirs(os.path.dirname(b), exist_ok=True)
        shutil.copyfile(a, b)  # a fresh mtime: make must see the change (copy2 would keep the old one)
        shutil.copymode(a, b)
    deps = os.path.join(src, ".deps")
    if os.path.isdir(os.path.join(ROOT, ".deps")) and not os.path.exists(deps):
        os.symlink(os.path.join(ROOT, ".deps"), deps)
    return src


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="mutants whose file or bug matches this regex")
    ap.add_argument("--list", default=os.path.join(ROOT, "tests", "mutants", "mutants.txt"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build-mutate"))
    ap.add_argument("--jobs", default=str(os.cpu_count() or 2))
    ap.add_argument("--tests", default="", help="only the ctest tests this regex matches (a quick first pass)")
    ap.add_argument("--without-label", default="", help="leave out the tests of this ctest label (ctest -LE)")
    a = ap.parse_args()
    mutants = [m for m in parse(a.list) if re.search(a.only, m["file"] + " " + m["bug"])]
    os.makedirs(a.work, exist_ok=True)
    src, build, logs = copy_tree(a.work), os.path.join(a.work, "build"), os.path.join(a.work, "logs")
    os.makedirs(logs, exist_ok=True)
    marker = os.path.join(a.work, "mutant-in-progress")
    if os.path.exists(marker):  # the last run was killed mid-mutant: rebuild that file
        with open(marker) as f:
            stale = f.read()
        if os.path.exists(stale):
            os.utime(stale)
        os.unlink(marker)
    build_cmd = ["cmake", "--build", build, "-j", a.jobs]
    test_cmd = ["ctest", "--test-dir", build, "-j", a.jobs, "--stop-on-failure"] + (["-R", a.tests] if a.tests else []) + \
        (["-LE", a.without_label] if a.without_label else [])
    if run(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release"], src, os.path.join(logs, "configure"),
           600) or run(build_cmd, src, os.path.join(logs, "build"), 1800):
        sys.exit(f"mutate: the unmutated copy does not build (see {logs}/configure, {logs}/build)")
    t0 = time.time()
    if run(test_cmd, src, os.path.join(logs, "baseline"), 1800):
        sys.exit(f"mutate: the suite fails without any mutant (see {logs}/baseline)")
    # A mutant's suite cut off at this limit counts as killed (it hung), so the
    # limit follows the unmutated suite's own time: a fixed 6 minutes, once
    # twice the suite, stood under a survivor's whole run when the suite grew
    # to 5 minutes and would have called it killed.
    hung_after = max(360, int(3 * (time.time() - t0)))
    results, counts = [], {"killed": 0, "survived": 0, "no build": 0, "stale": 0}
    for m in mutants:
        path = os.path.join(src, m["file"])
        text = open(path).read() if os.path.exists(path) else ""
        t0 = time.time()
        if text.count(m["original"]) != 1:
            verdict = "stale"
        else:
            with open(marker, "w") as f:  # a run killed here leaves the mutant's object file behind
                f.write(path)
            with open(path, "w") as f:
                f.write(text.replace(m["original"], m["mutated"]))
            log = os.path.join(logs, f"mutant-{m['line']}")
            try:
                if run(build_cmd, src, log + ".build", 1800):
                    verdict = "no build"
                else:
                    verdict = "killed" if run(test_cmd, src, log + ".test", hung_after) else "survived"
            finally:
                with open(path, "w") as f:
                    f.write(text)
                os.unlink(marker)
        counts[verdict] += 1
        results.append((verdict, m))
        print(f"{verdict:9} {time.time() - t0:5.0f} s  line {m['line']:3}  {m['file']}: {m['bug']}", flush=True)
    run(build_cmd, src, os.path.join(logs, "rebuild"), 1800)  # leave the copy unmutated
    scored = counts["killed"] + counts["survived"]
    print(f"\n{counts['killed']} of {scored} mutants killed ({100.0 * counts['killed'] / max(scored, 1):.0f}%); "
          f"{counts['no build']} did not build, {counts['stale']} stale")
    for verdict, m in results:
        if verdict != "killed":
            print(f"  {verdict}: line {m['line']}: {m['file']}: {m['bug']}")
    return 1 if counts["survived"] or counts["stale"] else 0


if __name__ == "__main__":
    sys.exit(main())
