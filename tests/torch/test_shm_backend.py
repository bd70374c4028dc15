"""The torch.distributed backend "shm" (python/shmtrain_torch) against gloo.

    python tests/torch/test_shm_backend.py ops|ddp|fault|launch_shmrun|launch_torchrun   (ctest runs each)

ops     every collective on the same inputs over shm and over gloo in the same
        processes, at 2, 3 and 4 ranks: every dtype and op the backend takes,
        sizes from one element to past a staging area, non-contiguous tensors,
        a sub-group (new_group) beside the default group; gloo's results and
        shm's equal to the bit (inputs small integers: every order exact)
ddp     DistributedDataParallel training of the peers' resnet and gpt-mini for
        20 steps over shm and over gloo at 2 ranks (the same sums, so the same
        bits) and 2 x b against 1 x 2b (another order: close)
fault   a rank killed, then a rank stopped, mid all_reduce: the others raise
        DistBackendError within the group's timeout, naming it; nothing left
        in /dev/shm
launch_shmrun, launch_torchrun
        under shmrun (which sets torchrun's variables and MASTER_ADDR/PORT),
        or under torchrun: the default group over shm from the environment,
        send/recv refused by name, torch.distributed.checkpoint save + load

Exits 77 (skipped) where torch or the built extension cannot be imported, or
(launch_torchrun) where this PyTorch's torchrun cannot start without libuv
(Debian's python3-torch); 1 where the extension is there but does not load
(an undefined symbol).
"""
import gc
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)
try:
    import shmtrain_torch  # registers "shm"
except ImportError as e:
    # not built is a skip; built and not loading (an undefined symbol) is a failure
    if "undefined symbol" in str(e) or getattr(e, "name", None) != "shmtrain_torch":
        print(f"FAIL: the built extension does not load: {e}")
        sys.exit(1)
    print(f"skipped: {e}")
    sys.exit(77)

def store_without_libuv():
    """PyTorch asks for a libuv TCPStore by default; builds without libuv
    (Debian's python3-torch) refuse it: then the older store, as USE_LIBUV=0
    says.  True where this PyTorch has no libuv."""
    try:
        dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True)
    except (RuntimeError, TypeError) as e:
        if "libuv" in str(e):
            os.environ.setdefault("USE_LIBUV", "0")
            return True
    return False


NO_LIBUV = store_without_libuv()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN]
SIZES = [1, 7, 1003, (5 << 20) // 4 + 3]  # the last past the 4 MiB staging area in float32


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def names_left(before, pids):
    """The segment names in /dev/shm, not there before, of the jobs whose
    rank 0 had one of these pids (the backend's job ids are
    "pt<pid>-<random>"): the tests beside this one in a parallel ctest make
    theirs meanwhile."""
    mine = tuple(f"shmtrain.{os.getuid()}.pt{p}-" for p in pids)
    return [n for n in set(os.listdir("/dev/shm")) - before if n.startswith(mine)]


def inputs(rank, n, dtype, salt):
    """Small integers, each rank's own: every sum of them exact in every dtype."""
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + salt) % 17 - 8
    return v.to(dtype)


def same(a, b, what):
    if not torch.equal(a, b):
        bad = (a != b).nonzero()[:3].flatten().tolist()
        raise AssertionError(f"{what}: shm and gloo differ at {bad}: {a.flatten()[:6]} vs {b.flatten()[:6]}")


def check_allreduce(shm, gloo, rank, world):
    for n in SIZES:
        for dtype in DTYPES:
            for op in OPS:
                a, b = inputs(rank, n, dtype, int(op)), inputs(rank, n, dtype, int(op))
                dist.all_reduce(a, op=op, group=shm)
                dist.all_reduce(b, op=op, group=gloo)
                same(a, b, f"all_reduce {dtype} {op} n={n}")
            if dtype.is_floating_point:  # gloo has no AVG: its SUM, divided, is the definition here
                a = inputs(rank, n, dtype, 5)
                b = inputs(rank, n, torch.float64 if dtype == torch.float64 else torch.float32, 5)
                dist.all_reduce(a, op=dist.ReduceOp.AVG, group=shm)
                dist.all_reduce(b, group=gloo)
                same(a, (b / world).to(dtype), f"all_reduce {dtype} AVG n={n}")
    # non-contiguous: a transposed view reduces as its values, written back in place
    a = inputs(rank, 12 * 5, torch.float32, 3).view(12, 5).t()
    b = a.clone()
    dist.all_reduce(a, group=shm)
    dist.all_reduce(b, group=gloo)
    same(a, b, "all_reduce of a transposed view")
    try:  # refused by name, never approximated
        dist.all_reduce(torch.ones(3, dtype=torch.uint8), group=shm)
        raise AssertionError("uint8 accepted")
    except RuntimeError as e:
        assert "Byte" in str(e), e
    try:
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.PRODUCT, group=shm)
        raise AssertionError("PRODUCT accepted")
    except RuntimeError as e:
        assert "reduce op" in str(e), e


