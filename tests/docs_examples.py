#!/usr/bin/env python3
"""The README's "A few things to try", run as printed (issue 43, item 7).

    docs_examples.py BUILD_DIR SOURCE_DIR

Each command of the block is taken from README.md (continuation lines
joined, comments dropped) and run in a scratch directory, in order (the
sample and the export read the checkpoint the command before wrote), with
build/ mapped to BUILD_DIR.  What it lacks is made small: a CIFAR-10 of 64
random records, an image folder of 160 small PNGs, token files of random ids.  What
a command trains is cut short by flags appended after its own (the last
one given wins): two steps, small test sets, one repeat of a sweep.  A
command that needs what CI cannot give (a CPU with native bf16, your own
script, 24 GB for gpt2) is named and skipped with the reason; any other
failure fails the test.
"""
import os
import random
import re
import shlex
import struct
import subprocess
import sys
import tempfile
import zlib

SHORT = ["--max-steps", "2", "--log-every", "1"]  # and a small evaluation, by kind (shorten)


def commands(readme):
    text = open(readme).read()
    block = text[text.index("A few things to try"):]
    block = block[block.index("```sh") + 5:]
    block = block[:block.index("```")]
    out, pending = [], ""
    for raw in block.splitlines():
        line = raw.split("  #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        pending += " " + line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        out.append(pending.strip())
        pending = ""
    return out


def png(path, w, h, seed):
    rnd = random.Random(seed)
    rows = b"".join(b"\0" + bytes(rnd.randrange(256) for _ in range(3 * w)) for _ in range(h))
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def make_data(source):
    subprocess.run(["bash", os.path.join(source, "bench", "fake-cifar.sh"), "cifar", "64"], check=True)
    for split, n in (("train", 70), ("val", 10)):  # 140: two instances' global batch of 2 x 64
        for cls in ("cat", "dog"):
            os.makedirs(f"photos/{split}/{cls}", exist_ok=True)
            for i in range(n):
                png(f"photos/{split}/{cls}/{i}.png", 40, 36, hash((split, cls, i)) & 0xFFFF)
    os.makedirs("data/openwebtext", exist_ok=True)
    rnd = random.Random(1)
    for name, n in (("train", 20000), ("val", 4000)):
        with open(f"data/openwebtext/{name}.bin", "wb") as f:
            f.write(struct.pack(f"<{n}H", *(rnd.randrange(50257) for _ in range(n))))


def why_skipped(cmd):
    if "--precision bf16" in cmd or "--sweep-precisions" in cmd:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        if "avx512_bf16" not in lscpu and "amx_bf16" not in lscpu:
            return "needs a CPU with native bf16 (AVX512-BF16 or AMX); this one has neither"
    if "train.py" in cmd:
        return "runs your own DDP script (train.py); torch_shm_launch_shmrun runs one like it"
    if "--model gpt2" in cmd:
        return "gpt2's recipe (12 x 1024 tokens) needs more than this machine's memory (issue 47)"
    if cmd.startswith("mpirun") and subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode:
        return "needs Open MPI's mpirun"
    return None


def prepare(cmd, build):
    words = shlex.split(cmd.replace("build/", build + "/"))
    if words[0] == "mpirun":  # as CI runs it: root, and no leak report of MPI's own (tests/CMakeLists.txt)
        words[1:1] = ["--allow-run-as-root", "-x", "ASAN_OPTIONS=detect_leaks=0"]
    is_train = any(w.endswith("/shmtrain") for w in words) and not {"sample", "export"} & set(words)
    is_plan = "--dry-run" in words or "--print-mpirun" in words
    if "--sweep" in words:
        at = words.index("--")
        words[at:at] = ["--repeats", "1", "--sweep-out", "sweep"]
    if is_train and not is_plan:  # the PyTorch peers of a sweep take these too
        words += SHORT + (["--eval-windows", "4"] if "--text" in words else ["--test-subset", "64"])
    if "--tokens" in words and "sample" in words:
        words[words.index("--tokens") + 1] = "20"
    return words


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.chdir(tempfile.mkdtemp())
    make_data(source)
    # the README's --tune keeps its answer here, not in the user's cache (which every later run reads)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               XDG_CACHE_HOME=os.path.abspath("kernel-answers"))
    failed = ran = 0
    for cmd in commands(os.path.join(source, "README.md")):
        reason = why_skipped(cmd)
        if reason:
            print(f"skip {cmd}\n       {reason}", flush=True)
            continue
        cmd = cmd.replace("/path/to/cifar-10-batches-bin", "cifar").replace(" models/", f" {source}/models/")
        words = prepare(cmd, build)
        r = subprocess.run(words, capture_output=True, text=True, errors="replace", env=env, timeout=600)
        ran += 1
        if r.returncode != 0:
            failed += 1
            print(f"FAIL {cmd}\n       exit {r.returncode}: {(r.stderr or r.stdout).strip()[-600:]}", flush=True)
        else:
            print(f"ok   {cmd}", flush=True)
    print(f"{ran} of the README's examples ran, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
