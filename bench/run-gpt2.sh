#!/usr/bin/env bash
# GPT-2 small (the gpt2 preset: 124M parameters, context 1024, vocabulary
# 50304) training beside the same model in PyTorch (bench/torch_gpt.py
# --model gpt2: nanoGPT's model.py as its train_gpt2 builds it, SDPA
# attention, cross-entropy over whole logits; bf16 under torch.autocast),
# same batch, context, AdamW, clipping and random token ids, interleaved,
# medians over rounds.  For each precision and thread count: tokens/s,
# peak resident memory (each run record's peak_rss_mb), the step's FLOPs a
# second over a big matmul's measured rate in that precision on the same
# threads (nanoGPT's count: 6 N + 12 L C T per token, N the parameters in
# products), and shmtrain's step by layer kind (st-step-bench).  The peer
# runs in each of PEER_MODES (default "eager compile": torch.compile is
# nanoGPT's default), and the table takes its faster one by median, named.
#
#   bench/run-gpt2.sh [BUILD_DIR] [ROUNDS] [STEPS] [BATCH] [THREADS] [PRECISIONS]
#
# defaults: build 2 3 1 "1 2" "fp32 bf16".  Each run trains STEPS timed steps
# after one untimed step (shmtrain: the median of its per-step rates after
# the first).  bf16 needs native bf16 (AVX512-BF16 or AMX).  BATCH 12 is the
# recipe's (about 12 GB for the peer in fp32); the machine's memory decides.
set -euo pipefail
build=${1:-build}; rounds=${2:-2}; steps=${3:-3}; batch=${4:-1}
threads=${5:-1 2}; precisions=${6:-fp32 bf16}; modes=${PEER_MODES:-eager compile}
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$here/peer.sh"
[ $peer_ok = 1 ] || { echo "run-gpt2.sh: the peer needs PyTorch ($peer_version)" >&2; exit 1; }
pin() { # threads command...: on the first THREADS CPUs (where taskset is there)
  local t=$1; shift
  if command -v taskset > /dev/null; then OMP_NUM_THREADS=$t taskset -c 0-$((t - 1)) "$@"; else OMP_NUM_THREADS=$t "$@"; fi
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
field() { grep "\"type\":\"$1\"" "$2" | tail -1 | sed "s/.*\"$3\":\([0-9.]*\).*/\1/"; }
"${peer[@]}" -c "import array, random; random.seed(1)
array.array('H', (random.randrange(50257) for _ in range(400000))).tofile(open('$tmp/ids.bin', 'wb'))"

run_shm() { # threads precision -> "tokens/s rss_mb"
  pin "$1" "$build/shmtrain" --model gpt2 --tokens-bin "$tmp/ids.bin" \
    --batch-size "$batch" --max-steps $((steps + 1)) --log-every 1 --eval-windows 1 --no-checkpoint --quiet \
    --out "$tmp/run" --overwrite --metrics "$tmp/m.jsonl" --precision "$2" > /dev/null
  echo "$(grep '"type":"train"' "$tmp/m.jsonl" | tail -n +2 | sed 's/.*"tokens_per_s":\([0-9.]*\).*/\1/' | median)" \
       "$(field summary "$tmp/m.jsonl" peak_rss_mb)"
}
run_torch() { # threads precision mode -> "tokens/s rss_mb"
  pin "$1" "${peer[@]}" "$here/torch_gpt.py" --model gpt2 --mode "$3" \
    --tokens-bin "$tmp/ids.bin" --batch-size "$batch" --max-steps "$steps" --warm-steps 1 --lr 6e-4 \
    --weight-decay 0.1 --beta2 0.95 --clip-norm 1 --eval-windows 1 --precision "$2" --quiet \
    --metrics "$tmp/t.jsonl" 2> "$tmp/t.err" || { tail -3 "$tmp/t.err" >&2; echo "nan nan"; return; }
  echo "$(field summary "$tmp/t.jsonl" tokens_per_s) $(field summary "$tmp/t.jsonl" peak_rss_mb)"
}
peak() { # threads precision -> GFLOP/s of an n^3 matmul, best of 6 (PyTorch's oneDNN/MKL); n 2048,
  # 4096 above 4 threads: 2048^3 is ~6 ms on 16 AMX cores, too short to fill them (0r)
  pin "$1" "${peer[@]}" - "$2" "$(($1 > 4 ? 4096 : 2048))" <<'EOF'
import sys, time, torch
dt = torch.bfloat16 if sys.argv[1] == "bf16" else torch.float32
n = int(sys.argv[2])
a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
best = 1e9
for _ in range(6):
    t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)
print(f"{2 * n ** 3 / best / 1e9:.0f}")
EOF
}
# nanoGPT's estimate_mfu: 6 N + 12 L C T per token, N without the position table
flops_per_token=$(awk 'BEGIN { n = 124475904 - 1024 * 768; print 6 * n + 12 * 12 * 768 * 1024 }')

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs" \
     "($(lscpu | grep -o 'avx512_bf16\|amx_bf16' | sort -u | tr '\n' ' ')); batch $batch x 1024, $steps steps," \
     "$rounds interleaved rounds; peer: $peer_version"
