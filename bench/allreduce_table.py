"""Merge the CSV runs of bench/run-allreduce.sh into one table: per size the
median over rounds of each column's median (shmtrain's over every run that
timed it), and each peer's median over shmtrain's zero-copy median.  With
PyTorch over both gloo and shm: gloo over shm, and the library's
st_allreduce called from the same PyTorch processes on the same tensors
(shmtrain_torch's direct_allreduce, alternated call by call with
dist.all_reduce): the difference is the binding's own cost per call.

  python3 bench/allreduce_table.py DIR     (DIR/<peer>.<round>.csv)
"""
import csv
import glob
import os
import statistics
import sys

PEERS = [("openmpi", "Open MPI"), ("openmpi-tuned", "Open MPI, mmap tunable"), ("mpich", "MPICH"),
         ("gloo", "gloo"), ("torch-shm", "PyTorch over shm")]


def read(path):
    meta, rows = {}, []
    with open(path) as f:
        lines = [l for l in f if l.strip()]
    for l in lines:
        if l.startswith("#"):
            meta.update(kv.split("=", 1) for kv in l[1:].split() if "=" in kv)
    rows = list(csv.DictReader(l for l in lines if not l.startswith("#")))
    return meta, rows


def main(d):
    shm, peer, oneway, algo, direct = {}, {}, [], {}, {}
    for path in sorted(glob.glob(os.path.join(d, "*.csv"))):
        name = os.path.basename(path).rsplit(".", 2)[0]
        meta, rows = read(path)
        if "oneway_ns" in meta:
            oneway.append(float(meta["oneway_ns"]))
        for r in rows:
            b = int(r["bytes"])
            if "zc_us" in r:
                shm.setdefault(b, []).append((float(r["zc_us"]), float(r["zc_p99_us"]), float(r["copy_us"])))
                algo[b] = r["algorithm"]
            for key in ("mpi_us", "gloo_us", "shm_us"):
                if key in r:
                    peer.setdefault(name, {}).setdefault(b, []).append(float(r[key]))
            if "direct_us" in r:  # the library called from the PyTorch process, alternated with dist.all_reduce
                direct.setdefault(b, []).append((float(r["shm_us"]), float(r["direct_us"])))
    if not shm:
        sys.exit(f"allreduce_table: no shmtrain rows in {d}")
    floor = statistics.median(oneway) if oneway else 0
    present = [(k, label) for k, label in PEERS if k in peer]
    print(f"one-way cache-line time (median of {len(oneway)} runs): {floor:.1f} ns")
    head = ["bytes", "algorithm", "shmtrain median us", "p99", "copy path", "x one-way"]
    head += [f"{label} us" for _, label in present] + [f"{label} / shmtrain" for _, label in present]
    torch_pair = "gloo" in peer and "torch-shm" in peer
    if torch_pair:
        head += ["gloo / PyTorch over shm", "st_allreduce in PyTorch's process us", "binding us",
                 "PyTorch over shm / st_allreduce"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for b in sorted(shm):
        med = statistics.median(x[0] for x in shm[b])
        cells = [str(b), algo[b], f"{med:.3f}", f"{statistics.median(x[1] for x in shm[b]):.3f}",
                 f"{statistics.median(x[2] for x in shm[b]):.3f}", f"{med * 1000 / floor:.2f}" if floor else "-"]
        ps = [statistics.median(peer[k][b]) if b in peer[k] else None for k, _ in present]
        cells += [f"{p:.3f}" if p is not None else "-" for p in ps]
        cells += [f"{p / med:.2f}" if p is not None else "-" for p in ps]
        if torch_pair and b in peer["gloo"] and b in direct:
            g = statistics.median(peer["gloo"][b])
            t, d = (statistics.median(x[k] for x in direct[b]) for k in (0, 1))
            cells += [f"{g / t:.1f}", f"{d:.3f}", f"{t - d:.2f}", f"{t / d:.2f}"]
        elif torch_pair:
            cells += ["-"] * 4
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
