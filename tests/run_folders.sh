#!/bin/sh
# Runs that keep their results (issue 43, item 1), as a user meets them: two
# runs in one directory make two run folders and replace nothing; a folder
# that holds a run is refused unless resumed or overwritten; config.txt
# repeats a run; --resume goes on in the run's folder; under shmrun the
# folder is the job's.  Usage: run_folders.sh SHMTRAIN SHMRUN
set -u
shmtrain=$1 shmrun=$2
tmp=$(mktemp -d) || exit 1
trap 'umount "$tmp/small" 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
. "$(dirname "$0")/cli_expect.sh"
cd "$tmp" || exit 1
small="--model mlp --train-subset 256 --test-subset 64 --seed 3"
fail() { echo "FAIL $1"; failed=1; }
final_loss() { grep '"type":"eval"' "$1" | tail -1 | sed 's/.*"test_loss":\([0-9.]*\).*/\1/'; }

# two runs here: two folders, each whole; runs/latest the second
expect first-run 0 "run folder runs/mlp-" -- "$shmtrain" $small --max-steps 3
first=$(ls runs | grep '^mlp-' | head -1)
expect second-run 0 "run folder runs/mlp-" -- "$shmtrain" $small --max-steps 3 --lr 0.01
second=$(ls runs | grep '^mlp-' | tail -1)
[ "$(ls runs | grep -c '^mlp-')" = 2 ] && [ "$first" != "$second" ] || fail "two-folders: $(ls runs)"
for f in "$first" "$second"; do
  for file in shmtrain.ckpt metrics.jsonl config.txt; do
    [ -s "runs/$f/$file" ] || fail "whole-$f: no $file"
  done
done
[ "$(readlink runs/latest)" = "$second/shmtrain.ckpt" ] || fail "latest: $(readlink runs/latest), want $second/shmtrain.ckpt"
grep -q "^done: 3 steps" "runs/$first/console.log" || fail "console.log: $(cat "runs/$first/console.log")"
if command -v gnuplot >/dev/null; then  # install-deps installs it (the sweep's plots)
  grep -q "<svg" "runs/$first/curves.svg" && [ "$(grep -c '<path' "runs/$first/curves.svg")" -gt 20 ] ||
    fail "curves.svg: $(ls "runs/$first")"
fi
grep -qx "lr 0.01" "runs/$second/config.txt" || fail "config: $(cat "runs/$second/config.txt")"

# config.txt repeats the run: the same final loss, to the digit
expect repeat 0 "run folder rep" -- "$shmtrain" --config "runs/$first/config.txt" --out rep
[ "$(final_loss rep/metrics.jsonl)" = "$(final_loss "runs/$first/metrics.jsonl")" ] ||
  fail "repeat: loss $(final_loss rep/metrics.jsonl) vs $(final_loss "runs/$first/metrics.jsonl")"
expect config-typo 2 "--config bad.txt:2: unknown option '--learning_rate' (did you mean --lr?)" -- \
  sh -c "printf 'model mlp\nlearning_rate 0.1\n' > bad.txt; exec '$shmtrain' --config bad.txt"

# a folder holding a run: refused, untouched; --overwrite writes over it
sum=$(cksum < rep/shmtrain.ckpt)
expect out-used 2 "--out rep holds a run already" -- "$shmtrain" $small --max-steps 2 --out rep
[ "$(cksum < rep/shmtrain.ckpt)" = "$sum" ] || fail "out-used: the checkpoint changed"
expect overwrite 0 "run folder rep" -- "$shmtrain" $small --max-steps 2 --out rep --overwrite
grep -q '"step":2' rep/metrics.jsonl || fail "overwrite: $(tail -1 rep/metrics.jsonl)"

