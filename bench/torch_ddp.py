#!/usr/bin/env python3
"""PyTorch DDP (CPU; gloo, or --backend shm: shmtrain's all-reduce): shmtrain's peer for benchmarks and `shmrun --sweep --compare-torch`.

Run one process per instance under shmrun, which pins it and sets RANK,
WORLD_SIZE, OMP_NUM_THREADS and SHMTRAIN_LOG_DIR:

    shmrun -n 2 -- python3 bench/torch_ddp.py --model lenet --max-steps 300

It takes shmtrain's own options (the training ones; see docs/training.md) and
does what shmtrain does with them: the same presets, data (IDX, per-channel
normalisation with the training set's statistics; --cifar DIR: CIFAR-10's
binary batches), DistributedSampler sharding
with drop_last, per-instance batch, SGD/AdamW, weight decay, clipping, learning
rate schedules with warm-up, sharded evaluation every K steps or each epoch,
and a target accuracy; `--precision bf16` runs forward and loss under
torch.autocast(cpu, bfloat16).  `--mode` is how a PyTorch user makes a CPU
model faster (bench/torch_step.py's modes): channels_last puts the model and
each batch in NHWC, compile wraps the DDP model in torch.compile (DDP's own
recipe: the compile splits the graph at its buckets; it falls in the first
steps, which the benchmarks' steady-state rate leaves out).  It writes
shmtrain's metrics format (JSON lines: run, train, eval, summary) so one
report reads both.  shmtrain options it cannot
honour (CIFAR-100, augmentation, resume) are refused; output-only ones
(checkpoints, replica checks, denormal flushing) are accepted and ignored.

Time split: DDP overlaps the gradient all-reduce with the backward pass, so
`allreduce_s` is the time the all-reduces were in flight (from a comm hook)
and `compute_s` the rest of the step; there is no separate wait figure.
"""
import argparse
import contextlib
import gzip
import json
import math
import os
import resource
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch_models  # noqa: E402
from torch_comm import InFlight, independent_run, init as init_group, own_speed, timed_allreduce_hook  # noqa: E402

THRESHOLDS = (0.80, 0.85, 0.88, 0.89, 0.90, 0.91)


def fail(msg, code=1):
    print(f"torch_ddp.py: {msg}", file=sys.stderr)
    sys.exit(code)


def read_idx(path):
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror or e}")
    if len(data) < 4 or data[0] or data[1] or data[2] != 8:
        fail(f"{path}: not an unsigned-byte IDX file")
    ndims = data[3]
    dims = struct.unpack(">" + "I" * ndims, data[4:4 + 4 * ndims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def read_cifar(directory):
    """CIFAR-10's binary batches (a label byte, 3 x 32 x 32 pixel bytes) as (train, test) arrays."""
    def batch(name):
        try:
            with open(os.path.join(directory, name), "rb") as f:
                raw = np.frombuffer(f.read(), dtype=np.uint8)
        except OSError as e:
            fail(f"--cifar {directory}: {e.strerror or e}")
        if raw.size % 3073:
            fail(f"--cifar {directory}/{name}: not whole 3073-byte records")
        raw = raw.reshape(-1, 3073)
        return raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0]
    parts = [batch(f"data_batch_{i}.bin") for i in range(1, 6)]
    xte, yte = batch("test_batch.bin")
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), xte, yte


