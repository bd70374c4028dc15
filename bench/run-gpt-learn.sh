#!/usr/bin/env bash
# nanoGPT's CPU recipe on the fortunes corpus, shmtrain beside PyTorch
# (bench/torch_gpt.py), same model, init, windows, AdamW and schedule:
# validation loss every EVAL steps, SEEDS seeds each, runs interleaved.
#
#   bench/run-gpt-learn.sh [BUILD_DIR] [STEPS] [SEEDS] [PARTITION] [EVAL]
#
# defaults: build 2000 "1 2 3" 1x2 100.  Reports, per system, the final
# validation loss (median over seeds) and the training time to reach
# PyTorch's median final loss (evaluations left out of both clocks).
# The peer: bench/peer.sh (SHMTRAIN_PYTHON, else install-deps.sh --bench's PyTorch 2.13).
set -euo pipefail
build=${1:-build}; steps=${2:-2000}; seeds=${3:-1 2 3}; part=${4:-1x2}; every=${5:-100}
text=${TEXT:-/usr/share/games/fortunes}
here=$(cd "$(dirname "$0")" && pwd); out=${OUT:-$(mktemp -d)}
. "$here/peer.sh"
n=${part%x*}; c=${part#*x}
recipe=(--batch-size 12 --lr 1e-3 --min-lr 1e-4 --schedule cosine --warmup 100 --weight-decay 0.1 --beta2 0.99
        --clip-norm 1 --eval-windows 256)
# step, validation loss, and the training clock: time_s less the evaluations before it
clock() {
  awk -F'[:,}]' '/"type":"eval"/ { for (i = 1; i < NF; i++) { if ($i ~ /"step"/) st = $(i+1); if ($i ~ /"test_loss"/) l = $(i+1);
      if ($i ~ /"time_s"/) t = $(i+1); if ($i ~ /"eval_s"/) e = $(i+1) } print st, l, t - ev; ev += e }' "$1"
}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; gpt-mini, $steps steps, $part, seeds: $seeds; files in $out"
for s in $seeds; do
  [ -n "${REPORT_ONLY:-}" ] && break  # OUT holds a finished run: report it again
  "$build/shmrun" -n "$n" -c "$c" --quiet --log-dir "$out/logs" -- "$build/shmtrain" --model gpt-mini --text "$text" \
    --optimizer adamw "${recipe[@]}" --max-steps "$steps" --eval-every "$every" --log-every "$every" --seed "$s" \
    --quiet --metrics "$out/shm-$s.jsonl" --checkpoint "$out/shm-$s.ckpt"
  clock "$out/shm-$s.jsonl" > "$out/shm-$s.txt"
  "$build/shmrun" -n "$n" -c "$c" --quiet --log-dir "$out/logs" -- "${peer[@]}" "$here/torch_gpt.py" --model gpt-mini \
    --text "$text" "${recipe[@]}" --max-steps "$steps" --warm-steps 0 --eval-every "$every" --seed "$s" \
    --metrics "$out/torch-$s.jsonl"
  clock "$out/torch-$s.jsonl" > "$out/torch-$s.txt"
done
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
target=$(for s in $seeds; do tail -1 "$out/torch-$s.txt" | awk '{print $2}'; done | median)
reach() { awk -v t="$target" '$2 <= t {print $3; found = 1; exit} END {if (!found) print "nan"}' "$1"; }
echo
echo "| system | final validation loss per seed | median | time to PyTorch's median final loss ($target), median s |"
echo "|---|---|---|---|"
for sys in shm torch; do
  finals=$(for s in $seeds; do tail -1 "$out/$sys-$s.txt" | awk '{print $2}'; done | tr '\n' ' ')
  med=$(echo $finals | tr ' ' '\n' | median)
  tt=$(for s in $seeds; do reach "$out/$sys-$s.txt"; done | median)
  echo "| $([ $sys = shm ] && echo shmtrain || echo "$peer_version") | $finals | $med | $tt |"
done
echo
echo "Training time to each validation loss (median over seeds, s; nan: a seed never got there):"
echo
echo "| loss | shmtrain | PyTorch | PyTorch / shmtrain |"
echo "|---|---|---|---|"
for level in 2.6 2.4 2.2 2.1 2.05 2.0; do
  target=$level
  a=$(for s in $seeds; do reach "$out/shm-$s.txt"; done | median)
  b=$(for s in $seeds; do reach "$out/torch-$s.txt"; done | median)
  echo "| $level | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", b / a; else print "-" }') |"
done