def check_others(shm, gloo, rank, world):
    for n in (1, 1003, (5 << 20) // 4 + 3):
        for root in range(world):
            a, b = inputs(rank, n, torch.float32, root), inputs(rank, n, torch.float32, root)
            dist.broadcast(a, root, group=shm)
            dist.broadcast(b, root, group=gloo)
            same(a, b, f"broadcast from {root}")
        x = inputs(rank, n, torch.int64, 1)
        outs_a = [torch.empty_like(x) for _ in range(world)]
        outs_b = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(outs_a, x, group=shm)
        dist.all_gather(outs_b, x, group=gloo)
        for q in range(world):
            same(outs_a[q], outs_b[q], f"all_gather n={n} from {q}")
        flat = torch.empty(world * n, dtype=torch.int64)
        dist.all_gather_into_tensor(flat, x, group=shm)
        same(flat, torch.cat(outs_b), "all_gather_into_tensor")
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
            ins = [inputs(rank * world + q, n, torch.float32, 2) for q in range(world)]
            out_a = torch.empty(n)
            dist.reduce_scatter(out_a, ins, op=op, group=shm)
            whole = torch.cat(ins)  # gloo's all_reduce, this rank's part: gloo's reduce_scatter is 2.6+ only
            dist.all_reduce(whole, op=op, group=gloo)
            out_b = whole[rank * n:(rank + 1) * n]
            same(out_a, out_b, f"reduce_scatter {op} n={n}")
            out_c = torch.empty(n)
            dist.reduce_scatter_tensor(out_c, torch.cat(ins), op=op, group=shm)
            same(out_c, out_b, f"reduce_scatter_tensor {op} n={n}")
    for root in range(world):
        x = inputs(rank, 33, torch.float32, root)
        a, b = x.clone(), x.clone()
        dist.reduce(a, root, group=shm)
        dist.reduce(b, root, group=gloo)
        if rank == root:
            same(a, b, f"reduce to {root}")
        else:
            same(a, x, f"reduce to {root}: a non-root's tensor untouched")
        got = [torch.empty(33) for _ in range(world)] if rank == root else None
        dist.gather(x, got, dst=root, group=shm)
        if rank == root:
            for q in range(world):
                same(got[q], inputs(q, 33, torch.float32, root), f"gather to {root} from {q}")
        out = torch.empty(5)
        dist.scatter(out, [torch.full((5,), float(q * 10 + root)) for q in range(world)] if rank == root else None,
                     src=root, group=shm)
        same(out, torch.full((5,), float(rank * 10 + root)), f"scatter from {root}")
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "w": [rank] * 3}, group=shm)
    assert objs == [{"rank": q, "w": [q] * 3} for q in range(world)], objs
    dist.barrier(group=shm)


def ops_rank(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    shm = dist.new_group(backend="shm")
    gloo = dist.new_group(backend="gloo")
    check_allreduce(shm, gloo, rank, world)
    check_others(shm, gloo, rank, world)
    if world >= 3:  # a sub-group of the first two ranks: only they reduce, among themselves
        pair = dist.new_group(ranks=[0, 1], backend="shm")
        if rank < 2:
            x = torch.full((4,), float(rank + 1))
            dist.all_reduce(x, group=pair)
            same(x, torch.full((4,), 3.0), "a sub-group's all_reduce")
    dist.destroy_process_group()


def ops():
    for world in (2, 3, 4):
        t0 = time.time()
        mp.spawn(ops_rank, args=(world, free_port()), nprocs=world)
        print(f"ops: {world} ranks: every collective equal to gloo's ({time.time() - t0:.1f} s)", flush=True)


# ---------------------------------------------------------------- DDP --

def resnet_batch(step, rank, world, b):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(world * b, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (world * b,), generator=g)
    return x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]


def gpt_batch(step, rank, world, b, context=64):
    g = torch.Generator().manual_seed(2000 + step)
    ids = torch.randint(0, 96, (world * b, context + 1), generator=g)
    ids = ids[rank * b:(rank + 1) * b]
    return ids[:, :-1], ids[:, 1:]


def build(name):
    torch.manual_seed(7)
    if name == "resnet":
        import torch_models
        return torch_models.build("resnet"), resnet_batch
    import torch_gpt
    torch_gpt.VOCAB = 96
    return torch_gpt.GPT(2, 4, 64, 64), gpt_batch


def sgd_step(net, opt, x, y):
    """One training step of a DDP model on a batch (images or token windows)."""
    logits = net(x)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()


