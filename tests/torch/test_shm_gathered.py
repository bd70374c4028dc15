"""The reductions the library does not do, over the torch.distributed backend "shm", against gloo.

    python tests/torch/test_shm_gathered.py gathered   (ctest: torch_shm_gathered)

A script written for gloo reduces flags, masks and counters of any integer
type and bool, with PRODUCT and the bitwise ops; shm gathers every rank's
tensor and folds it in rank order (python/shmtrain_torch/csrc/gathered.h).
At 2, 3 and 4 ranks over shm and over gloo in the same processes: all_reduce
of every dtype and op gloo takes, from an empty tensor to past the 4 MiB
staging area, equal to gloo's bits and to the fold of every rank's input
computed here (int16, which gloo refuses, against the fold alone); integer
sums that wrap; reduce, reduce_scatter and reduce_scatter_tensor; each call
counted on the gathered path and the library's calls not.  Refused by name
in the caller: AVG of integers, bitwise ops of floats, float8 tensors.
Ranks whose calls differ (a count, or a dtype one path takes and the other
not) are refused on every rank, and the group goes on.

Exits 77 (skipped) where torch or the built extension cannot be imported
(shm_common.py).
"""
import sys
import time

from shm_common import dist, free_port, mp, same, shm_beside_gloo, shmtrain_torch, torch

R = dist.ReduceOp
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
OPS = [R.SUM, R.PRODUCT, R.MAX, R.MIN, R.BAND, R.BOR, R.BXOR]
SIZES = [0, 1, 1003, 300_001]  # the last past the 4 MiB staging area gathered at 4 ranks from int32 up


def payload(rank, n, dtype, op, salt):
    """Each rank's own values: small for PRODUCT (every product exact in every dtype), wide for the integer sums
    (so they wrap), both signs."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return (i * 5 + rank * 3 + salt) % 7 < 3
    if op == R.PRODUCT:
        v = (i * 7 + rank * 5 + salt) % 5 - 2
    else:
        v = (i * 37 + rank * 91 + salt) % 251 - 120
    return v.to(dtype)


def fold(tensors, op):
    """The definition: every rank's tensor folded in rank order, in the dtype (integers wrap)."""
    acc = tensors[0].clone()
    for t in tensors[1:]:
        if op == R.SUM:
            acc.add_(t)
        elif op == R.PRODUCT:
            acc.mul_(t)
        elif op == R.MAX:
            torch.maximum(acc, t, out=acc)
        elif op == R.MIN:
            torch.minimum(acc, t, out=acc)
        else:
            {R.BAND: acc.bitwise_and_, R.BOR: acc.bitwise_or_, R.BXOR: acc.bitwise_xor_}[op](t)
    return acc


def gathered_calls(shm):
    return shmtrain_torch.counters(shm)["gathered_calls"]


def cases():
    for dtype in INTS + [torch.bool] + FLOATS:
        for op in OPS:
            library = op in (R.SUM, R.MAX, R.MIN) and dtype in (torch.int32, torch.int64) + tuple(FLOATS)
            if dtype.is_floating_point and op in (R.BAND, R.BOR, R.BXOR):
                continue
            yield dtype, op, library


def check_allreduce(shm, gloo, rank, world):
    for n in SIZES:
        for salt, (dtype, op, library) in enumerate(cases()):
            a = payload(rank, n, dtype, op, salt)
            before = gathered_calls(shm)
            dist.all_reduce(a, op=op, group=shm)
            assert gathered_calls(shm) - before == (0 if library else 1), (dtype, op, gathered_calls(shm) - before)
            if library:  # the library's own paths: against gloo in torch_shm_ops, on inputs every order sums exactly
                continue
            same(a, fold([payload(q, n, dtype, op, salt) for q in range(world)], op),
                 f"all_reduce {dtype} {op} n={n} against the fold in rank order")
            if dtype != torch.int16:  # gloo refuses int16 outright
                b = payload(rank, n, dtype, op, salt)
                dist.all_reduce(b, op=op, group=gloo)
                same(a, b, f"all_reduce {dtype} {op} n={n} against gloo")
    big = (5 << 20) + 3  # a byte mask past the 4 MiB staging area at every world
    a = payload(rank, big, torch.bool, R.BOR, 2)
    dist.all_reduce(a, op=R.BOR, group=shm)
    same(a, fold([payload(q, big, torch.bool, R.BOR, 2) for q in range(world)], R.BOR), f"a {big}-element mask")
    # a non-contiguous mask, written back in place
    a = payload(rank, 12 * 5, torch.uint8, R.BOR, 1).view(12, 5).t()
    dist.all_reduce(a, op=R.BOR, group=shm)
    same(a, fold([payload(q, 60, torch.uint8, R.BOR, 1).view(12, 5).t() for q in range(world)], R.BOR),
         "all_reduce of a transposed uint8 view")


