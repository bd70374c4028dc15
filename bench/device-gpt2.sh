#!/usr/bin/env bash
# gpt2 on a lent machine with more cores (issue 47's AMX figures), in one call of about
# six minutes: shmtrain beside nanoGPT's model (bench/run-gpt2.sh) in fp32 and bf16,
# attention's bf16 kernels against its fp32 ones inside one process (st-step-ab), and,
# where the bundle carries the build before this one (.device/before/st-step-bench),
# the two builds' steps alternating at each batch of STEP_BATCHES.
#
# Here, first: ../shared/tools/device-bundle.sh build   (packs .device/, ignored by git)
#   and, for the before/after: mkdir -p .device/before && cp BEFORE/bench/st-step-bench .device/before/
# There (the device tool, from the repository root, carrying .device):
#   bench/device-gpt2.sh [BATCH] [THREADS] [ROUNDS] [STEP_BATCHES]   (defaults 2 16 1 "2 4")
# Each part runs under a time limit and writes its own file under $OUT, so a call cut
# short still returns what it measured.  Record the figures in docs/benchmarks.md with
# the machine named.
set -uo pipefail
batch=${1:-2}; threads=${2:-16}; rounds=${3:-1}; step_batches=${4:-2 4}
out=${OUT:-/tmp/device-gpt2}; mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root" || exit 1
# shellcheck disable=SC1091
source .device/setup.sh > "$out/machine.txt"; cat "$out/machine.txt"
export SHMTRAIN_PYTHON=${SHMTRAIN_PYTHON:-$(command -v python3)}   # the device's PyTorch
lscpu | grep -o 'amx_bf16\|avx512_bf16' | sort -u | paste -sd' ' | tee -a "$out/machine.txt"

# The peer eager and under torch.compile (nanoGPT's default; PEER_MODES=eager skips the
# compiles, one per precision and round, where the call's time is short).
timeout 420 bench/run-gpt2.sh /tmp/st/bin "$rounds" 3 "$batch" "$threads" "fp32 bf16" 2>&1 | tee "$out/gpt2.txt"

echo "# attention: bf16 kernels (A) against fp32 (B), gpt2 bf16, batch $batch, $threads threads" | tee "$out/attention-ab.txt"
timeout 120 st-step-ab SHMTRAIN_ATTENTION_FP32=1 --models gpt2 --threads "$threads" --precision bf16 \
  --batch "$batch" --blocks 3 --block-seconds 2 2>&1 | tee -a "$out/attention-ab.txt"

before=.device/before/st-step-bench
[ -x "$before" ] || exit 0
echo "# gpt2 step, the build before (before) and this one (after) alternating, $threads threads" | tee "$out/steps.txt"
for b in $step_batches; do for r in 1 2; do for q in bf16 fp32; do
  [ "$q" = fp32 ] && [ "$r" = 2 ] && continue   # fp32's step did not change: one round for the ratio
  for which in before after; do
    bin=st-step-bench; [ "$which" = before ] && bin=$before
    echo -n "batch $b $q $which: " | tee -a "$out/steps.txt"
    timeout 60 "$bin" --models gpt2 --batch "$b" --threads "$threads" --precision "$q" --rounds 1 --seconds 3 \
      2>&1 | tail -1 | tee -a "$out/steps.txt"
  done
done; done; done
