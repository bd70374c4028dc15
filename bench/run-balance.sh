#!/usr/bin/env bash
# --balance dynamic against static (issue 64), interleaved rounds: 3
# instances on this machine's cores with --oversubscribe (on 2 cores two
# share one: a straggler at half speed, as a noisy neighbour or a slower
# core makes one), and 2 instances on 2 cores (no straggler: dynamic must
# cost nothing there).  Each beside the same instances alone
# (--balance independent: no exchange, each its own model; its speed the
# sum of theirs), the machine's ceiling that both are measured against.
#
#   bench/run-balance.sh [BUILD_DIR] [ROUNDS] [STEPS] [MODELS] [ACCUM]
#
# defaults: build 3 60 "mlp cnn gpt-mini" 4.  STREAM=1: the image models train
# on a folder of 32 x 32 PNGs (st-decode-bench --make png32, 4,000) streamed
# past --data-memory, each instance decoding its batches (dynamic: as taken,
# static: one ahead).  Prints round, instances, model,
# balance, samples/s (the run's own, training only) and rank 0's share of
# the micro-batches; then dynamic / static, static / independent and
# dynamic / independent per round and the medians.
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; steps=${3:-60}; models=${4:-mlp cnn gpt-mini}; accum=${5:-4}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
images=()
if [ "${STREAM:-0}" = 1 ]; then
  "$build/bench/st-decode-bench" --dir "$tmp/png32" --make png32 --count 4000 > /dev/null
  images=(--image-folder "$tmp/png32" --data-memory 0.001)
fi
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
     "$(lscpu | grep -o 'avx512_bf16\|amx_bf16' | sort -u | tr '\n' ' '); $steps steps, --grad-accum $accum"
for r in $(seq 1 "$rounds"); do
  for n in 3 2; do
    for m in $models; do
      extra=(--batch-size 16 "${images[@]}"); [ "${m#gpt}" != "$m" ] && extra=(--text /usr/share/games/fortunes --batch-size 4 --eval-windows 4)
      for b in static dynamic independent; do
        "$build/shmrun" -n "$n" --oversubscribe --quiet --log-dir "$tmp/logs" -- "$build/shmtrain" --model "$m" \
          "${extra[@]}" --grad-accum "$accum" --balance "$b" --max-steps "$steps" --log-every "$steps" \
          --metrics "$tmp/m.jsonl" --no-checkpoint --overwrite --out "$tmp/run" --quiet
        sps=$(grep '"type":"summary"' "$tmp/m.jsonl" | sed 's/.*"samples_per_s":\([0-9.]*\).*/\1/')
        share=$(grep '"type":"summary"' "$tmp/m.jsonl" | sed -n 's/.*"micro_batches":\([0-9]*\),"micro_batches_here":\([0-9]*\).*/\2\/\1/p')
        echo "$r ${n}x1 $m $b $sps $share" | tee -a "$tmp/all.txt"
      done
    done
  done
done
for pair in dynamic/static static/independent dynamic/independent; do
  echo
  echo "$pair, per round, then the median:"
  for n in 3 2; do
    for m in $models; do
      ratios=$(awk -v n=${n}x1 -v m=$m -v a=${pair%/*} -v b=${pair#*/} '$2==n && $3==m && $4==a {x[$1]=$5}
               $2==n && $3==m && $4==b {y[$1]=$5} END {for (r in x) printf "%.3f\n", x[r]/y[r]}' "$tmp/all.txt")
      echo "${n}x1 $m $(echo $ratios) median $(echo "$ratios" | median)"
    done
  done
done
