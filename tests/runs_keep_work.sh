#!/bin/bash
# Runs that never lose work (issue 62): each numbered case is one of the
# issue's items, as a user meets it; each failed on d2094e9.
#   runs_keep_work.sh SHMTRAIN SHMRUN
set -u
shmtrain=$1 shmrun=$2
tmp=$(mktemp -d) || exit 1
trap 'umount "$tmp"/mnt* 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
. "$(dirname "$0")/cli_expect.sh"
cd "$tmp" || exit 1
small="--model mlp --train-subset 256 --test-subset 64 --seed 3"
fail() { echo "FAIL $1"; failed=1; }
pass() { echo "ok   $1"; }
sum() { cksum < "$1" 2>/dev/null; }
steps() { grep "\"type\":\"$2\"" "$1" | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' '; }
csv_steps() { grep ",$2," "$1" | cut -d, -f1 | tr '\n' ' '; }
# every line a whole JSON object
whole_lines() { python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$1" 2>/dev/null; }
increasing() { python3 -c 'import sys; s=[int(x) for x in sys.argv[1:]]; sys.exit(s != sorted(set(s)))' $1; }
can_mount=0
mkdir mnt0 && mount -t tmpfs -o size=1m tmpfs mnt0 2>/dev/null && umount mnt0 && can_mount=1

# 1. --checkpoint FILE twice: the second refused, the first's checkpoint and
#    records kept (the records go to a run folder: none in ./)
expect 1-checkpoint-first 0 "checkpoint: a.ckpt (step 6)" -- "$shmtrain" $small --max-steps 6 --log-every 2 --checkpoint a.ckpt
before=$(sum a.ckpt)
expect 1-checkpoint-again 2 "--checkpoint a.ckpt exists already: --resume a.ckpt continues" -- \
  "$shmtrain" $small --max-steps 2 --log-every 2 --checkpoint a.ckpt
[ "$(sum a.ckpt)" = "$before" ] && [ ! -e metrics.jsonl ] || fail "1-kept: a.ckpt changed or ./metrics.jsonl written"
expect 1-output-dir 2 "did you mean --out DIR?" -- "$shmtrain" --output_dir x
expect 1-out-dir 2 "did you mean --out DIR?" -- "$shmtrain" --out_dir x

# 2. --overwrite: the old run's files go, nothing of it mixes into the new one
expect 2-first 0 "checkpoint: ow/shmtrain.ckpt (step 40)" -- "$shmtrain" $small --train-subset 2048 --max-steps 40 \
  --log-every 10 --eval-every 10 --checkpoint-every 10 --keep 2 --keep-best --out ow
echo mine > ow/notes.txt
expect 2-overwrite 0 "checkpoint: ow/shmtrain.ckpt (step 6)" -- "$shmtrain" $small --max-steps 6 --log-every 3 --out ow --overwrite
[ "$(csv_steps ow/scalars.csv train/loss)" = "3 4 6 " ] || fail "2-scalars: $(csv_steps ow/scalars.csv train/loss)"
[ "$(ls ow | grep -c events.out)" = 1 ] && [ ! -e ow/best.ckpt ] && [ -z "$(ls ow | grep -- -step)" ] ||
  fail "2-files: $(ls ow | tr '\n' ' ')"
[ "$(grep -c '^done:' ow/console.log)" = 1 ] && [ "$(cat ow/notes.txt)" = mine ] || fail "2-console: $(cat ow/console.log)"

# 3. --out DIR holding files a run writes, of the user's: refused, untouched
for f in curves.svg curves.gp scalars.csv console.log; do
  mkdir -p "u-$f" && echo "the user's" > "u-$f/$f"
  expect "3-user-$f" 2 "holds files a run writes already ($f)" -- "$shmtrain" $small --max-steps 1 --out "u-$f"
  [ "$(cat "u-$f/$f")" = "the user's" ] || fail "3-untouched-$f"
done
# a run's own file named whatever order the folder lists its files in (CI's
# file system listed an event file first: the refusal said "files a run
# writes" of a whole run); 40 event files around it make either order likely
mkdir u-order && for i in $(seq 1 20); do : > "u-order/events.out.tfevents.$i"; done
: > u-order/metrics.jsonl && for i in $(seq 21 40); do : > "u-order/events.out.tfevents.$i"; done
expect 3-marker-first 2 "--out u-order holds a run already (metrics.jsonl)" -- "$shmtrain" $small --max-steps 1 --out u-order

# 4. --keep-best keeps the best through a resume, and each named checkpoint its own
expect 4-best 0 "best so far: kb/best.ckpt" -- "$shmtrain" $small --train-subset 2048 --max-steps 20 --eval-every 10 \
  --lr 0.1 --keep-best --out kb
best=$(sum kb/best.ckpt)
# a resumed run no better than the best (a rate that moves no prediction): the
# best stays, where a forgotten best took the first evaluation after a resume
expect 4-resume-level 0 "done: 30 steps" -- "$shmtrain" --resume kb --max-steps 30 --lr 1e-9
grep -q "best so far" "$tmp/out" && fail "4-claims: $(grep 'best so far' "$tmp/out")"
[ "$(sum kb/best.ckpt)" = "$best" ] || fail "4-replaced: kb/best.ckpt rewritten by an evaluation no better"
mkdir kb2
expect 4-named-a 0 "best so far: kb2/a-best.ckpt" -- "$shmtrain" $small --max-steps 4 --eval-every 2 --keep-best \
  --checkpoint kb2/a.ckpt
a_best=$(sum kb2/a-best.ckpt)
expect 4-named-b 0 "best so far: kb2/b-best.ckpt" -- "$shmtrain" --model lenet --train-subset 256 --test-subset 64 \
  --max-steps 2 --keep-best --checkpoint kb2/b.ckpt
[ "$(sum kb2/a-best.ckpt)" = "$a_best" ] || fail "4-other-run: kb2/a-best.ckpt replaced"

# 5. a full disk: no record cut in half, and the run says so (exit 1)
if [ $can_mount = 1 ]; then
  mkdir mnt5 && mount -t tmpfs -o size=12k tmpfs mnt5
  expect 5-full-out 1 "holds no records after step" -- "$shmtrain" $small --max-steps 60 --log-every 1 --no-checkpoint \
    --out mnt5/run
  whole_lines mnt5/run/metrics.jsonl || fail "5-whole: $(tail -c 200 mnt5/run/metrics.jsonl)"
  umount mnt5
  mkdir mnt5b && mount -t tmpfs -o size=3m tmpfs mnt5b  # a checkpoint is 1.9 MB: one fits, two do not
  expect 5-room 1 "its saves take about" -- "$shmtrain" $small --max-steps 2 --out mnt5b/run
  grep -q "step 1" "$tmp/out" && fail "5-room: it trained first"
  umount mnt5b
else
  echo "skip 5: cannot mount a tmpfs here (not root)"
fi

# 6. a long --out: every file inside it, named in full; past the limit, refused
long=$(python3 -c 'print("/".join(["d" * 200] * 6))')
expect 6-long 0 "run folder $long" -- "$shmtrain" $small --max-steps 1 --out "$long"
[ -s "$long/metrics.jsonl" ] && [ -s "$long/console.log" ] && ls "$long" | grep -q '^events.out.tfevents' ||
  fail "6-long: $(ls "$long" | tr '\n' ' ')"
longer=$(python3 -c 'print("/".join(["e" * 200] * 21))')
expect 6-too-long 2 "--out: a name of 4220 bytes; at most" -- "$shmtrain" $small --max-steps 1 --out "$longer"
[ ! -e eeee* ] 2>/dev/null || fail "6-too-long: made $(ls -d e* | head -1)"

# 7. killed after its last checkpoint, resumed: each step once, in order
"$shmtrain" $small --train-subset 4096 --max-steps 400 --log-every 2 --eval-every 4 --checkpoint-every 10 --out k7 \
  >/dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q '"step":\(1[4-9]\|[2-9][0-9]\),' k7/metrics.jsonl 2>/dev/null && break; sleep 0.05; done
kill -9 $pid; wait $pid 2>/dev/null
expect 7-resume 0 "resumed from k7/shmtrain.ckpt" -- "$shmtrain" --resume k7 --max-steps 60
increasing "$(steps k7/metrics.jsonl train)" && increasing "$(steps k7/metrics.jsonl eval)" &&
  increasing "$(csv_steps k7/scalars.csv train/loss)" || fail "7-twice: $(steps k7/metrics.jsonl train)"

# 8. a key without its value: named, not the next word taken
printf 'model mlp\nmax-steps 1\nmetrics\n' > n.cfg
expect 8-no-value 2 "--config n.cfg:3: metrics needs a value" -- "$shmtrain" --quiet --config n.cfg
[ ! -e ./--quiet ] || fail "8-file: a file named --quiet"

# 9-10. the command line's --text replaces the file's; '#' in a value round-trips
printf 'abcdefgh %.0s' $(seq 400) > 'a#1.txt'
printf 'xyz %.0s' $(seq 300) > b.txt
printf 'input tokens 16\nembed 32 32\nblock heads 2\nlayernorm\nhead tied\n' > lm.model
expect 10-hash 0 "run folder r10" -- "$shmtrain" --model lm.model --text 'a#1.txt' --max-steps 1 --batch-size 2 --out r10
grep -q '^text "a#1.txt"$' r10/config.txt || fail "10-written: $(grep text r10/config.txt)"
expect 10-repeat 0 "3240 training / 360 validation tokens" -- "$shmtrain" --config r10/config.txt --out r10b
expect 9-override 0 "1080 training / 120 validation tokens" -- "$shmtrain" --config r10/config.txt --text b.txt --out r9

# 11. --config of a folder, of a binary file, with a BOM, with a key that is no setting
expect 11-dir 2 "--config r10: a folder; give a file" -- "$shmtrain" --config r10
head -c 3000 /dev/urandom | tr -d '\n' > bin.cfg
expect 11-binary 2 "not a text file" -- "$shmtrain" --config bin.cfg
printf '\357\273\277model mlp\nmax-steps 1\ntrain-subset 256\ntest-subset 64\n' > bom.cfg
expect 11-bom 0 "run folder r11" -- "$shmtrain" --config bom.cfg --out r11
printf 'model mlp\nhelp\n' > help.cfg
expect 11-help 2 "help.cfg:2: help is no setting" -- "$shmtrain" --config help.cfg

# 12. config.txt repeats the run: its instances and the values in effect
expect 12-two 0 "run folder runs/mlp-twelve" -- "$shmrun" -n 2 --oversubscribe --job-id twelve \
  --log-dir logs -- "$shmtrain" $small --max-steps 2
for line in "instances 2" "lr 0.05" "seed 3" "batch-size 64" "momentum 0.9"; do
  grep -qx "$line" runs/mlp-twelve/config.txt || fail "12-config: no '$line' in $(tr '\n' ';' < runs/mlp-twelve/config.txt)"
done
expect 12-warns 0 "its run had 2 instances, this one has 1" -- "$shmtrain" --config runs/mlp-twelve/config.txt --out r12

# 13. Ctrl-C's advice works as printed; --resume FILE knows its model
"$shmtrain" --model cnn --train-subset 4096 --test-subset 64 --max-steps 2000 --log-every 1 --out ci1 > c13.out 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q '"step":3,' ci1/metrics.jsonl 2>/dev/null && break; sleep 0.05; done
kill -INT $pid; wait $pid; rc=$?
advice=$(grep -o -- '--resume [^ ]* continues' c13.out | cut -d' ' -f2)
[ $rc = 130 ] && [ "$advice" = ci1 ] || fail "13-advice: rc $rc, $(tail -2 c13.out)"
expect 13-advice-works 0 "resumed from ci1/shmtrain.ckpt" -- "$shmtrain" --resume ci1 --max-steps 8
expect 13-file 0 "run folder ci1, resumed" -- "$shmtrain" --resume ci1/shmtrain.ckpt --max-steps 9  # its folder's run
"$shmtrain" --model cnn --train-subset 256 --test-subset 64 --max-steps 2 --checkpoint plain.ckpt --quiet
expect 13-plain-file 0 "resumed from plain.ckpt" -- "$shmtrain" --resume plain.ckpt --max-steps 3 --train-subset 256 \
  --test-subset 64

# 14. a failed start leaves nothing that refuses the retry
latest=$(readlink runs/latest)
expect 14-fail-out 1 "/no/such" -- "$shmtrain" --data /no/such --out exp1
[ ! -e exp1 ] || fail "14-left: exp1 holds $(ls exp1)"
expect 14-retry 0 "run folder exp1" -- "$shmtrain" $small --max-steps 1 --out exp1
n=$(ls runs | wc -l)
expect 14-fail-default 1 "/no/such" -- "$shmtrain" --data /no/such
[ "$(ls runs | wc -l)" = "$n" ] && [ "$(readlink runs/latest)" = "$latest" ] || fail "14-default: $(ls runs)"
expect 14-resume-nosuch 2 "--resume nosuch: no such file or folder" -- "$shmtrain" --resume nosuch
[ ! -e nosuch ] && [ "$(readlink runs/latest)" = "$latest" ] || fail "14-nosuch: a folder made or latest moved"
ln -sfn "$tmp/runs/$latest" runs/latest
expect 14-absolute-latest 0 "resumed from $tmp/runs/${latest%/*}/shmtrain.ckpt" -- "$shmtrain" --resume --max-steps 3

# 15. launched by torchrun's variables: a job of its own, a folder of its own
mkdir t15 && cd t15
sh -c "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 TORCHELASTIC_RUN_ID=none '$shmtrain' $small --max-steps 2 \
  > r0.out 2>&1 & RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 TORCHELASTIC_RUN_ID=none '$shmtrain' $small \
  --max-steps 2 > r1.out 2>&1; wait" 
d=$(ls runs 2>/dev/null | grep '^mlp-torchrun-')
[ -n "$d" ] && [ -s "runs/$d/shmtrain.ckpt" ] || fail "15-torchrun: $(cat r0.out r1.out | tail -3)"
cd ..

# 16. TensorBoard's --logdir runs sees each run once: runs/latest is no folder
[ -L runs/latest ] && [ ! -d runs/latest ] && [ -f runs/latest ] || fail "16-latest: $(ls -l runs/latest)"

# 17. under shmrun, a refused --out: every rank says so at once, shmrun exits 2
mkdir -p u17 && touch u17/metrics.jsonl
start=$(date +%s)
expect 17-shmrun 2 "--out u17 holds a run already" -- "$shmrun" -n 2 --oversubscribe -- "$shmtrain" $small --out u17
[ $(($(date +%s) - start)) -lt 5 ] && ! grep -q "SIGKILL\|killed by signal" "$tmp/out" || fail "17-slow: $(cat "$tmp/out")"

# 18. console.log is what rank 0 printed; curves for a NaN stop and for one step
expect 18-nan 1 "not finite (NaN/Inf); stopping" -- "$shmtrain" $small --max-steps 50 --lr 100 --log-every 1 --out nan
for line in "shmtrain: run folder nan" "shmtrain: sgd lr 100" "not finite (NaN/Inf); stopping"; do
  grep -qF "$line" nan/console.log || fail "18-console: no '$line' in $(cat nan/console.log)"
done
grep -q "<svg" nan/curves.svg || fail "18-nan-curves: $(ls nan)"
expect 18-one 0 "done: 1 steps" -- "$shmtrain" $small --max-steps 1 --out one
grep -q "<circle\|<path" one/curves.svg && [ "$(grep -c 'stroke' one/curves.svg)" -gt 10 ] || fail "18-one-point"
grep -q "resumed from" k7/console.log || fail "18-resume-line: $(head -3 k7/console.log)"

# 19. sample and export take a run folder
expect 19-export 0 "wrote one.safetensors" -- "$shmtrain" export --checkpoint one --out one.safetensors
expect 19-export-latest 0 "wrote latest.safetensors" -- "$shmtrain" export --checkpoint runs/latest --out latest.safetensors
expect 19-sample 0 "" -- "$shmtrain" sample --checkpoint r10 --prompt "ab" --tokens 5

# 20. messages that name what is wrong
touch afile
expect 20-file-as-folder 2 "--checkpoint afile/x.ckpt: afile is a file, not a folder" -- "$shmtrain" --checkpoint afile/x.ckpt
mkdir w20 && cd w20 && touch runs
expect 20-runs-file 2 "runs is a file, not a folder (run folders go in runs/)" -- "$shmtrain" $small --max-steps 1
cd ..
expect 20-keep-every-0 2 "--keep 2 keeps the periodic checkpoints of --checkpoint-every K, K > 0" -- \
  "$shmtrain" --keep 2 --checkpoint-every 0
if [ $can_mount = 1 ]; then
  mkdir mnt20 && mount -t tmpfs -o ro tmpfs mnt20 && cd mnt20
  expect 20-read-only 2 "give --out DIR where you can write" -- "$shmtrain" $small --max-steps 1
  cd .. && umount mnt20
fi

# 21. the names users type; --max-steps 0 evaluates and saves nothing
for pair in "save_total_limit:--keep K" "load_best_model_at_end:--keep-best" "logging_dir:--out DIR" \
            "logdir:--out DIR" "overwrite_output_dir:--overwrite" "resume-from:--resume" "max_epochs:--epochs" \
            "standalone:shmrun -n N" "keep-last:--keep?"; do
  expect "21-${pair%%:*}" 2 "did you mean ${pair#*:}" -- "$shmtrain" "--${pair%%:*}"
done
expect 21-max-new-tokens 2 "did you mean --tokens" -- "$shmtrain" sample --max_new_tokens 5
expect 21-start 2 "did you mean --prompt" -- "$shmtrain" sample --start x
before=$(sum one/shmtrain.ckpt)
expect 21-eval-only 0 "done: 1 steps" -- "$shmtrain" --resume one --max-steps 0
[ "$(sum one/shmtrain.ckpt)" = "$before" ] && [ "$(steps one/metrics.jsonl eval | wc -w)" = 2 ] ||
  fail "21-eval-only: $(steps one/metrics.jsonl eval)"
exit $failed
