"""A PyTorch script's progress in the metrics records shmtrain writes, so that
`shmrun --sweep SETTINGS -- python train.py` compares partitionings of the
user's own script (docs/partitioning.md).

    import shmtrain_torch
    for step in range(steps):
        ...
        shmtrain_torch.report(step=step + 1, samples=global_batch, loss=loss.item())

`samples`: the samples (or windows) the whole job trains in one step, all
ranks together (its global batch); `tokens` likewise for language models;
a call every K steps counts K steps of them.  Rank 0
writes (RANK, else torch.distributed's rank); the records go to
SHMTRAIN_METRICS, else shmrun's log folder (SHMTRAIN_LOG_DIR/metrics.jsonl),
else nowhere: a script run without shmrun pays one dictionary lookup a call.
A run record at the first call, a train record at every call, a summary at
exit; and at exit every rank adds an instance record with its own steps and
samples/s (from its first call to its last), which a sweep's ceiling run
(SHMTRAIN_INDEPENDENT=1: no all-reduce leaves a rank) sums, and its step
times (p50, p90 and max, in shmtrain's bins: within 2% above; a call every
K steps gives K steps of its interval's mean) and, over shm, the time it
waited for its peers, so a sweep names the instance the others wait for.
"""
import atexit
import json
import math
import os
import time

_state = None
_FIRST_EDGE, _GROWTH = 1e-5, 1.02  # src/train/steptimes.c's bins: the same quantiles as shmtrain's


def _rank():
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    try:
        import torch.distributed as dist
        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:  # noqa: BLE001  no torch.distributed: one process
        return 0


def _backend():
    try:
        import torch.distributed as dist
        return dist.get_backend() if dist.is_initialized() else ""
    except Exception:  # noqa: BLE001
        return ""


def _shm_wait_s(backend):
    """Seconds this rank's shm group has waited for its peers; None on
    another backend (gloo says nothing of it)."""
    if backend != "shm":
        return None
    from . import counters
    try:
        return counters()["wait_ns"] / 1e9
    except Exception:  # noqa: BLE001  the group already destroyed: nothing more to say
        return None


def _bin(step_s):
    if step_s <= _FIRST_EDGE:
        return 0
    b = math.ceil(math.log(step_s / _FIRST_EDGE) / math.log(_GROWTH))
    return b - 1 if b > 0 and _FIRST_EDGE * _GROWTH ** (b - 1) >= step_s else b  # log's round-off at an edge


def _quantile(state, q):
    want, seen = math.ceil(q * state["timed"]), 0
    for b in sorted(state["bins"]):
        seen += state["bins"][b]
        if seen >= want:
            return min(_FIRST_EDGE * _GROWTH ** b, state["max_s"])  # never past the slowest step itself
    return state["max_s"]


def _time_steps(state, span, steps):
    """The interval since the last call, as `steps` steps of its mean."""
    per = span / steps
    b = _bin(per)
    state["bins"][b] = state["bins"].get(b, 0) + steps
    state["timed"] += steps
    state["max_s"] = max(state["max_s"], per)


def _open(samples):
    path = os.environ.get("SHMTRAIN_METRICS")
    if not path and os.environ.get("SHMTRAIN_LOG_DIR"):
        path = os.path.join(os.environ["SHMTRAIN_LOG_DIR"], "metrics.jsonl")
    if not path:
        return {"path": None}
    import sys
    import torch
    now, rank, world = time.perf_counter(), _rank(), int(os.environ.get("WORLD_SIZE", "1"))
    state = {"path": path, "file": open(path, "a", buffering=1) if rank == 0 else None, "start": now, "last": now,
             "first": None, "step": 0, "samples": 0.0, "tokens": 0.0, "rank": rank,
             "per_rank": float(samples) / world if samples else 0.0, "bins": {}, "timed": 0, "max_s": 0.0,
             "backend": _backend(), "wait0": None, "wait": None}
    if rank == 0:
        run = {"balance": "independent"} if os.environ.get("SHMTRAIN_INDEPENDENT") == "1" else {}
        _write(state, type="run", system="pytorch-script", instances=world, threads=torch.get_num_threads(),
               model=os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "script", params=0,
               batch_per_instance=round(float(samples) / world) if samples else 0, torch=torch.__version__,
               backend=state["backend"], first_step=0, **run)
    atexit.register(_end, state)
    return state


def _write(state, **record):
    state["file"].write(json.dumps(record, separators=(",", ":")) + "\n")


def report(step, samples=None, loss=None, tokens=None, accuracy=None, **extra):
    """One train record: the step, the rate since the previous call, the loss.
    `samples`: what the whole job trains in one step (its global batch), as
    the first call says it (the run record's batch)."""
    global _state
    if _state is None:
        _state = _open(samples)
    if _state["path"] is None:
        return
    now = time.perf_counter()
    span = now - _state["last"]
    steps = int(step) - _state["step"]
    if _state["first"] is None:
        _state["first"] = (now, int(step))
        _state["wait0"] = _shm_wait_s(_state["backend"])
    elif steps > 0:
        _time_steps(_state, span, steps)
    waited = _shm_wait_s(_state["backend"]) if _state["wait0"] is not None else None
    if waited is not None:
        _state["wait"] = waited
    if _state["file"] is None:  # another rank: its own pace, told at exit
        _state["last"], _state["step"] = now, int(step)
        return
    record = {"type": "train", "step": int(step), "time_s": round(now - _state["start"], 3)}
    if loss is not None:
        record["loss"] = round(float(loss), 6)
    if accuracy is not None:
        record["accuracy"] = round(float(accuracy), 5)
    if samples is not None:
        _state["samples"] += float(samples) * steps
        record["samples_per_s"] = round(float(samples) * steps / span, 1) if span > 0 else 0.0
    if tokens is not None:
        _state["tokens"] += float(tokens) * steps
        record["tokens_per_s"] = round(float(tokens) * steps / span, 1) if span > 0 else 0.0
    record.update(extra)
    _write(_state, **record)
    _state["last"], _state["step"] = now, int(step)


def _end(state):
    if state["file"] is not None:
        _summary(state)
    _instance(state)


def _instance(state):
    """This rank's steps and samples/s from its first call to its last (the
    first's interval holds the start-up), appended in one write: every rank
    adds its line to the same file."""
    if state["first"] is None:
        return
    t0, s0 = state["first"]
    span, steps = state["last"] - t0, state["step"] - s0
    record = {"type": "instance", "rank": state["rank"], "steps": steps, "compute_s": round(span, 4),
              "samples_per_s": round(state["per_rank"] * steps / span, 1) if span > 0 and steps > 0 else 0.0}
    if state["timed"]:
        record.update(step_p50_s=round(_quantile(state, 0.5), 6), step_p90_s=round(_quantile(state, 0.9), 6),
                      step_max_s=round(state["max_s"], 6))
    if state["wait"] is not None:  # what it waited for its peers is not its compute
        waited = max(0.0, state["wait"] - state["wait0"])
        record.update(wait_s=round(waited, 4), compute_s=round(max(0.0, span - waited), 4))
    fd = os.open(state["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)


def _summary(state):
    train_s = time.perf_counter() - state["start"]
    record = {"type": "summary", "steps": state["step"], "instances": int(os.environ.get("WORLD_SIZE", "1")),
              "batch_per_instance": 0, "total_s": round(train_s, 3), "train_s": round(train_s, 3),
              "samples_per_s": round(state["samples"] / train_s, 1) if train_s > 0 else 0.0}
    if state["tokens"]:
        record["tokens_per_s"] = round(state["tokens"] / train_s, 1)
    _write(state, **record)
    state["file"].close()
