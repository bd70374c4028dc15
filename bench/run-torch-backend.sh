#!/usr/bin/env bash
# PyTorch over shmtrain's "shm" backend (python/shmtrain_torch) against gloo,
# interleaved, medians over ROUNDS rounds:
#  1. torch.distributed.all_reduce, 4 B - MAX, RANKS ranks one per CPU: gloo,
#     shm and shmtrain's own st_allreduce (bench/run-allreduce.sh with PEERS=
#     "gloo torch-shm"): gloo over shm, shm over the library's copy path, and
#     the binding's cost per call (their difference, in us)
#  2. DDP end to end, RANKS x 1 cores under shmrun: resnet on CIFAR-shaped
#     data (bench/fake-cifar.sh; bench/torch_ddp.py, batch 32) and gpt-mini on
#     the fortunes (bench/torch_gpt.py, batch 12), over gloo and over shm:
#     samples/s (the median of each run's per-interval rates after the first)
#     and the all-reduce's time in flight over training time (bench/torch_comm.py's
#     hook; both overlap backward), the part backward waited for at its end, and
#     over shm the part of that spent waiting for a slower rank; BUCKETS="default 1"
#     runs each model at each DDP bucket_cap_mb (default: DDP's own, a 1 MiB first
#     bucket then 25 MiB), a row each
#
#   [ALLREDUCE=0] [BUCKETS=...] bench/run-torch-backend.sh [BUILD_DIR] [ROUNDS] [STEPS] [RANKS] [MAX]
# defaults: build 3 60 2 64M; ALLREDUCE=0 skips part 1.  The peer's Python: bench/peer.sh; the backend
# is the one the build put in BUILD_DIR/python (make, with PyTorch installed).
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; steps=${3:-60}; ranks=${4:-2}; max=${5:-64M}
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$here/peer.sh"
[ $peer_ok = 1 ] || { echo "run-torch-backend.sh: $peer_version (scripts/install-deps.sh --bench)" >&2; exit 2; }
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
"${peer[@]}" -c 'import shmtrain_torch' 2>/dev/null ||
  { echo "run-torch-backend.sh: no shmtrain_torch in $build/python (build with PyTorch installed)" >&2; exit 2; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

buckets=${BUCKETS:-default}
if [ "${ALLREDUCE:-1}" != 0 ]; then
  echo "## all_reduce, $ranks ranks"
  ROUNDS=$rounds PEERS="gloo torch-shm" "$here/run-allreduce.sh" "$build" "$ranks" --max "$max"
fi

"$here/fake-cifar.sh" "$tmp/cifar" 1000
text=${TEXT:-/usr/share/games/fortunes}
log=$((steps / 6 > 0 ? steps / 6 : 1))
ddp() { # model backend bucket_mb -> "samples/s share"
  local args
  if [ "$1" = resnet ]; then
    args=("$here/torch_ddp.py" --model resnet --cifar "$tmp/cifar" --batch-size 32 --test-subset 64 --epochs 100)
  else
    args=("$here/torch_gpt.py" --model gpt-mini --text "$text" --batch-size 12 --eval-windows 1)
  fi
  [ "$3" = default ] || args+=(--bucket-cap-mb "$3")
  rm -f "$tmp/m.jsonl"
  "$build/shmrun" -n "$ranks" -c 1 --quiet --log-dir "$tmp/logs" -- "${peer[@]}" "${args[@]}" --backend "$2" \
    --max-steps "$steps" --log-every "$log" --metrics "$tmp/m.jsonl" > /dev/null 2> "$tmp/err" ||
    { tail -3 "$tmp/err" >&2; echo "nan nan nan nan"; return; }
  grep '"type":"train"' "$tmp/m.jsonl" | tail -n +2 | "${peer[@]}" -c '
import json, statistics, sys
r = [json.loads(l) for l in sys.stdin]
ar, comp = sum(x["allreduce_s"] for x in r), sum(x["compute_s"] for x in r)
exposed = sum(x.get("wait_s", 0) for x in r)
peer = sum(x.get("peer_wait_s", 0) for x in r)
print(statistics.median(x["samples_per_s"] for x in r), ar / (ar + comp), exposed / (ar + comp), peer / (ar + comp))'
}
for r in $(seq 1 "$rounds"); do
  # each round the other backend first: the guest's slow stretches fall on both
  order="gloo shm"; [ $((r % 2)) = 0 ] && order="shm gloo"
  for m in resnet gpt-mini; do for c in $buckets; do for b in $order; do
    echo "$m/$c $b $(ddp $m $b $c)" >> "$tmp/ddp.txt"
  done; done; done
done
echo
echo "## DDP, $ranks x 1 cores, $steps steps, $rounds rounds"
echo
echo "| model / DDP bucket MB | gloo samples/s | shm samples/s | shm / gloo | in flight, gloo | in flight, shm | exposed, gloo | exposed, shm | of it waiting for the peer, shm |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
median_of() { awk -v m="$1" -v b="$2" -v c="$3" '$1==m && $2==b {print $c}' "$tmp/ddp.txt" | median; }
for m in $(for x in resnet gpt-mini; do for c in $buckets; do echo "$x/$c"; done; done); do
  awk -v m=$m -v g="$(median_of $m gloo 3)" -v s="$(median_of $m shm 3)" -v gs="$(median_of $m gloo 4)" -v ss="$(median_of $m shm 4)" \
      -v ge="$(median_of $m gloo 5)" -v se="$(median_of $m shm 5)" -v sp="$(median_of $m shm 6)" \
    'BEGIN {printf "| %s | %.1f | %.1f | %.2fx | %.1f%% | %.1f%% | %.2f%% | %.2f%% | %.2f%% |\n", m, g, s, s / g, 100 * gs,
            100 * ss, 100 * ge, 100 * se, 100 * sp}'
done
echo
echo "in flight: the all-reduces' time in flight over the step's (it overlaps backward on both backends);"
echo "exposed: what backward waited for after its last bucket's call (the exchange's exposed share);"
echo "of it waiting for the peer: the part the library spent blocked on a slower rank (shm's counters)"
