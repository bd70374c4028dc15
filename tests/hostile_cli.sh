#!/bin/sh
# Issue 26's command-line reproducers: each case must end with the stated
# exit status and one line naming what is wrong, and leave nothing in
# /dev/shm.  Usage: hostile_cli.sh SHMTRAIN SHMRUN
set -u
shmtrain=$1 shmrun=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"; rm -f /dev/shm/shmtrain.$(id -u).hostile-$$.*' EXIT
failed=0

. "$(dirname "$0")/cli_expect.sh"

# A file-size limit below the collective segment: SIGXFSZ killed the
# instance (rc 153) and left the segment behind.
expect ulimit-f 1 "ulimit -f" -- sh -c "ulimit -f 1000; exec '$shmtrain' --model lenet --max-steps 1 --quiet"
left=$(ls /dev/shm | grep -c "^shmtrain\.$(id -u)\.local-" || true)
[ "$left" = 0 ] || { echo "FAIL ulimit-f: $left segment(s) left in /dev/shm"; failed=1; }

# A temperature that underflows a float was "not a number"; now the flag is
# taken and the missing checkpoint is what is refused.
expect tiny-temperature 1 "$tmp/none.ckpt: cannot open" -- \
  "$shmtrain" sample --checkpoint "$tmp/none.ckpt" --temperature 1e-300
expect huge-temperature 2 "out of range" -- "$shmtrain" sample --checkpoint x --temperature 1e999

# A dataset segment someone created before us: the helpful line the
# collectives' segments get, not shm_open's "File exists".
: > "/dev/shm/shmtrain.$(id -u).hostile-$$.data-train"
expect precreated-data 1 "already exists: another job uses this job id" -- \
  "$shmrun" -n 2 --quiet --job-id "hostile-$$" --log-dir "$tmp/logs" --tee-all -- \
  "$shmtrain" --model mlp --max-steps 1 --quiet

exit $failed
