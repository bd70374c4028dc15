#!/usr/bin/env python3
"""A PyTorch DDP training script as its users write one, with the two lines
that let `shmrun --sweep` compare partitionings of it (docs/partitioning.md):
shmtrain_torch.report() each step, and the gradient accumulation the sweep
asks for (SHMTRAIN_GRAD_ACCUM) to hold the global batch.  The backend is the
script's own choice ("gloo" here); a sweep replaces it.

    shmrun --sweep all,core,2x1 --compare-backends shm,gloo -- python bench/torch_script_example.py --steps 60
    torchrun --standalone --nproc-per-node 2 bench/torch_script_example.py     # as it runs without a sweep
"""
import argparse
import gc
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--batch-size", type=int, default=32)  # per instance, per micro-batch
ap.add_argument("--width", type=int, default=512)
ap.add_argument("--no-report", action="store_true")    # a script that tells nothing: the sweep times it
a = ap.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
accum = int(os.environ.get("SHMTRAIN_GRAD_ACCUM", "1"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, a.width), torch.nn.ReLU(), torch.nn.Linear(a.width, a.width),
                            torch.nn.ReLU(), torch.nn.Linear(a.width, 10))
net = torch.nn.parallel.DistributedDataParallel(model)
if dist.get_backend() == "shm":
    import shmtrain_torch
    net.register_comm_hook(None, shmtrain_torch.ddp_comm_hook)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator().manual_seed(1 + rank)
for step in range(a.steps):
    opt.zero_grad()
    for m in range(accum):
        x = torch.randn(a.batch_size, 256, generator=g)
        y = torch.randint(0, 10, (a.batch_size,), generator=g)
        with net.no_sync() if m < accum - 1 else torch.enable_grad():
            loss = F.cross_entropy(net(x), y) / accum
            loss.backward()
    opt.step()
    if not a.no_report:
        import shmtrain_torch
        shmtrain_torch.report(step=step + 1, samples=world * a.batch_size * accum, loss=loss.item() * accum)
# DDP holds the group: let go of it first, so destroying the group ends
# gloo's threads now.  Left to Python's exit, PyTorch 2.13's gloo aborted
# 4 exits of 16 here ("terminate called without an active exception": a
# finished work dropped by its thread once Python had finalized).
del net, opt
gc.collect()
dist.destroy_process_group()
