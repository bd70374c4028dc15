#!/bin/sh
# Issue 43's command line, as a user meets it: another tool's flag names and
# typos answered with the flag meant, prefixes refused, --version anywhere,
# a bad --model or out-of-range value exit 2, a bad output path refused
# before step 1, and success that says what it wrote and checked.
# Usage: cli_flags.sh SHMTRAIN SHMRUN SOURCE_DIR
set -u
shmtrain=$1 shmrun=$2 source_dir=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
. "$(dirname "$0")/cli_expect.sh"
cd "$tmp" || exit 1

# other tools' spellings (nanoGPT, Hugging Face, torchrun, mpirun)
expect hf-learning-rate 2 "'--learning-rate' (did you mean --lr?)" -- "$shmtrain" --learning-rate 1e-3
expect nanogpt-underscore 2 "'--max_steps' (did you mean --max-steps?)" -- "$shmtrain" --max_steps 5
expect nanogpt-max-iters 2 "(did you mean --max-steps?)" -- "$shmtrain" --max_iters=5
expect torchrun-nproc 2 "(did you mean shmrun -n N" -- "$shmtrain" --nproc-per-node 2
expect shmrun-nproc 2 "'--nproc-per-node' (did you mean -n?)" -- "$shmrun" --nproc-per-node 2 -- true
expect shmrun-np 2 "'-np' (mpirun's; shmrun's is -n N)" -- "$shmrun" -np 2 -- true
expect typo 2 "'--modle' (did you mean --model?)" -- "$shmtrain" --modle mlp
expect sample-typo 2 "sample: unknown option '--prompts' (did you mean --prompt?)" -- \
  "$shmtrain" sample --checkpoint x --prompts a
expect no-guess 2 "unknown option '--frobnicate' (see" -- "$shmtrain" --frobnicate
# prefixes are refused, with every option they could mean
expect prefix 2 "'--epoch' (did you mean --epochs? options are spelled in full)" -- "$shmtrain" --epoch 1
expect prefix-many 2 "did you mean --test-images, --test-labels or --test-subset?" -- "$shmtrain" --test 5
expect shmrun-prefix 2 "'--dry' (did you mean --dry-run? options" -- "$shmrun" --dry -n 1
# a value that looks like a flag is a value, not a flag
expect value-not-flag 1 "x.ckpt: cannot open" -- "$shmtrain" sample --checkpoint x.ckpt --prompt --hello

# --version and --help answer anywhere on the line
expect version-anywhere 0 "^shmtrain [0-9]" -- "$shmtrain" --quiet --version
expect version-after-bad-model 0 "^shmtrain [0-9]" -- "$shmtrain" --model nothing-here --version
expect help-anywhere 0 "^usage: shmtrain" -- "$shmtrain" --max-steps 3 --help
# --help from the flags' table: below the usage block every line is a group's
# heading or indented (a flag, or its help continued under the first line)
"$shmtrain" --help | awk 'NR > 4 && !/^  / && !/^[a-z][a-z ]*:$/ && !/^exit status:/ {
  print "FAIL help-layout: " $0; bad = 1 } END { exit bad }' || failed=1
expect shmrun-version 0 "^shmrun [0-9]" -- "$shmrun" --quiet --version

# bad values: exit 2, and range errors say so
expect bad-model 2 "--model mlpp: not a preset" -- "$shmtrain" --model mlpp --max-steps 1
expect lr-range 2 "--lr 1e3: out of range \[0, 100\]" -- "$shmtrain" --lr 1e3
expect lr-not-number 2 "--lr 'fast': not a number" -- "$shmtrain" --lr fast

# a bad output path: refused before any step
expect ckpt-folder-missing 2 "--checkpoint $tmp/no/x.ckpt: the folder $tmp/no does not exist" -- \
  "$shmtrain" --model mlp --max-steps 1 --checkpoint "$tmp/no/x.ckpt"
grep -q "step 1" "$tmp/out" && { echo "FAIL ckpt-folder-missing: it trained first"; failed=1; }
expect ckpt-is-folder 2 "--checkpoint $tmp: a folder" -- "$shmtrain" --model mlp --max-steps 1 --checkpoint "$tmp"
expect metrics-folder-missing 2 "--metrics $tmp/none/m.jsonl: the folder" -- \
  "$shmtrain" --model mlp --max-steps 1 --metrics "$tmp/none/m.jsonl"

# success says what it wrote and what it checked
expect says-checkpoint 0 "checkpoint: $tmp/m.ckpt (step 2)" -- \
  "$shmtrain" --model mlp --max-steps 2 --train-subset 256 --test-subset 64 --checkpoint "$tmp/m.ckpt"
expect says-replicas 0 "all 2 instances held identical parameters at each of 2 checks" -- \
  "$shmrun" -n 2 --oversubscribe --log-dir "$tmp/logs" -- "$shmtrain" --model mlp --max-steps 2 \
  --train-subset 256 --test-subset 64 --check-replicas 1 --checkpoint "$tmp/r.ckpt"
expect says-export 0 "wrote $tmp/m.safetensors (0.9 MB, safetensors) from $tmp/m.ckpt" -- \
  "$shmtrain" export --checkpoint "$tmp/m.ckpt" --out "$tmp/m.safetensors"

# the docs' examples that need no data run here as printed (issue 43, item 7):
# each line is taken from README.md or docs/partitioning.md, build/ mapped to
# the programs under test, and run with its comment removed
for example in "README.md:--print-mpirun" "README.md:--dry-run --synthetic" "docs/partitioning.md:--sweep all,numa,l3,core,8x8 --dry-run"; do
  file=${example%%:*} key=${example#*:}
  line=$(grep -m1 -F -- "$key" "$source_dir/$file" | sed 's/ *#.*//')
  [ -n "$line" ] || { echo "FAIL example: no line with '$key' in $file"; failed=1; continue; }
  cmd=$(printf '%s' "$line" | sed "s#build/shmrun#$shmrun#; s#build/shmtrain#$shmtrain#")
  expect "example $key" 0 "" -- sh -c "$cmd"
done
expect sweep-left-out 0 "setting '8x8' left out: --ninstances 8" -- "$shmrun" --sweep 1x1,8x8 --dry-run
expect sweep-none-fits 2 "setting '9x9': --ninstances 9" -- "$shmrun" --sweep 9x9,8x8 -- true

exit $failed
