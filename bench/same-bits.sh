#!/bin/sh
# Does a change keep fp32 training bit for bit?  Trains each preset STEPS
# steps (default 60) with one seed under each build and compares the
# exported parameters' SHA-256 (the checkpoint itself holds times; NEW_BUILD's
# `shmtrain export` reads both, so an old build without it compares too): "same" or "DIFFERENT" per preset, exit 1 on any difference.
# resnet trains on a seeded synthetic CIFAR-10 (the machine has none).  For a refactor that must not move a bit (issue 28's check);
# build the old commit with `git worktree add /tmp/old <commit>` and cmake.
#
#   bench/same-bits.sh OLD_BUILD NEW_BUILD [presets...]
#   (default presets: lenet cnn resnet gpt-mini; TEXT=... for gpt-mini's text;
#   ARGS=... more trainer flags for both builds, e.g. ARGS="--precision bf16")
set -eu
[ $# -ge 2 ] || { echo "usage: $0 OLD_BUILD NEW_BUILD [presets...]" >&2; exit 2; }
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd)
shift 2
presets=${*:-lenet cnn resnet gpt-mini}
steps=${STEPS:-60}
text=${TEXT:-/usr/share/games/fortunes}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
mkdir "$tmp/cifar"
k=0
for f in data_batch_1 data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch; do
  # 100 records of a label byte and 3x32x32 pixels, the same bytes every run
  k=$((k + 1))
  LC_ALL=C awk -v seed=$k 'BEGIN { srand(seed); for (r = 0; r < 100; r++) {
      printf "%c", int(rand() * 10); for (i = 0; i < 3072; i++) printf "%c", int(rand() * 256) } }' \
    > "$tmp/cifar/$f.bin"
done
for m in $presets; do
  case $m in
    gpt*) data="--text $text --batch-size 12" ;;
    resnet) data="--cifar $tmp/cifar --batch-size 16" ;;
    *) data="--batch-size 32" ;;
  esac
  for b in old new; do
    eval dir=\$$b
    # a run refuses a checkpoint or export already there (issue 62): each preset's afresh
    rm -rf "$tmp/$b.ckpt" "$tmp/$b.safetensors" "$tmp/runs"
    # shellcheck disable=SC2086
    (cd "$tmp" && "$dir/shmtrain" --model "$m" $data ${ARGS:-} --max-steps "$steps" --seed 1 --log-every 1000 \
      --checkpoint "$tmp/$b.ckpt") > "$tmp/$b.log" 2>&1 &&
      "$new/shmtrain" export --checkpoint "$tmp/$b.ckpt" --out "$tmp/$b.safetensors" >> "$tmp/$b.log" 2>&1 ||
      { cat "$tmp/$b.log" >&2; exit 1; }
  done
  a=$(sha256sum < "$tmp/old.safetensors" | cut -c1-16) b=$(sha256sum < "$tmp/new.safetensors" | cut -c1-16)
  if [ "$a" = "$b" ]; then echo "$m: same ($a, $steps steps)"; else echo "$m: DIFFERENT ($a vs $b)"; status=1; fi
done
exit $status
