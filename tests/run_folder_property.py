#!/usr/bin/env python3
"""The run folder as a property (issue 62): random sequences of runs,
resumes, overwrites, kills, failed starts and full disks in one directory.

    run_folder_property.py SHMTRAIN [SEEDS [FIRST]]

Seeds FIRST .. FIRST+SEEDS-1 (default 3 from 0): the default suite runs
seed 0, the long one seeds 1-4.

After every step of every sequence:
  - each earlier result is intact (its checkpoint's bytes, its records)
    unless this step was told to replace it (--overwrite, --resume);
  - a failed start left no folder and did not move runs/latest;
  - each folder's metrics.jsonl, scalars.csv and (where TensorBoard is
    importable) TensorBoard's own reader of its event files hold each train
    and eval step once, in increasing order, and the same steps;
  - every file in a folder is one a run writes (the list in
    src/shmtrain_run_dir.h); a kill -9 mid-save may leave the write's
    temporary, which the folder's next save removes.
Full disks where a tmpfs can be mounted (root).
"""
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SMALL = ["--model", "mlp", "--train-subset", "512", "--test-subset", "64", "--seed", "5", "--log-every", "2",
         "--eval-every", "4"]
RUN_FILES = ("shmtrain.ckpt", "best.ckpt", "metrics.jsonl", "scalars.csv", "console.log", "config.txt",
             "curves.svg", "curves.gp", "kernels.txt")
RUN_PREFIXES = ("events.out.tfevents.", "shmtrain-step")

try:
    import logging
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    logging.getLogger("tensorboard").setLevel(logging.ERROR)  # its purge notices: the resumes working
except ImportError:
    EventAccumulator = None


def digest(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return None


def record_steps(folder):
    """{"train": [...], "eval": [...]} from metrics.jsonl, and from scalars.csv."""
    import json
    m = {"train": [], "eval": []}
    path = os.path.join(folder, "metrics.jsonl")
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)  # a line cut in half fails here
            if r["type"] in m:
                m[r["type"]].append(r["step"])
    c = {"train": [], "eval": []}
    path = os.path.join(folder, "scalars.csv")
    if os.path.exists(path):
        for line in list(open(path))[1:]:
            step, tag = line.split(",")[:2]
            if tag in ("train/loss", "eval/loss"):
                c[tag.split("/")[0]].append(int(step))
    return m, c


def differ(a, b):
    """Where two step lists part, in a line."""
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"{len(a)} vs {len(b)} steps, from index {k}: {a[k:k + 4]} vs {b[k:k + 4]}"


def agree(a, b, torn):
    """Two files' steps: the same, or in a killed folder one logged step apart at the end."""
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    return torn and len(long_) == len(short) + 1 and long_[:-1] == short


def tensorboard_steps(folder):
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    return {k: [e.step for e in acc.Scalars(f"{k}/loss")] if f"{k}/loss" in tags else [] for k in ("train", "eval")}


