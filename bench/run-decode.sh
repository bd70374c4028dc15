#!/usr/bin/env bash
# Image-folder decoding, images per second per core: shmtrain's reader
# (st-decode-bench, OMP_NUM_THREADS=1) beside the pipeline a PyTorch
# DataLoader worker runs (bench/pil_decode.py: PIL open, convert, Resize,
# CenterCrop), interleaved, medians over rounds; and how far their bytes
# are apart.
#
#   bench/run-decode.sh [BUILD_DIR] [ROUNDS]
#
# Two synthetic folders, written once into a temporary directory: 10,000
# RGB PNGs of 32 x 32 (CIFAR's size, read as they are) and 1,000 JPEGs of
# 256 x 256..320 (quality 90; shorter side resized to 224, centre 224 x 224).
# The peer needs Pillow in its Python (bench/peer.sh; pip install pillow).
set -euo pipefail
build=${1:-build}; rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd); tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$here/peer.sh"
bench=$build/bench/st-decode-bench
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
pil_ok=0; "${peer[@]}" -c 'import PIL' 2>/dev/null && pil_ok=1

"$bench" --dir "$tmp/png32" --make png32 --count 10000
"$bench" --dir "$tmp/jpeg256" --make jpeg256 --count 1000
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $rounds interleaved rounds"
echo "# peer: $([ $pil_ok = 1 ] && "${peer[@]}" -c 'import PIL; print("Pillow", PIL.__version__)' || echo "Pillow not installed")"
printf '%-8s %9s %12s %12s %8s %s\n' set images "shmtrain/s" "PIL/s" ratio "bytes apart (max, share)"
for set in png32 jpeg256; do
  size=$([ $set = png32 ] && echo 32 || echo 224)
  : > "$tmp/ours"; : > "$tmp/theirs"
  for _ in $(seq "$rounds"); do
    OMP_NUM_THREADS=1 "$bench" --dir "$tmp/$set" --channels 3 --size "$size" --repeat 1 --dump "$tmp/$set.u8" |
      sed 's/.*: \([0-9]*\) images\/s/\1/' >> "$tmp/ours"
    [ $pil_ok = 1 ] && "${peer[@]}" "$here/pil_decode.py" "$tmp/$set" 3 "$size" --compare "$tmp/$set.u8" > "$tmp/pil.out" &&
      sed -n 's/.*: \([0-9]*\) images\/s/\1/p' "$tmp/pil.out" >> "$tmp/theirs"
  done
  ours=$(median < "$tmp/ours"); theirs=$([ $pil_ok = 1 ] && median < "$tmp/theirs" || echo nan)
  apart=$([ $pil_ok = 1 ] && sed -n 's/largest difference from shmtrain.s bytes: \([0-9]*\) (mean [0-9.]*, \([0-9.]*%\).*/\1, \2/p' "$tmp/pil.out")
  printf '%-8s %9s %12s %12s %8s %s\n' "$set" "$(ls -R "$tmp/$set" | grep -c '\.\(png\|jpg\)$')" "$ours" "$theirs" \
    "$(awk -v a="$ours" -v b="$theirs" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else printf "-"}')" "$apart"
done
