#!/usr/bin/env bash
# Builds of the engine, step against step, interleaved: what a dependency
# upgrade (oneDNN 2.6 -> 3.x) or an engine change costs or buys, per preset,
# thread count and precision.
#   bench/run-builds.sh [--rounds R] [--precisions "fp32 bf16"] [--seconds S] BUILD BUILD...
# BUILD: a build directory, or ROOT:DIR for one inside a chroot (another
# distribution's libraries on the same machine, e.g. a Debian 13 root made
# with debootstrap; run as root).  e.g.
#   bench/run-builds.sh --precisions "fp32 bf16" build-26 build /srv/trixie:/src/shmtrain/build
# Each round runs st-step-bench of every build once per precision, the order
# rotating from round to round; image presets at batch 64, gpt-mini and gpt at
# batch 12 and 4 (their benches' sizes).  The table gives medians over rounds
# and each build's ratio to the first (below 1: faster than the first).
set -euo pipefail
rounds=5; precisions=fp32; seconds=1; builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -*) echo "run-builds.sh: unknown option '$1'" >&2; exit 2 ;;
    *) builds+=("$1"); shift ;;
  esac
done
[ ${#builds[@]} -ge 2 ] || { sed -n '5,10p' "$0" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_PROC_BIND=close OMP_PLACES=cores
sets=("mlp,lenet,cnn,resnet 64" "gpt-mini 12" "gpt 4")
in_build() {  # build command args...: runs a program of the build, in its chroot if it has one
  local b=$1; shift
  case "$b" in
    *:*) chroot "${b%%:*}" env OMP_PROC_BIND=close OMP_PLACES=cores "${b#*:}/$@" ;;
    *) "$b/$@" ;;
  esac
}
run() {  # build index, precision
  local set b=${builds[$1]}
  for set in "${sets[@]}"; do
    in_build "$b" bench/st-step-bench --rounds 1 --seconds "$seconds" --csv --precision "$2" --models "${set% *}" \
      --batch "${set#* }" 2>>"$tmp/err" | tail -n +2 | sed "s|^|$1,$2,|" >> "$tmp/steps.csv" || true
  done
}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
     "$(grep -o -m1 -E 'amx_bf16|avx512_bf16' /proc/cpuinfo || echo 'no native bf16'); $rounds rounds"
for i in "${!builds[@]}"; do
  echo "# build $((i + 1)): ${builds[$i]}: $(in_build "${builds[$i]}" shmtrain --version 2>/dev/null | sed -n 's/^oneDNN //p' ||
                                     echo 'no --version (before oneDNN 3)')"
done
nb=${#builds[@]}
for r in $(seq 1 "$rounds"); do
  for q in $precisions; do
    for k in $(seq 0 $((nb - 1))); do run $(((k + r) % nb)) "$q"; done
  done
done
median() { sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}'; }
echo
head="| model | threads | precision |"; rule="|---|---|---|"
for i in $(seq 1 "$nb"); do head="$head build $i ms |"; rule="$rule---|"; done
for i in $(seq 2 "$nb"); do head="$head $i / 1 |"; rule="$rule---|"; done
echo "$head"; echo "$rule"
for set in "${sets[@]}"; do models=${set% *}; for mm in ${models//,/ }; do for t in 1 2; do for q in $precisions; do
  row="| $mm | $t | $q |"; ms=()
  for i in $(seq 0 $((nb - 1))); do
    ms[$i]=$(awk -F, -v b="$i" -v q=$q -v m=$mm -v t=$t '$1==b && $2==q && $3==m && $4==t {print $6}' "$tmp/steps.csv" | median)
    row="$row ${ms[$i]:--} |"
  done
  for i in $(seq 1 $((nb - 1))); do
    row="$row $([ -n "${ms[0]}" ] && [ -n "${ms[$i]}" ] && awk -v x="${ms[0]}" -v y="${ms[$i]}" 'BEGIN{printf "%.3f", y/x}' || echo -) |"
  done
  echo "$row"
done; done; done; done
[ ! -s "$tmp/err" ] || { echo; echo "stderr (first lines):"; sort -u "$tmp/err" | head -5; }
