#!/usr/bin/env bash
# Run the all-reduce benchmark with N ranks (default 2), one per core.  When
# Open MPI is installed the MPI build of the same harness runs under mpirun,
# so MPI_Allreduce is timed in the same processes, size by size.
#
#   bench/run-allreduce.sh [BUILD_DIR] [RANKS] [extra st-allreduce-bench flags]
set -euo pipefail
build=${1:-build}
ranks=${2:-2}
shift $(( $# < 2 ? $# : 2 ))

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -r); $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
if [ -x "$build/bench/st-allreduce-bench-mpi" ] && command -v mpirun >/dev/null; then
  echo "# $(mpirun --version 2>/dev/null | head -1); mpirun -np $ranks --bind-to core"
  # Running as root (containers, CI) needs Open MPI's explicit consent.
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np "$ranks" --bind-to core --mca btl self,vader \
    "$build/bench/st-allreduce-bench-mpi" "$@"
else
  echo "# Open MPI not installed: shmtrain only (scripts/install-deps.sh --bench adds it)"
  "$build/bench/st-allreduce-bench" -n "$ranks" "$@"
fi
