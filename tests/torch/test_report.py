"""shmtrain_torch.report(): each rank's step times and, over shm, what it
waited for its peers, in the instance record a sweep names the slowest by.

  python3 tests/torch/test_report.py      (ctest: torch_report; SHMRUN set)

1. A clock the test sets: a script's steps, one call a step and one call
   for two, give p50, p90 and max in shmtrain's bins (within 2% above).
2. Two ranks under shmrun over shm, rank 1 slower by a sleep each step:
   rank 0 waited for it, rank 1 computed longer, both ranks' p50 the gang's.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
    import shmtrain_torch  # noqa: F401
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

CLOCKED = """
import sys, shmtrain_torch
rep = sys.modules["shmtrain_torch.report"]
now = [0.0]
rep.time.perf_counter = lambda: now[0]
shmtrain_torch.report(step=1, samples=8)           # the first call: start-up before it is not a step
for ms in range(1, 11):                            # then steps of 1, 2, ... 10 ms
    now[0] += ms / 1000
    shmtrain_torch.report(step=ms + 1, samples=8)
now[0] += 0.006
shmtrain_torch.report(step=13, samples=8)          # one call for two steps of 3 ms
"""

STRAGGLER = """
import time, torch, torch.distributed as dist, shmtrain_torch
dist.init_process_group("shm")
rank = dist.get_rank()
x = torch.ones(1000)
for step in range(1, 26):
    time.sleep(0.002 + (0.020 if rank == 1 else 0))  # rank 1 computes 20 ms longer a step
    dist.all_reduce(x)
    shmtrain_torch.report(step=step, samples=16)
dist.destroy_process_group()
"""


def instances(path):
    recs = [json.loads(line) for line in open(path)]
    return {r["rank"]: r for r in recs if r["type"] == "instance"}


def clocked(d):
    path = os.path.join(d, "clocked.jsonl")
    env = dict(os.environ, SHMTRAIN_METRICS=path, RANK="0", WORLD_SIZE="1")
    r = subprocess.run([sys.executable, "-c", CLOCKED], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    i = instances(path)[0]
    # 12 steps: 1, 2, 3, 3, 3, 4, 5, ... 10 ms; the 6th is 4 ms, the 11th 9 ms
    assert i["steps"] == 12, i
    assert 0.004 <= i["step_p50_s"] <= 0.004 * 1.02, i
    assert 0.009 <= i["step_p90_s"] <= 0.009 * 1.02, i
    assert i["step_max_s"] == 0.01, i
    assert abs(i["compute_s"] - 0.061) < 1e-9 and "wait_s" not in i, i  # no backend: no wait to take out
    return i


def straggler(d):
    shmrun = os.environ.get("SHMRUN")
    if not shmrun:
        print("skipped: SHMRUN not set (ctest sets it)")
        sys.exit(77)
    logs = os.path.join(d, "logs")
    r = subprocess.run([shmrun, "-n", "2", "--oversubscribe", "--log-dir", logs, "--", sys.executable, "-c",
                        STRAGGLER], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    found = [os.path.join(root, f) for root, _, files in os.walk(logs) for f in files if f == "metrics.jsonl"]
    assert len(found) == 1, found
    i = instances(found[0])
    assert sorted(i) == [0, 1], i
    fast, slow = i[0], i[1]
    steps = fast["steps"]
    assert steps == 24 and slow["steps"] == 24, i
    # rank 0 waited about 20 ms a step for rank 1; rank 1 hardly at all
    assert fast["wait_s"] >= 0.5 * 0.020 * steps, i
    assert fast["wait_s"] > 3 * slow["wait_s"], i
    assert slow["compute_s"] > 2 * fast["compute_s"], i
    for k in (fast, slow):  # each rank's steps are the gang's: 22 ms and more
        assert 0.020 <= k["step_p50_s"] <= k["step_p90_s"] <= k["step_max_s"], k
    return fast, slow


def main():
    d = tempfile.mkdtemp()
    c = clocked(d)
    fast, slow = straggler(d)
    print(f"report: p50 {c['step_p50_s'] * 1e3:.3f} ms, p90 {c['step_p90_s'] * 1e3:.3f} ms, max "
          f"{c['step_max_s'] * 1e3:.1f} ms of 12 clocked steps; under shmrun rank 0 waited "
          f"{fast['wait_s']:.3f} s for rank 1 ({slow['wait_s']:.3f} s the other way), computed "
          f"{fast['compute_s']:.3f} s against rank 1's {slow['compute_s']:.3f} s", flush=True)


if __name__ == "__main__":
    main()
