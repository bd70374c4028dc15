"""The build's refusal of an extension that carries its own C++ runtime
(python/own_runtime.py, called by python/setup.py): a GPU host's compiler
linked a static libstdc++ into the extension, beside the one PyTorch loads,
and the backend crashed at its first call there.  The check must pass the
extension this build made and refuse, by name, a shared object linked with
-static-libstdc++ (made here from a few lines that format a number through
a stream, as the crashed call did).

    python tests/torch/test_own_runtime.py      (ctest: torch_own_runtime)"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # after the built package: its source beside
from own_runtime import carries_own_cxx_runtime, refuse_own_cxx_runtime  # noqa: E402

SOURCE = """
#include <sstream>
#include <string>
std::string job_id(long pid) { std::ostringstream s; s << "pt" << pid; return s.str(); }
"""


def main():
    cxx = os.environ.get("CXX", "c++")
    if not shutil.which("nm") or not shutil.which(cxx):
        print(f"skipped: no nm or no {cxx} (binutils, g++)")
        sys.exit(77)
    import shmtrain_torch
    built = shmtrain_torch._C.__file__
    assert carries_own_cxx_runtime(built) is False, built
    refuse_own_cxx_runtime(built)  # passes: returns
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "job.cpp"), "w") as f:
        f.write(SOURCE)
    made = {}
    for name, flags in (("shared", []), ("static", ["-static-libstdc++"])):
        made[name] = os.path.join(d, f"job-{name}.so")
        subprocess.run([cxx, "-shared", "-fPIC", "-O1", os.path.join(d, "job.cpp"), "-o", made[name], *flags],
                       check=True)
    assert carries_own_cxx_runtime(made["shared"]) is False
    assert carries_own_cxx_runtime(made["static"]) is True
    try:
        refuse_own_cxx_runtime(made["static"])
    except SystemExit as e:
        said = str(e)
        assert "linked its own copy of the C++ runtime" in said and made["static"] in said, said
    else:
        raise AssertionError("an extension with its own libstdc++ was not refused")
    shutil.rmtree(d)
    print("own runtime: this build's extension passes; one linked with -static-libstdc++ refused by name")


if __name__ == "__main__":
    main()
