#!/usr/bin/env bash
# Two builds of the engine, step against step, interleaved: what a dependency
# upgrade (oneDNN 2.6 -> 3.x) or an engine change costs or buys, per preset,
# thread count and precision.
#   bench/run-builds.sh BUILD_A BUILD_B [ROUNDS] [PRECISIONS] [SECONDS]
# e.g. bench/run-builds.sh build-26 build 5 "fp32 bf16"
# Each round runs st-step-bench of both builds once per precision, the order of
# the two alternating from round to round; image presets at batch 64, gpt-mini
# and gpt at batch 12 and 4 (their benches' sizes).  The table gives medians over
# rounds and B/A (below 1: B is faster).  A build without native bf16 says so.
set -euo pipefail
a=${1:?usage: run-builds.sh BUILD_A BUILD_B [ROUNDS] [PRECISIONS] [SECONDS]}; b=${2:?BUILD_B}
rounds=${3:-5}; precisions=${4:-fp32}; seconds=${5:-1}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_PROC_BIND=close OMP_PLACES=cores
sets=("mlp,lenet,cnn,resnet 64" "gpt-mini 12" "gpt 4")
run() {  # build round precision
  local set
  for set in "${sets[@]}"; do
    "$1/bench/st-step-bench" --rounds 1 --seconds "$seconds" --csv --precision "$3" --models "${set% *}" \
      --batch "${set#* }" 2>>"$tmp/err" | tail -n +2 | sed "s|^|$1,$3,|" >> "$tmp/steps.csv" || true
  done
}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
     "$(grep -o -m1 -E 'amx_bf16|avx512_bf16' /proc/cpuinfo || echo 'no native bf16'); $rounds rounds"
for build in "$a" "$b"; do
  echo "# $build: $("$build/shmtrain" --version 2>/dev/null | sed -n 's/^oneDNN /oneDNN /p' || echo '(no --version)')"
done
for r in $(seq 1 "$rounds"); do
  for q in $precisions; do
    if [ $((r % 2)) = 1 ]; then run "$a" "$r" "$q"; run "$b" "$r" "$q"; else run "$b" "$r" "$q"; run "$a" "$r" "$q"; fi
  done
done
median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'; }
echo
echo "| model | threads | precision | A step ms | B step ms | B/A |"
echo "|---|---|---|---|---|---|"
for set in "${sets[@]}"; do for m in ${set% *}; do m=${m//,/ }; for mm in $m; do for t in 1 2; do for q in $precisions; do
  sa=$(awk -F, -v b="$a" -v q=$q -v m=$mm -v t=$t '$1==b && $2==q && $3==m && $4==t {print $6}' "$tmp/steps.csv" | median)
  sb=$(awk -F, -v b="$b" -v q=$q -v m=$mm -v t=$t '$1==b && $2==q && $3==m && $4==t {print $6}' "$tmp/steps.csv" | median)
  ratio=$([ -n "$sa" ] && [ -n "$sb" ] && awk -v x="$sa" -v y="$sb" 'BEGIN{printf "%.3f", y/x}' || echo "-")
  echo "| $mm | $t | $q | ${sa:--} | ${sb:--} | $ratio |"
done; done; done; done; done
[ ! -s "$tmp/err" ] || { echo; echo "stderr (first lines):"; sort -u "$tmp/err" | head -5; }
