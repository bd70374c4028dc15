#!/usr/bin/env bash
# Training-step time per preset, shmtrain's engine beside PyTorch, interleaved.
#   bench/run-step.sh [BUILD_DIR] [ROUNDS]
# Each round runs st-step-bench once (all presets, 1 and 2 threads) and then
# PyTorch on the same configurations; the table shows medians over rounds.
set -euo pipefail
build=${1:-build}; rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3; torch_ok=0; $py -c 'import torch' 2>/dev/null && torch_ok=1
export OMP_PROC_BIND=close OMP_PLACES=cores
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; batch 64; $rounds interleaved rounds"
for r in $(seq 1 "$rounds"); do
  "$build/bench/st-step-bench" --rounds 1 --seconds 1 --csv | tail -n +2 >> "$tmp/shm.csv"
  if [ $torch_ok = 1 ]; then
    for m in mlp lenet cnn; do for t in 1 2; do
      taskset -c 0-$((t - 1)) $py "$here/torch_step.py" "$m" "$t" --seconds 1 >> "$tmp/torch.txt"
    done; done
  fi
done
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo
echo "| model | threads | shmtrain step ms | samples/s | PyTorch 1.13 step ms | samples/s | ratio |"
echo "|---|---|---|---|---|---|---|"
for m in mlp lenet cnn; do for t in 1 2; do
  s=$(awk -F, -v m=$m -v t=$t '$1==m && $2==t {print $4}' "$tmp/shm.csv" | median)
  p=$( [ -f "$tmp/torch.txt" ] && awk -v m=$m -v t=$t '$1==m && $2==t {print $3}' "$tmp/torch.txt" | median || true)
  if [ -n "$p" ]; then
    printf "| %s | %d | %.3f | %.0f | %.3f | %.0f | %.2fx |\n" $m $t $s "$(awk -v s=$s 'BEGIN{print 64/s*1e3}')" $p \
      "$(awk -v s=$p 'BEGIN{print 64/s*1e3}')" "$(awk -v a=$s -v b=$p 'BEGIN{print b/a}')"
  else
    printf "| %s | %d | %.3f | %.0f | not installed | | |\n" $m $t $s "$(awk -v s=$s 'BEGIN{print 64/s*1e3}')"
  fi
done; done
echo
echo "time per step by layer kind, loss, optimizer and the rest (last round, ms):"
head -1 <("$build/bench/st-step-bench" --rounds 1 --seconds 0.2 --csv --models mlp) | tr -d '\n'; echo
cat "$tmp/shm.csv" | tail -6
