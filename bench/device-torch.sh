#!/usr/bin/env bash
# Issue 63's figures on a lent many-core machine in one call of about nine minutes: PyTorch
# over the "shm" backend against gloo at more ranks than this project's 2-vCPU machines have.
#   1. the backend built there, against that machine's own PyTorch (pip --target, offline: its C
#      sources, the C++ glue and the entry point that loads it with torch; no network);
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
# Each part runs under its own time limit; $OUT (default /tmp/device-torch) gets log.txt (everything
# printed) and torch.tar.gz (one file a part, packed again as each part ends: the device returns
# at most eight files, and a call cut short keeps what it measured).  The text gpt-mini trains on
# is this repository's docs (the device has no fortunes).  A shorter call: DDP_RANKS (the rank
# counts DDP runs at; default RANKS), DDP_BUCKETS (default "default 1"), ALLTOALL=0,
# AR_SECONDS (each all_reduce size's time, default 0.1), SWEEP_SETTINGS (default all,core,8x2,4x4).
# Record the figures in docs/benchmarks.md with the machine named.
set -uo pipefail
ranks_list=${1:-4 8 16}; steps=${2:-30}
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root" || exit 1
top=${OUT:-/tmp/device-torch}; mkdir -p "$top"
work=$(mktemp -d); out=$work/torch; mkdir -p "$out"
pack() { tar -C "$work" -czf "$top/torch.tar.gz" torch; }
trap 'pack; rm -rf "$work"' EXIT
exec > >(tee -a "$top/log.txt") 2>&1

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

# 1. The backend against this machine's PyTorch, laid out as a build folder for the benches:
# installed (pip --target, offline) with its entry point, so that `import torch` loads it and a
# sweep's SHMTRAIN_TORCH_BACKEND takes effect in a script that never imports it (a bare
# setup.py build has none: the sweep's shm rows then ran gloo, refused since by the sweep).
fake=$work/build; mkdir -p "$fake/bench"
site=${PYSITE:-/tmp/device-torch-site}  # kept: a second call on a warm machine builds only what changed
ln -s "$bin_shmrun" "$fake/shmrun"; ln -s "$bin_bench" "$fake/bench/st-allreduce-bench"
# The system's compiler, whose libstdc++ the process loads (a GPU host's CXX=/opt/gcc linked its own
# copy into the extension: a crash at the first call, refused since by python/setup.py)
[ -x /usr/bin/g++ ] && export CXX=/usr/bin/g++ CC=/usr/bin/gcc
# PyTorch builds the glue with ninja, in parallel, where it finds one (pip's ninja beside that PyTorch)
nbin=$("$python" -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null) && export PATH=$nbin:$PATH
if ! timeout 300 "$python" -m pip install -v --no-deps --no-build-isolation --no-index --upgrade --target "$site" \
     ./python > "$out/build.txt" 2>&1; then
  echo "device-torch: the backend did not build against this PyTorch; the end of pip's output:"
  tail -15 "$out/build.txt"; exit 1
fi
ln -s "$site" "$fake/python"
loads='import sys, torch.distributed as d; sys.exit("shm" not in d.Backend.backend_list)'
PYTHONPATH=$fake/python "$python" -c "$loads" ||
  { echo "device-torch: the backend built but import torch does not load it"; exit 1; }
echo "# the backend built and installed against this PyTorch ($(grep -c '\[[0-9]*/[0-9]*\] ' "$out/build.txt") objects)"

