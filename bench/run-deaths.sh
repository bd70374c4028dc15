#!/usr/bin/env bash
# How fast a gang ends when something dies, N instances (oversubscribed when
# N exceeds the cores), mlp training quietly with checkpoints every 5 steps:
#   launcher  shmrun killed by SIGKILL -> the last instance gone (the lifeline)
#   mpirun    the same with mpirun as the launcher (the lifeline's polling)
#   instance  rank N-1 killed by SIGKILL -> shmrun has exited (gang stopped)
#   stall     rank N-1 stopped (SIGSTOP), --stall-timeout 2 -> shmrun has exited
# Each from the moment the run is stepping (its first checkpoint exists);
# medians (and max) over TRIALS.  Prints a table; docs/benchmarks-history.md,
# "Reliability", has the runs.
#   bench/run-deaths.sh BUILD [TRIALS (20)] [RANKS ("2 4 16")] [KINDS ("launcher mpirun instance stall")]
# (instance and stall run a quarter of TRIALS: their times are the launcher's
# own timers, measured before)
set -uo pipefail
build=${1:?usage: bench/run-deaths.sh BUILD [TRIALS] [RANKS] [KINDS]}
trials=${2:-20} ranks=${3:-2 4 16} kinds=${4:-launcher mpirun instance stall}
tmp=$(mktemp -d)
exec 3>&2  # warnings; the shell's own notices of killed jobs go nowhere
trap 'pkill -KILL -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
median() { sort -g | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f %.3f", m, v[NR]}'; }

# pids of the instances of run $1 (their --metrics path names it)
instances() { pgrep -f -- "--metrics $tmp/$1.jsonl" || true; }
rank_pid() { # run rank
  local p
  for p in $(instances "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SHMTRAIN_RANK=$2" && { echo "$p"; return; }
  done
}

trial() { # kind n id -> seconds
  local kind=$1 n=$2 id=$3 stall=() launch
  [ "$kind" = stall ] && stall=(--stall-timeout 2)
  launch=("$build/shmrun" -n "$n" --oversubscribe --quiet "${stall[@]}" --job-id "death-$id-$$" --log-dir "$tmp/logs" --)
  [ "$kind" = mpirun ] && launch=(mpirun --oversubscribe -np "$n" -x OMP_NUM_THREADS=1)
  [ "$kind" = mpirun ] && [ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)
  mapfile -t vader_before < <(ls /dev/shm | grep '^vader_segment' || true)
  "${launch[@]}" "$build/shmtrain" --model mlp --epochs 1000 --quiet --metrics "$tmp/$id.jsonl" \
    --checkpoint "$tmp/$id.ckpt" --checkpoint-every 5 >/dev/null 2>&1 &
  local launcher=$! t0 victim
  while [ ! -e "$tmp/$id.ckpt" ]; do sleep 0.01; done
  case $kind in
    launcher|mpirun) t0=$(now); kill -KILL "$launcher"
              while [ -n "$(instances "$id")" ]; do sleep 0.002; done ;;
    instance) victim=$(rank_pid "$id" $((n - 1))); t0=$(now); kill -KILL "$victim"; wait "$launcher" ;;
    stall)    victim=$(rank_pid "$id" $((n - 1))); t0=$(now); kill -STOP "$victim"; wait "$launcher" ;;
  esac
  echo "$(now) - $t0" | bc -l
  wait "$launcher" 2>/dev/null
  pkill -KILL -f -- "--metrics $tmp/$id.jsonl" 2>/dev/null
  rm -f "$tmp/$id".*
  leftover=$(ls /dev/shm | grep -c "death-$id-$$" || true)
  [ "$leftover" = 0 ] || echo "run-deaths.sh: $leftover segment(s) of death-$id-$$ left in /dev/shm" >&3
  # Open MPI's own shared memory: a SIGKILLed mpirun never removes it (its
  # ranks would at MPI_Finalize); not ours to leave, nor ours to name.
  [ "$kind" != mpirun ] || comm -13 <(printf '%s\n' "${vader_before[@]}") <(ls /dev/shm | grep '^vader_segment' || true) |
    sed 's|^|/dev/shm/|' | xargs -r rm -f
}

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $trials trials; seconds from the death to the end"
printf '%-9s %5s %8s %8s\n' what ranks median max
for kind in $kinds; do
  for n in $ranks; do
    t=$(case $kind in launcher|mpirun) echo "$trials" ;; *) echo $(( (trials + 3) / 4 )) ;; esac)
    for i in $(seq "$t"); do trial "$kind" "$n" "$kind-$n-$i" 2>/dev/null; done | median |
      { read -r m x; printf '%-9s %5s %8s %8s\n' "$kind" "$n" "$m" "$x"; }
  done
done
