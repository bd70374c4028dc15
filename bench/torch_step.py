#!/usr/bin/env python3
"""PyTorch single-process training-step time, the peer of st-step-bench.

    torch_step.py MODEL THREADS [--batch 64] [--seconds 1] [--precision fp32|bf16]
                  [--mode eager|channels_last|compile]

Prints one line: model threads step_ms samples_per_s mode.  Same step as
st-step-bench: forward, cross-entropy, backward, SGD with momentum 0.9;
bf16 runs forward and loss under torch.autocast(cpu, bfloat16), as a
PyTorch user would.  --mode: the ways a PyTorch user makes a CPU model
faster, which the benchmarks try in turn to take the fastest:
channels_last puts the model and its input in NHWC (oneDNN's own layout
for convolutions), compile wraps the model in torch.compile (the compile
falls in the untimed warm-up steps).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch_models  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("threads", type=int)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--seconds", type=float, default=1.0)
ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
ap.add_argument("--mode", choices=("eager", "channels_last", "compile"), default="eager")
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
net = torch_models.build(a.model)
shape = (3, 32, 32) if a.model == "resnet" else (1, 28, 28)  # CIFAR-10 or Fashion-MNIST, as the presets
x = torch.rand(a.batch, *shape) - 0.5
if a.mode == "channels_last":
    net, x = net.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
model = torch.compile(net) if a.mode == "compile" else net
opt = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
y = torch.arange(a.batch) % 10
loss_fn = torch.nn.CrossEntropyLoss()


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


for _ in range(10):
    step()
t0, steps = time.perf_counter(), 0
while steps < 5 or time.perf_counter() - t0 < a.seconds:
    step()
    steps += 1
ms = (time.perf_counter() - t0) / steps * 1e3
print(f"{a.model} {a.threads} {ms:.3f} {a.batch / ms * 1e3:.0f} {a.mode}")
