#!/usr/bin/env bash
# The many-ranks measurement, in one call on a machine with more cores (issue 46):
# all-reduce bus bandwidth at 2/4/8/16 ranks x 1-8 threads beside Open MPI, each time
# as a multiple of its memory-traffic bound (st-allreduce-bench's probe and counters),
# the build before this one at the same partitions, every algorithm forced for the
# switch table (src/coll/choose.c), and shmrun --sweep of resnet, gpt-mini and gpt over
# 1x16 .. 16x1 and 1x1 (the scaling: samples/s on 16 cores over 16 x one core's; each
# many-instance setting also as its instances alone, --balance independent, the machine's
# ceiling: the report's "shmtrain / independent"), then resnet and gpt-mini again with
# --balance dynamic at the many-instance settings (issue 64: does balancing close the gap).
#
# Here, first (packs what the bare machine lacks into .device/, ignored by git):
#   bench/run-many-ranks.sh pack [BUILD_DIR] [BEFORE_BENCH]
#     BUILD_DIR     default build; ../shared/tools/device-bundle.sh packs its binaries
#     BEFORE_BENCH  an st-allreduce-bench of the build before (static; default none)
# There (the device tool runs it from the repository root; results under OUT):
#   bench/run-many-ranks.sh run OUT [--quick]
#     --quick       2-4 ranks, small sizes, a few steps: checks the script itself
# Each part runs under a time limit and appends its files to OUT/results.tar as it
# ends, so a run cut short still returns what it measured; OUT/log.txt has everything
# printed.  Record what it measured in docs/benchmarks.md with the machine named.
set -uo pipefail
mode=${1:-}
root=$(cd "$(dirname "$0")/.." && pwd)

