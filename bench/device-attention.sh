#!/usr/bin/env bash
# Attention's bf16 products on a lent machine with AMX (issue 47), in one call of about
# three minutes: which kernel wins one head alone and with every thread busy (causal_bf16.c's
# dot products, causal.c's fp32 tiles, onednn_causal.c's oneDNN matmul in stripes of 32 to
# 256 rows; and in stripes of 64 on bf16 rows, a bf16 net's edges since session 29), the causal
# softmax they share alone, the kernels with their scratch 16 bytes
# past a cache line (what malloc gave the net before nn_lines_alloc), the dot products at T
# 1040 beside 1024 (a power-of-two row stride or not), then gpt2's bf16 step with the dot
# products (B) against the default (A: oneDNN's matmul where oneDNN has AMX) in alternating
# blocks, then the fp32 step, the bf16 step and the bf16 step with the dot products
# alternating (bf16 over fp32, the issue's AMX goal of 2.5x).
#
# Here, first: ../shared/tools/device-bundle.sh build   (packs .device/, ignored by git)
# There (the device tool, from the repository root, carrying .device):
#   bench/device-attention.sh [THREADS] [BATCH]   (defaults 16 2)
# Without .device/ it runs this machine's build (BUILD_DIR, default build): where this
# machine has AMX itself, e.g. bench/device-attention.sh 2 1.
# Each part runs under a time limit and writes its own file under $OUT, so a call cut short
# still returns what it measured.  Record the figures in docs/benchmarks.md with the machine
# named.  The matmul's stripe is MATMUL_STRIPE_ROWS in src/nn/onednn/onednn_attention.c.
set -uo pipefail
threads=${1:-16}; batch=${2:-2}
out=${OUT:-/tmp/device-attention}; mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root" || exit 1
if [ -f .device/setup.sh ]; then  # the bundle, on a lent machine
  # shellcheck disable=SC1091
  source .device/setup.sh > "$out/machine.txt"
else  # this machine's build (BUILD_DIR, default build), where it has AMX itself
  export PATH=$root/${BUILD_DIR:-build}/bench:$PATH
  lscpu | grep -m1 'Model name' > "$out/machine.txt"
fi
cat "$out/machine.txt"
lscpu | grep -o 'amx_bf16\|avx512_bf16' | sort -u | paste -sd' ' | tee -a "$out/machine.txt"

for th in 1 "$threads"; do
  tasks=$((th == 1 ? 4 : 3 * threads))
  for kernel in "" --fp32 "--matmul --stripe 32" "--matmul --stripe 64" "--matmul --stripe 128" \
                "--matmul --stripe 256" "--matmul --stripe 64 --bf16-rows"; do
    # shellcheck disable=SC2086
    timeout 60 st-attention-bench --threads "$th" --tasks "$tasks" $kernel
  done
done 2>&1 | tee "$out/kernels.txt"
# A scratch 16 bytes past a cache line (the net's until nn_lines_alloc): what splitting every
# vector across two lines costs this core.
for kernel in "" --fp32; do
  # shellcheck disable=SC2086
  timeout 60 st-attention-bench --threads 1 --tasks 4 --offset 16 $kernel
done 2>&1 | tee "$out/offset.txt"
# T 1040 beside 1024 (per FLOP): rows 4160 bytes apart instead of a page, in case a power-of-two
# stride (4K aliasing, a cache set's ways) is what slows a head there and not here.
for th in 1 "$threads"; do
  for t in 1024 1040; do
    timeout 60 st-attention-bench --threads "$th" --tasks $((th == 1 ? 4 : 3 * threads)) --t "$t"
  done
done 2>&1 | tee "$out/stride.txt"
# The causal softmax alone (every kernel's, a quarter of a head's time on a Zen 4 vCPU):
# one thread, then all of them.
{ OMP_NUM_THREADS=1 timeout 60 st-op-candidates softmax 4 1024
  OMP_NUM_THREADS=$threads timeout 60 st-op-candidates softmax $((3 * threads)) 1024; } 2>&1 | tee "$out/softmax.txt"

echo "# gpt2 bf16, batch $batch, $threads threads: A the default (oneDNN's matmul with AMX), B the dot products" | tee "$out/matmul-ab.txt"
timeout 150 st-step-ab SHMTRAIN_ATTENTION_DOT=1 --models gpt2 --threads "$threads" --precision bf16 \
  --batch "$batch" --blocks 3 --block-seconds 2 2>&1 | tee -a "$out/matmul-ab.txt"

echo "# gpt2 step, batch $batch, $threads threads: fp32, bf16, bf16 with the dot products, twice" | tee "$out/steps.txt"
for round in 1 2; do
  for run in fp32:0 bf16:0 bf16:1; do
    echo -n "round $round ${run%:*} dot=${run#*:}: " | tee -a "$out/steps.txt"
    SHMTRAIN_ATTENTION_DOT=${run#*:} timeout 120 st-step-bench --models gpt2 --batch "$batch" \
      --threads "$threads" --precision "${run%:*}" --rounds 1 --seconds 3 2>&1 | tail -1 | tee -a "$out/steps.txt"
  done
done
