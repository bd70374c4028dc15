#!/usr/bin/env bash
# Do transparent huge pages pay for the trainer's buffers (issue 64)?  The
# same runs with and without glibc's malloc asking for them
# (GLIBC_TUNABLES=glibc.malloc.hugetlb=1: madvise(MADV_HUGEPAGE) on its
# mmap'd chunks: parameters, gradients' accumulators, optimizer state,
# activations, oneDNN's scratchpads), where THP is "madvise" as on Debian.
# Interleaved rounds, one instance on all cores; the speed is the last log
# interval's (steady state, after the first touches the huge pages save).
#
#   bench/run-hugepages.sh [BUILD_DIR] [ROUNDS]
#
# Prints round, model, pages, samples/s, the AnonHugePages the run held
# (sampled mid-run), then huge / small per model: median and range.
set -euo pipefail
build=${1:-build}; rounds=${2:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
text=/usr/share/games/fortunes
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
     "$(lscpu | grep -o 'avx512_bf16\|amx_bf16' | sort -u | tr '\n' ' ');" \
     "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
declare -A jobs=(
  [cnn]="--model cnn --batch-size 64 --max-steps 120 --log-every 40"
  [gpt-mini]="--model gpt-mini --text $text --batch-size 8 --max-steps 120 --log-every 40 --eval-windows 4"
  [gpt]="--model gpt --text $text --batch-size 1 --max-steps 9 --log-every 3 --eval-windows 1")
one() {  # model, pages (small|huge)
  local -a env=(); [ "$2" = huge ] && env=(GLIBC_TUNABLES=glibc.malloc.hugetlb=1)
  # shellcheck disable=SC2086
  env "${env[@]}" "$build/shmtrain" ${jobs[$1]} --no-checkpoint --quiet --out "$tmp/run" --overwrite \
    --metrics "$tmp/m.jsonl" & local pid=$! huge=0
  for _ in $(seq 1 40); do  # the most it held, sampled until it ends
    sleep 0.5
    local kb; kb=$(awk '/AnonHugePages/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
    [ "${kb:-0}" -gt "$huge" ] && huge=$kb
    kill -0 "$pid" 2>/dev/null || break
  done
  wait "$pid"
  local sps; sps=$(grep '"type":"train"' "$tmp/m.jsonl" | tail -1 | sed 's/.*"samples_per_s":\([0-9.]*\).*/\1/')
  echo "$r $1 $2 $sps ${huge}kB" | tee -a "$tmp/all.txt"
}
for r in $(seq 1 "$rounds"); do
  for m in ${MODELS:-cnn gpt-mini gpt}; do
    if [ $((r % 2)) = 1 ]; then one "$m" small; one "$m" huge; else one "$m" huge; one "$m" small; fi
  done
done
echo
echo "huge / small, per round, then the median:"
for m in ${MODELS:-cnn gpt-mini gpt}; do
  ratios=$(awk -v m="$m" '$2==m && $3=="small" {s[$1]=$4} $2==m && $3=="huge" {h[$1]=$4}
           END {for (r in s) printf "%.3f\n", h[r]/s[r]}' "$tmp/all.txt" | sort -g)
  echo "$m $(echo $ratios) median $(echo "$ratios" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')"
done