def ddp_rank(rank, world, port, backend, name, b, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world)
    model, batch = build(name)
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for step in range(20):
        sgd_step(net, opt, *batch(step, rank, world, b))
    if rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()], out)
    # Tear down as PyTorch's DDP tutorial does, every rank at once and the
    # DDP wrapper (which holds the group) gone before the group: a gloo rank
    # once aborted in teardown in CI ("terminate called without an active
    # exception", never seen in 37 runs here, loaded or not).
    dist.barrier()
    del net, opt
    gc.collect()
    dist.destroy_process_group()


def train(world, backend, name, b, out):
    try:
        mp.spawn(ddp_rank, args=(world, free_port(), backend, name, b, out), nprocs=world)
    except mp.ProcessExitedException as e:
        # gloo is the reference here, not under test: a gloo rank killed by
        # its own abort (the signal, not an exit code or an exception of
        # ours) gets one more run; shm's ranks never do.
        if backend != "gloo" or e.signal_name != "SIGABRT":
            raise
        print(f"ddp: {name}: a gloo rank aborted ({e}); gloo run again", flush=True)
        mp.spawn(ddp_rank, args=(world, free_port(), backend, name, b, out), nprocs=world)
    return torch.load(out)


def ddp():
    import tempfile
    d = tempfile.mkdtemp()
    for name in ("resnet", "gpt-mini"):
        t0 = time.time()
        shm = train(2, "shm", name, 4, os.path.join(d, "shm.pt"))
        gloo = train(2, "gloo", name, 4, os.path.join(d, "gloo.pt"))
        for k, (a, b) in enumerate(zip(shm, gloo)):
            same(a, b, f"{name}: parameter {k} after 20 DDP steps")  # two ranks: a + b either way
        note = ""
        if name == "gpt-mini":  # resnet's batch norm takes its statistics over each rank's batch: b is not 2b
            one = train(1, "shm", name, 8, os.path.join(d, "one.pt"))
            worst = max(float((a - c).abs().max() / (c.abs().max() + 1e-12)) for a, c in zip(shm, one))
            assert worst < 1e-4, f"{name}: 2 x 4 and 1 x 8 differ by {worst:.2e} of a parameter's scale"
            note = f"; 2 x 4 vs 1 x 8 within {worst:.1e} of a parameter's scale"
        print(f"ddp: {name}: shm equal to gloo to the bit after 20 steps{note} ({time.time() - t0:.1f} s)",
              flush=True)


# -------------------------------------------------------------- faults --

def fault_rank(rank, world, port, how, job_file):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    timeout = 20 if how == "killed" else 4  # a stopped peer is only seen as silence: the timeout is the test
    # The join shares that timeout: under a loaded suite, importing torch
    # alone took a rank past 4 s while its peers waited in the join (a
    # failure at 6.3 s in a parallel ctest).  Meet first, then join.
    open(f"{job_file}.ready{rank}", "w").close()
    deadline = time.time() + 120
    while not all(os.path.exists(f"{job_file}.ready{r}") for r in range(world)) and time.time() < deadline:
        time.sleep(0.01)
    dist.init_process_group("shm", rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
    x = torch.ones(1 << 18)
    dist.all_reduce(x)
    if rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    t0 = time.time()
    try:
        for _ in range(100000):
            dist.all_reduce(x)
        raise AssertionError("the survivors never noticed")
    except dist.DistBackendError as e:
        took = time.time() - t0
        assert f"rank {world - 1}" in str(e), str(e)
        assert took < timeout + 2, took
        with open(f"{job_file}.{rank}", "w") as f:
            f.write(f"{took:.2f}")


def fault_run(how):
    """Ranks as separate processes (torch.multiprocessing would stop the
    others itself when one dies)."""
    import glob
    import tempfile
    d = tempfile.mkdtemp()
    before = set(os.listdir("/dev/shm"))
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "fault-rank", str(r), "3", str(port), how,
                               os.path.join(d, "out")]) for r in range(3)]
    codes = [p.wait(timeout=120) for p in procs[:2]]
    if how == "stopped":  # the survivors are done: the stopped rank goes now
        procs[2].kill()
    codes.append(procs[2].wait(timeout=60))
    took = sorted(float(open(p).read()) for p in glob.glob(os.path.join(d, "out.[0-9]*")))
    assert codes[:2] == [0, 0] and codes[2] == -signal.SIGKILL, codes
    assert len(took) == 2, f"{len(took)} survivors raised"
    left = names_left(before, [procs[0].pid])
    assert not left, left
    print(f"fault: a {how} rank 2: both survivors raised DistBackendError naming it after {took} s; "
          "/dev/shm clean", flush=True)


def fault():
    fault_run("killed")
    fault_run("stopped")


# --------------------------------------------------------------- async --