for r in $(seq 1 "$rounds"); do
  for t in $threads; do for q in $precisions; do
    echo "$t $q $(run_shm "$t" "$q")" >> "$tmp/shm.txt"
    for m in $modes; do echo "$t $q $(run_torch "$t" "$q" "$m") $m" >> "$tmp/torch.txt"; done
    echo "$t $q $(peak "$t" "$q")" >> "$tmp/peak.txt"
  done; done
done
echo
echo "| threads | precision | shmtrain tokens/s | PyTorch tokens/s | PyTorch mode | ratio | shmtrain GFLOP/s | matmul peak GFLOP/s | share of peak | PyTorch share | shmtrain peak RSS MB | PyTorch peak RSS MB |"
echo "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for t in $threads; do for q in $precisions; do
  pick() { awk -v t=$t -v q=$q -v c=$2 -v m="${3:-}" '$1==t && $2==q && (m == "" || $5 == m) {print $c}' \
             "$tmp/$1.txt" | median; }
  fastest=$(peer_fastest "$modes" higher pick torch 3); best=${fastest% *}; p=${fastest#* }
  [ -n "$best" ] || { echo "| $t | $q | $(pick shm 3) | failed | $modes | | | | | | | |"; continue; }
  s=$(pick shm 3); g=$(pick peak 3); sr=$(pick shm 4); pr=$(pick torch 4 "$best")
  awk -v t=$t -v q=$q -v s=$s -v p=$p -v g=$g -v f=$flops_per_token -v sr=$sr -v pr=$pr -v m="$best" 'BEGIN {
    printf "| %s | %s | %.0f | %.0f | %s | %.2fx | %.0f | %.0f | %.0f%% | %.0f%% | %.0f | %.0f |\n",
      t, q, s, p, m, s / p, s * f / 1e9, g, 100 * s * f / 1e9 / g, 100 * p * f / 1e9 / g, sr, pr }'
done; done
echo
echo "The peer in each mode (median tokens/s, peak RSS MB; nan: the mode failed):"
for t in $threads; do for q in $precisions; do
  echo "  $t threads $q: $(for m in $modes; do echo -n "$m $(pick torch 3 "$m") $(pick torch 4 "$m")  "; done)"
done; done
step_bench=$build/bench/st-step-bench
[ -x "$step_bench" ] || step_bench=$(command -v st-step-bench)  # a device bundle's flat bin/
echo
echo "shmtrain's step by layer kind (st-step-bench --models gpt2 --batch $batch, one round):"
for t in $threads; do for q in $precisions; do
  echo "  $q, $t thread(s):"
  "$step_bench" --models gpt2 --batch "$batch" --threads "$t" --precision "$q" --rounds 1 \
    --seconds 0.01 | tail -n +2 | sed 's/^/    /'
done; done
