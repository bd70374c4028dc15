#!/usr/bin/env bash
# Install what shmtrain needs, from the distribution's packages (Debian, Ubuntu),
# as scripts/deps.table lists it (what each part needs, and the package that
# brings it on each distribution).
#
#   scripts/install-deps.sh            install anything missing (build + tests + data)
#   scripts/install-deps.sh --bench    also PyTorch in .deps/torch-venv (the benches' peer and the
#                                      shm backend's, `make python`), numpy and tensorboard
#   scripts/install-deps.sh --fuzz     also clang with libFuzzer (`make fuzz`)
#   scripts/install-deps.sh --check    list what is missing; exit 1 if anything is
#
# PyTorch (--bench): .deps/torch-venv, made once, by the first route that works:
#   1. pip's torch==2.13.0+cpu (where an index or a local wheel carries that CPU build;
#      SHMTRAIN_TORCH_INDEX=https://download.pytorch.org/whl/cpu lets pip use PyTorch's own
#      CPU index, on any distribution), with numpy, setuptools and tensorboard;
#   2. the distribution's python3-torch (Debian 13: 2.6, with its headers), in a venv made with
#      --system-site-packages, so pip installs into the venv and never into the system.
# The table's torch row says which routes each distribution tries.
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
table=$root/scripts/deps.table
onednn_min=3.1
onednn_prefix=$root/.deps/onednn
# PyPI's oneDNN 3.2.0 built with GNU OpenMP: the library and its headers.
onednn_wheels=("onednn-cpu-gomp==2023.2.0 --hash=sha256:2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb"
               "onednn-devel-cpu-gomp==2023.2.0 --hash=sha256:9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284")
torch_venv=$root/.deps/torch-venv
torch_pin=2.13.0+cpu   # a CPU build: a bare `torch` from PyPI brings gigabytes of CUDA
tensorboard_pin=2.20.0
# Hugging Face's Trainer (tests/torch/test_hf_trainer.py): the versions its tests ran against
transformers_pin=5.24.0
accelerate_pin=1.15.0

mode=install; parts="build test run"
for arg in "$@"; do
  case "$arg" in
    --check) mode=check ;;
    --bench) parts="$parts python optional bench" ;;
    --fuzz) parts="$parts fuzz" ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

# The table's column for this system: ID-VERSION_ID from os-release; a Debian
# without a version (testing, unstable) reads Debian 13's, another Debian-like
# system the nearest of its family, with a warning.
distro_column() {
  local id="" version="" like=""
  [ -r /etc/os-release ] && . /etc/os-release && id=${ID:-} version=${VERSION_ID:-} like=${ID_LIKE:-}
  local col="$id-$version"
  if grep -q "^# need .* $col\( \|\$\)" "$table"; then echo "$col"; return; fi
  case "$id $like" in
    debian*) [ -n "$version" ] && [ "${version%%.*}" -lt 13 ] && echo debian-12 || echo debian-13 ;;
    *ubuntu*) echo ubuntu-24.04 ;;
    *) echo debian-13 ;;
  esac
  echo "install-deps.sh: scripts/deps.table has no column for '$col'; using its nearest" >&2
}
column=$(distro_column)

# "need probe cell" for every row of the given parts, the cell this system's.
rows() {
  awk -v parts=" $* " -v col="$column" '
    /^# need / { for (i = 1; i <= NF; i++) if ($i == col) c = i - 1; next }
    /^#/ || NF == 0 { next }
    index(parts, " " $3 " ") { print $1, $2, $c }' "$table"
}
cell_of() { awk -v need="$1" -v col="$column" '/^# need / { for (i = 1; i <= NF; i++) if ($i == col) c = i - 1; next }
                                              /^#/ || NF == 0 { next } $1 == need { print $c }' "$table"; }

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
  # through env: sudo drops the caller's environment, and debconf would ask on the terminal
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
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

onednn() {
  [ -z "$(onednn_source)" ] || return 0
  [ -n "$(candidate libdnnl-dev)" ] || apt_update libdnnl-dev  # a fresh machine's package lists are empty
  if [[ "$(cell_of onednn)" == *libdnnl-dev* ]] && at_least "$(candidate libdnnl-dev)" "$onednn_min"; then
    apt_install libdnnl-dev
  else
    onednn_from_pypi
  fi
}

# The venv's Python has torch (any version: Debian 12's 1.13 is a peer for the
# benches, too old for the backend, which its setup.py says).
venv_has() { [ -x "$torch_venv/bin/python" ] && "$torch_venv/bin/python" -c "import $1" 2>/dev/null; }

# Route 1: pip's CPU build into a venv of its own.
torch_from_pip() {
  local index=()
  [ -z "${SHMTRAIN_TORCH_INDEX:-}" ] || index=(--extra-index-url "$SHMTRAIN_TORCH_INDEX")
  rm -rf "$torch_venv"
  python3 -m venv "$torch_venv" &&
    pip_quietly "$torch_venv/bin/pip" install -q "${index[@]}" "torch==$torch_pin" numpy setuptools &&
    venv_has torch
}

# Route 2: the distribution's PyTorch, seen through a venv's system site-packages.
torch_from_distribution() {
  local pkgs="$1" missing=() p
  for p in ${pkgs//,/ } python3-setuptools python3-numpy; do installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
  rm -rf "$torch_venv"
  python3 -m venv --system-site-packages "$torch_venv" && venv_has torch
}

torch_peer() {
  if venv_has torch; then return 0; fi
  local routes; routes=$(cell_of torch)
  [ -z "${SHMTRAIN_TORCH_INDEX:-}" ] || routes="venv:torch|$routes"
  local route
  for route in ${routes//|/ }; do
    case "$route" in
      venv:torch) torch_from_pip && break
                  echo "install-deps.sh: no PyTorch $torch_pin from pip here${SHMTRAIN_TORCH_INDEX:+ or $SHMTRAIN_TORCH_INDEX}" >&2 ;;
      *) torch_from_distribution "$route" && break
         echo "install-deps.sh: the distribution's PyTorch ($route) did not import in a venv" >&2 ;;
    esac
  done
  if venv_has torch; then
    echo "install-deps.sh: PyTorch $("$torch_venv/bin/python" -c 'import torch; print(torch.__version__)')" \
         "in $torch_venv$(grep -q 'include-system-site-packages = true' "$torch_venv/pyvenv.cfg" && echo ' (the distribution'"'"'s, through system site-packages)')"
  else
    rm -rf "$torch_venv"
    echo "install-deps.sh: no PyTorch here; the torch tests skip (counted) and make python cannot run" >&2
  fi
}