def async_rank(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("shm", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    # returns before it completes: rank 1 is half a second late, so rank 0's
    # call cannot have finished when it returns
    x = torch.full((16 << 20,), float(rank + 1))  # 64 MiB
    if rank == 1:
        time.sleep(0.5)
    w = dist.all_reduce(x, async_op=True)
    pending = not w.is_completed()
    w.wait()
    assert w.is_completed() and torch.all(x == 3.0), x[:4]
    # several outstanding: they complete in the order they were called, and
    # each holds its own result (waited for in reverse order)
    order = []
    xs = [torch.full((1000 * (k + 1),), float(k + rank)) for k in range(8)]
    ws = [dist.all_reduce(t, async_op=True) for t in xs]
    for k, w in enumerate(ws):
        w.get_future().then(lambda f, k=k: order.append(k))
    for k in reversed(range(8)):
        ws[k].wait()
        assert torch.all(xs[k] == 2 * k + 1), (k, xs[k][:3])
        assert ws[k].result()[0] is xs[k] or torch.equal(ws[k].result()[0], xs[k])
    time.sleep(0.05)
    assert order == list(range(8)), order
    # a call split over 2 threads (SHMTRAIN_COLL_THREADS=2: the spawner sets it), on 1 and 2 of
    # PyTorch's: the exact sums (small integers), and the same bits for any values
    g = torch.Generator().manual_seed(rank)
    exact = inputs(rank, 4 << 20, torch.float32, 1)
    want = inputs(0, 4 << 20, torch.float32, 1) + inputs(1, 4 << 20, torch.float32, 1)
    base = torch.randn(4 << 20, generator=g)
    outs = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        y, z = exact.clone(), base.clone()
        dist.all_reduce(y)
        dist.all_reduce(z)
        assert torch.equal(y, want), f"{threads} threads: the sums are wrong"
        outs.append(z)
    assert torch.equal(outs[0], outs[1]), "the sums differ between 1 and 2 threads"
    # small calls run in this thread with nothing queued, and leave the idle
    # progress thread asleep (waking it each call switched the CPU to it and
    # back: 10.4 -> 6.9 us a 4-byte call on a 2-vCPU Xeon); a few spurious
    # wake-ups are the OS's to make
    before = shmtrain_torch.counters()
    small = torch.ones(16)
    for _ in range(200):
        dist.all_reduce(small)
        time.sleep(0.0002)  # a thread woken by the call runs before the next one (else the OS may not run it)
    after = shmtrain_torch.counters()
    assert after["inline_calls"] - before["inline_calls"] == 200, (before, after)
    woke = after["progress_wakeups"] - before["progress_wakeups"]
    assert woke <= 5, f"200 small calls woke the idle progress thread {woke} times"
    with open(f"{out}.{rank}", "w") as f:
        f.write("pending" if pending else "done")
    dist.destroy_process_group()


def killed_outstanding_rank(rank, world, port, job_file):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("shm", rank=rank, world_size=world, timeout=timedelta(seconds=30))
    x = torch.ones(1 << 18)
    dist.all_reduce(x)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    ws = [dist.all_reduce(torch.ones(1 << 16), async_op=True) for _ in range(4)]
    t0 = time.time()
    try:
        ws[0].wait()
        raise AssertionError("a dead peer's call completed")
    except dist.DistBackendError as e:
        assert "rank 1" in str(e), str(e)
    try:
        ws[3].get_future().wait()
        raise AssertionError("a dead peer's future completed")
    except Exception as e:  # noqa: BLE001  the future's error is the backend's
        assert "rank 1" in str(e) or "peer" in str(e), str(e)
    with open(f"{job_file}.{rank}", "w") as f:
        f.write(f"{time.time() - t0:.2f}")


def async_():
    """Asynchronous works: before completion, in order, a dead peer raised
    from wait() and from the future, the same bits at 1 and 2 threads."""
    import tempfile
    d = tempfile.mkdtemp()
    before = set(os.listdir("/dev/shm"))
    os.environ["SHMTRAIN_COLL_THREADS"] = "2"  # a call's sums split over 2 threads even on 2 CPUs
    mp.spawn(async_rank, args=(2, free_port(), os.path.join(d, "a")), nprocs=2)
    del os.environ["SHMTRAIN_COLL_THREADS"]
    assert open(os.path.join(d, "a.0")).read() == "pending", "rank 0's call had completed when it returned"
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "killed-outstanding", str(r), "2", str(port),
                               os.path.join(d, "k")]) for r in range(2)]
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [0, -signal.SIGKILL], codes
    took = float(open(os.path.join(d, "k.0")).read())
    left = names_left(before, [procs[0].pid])
    assert not left, left
    print(f"async: a 64 MiB all_reduce returned before it completed; 8 outstanding completed in order; 1 and 2 "
          f"threads the same bits; a dead peer raised from wait() and the future after {took} s; /dev/shm clean",
          flush=True)