pack() {
  local build=${1:-build} before=${2:-}
  cd "$root" || exit 1
  [ -x ../shared/tools/device-bundle.sh ] || { echo "run-many-ranks: ../shared/tools/device-bundle.sh is missing" >&2; exit 1; }
  ../shared/tools/device-bundle.sh "$build" || exit 1
  # Open MPI as Debian installs it (absolute paths, unpacked where nothing is), and the
  # libraries its launcher and components load, for LD_LIBRARY_PATH.
  local stage=.device/ompi-stage paths=()
  rm -rf "$stage" && mkdir -p "$stage/deps"
  for p in /usr/bin/orterun /usr/bin/orted /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
           /usr/share/openmpi /etc/openmpi; do
    [ -e "$p" ] && paths+=("${p#/}")
  done
  [ ${#paths[@]} -gt 0 ] && tar -C / -cf "$stage/tree.tar" "${paths[@]}"
  { ldd /usr/bin/orterun /usr/bin/orted; find /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
      -name '*.so' -exec ldd {} \; ; } 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r lib; do cp -L "$lib" "$stage/deps/"; done
  [ -n "$before" ] && cp "$before" "$stage/st-allreduce-bench-before"
  mkdir -p "$stage/fortunes" && find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' \
    -exec cp {} "$stage/fortunes/" \;  # the demo corpus, as shmtrain --text reads the folder
  tar -C "$stage" -cJf .device/extra.tar.xz . && rm -rf "$stage"
  du -sh .device | awk '{print "run-many-ranks: .device is " $1 " (the device takes 64 MiB in all)"}'
}

# ------------------------------------------------------------------ there --

# An Open MPI that starts: the machine's own, else Debian's from the bundle, moved
# under /tmp/ompi (OPAL_PREFIX; a machine's own Open MPI may sit at the same paths,
# with a PMIx that Debian's components cannot use).  Sets mpirun=(...) or leaves it empty.
find_mpi() {
  mpirun=()
  local probe=(/tmp/st/bin/st-allreduce-bench-mpi --min 4 --max 64 --seconds 0.01)
  if command -v mpirun >/dev/null; then
    mkdir -p /tmp/st-nompi && find /tmp/st/lib -maxdepth 1 -type f ! -name 'libmpi*' ! -name 'libopen-*' \
      ! -name 'libpmix*' ! -name 'libhwloc*' ! -name 'libevent*' -exec cp -n {} /tmp/st-nompi/ \;
    if timeout 60 env LD_LIBRARY_PATH=/tmp/st-nompi mpirun --allow-run-as-root --oversubscribe -np 2 "${probe[@]}" \
         > "$out/mpi-check-own.txt" 2>&1; then
      mpirun=(env LD_LIBRARY_PATH=/tmp/st-nompi mpirun --allow-run-as-root)
      echo "setup: this machine's Open MPI: $(mpirun --version 2>/dev/null | head -1)"
      return
    fi
  fi
  [ -f /tmp/extra/tree.tar ] || return
  mkdir -p /tmp/ompi && tar -C /tmp/ompi -xf /tmp/extra/tree.tar
  local lib=/tmp/ompi/usr/lib/x86_64-linux-gnu
  local -a env=(env OPAL_PREFIX=/tmp/ompi/usr PMIX_INSTALL_PREFIX=$lib/pmix2 OMPI_ALLOW_RUN_AS_ROOT=1
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi,psm,psm2
                OMPI_MCA_btl_vader_single_copy_mechanism=cma OMPI_MCA_plm=isolated
                LD_LIBRARY_PATH=$lib/openmpi/lib:/tmp/extra/deps:/tmp/st/lib PATH=/tmp/ompi/usr/bin:$PATH)
  if timeout 60 "${env[@]}" /tmp/ompi/usr/bin/orterun -np 2 "${probe[@]}" > "$out/mpi-check.txt" 2>&1; then
    mpirun=("${env[@]}" /tmp/ompi/usr/bin/orterun)
    echo "setup: Debian's Open MPI from the bundle: $("${mpirun[@]}" --version 2>/dev/null | head -1)"
  else
    echo "setup: no Open MPI starts (mpi-check*.txt); shmtrain alone"
  fi
}

setup() {
  source "$root/.device/setup.sh" || return 1
  mkdir -p /tmp/extra && tar -C /tmp/extra -xJf "$root/.device/extra.tar.xz" || return 1
  export LD_LIBRARY_PATH=/tmp/st/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  mpirun=(); [ "${MPI:-1}" = 0 ] || find_mpi  # its probes take up to two minutes where none starts
}

# Append this part's files to the results, then drop them.
keep() { tar -C "$work" -rf "$out/results.tar" "$@" 2>/dev/null; }

machine() {
  { date -u +%FT%TZ; uname -r; lscpu; command -v numactl >/dev/null && numactl -H; nproc;
    cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null; free -g; df -h /dev/shm; } > "$work/machine.txt" 2>&1
  sed -n 's/^Model name: *//p;/^NUMA node(s)/p;/^Core(s) per socket/p;/^Thread(s) per core/p;/^Socket(s)/p;/^Flags/{s/.*\(amx_bf16\).*/  amx_bf16/p}' \
    "$work/machine.txt"
  keep machine.txt
}

# One partition: shmtrain and Open MPI in the same processes where mpirun works.
allreduce_at() {
  local n=$1 t=$2 tag=$3; shift 3
  local f="$work/ar-${n}x${t}-$tag.csv"
  if [ ${#mpirun[@]} -gt 0 ]; then
    timeout 240 "${mpirun[@]}" -np "$n" --bind-to core --map-by "slot:PE=$t" -x OMP_NUM_THREADS="$t" \
      -x OMP_PROC_BIND=close -x OMP_PLACES=cores \
      /tmp/st/bin/st-allreduce-bench-mpi --threads "$t" --csv "$@" > "$f" 2> "$f.err"
  else
    OMP_NUM_THREADS=$t timeout 240 /tmp/st/bin/st-allreduce-bench -n "$n" --threads "$t" --csv "$@" > "$f" 2> "$f.err"
  fi
  echo "allreduce ${n}x${t} $tag: exit $? ($(grep -c '^[0-9]' "$f") sizes)"
  keep "ar-${n}x${t}-$tag.csv" "ar-${n}x${t}-$tag.csv.err"
}

# The build before this one: one thread per rank, no counters.
before_at() {
  local n=$1 f="$work/before-${1}x1.csv"; shift
  [ -x /tmp/extra/st-allreduce-bench-before ] || return 0
  timeout 120 /tmp/extra/st-allreduce-bench-before -n "$n" --csv "$@" > "$f" 2>&1
  echo "before ${n}x1: exit $?"
  keep "before-${n}x1.csv"
}

# The small-message floor (issue 64): this build and the build before alternating, 2 ranks,
# one thread each (the build before has no threads; this one's default is CPUs / ranks),
# FLOOR_ROUNDS rounds, the order swapped each round.
floor_at() {
  [ -x /tmp/extra/st-allreduce-bench-before ] || { echo "floor: no build before in the bundle"; return 0; }
  local r b
  for r in $(seq 1 "${FLOOR_ROUNDS:-5}"); do
    for b in $( [ $((r % 2)) = 1 ] && echo "before now" || echo "now before"); do
      local cmd=(/tmp/st/bin/st-allreduce-bench --threads 1)
      [ "$b" = before ] && cmd=(/tmp/extra/st-allreduce-bench-before)
      timeout 60 "${cmd[@]}" -n 2 --csv "$@" > "$work/floor-$b-$r.csv" 2>&1
      keep "floor-$b-$r.csv"
    done
  done
  echo "floor: $(ls "$work"/floor-*.csv | wc -l) runs"
}

# Every algorithm forced at one partition, for the switch table.
switch_at() {
  local n=$1 t=$2; shift 2
  for a in ${SWITCH_ALGORITHMS:-direct ring rsag}; do
    OMP_NUM_THREADS=$t timeout 60 /tmp/st/bin/st-allreduce-bench -n "$n" --threads "$t" --algorithm "$a" --csv "$@" \
      > "$work/switch-${n}x${t}-$a.csv" 2>&1
    keep "switch-${n}x${t}-$a.csv"
  done
  echo "switch ${n}x${t}: done"
}

sweeps() {
  local pct=$1 plans=$2 balanced=$3  # steps: this percentage of the full run's
  "$(dirname "$0")/fake-cifar.sh" /tmp/cifar  # the sweeps time steps, not learning
  local text=${TEXT:-/tmp/extra/fortunes}
  local -a jobs=(
    "resnet|--model resnet --cifar /tmp/cifar --max-steps $((60 * pct / 100)) --log-every $((10 * pct / 100)) --eval-every 100000"
    "gpt-mini|--model gpt-mini --text $text --max-steps $((60 * pct / 100)) --log-every $((10 * pct / 100)) --eval-every 100000"
    "gpt|--model gpt --text $text --max-steps $((12 * pct / 100 + 2)) --log-every $((3 * pct / 100 + 1)) --eval-every 100000")
  for j in "${jobs[@]}"; do
    [[ " ${SWEEP_MODELS:-resnet gpt-mini gpt} " == *" ${j%%|*} "* ]] || continue
    local name=${j%%|*} args=${j#*|}
    # shellcheck disable=SC2086
    timeout 240 /tmp/st/bin/shmrun --sweep "$plans" --repeats 1 --quiet --sweep-out "$work/sweep-$name" \
      -- /tmp/st/bin/shmtrain $args --allreduce-dtype bf16 --bucket-mb 4 > "$work/sweep-$name.log" 2>&1
    echo "sweep $name: exit $?"; grep -E '^\|' "$work/sweep-$name/report.md" 2>/dev/null | head -12
    keep "sweep-$name.log" "sweep-$name"
  done
  # balanced: only where several instances wait for each other, 4 micro-batches a step to
  # move (a quarter of the steps: the same samples), beside the same job's independent runs
  for j in "${jobs[@]}"; do
    [[ " ${BALANCE_MODELS:-resnet gpt-mini} " == *" ${j%%|*} "* ]] || continue
    local name=${j%%|*} args=${j#*|}
    # shellcheck disable=SC2086
    timeout 200 /tmp/st/bin/shmrun --sweep "$balanced" --repeats 1 --quiet --sweep-out "$work/sweep-$name-dynamic" \
      -- /tmp/st/bin/shmtrain $args --allreduce-dtype bf16 --bucket-mb 4 --balance dynamic --grad-accum 4 \
      --max-steps $((15 * pct / 100 + 2)) --log-every $((3 * pct / 100 + 1)) > "$work/sweep-$name-dynamic.log" 2>&1
    echo "sweep $name --balance dynamic: exit $?"; grep -E '^\|' "$work/sweep-$name-dynamic/report.md" 2>/dev/null | head -8
    keep "sweep-$name-dynamic.log" "sweep-$name-dynamic"
  done
}

run() {
  out=${1:?usage: run-many-ranks.sh run OUT [--quick]}; local quick=${2:-}
  mkdir -p "$out" && out=$(cd "$out" && pwd)
  work=$(mktemp -d)
  exec > >(tee -a "$out/log.txt") 2>&1
  setup || { echo "setup failed"; return 1; }
  machine
  if [ "$quick" = --quick ]; then
    local sizes=(--min 64K --max 1M --seconds 0.02) parts="2x1 2x2 4x1" switch="2x1" plans="1x1,2x1" pct=10 \
          balanced=2x1
    local switch_sizes=(--min 4K --max 1M --seconds 0.02)
  else
    local sizes=(--min 64K --max 256M --seconds 0.05) parts="16x1 8x2 4x4 2x8 2x1 4x1 8x1" \
          switch="2x1 4x1 8x1 16x1 2x8" plans="all,2x8,4x4,8x2,core,1x1" pct=100 balanced=core,8x2
    local switch_sizes=(--min 4K --max 4M --seconds 0.02)
  fi
  # A rerun of some of it: PARTS (allreduce before switch sweeps, and floor: the build before
  # alternating with this one at 2 ranks, 4 B - 64 KiB, FLOOR_ROUNDS), ALLREDUCE_PARTS, SWITCH_PARTS,
  # SWITCH_SIZES ("--min 64K --max 64M"), SWITCH_ALGORITHMS, SWEEP_MODELS, SWEEP_PLANS, SWEEP_PCT (the
  # steps' percentage), BALANCE_MODELS ("" for none), BALANCE_PLANS, TEXT (gpt's corpus), MPI=0 (no mpirun).
  local want=" ${PARTS:-allreduce before switch sweeps} "
  parts=${ALLREDUCE_PARTS:-$parts} switch=${SWITCH_PARTS:-$switch} plans=${SWEEP_PLANS:-$plans}
  balanced=${BALANCE_PLANS:-$balanced} pct=${SWEEP_PCT:-$pct}
  [[ $want == *" floor "* ]] && floor_at --min 4 --max 64K --seconds "${FLOOR_SECONDS:-0.1}"
  # shellcheck disable=SC2206
  [ -n "${SWITCH_SIZES:-}" ] && switch_sizes=($SWITCH_SIZES --seconds 0.02)
  if [[ $want == *" allreduce "* ]]; then
    for p in $parts; do allreduce_at "${p%x*}" "${p#*x}" fp32 "${sizes[@]}"; done
    [ -z "$quick" ] && [ "${BF16:-1}" = 1 ] && allreduce_at 16 1 bf16 "${sizes[@]}" --dtype bf16
  fi
  if [[ $want == *" before "* ]] && [ -z "$quick" ]; then
    for p in 16x1 2x1; do before_at "${p%x*}" "${sizes[@]}"; done
  fi
  if [[ $want == *" switch "* ]]; then
    for p in $switch; do switch_at "${p%x*}" "${p#*x}" "${switch_sizes[@]}"; done
  fi
  [[ $want == *" sweeps "* ]] && sweeps "$pct" "$plans" "$balanced"
  echo "run-many-ranks: done $(date -u +%T)"
}

case $mode in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
