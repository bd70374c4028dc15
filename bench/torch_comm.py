"""The peers' gradient all-reduce, timed: DDP's default (average over the
bucket) registered as a comm hook that adds each bucket's time in flight to
InFlight.seconds.  bench/torch_ddp.py and bench/torch_gpt.py use it, over
gloo or over shmtrain's "shm" backend (--backend).

gloo runs the all-reduce on its own thread, so its time in flight overlaps
the rest of backward; shm's completes inside the call (the library's
collectives block), so its time in flight is time the backward waited.
"""
import time

import torch.distributed as dist


class InFlight:
    """Seconds DDP's all-reduces were in flight, summed over buckets."""
    seconds = 0.0


def timed_allreduce_hook(state, bucket):
    t0 = time.perf_counter()
    buf = bucket.buffer().div_(dist.get_world_size())
    fut = dist.all_reduce(buf, async_op=True).get_future()

    def done(f):
        InFlight.seconds += time.perf_counter() - t0
        return f.value()[0]
    return fut.then(done)


def init(backend, init_method, rank, world):
    """init_process_group over gloo or shm (importing shmtrain_torch registers it)."""
    if backend == "shm":
        import shmtrain_torch  # noqa: F401
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world)
