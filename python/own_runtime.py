"""The built extension must use the C++ runtime of the process that loads it.

A compiler that links a copy of its libstdc++ into the extension (a GPU
host's /opt/gcc did) puts it beside the one the PyTorch process has loaded:
there the two disagreed and the backend crashed at its first call (in a
number's formatting through a stream).  python/setup.py
says so at build time, by name, instead; tests/torch/test_own_runtime.py
checks the check."""
import os
import subprocess
import sys


def carries_own_cxx_runtime(path):
    """True when the shared object defines libstdc++'s own std::locale (its
    dynamic symbols): a copy of the runtime inside it.  None without nm."""
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return "_ZNSt6locale" in out


def refuse_own_cxx_runtime(path):
    if carries_own_cxx_runtime(path):
        cxx = os.environ.get("CXX", "c++")
        sys.exit(f"shmtrain-torch: {cxx} linked its own copy of the C++ runtime (libstdc++) into {path}, beside "
                 "the one PyTorch loads; the two disagree and the backend would crash. Build with the compiler of "
                 "the system's libstdc++: CXX=/usr/bin/g++ pip install --no-build-isolation ./python")