# What --bench puts in the venv by pip (the table's venv: cells), torch's route aside.
venv_extras() {
  [ -x "$torch_venv/bin/pip" ] || return 0
  local need probe cell want=() m
  while read -r need probe cell; do
    [ "$need" != torch ] || continue
    for alt in ${cell//|/ }; do
      case "$alt" in venv:*) m=${alt#venv:}; venv_has "$m" || want+=("$m") ;; esac
    done
  done < <(rows python optional bench)
  [ ${#want[@]} -gt 0 ] || return 0
  local specs=() w
  for w in "${want[@]}"; do
    case "$w" in
      tensorboard) specs+=("tensorboard==$tensorboard_pin") ;;
      transformers) specs+=("transformers==$transformers_pin") ;;
      accelerate) specs+=("accelerate==$accelerate_pin") ;;
      *) specs+=("$w") ;;
    esac
  done
  pip_quietly "$torch_venv/bin/pip" install -q "${specs[@]}" ||
    echo "install-deps.sh: pip could not install ${want[*]} here; the tests that read with them skip (counted)" >&2
}

# Can clang build a libFuzzer program here, with OpenMP (the image folder's
# decoding runs on its threads)?
fuzz_works() {
  command -v clang >/dev/null || return 1
  local tmp rc=0; tmp=$(mktemp -d)
  printf '#include <omp.h>\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return omp_get_max_threads() - 1; }\n' |
    clang -x c -fopenmp -fsanitize=fuzzer,address,undefined -o "$tmp/fuzz" - 2>/dev/null || rc=1
  rm -rf "$tmp"
  return $rc
}
# The table names the libFuzzer runtime for the distribution's default clang;
# another clang needs its own version's package.
fuzz_toolchain() {
  fuzz_works && return 0
  installed clang || apt_install clang
  installed libomp-dev || apt_install libomp-dev
  fuzz_works && return 0
  apt_install "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"
  fuzz_works || { echo "install-deps.sh: clang cannot build a libFuzzer program with OpenMP here" >&2; exit 1; }
}

# The apt packages the chosen parts' rows name (special cells handled apart).
missing=()
while read -r need probe cell; do
  case "$need" in onednn|torch) continue ;; esac
  [ "$need" = libfuzzer ] && continue  # fuzz_toolchain: the version follows the installed clang
  alt=${cell%%|*}
  case "$alt" in -|venv:*|wheel:*) continue ;; esac
  for p in ${alt//,/ }; do
    installed "$p" || missing+=("$p")
  done
done < <(rows $parts)

if [ "$mode" = check ]; then
  [ -n "$(onednn_source)" ] || missing+=("oneDNN>=$onednn_min ($(cell_of onednn))")
  case " $parts " in *" optional "*) venv_has torch || missing+=("PyTorch in .deps/torch-venv") ;; esac
  case " $parts " in *" fuzz "*) fuzz_works || missing+=("clang with libFuzzer") ;; esac
  [ ${#missing[@]} -eq 0 ] && exit 0
  echo "missing: ${missing[*]}"
  exit 1
fi

[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
onednn
case " $parts " in *" optional "*) torch_peer; venv_extras ;; esac
case " $parts " in *" fuzz "*) fuzz_toolchain ;; esac
[ $updated = 0 ] || echo "install-deps.sh: done"