class World:
    def __init__(self, shmtrain, rng, root):
        self.shmtrain, self.rng, self.root = shmtrain, rng, root
        self.expected = {}  # folder -> checkpoint digest the last step left
        self.mounted = []
        # folders a kill -9 left mid-write: a write's temporary, or the last logged step in one
        # record file and not yet in the next (metrics.jsonl, then TensorBoard's and scalars.csv);
        # the next save clears the one, the resume's cut after its checkpoint the other
        self.killed_in = set()

    def run(self, args, timeout=120):
        return subprocess.run([self.shmtrain] + args, cwd=self.root, capture_output=True, text=True, timeout=timeout)

    def folders(self):
        out = []
        for top in ("runs", "."):
            d = os.path.join(self.root, top)
            for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                p = os.path.join(d, n)
                if os.path.isdir(p) and not os.path.islink(p) and n not in ("runs",) and not n.startswith("mnt"):
                    out.append(os.path.relpath(p, self.root))
        return out

    def latest(self):
        p = os.path.join(self.root, "runs", "latest")
        return os.readlink(p) if os.path.islink(p) else None

    # ---- the operations: each returns the folders it may change
    def new_run(self):
        r = self.run(SMALL + ["--max-steps", str(self.rng.randint(1, 12)), "--quiet"])
        assert r.returncode == 0, r.stderr
        return {os.path.dirname("runs/" + self.latest())}

    def out_run(self):
        name = self.rng.choice(["a", "b", "c"])
        overwrite = self.rng.random() < 0.5
        had = os.path.exists(os.path.join(self.root, name, "shmtrain.ckpt"))
        r = self.run(SMALL + ["--max-steps", str(self.rng.randint(1, 12)), "--out", name, "--quiet"] +
                     (["--overwrite"] if overwrite else []))
        if had and not overwrite:
            assert r.returncode == 2 and "holds a run already" in r.stderr, (r.returncode, r.stderr)
            return set()
        assert r.returncode == 0, r.stderr
        return {name}

    def resume(self):
        done = [f for f in self.folders() if os.path.exists(os.path.join(self.root, f, "shmtrain.ckpt"))]
        if not done:
            return set()
        f = self.rng.choice(done)
        ckpt = os.path.join(self.root, f, "shmtrain.ckpt")
        before = os.stat(ckpt)
        r = self.run(["--resume", f, "--max-steps", str(self.rng.randint(12, 24)), "--quiet"])
        assert r.returncode == 0, r.stderr
        after = os.stat(ckpt)
        # only a save clears a killed write's temporary: a kill can land far past its step
        # (mlp's steps take a millisecond), so a budget below the checkpoint's trains nothing
        if (after.st_ino, after.st_mtime_ns) != (before.st_ino, before.st_mtime_ns):
            self.killed_in.discard(f)
        return {f}

    def killed(self):
        name = self.rng.choice(["k1", "k2"])
        if os.path.exists(os.path.join(self.root, name)):
            return set()
        p = subprocess.Popen([self.shmtrain] + SMALL + ["--max-steps", "100000", "--checkpoint-every", "5",
                                                         "--out", name, "--quiet"], cwd=self.root)
        at = 2 * self.rng.randint(2, 7)  # a logged step (every 2)
        metrics = os.path.join(self.root, name, "metrics.jsonl")
        for _ in range(400):
            if os.path.exists(metrics) and f'"step":{at},' in open(metrics).read():
                break
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.killed_in.add(name)
        return {name}

    def failed_start(self):
        before, latest = set(self.folders()), self.latest()
        name = self.rng.choice([None, "f1"])
        r = self.run(["--data", "/no/such"] + (["--out", name] if name else []))
        assert r.returncode != 0
        assert set(self.folders()) == before, set(self.folders()) ^ before
        assert self.latest() == latest
        return set()

    def full_disk(self):
        if os.geteuid() != 0:
            return set()
        mnt = os.path.join(self.root, f"mnt{len(self.mounted)}")
        os.mkdir(mnt)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", mnt]).returncode != 0:
            return set()
        self.mounted.append(mnt)
        r = self.run(SMALL + ["--max-steps", "200", "--log-every", "1", "--no-checkpoint",
                              "--out", os.path.join(os.path.basename(mnt), "run"), "--quiet"])
        assert r.returncode == 1 and "holds no records after step" in r.stderr, (r.returncode, r.stderr)
        record_steps(os.path.join(mnt, "run"))  # whole lines only
        return set()

    def check(self, changed):
        for f in self.folders():
            d = os.path.join(self.root, f)
            ck = digest(os.path.join(d, "shmtrain.ckpt"))
            if f in self.expected and f not in changed:
                assert ck == self.expected[f], f"{f}: its checkpoint changed by a step that did not name it"
            self.expected[f] = ck
            m, c = record_steps(d)
            torn = f in self.killed_in
            for kind in ("train", "eval"):
                once = sorted(set(m[kind]))
                assert m[kind] == once, f"{f}: metrics.jsonl {kind}: {differ(m[kind], once)}"
                assert agree(c[kind], m[kind], torn), \
                    f"{f}: scalars.csv vs metrics.jsonl {kind}: {differ(c[kind], m[kind])}"
            if EventAccumulator and any(n.startswith("events.out") for n in os.listdir(d)):
                tb = tensorboard_steps(d)
                for kind in ("train", "eval"):
                    assert agree(tb[kind], m[kind], torn), \
                        f"{f}: TensorBoard vs metrics.jsonl {kind}: {differ(tb[kind], m[kind])}"
            for n in os.listdir(d):
                debris = ".tmp." in n and torn  # a write's temporary, killed mid-write
                assert n in RUN_FILES or n.startswith(RUN_PREFIXES) or debris, f"{f}: {n} is no file a run writes"

    def cleanup(self):
        for m in self.mounted:
            subprocess.run(["umount", m])


def main():
    shmtrain = os.path.abspath(sys.argv[1])
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    ops = ["new_run", "out_run", "out_run", "resume", "resume", "killed", "failed_start", "full_disk"]
    for seed in range(first, first + seeds):
        rng = random.Random(seed)
        root = tempfile.mkdtemp()
        w = World(shmtrain, rng, root)
        done = []
        try:
            for _ in range(12):
                op = rng.choice(ops)
                done.append(op)
                w.check(getattr(w, op)())
        except AssertionError as e:
            print(f"FAIL seed {seed} after {' '.join(done)}: {e}")
            sys.exit(1)
        finally:
            w.cleanup()
            shutil.rmtree(root, ignore_errors=True)
        print(f"ok   seed {seed}: {' '.join(done)}")
    print("TensorBoard's reader: " + ("checked" if EventAccumulator else "not importable here (not checked)"))


if __name__ == "__main__":
    main()