# ------------------------------------------------------------- counted --

def hooked_rank(rank, world, port, name, b, out, hook, late):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("shm", rank=rank, world_size=world)
    model, batch = build(name)
    net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)
    seen_in_flight, first_bucket, kept_intact = [], [], 0
    if hook:
        def counted(state, bucket):
            if late and rank == 1 and bucket.index() == 0:
                time.sleep(0.02)  # rank 0's next buckets queue up behind this one
            fut = shmtrain_torch.ddp_comm_hook(state, bucket)
            seen_in_flight.append(shmtrain_torch.counters()["in_flight"])
            if bucket.index() == 0:
                first_bucket.append(fut)
            return fut
        net.register_comm_hook(None, counted)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for step in range(6):
        sgd_step(net, opt, *batch(step, rank, world, b))
        # the step before's result, read where it lies, outlives this step's call
        # (from step 2: DDP lays its buckets out again after step 1)
        if hook and step >= 2:
            same(first_bucket[-2].value(), previous, f"{name}: step {step - 1}'s hook result after step {step}")
            kept_intact += 1
        if hook:
            previous = first_bucket[-1].value().clone()
    c = shmtrain_torch.counters()
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if rank == 0:
        torch.save({"params": [p.detach().clone() for p in model.parameters()], "counters": c,
                    "grad_bytes": grad_bytes, "in_flight": max(seen_in_flight or [0]),
                    "kept_intact": kept_intact}, out)
    dist.barrier()
    del net, opt
    gc.collect()
    dist.destroy_process_group()