def idx_path(directory, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    fail(f"{directory}: no {stem}[.gz]")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = ap.add_argument
    add("--model", default="lenet")
    add("--cifar", help="CIFAR-10 binary batches instead of the IDX files (resnet)")
    add("--data", default="/usr/share/datasets/fashion-mnist")
    for f in ("--train-images", "--train-labels", "--test-images", "--test-labels"):
        add(f)
    add("--train-subset", type=int)
    add("--test-subset", type=int)
    add("--epochs", type=int, default=1)
    add("--max-steps", type=int)
    add("--batch-size", type=int, default=64)
    add("--optimizer", choices=("sgd", "adamw"), default="sgd")
    add("--lr", type=float, default=0.05)
    add("--momentum", type=float)
    add("--nesterov", action="store_true")
    add("--weight-decay", type=float, default=0.0)
    add("--clip-norm", type=float)
    add("--scale-lr", action="store_true")
    add("--schedule", choices=("constant", "step", "cosine"), default="constant")
    add("--warmup", type=int, default=0)
    add("--step-size", type=int, default=0)
    add("--gamma", type=float, default=0.1)
    add("--min-lr", type=float, default=0.0)
    add("--seed", type=int, default=1)
    add("--target-accuracy", type=float, default=0.0)
    add("--eval-every", type=int, default=0)
    add("--log-every", type=int, default=50)
    add("--metrics")
    add("--quiet", action="store_true")
    add("--backend", choices=("gloo", "shm"), default="gloo")  # shm: shmtrain's (python/shmtrain_torch)
    add("--bucket-cap-mb", type=float,
        help="DDP's bucket_cap_mb (default: DDP's own, a 1 MiB first bucket then 25 MiB)")
    add("--precision", choices=("fp32", "bf16"), default="fp32")  # bf16: torch.autocast(cpu, bfloat16)
    add("--mode", choices=("eager", "channels_last", "compile"), default="eager")
    add("--grad-accum", type=int, default=1)  # micro-batches per step, DDP's no_sync on all but the last
    # Accepted so a shmtrain command line runs unchanged; they only change output.
    add("--checkpoint")
    add("--no-flush-denormals", action="store_true")
    add("--check-replicas", type=int)
    args, rest = ap.parse_known_args()
    for flag in ("--cifar100", "--augment", "--resume", "--checkpoint-every"):
        if any(r == flag or r.startswith(flag + "=") for r in rest):
            fail(f"{flag}: not supported by the PyTorch peer", 2)
    if rest:
        fail(f"unknown option '{rest[0]}'", 2)
    if args.grad_accum < 1:
        fail(f"--grad-accum {args.grad_accum}: need at least 1", 2)
    return args


def lr_at(a, step, total, base):
    if a.warmup and step < a.warmup:
        return base * (step + 1) / a.warmup
    t = step - a.warmup
    if a.schedule == "step":
        return base * (a.gamma if a.gamma > 0 else 0.1) ** (t // a.step_size) if a.step_size else base
    if a.schedule == "cosine":
        span = total - a.warmup if total > a.warmup else 1
        frac = 1.0 if t >= span else t / span
        return a.min_lr + (base - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * frac))
    return base


def main():
    a = parse_args()
    start = time.perf_counter()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if not a.no_flush_denormals:
        torch.set_flush_denormal(True)
    log_dir = os.environ.get("SHMTRAIN_LOG_DIR")
    if log_dir:  # the attempt directory is fresh and shared by the gang: no ports to collide
        init = "file://" + os.path.join(os.path.abspath(log_dir), "torch-ddp-store")
    else:
        init = "tcp://127.0.0.1:%d" % (29500 + os.getpid() % 1000 if world == 1 else 29500)
    init_group(a.backend, init, rank, world)

    paths = [a.train_images, a.train_labels, a.test_images, a.test_labels]
    stems = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")
    if a.cifar:
        xtr, ytr, xte, yte = read_cifar(a.cifar)
    else:
        paths = [p or idx_path(a.data, s) for p, s in zip(paths, stems)]
        xtr, ytr, xte, yte = (read_idx(p) for p in paths)
    if a.train_subset:
        xtr, ytr = xtr[:a.train_subset], ytr[:a.train_subset]
    if a.test_subset:
        xte, yte = xte[:a.test_subset], yte[:a.test_subset]
    to_float = lambda x: torch.from_numpy(x.astype(np.float32) / 255.0)  # noqa: E731
    if not a.cifar:
        to_float = lambda x, f=to_float: f(x).unsqueeze(1)  # noqa: E731  (grey: one channel)
    xtr, xte = to_float(xtr), to_float(xte)
    mean, std = xtr.mean(), xtr.std()
    xtr, xte = (xtr - mean) / std, (xte - mean) / std
    train = torch.utils.data.TensorDataset(xtr, torch.from_numpy(ytr.astype(np.int64)))
    test = torch.utils.data.TensorDataset(xte, torch.from_numpy(yte.astype(np.int64)))
    sampler = torch.utils.data.distributed.DistributedSampler(train, world, rank, shuffle=True, seed=a.seed,
                                                              drop_last=True)

    def batches():
        # DistributedSampler's indices, cut into batches and gathered with one
        # index operation: what DataLoader(drop_last=True) yields, without
        # collating 64 single samples per step in Python.
        order = torch.tensor(list(sampler))
        per_step = a.batch_size * a.grad_accum
        for k in range(len(order) // per_step):
            micro = [order[k * per_step + m * a.batch_size:k * per_step + (m + 1) * a.batch_size]
                     for m in range(a.grad_accum)]
            yield [(train.tensors[0][idx], train.tensors[1][idx]) for idx in micro]
    test_sampler = torch.utils.data.distributed.DistributedSampler(test, world, rank, shuffle=False)
    test_idx = torch.tensor(list(test_sampler))

    torch.manual_seed(a.seed)
    model = torch_models.build(a.model)
    params = sum(p.numel() for p in model.parameters())
    layout = torch.channels_last if a.mode == "channels_last" else torch.contiguous_format
    model = model.to(memory_format=layout)
    net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)
    forward = torch.compile(net) if a.mode == "compile" else net
    hook = InFlight
    net.register_comm_hook(None, timed_allreduce_hook)
    base_lr = a.lr * (world if a.scale_lr else 1)
    if a.optimizer == "sgd":
        mom = 0.9 if a.momentum is None else a.momentum
        opt = torch.optim.SGD(net.parameters(), lr=base_lr, momentum=mom, nesterov=a.nesterov,
                              weight_decay=a.weight_decay)
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=base_lr, weight_decay=a.weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps_per_epoch = len(sampler) // (a.batch_size * a.grad_accum)
    total = steps_per_epoch * a.epochs
    if a.max_steps:
        total = min(total, a.max_steps)

    metrics = None
    path = a.metrics or os.path.join(log_dir or ".", "metrics.jsonl")
    if rank == 0:
        open(path, "w").close()  # a fresh file; appended to (own_speed: every rank's line)
        metrics = open(path, "a", buffering=1)

    def emit(**record):
        if metrics:
            metrics.write(json.dumps(record, separators=(",", ":")) + "\n")

    emit(type="run", system="pytorch-ddp", instances=world, threads=torch.get_num_threads(), model=a.model,
         params=params, batch_per_instance=a.batch_size, torch=torch.__version__,
         backend=dist.get_backend(), first_step=0,  # the group's own (SHMTRAIN_TORCH_BACKEND)
         precision="bf16" if a.precision == "bf16" else "fp32", mode=a.mode,
         **({"grad_accum": a.grad_accum} if a.grad_accum > 1 else {}), **independent_run())

    best, last_acc, reached = 0.0, float("nan"), {}

    def evaluate(step, epoch):
        nonlocal best, last_acc
        t0 = time.perf_counter()
        net.eval()
        sums = torch.zeros(3, dtype=torch.float64)
        with torch.no_grad():
            for k in range(0, len(test_idx), 256):
                idx = test_idx[k:k + 256]
                x, y = test.tensors[0][idx].contiguous(memory_format=layout), test.tensors[1][idx]
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                    out = net.module(x).float()
                sums += torch.tensor([float(loss_fn(out, y)) * len(y), float((out.argmax(1) == y).sum()), len(y)],
                                     dtype=torch.float64)
        dist.all_reduce(sums)
        net.train()
        acc, loss = float(sums[1] / sums[2]), float(sums[0] / sums[2])
        at = time.perf_counter() - start
        best, last_acc = max(best, acc), acc
        for th in THRESHOLDS + ((a.target_accuracy,) if a.target_accuracy else ()):
            if acc >= th and "%.2f" % th not in reached:
                reached["%.2f" % th] = round(at, 2)
        emit(type="eval", step=step, epoch=epoch, test_loss=round(loss, 6), test_accuracy=round(acc, 5),
             time_s=round(at, 3), eval_s=round(time.perf_counter() - t0, 3))
        return time.perf_counter() - t0

    step, done, train_s = 0, False, 0.0
    compute = loss_sum = correct = 0.0
    interval_steps, hook.seconds, hook.exposed, hook.exposed_peer_wait = 0, 0.0, 0.0, 0.0
    interval_start = time.perf_counter()
    train_start = interval_start
    last_eval = -1
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        for micro in batches():
            if step >= total:
                done = True
                break
            t0 = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = lr_at(a, step, total, base_lr)
            opt.zero_grad(set_to_none=True)
            for m, (x, y) in enumerate(micro):
                with (net.no_sync() if m < len(micro) - 1 else contextlib.nullcontext()):
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                        out = forward(x.contiguous(memory_format=layout))
                        loss = loss_fn(out, y)
                    (loss / len(micro)).backward()
                    InFlight.after_backward()
                loss_sum += float(loss) / len(micro)
                correct += float((out.argmax(1) == y).float().mean()) / len(micro)
            if a.clip_norm:
                torch.nn.utils.clip_grad_norm_(net.parameters(), a.clip_norm)
            opt.step()
            compute += time.perf_counter() - t0
            step += 1
            interval_steps += 1
            if step % a.log_every == 0 or step == total:
                span = time.perf_counter() - interval_start
                emit(type="train", step=step, epoch=round(epoch + (step - epoch * steps_per_epoch) / steps_per_epoch, 4),
                     loss=round(loss_sum / interval_steps, 6), accuracy=round(correct / interval_steps, 5),
                     lr=opt.param_groups[0]["lr"], samples_per_s=round(interval_steps * world * a.batch_size * a.grad_accum / span, 1),
                     time_s=round(time.perf_counter() - start, 3), compute_s=round(compute - hook.seconds, 4),
                     allreduce_s=round(hook.seconds, 4), wait_s=round(hook.exposed, 4),
                     peer_wait_s=round(hook.exposed_peer_wait, 4))
                if rank == 0 and not a.quiet:
                    print(f"step {step}/{total} loss {loss_sum / interval_steps:.4f} "
                          f"{interval_steps * world * a.batch_size * a.grad_accum / span:.0f} samples/s", flush=True)
                compute = loss_sum = correct = 0.0
                interval_steps, hook.seconds, hook.exposed, hook.exposed_peer_wait = 0, 0.0, 0.0, 0.0
                interval_start = time.perf_counter()
            if a.eval_every and step % a.eval_every == 0:
                interval_start += evaluate(step, epoch)
                last_eval = step
                if a.target_accuracy and best >= a.target_accuracy:
                    done = True
                    break
        if done:
            break
        if not a.eval_every:
            interval_start += evaluate(step, epoch + 1)
            last_eval = step
            if a.target_accuracy and best >= a.target_accuracy:
                break
    train_s = time.perf_counter() - train_start
    if last_eval != step:
        evaluate(step, epoch)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    emit(type="summary", steps=step, instances=world, batch_per_instance=a.batch_size,
         total_s=round(time.perf_counter() - start, 3), train_s=round(train_s, 3),
         samples_per_s=round(step * world * a.batch_size * a.grad_accum / train_s, 1) if train_s > 0 else 0,
         final_test_accuracy=round(last_acc, 5), best_test_accuracy=round(best, 5), time_to_accuracy_s=reached,
         max_rss_mb=round(rss / 1024, 1))
    if rank == 0 and not a.quiet:
        print(json.dumps({"type": "summary", "system": "pytorch-ddp", "model": a.model, "instances": world,
                          "steps": step, "samples_per_s": step * world * a.batch_size * a.grad_accum / train_s}), flush=True)
    if metrics:
        metrics.close()
    own_speed(path, rank, step, step * a.batch_size * a.grad_accum, train_s)
    # Everyone is done once all pass this barrier.  Exit without tearing the
    # group down: FileStore's teardown can hang when a peer has already gone.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
