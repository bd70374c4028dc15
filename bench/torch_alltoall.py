"""all_to_all_single over the "shm" backend against gloo, in the same processes,
alternated in blocks (this machine's speed drifts; alternating cancels it):
per size 5 warm-up calls of each, then per iteration a barrier (the timed
backend's own) and one timed call; per rank the median of three blocks'
medians, averaged over ranks.  Equal splits; the first result of each
backend is checked exact against the blocks sent.

  PYTHONPATH=build/python python3 bench/torch_alltoall.py [--ranks 2] [--min 4K] [--max 16M] [--seconds 0.3]

Prints CSV (rank 0): bytes (each rank's whole input), shm_us, gloo_us, gloo/shm,
and shm_gbs: the bytes the shm path reads and writes a rank (each peer's
block copied into the staging area and out of a peer's: 4 x (world-1)/world
x bytes; its own block copied: 2 / world x bytes) over its median time, to
set against the copy bandwidth (read + write) st-allreduce-bench measures on
the same cores.
"""
import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


def timed(call, group, iters):
    out = []
    for _ in range(iters):
        dist.barrier(group=group)  # the backend's own, as torch_allreduce.py times
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    out.sort()
    return out[iters // 2]


def rank_main(rank, args, port):
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    import shmtrain_torch  # noqa: F401  (registers "shm" where the entry point did not)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks,
                            timeout=timedelta(seconds=300))
    groups = {"shm": dist.new_group(backend="shm"), "gloo": dist.new_group(backend="gloo")}
    world, nbytes = args.ranks, args.min
    while nbytes <= args.max:
        n = nbytes // 4 // world * world
        x = (torch.arange(n, dtype=torch.int64) % 1000 + rank * 1000).to(torch.float32)
        want = torch.cat([(torch.arange(rank * n // world, (rank + 1) * n // world) % 1000 + q * 1000)
                          for q in range(world)]).to(torch.float32)
        out = torch.empty_like(x)
        for name, g in groups.items():
            dist.all_to_all_single(out, x, group=g)
            if not torch.equal(out, want):
                raise SystemExit(f"torch_alltoall: rank {rank}: {name}: wrong blocks at {nbytes} bytes")
            for _ in range(5):
                dist.all_to_all_single(out, x, group=g)
        t0 = time.perf_counter()
        dist.all_to_all_single(out, x, group=groups["gloo"])
        probe = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.broadcast(probe, 0)
        iters = int(min(2000, max(11, args.seconds / 2 / max(probe.item(), 1e-9))))
        meds = {name: [] for name in groups}
        for _ in range(3):  # alternated in blocks of a third
            for name, g in groups.items():
                meds[name].append(timed(lambda: dist.all_to_all_single(out, x, group=g), g, max(iters // 3, 5)))
        stats = torch.tensor([sorted(meds["shm"])[1], sorted(meds["gloo"])[1]], dtype=torch.float64)
        dist.all_reduce(stats)
        shm, gloo = (stats / world).tolist()
        if rank == 0:
            moved = (4 * (world - 1) + 2) / world * n * 4
            print(f"{n * 4},{shm * 1e6:.2f},{gloo * 1e6:.2f},{gloo / shm:.2f},{moved / shm / 1e9:.2f}", flush=True)
        nbytes *= 4
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min", type=size, default=4 << 10)
    p.add_argument("--max", type=size, default=16 << 20)
    p.add_argument("--seconds", type=float, default=0.3)
    args = p.parse_args()
    print("bytes,shm_us,gloo_us,gloo_over_shm,shm_gbs", flush=True)
    mp.spawn(rank_main, args=(args, 29500 + os.getpid() % 20000), nprocs=args.ranks)


if __name__ == "__main__":
    main()
