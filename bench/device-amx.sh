#!/usr/bin/env bash
# Issue 47's AMX figures on a lent many-core Xeon in one call of about six minutes, packed
# into one file (the device returns at most eight): attention's kernels alone (one head on
# one thread and with every thread busy), gpt2 beside nanoGPT's model (bench/run-gpt2.sh,
# the peer eager: its compiles do not fit the call), and gpt2's step in fp32, bf16 and bf16
# with attention's dot products, this build alternating with the build before
# (.device/before/st-step-bench where the bundle carries one): bf16 over fp32 on AMX (the
# issue's 2.5x) and what the sessions since the last measurement there changed.
#
# Here, first: ../shared/tools/device-bundle.sh build
#   and, for the before/after: mkdir -p .device/before && cp BEFORE/bench/st-step-bench .device/before/
# There (the device tool, from the repository root, carrying .device):
#   bench/device-amx.sh [THREADS] [BATCH]   (defaults 16 2)
# Every part runs under its own time limit, so a call cut short still packs what it measured
# into $OUT/amx.tar.gz.  Record the figures in docs/benchmarks.md with the machine named.
set -uo pipefail
threads=${1:-16}; batch=${2:-2}
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root" || exit 1
work=$(mktemp -d); out=${OUT:-/tmp/device-amx}; mkdir -p "$out"
pack() { tar -C "$work" -czf "$out/amx.tar.gz" .; }
trap pack EXIT
# shellcheck disable=SC1091
source .device/setup.sh > "$work/machine.txt"; cat "$work/machine.txt"
export SHMTRAIN_PYTHON=${SHMTRAIN_PYTHON:-$(command -v python3)}   # the device's PyTorch
lscpu | grep -o 'amx_bf16\|avx512_bf16' | sort -u | paste -sd' ' | tee -a "$work/machine.txt"

# One head (T 1024, head size 64): the dot products (AVX512-BF16), the fp32 tiles, oneDNN's
# matmul in stripes of 64 (the default with AMX) on fp32 and on bf16 rows (a bf16 net's edges).
for th in 1 "$threads"; do
  for kernel in "" --fp32 "--matmul --stripe 64" "--matmul --stripe 64 --bf16-rows" \
                "--matmul --stripe 128 --bf16-rows"; do
    # shellcheck disable=SC2086
    timeout 40 st-attention-bench --threads "$th" --tasks $((12 * th)) --reps 5 $kernel
  done
done 2>&1 | tee "$work/kernels.txt"

PEER_MODES=eager timeout 200 bench/run-gpt2.sh /tmp/st/bin 1 3 "$batch" "$threads" "fp32 bf16" 2>&1 \
  | tee "$work/gpt2.txt"

before=.device/before/st-step-bench
echo "# gpt2 step, batch $batch, $threads threads, alternating; dot=1: attention's dot products" \
  | tee "$work/steps.txt"
for round in 1 2; do
  for run in bf16:0:after bf16:0:before fp32:0:after fp32:0:before bf16:1:after; do
    IFS=: read -r q dot which <<< "$run"
    bin=st-step-bench; [ "$which" = before ] && bin=$before
    [ -x "$(command -v "$bin")" ] || continue
    echo -n "round $round $q dot=$dot $which: " | tee -a "$work/steps.txt"
    SHMTRAIN_ATTENTION_DOT=$dot timeout 45 "$bin" --models gpt2 --batch "$batch" --threads "$threads" \
      --precision "$q" --rounds 1 --seconds 3 2>&1 | tail -1 | tee -a "$work/steps.txt"
  done
done
