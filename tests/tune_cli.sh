#!/bin/sh
# Issue 66's --tune as a user meets it: the kernels measured once and kept
# in the user's cache folder ($XDG_CACHE_HOME/shmtrain, else
# ~/.cache/shmtrain), said, written in the run record, read back by the next
# run without --tune, never written into config.txt; under shmrun rank 0's
# answer for every instance, so the replicas stay identical.  What chose
# the kernels and each layer's are in the run folder's kernels.txt, and
# `--summary=kernels` prints the same before any run.
# Usage: tune_cli.sh SHMTRAIN SHMRUN
set -u
shmtrain=$1 shmrun=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
. "$(dirname "$0")/cli_expect.sh"
cd "$tmp" || exit 1
small="--model mlp --max-steps 3 --train-subset 256 --test-subset 64"

expect measured 0 "kernels: .*, measured in .* kept in $tmp/cache/shmtrain/kernels-" -- \
  env XDG_CACHE_HOME="$tmp/cache" "$shmtrain" $small --tune --out r1
[ "$(ls "$tmp/cache/shmtrain" | grep -c '^kernels-.*\.txt$')" = 1 ] || { echo "FAIL kept: no one answer file"; failed=1; }
chose=$(sed -n 's/^chose //p' "$tmp"/cache/shmtrain/kernels-*.txt)
grep -q "\"kernels\":\"$chose\"" r1/metrics.jsonl || { echo "FAIL record: no \"kernels\":\"$chose\" in the run record"; failed=1; }
grep -q '^tune' r1/config.txt && { echo "FAIL config: --tune is an action, not a setting of the run"; failed=1; }
expect read-back 0 "kernels: $chose (kept in $tmp/cache/shmtrain/kernels-" -- \
  env XDG_CACHE_HOME="$tmp/cache" "$shmtrain" $small --out r2
grep -q "\"kernels\":\"$chose\"" r2/metrics.jsonl || { echo "FAIL record: the read-back run's record"; failed=1; }
expect measured-again 0 "kernels: .*, measured in .* kept in $tmp/cache/shmtrain/kernels-" -- \
  env XDG_CACHE_HOME="$tmp/cache" "$shmtrain" $small --tune --out r2b
expect home-cache 0 "kept in $tmp/home/.cache/shmtrain/kernels-" -- \
  env -u XDG_CACHE_HOME HOME="$tmp/home" "$shmtrain" $small --tune --out r3
expect two-instances 0 "all 2 instances held identical parameters at each of 3 checks" -- \
  env XDG_CACHE_HOME="$tmp/cache2" "$shmrun" -n 2 --oversubscribe --log-dir "$tmp/logs" -- "$shmtrain" $small \
  --tune --check-replicas 1 --out r4
[ "$(ls "$tmp/cache2/shmtrain" | wc -l)" = 1 ] || { echo "FAIL two-instances: rank 0 alone keeps an answer"; failed=1; }

# kernels.txt: who chose, then every layer of mlp (input, then linear, relu, ...) with its kernels
layers() { grep -E '^ +[0-9]+ [a-z]+ +line ' "$1"; }
said() { grep -q "$2" "$1" || { echo "FAIL kernels.txt: $1 does not say '$2'"; failed=1; }; }
said r1/kernels.txt "^# chosen by measurement on this CPU, this run's --tune (.* s, [0-9]* switches tried): $chose\$"
said r2/kernels.txt "^# chosen by measurement on this CPU, kept by an earlier --tune in $tmp/cache/shmtrain/kernels-.*: $chose\$"
expect defaults 0 "" -- env XDG_CACHE_HOME="$tmp/empty" "$shmtrain" $small --out r5
said r5/kernels.txt "^# the engine's defaults: nothing measured"
# mlp's net: input, flatten, three linear layers, the two relus inside the linear before each
[ "$(layers r5/kernels.txt | wc -l)" = 5 ] && [ "$(layers r5/kernels.txt | grep -c ' linear .*+relu')" = 2 ] ||
  { echo "FAIL kernels.txt: not a line for each of the net's layers"; layers r5/kernels.txt; failed=1; }
layers r5/kernels.txt | grep -q ' linear .* fp32 .*gemm\| linear .* fp32 .*jit' ||
  { echo "FAIL kernels.txt: no linear layer's kernel named"; failed=1; }
env XDG_CACHE_HOME="$tmp/cache" "$shmtrain" $small --summary=kernels >summary.txt 2>&1 ||
  { echo "FAIL summary: --summary=kernels failed: $(tail -1 summary.txt)"; failed=1; }
# against a run that reads the same kept answer: measured-again may have kept another
# (two measurements may choose differently: under ASan one chose SHMTRAIN_ONEDNN_IP_ANY after the defaults)
env XDG_CACHE_HOME="$tmp/cache" "$shmtrain" $small --out r2c >/dev/null 2>&1
[ "$(layers summary.txt)" = "$(layers r2c/kernels.txt)" ] && grep -q "kept by an earlier --tune" summary.txt ||
  { echo "FAIL summary: --summary=kernels does not say what the run's kernels.txt says"; failed=1; }
# a switch the environment sets is the caller's; a kept answer's switch is applied and said as the tuner's
env XDG_CACHE_HOME="$tmp/empty" SHMTRAIN_ONEDNN_IP_ANY=1 "$shmtrain" --model mlp --summary=kernels >env.txt 2>&1
said env.txt "^# SHMTRAIN_ONEDNN_IP_ANY on: the caller's (the environment)\$"
sed -i 's/^chose .*/chose SHMTRAIN_ONEDNN_IP_ANY (0.90 of the step)/' "$tmp"/cache/shmtrain/kernels-*.txt
env XDG_CACHE_HOME="$tmp/cache" "$shmtrain" --model mlp --summary=kernels >kept.txt 2>&1
said kept.txt "^# SHMTRAIN_ONEDNN_IP_ANY on: kept by the measurement\$"
[ "$(layers kept.txt)" = "$(layers env.txt)" ] ||
  { echo "FAIL summary: the kept answer's switch not in the net --summary=kernels built"; failed=1; }
expect bad-summary 2 "^shmtrain: --summary: 'layers': the one value it takes is 'kernels'" -- \
  "$shmtrain" --model mlp --summary=layers
exit $failed
