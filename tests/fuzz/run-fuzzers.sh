#!/usr/bin/env bash
# Run each libFuzzer harness for SECONDS: from its seed corpus and its
# regressions (checked in, read only) plus the corpus it grew before
# (BUILD/corpus/<harness>, kept between runs).  A crash, leak or UB report
# fails the run; the input is kept in BUILD/crashes/<harness>/.  Prints one
# line per harness: runs, executions per second, edges covered, corpus size.
#   tests/fuzz/run-fuzzers.sh BUILD SECONDS HARNESS...
set -uo pipefail
build=$1 seconds=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
failed=0
printf '%-10s %10s %9s %7s %7s  %s\n' harness runs exec/s edges corpus result
for h in "$@"; do
  grown=$build/corpus/$h crashes=$build/crashes/$h log=$build/fuzz-$h.log
  mkdir -p "$grown" "$crashes"
  seeds=("$here/corpus/$h")
  [ -d "$here/regressions/$h" ] && seeds+=("$here/regressions/$h")
  # -rss_limit_mb: a parser that allocates what a file claims is a finding
  # only past what a real run could give it.
  "$build/fuzz-$h" "$grown" "${seeds[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$crashes/" -rss_limit_mb=4096 -timeout=20 >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(find "$grown" -type f | wc -l)
  result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (rc $rc): $(grep -m1 -E 'ERROR:|runtime error|invariant broken' "$log"); input in $crashes, log $log"
    failed=1
  fi
  printf '%-10s %10s %9s %7s %7s  %s\n' "$h" "${runs:-?}" "${speed:-?}" "${edges:-?}" "$corpus" "$result"
done
exit $failed
