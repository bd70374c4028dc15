"""PyTorch's all-reduce (gloo, or shmtrain's "shm" backend), timed the way st-allreduce-bench times
shmtrain and MPI: per size 10 warm-up calls, then per iteration the tensor
refilled from a pristine copy (untimed; --no-refill: warm cache), a barrier,
one timed dist.all_reduce; per rank median, 99th percentile and mean over
iterations, averaged over ranks.  The first result is checked exact.

  python3 bench/torch_allreduce.py --ranks 2 [--min 4] [--max 64M] [--seconds 0.15] [--no-refill]
                                   [--backend gloo|shm] [--dtype float32] [--op SUM]

Prints CSV: bytes,<backend>_us,<backend>_p99_us,<backend>_mean_us (rank 0).  Ranks are
pinned one per CPU, as the other columns' ranks are.  With --backend shm, also
direct_us,...: shmtrain_torch._C.direct_allreduce, the library's st_allreduce
on the same tensor with none of PyTorch's dispatch, alternated call by call
with dist.all_reduce (this machine's speed drifts; alternating cancels it), so
shm_us - direct_us is the binding's own cost per call (float32 SUM only).
--dtype and --op time the other reductions: a bool or uint8 flag with MAX or
BOR is what a script reduces to ask "has any rank stopped?" (over shm the
gathered path, python/shmtrain_torch/csrc/gathered.h).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


OPS = ("SUM", "MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR")


def fold(tensors, op):
    """Every rank's tensor reduced in rank order, in its dtype: the answer checked."""
    acc = tensors[0].clone()
    for t in tensors[1:]:
        acc = {"SUM": torch.add, "PRODUCT": torch.mul, "MAX": torch.maximum, "MIN": torch.minimum,
               "BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op](acc, t)
    return acc.to(tensors[0].dtype)


def values(rank, n, dtype):
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3) % 64
    return v < 32 if dtype == torch.bool else v.to(dtype)


def rank_main(rank, args, port):
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    direct = backend = None
    dtype, op = getattr(torch, args.dtype), getattr(dist.ReduceOp, args.op)
    if args.backend == "shm":
        import shmtrain_torch  # registers "shm"
        if dtype == torch.float32 and args.op == "SUM":
            direct = shmtrain_torch._C.direct_allreduce
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    if direct:
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    world = args.ranks
    nbytes = args.min
    while nbytes <= args.max:
        n = max(1, nbytes // torch.empty(0, dtype=dtype).element_size())
        pristine = values(rank, n, dtype)
        want = fold([values(q, n, dtype) for q in range(world)], args.op)
        buf = pristine.clone()
        dist.barrier()
        dist.all_reduce(buf, op=op)
        if not torch.equal(buf, want):
            raise SystemExit(f"torch_allreduce: rank {rank}: wrong sum at {nbytes} bytes")
        if direct:
            buf.copy_(pristine)
            direct(backend, buf)
            if not torch.equal(buf, want):
                raise SystemExit(f"torch_allreduce: rank {rank}: wrong direct sum at {nbytes} bytes")
        for _ in range(9):
            dist.all_reduce(buf, op=op)
        t0 = time.perf_counter()
        dist.all_reduce(buf, op=op)
        probe = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.broadcast(probe, 0)
        iters = int(min(5000, max(11, args.seconds / max(probe.item(), 1e-9))))
        calls = [lambda: dist.all_reduce(buf, op=op)]
        if direct:  # the library on the same tensor, no dispatch: alternated call by call
            calls.append(lambda: direct(backend, buf))
        times = [[] for _ in calls]
        for _ in range(iters):
            for call, out in zip(calls, times):
                if args.refill:
                    buf.copy_(pristine)
                dist.barrier()
                t0 = time.perf_counter()
                call()
                out.append(time.perf_counter() - t0)
        cells = []
        for t in times:
            t.sort()
            stats = torch.tensor([t[iters // 2], t[(iters * 99 + 99) // 100 - 1], sum(t) / iters], dtype=torch.float64)
            dist.all_reduce(stats)
            cells += [f"{x * 1e6 / world:.3f}" for x in stats.tolist()]
        if rank == 0:
            print(f"{nbytes}," + ",".join(cells), flush=True)
        nbytes *= 2
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min", type=size, default=4)
    p.add_argument("--max", type=size, default=64 << 20)
    p.add_argument("--seconds", type=float, default=0.15)
    p.add_argument("--no-refill", dest="refill", action="store_false")
    p.add_argument("--backend", choices=("gloo", "shm"), default="gloo")
    p.add_argument("--dtype", choices=("float32", "float64", "bfloat16", "int32", "int64", "int16", "int8", "uint8",
                                       "bool"), default="float32")
    p.add_argument("--op", choices=OPS, default="SUM")
    args = p.parse_args()
    b = args.backend
    direct = ",direct_us,direct_p99_us,direct_mean_us" if b == "shm" else ""
    print(f"bytes,{b}_us,{b}_p99_us,{b}_mean_us{direct}", flush=True)
    port = 29500 + os.getpid() % 20000
    mp.spawn(rank_main, args=(args, port), nprocs=args.ranks)


if __name__ == "__main__":
    main()