def plain_rank(rank, world, port, out):
    """A plain all_reduce of 4 MiB (one staging piece), one thread a rank:
    the library's staged ring on the tensor itself, counted."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), SHMTRAIN_COLL_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("shm", rank=rank, world_size=world)
    n = 1 << 20
    x = torch.arange(n, dtype=torch.float32) % 1000 + rank
    before = shmtrain_torch.counters()
    dist.all_reduce(x)
    after = shmtrain_torch.counters()
    same(x, 2 * (torch.arange(n, dtype=torch.float32) % 1000) + 1, "a plain 4 MiB all_reduce")
    torch.save({k: after[k] - before[k] for k in after}, f"{out}.{rank}")
    dist.destroy_process_group()


def counted():
    """DDP through the comm hook: bitwise the plain path's; each step's
    gradients copied into the segment once (counted) and none staged;
    calls in flight while backward goes on.  A plain all_reduce: only what
    the peer reads copied into the segment (the library's counters)."""
    import tempfile
    d = tempfile.mkdtemp()
    mp.spawn(plain_rank, args=(2, free_port(), os.path.join(d, "plain")), nprocs=2)
    e = 4 << 20  # n e bytes
    for r in range(2):
        c = torch.load(os.path.join(d, f"plain.{r}"))
        # the ring staged (docs/collectives.md): segment r in, the sums of the other half made from this rank's
        # tensor and the peer's staging and copied out, the peer's final half read into the tensor: read 2.5 n e,
        # written 2 n e; the agreement check (128 bytes, inline: one synchronisation) (N+1) 128 and 2 x 128.
        # The tensor copied into the segment whole and back (the backend's path before) read 4.5 n e and
        # wrote 4 n e; the 64-bit check before went the general way (rsag through staging, 3 synchronisations).
        want = (e * 5 // 2 + 3 * 128, 2 * e + 2 * 128, e + 128)
        got = (c["coll_bytes_read"], c["coll_bytes_written"], c["coll_peer_bytes_read"])
        assert got == want, (r, got, want)
        assert c["coll_syncs"] == 1 + 2 * 16 + 1, c  # the check; the ring's 2 steps of 16 chunks, its end
        assert c["bytes_staged"] == e and c["calls"] == 1, c
    print(f"counted: a plain 4 MiB all_reduce read {want[0]} and wrote {want[1]} bytes a rank "
          f"(2.5 and 2 x the message), {want[2]} of them from the peer", flush=True)
    for name in ("resnet", "gpt-mini"):
        runs = {}
        for hook in (False, True):
            path = os.path.join(d, f"{name}-{hook}.pt")
            mp.spawn(hooked_rank, args=(2, free_port(), name, 4, path, hook, hook), nprocs=2)
            runs[hook] = torch.load(path)
        for k, (a, b) in enumerate(zip(runs[False]["params"], runs[True]["params"])):
            same(a, b, f"{name}: parameter {k} after 6 steps, hook against DDP's own path")
        c, grad = runs[True]["counters"], runs[True]["grad_bytes"]
        assert c["hook_fallbacks"] == 0, c
        # DDP's first step runs its buckets in the order it guesses, then rebuilds them: bytes are the same
        assert c["hook_bytes_in"] == 6 * grad, (c["hook_bytes_in"], 6 * grad)
        assert c["bytes_staged"] == 0, c  # DDP's buckets never staged the plain way
        assert runs[True]["in_flight"] >= 2, runs[True]["in_flight"]
        assert runs[True]["kept_intact"] == 4, runs[True]["kept_intact"]
        print(f"counted: {name}: the hook's 6 steps equal DDP's own to the bit; {c['hook_buckets']} buckets, "
              f"{c['hook_bytes_in']} bytes copied in (6 x the {grad} bytes of gradients), 0 staged; "
              f"{runs[True]['in_flight']} calls in flight during backward; each result intact through the next step",
              flush=True)


# ------------------------------------------------------------- defects --

def mismatch_rank(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("shm", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        dist.all_reduce(torch.ones(1000 if rank == 0 else 300000))
        raise AssertionError("calls of other sizes accepted")
    except dist.DistBackendError as e:
        assert "the ranks' calls differ" in str(e), str(e)
    try:
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BXOR)
        raise AssertionError("BXOR accepted")
    except RuntimeError as e:
        assert "reduce op BXOR" in str(e), str(e)
    open(f"{out}.{rank}", "w").close()


def detail_rank(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_DISTRIBUTED_DEBUG="DETAIL")
    dist.init_process_group("shm", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    x = torch.full((4,), float(rank))
    dist.all_reduce(x)
    assert torch.all(x == 1.0), x
    open(f"{out}.{rank}", "w").close()


def joining_rank(rank, world, port, job_file):
    """Ranks 0 and 2 join at once; rank 1 reaches the Store, then joins 3 s
    late, so rank 2 dies (or stops) while its peers are still joining."""
    try:
        store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=30))
        if rank == 1:
            time.sleep(3.0)
        dist.init_process_group("shm", rank=rank, world_size=world, store=store, timeout=timedelta(seconds=10))
        dist.all_reduce(torch.ones(4))
    except Exception as e:  # noqa: BLE001  the group could not form: what matters is /dev/shm
        with open(f"{job_file}.{rank}", "w") as f:
            f.write(type(e).__name__)


def killed_while_joining(how, job_file):
    """Rank 2 killed, or stopped and killed once its peers gave up, the
    moment its segment appears (before or after it initialised it): the
    job's names all gone once every rank has ended."""
    before = set(os.listdir("/dev/shm"))
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "joining-rank", str(r), "3", str(port), job_file])
             for r in range(3)]
    t0 = time.time()
    while time.time() - t0 < 120 and not any(n.endswith(".2") for n in names_left(before, [procs[0].pid])):
        time.sleep(0.002)
    os.kill(procs[2].pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    for p in procs[:2]:
        p.wait(timeout=120)
    if how == "stopped":
        os.kill(procs[2].pid, signal.SIGKILL)
    procs[2].wait(timeout=120)
    left = names_left(before, [procs[0].pid])
    assert not left, f"a rank {how} while its peers joined left {left}"
    assert all(open(f"{job_file}.{r}").read() == "DistBackendError" for r in range(2)), "a peer did not fail"


EXITING = """
import os, sys, time, torch, torch.distributed as dist, shmtrain_torch
from datetime import timedelta
rank, port = int(sys.argv[1]), sys.argv[2]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
dist.init_process_group("shm", rank=rank, world_size=2, timeout=timedelta(seconds=60))
class Slow:
    def __del__(self):
        time.sleep(0.5)  # lets go of the GIL: the main thread runs on to Python's exit
slow = Slow()
x = torch.ones(1 << 20)  # 4 MiB: the progress thread's, never the caller's
if rank == 1 and sys.argv[3] == "destroy":
    time.sleep(1.0)  # rank 0's call still waits for this one as rank 0 destroys its group
fut = dist.all_reduce(x, async_op=True).get_future().then(lambda f, keep=slow: f.value()[0])
del slow  # the progress thread drops the callback, and Slow with it, after fut completes
if sys.argv[3] == "destroy":  # the group destroyed, the callback not yet run: it needs the GIL
    dist.destroy_process_group()
assert float(fut.wait()[0]) == 2.0
"""


def exiting():
    """A callback's last reference dropped by the progress thread while the
    script ends (as DDP's step ends before ddp_comm_hook's .then callback is
    dropped), or the group destroyed with it in flight: both ranks exit 0,
    neither aborts nor hangs."""
    for how in ("exit", "destroy"):
        port = free_port()
        procs = [subprocess.Popen([sys.executable, "-c", EXITING, str(r), str(port), how], stderr=subprocess.PIPE,
                                  text=True) for r in range(2)]
        for r, p in enumerate(procs):
            try:
                err = p.communicate(timeout=120)[1]
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise AssertionError(f"{how}: rank {r} hung")
            assert p.returncode == 0, f"{how}: rank {r} ended with {p.returncode}: {err[-800:]}"


def defects():
    """Issue 63's five: a group made again under one Store (launch_*), a rank
    killed while joining leaves nothing, calls of other sizes raise, DETAIL
    debugging starts, a refusal names its op, Work.result(), the entry point."""
    import tempfile
    d = tempfile.mkdtemp()
    mp.spawn(mismatch_rank, args=(2, free_port(), os.path.join(d, "m")), nprocs=2)
    mp.spawn(detail_rank, args=(2, free_port(), os.path.join(d, "t")), nprocs=2)
    assert all(os.path.exists(os.path.join(d, f"{w}.{r}")) for w in "mt" for r in range(2))
    for how in ("killed", "stopped"):
        killed_while_joining(how, os.path.join(d, how))
    exiting()
    r = subprocess.run([sys.executable, "-c", "import torch, torch.distributed as dist; "
                        "print('shm' in dist.Backend.backend_list)"], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "True", ("no entry point registered the backend", r.stdout, r.stderr[-500:])
    print("defects: other sizes raise on every rank; BXOR refused by name; DETAIL debugging starts; a rank "
          "killed or stopped while its peers joined leaves nothing in /dev/shm; a callback dropped as "
          "Python exits ends nothing; `import torch` registers shm", flush=True)


# --------------------------------------------------------------- sweep --

def sweep():
    """shmrun --sweep of a PyTorch script (bench/torch_script_example.py):
    each setting over shm and over gloo, the rates the script reported, the
    global batch held by SHMTRAIN_GRAD_ACCUM; a script that reports nothing
    is ranked by its wall time."""
    import json
    import tempfile
    shmrun = os.environ.get("SHMRUN")
    if not shmrun:
        print("skipped: SHMRUN not set (ctest sets it)")
        sys.exit(77)
    d = tempfile.mkdtemp()
    script = os.path.join(HERE, "..", "..", "bench", "torch_script_example.py")
    base = [shmrun, "--sweep", "1x2,2x1", "--repeats", "1", "--oversubscribe"]
    r = subprocess.run(base + ["--compare-backends", "shm,gloo", "--sweep-global-batch", "64", "--sweep-out",
                               os.path.join(d, "a"), "--", sys.executable, script, "--steps", "12",
                               "--batch-size", "32", "--width", "64"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    rep = json.load(open(os.path.join(d, "a", "sweep.json")))
    labels = [st["label"] for st in rep["settings"]]
    assert labels == ["1x2 acc 2", "2x1"], labels
    for st in rep["settings"]:
        for system in ("shmtrain", "pytorch-ddp"):  # the script over shm, over gloo
            got = st["systems"].get(system, {})
            assert got.get("samples_per_s", {}).get("median", 0) > 0, (st["label"], system, st["systems"])
    # 2x1's ranks alone (no all-reduce leaves a rank): its ceiling, from both ranks' own rates
    alone = rep["settings"][1]["systems"].get("shmtrain-independent", {})
    assert alone.get("samples_per_s", {}).get("median", 0) > 0, rep["settings"][1]["systems"]
    assert "shmtrain-independent" not in rep["settings"][0]["systems"], rep["settings"][0]["systems"]
    md = open(os.path.join(d, "a", "report.md")).read()
    assert "script over gloo samples/s" in md and "**Best:" in md, md[:800]
    assert "| script over shm / independent (no exchange) |" in md, md[:1500]
    # the ceiling run's all-reduces stay in each rank: values untouched, counted
    r = subprocess.run([shmrun, "-n", "2", "--oversubscribe", "--log-dir", os.path.join(d, "logs"), "--",
                        "env", "SHMTRAIN_INDEPENDENT=1", sys.executable, "-c", KEPT_LOCAL],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "kept local" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    r = subprocess.run(base + ["--sweep-out", os.path.join(d, "b"), "--", sys.executable, script, "--steps", "6",
                               "--width", "64", "--no-report"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    md = open(os.path.join(d, "b", "report.md")).read()
    assert "by median wall time" in md, md[:800]
    print(f"sweep: a PyTorch script over shm and gloo in 1x2 (acc 2) and 2x1, its reported rates; without "
          f"reports, ranked by wall time", flush=True)


KEPT_LOCAL = """
import torch, torch.distributed as dist, shmtrain_torch
dist.init_process_group("shm")
rank = dist.get_rank()
x = torch.full((4,), float(rank + 1)); dist.all_reduce(x)
y = torch.full((4,), 2.0 * (rank + 1)); dist.all_reduce(y, op=dist.ReduceOp.AVG)
assert x.tolist() == [rank + 1.0] * 4 and y.tolist() == [2.0 * (rank + 1)] * 4, (x, y)
b = torch.full((1,), float(rank)); dist.broadcast(b, 0)  # the rest still meets
assert b.item() == 0.0, b
c = shmtrain_torch.counters()
assert c["kept_local"] == 2, c
dist.barrier()
if rank == 0:
    print("kept local:", c)
dist.destroy_process_group()
"""


LAUNCHED = """
import os, sys, tempfile, torch, torch.distributed as dist, shmtrain_torch
dist.init_process_group("shm")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.full((3,), float(rank + 1)); dist.all_reduce(x)
assert x.tolist() == [world * (world + 1) / 2] * 3, x
assert os.environ["LOCAL_WORLD_SIZE"] == str(world) and os.environ["LOCAL_RANK"] == str(rank)
try:  # what the library does not do is refused by name
    dist.send(torch.ones(1), dst=(rank + 1) % world) if rank == 0 else dist.recv(torch.ones(1), src=0)
    raise SystemExit("send accepted")
except RuntimeError as e:
    assert "does not support send" in str(e) or "does not support recv" in str(e), e
# torch.distributed.checkpoint: a sharded save and a load, coordinated over shm
import torch.distributed.checkpoint as dcp
where = sys.argv[1]
state = {"w": torch.arange(6.0) * (1 + 0 * rank), "step": torch.tensor(7)}
dcp.save(state, checkpoint_id=where)
back = {"w": torch.zeros(6), "step": torch.tensor(0)}
dcp.load(back, checkpoint_id=where)
assert torch.equal(back["w"], torch.arange(6.0)) and int(back["step"]) == 7, back
if rank == 0:  # the job ids are rank 0's: the test looks for what is left of them
    open(f"{where}.pid", "w").write(str(os.getpid()))
dist.destroy_process_group()
# the group made again under the same Store, rank 0 late: every rank meets
# under this incarnation's name, not the last one's
import time
if rank == 0:
    time.sleep(0.5)
dist.init_process_group("shm")
x = torch.full((3,), float(rank + 1)); dist.all_reduce(x)
assert x.tolist() == [world * (world + 1) / 2] * 3, x
dist.destroy_process_group()
open(f"{where}.ok{rank}", "w").close()
"""


def launch(launcher_name):
    """Under shmrun (which sets torchrun's variables) or under torchrun:
    init_process_group("shm") from the environment alone, an unsupported op
    refused by name, torch.distributed.checkpoint's save and load."""
    import tempfile
    shmrun = os.environ.get("SHMRUN")
    if not shmrun:
        print("skipped: SHMRUN not set (ctest sets it)")
        sys.exit(77)
    d = tempfile.mkdtemp()
    script = os.path.join(d, "launched.py")
    with open(script, "w") as f:
        f.write(LAUNCHED)
    launcher = {"shmrun": [shmrun, "-n", "2", "--oversubscribe", "--quiet", "--", sys.executable],
                "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                             "2"]}[launcher_name]
    before = set(os.listdir("/dev/shm"))
    r = subprocess.run(launcher + [script, os.path.join(d, launcher_name + ".ckpt")],
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0 and launcher_name == "torchrun" and NO_LIBUV and "libuv" in r.stderr:
        # Debian's python3-torch: its torchrun's rendezvous asks for a libuv
        # store even under USE_LIBUV=0; nothing of ours runs
        print("skipped: this PyTorch's torchrun cannot start without libuv (" + torch.__version__ + "): "
              + r.stderr.strip().splitlines()[-1][:200])
        sys.exit(77)
    done = [os.path.exists(os.path.join(d, f"{launcher_name}.ckpt.ok{q}")) for q in range(2)]
    assert r.returncode == 0 and all(done), (launcher_name, r.returncode, done, r.stdout[-2000:], r.stderr[-2000:])
    pids = [int(open(os.path.join(d, f"{launcher_name}.ckpt.pid")).read())]
    left = names_left(before, pids)
    assert not left, (launcher_name, left)
    print(f"launch: {launcher_name} -n 2: init_process_group('shm') from its variables, send refused by name, "
          "a distributed checkpoint saved and loaded", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "fault-rank":
        fault_rank(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
    elif sys.argv[1] in ("killed-outstanding", "joining-rank"):
        fn = killed_outstanding_rank if sys.argv[1] == "killed-outstanding" else joining_rank
        fn(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        {"ops": ops, "ddp": ddp, "fault": fault, "async": async_, "counted": counted, "defects": defects,
         "sweep": sweep,
         "launch_shmrun": lambda: launch("shmrun"),
         "launch_torchrun": lambda: launch("torchrun")}[sys.argv[1]]()
