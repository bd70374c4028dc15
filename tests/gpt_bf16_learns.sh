#!/bin/sh
# Issue 47: a GPT learns as well in bf16 (its linear layers, GELU and the
# tied head computing in bf16, the loss fused with the head) as in fp32.
# nanoGPT's CPU recipe (the gpt-mini preset's: AdamW 1e-3, cosine to 1e-4,
# warm-up 100, batch 12) on the fortunes corpus, 1000 steps, seeds 1 and 2:
# each seed's final validation loss (256 windows) in bf16 within 0.01 of
# fp32's, and both far below the untrained ln 256 = 5.5.  Skipped (77) on a
# CPU without native bf16, and in a sanitizer build (the same arithmetic,
# four times slower: the plain build runs it).
# Usage: gpt_bf16_learns.sh SHMTRAIN [TEXT]
set -u
shmtrain=$1 text=${2:-/usr/share/games/fortunes}
grep -q 'avx512_bf16\|amx_bf16' /proc/cpuinfo || { echo "skipped: no native bf16 on this CPU"; exit 77; }
if ldd "$shmtrain" 2>/dev/null | grep -q 'libasan\|libubsan\|libtsan'; then
  echo "skipped: a sanitizer build (the plain build runs this check)"; exit 77
fi
[ -e "$text" ] || { echo "skipped: no corpus at $text (the fortunes package)"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
final() { # seed precision -> the last evaluation's validation loss
  "$shmtrain" --model gpt-mini --text "$text" --max-steps 1000 --eval-windows 256 --log-every 250 --seed "$1" \
    --precision "$2" --no-checkpoint --quiet --out "$tmp/run" --overwrite --metrics "$tmp/m.jsonl" > "$tmp/out" 2>&1 ||
    { echo "FAIL: seed $1 $2: $(tail -2 "$tmp/out")" >&2; echo nan; return; }
  grep '"type":"eval"' "$tmp/m.jsonl" | tail -1 | sed 's/.*"test_loss":\([0-9.]*\).*/\1/'
}
failed=0
for seed in 1 2; do
  f=$(final $seed fp32) b=$(final $seed bf16)
  if awk -v f="$f" -v b="$b" 'BEGIN { d = f - b; if (d < 0) d = -d; exit !(f < 3 && b < 3 && d <= 0.01) }'; then
    echo "ok: seed $seed: validation loss fp32 $f, bf16 $b"
  else
    echo "FAIL: seed $seed: validation loss fp32 $f, bf16 $b (want both below 3 and within 0.01)"
    failed=1
  fi
done
exit $failed
