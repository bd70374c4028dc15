#!/usr/bin/env bash
# Issue 63's figures on a lent many-core machine in one call of about nine minutes: PyTorch
# over the "shm" backend against gloo at more ranks than this project's 2-vCPU machines have.
#   1. the backend built there, against that machine's own PyTorch (python/setup.py build:
#      its C sources and the C++ glue; no pip, no network);
#   2. for each N of RANKS: `all_reduce` over shm and over gloo, 4 B - 64 MiB, N ranks one per
#      CPU (bench/torch_allreduce.py), `all_to_all_single` over both, 4 KiB - 4 MiB
#      (bench/torch_alltoall.py, about half a minute), then DDP end to end at N x 1 cores, resnet and
#      gpt-mini, over gloo and over shm, at DDP's default buckets and at bucket_cap_mb=1:
#      samples/s, the exchange's share in flight and exposed (bench/run-torch-backend.sh's
#      table, one round);
#   3. the 16-core sweep of a PyTorch script: `shmrun --sweep all,core,8x2,4x4
#      --compare-backends shm,gloo -- python3 bench/torch_gpt.py` (the issue's goal: the best
#      setting >= 1.5x 1 x all cores for gpt-mini).
#
# Here, first: ../shared/tools/device-bundle.sh build   (shmrun and the benches into .device/)
# There (the device tool, from the repository root, carrying .device):
#   bench/device-torch.sh [RANKS] [STEPS]        (defaults "4 8 16" 30)
# Without .device/ (a check of the script itself, here): the binaries of BUILD (default build)
# and the bench's Python (bench/peer.sh), e.g.  bench/device-torch.sh 2 6
# Each part runs under its own time limit and leaves its output in $OUT (default
# /tmp/device-torch): log.txt has everything, one file a part.  The text gpt-mini trains on is
# this repository's docs (the device has no fortunes).  Record the figures in docs/benchmarks.md
# with the machine named.
set -uo pipefail
ranks_list=${1:-4 8 16}; steps=${2:-30}
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root" || exit 1
out=${OUT:-/tmp/device-torch}; mkdir -p "$out"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
exec > >(tee -a "$out/log.txt") 2>&1

if [ -f .device/setup.sh ]; then
  # shellcheck disable=SC1091
  . .device/setup.sh > "$out/setup.txt" 2>&1
  python=${SHMTRAIN_PYTHON:-python3}
  bin_shmrun=$(command -v shmrun) bin_bench=$(command -v st-allreduce-bench)
else
  build=${BUILD:-build}
  . bench/peer.sh
  python=${SHMTRAIN_PYTHON:-${peer[-1]}}
  bin_shmrun=$root/$build/shmrun bin_bench=$root/$build/bench/st-allreduce-bench
fi
echo "# device-torch: $(date -u +%Y-%m-%dT%H:%MZ), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs;" \
     "$("$python" -c 'import torch; print("PyTorch", torch.__version__)' 2>&1 | tail -1)"
[ -x "$bin_shmrun" ] && [ -x "$bin_bench" ] ||
  { echo "device-torch: no shmrun or st-allreduce-bench (../shared/tools/device-bundle.sh build, here)"; exit 2; }

# 1. The backend against this machine's PyTorch, laid out as a build folder for the benches.
fake=$work/build; mkdir -p "$fake/bench"
ln -s "$bin_shmrun" "$fake/shmrun"; ln -s "$bin_bench" "$fake/bench/st-allreduce-bench"
if ! (cd python && timeout 300 "$python" setup.py -q build --build-base "$work/pybuild") > "$out/build.txt" 2>&1; then
  echo "device-torch: the backend did not build against this PyTorch; the end of python/setup.py's output:"
  tail -15 "$out/build.txt"; exit 1
fi
ln -s "$(dirname "$(find "$work/pybuild" -name '_C*.so' -path '*shmtrain_torch*' | head -1)")/.." "$fake/python"
PYTHONPATH=$fake/python "$python" -c 'import shmtrain_torch' ||
  { echo "device-torch: the backend built but does not load"; exit 1; }
echo "# the backend built against this PyTorch in $(sed -n '$=' "$out/build.txt" 2>/dev/null || echo 0) lines of output"

cat docs/*.md > "$work/text.txt"
export SHMTRAIN_PYTHON=$python TEXT=$work/text.txt PYTHONPATH=$fake/python${PYTHONPATH:+:$PYTHONPATH}

# 2. all_reduce and DDP at each N (the DDP part is bench/run-torch-backend.sh's, one round).
for n in $ranks_list; do
  [ "$n" -le "$(nproc)" ] || { echo "device-torch: $n ranks > $(nproc) CPUs: skipped"; continue; }
  echo; echo "## $n ranks"
  for b in shm gloo; do
    echo "### all_reduce over $b, $n ranks (bytes, median us, p99 us, mean us)"
    timeout 150 "$python" bench/torch_allreduce.py --ranks "$n" --min 4 --max 64M --seconds 0.1 --backend "$b" \
      > "$out/allreduce-$b-$n.csv" 2>&1 || echo "device-torch: all_reduce over $b at $n ranks cut short"
    cut -d, -f1-4 "$out/allreduce-$b-$n.csv"
  done
  echo "### all_to_all_single over shm and gloo, $n ranks (bytes, shm us, gloo us, gloo/shm, shm GB/s)"
  timeout 60 "$python" bench/torch_alltoall.py --ranks "$n" --min 4K --max 4M --seconds 0.1 \
    > "$out/alltoall-$n.csv" 2>&1 || echo "device-torch: all_to_all at $n ranks cut short"
  grep -v '^#' "$out/alltoall-$n.csv" | tail -7
  ALLREDUCE=0 BUCKETS="default 1" timeout 240 bench/run-torch-backend.sh "$fake" 1 "$steps" "$n" \
    > "$out/ddp-$n.md" 2>&1 || echo "device-torch: DDP at $n ranks cut short"
  cat "$out/ddp-$n.md"
done

# 3. The sweep of a PyTorch script over the whole machine.
echo; echo "## shmrun --sweep of bench/torch_gpt.py (gpt-mini), shm and gloo"
settings=all,core,8x2,4x4; [ "$(nproc)" -ge 16 ] || settings=all,core
timeout 240 "$bin_shmrun" --sweep "$settings" --repeats 1 --compare-backends shm,gloo --sweep-out "$out/sweep" -- \
  "$python" bench/torch_gpt.py --model gpt-mini --text "$TEXT" --batch-size 12 --max-steps "$steps" \
  --eval-windows 1 --warm-steps 0 --log-every 5 > "$out/sweep.txt" 2>&1 || echo "device-torch: the sweep cut short"
tail -40 "$out/sweep.txt"
echo; echo "# device-torch: done $(date -u +%H:%MZ); files in $out"
