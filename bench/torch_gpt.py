#!/usr/bin/env python3
"""The GPT presets in PyTorch: shmtrain's peer for language models.

Run one process per instance under shmrun (which pins it and sets RANK,
WORLD_SIZE, OMP_NUM_THREADS and SHMTRAIN_LOG_DIR); two or more train with
DistributedDataParallel over gloo (--backend shm: shmtrain's all-reduce,
python/shmtrain_torch), the all-reduce timed by bench/torch_comm.py's hook:

    shmrun -n 2 -- python3 bench/torch_gpt.py --model gpt-mini --text /usr/share/games/fortunes \\
        --max-steps 200 --batch-size 12

The same model as shmtrain's preset (pre-norm GPT-2 blocks with biases, GELU
tanh, causal attention, a head tied to the token table, vocabulary 256), the
same initialisation (N(0, 0.02), residual projections 0.02/sqrt(2 x blocks),
zero biases), the same data (the text read as shmtrain reads it, character
ids in byte order, and the very same training windows: shmtrain's seeded
stream of distinct starts, rank r taking every W-th), AdamW with decay on
matrices only, clipping, and shmtrain's warm-up + cosine schedule.
`--precision bf16` runs the step under torch.autocast(cpu, bfloat16);
`--mode compile` (or `--compile`) wraps the model in torch.compile as nanoGPT's
train.py does by default (before DDP; the compile falls in the untimed --warm-steps);
`--grad-accum N` is nanoGPT's gradient accumulation (DDP's no_sync on all
but the last micro-batch), over shmtrain's windows for its --grad-accum.
Writes shmtrain's metrics records (run, train, eval, summary; JSON lines, to --metrics or
$SHMTRAIN_LOG_DIR/metrics.jsonl) and takes shmtrain's training flags, so
`shmrun --sweep --compare-torch` runs it beside shmtrain for a language model.  The attention is nanoGPT's
"slow" path on PyTorch 1.13 (no fused kernel there) and
scaled_dot_product_attention where PyTorch has it (2.0+).
"""
import argparse
import contextlib
import json
import math
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch_comm import InFlight, independent_run, init as init_group, own_speed, timed_allreduce_hook

PRESETS = {"gpt-mini": dict(layers=4, heads=4, dim=128, context=64),
           "gpt": dict(layers=6, heads=6, dim=384, context=256),
           # nanoGPT's train_gpt2 model: GPT-2 small on token files, vocabulary padded to 50304
           "gpt2": dict(layers=12, heads=12, dim=768, context=1024, vocab=50304)}
MASK64 = (1 << 64) - 1


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.fc_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, dim, context, vocab=256):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "fc_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.wte.weight.t()


def read_text(path):
    """shmtrain's reader: a file, or a directory's regular non-.dat text files in name order."""
    if os.path.isdir(path):
        data = b""
        for name in sorted(os.listdir(path)):
            p = os.path.join(path, name)
            if name.startswith(".") or name.endswith(".dat") or os.path.islink(p) or not os.path.isfile(p):
                continue
            blob = open(p, "rb").read()
            if b"\0" not in blob:
                data += blob
        return data
    return open(path, "rb").read()


def mix(s):
    s = (s + 0x9E3779B97F4A7C15) & MASK64
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return s, z ^ (z >> 31)


def windows(ids, seed, step, world, rank, batch, context):
    """st_text_train_batch: world x batch distinct starts from one (seed, step) stream."""
    starts = len(ids) - context
    s = ((seed * 0xD1342543DE82EF95) & MASK64) ^ (((step + 1) * 0x9E3779B97F4A7C15) & MASK64)
    drawn, mine = set(), []
    for k in range(world * batch):
        while True:
            s, z = mix(s)
            d = z % starts
            if d not in drawn:
                break
        drawn.add(d)
        if k % world == rank:
            mine.append(d)
    x = torch.stack([ids[d:d + context] for d in mine])
    y = torch.stack([ids[d + 1:d + context + 1] for d in mine])
    return x, y