def check_others(shm, rank, world):
    n = 1003
    for root in range(world):
        x = payload(rank, n, torch.uint8, R.PRODUCT, root)
        a = x.clone()
        dist.reduce(a, root, op=R.PRODUCT, group=shm)
        same(a, fold([payload(q, n, torch.uint8, R.PRODUCT, root) for q in range(world)], R.PRODUCT)
             if rank == root else x, f"reduce PRODUCT to {root}")
    for dtype, op in ((torch.bool, R.BOR), (torch.int8, R.SUM), (torch.float32, R.PRODUCT), (torch.int64, R.BXOR)):
        for m in (0, 7, 300_001):
            ins = [[payload(p * world + q, m, dtype, op, 4) for q in range(world)] for p in range(world)]
            want = fold([ins[p][rank] for p in range(world)], op)
            before = gathered_calls(shm)
            out = torch.empty(m, dtype=dtype)
            dist.reduce_scatter_tensor(out, torch.cat(ins[rank]), op=op, group=shm)
            same(out, want, f"reduce_scatter_tensor {dtype} {op} n={m}")
            out = torch.empty(m, dtype=dtype)
            dist.reduce_scatter(out, ins[rank], op=op, group=shm)
            same(out, want, f"reduce_scatter {dtype} {op} n={m}")
            assert gathered_calls(shm) - before == 2, (dtype, op, gathered_calls(shm) - before)


def refused(call, words):
    try:
        call()
    except (RuntimeError, ValueError) as e:
        assert all(w in str(e) for w in words), (words, str(e))
        return
    raise AssertionError(f"accepted: {words}")


def check_refusals(shm, rank):
    before = gathered_calls(shm)
    refused(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=R.AVG, group=shm),
            ["all_reduce", "reduce op AVG", "Int"])
    refused(lambda: dist.all_reduce(torch.ones(3), op=R.BXOR, group=shm), ["reduce op BXOR", "Float"])
    refused(lambda: dist.all_reduce(torch.ones(3, dtype=torch.float8_e5m2), group=shm),
            ["Float8_e5m2", "not supported"])
    refused(lambda: dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * dist.get_world_size(shm)),
                                               op=R.BAND, group=shm), ["reduce_scatter_tensor", "BAND"])
    # ranks whose calls differ, each way: refused on every rank, and the group goes on
    n = 10 + (rank == 0)
    refused(lambda: dist.all_reduce(torch.ones(n, dtype=torch.uint8), op=R.PRODUCT, group=shm),
            ["the ranks' calls differ", f"rank {rank} called it with {n} elements"])
    t = torch.ones(4, dtype=torch.uint8 if rank == 0 else torch.int32)
    refused(lambda: dist.all_reduce(t, group=shm), ["the ranks' calls differ"])
    assert gathered_calls(shm) == before, (before, gathered_calls(shm))  # nothing ran: each refused at its agreement
    x = torch.tensor([rank == 1, False])
    dist.all_reduce(x, op=R.MAX, group=shm)  # "has any rank stopped?"
    same(x, torch.tensor([True, False]), "a flag after the refusals")


def gathered_rank(rank, world, port):
    shm, gloo = shm_beside_gloo(rank, world, port)
    check_allreduce(shm, gloo, rank, world)
    check_others(shm, rank, world)
    check_refusals(shm, rank)
    dist.destroy_process_group()


def gathered():
    for world in (2, 3, 4):
        t0 = time.time()
        mp.spawn(gathered_rank, args=(world, free_port()), nprocs=world)
        print(f"gathered: {world} ranks: every reduction gloo does, gloo's bits and the fold in rank order; "
              f"refusals by name ({time.time() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    {"gathered": gathered}[sys.argv[1]]()
