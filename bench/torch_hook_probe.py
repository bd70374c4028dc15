"""What a DDP bucket costs over shm with nothing beside it: the comm hook's
call to its result (shmtrain_torch.ddp_comm_hook: from three ranks the
bucket scaled into its slot and the zero-copy sum, at two in place on the
staged ring), the copy DDP then makes of the
result into the gradients, a plain all_reduce of the same tensor, and DDP's
own path without a hook (the bucket divided by the world, an asynchronous
all_reduce, its future); the
ranks meet at a barrier before each, so no rank waits for a slower one.
Beside bench/run-torch-backend.sh's DDP runs it says how much of the
exposed exchange (what backward waits for after its last bucket) is the
exchange's own work.

    shmrun -n 2 -c 1 -- python bench/torch_hook_probe.py [--sizes 1M,2.2M] [--reps 60]

Rank 0 prints a Markdown table, medians after the first 10 tries.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import shmtrain_torch
from shmtrain_torch import _C


def size_arg(text):
    mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
    return int(float(text.rstrip("KkMm")) * mult) // 4 * 4


def probe(backend, nbytes, reps):
    bucket, grads = torch.randn(nbytes // 4), torch.empty(nbytes // 4)
    hook, copy, plain, default = [], [], [], []
    for it in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fut = _C.hook_allreduce(backend, bucket, 0).get_future().then(lambda f: f.value()[0])
        result = fut.wait()
        t1 = time.perf_counter()
        grads.copy_(result)
        t2 = time.perf_counter()
        dist.barrier()
        t3 = time.perf_counter()
        dist.all_reduce(bucket)
        t4 = time.perf_counter()
        dist.barrier()
        t5 = time.perf_counter()
        buf = bucket.div_(dist.get_world_size())  # DDP's own path without a hook
        dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0]).wait()
        t6 = time.perf_counter()
        if it >= 10:
            hook.append(t1 - t0)
            copy.append(t2 - t1)
            plain.append(t4 - t3)
            default.append(t6 - t5)
    return [statistics.median(v) * 1e6 for v in (hook, copy, plain, default)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="256K,1M,2.2M,8M", help="bucket sizes in bytes (K, M)")
    ap.add_argument("--reps", type=int, default=60)
    a = ap.parse_args()
    dist.init_process_group("shm")
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    rows = [(n, *probe(backend, n, a.reps)) for n in map(size_arg, a.sizes.split(","))]
    if dist.get_rank() == 0:
        print(f"{dist.get_world_size()} ranks, {torch.get_num_threads()} thread(s) a rank, "
              f"shmtrain_torch {shmtrain_torch.__file__}")
        print("| bucket bytes | hook call to result us | DDP's copy into the gradients us | plain all_reduce us | "
              "DDP's own path (divide, async all_reduce, future) us |")
        print("|---:|---:|---:|---:|---:|")
        for n, hook, copy, plain, default in rows:
            print(f"| {n} | {hook:.0f} | {copy:.0f} | {plain:.0f} | {default:.0f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
