"""shmtrain's shared-memory collectives as a torch.distributed backend.

    import shmtrain_torch   # registers the backend "shm" for CPU tensors
    torch.distributed.init_process_group("shm")   # under torchrun or shmrun

Every rank of a group must be on one machine (the collectives are shared
memory): on several machines, use gloo or MPI between them.  What the backend
does and refuses: docs/torch.md of the shmtrain repository.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND"]

BACKEND = "shm"


def _create(store, rank, world_size, timeout):
    return _C.create_backend(store, rank, world_size, timeout)


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])
