"""send and recv over the torch.distributed backend "shm" against gloo.

    python tests/torch/test_shm_p2p.py p2p   (ctest: torch_shm_p2p)

At 2, 3 and 4 ranks in the same processes over shm and over gloo: a ring of
isend/irecv of every dtype from an empty tensor to past a ring of the
inbox (256 KiB), posted receive first; both neighbours at once; blocking
send and recv in rank order; non-contiguous tensors on both sides; a tag;
a sub-group's ranks; the received bits equal gloo's and the sender's; the
bytes counted.  A recv of the wrong size refused by name and the message
kept for the right one; recv from any source refused by name.
torch.distributed.pipelining's GPipe and 1F1B schedules training over shm
and over gloo: the same losses and parameters to the bit.  A peer killed
with a recv outstanding raises DistBackendError from wait(), and /dev/shm
is left clean; a rank leaving with an irecv nobody matches exits at once.

Exits 77 (skipped) where torch or the built extension cannot be imported
(shm_common.py).
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

from shm_common import dist, free_port, mp, names_left, same, shm_beside_gloo, shmtrain_torch, torch

try:
    from torch.distributed import pipelining
except ImportError:  # before PyTorch 2.4: the pipeline checks are skipped, by name
    pipelining = None

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8,
          torch.bool]
SIZES = [0, 1, 1003, 300_001]  # the last past an inbox's 256 KiB ring in every dtype but the 1-byte ones


def payload(rank, n, dtype, salt):
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + salt) % 251
    return (v % 2).to(dtype) if dtype == torch.bool else v.to(dtype)


def exchange(group, ops):
    for w in dist.batch_isend_irecv([dist.P2POp(op, t, peer, group=group, tag=tag) for op, t, peer, tag in ops]):
        w.wait()


def check_rings(shm, gloo, rank, world):
    """Each rank's payload to the next, received from the previous, over both
    backends; receives posted first (a backend that ran them in order would hang)."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    sent = 0
    for dtype in DTYPES:
        for n in SIZES:
            got = {}
            for name, group in (("shm", shm), ("gloo", gloo)):
                got[name] = torch.empty(n, dtype=dtype)
                exchange(group, [(dist.irecv, got[name], prv, 0), (dist.isend, payload(rank, n, dtype, n), nxt, 0)])
            same(got["shm"], got["gloo"], f"ring {dtype} n={n}")
            same(got["shm"], payload(prv, n, dtype, n), f"ring {dtype} n={n}: not the sender's")
            sent += got["shm"].nbytes
    return sent


