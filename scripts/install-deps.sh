#!/usr/bin/env bash
# Install what shmtrain needs, from Debian's (or Ubuntu's) packages.
#
#   scripts/install-deps.sh            install anything missing (build + tests + data)
#   scripts/install-deps.sh --bench    also the benchmark peer (PyTorch + OpenBLAS)
#   scripts/install-deps.sh --check    list what is missing; exit 1 if anything is
#
# The Makefile runs it before every build, so a fresh machine goes from clone
# to a green `make test` with no other step.  It is quiet when nothing is missing.
set -euo pipefail

required=(gcc make cmake pkg-config libdnnl-dev libhwloc-dev hwloc libcmocka-dev gnuplot-nox
          zlib1g-dev dataset-fashion-mnist openmpi-bin libopenmpi-dev fortunes)
bench=(python3-torch libopenblas0-pthread)

mode=install
want=("${required[@]}")
for arg in "$@"; do
  case "$arg" in
    --check) mode=check ;;
    --bench) want+=("${bench[@]}") ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

missing=()
for p in "${want[@]}"; do installed "$p" || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$mode" = check ]; then
  echo "missing packages: ${missing[*]}"
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "install-deps.sh: no apt-get here; install by hand: ${missing[*]}" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps.sh: done"
