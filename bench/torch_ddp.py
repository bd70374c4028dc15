#!/usr/bin/env python3
"""PyTorch DDP (gloo, CPU) trainer, the peer of `shmrun -- shmtrain` for the benchmarks.

Run one process per instance under shmrun, which pins it and sets RANK,
WORLD_SIZE, OMP_NUM_THREADS (shmrun -n 2 -- python3 torch_ddp.py --model lenet ...).
Same data (Fashion-MNIST IDX), model, per-instance batch, optimizer (SGD,
momentum 0.9) and learning rate as shmtrain's defaults; the global batch is
sharded with DistributedSampler.  Prints a JSON summary line with samples/s.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch_models  # noqa: E402


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = struct.unpack(">" + "I" * ndims, data[4:4 + 4 * ndims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


ap = argparse.ArgumentParser()
ap.add_argument("--model", default="lenet")
ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
ap.add_argument("--batch-size", type=int, default=64)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--max-steps", type=int, default=300)
ap.add_argument("--warmup-steps", type=int, default=20)
a = ap.parse_args()

rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
port = 29500 + (int(os.environ.get("SHMTRAIN_JOB_ID", "0").split("-")[-1]) % 1000 if "SHMTRAIN_JOB_ID" in os.environ else 0)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
torch.manual_seed(1)
images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"))
labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))
x_all = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
x_all = (x_all - x_all.mean()) / x_all.std()
y_all = torch.from_numpy(labels.astype(np.int64))
ds = torch.utils.data.TensorDataset(x_all, y_all)
sampler = torch.utils.data.distributed.DistributedSampler(ds, world, rank, shuffle=True, seed=1, drop_last=True)
loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, sampler=sampler, drop_last=True)
net = torch.nn.parallel.DistributedDataParallel(torch_models.build(a.model))
opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
steps, t0, epoch = 0, None, 0
while steps < a.max_steps + a.warmup_steps:
    sampler.set_epoch(epoch)
    for x, y in loader:
        if steps == a.warmup_steps:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        steps += 1
        if steps >= a.max_steps + a.warmup_steps:
            break
    epoch += 1
seconds = time.perf_counter() - t0
if rank == 0:
    print(json.dumps({"type": "summary", "system": "pytorch-ddp", "model": a.model, "instances": world,
                      "steps": a.max_steps, "samples_per_s": a.max_steps * world * a.batch_size / seconds,
                      "loss": float(loss)}))
dist.destroy_process_group()
