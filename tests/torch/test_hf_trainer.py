#!/usr/bin/env python3
"""Hugging Face's Trainer over the "shm" backend, as its users run it
(bench/torch_hf_trainer.py: transformers' GPT-2, TrainingArguments, Trainer):

    test_hf_trainer.py trainer   torchrun, 2 ranks: the process group made
                                 first, and no line changed (SHMTRAIN_TORCH_BACKEND
                                 =shm under accelerate's own init), each trains
                                 the bits it trains over gloo, evaluation included;
                                 a Trainer that does not take the sweep's
                                 accumulation steps is stopped by name
    test_hf_trainer.py sweep     shmrun --sweep of the script, both backends, the
                                 global batch held through Hugging Face's own
                                 flag; ReportCallback's records: every step once,
                                 the logged losses at their steps

Skipped (77) without PyTorch, the built extension, transformers or accelerate.
"""
import json
import os
import subprocess
import sys
import tempfile

from shm_common import HERE, NO_LIBUV, names_left

try:
    import accelerate  # noqa: F401  the Trainer's
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh --bench installs them)")
    sys.exit(77)

SCRIPT = os.path.join(HERE, "..", "..", "bench", "torch_hf_trainer.py")
TINY = ["--model", "tiny", "--max_steps", "12", "--per_device_train_batch_size", "4", "--eval"]


def torchrun(cwd, *flags, env=None):
    """Rank 0's line: backend, world, pid, losses, eval loss, parameters' digest.
    Under shmrun where this PyTorch's torchrun cannot start (Debian's: no libuv)."""
    environ = {k: v for k, v in os.environ.items() if k != "SHMTRAIN_TORCH_BACKEND"}
    environ.update(env or {})
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    if NO_LIBUV and os.environ.get("SHMRUN"):
        launcher = [os.environ["SHMRUN"], "-n", "2", "--oversubscribe", "--", sys.executable]
    r = subprocess.run(launcher + [SCRIPT, *TINY, "--out", cwd, *flags], capture_output=True, text=True,
                       timeout=300, env=environ, cwd=cwd)
    assert r.returncode == 0, (flags, env, r.returncode, r.stderr[-3000:])
    lines = [line.split() for line in r.stdout.splitlines() if line.startswith("backend ")]
    assert len(lines) == 1, r.stdout[-2000:]
    words = lines[0]
    return {"backend": words[1], "world": int(words[3]), "pid": int(words[5]),
            "trained": " ".join(words[6:])}  # losses, eval loss, digest


def trainer():
    d = tempfile.mkdtemp()
    before = set(os.listdir("/dev/shm"))
    gloo = torchrun(d, "--ddp_backend", "gloo")
    first = torchrun(d, "--init-group", "shm")
    unchanged = torchrun(d, env={"SHMTRAIN_TORCH_BACKEND": "shm"})
    assert gloo["backend"] == "gloo" and gloo["world"] == 2, gloo
    assert "eval None" not in gloo["trained"] and "losses []" not in gloo["trained"], gloo
    for run, how in ((first, "the group made first"), (unchanged, "SHMTRAIN_TORCH_BACKEND=shm")):
        assert run["backend"] == "shm" and run["world"] == 2, (how, run)
        # two ranks' sums are the same bits in any order: the same training, to the bit
        assert run["trained"] == gloo["trained"], (how, run["trained"], gloo["trained"])
    left = names_left(before, [first["pid"], unchanged["pid"]])
    assert not left, left
    # the sweep's accumulation steps not taken: stopped before the first step, by name
    r = subprocess.run([sys.executable, SCRIPT, "--model", "tiny", "--max_steps", "2", "--report",
                        "--gradient_accumulation_steps", "1", "--out", d],
                       capture_output=True, text=True, timeout=300, cwd=d,
                       env=dict(os.environ, SHMTRAIN_GRAD_ACCUM="3", SHMTRAIN_METRICS=os.path.join(d, "m.jsonl")))
    assert r.returncode != 0 and "asks 3 accumulation steps" in r.stderr and "takes 1" in r.stderr, r.stderr[-2000:]
    assert not os.path.exists(os.path.join(d, "m.jsonl")), "a step was reported"
    print(f"trainer: over shm (group made first; accelerate's own init replaced) the same losses, evaluation "
          f"and parameters as over gloo: {gloo['trained']}; a Trainer off the sweep's batch stopped", flush=True)


def records(run_folder):
    found = [os.path.join(root, "metrics.jsonl") for root, _, files in os.walk(run_folder) if "metrics.jsonl" in files]
    assert len(found) == 1, (run_folder, found)
    return [json.loads(line) for line in open(found[0])]


def sweep():
    shmrun = os.environ.get("SHMRUN")
    if not shmrun:
        print("skipped: SHMRUN not set (ctest sets it)")
        sys.exit(77)
    d = tempfile.mkdtemp()
    # the Trainer's own accumulation steps beside the sweep's global batch: refused before any run
    r = subprocess.run([shmrun, "--sweep", "2x1", "--sweep-global-batch", "16", "--", sys.executable, SCRIPT,
                        "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2"],
                       capture_output=True, text=True, timeout=60, cwd=d)
    assert r.returncode != 0 and "own --gradient_accumulation_steps would contradict" in r.stderr, r.stderr[-800:]
    r = subprocess.run([shmrun, "--sweep", "1x2,2x1", "--repeats", "1", "--oversubscribe", "--compare-backends",
                        "shm,gloo", "--sweep-global-batch", "16", "--sweep-out", os.path.join(d, "s"), "--",
                        sys.executable, SCRIPT, "--model", "tiny", "--max_steps", "16",
                        "--per_device_train_batch_size", "8", "--report"],
                       capture_output=True, text=True, timeout=900, cwd=d)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    rep = json.load(open(os.path.join(d, "s", "sweep.json")))
    labels = [st["label"] for st in rep["settings"]]
    assert labels == ["1x2 acc 2", "2x1"], labels  # 16 = 1 x 8 x 2 = 2 x 8 x 1
    for st in rep["settings"]:
        for system in ("shmtrain", "pytorch-ddp"):  # the script over shm, over gloo
            got = st["systems"].get(system, {})
            assert got.get("samples_per_s", {}).get("median", 0) > 0, (st["label"], system, st["systems"])
    runs = sorted(os.listdir(os.path.join(d, "s", "runs")))
    for name, batch in (("1x2 acc 2-script-shm", 16), ("2x1-script-shm", 8), ("2x1-script-gloo", 8)):
        folder = [os.path.join(d, "s", "runs", n) for n in runs if name in n]
        assert len(folder) == 1, (name, runs)
        recs = records(folder[0])
        run = [x for x in recs if x["type"] == "run"]
        train = [x for x in recs if x["type"] == "train"]
        assert len(run) == 1 and run[0]["batch_per_instance"] == batch, (name, run)
        assert run[0]["backend"] == name.split("-")[-1], (name, run)
        assert [x["step"] for x in train] == list(range(1, 17)), (name, [x["step"] for x in train])
        assert [x["step"] for x in train if "loss" in x] == [5, 10, 15], (name, train)  # logging_steps=5
        assert all(abs(x["tokens_per_s"] - 16 * x["samples_per_s"]) <= 1 for x in train), train[:3]  # 16-token windows
    print(f"sweep: {labels} over shm and gloo, the global batch held by --per_device_train_batch_size and "
          f"SHMTRAIN_GRAD_ACCUM; every step reported once, the logged losses at steps 5, 10, 15", flush=True)


if __name__ == "__main__":
    {"trainer": trainer, "sweep": sweep}[sys.argv[1]]()
