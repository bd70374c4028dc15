#!/usr/bin/env bash
# Where the all-reduce's algorithms cross: the same sizes run with each
# algorithm forced (inline up to its maximum, direct, ring), ROUNDS rounds
# interleaved (default 3), medians over rounds.  The defaults of
# inline_bytes and small_bytes (include/shmtrain/coll.h) come from this table.
#
#   bench/run-allreduce-switch.sh [BUILD_DIR] [RANKS] [--min 64 --max 64K --dtype fp32|bf16]
set -euo pipefail
build=${1:-build}
ranks=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
rounds=${ROUNDS:-3}
args=(--min 64 --max 64K --seconds 0.1 "$@")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $ranks ranks, $rounds rounds"
for r in $(seq 1 "$rounds"); do
  SHMTRAIN_INLINE_BYTES=65536 "$build/bench/st-allreduce-bench" -n "$ranks" --csv "${args[@]}" > "$out/inline.$r"
  SHMTRAIN_INLINE_BYTES=0 SHMTRAIN_SMALL_BYTES=1048576 SHMTRAIN_SMALL_ZERO_COPY_BYTES=1048576 "$build/bench/st-allreduce-bench" -n "$ranks" --csv "${args[@]}" > "$out/direct.$r"
  SHMTRAIN_INLINE_BYTES=0 SHMTRAIN_SMALL_BYTES=0 "$build/bench/st-allreduce-bench" -n "$ranks" --csv "${args[@]}" > "$out/ring.$r"
done
python3 - "$out" <<'PY'
import csv, glob, os, statistics, sys
d = sys.argv[1]
t = {}
for p in glob.glob(os.path.join(d, "*.*")):
    alg = os.path.basename(p).split(".")[0]
    for row in csv.DictReader(l for l in open(p) if not l.startswith("#")):
        for path in ("zc", "copy"):
            t.setdefault((path, int(row["bytes"])), {}).setdefault(alg, []).append(float(row[path + "_us"]))
for path, title in (("zc", "buffer in the zero-copy region"), ("copy", "ordinary buffer")):
    print(f"\n{title}: median us")
    print("| bytes | inline | direct | ring | fastest |")
    print("|---:|---:|---:|---:|---|")
    for (p, b) in sorted(k for k in t if k[0] == path):
        m = {a: statistics.median(v) for a, v in t[(p, b)].items()}
        print(f"| {b} | {m['inline']:.3f} | {m['direct']:.3f} | {m['ring']:.3f} | {min(m, key=m.get)} |")
PY
