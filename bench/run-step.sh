#!/usr/bin/env bash
# Training-step time per preset, shmtrain's engine beside PyTorch, interleaved.
#   bench/run-step.sh [BUILD_DIR] [ROUNDS] [PRECISIONS]
# PRECISIONS: "fp32" (default) or "fp32 bf16": shmtrain --precision bf16 and
# PyTorch under torch.autocast(cpu, bfloat16).  Each round runs st-step-bench
# once per precision (all presets, 1 and 2 threads) and then PyTorch on the same
# configurations; the table shows medians over rounds.  shmtrain's bf16 needs
# a CPU with native bf16 in oneDNN (AVX512-BF16, AMX); elsewhere its rows say so.
# The peer: bench/peer.sh (SHMTRAIN_PYTHON, else install-deps.sh --bench's
# PyTorch 2.13, else Debian's 1.13), in each of PEER_MODES (default "eager
# channels_last compile": torch_step.py --mode); the table takes its fastest
# mode on each row by median, and names it.
set -euo pipefail
build=${1:-build}; rounds=${2:-5}; precisions=${3:-fp32}
seconds=${STEP_SECONDS:-1}; models=${MODELS:-mlp lenet cnn resnet}  # shorter or fewer: bench/report.sh --tiny
peer_modes=${PEER_MODES:-eager channels_last compile}
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$here/peer.sh"; torch_ok=$peer_ok
export OMP_PROC_BIND=close OMP_PLACES=cores
step_bench=$build/bench/st-step-bench  # or on PATH (the device bundle puts every binary in one bin/)
[ -x "$step_bench" ] || step_bench=$(command -v st-step-bench)
no_bf16=""
case " $precisions " in *" bf16 "*)
  "$step_bench" --precision bf16 --models mlp --rounds 1 --seconds 0.01 >/dev/null 2>"$tmp/bf16.err" ||
    no_bf16=$(sed 's/.*its ISA: \([^;]*\);.*/no native bf16 (ISA \1)/' "$tmp/bf16.err" | head -1);;
esac
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; batch 64; $rounds interleaved rounds; $peer_version"
for r in $(seq 1 "$rounds"); do
  for q in $precisions; do
    if [ "$q" = fp32 ] || [ -z "$no_bf16" ]; then
      "$step_bench" --rounds 1 --seconds "$seconds" --csv --precision "$q" --models "${models// /,}" | tail -n +2 | sed "s/^/$q,/" >> "$tmp/shm.csv"
    fi
    if [ $torch_ok = 1 ]; then
      for m in $models; do for t in 1 2; do for mode in $peer_modes; do
        line=$(taskset -c 0-$((t - 1)) "${peer[@]}" "$here/torch_step.py" "$m" "$t" --seconds "$seconds" \
                 --precision "$q" --mode "$mode" 2> "$tmp/torch.err") ||
          { echo "torch_step.py $m $t --mode $mode: $(tail -1 "$tmp/torch.err")" >&2; continue; }
        echo "$q $line" >> "$tmp/torch.txt"
      done; done; done
    fi
  done
done
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ms_to_sps() { awk -v s="$1" 'BEGIN{print 64/s*1e3}'; }
echo
echo "| model | threads | precision | shmtrain step ms | samples/s | PyTorch step ms | samples/s | PyTorch mode | ratio | conversions (MB) / weight reorders per step |"
echo "|---|---|---|---|---|---|---|---|---|---|"
peer_ms() {  # mode -> the peer's median step ms on the row (q, m, t)
  [ -f "$tmp/torch.txt" ] && awk -v q=$q -v m=$m -v t=$t -v md=$1 '$1==q && $2==m && $3==t && $6==md {print $4}' \
    "$tmp/torch.txt" | median
}
for m in $models; do for t in 1 2; do for q in $precisions; do
  s=$(awk -F, -v q=$q -v m=$m -v t=$t '$1==q && $2==m && $3==t {print $5}' "$tmp/shm.csv" | median)
  fastest=$(peer_fastest "$peer_modes" lower peer_ms); mode=${fastest% *}; p=${fastest#* }
  if [ -z "$s" ]; then shm="| $no_bf16 | "; else shm=$(printf "| %.3f | %.0f" "$s" "$(ms_to_sps "$s")"); fi
  tor="| not installed | | "
  [ -z "$p" ] || tor=$(printf "| %.3f | %.0f | %s" "$p" "$(ms_to_sps "$p")" "$mode")
  ratio=$([ -n "$s" ] && [ -n "$p" ] && awk -v a="$s" -v b="$p" 'BEGIN{printf "%.2fx", b/a}' || echo "-")
  counters=$(awk -F, -v q=$q -v m=$m -v t=$t '$1==q && $2==m && $3==t {c=sprintf("%s (%.2f) / %s", $(NF-2), $(NF-1), $NF)} END {print c}' "$tmp/shm.csv")
  echo "| $m | $t | $q $shm $tor | $ratio | ${counters:--} |"
done; done; done
if [ -f "$tmp/torch.txt" ]; then
  echo
  echo "The peer in each mode (median step ms; none: the mode failed):"
  for m in $models; do for t in 1 2; do for q in $precisions; do
    echo "  $m $t $q: $(for md in $peer_modes; do v=$(peer_ms "$md"); echo -n "$md ${v:-none}  "; done)"
  done; done; done
fi
echo
echo "time per step by layer kind, loss, optimizer and the rest (last round, ms):"
echo "precision,$(head -1 <("$step_bench" --rounds 1 --seconds 0.2 --csv --models mlp) | tr -d '\n')"
tail -8 "$tmp/shm.csv"