# --resume DIR goes on in DIR from its checkpoint, with its config
config_before=$(cksum < "runs/$first/config.txt")
expect resume-dir 0 "run folder runs/$first, resumed" -- "$shmtrain" --resume "runs/$first" --max-steps 5
grep -q '"type":"eval","step":5' "runs/$first/metrics.jsonl" || fail "resume-dir: no step 5"
[ "$(cksum < "runs/$first/config.txt")" = "$config_before" ] || fail "resume-dir: config.txt rewritten"
expect resume-latest 0 "run folder runs/$second, resumed" -- "$shmtrain" --resume --max-steps 4
expect resume-empty 2 "--resume rep2: no shmtrain.ckpt in it" -- sh -c "mkdir rep2; exec '$shmtrain' --resume rep2"

# --keep K: the last K periodic checkpoints; --keep-best: the best evaluation's
expect keep 0 "checkpoint: keep/shmtrain.ckpt (step 40)" -- "$shmtrain" $small --train-subset 2048 --max-steps 40 \
  --checkpoint-every 10 --keep 2 --keep-best --eval-every 5 --lr 0.3 --out keep  # lr 0.3: accuracy falls late
[ "$(ls keep | grep -- '-step' | tr '\n' ' ')" = "shmtrain-step30.ckpt shmtrain-step40.ckpt " ] ||
  fail "keep: $(ls keep | tr '\n' ' ')"
best_step=$(grep '"type":"eval"' keep/metrics.jsonl | sed 's/.*"step":\([0-9]*\).*"test_accuracy":\([0-9.]*\).*/\2 \1/' |
  sort -k1,1gr -k2,2n | head -1 | cut -d' ' -f2)
grep "best so far" "$tmp/out" | tail -1 | grep -q "(step $best_step," || fail "keep-best: best at step $best_step, said: $(grep 'best so far' "$tmp/out" | tail -1)"
expect keep-best-loads 0 "wrote keep/best.safetensors" -- "$shmtrain" export --checkpoint keep/best.ckpt --out keep/best.safetensors
expect keep-needs-every 2 "--keep 2 keeps the periodic checkpoints of --checkpoint-every K, K > 0" -- "$shmtrain" --keep 2

# --no-checkpoint; named outputs go where named, no folder
expect no-checkpoint 0 "run folder" -- "$shmtrain" $small --max-steps 1 --no-checkpoint --out nock
[ ! -e nock/shmtrain.ckpt ] && [ -s nock/metrics.jsonl ] || fail "no-checkpoint: $(ls nock)"
expect no-checkpoint-every 2 "--no-checkpoint and --checkpoint-every" -- "$shmtrain" --no-checkpoint --checkpoint-every 5
before=$(ls runs | wc -l)
expect named 0 "checkpoint: mine.ckpt" -- "$shmtrain" $small --max-steps 1 --checkpoint mine.ckpt --metrics mine.jsonl
[ "$(ls runs | wc -l)" = "$before" ] && [ -s mine.jsonl ] || fail "named: a run folder was made"

# room for one checkpoint, found before step 1 (a 1 MB tmpfs, where this
# user may mount one: root, as CI runs)
if mkdir small && mount -t tmpfs -o size=1m tmpfs small 2>/dev/null; then
  expect no-room 1 "and small has 1.0 MB free; make room" -- "$shmtrain" $small --max-steps 1 --checkpoint small/x.ckpt
  grep -q "step 1" "$tmp/out" && fail "no-room: it trained first"
  umount small
else
  echo "skip no-room: cannot mount a 1 MB tmpfs here (not root)"
fi

# under shmrun: one folder for the gang, named by the job; its metrics
# linked where shmrun's logs have always held them
expect shmrun 0 "run folder runs/mlp-gang" -- \
  "$shmrun" -n 2 --oversubscribe --job-id gang --log-dir logs -- "$shmtrain" $small --max-steps 2
[ -s runs/mlp-gang/shmtrain.ckpt ] && grep -q '"type":"summary"' logs/gang/attempt0/metrics.jsonl ||
  fail "shmrun: $(ls runs/mlp-gang logs/gang/attempt0)"
exit $failed
