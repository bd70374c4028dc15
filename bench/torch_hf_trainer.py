#!/usr/bin/env python3
"""Hugging Face's Trainer training a GPT-2 as its users write one (transformers'
GPT2LMHeadModel, TrainingArguments, Trainer), over the `shm` backend
(docs/torch.md, "Hugging Face's Trainer").  The model is nanoGPT's CPU recipe
by default (gpt-mini: 4 layers, 4 heads, 128 dims, context 64), the data
random windows of a 65-character vocabulary (a benchmark: speed, not text).

    SHMTRAIN_TORCH_BACKEND=shm torchrun --standalone --nproc-per-node 2 bench/torch_hf_trainer.py
    torchrun --standalone --nproc-per-node 2 bench/torch_hf_trainer.py --init-group shm
    shmrun --sweep all,core --compare-backends shm,gloo -- python bench/torch_hf_trainer.py --report

accelerate (under the Trainer) takes only "gloo" or "mpi" by name on a CPU:
TrainingArguments(ddp_backend="shm") is refused there.  Either the process
group is made before TrainingArguments (`--init-group shm`: the Trainer keeps
it), or SHMTRAIN_TORCH_BACKEND=shm makes accelerate's own
init_process_group("gloo") take shm, with no line changed (what a sweep does).
Rank 0 prints the losses it logged and a digest of the trained parameters
(the backends' bits compared in tests/torch/test_hf_trainer.py).
"""
import argparse
import hashlib
import os

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

SIZES = {"gpt-mini": dict(n_layer=4, n_head=4, n_embd=128, n_positions=64),
         "tiny": dict(n_layer=2, n_head=2, n_embd=32, n_positions=16)}


class Windows(torch.utils.data.Dataset):
    def __init__(self, count, context, seed):
        self.x = torch.randint(0, 65, (count, context), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


def options():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(SIZES), default="gpt-mini")
    ap.add_argument("--max_steps", type=int, default=40)
    ap.add_argument("--per_device_train_batch_size", type=int, default=12)  # what --sweep-global-batch divides
    ap.add_argument("--gradient_accumulation_steps", type=int,  # default: what a sweep asks (SHMTRAIN_GRAD_ACCUM)
                    default=int(os.environ.get("SHMTRAIN_GRAD_ACCUM", "1")))
    ap.add_argument("--init-group", metavar="BACKEND", help="make the process group first (e.g. shm)")
    ap.add_argument("--ddp_backend", help="TrainingArguments' (gloo or mpi: accelerate refuses others on a CPU)")
    ap.add_argument("--torch_compile", action="store_true", help="TrainingArguments' (torch.compile the model)")
    ap.add_argument("--report", action="store_true", help="shmtrain_torch.hf.ReportCallback: a sweep's samples/s")
    ap.add_argument("--eval", action="store_true", help="evaluate at the end (the ranks' losses gathered)")
    ap.add_argument("--out", default=os.environ.get("SHMTRAIN_LOG_DIR") or "hf-trainer-out")
    return ap.parse_args()


def main():
    a = options()
    if a.init_group:
        dist.init_process_group(a.init_group)
    size = SIZES[a.model]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=65, bos_token_id=0, eos_token_id=0, **size))
    args = TrainingArguments(output_dir=a.out, use_cpu=True, ddp_backend=a.ddp_backend, max_steps=a.max_steps,
                             per_device_train_batch_size=a.per_device_train_batch_size,
                             gradient_accumulation_steps=a.gradient_accumulation_steps,
                             learning_rate=1e-3, logging_steps=5, save_strategy="no", report_to=[], seed=0,
                             disable_tqdm=True, per_device_eval_batch_size=8, torch_compile=a.torch_compile)
    callbacks = []
    if a.report:
        from shmtrain_torch.hf import ReportCallback
        callbacks.append(ReportCallback(tokens_per_sample=size["n_positions"]))
    context = size["n_positions"]
    trainer = Trainer(model=model, args=args, train_dataset=Windows(4096, context, 1),
                      eval_dataset=Windows(64, context, 2), callbacks=callbacks)
    trainer.train()
    evaluated = trainer.evaluate()["eval_loss"] if a.eval else None
    if args.process_index == 0:
        digest = hashlib.sha256()
        for p in model.parameters():
            digest.update(p.detach().contiguous().numpy().tobytes())
        losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
        backend = dist.get_backend() if dist.is_initialized() else "none"
        print(f"backend {backend} world {args.world_size} pid {os.getpid()} losses {losses} eval {evaluated} "
              f"params {digest.hexdigest()[:16]}", flush=True)


if __name__ == "__main__":
    main()
