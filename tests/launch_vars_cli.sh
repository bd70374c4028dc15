#!/bin/sh
# Launch variables set the way schedulers and tired users set them (issue
# 30): each refused with one line naming the variables, or, where they
# agree, the run record names the launcher it obeyed.
#   launch_vars_cli.sh SHMTRAIN SHMRUN HAVE_MPI(0|1)
set -u
shmtrain=$1 shmrun=$2 have_mpi=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
. "$(dirname "$0")/cli_expect.sh"
cd "$tmp" || exit 1  # a run without --checkpoint makes its folder in runs/ here
run="--model mlp --max-steps 1 --quiet"

# Open MPI's variables outside mpirun: MPI starts a world of one, which
# trained alone as if it were the whole job.
if [ "$have_mpi" = 1 ]; then
  expect ompi-by-hand 1 "rank 0 of 2, but MPI started rank 0 of 1" -- \
    env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 "$shmtrain" $run --out "$tmp/ompi"
fi
# torchrun's names beside shmrun's that disagree: which did it obey?
expect shmrun-and-torchrun-disagree 1 "SHMTRAIN_RANK=0 SHMTRAIN_WORLD_SIZE=1 (shmrun) but RANK=1 WORLD_SIZE=2" -- \
  env SHMTRAIN_RANK=0 SHMTRAIN_WORLD_SIZE=1 RANK=1 WORLD_SIZE=2 "$shmtrain" $run
# A world of two with no way to reach the other: no job id to meet under
# (nor to name a run folder by: that is found first, a bad flag).
expect torchrun-names-no-job 2 "share no job id" -- env RANK=0 WORLD_SIZE=2 "$shmtrain" $run
expect torchrun-names-no-job-out 1 "SHMTRAIN_JOB_ID is not set" -- \
  env RANK=0 WORLD_SIZE=2 "$shmtrain" $run --out "$tmp/two"
# shmrun inside another launcher's world of two: two gangs under one name.
expect shmrun-inside-mpirun 2 "started by mpirun as rank 0 of 2" -- \
  env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 "$shmrun" -n 2 --quiet --log-dir "$tmp/logs" -- /bin/true
expect shmrun-inside-shmrun 2 "started by shmrun as rank 1 of 2" -- \
  env SHMTRAIN_RANK=1 SHMTRAIN_WORLD_SIZE=2 "$shmrun" -n 2 --quiet --log-dir "$tmp/logs" -- /bin/true
expect slurm-malformed-list 1 "SLURM_TASKS_PER_NODE='2,,2' does not give node 0's task count" -- \
  env SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_NODEID=0 SLURM_NNODES=2 SLURM_TASKS_PER_NODE=2,,2 "$shmtrain" $run
# Agreeing: the run record says whose variables placed the instance.
for launch in "shmrun:$shmrun -n 2 --quiet --log-dir $tmp/logs -- $shmtrain" "none:$shmtrain"; do
  want=${launch%%:*}
  ${launch#*:} $run --metrics "$tmp/$want.jsonl" >/dev/null 2>&1
  if grep -q "\"launcher\":\"$want\"" "$tmp/$want.jsonl" 2>/dev/null; then
    echo "ok   run-record-$want: launcher \"$want\""
  else
    echo "FAIL run-record-$want: no \"launcher\":\"$want\" in the run record"; failed=1
  fi
done
exit $failed
