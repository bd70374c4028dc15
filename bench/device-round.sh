#!/usr/bin/env bash
# What one lent 16-core machine answers for the open issues, in the two calls its 15 minutes
# allow (each under five and a half minutes, so a machine started once serves both while warm):
#   torch    issue 63: bench/device-torch.sh at 4 and 16 ranks (all_reduce over shm and gloo,
#            4 B - 64 MiB), DDP at 16 x 1 (resnet, gpt-mini; DDP's default buckets), and the
#            sweep of bench/torch_gpt.py over all, core and 8x2 against 1 x 16, both backends
#   engine   issue 64: the small-message floor (the build before alternating with this one, 2
#            ranks) and the ceiling sweeps of resnet and gpt-mini (all, 8x2, 16x1, each beside its
#            instances alone; --balance dynamic at 16x1 and 8x2), bench/run-many-ranks.sh's parts;
#            issue 66: the per-layer roofline of resnet and gpt-mini at 1 and 16 threads, fp32 and
#            bf16, and their steps beside PyTorch's at 1 and 2 threads (bench/device-roofline.sh)
#
# Here, first: bench/run-many-ranks.sh pack build BEFORE/bench/st-allreduce-bench
# There (the device tool, from the repository root, carrying .device):
#   bench/device-round.sh torch|engine
# Files under $OUT (default /tmp/device-round): each script's log and one archive each.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root" || exit 1
out=${OUT:-/tmp/device-round}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
case ${1:-} in
  torch)
    OUT=$out DDP_RANKS=16 DDP_BUCKETS=default ALLTOALL=0 AR_SECONDS=0.05 SWEEP_SETTINGS=all,core,8x2 \
      timeout 320 bench/device-torch.sh "4 16" 30
    ;;
  engine)
    MPI=0 PARTS="floor sweeps" SWEEP_MODELS="resnet gpt-mini" SWEEP_PLANS=all,8x2,core BALANCE_PLANS=core,8x2 \
      SWEEP_PCT=40 timeout 170 bench/run-many-ranks.sh run /tmp/many-ranks
    mkdir -p "$out/many-ranks" && cp /tmp/many-ranks/log.txt "$out/many-ranks/" &&
      gzip -c /tmp/many-ranks/results.tar > "$out/many-ranks/results.tar.gz"
    OUT=$out PARTS="roofline peer" timeout 140 bench/device-roofline.sh 16 0 "resnet gpt-mini"
    ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
