#!/usr/bin/env python3
"""Load a shmtrain export (`shmtrain export --checkpoint F --out M.safetensors`) into PyTorch.

    scripts/load_export.py M.safetensors --preset mlp|lenet|cnn|resnet [--data DIR]  # bench/torch_models.py's peer;
                                                                     # its test accuracy on an IDX directory
    scripts/load_export.py M.safetensors --text FILE [--windows 256]  # a GPT: nanoGPT's keys, its loss on FILE

The file is read with the standard library and numpy only (the safetensors package is not
needed): an 8-byte little-endian header length, the JSON header, the tensors.  Image presets
load into bench/torch_models.py's nn.Sequential peers (strict, but for batch norm's
num_batches_tracked, which shmtrain does not keep).  A GPT loads into bench/torch_gpt.py's
GPT (nanoGPT's block, tanh GELU) by a fixed map from nanoGPT's keys, and with --text its mean
loss per token over consecutive windows of the text's last 10% is printed, as shmtrain's
validation loss is computed: the two agree to float round-off.  Run it with the PyTorch of
bench/peer.sh (scripts/install-deps.sh --bench).
"""
import argparse
import json
import math
import os
import re
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))


def read(path):
    """name -> numpy array, and the metadata."""
    blob = open(path, "rb").read()
    if len(blob) < 8:
        sys.exit(f"{path}: shorter than a safetensors header")
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, not F32")
        a, b = t["data_offsets"]
        tensors[name] = np.frombuffer(blob, dtype="<f4", count=(b - a) // 4, offset=8 + n + a).reshape(t["shape"])
    return tensors, meta


GPT_KEYS = [(r"transformer\.wte\.weight", "wte.weight"), (r"transformer\.wpe\.weight", "wpe.weight"),
            (r"transformer\.h\.(\d+)\.ln_1\.(\w+)", r"blocks.\1.ln1.\2"),
            (r"transformer\.h\.(\d+)\.attn\.c_attn\.(\w+)", r"blocks.\1.qkv.\2"),
            (r"transformer\.h\.(\d+)\.attn\.c_proj\.(\w+)", r"blocks.\1.proj.\2"),
            (r"transformer\.h\.(\d+)\.ln_2\.(\w+)", r"blocks.\1.ln2.\2"),
            (r"transformer\.h\.(\d+)\.mlp\.c_fc\.(\w+)", r"blocks.\1.fc.\2"),
            (r"transformer\.h\.(\d+)\.mlp\.c_proj\.(\w+)", r"blocks.\1.fc_proj.\2"),
            (r"transformer\.ln_f\.(\w+)", r"ln.\1")]


def gpt(tensors, meta, args):
    import torch_gpt
    text = meta["model"]
    context = int(re.search(r"input tokens (\d+)", text).group(1))
    heads = int(re.search(r"attention heads (\d+)", text).group(1))
    dim = tensors["transformer.wte.weight"].shape[1]
    layers = sum(1 for k in tensors if k.endswith("attn.c_attn.weight"))
    model = torch_gpt.GPT(layers, heads, dim, context)
    state = {}
    for name, value in tensors.items():
        if name == "lm_head.weight":  # tied: the token table again
            continue
        for pattern, to in GPT_KEYS:
            if re.fullmatch(pattern, name):
                state[re.sub(pattern, to, name)] = torch.from_numpy(value.copy())
                break
        else:
            sys.exit(f"{name}: not a key of nanoGPT's GPT")
    model.load_state_dict(state, strict=True)
    print(f"loaded {len(state)} tensors into a GPT of {layers} layers, {heads} heads, {dim} dims, context {context}")
    if not args.text:
        return
    alphabet = bytes.fromhex(meta["alphabet_hex"])
    table = {b: i for i, b in enumerate(alphabet)}
    data = torch_gpt.read_text(args.text)
    ids = torch.tensor([table[b] for b in data], dtype=torch.long)
    val = ids[len(ids) - len(ids) // 10:]  # shmtrain's split: the last 10% validates
    n = min(args.windows, (len(val) - 1) // context) if args.windows else (len(val) - 1) // context
    model.eval()
    total = 0.0
    with torch.no_grad():
        for k in range(n):
            x, y = val[k * context:(k + 1) * context], val[k * context + 1:(k + 1) * context + 1]
            logits = model(x[None])[0]
            total += torch.nn.functional.cross_entropy(logits, y, reduction="sum").item()
    loss = total / (n * context)
    print(f"validation loss over {n} windows: {loss:.5f} ({loss / math.log(2):.4f} bits per character)")


def image(tensors, args):
    import torch_models
    model = torch_models.build(args.preset)
    state = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        sys.exit(f"--preset {args.preset}: missing {missing}, unexpected {unexpected}")
    print(f"loaded {len(state)} tensors into bench/torch_models.py's {args.preset}")
    if not args.data:
        return
    # shmtrain's normalisation: per channel, the training images' mean and
    # (population) standard deviation of pixel / 255
    train = idx(args.data, "train-images-idx3-ubyte").astype(np.float64) / 255
    mean, std = train.mean(), train.std()
    x = (idx(args.data, "t10k-images-idx3-ubyte").astype(np.float32) / 255 - np.float32(mean)) / np.float32(std)
    y = torch.from_numpy(idx(args.data, "t10k-labels-idx1-ubyte").astype(np.int64))
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(torch.from_numpy(x[k:k + 1000, None])).argmax(1) for k in range(0, len(x), 1000)])
    print(f"test accuracy on {args.data}: {(pred == y).double().mean().item() * 100:.2f}% of {len(y)}")


def idx(directory, base):
    """An IDX file of unsigned bytes, gzipped or not, as an array."""
    import gzip
    path = os.path.join(directory, base)
    blob = gzip.open(path + ".gz").read() if os.path.exists(path + ".gz") else open(path, "rb").read()
    ndims = blob[3]
    dims = struct.unpack(f">{ndims}I", blob[4:4 + 4 * ndims])
    return np.frombuffer(blob, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--preset", help="an image preset: mlp, lenet, cnn, resnet")
    ap.add_argument("--text", help="a GPT: its validation loss on this text's last 10%%")
    ap.add_argument("--windows", type=int, default=256, help="validation windows (0: all)")
    ap.add_argument("--data", help="an image preset: its test accuracy on this IDX directory (Fashion-MNIST's)")
    args = ap.parse_args()
    tensors, meta = read(args.file)
    if "transformer.wte.weight" in tensors:
        gpt(tensors, meta, args)
    elif args.preset:
        image(tensors, args)
    else:
        sys.exit("an image model's export: say which peer model with --preset")


if __name__ == "__main__":
    main()
