#!/usr/bin/env bash
# Language-model training throughput (tokens/s): shmtrain beside the same GPT
# in PyTorch (bench/torch_gpt.py; DDP gloo for 2+ instances), under the same
# shmrun partitionings and pinning, interleaved, medians over rounds.
#
#   bench/run-gpt.sh [BUILD_DIR] [ROUNDS] [STEPS] [MODELS] [PARTITIONS] [PRECISIONS]
#
# defaults: build 3 40 "gpt-mini gpt" "1x1 1x2 2x1" "fp32".  Each run trains
# STEPS steps on the fortunes corpus (batch 12, AdamW, clip 1) after untimed
# warm-up steps; shmtrain's rate is its steady state (the median of its
# per-interval rates after the first), PyTorch's the timed steps.  bf16 needs
# a CPU with native bf16 (AVX512-BF16 or AMX).  The peer: bench/peer.sh
# (SHMTRAIN_PYTHON, else PyTorch 2.13 from scripts/install-deps.sh --bench),
# in each of PEER_MODES (default "eager compile": torch_gpt.py's --mode compile is
# nanoGPT's default), the faster by median on each row, named.
# After the table: each model's conversions and weight reorders per step.
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; steps=${3:-40}
models=${4:-gpt-mini gpt}; parts=${5:-1x1 1x2 2x1}; precisions=${6:-fp32}
text=${TEXT:-/usr/share/games/fortunes}; peer_modes=${PEER_MODES:-eager compile}
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$here/peer.sh"; torch_ok=$peer_ok
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
context() { [ "$1" = gpt ] && echo 256 || echo 64; }

run_shm() { # model n c precision -> tokens/s
  local log=$((steps / 4 > 0 ? steps / 4 : 1))
  "$build/shmrun" -n "$2" -c "$3" --quiet --log-dir "$tmp/logs" -- "$build/shmtrain" --model "$1" --text "$text" \
    --batch-size 12 --optimizer adamw --lr 1e-3 --weight-decay 0.1 --beta2 0.99 --clip-norm 1 \
    --max-steps "$((steps + log))" --log-every "$log" --eval-windows 1 --quiet --metrics "$tmp/m.jsonl" \
    --checkpoint "$tmp/c.ckpt" --overwrite --precision "$4"
  grep '"type":"train"' "$tmp/m.jsonl" | tail -n +2 | sed 's/.*"samples_per_s":\([0-9.]*\).*/\1/' | median |
    awk -v t="$(context "$1")" '{print $1 * t}'
}
run_torch() { # model n c precision mode -> tokens/s
  "$build/shmrun" -n "$2" -c "$3" --quiet --log-dir "$tmp/logs" -- "${peer[@]}" "$here/torch_gpt.py" --model "$1" \
    --mode "$5" --text "$text" --batch-size 12 --max-steps "$steps" --precision "$4" --metrics "$tmp/t.out" \
    2> "$tmp/t.err" ||
    { sed 's/^/torch_gpt.py: /' "$tmp/t.err" | tail -3 >&2; echo nan; return; }
  grep '"type":"summary"' "$tmp/t.out" | sed 's/.*"tokens_per_s":\([0-9.]*\).*/\1/'
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $steps steps x batch 12; $rounds interleaved rounds"
echo "# peer: $peer_version"
for r in $(seq 1 "$rounds"); do
  for m in $models; do for p in $parts; do for q in $precisions; do
    n=${p%x*}; c=${p#*x}
    echo "$m $p $q $(run_shm "$m" "$n" "$c" "$q")" >> "$tmp/shm.txt"
    if [ $torch_ok = 1 ]; then
      for mode in $peer_modes; do
        echo "$m $p $q $(run_torch "$m" "$n" "$c" "$q" "$mode") $mode" >> "$tmp/torch.txt"
      done
    fi
  done; done; done
done
echo "# shmtrain's run record: $(grep -o '"onednn":"[^"]*","isa":"[^"]*"' "$tmp/m.jsonl" | head -1)"
echo
echo "| model | instances x cores | precision | shmtrain tokens/s | PyTorch tokens/s | PyTorch mode | ratio |"
echo "|---|---|---|---|---|---|---|"
peer_rate() {  # mode -> the peer's median tokens/s on the row (m, p, q)
  [ -f "$tmp/torch.txt" ] && awk -v m=$m -v p=$p -v q=$q -v md=$1 '$1==m && $2==p && $3==q && $5==md {print $4}' \
    "$tmp/torch.txt" | median
}
for m in $models; do for p in $parts; do for q in $precisions; do
  s=$(awk -v m=$m -v p=$p -v q=$q '$1==m && $2==p && $3==q {print $4}' "$tmp/shm.txt" | median)
  fastest=$(peer_fastest "$peer_modes" higher peer_rate); mode=${fastest% *}; t=${fastest#* }
  if [ -n "$t" ]; then
    printf "| %s | %s | %s | %.0f | %.0f | %s | %.2fx |\n" $m $p $q $s $t $mode \
      "$(awk -v a=$s -v b=$t 'BEGIN{print a/b}')"
  else
    printf "| %s | %s | %s | %.0f | %s | | |\n" $m $p $q $s \
      "$([ $torch_ok = 1 ] && echo failed || echo 'not installed')"
  fi
done; done; done
if [ -f "$tmp/torch.txt" ]; then
  echo
  echo "The peer in each mode (median tokens/s; nan: the mode failed):"
  for m in $models; do for p in $parts; do for q in $precisions; do
    echo "  $m $p $q: $(for md in $peer_modes; do echo -n "$md $(peer_rate "$md")  "; done)"
  done; done; done
fi
# The dataflow's counters beside the times (issue 25): what one step of
# each model converts between fp32 and bf16 and how many weight reorders it
# makes, at this bench's batch (st-step-bench, one thread: they do not
# depend on threads).
step_bench=$build/bench/st-step-bench
[ -x "$step_bench" ] || step_bench=$(command -v st-step-bench)
echo
echo "| model | precision | conversions per step | MB converted | weight reorders |"
echo "|---|---|---|---|---|"
for m in $models; do for q in $precisions; do
  batch=$([ "$m" = gpt ] && echo 4 || echo 12)
  "$step_bench" --models "$m" --batch "$batch" --threads 1 --precision "$q" --rounds 1 --seconds 0.01 --csv |
    tail -1 | awk -F, -v m="$m" -v q="$q" '{printf "| %s | %s | %s | %.2f | %s |\n", m, q, $(NF-2), $(NF-1), $NF}'
done; done
