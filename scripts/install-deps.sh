#!/usr/bin/env bash
# Install what shmtrain needs, from the distribution's packages (Debian, Ubuntu).
#
#   scripts/install-deps.sh            install anything missing (build + tests + data)
#   scripts/install-deps.sh --bench    also the benchmark peer: PyTorch 2.13 (CPU) in
#                                      .deps/torch-venv, else the distribution's python3-torch,
#                                      and what the "shm" backend (python/) builds with, and
#                                      tensorboard (a test reads run folders' events with it)
#   scripts/install-deps.sh --fuzz     also clang with libFuzzer (`make fuzz`)
#   scripts/install-deps.sh --check    list what is missing; exit 1 if anything is
#
# oneDNN 3 (3.1 or newer): the distribution's libdnnl-dev where it is that new
# (Debian 13, Ubuntu 24.04); where it is older (Debian 12 packages 2.6) the
# PyPI build of oneDNN 3.2 with GNU OpenMP (the runtime gcc's OpenMP uses:
# one OpenMP in the process), unpacked into .deps/onednn, where CMake looks.
#
# The Makefile runs it before every build, so a fresh machine goes from clone
# to a green `make test` with no other step.  It is quiet when nothing is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
required=(gcc make cmake pkg-config libhwloc-dev hwloc libcmocka-dev gnuplot-nox
          zlib1g-dev libpng-dev libjpeg-dev dataset-fashion-mnist openmpi-bin libopenmpi-dev fortunes)
onednn_min=3.1
onednn_prefix=$root/.deps/onednn
# PyPI's oneDNN 3.2.0 built with GNU OpenMP: the library and its headers.
onednn_wheels=("onednn-cpu-gomp==2023.2.0 --hash=sha256:2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb"
               "onednn-devel-cpu-gomp==2023.2.0 --hash=sha256:9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284")
torch_venv=$root/.deps/torch-venv
torch_pin=2.13.0+cpu   # a CPU build: a bare `torch` from PyPI brings gigabytes of CUDA
tensorboard_pin=2.20.0

mode=install; bench=0; fuzz=0
for arg in "$@"; do
  case "$arg" in
    --check) mode=check ;;
    --bench) bench=1 ;;
    --fuzz) fuzz=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
version_of() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null; }
at_least() { [ -n "$1" ] && dpkg --compare-versions "$1" ge "$2"; }
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}' | grep -v '(none)' || true; }

