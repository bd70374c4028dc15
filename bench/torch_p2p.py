"""send/recv over the "shm" backend against gloo, in the same two processes,
alternated in blocks (this machine's speed drifts; alternating cancels it).

  PYTHONPATH=build/python python3 bench/torch_p2p.py [--min 4] [--max 64M] [--seconds 0.3] [--pipeline 20]

Ping-pong: rank 0 sends n bytes to rank 1, which sends them back; half a
round trip is one message's time.  Per size 5 warm-up round trips of each,
then three blocks a backend, alternated, each the median of its round
trips; the median block.  CSV (rank 0): bytes, shm_us, gloo_us,
gloo/shm, and shm_gbs: the bytes the shm path moves (each byte copied into
the peer's inbox and out of it: read and written twice, 4 x bytes) over
its time, to set against the copy bandwidth (read + write) st-allreduce-bench
measures on the same cores.  Each backend's first echo is checked exact.

--pipeline N: then N timed steps of a two-stage torch.distributed.pipelining
GPipe (4 Linear(1024, 1024) + GELU a stage, 8 micro-batches of 32: 128 KiB
activations and gradients a message) over each backend, alternated step by
step, the losses of the two compared to the bit; prints the median step of
each and the ratio.
"""
import argparse
import copy
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


def round_trips(rank, x, group, iters):
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(x, 1, group=group)
            dist.recv(x, 1, group=group)
        else:
            dist.recv(x, 0, group=group)
            dist.send(x, 0, group=group)
        out.append(time.perf_counter() - t0)
    out.sort()
    return out[iters // 2] / 2


def ping_pong(rank, args, groups):
    nbytes = args.min
    while nbytes <= args.max:
        want = (torch.arange(nbytes, dtype=torch.int64) % 251).to(torch.uint8)
        for name, g in groups.items():
            x = want.clone() if rank == 0 else torch.zeros(nbytes, dtype=torch.uint8)
            round_trips(rank, x, g, 1)
            if not torch.equal(x, want):
                raise SystemExit(f"torch_p2p: rank {rank}: {name}: the echo differs at {nbytes} bytes")
            round_trips(rank, x, g, 5)
        probe = torch.tensor([round_trips(rank, x, groups["gloo"], 3)], dtype=torch.float64)
        dist.broadcast(probe, 0)
        iters = int(min(3000, max(7, args.seconds / 2 / 3 / max(2 * probe.item(), 1e-9))))
        meds = {name: [] for name in groups}
        for _ in range(3):
            for name, g in groups.items():
                meds[name].append(round_trips(rank, x, g, iters))
        shm, gloo = sorted(meds["shm"])[1], sorted(meds["gloo"])[1]
        if rank == 0:
            print(f"{nbytes},{shm * 1e6:.2f},{gloo * 1e6:.2f},{gloo / shm:.2f},{4 * nbytes / shm / 1e9:.2f}",
                  flush=True)
        nbytes *= 4


def pipeline(rank, steps, groups):
    from torch.distributed import pipelining
    torch.manual_seed(0)
    stages = [torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())])
              for _ in range(2)]
    run = {}
    for name, g in groups.items():
        mod = stages[rank] if name == "shm" else copy.deepcopy(stages[rank])  # the same weights
        stage = pipelining.PipelineStage(mod, rank, 2, torch.device("cpu"), group=g)
        sched = pipelining.ScheduleGPipe(stage, n_microbatches=8, loss_fn=lambda o, y: ((o - y) ** 2).mean())
        run[name] = (sched, torch.optim.SGD(mod.parameters(), lr=0.01), [], [])
    gen = torch.Generator().manual_seed(1)
    for step in range(steps + 3):
        x, y = torch.randn(256, 1024, generator=gen), torch.randn(256, 1024, generator=gen)
        for name in (("shm", "gloo") if step % 2 else ("gloo", "shm")):
            sched, opt, times, losses = run[name]
            dist.barrier(group=groups[name])
            t0 = time.perf_counter()
            opt.zero_grad()
            out = []
            sched.step(x) if rank == 0 else sched.step(target=y, losses=out)
            opt.step()
            if step >= 3:
                times.append(time.perf_counter() - t0)
            losses += [v.item() for v in out]
    if rank == 1:
        assert run["shm"][3] == run["gloo"][3], "the pipelines' losses differ"
        shm, gloo = (sorted(run[n][2])[len(run[n][2]) // 2] for n in ("shm", "gloo"))
        print(f"pipeline,GPipe 2 stages x 8 micro-batches: shm {shm * 1e3:.1f} ms a step, gloo {gloo * 1e3:.1f} ms, "
              f"gloo/shm {gloo / shm:.3f}; the losses equal to the bit", flush=True)


def rank_main(rank, args, port):
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    import shmtrain_torch  # noqa: F401  (registers "shm" where the entry point did not)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=300))
    groups = {"shm": dist.new_group(backend="shm"), "gloo": dist.new_group(backend="gloo")}
    if args.max >= args.min:
        ping_pong(rank, args, groups)
    if args.pipeline:
        pipeline(rank, args.pipeline, groups)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min", type=size, default=4)
    p.add_argument("--max", type=size, default=64 << 20)
    p.add_argument("--seconds", type=float, default=0.3)
    p.add_argument("--pipeline", type=int, default=0)
    args = p.parse_args()
    print("bytes,shm_us,gloo_us,gloo_over_shm,shm_gbs", flush=True)
    mp.spawn(rank_main, args=(args, 29500 + os.getpid() % 20000), nprocs=2)


if __name__ == "__main__":
    main()