# Before any figure: does the backend work here (bench/torch_smoke.py: each rank says each step, and
# where one crashes, the Python line)?  Its rank logs in the archive; the figures run on either way.
# A crash there ends the call (the figures would be gloo's alone), after a native backtrace of
# each rank where a debugger is at hand (cuda-gdb debugs CPU programs too: the GPU hosts have it).
export PYTHONFAULTHANDLER=1
for n in 2 ${SMOKE_RANKS:-4}; do
  if PYTHONPATH=$fake/python timeout 90 "$bin_shmrun" -n "$n" --oversubscribe --quiet --log-dir "$out/smoke-$n" -- \
       "$python" bench/torch_smoke.py > "$out/smoke-$n.txt" 2>&1; then
    echo "# smoke at $n ranks: every step passed"; continue
  fi
  echo "# smoke at $n ranks FAILED; each rank's last lines:"
  for f in "$out/smoke-$n"/*/attempt0/rank*.log; do echo "## $f"; tail -25 "$f"; done
  tail -5 "$out/smoke-$n.txt"
  gdb=$(command -v gdb || command -v cuda-gdb) &&
    PYTHONPATH=$fake/python timeout 120 "$bin_shmrun" -n "$n" --oversubscribe --quiet --log-dir "$out/smoke-gdb" -- \
      "$gdb" -q -batch -ex run -ex bt -ex 'info threads' --args "$python" bench/torch_smoke.py > /dev/null 2>&1
  for f in "$out/smoke-gdb"/*/attempt0/rank*.log; do
    [ -f "$f" ] && { echo "## $f"; grep -A30 'SIGSEGV\|signal' "$f" | head -60; }
  done
  exit 3
done
pack

cat docs/*.md > "$work/text.txt"
export SHMTRAIN_PYTHON=$python TEXT=$work/text.txt PYTHONPATH=$fake/python${PYTHONPATH:+:$PYTHONPATH}

# 2. all_reduce and DDP at each N (the DDP part is bench/run-torch-backend.sh's, one round).
ddp_ranks=" ${DDP_RANKS:-$ranks_list} "
for n in $ranks_list; do
  [ "$n" -le "$(nproc)" ] || { echo "device-torch: $n ranks > $(nproc) CPUs: skipped"; continue; }
  echo; echo "## $n ranks"
  for b in shm gloo; do
    echo "### all_reduce over $b, $n ranks (bytes, median us, p99 us, mean us)"
    timeout 150 "$python" bench/torch_allreduce.py --ranks "$n" --min 4 --max 64M --seconds "${AR_SECONDS:-0.1}" \
      --backend "$b" \
      > "$out/allreduce-$b-$n.csv" 2>&1 || echo "device-torch: all_reduce over $b at $n ranks cut short"
    cut -d, -f1-4 "$out/allreduce-$b-$n.csv"
  done
  pack
  if [ "${ALLTOALL:-1}" != 0 ]; then
    echo "### all_to_all_single over shm and gloo, $n ranks (bytes, shm us, gloo us, gloo/shm, shm GB/s)"
    timeout 60 "$python" bench/torch_alltoall.py --ranks "$n" --min 4K --max 4M --seconds 0.1 \
      > "$out/alltoall-$n.csv" 2>&1 || echo "device-torch: all_to_all at $n ranks cut short"
    grep -v '^#' "$out/alltoall-$n.csv" | tail -7
  fi
  [[ $ddp_ranks == *" $n "* ]] || continue
  ALLREDUCE=0 BUCKETS="${DDP_BUCKETS:-default 1}" timeout 240 bench/run-torch-backend.sh "$fake" 1 "$steps" "$n" \
    > "$out/ddp-$n.md" 2>&1 || echo "device-torch: DDP at $n ranks cut short"
  cat "$out/ddp-$n.md"; pack
done

# 3. The sweep of a PyTorch script over the whole machine.
echo; echo "## shmrun --sweep of bench/torch_gpt.py (gpt-mini), shm and gloo"
settings=${SWEEP_SETTINGS:-all,core,8x2,4x4}; [ "$(nproc)" -ge 16 ] || settings=all,core
timeout 240 "$bin_shmrun" --sweep "$settings" --repeats 1 --compare-backends shm,gloo --sweep-out "$out/sweep" -- \
  "$python" bench/torch_gpt.py --model gpt-mini --text "$TEXT" --batch-size 12 --max-steps "$steps" \
  --eval-windows 1 --warm-steps 0 --log-every 5 > "$out/sweep.txt" 2>&1 || echo "device-torch: the sweep cut short"
tail -40 "$out/sweep.txt"
echo; echo "# device-torch: done $(date -u +%H:%MZ); files in $top/torch.tar.gz"
