"""Does the shm backend work with this PyTorch, on this machine?  Each rank
says each step as it ends, so a crash names the step it died in (with
PYTHONFAULTHANDLER=1, the Python line too): the group's creation, a barrier,
all_reduce at sizes that take each of the library's paths, a DDP step, the
group's end.  Under shmrun or torchrun:

    shmrun -n 2 -- python bench/torch_smoke.py
    PYTHONFAULTHANDLER=1 torchrun --nproc_per_node 2 bench/torch_smoke.py

bench/device-torch.sh runs it first on a lent machine, before any figure."""
import os
import sys

import torch
import torch.distributed as dist


def say(rank, what):
    print(f"smoke: rank {rank}: {what}", flush=True)


def main():
    import shmtrain_torch  # noqa: F401  (registers "shm" where its entry point is not installed)
    rank = int(os.environ.get("RANK", os.environ.get("SHMTRAIN_RANK", "0")))
    say(rank, f"PyTorch {torch.__version__}, accelerator {torch._C._get_accelerator()}, "
              f"{torch.get_num_threads()} threads")
    dist.init_process_group("shm")
    world = dist.get_world_size()
    say(rank, f"group of {world} created")
    dist.barrier()
    say(rank, "barrier")
    for n in (1, 1024, 256 << 10, 4 << 20):  # inline, direct, ring, staged pieces
        t = torch.full((n,), float(rank + 1))
        dist.all_reduce(t)
        want = world * (world + 1) / 2
        if not torch.all(t == want):
            say(rank, f"all_reduce of {n} floats: wrong sum {t[0].item()} (want {want})")
            sys.exit(1)
        say(rank, f"all_reduce of {n} floats")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    model(torch.randn(8, 64)).sum().backward()
    say(rank, "a DDP step")
    dist.destroy_process_group()
    say(rank, "group destroyed")


if __name__ == "__main__":
    main()
