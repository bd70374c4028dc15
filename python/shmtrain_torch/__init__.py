"""shmtrain's shared-memory collectives as a torch.distributed backend.

    torch.distributed.init_process_group("shm")   # under torchrun or shmrun

Installed with pip, the backend "shm" is registered when torch is imported
(the "torch.backends" entry point; `import shmtrain_torch` does it too).
Every rank of a group must be on one machine (the collectives are shared
memory): on several machines, use gloo or MPI between them.

    ddp.register_comm_hook(None, shmtrain_torch.ddp_comm_hook)
                       # DDP's buckets through the segment: one copy in, the
                       # result read in place (docs/torch.md)
    shmtrain_torch.counters()   # what the default group's backend moved
    shmtrain_torch.report(step=..., samples=..., loss=...)
                       # progress for `shmrun --sweep -- python train.py`
    SHMTRAIN_TORCH_BACKEND=shm torchrun ... train.py
                       # every init_process_group of the script takes shm
                       # (Hugging Face's Trainer, whose accelerate names only
                       # gloo or mpi on a CPU); shmtrain_torch.hf.ReportCallback
                       # reports a Trainer's steps to a sweep

What the backend does and refuses: docs/torch.md of the shmtrain repository.
"""
import atexit
import os

import torch
import torch.distributed as dist

from . import _C
from .report import report  # noqa: F401

__all__ = ["BACKEND", "ddp_comm_hook", "counters", "report"]

BACKEND = "shm"


def _create(store, rank, world_size, timeout):
    return _C.create_backend(store, rank, world_size, timeout)


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])
# Before Python finalizes: calls still queued finished, the backends'
# threads ended (ddp_comm_hook's .then callback, dropped by the progress
# thread after the step went on, aborted the process once Python had
# finalized; csrc/backend.cpp, drain_all).
atexit.register(_C.drain)


def _backend_from_sweep():
    """`shmrun --sweep` runs a user's script as it is, over the backend the
    sweep chose (SHMTRAIN_TORCH_BACKEND=shm or gloo): init_process_group
    takes that one in place of the script's.  Set by hand, it runs a script
    whose group another library makes (accelerate) over shm unchanged."""
    chosen = os.environ.get("SHMTRAIN_TORCH_BACKEND")
    if not chosen or getattr(dist.init_process_group, "_shmtrain_sweep", False):
        return
    original = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        return original(chosen, *args, **kwargs)
    init_process_group._shmtrain_sweep = True
    dist.init_process_group = init_process_group


_backend_from_sweep()


def _store_without_libuv():
    """Under shmrun a script's init_process_group meets its peers through
    PyTorch's TCPStore (MASTER_ADDR, MASTER_PORT), which asks for libuv by
    default; a PyTorch built without it (Debian's python3-torch) refuses,
    and the script dies before its first step.  There the older store, as
    PyTorch's own USE_LIBUV=0 asks: only under shmrun, only where the user
    has not set it, only where this PyTorch has no libuv."""
    if "SHMTRAIN_RANK" not in os.environ or "USE_LIBUV" in os.environ:
        return
    try:
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True)
        del store
    except (RuntimeError, TypeError) as e:
        if "libuv" in str(e):
            os.environ["USE_LIBUV"] = "0"


_store_without_libuv()


def _backend(group):
    pg = group if group is not None else dist.group.WORLD
    return pg._get_backend(torch.device("cpu"))


def ddp_comm_hook(state, bucket):
    """A DistributedDataParallel comm hook (`ddp.register_comm_hook(None,
    shmtrain_torch.ddp_comm_hook)`; state: the process group, None for the
    default): the gradients' mean over the group, as DDP's own path computes
    it, with the bucket copied into the shared segment once and the result
    read there in place; at two ranks, DDP's own path (the bucket in place on
    the library's staged ring: the same bytes, no copy into lines not in
    cache; docs/torch.md)."""
    work = _C.hook_allreduce(_backend(state), bucket.buffer(), bucket.index())
    return work.get_future().then(lambda fut: fut.value()[0])


def counters(group=None):
    """What the group's shm backend moved: calls, bytes staged through the
    segment by plain collectives, DDP hook buckets and their bytes copied in
    (or reduced in place: hook_in_place at two ranks, hook_fallbacks where
    the region is too small), the most calls in flight at once, the ranks'
    agreement checks, the reductions gathered and folded because the library
    does not do their dtype or op (gathered_calls), the progress thread's
    wake-ups (a small call run in the caller's thread wakes it only when a
    call was queued meanwhile)."""
    return dict(_C.counters(_backend(group)))
