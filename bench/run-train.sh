#!/usr/bin/env bash
# End-to-end training throughput and time-to-accuracy, shmtrain beside
# PyTorch DDP (gloo) under the same shmrun partitionings and pinning.
#
#   bench/run-train.sh [BUILD_DIR] [ROUNDS] [STEPS] [MODELS] [PARTITIONS]
#
# defaults: build 3 300 "mlp lenet cnn" "1x1 1x2 2x1".  Rounds are
# interleaved (every setting once per round) and the median is reported.
# With 2x1 among the partitionings, each round also runs two independent
# 1-core jobs at once: what two instances get from this machine without
# any all-reduce, the ceiling for 2x1; and st-vcpu-probe, the arithmetic
# all CPUs give at once against one (below 2x: they share physical cores).
# The peer: bench/peer.sh (skipped where no PyTorch is installed), in each
# of PEER_MODES (default "eager channels_last compile": torch_ddp.py --mode);
# the table takes its fastest mode on each row by median, and names it.
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; steps=${3:-300}
models=${4:-mlp lenet cnn}; parts=${5:-1x1 1x2 2x1}
peer_modes=${PEER_MODES:-eager channels_last compile}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
. "$here/peer.sh"; torch_ok=$peer_ok
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# Steady state: the median of the per-interval rates after the first
# interval (which holds start-up: first touches, cold caches).
samples() { grep '"type":"train"' "$1" | tail -n +2 | sed 's/.*"samples_per_s":\([0-9.]*\).*/\1/' | median; }
run_shm() { # model n c -> samples/s
  "$build/shmrun" -n "$2" -c "$3" --quiet --log-dir "$tmp/logs" -- "$build/shmtrain" --model "$1" \
    --max-steps "$((steps + 100))" --log-every 100 --quiet --metrics "$tmp/m.jsonl" --checkpoint "$tmp/c.ckpt" --overwrite
  samples "$tmp/m.jsonl"
}
run_apart() { # model -> samples/s of two independent 1-core jobs run at once (no all-reduce)
  for k in 0 1; do
    "$build/shmrun" -n 1 -c 1 --cores-list "$k" --quiet --log-dir "$tmp/logs" -- "$build/shmtrain" --model "$1" \
      --max-steps "$((steps + 100))" --log-every 100 --quiet --metrics "$tmp/a$k.jsonl" --checkpoint "$tmp/a$k.ckpt" --overwrite &
  done
  wait
  echo "$(samples "$tmp/a0.jsonl") $(samples "$tmp/a1.jsonl")" | awk '{print $1 + $2}'
}
run_torch() { # model n c mode -> the same measure from the peer's metrics file (same format)
  rm -f "$tmp/t.jsonl"
  "$build/shmrun" -n "$2" -c "$3" --quiet --log-dir "$tmp/logs" -- "${peer[@]}" "$here/torch_ddp.py" --model "$1" \
    --max-steps "$((steps + 100))" --log-every 100 --quiet --metrics "$tmp/t.jsonl" --mode "$4" >&2 ||
    { echo "torch_ddp.py $1 ${2}x$3 --mode $4 failed" >&2; echo nan; return 0; }
  samples "$tmp/t.jsonl"
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $rounds rounds; steady-state samples/s over $steps steps after 100 warm-up steps (both systems); batch 64 per instance"
echo "# peer: $peer_version"
probe=$build/bench/st-vcpu-probe
for r in $(seq 1 "$rounds"); do
  [ -x "$probe" ] && echo "probe $("$probe" | sed -n 's/.* give \([0-9.]*\)x.*/\1/p')" >> "$tmp/results"
  for m in $models; do for p in $parts; do
    n=${p%x*}; c=${p#*x}
    echo "$m $p shm $(run_shm "$m" "$n" "$c")" >> "$tmp/results"
    if [ $torch_ok = 1 ]; then
      for mode in $peer_modes; do echo "$m $p torch $(run_torch "$m" "$n" "$c" "$mode") $mode" >> "$tmp/results"; done
    fi
  done
  if [ "$(nproc)" -ge 2 ] && [[ " $parts " == *" 2x1 "* ]]; then
    echo "$m apart shm $(run_apart "$m")" >> "$tmp/results"
  fi
  done
done
echo
echo "| model | instances x cores | shmtrain samples/s (median) | PyTorch DDP samples/s | PyTorch mode | ratio | vs 1x1 |"
echo "|---|---|---|---|---|---|---|"
peer_rate() {  # mode -> the peer's median samples/s on the row (m, p)
  awk -v m="$m" -v p="$p" -v md="$1" '$1==m && $2==p && $3=="torch" && $5==md && $4 ~ /^[0-9.]+$/ {print $4}' \
    "$tmp/results" | median
}
for m in $models; do
  base=$(awk -v m="$m" '$1==m && $2=="1x1" && $3=="shm" {print $4}' "$tmp/results" | median)
  for p in $parts; do
    s=$(awk -v m="$m" -v p="$p" '$1==m && $2==p && $3=="shm" {print $4}' "$tmp/results" | median)
    fastest=$(peer_fastest "$peer_modes" higher peer_rate); mode=${fastest% *}; t=${fastest#* }
    ratio=$([ -n "$t" ] && awk -v s="$s" -v t="$t" 'BEGIN {printf "%.2fx", s/t}' || echo "n/a")
    t=$([ -n "$t" ] && printf "%.0f" "$t" || echo "not installed")
    printf "| %s | %s | %.0f | %s | %s | %s | %.2fx |\n" "$m" "$p" "$s" "$t" "${mode:--}" "$ratio" \
      "$(awk -v s="$s" -v b="$base" 'BEGIN {print s/b}')"
  done
done
if grep -q ' torch ' "$tmp/results"; then
  echo
  echo "PyTorch DDP in each mode (median samples/s; none: the mode failed):"
  for m in $models; do for p in $parts; do
    echo "  $m $p: $(for md in $peer_modes; do v=$(peer_rate "$md"); echo -n "$md ${v:-none}  "; done)"
  done; done
fi
if grep -q '^probe ' "$tmp/results"; then
  echo
  echo "st-vcpu-probe, all CPUs' arithmetic at once over one CPU's, each round: $(awk '$1=="probe" {printf "%sx ", $2}' "$tmp/results")"
fi
if grep -q ' apart ' "$tmp/results"; then
  echo
  echo "the machine's own limit for two instances: two independent 1-core jobs at once (no all-reduce):"
  echo "| model | 1x1 | two 1x1 jobs at once | ratio (the ceiling for 2x1) | 2x1 (one job) | 2x1 / ceiling |"
  echo "|---|---|---|---|---|---|"
  for m in $models; do
    one=$(awk -v m="$m" '$1==m && $2=="1x1" && $3=="shm" {print $4}' "$tmp/results" | median)
    two=$(awk -v m="$m" '$1==m && $2=="apart" {print $4}' "$tmp/results" | median)
    dp=$(awk -v m="$m" '$1==m && $2=="2x1" && $3=="shm" {print $4}' "$tmp/results" | median)
    [ -n "$one" ] && [ -n "$dp" ] || continue
    printf "| %s | %.0f | %.0f | %.2fx | %.0f | %.2f |\n" "$m" "$one" "$two" "$(awk -v a="$two" -v b="$one" 'BEGIN {print a/b}')" \
      "$dp" "$(awk -v a="$dp" -v b="$two" 'BEGIN {print a/b}')"
  done
fi
[ "${TIME_TO_ACCURACY:-1}" = 1 ] || exit 0  # 0: the throughput tables only (bench/report.sh --tiny)
echo
echo "time to 85% test accuracy (Fashion-MNIST, evaluated every 100 steps, one run):"
echo "| model | instances x cores | seconds | steps |"
echo "|---|---|---|---|"
for m in $models; do for p in $parts; do
  n=${p%x*}; c=${p#*x}
  "$build/shmrun" -n "$n" -c "$c" --quiet --log-dir "$tmp/logs" -- "$build/shmtrain" --model "$m" --epochs 5 \
    --eval-every 100 --target-accuracy 0.85 --quiet --metrics "$tmp/t.jsonl" --checkpoint "$tmp/c.ckpt" --overwrite
  s=$(sed -n 's/.*"0.85":\([0-9.]*\).*/\1/p' "$tmp/t.jsonl" | tail -1)
  st=$(grep '"type":"eval"' "$tmp/t.jsonl" | tail -1 | sed 's/.*"step":\([0-9]*\).*/\1/')
  echo "| $m | $p | ${s:-not reached} | $st |"
done; done
