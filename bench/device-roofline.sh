#!/usr/bin/env bash
# Issue 66's figures on a lent many-core Xeon (AMX) in one call of about seven minutes,
# packed into one file (the device returns at most eight):
#   1. every preset's per-layer roofline (st-roofline) at 1 thread and at THREADS, fp32 and
#      bf16: the step's share of its roofline and of the matmul rate measured there (the
#      bf16 rows against AMX's bf16 rate), the layers losing most;
#   2. gpt2 at batch GPT2_BATCH x 1024 in bf16 and fp32 at THREADS (the issue's ">= 50% of
#      the AMX bf16 matmul rate"), the same tool;
#   3. the kernel tuner there: `shmtrain --tune` for cnn, resnet and gpt-mini at THREADS,
#      its verdict, its cost and each layer's kernels (the run folder's kernels.txt);
#   4. attention's defaults chosen on a Zen 4 (docs/benchmarks.md 0zb, 0zc) asked again on
#      AMX: gpt-mini's head (T 64, 32 dimensions) in each kernel, fp32 and bf16, then its
#      bf16 step with oneDNN's matmul (B) against the short-context kernel (A), and gpt's
#      bf16 step with the dot products (B) against the matmul (A) with oneDNN held to
#      AVX512-BF16 (the rule for T up to 256 without AMX).  About a minute and a half more.
#
# Here, first: ../shared/tools/device-bundle.sh build
# There (the device tool, from the repository root, carrying .device):
#   bench/device-roofline.sh [THREADS] [GPT2_BATCH] [PRESETS]   (defaults 16 12 "mlp lenet cnn resnet gpt-mini")
#   5. (PARTS with peer) resnet's step beside PyTorch's at 1 and 2 threads (bench/run-step.sh, 2
#      rounds, PEER_MODES default "eager channels_last"), and gpt-mini's beside bench/torch_gpt.py at
#      1x1 and 1x2 (bench/run-gpt.sh, 2 rounds, eager): the issue's ratios on that CPU.
# GPT2_BATCH 0 skips gpt2; PARTS (default "roofline gpt2 tune heads") picks parts, in that order.
# Every part runs under its own time limit, so a call cut short
# still packs what it measured into $OUT/roofline.tar.gz.  Record the figures in
# docs/benchmarks.md with the machine named.
set -uo pipefail
threads=${1:-16}; gpt2_batch=${2:-12}; presets=${3:-mlp lenet cnn resnet gpt-mini}
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root" || exit 1
work=$(mktemp -d) data=$(mktemp -d); out=${OUT:-/tmp/device-roofline}; mkdir -p "$out"
pack() { tar -C "$work" -czf "$out/roofline.tar.gz" .; rm -rf "$data"; }
trap pack EXIT
if [ -f .device/setup.sh ]; then
  # shellcheck disable=SC1091
  source .device/setup.sh > "$work/machine.txt"
else  # here, to try the script: the build's binaries
  export PATH=$root/build:$root/build/bench:$PATH
  lscpu | grep -m1 'Model name' > "$work/machine.txt"
fi
lscpu | grep -o 'amx_bf16\|avx512_bf16' | sort -u | paste -sd' ' >> "$work/machine.txt"
cat "$work/machine.txt"

parts=" ${PARTS:-roofline gpt2 tune heads} "
want() { [[ $parts == *" $1 "* ]]; }

# 1. Each preset at 1 thread and at THREADS, fp32 and bf16 (gpt-mini's batch is its recipe's 12).
want roofline && for model in $presets; do
  batch=64; [ "$model" = gpt-mini ] && batch=12
  for th in 1 "$threads"; do for q in fp32 bf16; do
    f="$work/$model-$q-$th.md"
    echo "== $model $q, $th threads" | tee -a "$work/summary.txt"
    timeout 90 st-roofline "$model" --batch "$batch" --threads "$th" --precision "$q" --top 6 > "$f" 2>&1
    grep -m1 ' matmul ' "$f" | tee -a "$work/summary.txt"
    grep -m1 '^step ' "$f" | tee -a "$work/summary.txt"
  done; done