def text_ids(a):
    """shmtrain's text path: character (or byte) ids; the validation text, or the last 10%."""
    text = read_text(a.text[0])
    if not text:
        fail(f"--text {a.text[0]}: empty")
    held = text + (read_text(a.text[1]) if len(a.text) == 2 else b"")
    alphabet = list(range(256)) if a.tokens == "bytes" else sorted(set(text if len(a.text) == 2 else held))
    table = bytes.maketrans(bytes(alphabet), bytes(range(len(alphabet))))
    if len(a.text) == 2:
        extra = set(read_text(a.text[1])) - set(alphabet)
        if extra:
            fail(f"--text {a.text[1]}: byte 0x{min(extra):02x} does not occur in the training text {a.text[0]}")
        ids = torch.frombuffer(bytearray(text.translate(table)), dtype=torch.uint8).long()
        val = torch.frombuffer(bytearray(read_text(a.text[1]).translate(table)), dtype=torch.uint8).long()
    else:
        all_ids = torch.frombuffer(bytearray(text.translate(table)), dtype=torch.uint8).long()
        cut = len(all_ids) - len(all_ids) // 10
        ids, val = all_ids[:cut], all_ids[cut:]  # shmtrain's split: the last 10% validates
    return ids, val


def token_file(path):
    """nanoGPT's token files: uint16 ids; the last 10% validates."""
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        fail(f"--tokens-bin {path}: {e.strerror}")
    if len(raw) % 2 or not raw:
        fail(f"--tokens-bin {path}: not a whole number of uint16 token ids")
    all_ids = torch.frombuffer(bytearray(raw), dtype=torch.int16).long() & 0xFFFF
    cut = len(all_ids) - len(all_ids) // 10
    return all_ids[:cut], all_ids[cut:]


def lr_at(a, step, total):
    if a.warmup and step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.schedule != "cosine":
        return a.lr
    span = max(total - a.warmup, 1)
    frac = min((step - a.warmup) / span, 1.0)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * frac))


