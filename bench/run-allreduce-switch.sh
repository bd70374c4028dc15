#!/usr/bin/env bash
# Where the all-reduce's algorithms cross: the same sizes with each algorithm forced
# (st-allreduce-bench --algorithm), ROUNDS rounds interleaved (default 3), medians over
# rounds, for one partition (RANKS x THREADS).  Prints a table per buffer path and the
# rows for src/coll/choose.c's TABLE that the fastest algorithm at each size makes
# (runs of sizes with one winner collapse into "up to" rows).
#
#   bench/run-allreduce-switch.sh [BUILD_DIR] [RANKS] [THREADS] [st-allreduce-bench flags]
#   ALGORITHMS="inline direct ring rsag" bench/run-allreduce-switch.sh build 4 1 --min 4K --max 64M
# Defaults: 2 ranks, 1 thread, 64 B - 64 KiB; inline, direct, ring and rsag (two-level
# needs ranks on two NUMA nodes).  bench/run-many-ranks.sh runs it at many ranks.
set -euo pipefail
build=${1:-build}
ranks=${2:-2}
threads=${3:-1}
shift $(( $# < 3 ? $# : 3 ))
rounds=${ROUNDS:-3}
algorithms=${ALGORITHMS:-inline direct ring rsag}
args=(--min 64 --max 64K --seconds 0.1 "$@")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $ranks ranks x $threads threads, $rounds rounds"
for r in $(seq 1 "$rounds"); do
  for a in $algorithms; do
    OMP_NUM_THREADS=$threads "$build/bench/st-allreduce-bench" -n "$ranks" --threads "$threads" --algorithm "$a" \
      --csv "${args[@]}" > "$out/$a.$r"
  done
done
python3 - "$out" "$ranks" "$threads" <<'PY'
import csv, glob, os, statistics, sys
d, ranks, threads = sys.argv[1], sys.argv[2], sys.argv[3]
t = {}
for p in glob.glob(os.path.join(d, "*.*")):
    alg = os.path.basename(p).rsplit(".", 1)[0]
    for row in csv.DictReader(l for l in open(p) if not l.startswith("#")):
        for path in ("zc", "copy"):
            t.setdefault((path, int(row["bytes"])), {}).setdefault(alg, []).append(float(row[path + "_us"]))
for path, title in (("zc", "buffer in the zero-copy region"), ("copy", "ordinary buffer")):
    algs = sorted({a for (p, _), v in t.items() if p == path for a in v})
    print(f"\n{title}: median us")
    print("| bytes | " + " | ".join(algs) + " | fastest |")
    print("|---:|" + "---:|" * len(algs) + "---|")
    winners = []
    for (p, b) in sorted(k for k in t if k[0] == path):
        m = {a: statistics.median(v) for a, v in t[(p, b)].items()}
        best = min(m, key=m.get)
        winners.append((b, best))
        print(f"| {b} | " + " | ".join(f"{m[a]:.3f}" for a in algs) + f" | {best} |")
    print(f"\nrows for choose.c ({ranks} ranks, {threads} threads, {path}):")
    for i, (b, a) in enumerate(winners):
        if i + 1 == len(winners) or winners[i + 1][1] != a:
            print(f"    {{{ranks}, {ranks}, {threads}, {threads}, 0, {'ZERO_COPY' if path == 'zc' else 'COPYING'}, {b}, COLL_{a.upper().replace('-', '_')}}},")
PY