done

# 2. gpt2 at the recipe's batch: a step of several seconds, 28 of them in the tool.
if want gpt2 && [ "$gpt2_batch" -gt 0 ]; then
  for q in bf16 fp32; do
    f="$work/gpt2-$q-$threads.md"
    echo "== gpt2 $q, batch $gpt2_batch, $threads threads" | tee -a "$work/summary.txt"
    timeout 200 st-roofline gpt2 --batch "$gpt2_batch" --threads "$threads" --precision "$q" --top 8 > "$f" 2>&1
    grep -m1 ' matmul ' "$f" | tee -a "$work/summary.txt"
    grep -m1 '^step ' "$f" | tee -a "$work/summary.txt"
  done
fi

# 3. The tuner: its verdict and cost at THREADS, a first run with nothing kept (data the
# tree carries: a fake CIFAR-10 for resnet, the docs as gpt-mini's text).
export XDG_CACHE_HOME="$work/cache"
bash bench/fake-cifar.sh "$data/cifar" 1024 > /dev/null 2>&1
cat README.md docs/*.md > "$data/text.txt"
want tune && for model in cnn resnet gpt-mini; do
  case $model in
    resnet) given=(--cifar "$data/cifar" --test-subset 64) ;;
    gpt-mini) given=(--text "$data/text.txt" --eval-windows 4) ;;
    *) given=(--test-subset 64) ;;
  esac
  echo "== shmtrain --tune $model, $threads threads" | tee -a "$work/summary.txt"
  OMP_NUM_THREADS=$threads timeout 120 shmtrain --model "$model" "${given[@]}" --tune --max-steps 2 \
    --out "$work/tune-$model" \
    > "$work/tune-$model.txt" 2>&1
  grep -m1 'kernels: ' "$work/tune-$model.txt" | tee -a "$work/summary.txt"
  cp "$work/tune-$model/kernels.txt" "$work/kernels-$model.txt" 2>/dev/null
  rm -rf "$work/tune-$model" "$work/cache"
done

# 4. Attention's short-head defaults on this CPU.
short_heads() {
  local kernel
  for kernel in --small "--matmul --fp32" --small-bf16 "--matmul --bf16-rows" ""; do
    # shellcheck disable=SC2086
    timeout 30 st-attention-bench --t 64 --hs 32 --tasks 128 --threads 1 --reps 10 $kernel
  done > "$work/short-heads.txt" 2>&1
  OMP_NUM_THREADS=1 timeout 60 st-step-ab SHMTRAIN_ATTENTION_MATMUL=1 --models gpt-mini --threads 1 --blocks 8 \
    --block-seconds 0.5 --precision bf16 >> "$work/short-heads.txt" 2>&1
  OMP_NUM_THREADS=1 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 timeout 90 st-step-ab SHMTRAIN_ATTENTION_DOT=1 --models gpt \
    --batch 12 --threads 1 --blocks 6 --block-seconds 1 --precision bf16 >> "$work/short-heads.txt" 2>&1
  grep -E '^(#|forward|backward|gpt)' "$work/short-heads.txt" | tee -a "$work/summary.txt"
}
want heads && short_heads

# 5. The issue's ratios against PyTorch on this CPU (the device's own python3 and PyTorch).
if want peer; then
  export SHMTRAIN_PYTHON=${SHMTRAIN_PYTHON:-$(command -v python3)}
  bin=$(dirname "$(command -v st-step-bench)")
  MODELS=resnet PEER_MODES=${PEER_MODES:-eager channels_last} timeout 150 bench/run-step.sh "$bin" 2 fp32 \
    > "$work/peer-resnet.md" 2>&1
  PEER_MODES=eager TEXT="$data/text.txt" timeout 150 bench/run-gpt.sh "$bin" 2 20 gpt-mini "1x1 1x2" fp32 \
    > "$work/peer-gpt-mini.md" 2>&1
  grep -E '^\|' "$work/peer-resnet.md" "$work/peer-gpt-mini.md" | tee -a "$work/summary.txt"
fi
