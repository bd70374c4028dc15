"""The shm backend for torch.distributed, built against the PyTorch it is
installed beside (so pip must not build it in an isolated environment):

    pip install --no-build-isolation ./python      (or: make python)

Built and tested with PyTorch 2.13.0's CPU wheel (scripts/install-deps.sh
--bench) and Debian 13's python3-torch 2.6 (with libtorch-dev, pybind11-dev;
its TCPStore has no libuv: under shmrun the package sets USE_LIBUV=0).  Debian 12's 1.13 predates the
c10d::Backend interface: refused.

The extension compiles libshmtrain-coll's C sources itself (no OpenMP: the
PyTorch process brings its own runtime, so each call runs on one thread)
and the thin C++ glue of csrc/ (backend.cpp, call_queue.cpp, hook_slots.cpp, agreement.cpp, alltoall.cpp, gathered.cpp, p2p.cpp)."""
import glob
import os
import subprocess

import sys

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as e:
    sys.exit(f"shmtrain-torch: PyTorch must be installed first, in this environment ({e}); "
             "pip install --no-build-isolation ./python")
if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 1):
    # c10d::Backend and register_backend(devices=...) are 2.1's; 1.13 (Debian 12's) has neither
    sys.exit(f"shmtrain-torch: PyTorch {torch.__version__} is too old: the backend needs 2.1 or later")

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
from own_runtime import refuse_own_cxx_runtime  # noqa: E402


coll = sorted(glob.glob(os.path.join(root, "src", "coll", "*.c")))
common = [os.path.join(root, "src", "common", f) for f in (
    "status.c", "clock.c", "shmname.c", "dtype.c", "env.c")]  # env.c: coll_env.c reads through it
include = os.path.join(root, "include")


class BuildWithC(BuildExtension):
    """The library's C sources compiled as C (torch's build would take them
    for C++), then linked into the extension with the glue."""

    def build_extensions(self):
        cc = os.environ.get("CC", "cc")
        objects = []
        for src in coll + common:
            obj = os.path.join(self.build_temp, "libshmtrain-coll", os.path.basename(src)[:-2] + ".o")
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            subprocess.check_call([cc, "-std=c11", "-O3", "-fPIC", "-Wall", "-Wno-unknown-pragmas", "-I", include,
                                   "-c", src, "-o", obj])
            objects.append(obj)
        for ext in self.extensions:
            ext.extra_objects = objects + list(ext.extra_objects or [])
        super().build_extensions()
        for ext in self.extensions:
            refuse_own_cxx_runtime(self.get_ext_fullpath(ext.name))


setup(
    name="shmtrain-torch",
    version="0.1.0",
    description="shmtrain's shared-memory all-reduce as the torch.distributed backend 'shm'",
    packages=["shmtrain_torch"],
    py_modules=["shmtrain_torch_autoload"],
    # `import torch` imports every "torch.backends" entry point: the backend
    # "shm" registered with no import in the user's script
    entry_points={"torch.backends": ["shm = shmtrain_torch_autoload:load"]},
    ext_modules=[
        CppExtension(
            "shmtrain_torch._C",
            [os.path.join("shmtrain_torch", "csrc", f)
             for f in ("backend.cpp", "call_queue.cpp", "hook_slots.cpp", "agreement.cpp", "alltoall.cpp", "gathered.cpp",
                       "p2p.cpp")],
            include_dirs=[include],
            extra_compile_args=["-O3"],
            libraries=["rt"],
        )
    ],
    cmdclass={"build_ext": BuildWithC},
    python_requires=">=3.9",
)