def check_shapes(shm, rank, world):
    """Both neighbours at once, non-contiguous on both sides, a tag, blocking calls."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    src = (torch.arange(600.0) + 1000 * rank).view(20, 30)
    a, b = torch.zeros(30, 20).t(), torch.zeros(20, 30)  # a: a transposed view
    exchange(shm, [(dist.irecv, a, prv, 7), (dist.irecv, b, nxt, 8),
                   (dist.isend, src[:, :].t().contiguous().t(), nxt, 7), (dist.isend, src * 2, prv, 8)])
    same(a, (torch.arange(600.0) + 1000 * prv).view(20, 30), "from the previous rank into a transposed view")
    same(b, 2 * (torch.arange(600.0) + 1000 * nxt).view(20, 30), "from the next rank")
    strided = torch.arange(1000.0)[::3]  # a strided send
    back = torch.zeros(strided.numel())
    if rank == 0:
        dist.send(strided, dst=1, group=shm)
        dist.recv(back, src=1, group=shm)
    elif rank == 1:
        dist.recv(back, src=0, group=shm)
        dist.send(back * -1, dst=0, group=shm)
    if rank < 2:
        same(back, strided * (1 if rank == 1 else -1), "blocking send and recv of a strided tensor")
    return a.nbytes + b.nbytes + (back.nbytes if rank < 2 else 0)


def check_refusals(shm, rank):
    """Another size refused by name and the message kept; any source refused."""
    if rank == 0:
        dist.send(torch.arange(4.0), dst=1, group=shm)
    elif rank == 1:
        try:
            dist.recv(torch.zeros(5), src=0, group=shm)
            raise AssertionError("a recv of 5 floats took a message of 4")
        except dist.DistBackendError as e:
            assert "expects 20 bytes with tag 0 from rank 0, whose next message is 16 bytes" in str(e), e
        kept = torch.zeros(4)
        dist.recv(kept, src=0, group=shm)
        same(kept, torch.arange(4.0), "the message kept after the refusal")
    try:
        dist.recv(torch.zeros(1), group=shm)
        raise AssertionError("recv from any source accepted")
    except RuntimeError as e:
        assert "does not support recvAnysource" in str(e), e
    return 16 if rank == 1 else 0


def p2p_rank(rank, world, port):
    shm, gloo = shm_beside_gloo(rank, world, port)
    before = shmtrain_torch.counters(shm)
    got = check_rings(shm, gloo, rank, world) + check_shapes(shm, rank, world) + check_refusals(shm, rank)
    c = shmtrain_torch.counters(shm)
    assert c["p2p_received_bytes"] - before["p2p_received_bytes"] == got, (got, c)
    if world >= 3:  # a sub-group of ranks 1 and 2: peers named by their global ranks
        pair = dist.new_group(ranks=[1, 2], backend="shm")
        if rank in (1, 2):
            t = torch.full((3,), float(rank))
            exchange(pair, [(dist.irecv, t, 3 - rank, 0), (dist.isend, torch.full((3,), float(rank)), 3 - rank, 0)])
            same(t, torch.full((3,), float(3 - rank)), "a sub-group's exchange")
    dist.barrier()
    dist.destroy_process_group()


def pipeline_rank(rank, world, port, backend, schedule, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=120))
    torch.manual_seed(0)
    stages = [torch.nn.Sequential(torch.nn.Linear(96, 96), torch.nn.Tanh()) for _ in range(world)]
    stage = pipelining.PipelineStage(stages[rank], rank, world, torch.device("cpu"))
    sched = getattr(pipelining, schedule)(stage, n_microbatches=4, loss_fn=lambda o, y: ((o - y) ** 2).mean())
    opt = torch.optim.SGD(stages[rank].parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(6):
        x, y = torch.randn(32, 96, generator=g), torch.randn(32, 96, generator=g)
        opt.zero_grad()
        step_losses = []
        sched.step(*([x] if rank == 0 else []), **({"target": y, "losses": step_losses} if rank == world - 1 else {}))
        opt.step()
        losses += [v.item() for v in step_losses]
    torch.save({"losses": losses, "params": [p.detach() for p in stages[rank].parameters()]}, f"{out}.{rank}")
    dist.destroy_process_group()


def pipelines(d):
    if pipelining is None:
        print(f"p2p: skipped the pipelines: PyTorch {torch.__version__} has no torch.distributed.pipelining (2.4+)")
        return
    for world, schedule in ((2, "ScheduleGPipe"), (3, "Schedule1F1B")):
        runs = {}
        for backend in ("shm", "gloo"):
            mp.spawn(pipeline_rank, args=(world, free_port(), backend, schedule, os.path.join(d, backend)),
                     nprocs=world)
            runs[backend] = [torch.load(os.path.join(d, f"{backend}.{r}")) for r in range(world)]
        last = runs["shm"][world - 1]["losses"]
        assert len(last) == 24 and last == runs["gloo"][world - 1]["losses"], (last, runs["gloo"][world - 1])
        for r in range(world):
            for k, (a, b) in enumerate(zip(runs["shm"][r]["params"], runs["gloo"][r]["params"])):
                same(a, b, f"{schedule}: stage {r}'s parameter {k}")
        print(f"p2p: torch.distributed.pipelining {schedule} at {world} ranks: 6 steps, the losses "
              f"({last[0]:.4f} .. {last[-1]:.4f}) and every stage's parameters gloo's to the bit", flush=True)


def deserted_rank(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("shm", rank=rank, world_size=2, timeout=timedelta(seconds=30))
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    w = dist.irecv(torch.zeros(8), src=1)
    t0 = time.time()
    try:
        w.wait()
        raise AssertionError("a recv from a dead peer completed")
    except dist.DistBackendError as e:
        assert "receive from rank 1" in str(e) and "died" in str(e), e
    with open(out, "w") as f:
        f.write(f"{time.time() - t0:.2f}")


def leaving_rank(rank, port, out):
    """Rank 0 leaves with an irecv nobody will match while rank 1 lives on."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("shm", rank=rank, world_size=2, timeout=timedelta(seconds=120))
    dist.barrier()
    if rank == 0:
        dist.irecv(torch.zeros(8), src=1)
        with open(out, "w") as f:
            f.write(f"{time.time()}")
        return  # the interpreter's exit: the backend's drain cancels the waiting recv
    while not os.path.exists(out):
        time.sleep(0.01)
    time.sleep(3)  # alive well past rank 0's exit


def leaving(d):
    port, out = free_port(), os.path.join(d, "leaving")
    procs = [subprocess.Popen([sys.executable, __file__, "leaving-rank", str(r), str(port), out]) for r in range(2)]
    code = procs[0].wait(timeout=110)
    took = time.time() - float(open(out).read())
    assert code == 0 and procs[1].poll() is None and took < 2.9, (code, procs[1].poll(), took)
    assert procs[1].wait(timeout=60) == 0
    print(f"p2p: a rank leaving with an unmatched irecv exits {took:.2f} s after it (its peer alive; the group's "
          "timeout 120 s)", flush=True)


def deserted(d):
    before = set(os.listdir("/dev/shm"))
    port = free_port()
    out = os.path.join(d, "deserted")
    procs = [subprocess.Popen([sys.executable, __file__, "deserted-rank", str(r), str(port), out]) for r in range(2)]
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [0, -signal.SIGKILL], codes
    left = names_left(before, [procs[0].pid])
    assert not left, left
    print(f"p2p: a peer killed with a recv outstanding: DistBackendError from wait() after {open(out).read()} s; "
          "/dev/shm clean", flush=True)


def p2p():
    for world in (2, 3, 4):
        t0 = time.time()
        mp.spawn(p2p_rank, args=(world, free_port()), nprocs=world)
        print(f"p2p: {world} ranks: rings of isend/irecv of every dtype, both neighbours, blocking, strided, a tag, "
              f"a sub-group: gloo's bits; the wrong size refused and the message kept ({time.time() - t0:.1f} s)",
              flush=True)
    with tempfile.TemporaryDirectory() as d:
        pipelines(d)
        deserted(d)
        leaving(d)


if __name__ == "__main__":
    if sys.argv[1] in ("deserted-rank", "leaving-rank"):
        (deserted_rank if sys.argv[1] == "deserted-rank" else leaving_rank)(int(sys.argv[2]), int(sys.argv[3]),
                                                                          sys.argv[4])
    else:
        {"p2p": p2p}[sys.argv[1]]()
