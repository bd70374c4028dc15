#!/bin/sh
# scripts/fresh-root.sh's arguments, checked without root or network
# (--dry-run stops before anything is bootstrapped): every step its help
# names is one it runs, the default runs all of them, and a bad step, flag
# or missing value is one line and exit 2 before anything starts.
# Usage: fresh_root_args.sh SOURCE_DIR
set -u
script=$1/scripts/fresh-root.sh
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
. "$(dirname "$0")/cli_expect.sh"

named=$(sed -n 's/^#   --steps LIST   which of: \([a-z ]*\) (default.*/\1/p' "$script")
[ -n "$named" ] || { echo "FAIL help: no '--steps LIST   which of: ...' line in $script"; failed=1; }
for s in $named; do
  expect "step $s" 0 "^  $s " -- "$script" --steps "$s" --dry-run
done
expect default 0 "would bootstrap trixie" -- "$script" --dry-run
for s in $named; do
  grep -q "^  $s " "$tmp/out" || { echo "FAIL default: step $s not among the default's"; failed=1; }
done
expect torch-step 0 "torch    make test CTEST_ARGS=\"-R 'torch" -- "$script" --dry-run
expect bookworm 0 "would bootstrap bookworm into /var/tmp/shmtrain-fresh-bookworm" -- \
  "$script" --suite bookworm --steps run --dry-run
expect bad-step 2 "fresh-root.sh: --steps: unknown step 'bogus'" -- "$script" --steps "run bogus" --dry-run
expect bad-flag 2 "fresh-root.sh: unknown option '--bogus'" -- "$script" --bogus --dry-run
expect no-value 2 "fresh-root.sh: --steps needs a value" -- "$script" --dry-run --steps
exit $failed