def fail(msg):
    print(f"torch_gpt.py: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_args():
    """shmtrain's own flags (as `shmrun --sweep --compare-torch` passes them), plus a few of its own."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = ap.add_argument
    add("--model", default="gpt-mini")
    add("--text", action="append")
    add("--tokens-bin", help="token ids as nanoGPT's train.bin (uint16), for gpt2; the last 10%% validates")
    add("--tokens", choices=("chars", "bytes"), default="chars")
    add("--batch-size", type=int, default=12)
    add("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (shmtrain's --grad-accum)")
    add("--max-steps", type=int)
    add("--epochs", type=int, default=1)
    add("--warm-steps", type=int, default=3, help="untimed steps first (benchmarks; 0 in a sweep)")
    add("--optimizer", choices=("adamw",), default="adamw")
    add("--lr", type=float, default=1e-3)
    add("--min-lr", type=float, default=0.0)
    add("--warmup", type=int, default=0)
    add("--schedule", choices=("constant", "cosine"), default="constant")
    add("--weight-decay", type=float, default=0.0)
    add("--beta2", type=float, default=0.999)
    add("--clip-norm", type=float, default=0.0)
    add("--seed", type=int, default=1)
    add("--backend", choices=("gloo", "shm"), default="gloo")  # shm: shmtrain's (python/shmtrain_torch)
    add("--bucket-cap-mb", type=float,
        help="DDP's bucket_cap_mb (default: DDP's own, a 1 MiB first bucket then 25 MiB)")
    add("--precision", choices=("fp32", "bf16"), default="fp32")
    add("--mode", choices=("eager", "compile"), default="eager",
        help="compile: torch.compile the model, before DDP (nanoGPT's default)")
    add("--compile", dest="mode", action="store_const", const="compile", help="--mode compile")
    add("--eval-every", type=int, default=0, help="steps between validation losses (0: at the end)")
    add("--eval-windows", type=int, default=256)
    add("--log-every", type=int, default=50)
    add("--target-loss", type=float, default=0.0)
    add("--metrics", help="shmtrain's JSON lines (default: $SHMTRAIN_LOG_DIR/metrics.jsonl when set)")
    for flag in ("--checkpoint", "--check-replicas"):  # shmtrain's output-only flags: accepted, ignored
        add(flag)
    for flag in ("--quiet", "--no-flush-denormals"):
        add(flag, action="store_true")
    a = ap.parse_args()
    if a.model not in PRESETS:
        fail(f"--model {a.model}: only the presets {', '.join(sorted(PRESETS))} are built here")
    if bool(a.text) == bool(a.tokens_bin):
        fail("one of --text or --tokens-bin")
    if a.text and len(a.text) > 2:
        fail("--text: at most two (training, validation)")
    if a.grad_accum < 1:
        fail(f"--grad-accum {a.grad_accum}: need at least 1")
    return a


def main():
    a = parse_args()
    start = time.perf_counter()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    log_dir = os.environ.get("SHMTRAIN_LOG_DIR")
    path = a.metrics or (os.path.join(log_dir, "metrics.jsonl") if log_dir else None)
    if path and rank == 0:
        open(path, "w").close()  # a fresh file; appended to (own_speed: every rank's line)
    sink = open(path, "a") if path and rank == 0 else None

    def emit(record):
        line = json.dumps(record, separators=(",", ":"))
        if rank == 0 and not a.quiet:
            print(line, flush=True)
        if sink:
            sink.write(line + "\n")
            sink.flush()

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if not a.no_flush_denormals:
        torch.set_flush_denormal(True)
    if world > 1:
        init = "file://" + os.path.join(os.path.abspath(log_dir), "torch-gpt-store") if log_dir else \
            "tcp://127.0.0.1:29511"
        init_group(a.backend, init, rank, world)
    ids, val = token_file(a.tokens_bin) if a.tokens_bin else text_ids(a)
    cfg = PRESETS[a.model]
    vocab = cfg.get("vocab", 256)
    if int(ids.max()) >= vocab or (len(val) and int(val.max()) >= vocab):
        fail(f"--tokens-bin {a.tokens_bin}: a token id past the vocabulary (0..{vocab - 1})")
    t = cfg["context"]
    torch.manual_seed(a.seed)
    model = GPT(**cfg)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    net = torch.compile(model) if a.mode == "compile" else model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=a.bucket_cap_mb)
        net.register_comm_hook(None, timed_allreduce_hook)
    per_epoch = max(1, len(ids) // (t * world * a.batch_size * a.grad_accum))
    steps = a.max_steps if a.max_steps else per_epoch * a.epochs
    total = a.warm_steps + steps
    emit({"type": "run", "system": "pytorch-ddp" if world > 1 else "pytorch", "instances": world,
          "threads": torch.get_num_threads(), "model": a.model, "params": params, "batch_per_instance": a.batch_size,
          "torch": torch.__version__, **({"backend": dist.get_backend()} if world > 1 else {}),  # the group's own
          "first_step": 0, "context": t,
          "precision": "bf16" if a.precision == "bf16" else "fp32", "mode": a.mode,
          **({"grad_accum": a.grad_accum} if a.grad_accum > 1 else {}), **independent_run()})

    def step(k):
        """nanoGPT's gradient accumulation: each micro-batch's loss / N, DDP's
        no_sync on all but the last; micro-batch m of rank r takes shmtrain's
        windows of rank m x world + r of world x N."""
        for g in opt.param_groups:
            g["lr"] = lr_at(a, k, total)
        opt.zero_grad(set_to_none=True)
        losses, accs = 0.0, 0.0
        for m in range(a.grad_accum):
            x, y = windows(ids, a.seed, k, world * a.grad_accum, m * world + rank, a.batch_size, t)
            last = m == a.grad_accum - 1
            with (contextlib.nullcontext() if last or world == 1 else net.no_sync()):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                    logits = net(x)
                loss = F.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
                (loss / a.grad_accum).backward()
                InFlight.after_backward()
            losses += loss.item() / a.grad_accum
            accs += (logits.argmax(-1) == y).float().mean().item() / a.grad_accum
        if a.clip_norm > 0:
            nn.utils.clip_grad_norm_(model.parameters(), a.clip_norm)
        opt.step()
        return losses, accs

    def evaluate():
        """shmtrain's: consecutive windows of the validation split, mean loss per token (rank 0 alone)."""
        n = min(a.eval_windows, (len(val) - 1) // t) if a.eval_windows else (len(val) - 1) // t
        model.eval()
        total_loss, right = 0.0, 0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            for first in range(0, n, a.batch_size):
                ks = range(first, min(first + a.batch_size, n))
                x = torch.stack([val[k * t:k * t + t] for k in ks])
                y = torch.stack([val[k * t + 1:k * t + t + 1] for k in ks])
                z = model(x).float()
                total_loss += F.cross_entropy(z.view(-1, vocab), y.reshape(-1), reduction="sum").item()
                right += (z.argmax(-1) == y).sum().item()
        model.train()
        return total_loss / (n * t), right / (n * t)

    for k in range(a.warm_steps):
        step(k)
    t0 = time.perf_counter()
    InFlight.seconds = InFlight.exposed = InFlight.exposed_peer_wait = 0.0
    eval_s, last_log, loss_sum, acc_sum, since = 0.0, t0, 0.0, 0.0, 0
    last_loss, last_acc, best_acc, done = float("nan"), 0.0, 0.0, 0

    def run_eval(k):
        nonlocal eval_s, last_loss, last_acc, best_acc, last_log
        e0 = time.perf_counter()
        if rank == 0:
            last_loss, last_acc = evaluate()
            best_acc = max(best_acc, last_acc)
            emit({"type": "eval", "step": k, "epoch": 0, "test_loss": round(last_loss, 6),
                  "test_accuracy": round(last_acc, 5), "time_s": round(e0 - start, 3),
                  "eval_s": round(time.perf_counter() - e0, 3)})
        if world > 1:
            flag = torch.tensor([last_loss if rank == 0 else 0.0])
            dist.broadcast(flag, 0)  # every rank decides alike whether the target is reached
            last_loss = flag.item()
        eval_s += time.perf_counter() - e0
        last_log += time.perf_counter() - e0  # evaluation is not training time

    for k in range(a.warm_steps, total):
        loss, acc = step(k)
        done = k + 1 - a.warm_steps
        loss_sum, acc_sum, since = loss_sum + loss, acc_sum + acc, since + 1
        if done % a.log_every == 0 or k + 1 == total:
            now = time.perf_counter()
            sps = since * world * a.batch_size * a.grad_accum / (now - last_log)
            emit({"type": "train", "step": done, "epoch": round(done / per_epoch, 4),
                  "loss": round(loss_sum / since, 6), "accuracy": round(acc_sum / since, 5),
                  "lr": lr_at(a, k, total), "samples_per_s": round(sps, 1), "tokens_per_s": round(sps * t, 1),
                  "time_s": round(now - start, 3), "compute_s": round(now - last_log - InFlight.seconds, 4),
                  "allreduce_s": round(InFlight.seconds, 4), "wait_s": round(InFlight.exposed, 4),
                  "peer_wait_s": round(InFlight.exposed_peer_wait, 4)})
            last_log, loss_sum, acc_sum, since = now, 0.0, 0.0, 0
            InFlight.seconds = InFlight.exposed = InFlight.exposed_peer_wait = 0.0
        if a.eval_every and done % a.eval_every == 0:
            run_eval(done)
            if a.target_loss > 0 and last_loss <= a.target_loss:
                break
    train_s = time.perf_counter() - t0 - eval_s
    if not a.eval_every or done % a.eval_every:
        run_eval(done)
    sps = done * world * a.batch_size * a.grad_accum / train_s
    emit({"type": "summary", "steps": done, "instances": world, "batch_per_instance": a.batch_size,
          "total_s": round(time.perf_counter() - start, 3), "train_s": round(train_s, 3),
          "samples_per_s": round(sps, 1), "tokens_per_s": round(sps * t, 1), "precision": a.precision,
          "final_test_accuracy": round(last_acc, 5), "best_test_accuracy": round(best_acc, 5),
          "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})
    if sink:
        sink.close()
    own_speed(path, rank, done, done * a.batch_size * a.grad_accum, train_s)
    if world > 1:
        # Everyone is done once all pass this barrier.  Exit without tearing
        # the group down: PyTorch 1.13's ProcessGroupGloo destructor can
        # deadlock (it joins a gloo thread that waits for the GIL it holds),
        # seen here leaving rank 1 asleep after rank 0 had exited.
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