sudo=""
updated=0
need_apt() {
  if ! command -v apt-get >/dev/null; then
    echo "install-deps.sh: no apt-get here; install by hand: $*" >&2
    exit 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps.sh: need root (or sudo) to install: $*" >&2; exit 1; }
    sudo="sudo"
  fi
}
apt_update() {
  need_apt "$@"
  [ $updated = 1 ] || { $sudo apt-get update -qq; updated=1; }
}
apt_install() {
  apt_update "$@"
  echo "install-deps.sh: installing $*"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
# pip, less the lines this machine's pip configuration prints for every index it skips.
pip_quietly() { "$@" 2>&1 | { grep -v '^WARNING: Location' || true; } >&2; }

# oneDNN: "distro" (libdnnl-dev >= 3.1 installed), "prefix" (.deps/onednn
# holds 3.x), or "" (neither yet).
onednn_source() {
  if at_least "$(version_of libdnnl-dev)" "$onednn_min"; then echo distro
  elif [ -f "$onednn_prefix/lib/cmake/dnnl/dnnl-config.cmake" ] && [ -e "$onednn_prefix/lib/libdnnl.so.3" ]; then echo prefix
  fi
}

# PyPI's wheels into .deps/onednn: headers, CMake files, the library (once,
# not thrice: the wheel stores its two symlinks as copies).
onednn_from_pypi() {
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"; trap - RETURN' RETURN
  command -v python3 >/dev/null || apt_install python3
  python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
  echo "install-deps.sh: the distribution's oneDNN is older than $onednn_min ($(candidate libdnnl-dev));" \
       "unpacking PyPI's oneDNN 3.2 (GNU OpenMP) into .deps/onednn"
  printf '%s\n' "${onednn_wheels[@]}" > "$tmp/requirements.txt"
  pip_quietly python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes \
      -r "$tmp/requirements.txt" -d "$tmp/wheels" ||
    { echo "install-deps.sh: could not download oneDNN's wheels from PyPI" >&2; exit 1; }
  python3 - "$tmp/wheels" "$tmp/onednn" <<'PY'
import glob, os, shutil, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
for w in sorted(glob.glob(os.path.join(wheels, '*.whl'))):
    with zipfile.ZipFile(w) as z:
        for info in z.infolist():
            if '.data/data/' not in info.filename or info.filename.endswith('/'):
                continue
            rel = info.filename.split('.data/data/', 1)[1]
            if rel in ('lib/libdnnl.so', 'lib/libdnnl.so.3'):
                continue
            dest = os.path.join(out, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(info) as src, open(dest, 'wb') as dst:
                shutil.copyfileobj(src, dst)
lib = os.path.join(out, 'lib')
real = [f for f in os.listdir(lib) if f.startswith('libdnnl.so.3.')][0]
os.symlink(real, os.path.join(lib, 'libdnnl.so.3'))
os.symlink('libdnnl.so.3', os.path.join(lib, 'libdnnl.so'))
PY
  # One OpenMP runtime in a process: this build must use gcc's (libgomp).
  local omp; omp=$(ldd "$tmp/onednn/lib/libdnnl.so.3" | grep -o -E 'lib(gomp|iomp5|omp|tbb)[^ ]*' | sort -u | paste -sd' ')
  [ "$omp" = libgomp.so.1 ] ||
    { echo "install-deps.sh: PyPI's oneDNN links '$omp', not only GNU OpenMP (libgomp)" >&2; exit 1; }
  mkdir -p "$(dirname "$onednn_prefix")"
  rm -rf "$onednn_prefix"
  mv "$tmp/onednn" "$onednn_prefix"
  echo "install-deps.sh: oneDNN $(sed -n 's/#define DNNL_VERSION_\(MAJOR\|MINOR\|PATCH\) *//p' \
       "$onednn_prefix/include/oneapi/dnnl/dnnl_version.h" | paste -sd.) in $onednn_prefix (runtime: $omp)"
}

# TensorBoard's own reader, for the test that reads a run's event files with
# it (tensorboard_reader); without it that test skips, nothing else needs it.
tensorboard_reader() {
  "$torch_venv/bin/python" -c 'import tensorboard' 2>/dev/null && return 0
  pip_quietly "$torch_venv/bin/pip" install -q "tensorboard==$tensorboard_pin" ||
    echo "install-deps.sh: no tensorboard $tensorboard_pin from pip here; its reader's test skips" >&2
}

# The benchmarks' peer as its users run it today: PyTorch 2.13's CPU build in
# a venv; where pip cannot get that build, the distribution's python3-torch.
torch_peer() {
  # the "shm" backend (python/) compiles against it: a C++ compiler and Python's headers
  installed g++ || apt_install g++
  python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' ||
    apt_install python3-dev
  if [ -x "$torch_venv/bin/python" ] && "$torch_venv/bin/python" -c 'import torch' 2>/dev/null; then
    tensorboard_reader
    return 0
  fi
  python3 -m venv --help >/dev/null 2>&1 || apt_install python3-venv
  if python3 -m venv "$torch_venv" && pip_quietly "$torch_venv/bin/pip" install -q "torch==$torch_pin" numpy setuptools &&
     "$torch_venv/bin/python" -c 'import torch' 2>/dev/null; then
    echo "install-deps.sh: PyTorch $("$torch_venv/bin/python" -c 'import torch; print(torch.__version__)') in $torch_venv"
    tensorboard_reader
    return 0
  fi
  rm -rf "$torch_venv"
  echo "install-deps.sh: no PyTorch $torch_pin from pip here; the distribution's python3-torch instead" >&2
  installed python3-torch || apt_install python3-torch libopenblas0-pthread
  # the backend's build needs the headers, which Debian ships apart (13's 2.6: yes; 12's 1.13 is too old)
  [ -n "$(candidate libtorch-dev)" ] && { installed libtorch-dev || apt_install libtorch-dev pybind11-dev; }
  return 0
}

# Can clang build a libFuzzer program here, with OpenMP (the image folder's
# decoding runs on its threads)?  Debian 12's clang carries libFuzzer, later
# ones split it into libclang-rt-N-dev; clang's OpenMP is libomp-dev.
fuzz_works() {
  command -v clang >/dev/null || return 1
  local tmp rc=0; tmp=$(mktemp -d)
  printf '#include <omp.h>\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return omp_get_max_threads() - 1; }\n' |
    clang -x c -fopenmp -fsanitize=fuzzer,address,undefined -o "$tmp/fuzz" - 2>/dev/null || rc=1
  rm -rf "$tmp"
  return $rc
}
fuzz_toolchain() {
  fuzz_works && return 0
  installed clang || apt_install clang
  installed libomp-dev || apt_install libomp-dev
  fuzz_works && return 0
  apt_install "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"
  fuzz_works || { echo "install-deps.sh: clang cannot build a libFuzzer program with OpenMP here" >&2; exit 1; }
}

missing=()
for p in "${required[@]}"; do installed "$p" || missing+=("$p"); done
onednn=$(onednn_source)

if [ "$mode" = check ]; then
  [ -n "$onednn" ] || missing+=("oneDNN>=$onednn_min (libdnnl-dev, or .deps/onednn)")
  if [ $bench = 1 ] && ! { [ -x "$torch_venv/bin/python" ] || installed python3-torch; }; then missing+=("PyTorch"); fi
  if [ $fuzz = 1 ] && ! fuzz_works; then missing+=("clang with libFuzzer"); fi
  [ ${#missing[@]} -eq 0 ] && exit 0
  echo "missing: ${missing[*]}"
  exit 1
fi

[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
if [ -z "$onednn" ]; then
  [ -n "$(candidate libdnnl-dev)" ] || apt_update libdnnl-dev  # a fresh machine's package lists are empty
  if at_least "$(candidate libdnnl-dev)" "$onednn_min"; then
    apt_install libdnnl-dev
  else
    onednn_from_pypi
  fi
fi
[ $bench = 0 ] || torch_peer
[ $fuzz = 0 ] || fuzz_toolchain
[ $updated = 0 ] || echo "install-deps.sh: done"
