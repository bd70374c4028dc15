#!/usr/bin/env bash
# The all-reduce against its peers, interleaved: ROUNDS rounds (default 3),
# each running every peer that is installed once, in the same order:
#   openmpi        mpirun --bind-to core --mca btl self,vader st-allreduce-bench-mpi
#                  (times shmtrain and MPI_Allreduce in the same processes)
#   openmpi-tuned  the same with GLIBC_TUNABLES raising glibc's mmap and trim
#                  thresholds: without it, glibc hands Open MPI's large temporary
#                  buffers to a fresh mmap every call (from 32 MiB)
#   mpich          mpiexec.mpich -bind-to core, the same harness built with mpicc.mpich
#   gloo           PyTorch's gloo (bench/peer.sh's Python), f32 only
#   torch-shm      PyTorch over shmtrain's "shm" backend (python/shmtrain_torch, built
#                  into BUILD_DIR/python by the build), f32 only; not in the default set
# then one table: per size the median over rounds (bench/allreduce_table.py).
# Without Open MPI among the peers, shmtrain alone (st-allreduce-bench -n RANKS).
#
#   bench/run-allreduce.sh [BUILD_DIR] [RANKS] [st-allreduce-bench flags: --min --max --seconds --dtype --no-refill]
#   ROUNDS=3 PEERS="openmpi openmpi-tuned mpich gloo" bench/run-allreduce.sh build 2 --max 64M
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
ranks=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
rounds=${ROUNDS:-3}
peers=${PEERS:-openmpi openmpi-tuned mpich gloo}
tunable=glibc.malloc.mmap_threshold=536870912:glibc.malloc.trim_threshold=1073741824
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

gloo_args=(); f32=1; prev=
for a in "$@"; do
  case "$prev" in --min|--max|--seconds) gloo_args+=("$prev" "$a") ;; --dtype) [ "$a" = bf16 ] && f32=0 ;; esac
  [ "$a" = --no-refill ] && gloo_args+=(--no-refill)
  prev=$a
done

# MPICH's build of the same harness, made here: CMake configures one MPI.
mpich_bench=$build/bench/st-allreduce-bench-mpich
if [[ " $peers " == *" mpich "* ]] && command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null; then
  mpicc.mpich -O2 -DWITH_MPI -I"$root/include" "$root/bench/allreduce_bench.c" \
    "$build/libshmtrain-coll.a" "$build/libshmtrain-common.a" -fopenmp -lm -lpthread -o "$mpich_bench"
else mpich_bench=; fi
. "$root/bench/peer.sh"

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -r); $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $ranks ranks, $rounds rounds"
ompi() { OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$ranks" --bind-to core --mca btl self,vader "$@"; }
have_ompi=0
[ -x "$build/bench/st-allreduce-bench-mpi" ] && command -v mpirun >/dev/null && have_ompi=1
[ $have_ompi = 1 ] && echo "# openmpi: $(mpirun --version 2>/dev/null | head -1)"
[ -n "$mpich_bench" ] && echo "# mpich: $(mpiexec.mpich --version 2>/dev/null | sed -n "s/^ *Version: *//p" | head -1)"
[ $peer_ok = 1 ] && [ $f32 = 1 ] && echo "# gloo: $peer_version"
for r in $(seq 1 "$rounds"); do
  if [ $have_ompi = 0 ] || [[ " $peers " != *" openmpi"* ]]; then  # else the MPI harness times shmtrain too
    "$build/bench/st-allreduce-bench" -n "$ranks" --csv "$@" > "$out/shmtrain.$r.csv"
  fi
  for p in $peers; do
    case $p in
      openmpi) [ $have_ompi = 1 ] && ompi "$build/bench/st-allreduce-bench-mpi" --csv "$@" > "$out/openmpi.$r.csv" ;;
      openmpi-tuned) [ $have_ompi = 1 ] && ompi -x GLIBC_TUNABLES=$tunable "$build/bench/st-allreduce-bench-mpi" --csv "$@" \
                       > "$out/openmpi-tuned.$r.csv" ;;
      mpich) [ -n "$mpich_bench" ] && mpiexec.mpich -n "$ranks" -bind-to core "$mpich_bench" --csv "$@" > "$out/mpich.$r.csv" ;;
      gloo) [ $peer_ok = 1 ] && [ $f32 = 1 ] && "${peer[@]}" "$root/bench/torch_allreduce.py" --ranks "$ranks" "${gloo_args[@]}" \
              > "$out/gloo.$r.csv" 2>/dev/null ;;
      torch-shm) [ $peer_ok = 1 ] && [ $f32 = 1 ] && PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" \
                   "${peer[@]}" "$root/bench/torch_allreduce.py" --ranks "$ranks" --backend shm "${gloo_args[@]}" \
                   > "$out/torch-shm.$r.csv" 2>/dev/null ;;
      *) echo "run-allreduce.sh: unknown peer '$p' (openmpi openmpi-tuned mpich gloo torch-shm)" >&2; exit 2 ;;
    esac || true
  done
done
python3 "$root/bench/allreduce_table.py" "$out"
