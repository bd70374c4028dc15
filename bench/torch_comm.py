"""The peers' gradient all-reduce, timed: DDP's default (average over the
bucket) registered as a comm hook that adds each bucket's time in flight to
InFlight.seconds.  bench/torch_ddp.py and bench/torch_gpt.py use it, over
gloo or over shmtrain's "shm" backend (--backend).

Over shm the hook is shmtrain_torch.ddp_comm_hook (from three ranks the
bucket copied into the segment once, the result read there; at two, in
place on the staged ring; SHMTRAIN_TORCH_HOOK=0: the plain all_reduce
instead).  Both backends' calls are asynchronous, so the time in
flight overlaps the rest of backward; what backward waited for at its end
(from the last bucket's call to backward's return) is InFlight.exposed:
the exchange's exposed share of the step; over shm, InFlight.exposed_peer_wait
is the part of it the library spent waiting for a slower rank.
"""
import json
import os
import time

import torch.distributed as dist


def _peer_wait_s():
    """Over shm, the library's seconds blocked waiting for peers so far
    (shmtrain_torch.counters()["wait_ns"], as of the last call's end);
    None over gloo, which has no such count."""
    if dist.get_backend() != "shm":
        return None
    import shmtrain_torch
    return shmtrain_torch.counters()["wait_ns"] * 1e-9


class InFlight:
    """Seconds DDP's all-reduces were in flight, summed over buckets; the
    part of them backward waited for at its end, and of that part, over shm,
    what the library spent waiting for the other ranks (a slower peer's
    backward, not the exchange's own work)."""
    seconds = 0.0
    exposed = 0.0
    exposed_peer_wait = 0.0
    last_call = None
    wait_at_call = None

    @classmethod
    def after_backward(cls):
        """Call when loss.backward() returns."""
        if cls.last_call is not None:
            cls.exposed += time.perf_counter() - cls.last_call
            cls.last_call = None
            if cls.wait_at_call is not None:
                cls.exposed_peer_wait += _peer_wait_s() - cls.wait_at_call


def _plain(state, bucket):
    buf = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def _choose():
    if dist.get_backend() == "shm" and os.environ.get("SHMTRAIN_TORCH_HOOK", "1") != "0":
        import shmtrain_torch
        return shmtrain_torch.ddp_comm_hook
    return _plain


_hook = None


def timed_allreduce_hook(state, bucket):
    global _hook
    if _hook is None:
        _hook = _choose()
    t0 = time.perf_counter()
    InFlight.last_call = t0
    InFlight.wait_at_call = _peer_wait_s()
    fut = _hook(state, bucket)

    def done(f):
        InFlight.seconds += time.perf_counter() - t0
        return f.value()
    return fut.then(done)


def init(backend, init_method, rank, world):
    """init_process_group over gloo or shm (importing shmtrain_torch registers it)."""
    if backend == "shm":
        import shmtrain_torch  # noqa: F401
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world)


def independent_run():
    """The run record's fields for `shmrun --sweep`'s ceiling run
    (SHMTRAIN_INDEPENDENT=1: the backend keeps every all-reduce in its rank,
    so each trains alone), as shmtrain's run record says it; {} otherwise."""
    return {"balance": "independent"} if os.environ.get("SHMTRAIN_INDEPENDENT") == "1" else {}


def own_speed(path, rank, steps, samples, seconds):
    """In the ceiling run, each rank's own `instance` record (shmtrain's: its
    steps and samples/s over its training time), appended to the run's
    metrics file: the sweep sums them (rank 0's pace times N would hide the
    slowest).  Rank 0's file is opened for appending too, so no line is
    written over."""
    if path and independent_run() and seconds > 0:
        with open(path, "a") as f:
            f.write(json.dumps({"type": "instance", "rank": rank, "steps": steps,
                                "samples_per_s": round(samples / seconds, 1)}, separators=(",", ":")) + "\n")
