"""The torch.distributed backend "shm" as scripts meet it: launched,
swept, and issue 63's defects.

    python tests/torch/test_shm_launch.py defects|sweep|launch_shmrun|launch_torchrun   (ctest runs each)

defects calls of other sizes raise on every rank, a refusal names its op,
        TORCH_DISTRIBUTED_DEBUG=DETAIL starts, a rank killed or stopped while
        its peers join leaves nothing in /dev/shm, a callback dropped as Python
        exits ends nothing, `import torch` registers shm
sweep   shmrun --sweep of a PyTorch script over shm and gloo
launch_shmrun, launch_torchrun
        under shmrun (which sets torchrun's variables and MASTER_ADDR/PORT),
        or under torchrun: the default group over shm from the environment,
        a ring of isend/irecv (recv from any source refused by name),
        torch.distributed.checkpoint save + load,
        the group made again under the same Store

Exits 77 (skipped) where torch or the built extension cannot be imported, or
(launch_torchrun) where this PyTorch's torchrun cannot start without libuv
(Debian's python3-torch); 1 where the extension is there but does not load
(shm_common.py).
"""
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

# torch, its distributed modules and the extension as shm_common imported them (or skipped: 77)
from shm_common import HERE, NO_LIBUV, dist, free_port, mp, names_left, torch


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
    # the benches' DDP scripts, which write shmtrain's records themselves: their ceiling run too
    # says --balance independent and each rank's own rate (bench/torch_comm.py's own_speed)
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write("".join(chr(97 + (i * 7) % 26) for i in range(20000)))
    gpt = os.path.join(HERE, "..", "..", "bench", "torch_gpt.py")
    r = subprocess.run([shmrun, "--sweep", "2x1", "--repeats", "1", "--oversubscribe", "--sweep-out",
                        os.path.join(d, "c"), "--", sys.executable, gpt,
                        "--model", "gpt-mini", "--text", text, "--max-steps", "4", "--eval-windows", "1",
                        "--warm-steps", "0", "--log-every", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    settings = json.load(open(os.path.join(d, "c", "sweep.json")))["settings"]
    systems = [st["systems"] for st in settings if st["label"] == "2x1"][0]
    assert systems.get("shmtrain-independent", {}).get("samples_per_s", {}).get("median", 0) > 0, systems
    # shmtrain_torch importable but not installed (no entry point: `import torch` does not load it):
    # SHMTRAIN_TORCH_BACKEND changes nothing and the script runs over its own gloo; its "shm" row and
    # its ceiling are refused by name (the record names the group's backend), not reported as shm's
    bare = os.path.join(d, "bare")
    os.makedirs(bare)
    import shmtrain_torch
    os.symlink(os.path.dirname(os.path.abspath(shmtrain_torch.__file__)), os.path.join(bare, "shmtrain_torch"))
    alone = dict(os.environ, PYTHONPATH=bare)
    r = subprocess.run([shmrun, "--sweep", "2x1", "--repeats", "1", "--oversubscribe", "--sweep-out",
                        os.path.join(d, "e"), "--", sys.executable, gpt,
                        "--model", "gpt-mini", "--text", text, "--max-steps", "2", "--eval-windows", "1",
                        "--warm-steps", "0", "--log-every", "1"],
                       capture_output=True, text=True, timeout=600, env=alone)
    said = r.stderr + open(os.path.join(d, "e", "report.md")).read()
    assert r.returncode == 1 and said.count("names another backend than the sweep chose") >= 2, (r.returncode,
                                                                                                said[-3000:])
    assert "does not load it (its entry point is not installed" in r.stderr, r.stderr[-2000:]
    print("sweep: a PyTorch script over shm and gloo in 1x2 (acc 2) and 2x1, its reported rates; without "
          "reports, ranked by wall time; a script that ran gloo in shm's place refused", flush=True)


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
# point-to-point from the environment's group: a ring of sends, and recv from any source refused by name
got = torch.zeros(5)
for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, got, (rank - 1) % world),
                                 dist.P2POp(dist.isend, torch.full((5,), float(rank)), (rank + 1) % world)]):
    w.wait()
assert got.tolist() == [float((rank - 1) % world)] * 5, got
try:
    dist.recv(torch.ones(1))
    raise SystemExit("recv from any source accepted")
except RuntimeError as e:
    assert "does not support recvAnysource" in str(e), e
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


# A PyTorch without libuv, played by a TCPStore that refuses as Debian's does.
NO_LIBUV_STORE = """
import os, torch.distributed as dist
def refuse(*args, use_libuv=True, **kwargs):
    raise RuntimeError("use_libuv was requested but PyTorch was build without libuv support")
dist.TCPStore = refuse
import shmtrain_torch
print("USE_LIBUV=" + os.environ.get("USE_LIBUV", "unset"))
"""


def store_default_under_shmrun():
    """Under shmrun, importing the package on a PyTorch without libuv sets
    USE_LIBUV=0 (its TCPStore's only working kind); a user's own setting is
    kept, and outside shmrun nothing is set."""
    # no autoload: the refusing store must be in place before the package's import
    base = {k: v for k, v in os.environ.items() if k not in ("USE_LIBUV", "SHMTRAIN_RANK")}
    base["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    for extra, want in (({"SHMTRAIN_RANK": "0"}, "USE_LIBUV=0"),
                        ({"SHMTRAIN_RANK": "0", "USE_LIBUV": "1"}, "USE_LIBUV=1"),
                        ({}, "USE_LIBUV=unset")):
        r = subprocess.run([sys.executable, "-c", NO_LIBUV_STORE], env=dict(base, **extra), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip().endswith(want), (extra, want, r.stdout, r.stderr[-2000:])


def launch(launcher_name):
    """Under shmrun (which sets torchrun's variables) or under torchrun:
    init_process_group("shm") from the environment alone, a ring of isend/irecv (recv from any source
    refused by name), torch.distributed.checkpoint's save and load."""
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
    if launcher_name == "shmrun":
        store_default_under_shmrun()
    # the script's environment as a user's: no USE_LIBUV of the tests' own
    # (shm_common's); under shmrun the package takes the store that works
    env = {k: v for k, v in os.environ.items() if not (k == "USE_LIBUV" and NO_LIBUV)}
    before = set(os.listdir("/dev/shm"))
    r = subprocess.run(launcher + [script, os.path.join(d, launcher_name + ".ckpt")],
                       capture_output=True, text=True, timeout=180, env=env)
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
    print(f"launch: {launcher_name} -n 2: init_process_group('shm') from its variables, a ring of isend/irecv, "
          "a distributed checkpoint saved and loaded", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "joining-rank":
        joining_rank(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        {"defects": defects, "sweep": sweep,
         "launch_shmrun": lambda: launch("shmrun"),
         "launch_torchrun": lambda: launch("torchrun")}[sys.argv[1]]()
