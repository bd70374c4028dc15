"""What the tests of the torch.distributed backend "shm" share
(test_shm_backend.py, test_shm_launch.py): PyTorch and the built extension
imported, or the test skipped (77) where either is missing and failed (1)
where the extension is built but does not load (an undefined symbol);
PyTorch's TCPStore without libuv where this PyTorch has none; free ports;
what a job left in /dev/shm; tensors equal to the bit."""
import os
import sys

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


def shm_beside_gloo(rank, world, port):
    """A rank's two groups over the same ranks, shm and gloo, in one process (the default group gloo), one
    thread a rank: every check runs a call on both and compares."""
    from datetime import timedelta
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    return dist.new_group(backend="shm"), dist.new_group(backend="gloo")


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



def same(a, b, what):
    if not torch.equal(a, b):
        bad = (a != b).nonzero()[:3].flatten().tolist()
        raise AssertionError(f"{what}: shm and gloo differ at {bad}: {a.flatten()[:6]} vs {b.flatten()[:6]}")
