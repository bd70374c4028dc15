#!/usr/bin/env bash
# The bucketed overlap (--bucket-mb) against the plain exchange after the
# backward pass, across simulated nodes: mpirun -np 2 with
# SHMTRAIN_NODE_SIZE=1 (two nodes of one rank: the gradient exchange is the
# hierarchical all-reduce's MPI stage alone), interleaved rounds.
#
#   bench/run-overlap.sh [BUILD_DIR] [ROUNDS] [STEPS] [MODELS] [BUCKET_MB]
#
# defaults: build 3 200 "mlp lenet cnn gpt-mini" 0.25.  Prints round, model,
# bucket MB, samples/s (steady state: the median train interval after the
# first), then the bucketed / plain ratio per round.
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; steps=${3:-200}; models=${4:-mlp lenet cnn gpt-mini}; mb=${5:-0.25}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none --bind-to core -np 2
     -x SHMTRAIN_NODE_SIZE=1)
[ "$(id -u)" = 0 ] && mpi=("${mpi[0]}" --allow-run-as-root "${mpi[@]:1}")
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; 2 simulated nodes x 1 rank; $steps steps"
for r in $(seq 1 "$rounds"); do
  for m in $models; do
    extra=(); [ "${m#gpt}" != "$m" ] && extra=(--text /usr/share/games/fortunes --optimizer adamw --lr 1e-3 --batch-size 12 --eval-windows 4)
    for b in 0 "$mb"; do
      "${mpi[@]}" "$build/shmtrain" --model "$m" "${extra[@]}" --max-steps "$steps" --log-every $((steps / 4)) \
        --bucket-mb "$b" --metrics "$tmp/m.jsonl" --checkpoint "$tmp/c.ckpt" --overwrite --quiet
      sps=$(grep '"type":"train"' "$tmp/m.jsonl" | tail -n +2 | sed 's/.*"samples_per_s":\([0-9.]*\).*/\1/' | median)
      echo "$r $m $b $sps" | tee -a "$tmp/all.txt"
    done
  done
done
echo
echo "bucketed / plain, per round:"
for m in $models; do
  echo "$m $(awk -v m=$m -v b=$mb '$2==m && $3=="0" {p[$1]=$4} $2==m && $3==b {q[$1]=$4} END {for (r in p) printf "%.2f ", q[r]/p[r]}' "$tmp/all.txt")"
done
