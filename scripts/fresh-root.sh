#!/usr/bin/env bash
# The README's commands on a machine that has never seen this project: a
# minimal Debian root (debootstrap --variant=minbase), this checkout cloned
# into it, nothing installed but make, git and sudo, then, as a user with
# sudo, `make run`, `make test` and `make python` as the README prints them.
#
#   scripts/fresh-root.sh                    Debian 13 (trixie), every step
#   scripts/fresh-root.sh --suite bookworm   Debian 12
#   scripts/fresh-root.sh --steps "run python" --keep
#
#   --suite S      the Debian release to bootstrap (trixie, bookworm)
#   --steps LIST   which of: deps run test python torch (default: all five, in that order;
#                  torch: the suite's PyTorch tests again once make python made the venv)
#   --root DIR     where the root is made (default /var/tmp/shmtrain-fresh-S); it is
#                  removed at the end unless --keep
#   --keep         leave the root (re-entered with: chroot DIR su - dev)
#   --committed    clone HEAD only (default: HEAD plus the working tree's changes,
#                  taken as a commit by `git stash create`, so a change is tried
#                  before it is committed)
#   --mirror URL   Debian mirror (default http://deb.debian.org/debian)
#   --dry-run      check the arguments, print the steps' commands and exit (no root needed)
#
# Needs root (debootstrap, chroot, mounts) and the network to Debian's archive
# and PyPI.  Each step's output goes to LOGS/<step>.log (LOGS=fresh-root-logs/
# under the working directory, or --logs DIR); a table of steps, exit codes and
# seconds ends the run; the exit code is non-zero if any step failed.
# `make fresh-root` runs it.
set -euo pipefail

args=("$@")

suite=trixie steps="deps run test python torch" root="" keep=0 committed=0 dry_run=0
mirror=http://deb.debian.org/debian logs=fresh-root-logs
while [ $# -gt 0 ]; do
  case "$1" in
    --suite|--steps|--root|--logs|--mirror)
      [ $# -ge 2 ] || { echo "fresh-root.sh: $1 needs a value (try --help)" >&2; exit 2; } ;;
  esac
  case "$1" in
    --suite) suite=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --root) root=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --committed) committed=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "fresh-root.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
# Each step: what the user types in the checkout.  The steps --steps takes
# are this table's, so a step added here is one a run can ask for.
declare -A cmd=(
  [deps]="scripts/install-deps.sh"
  [run]="make run"
  [test]="make test"
  [python]="make python"
  [torch]="make test CTEST_ARGS=\"-R 'torch|fp16_numpy|tensorboard'\""
)
for s in $steps; do
  [ -n "${cmd[$s]+set}" ] ||
    { echo "fresh-root.sh: --steps: unknown step '$s' (deps run test python torch)" >&2; exit 2; }
done
if [ $dry_run = 1 ]; then
  echo "fresh-root.sh: would bootstrap $suite into ${root:-/var/tmp/shmtrain-fresh-$suite} from $mirror, then as dev:"
  for s in $steps; do printf '  %-8s %s\n' "$s" "${cmd[$s]}"; done
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "fresh-root.sh: needs root (debootstrap, chroot and mounts)" >&2; exit 2; }
# In a mount namespace of its own: the root's mounts go when this script does,
# however it ends, and none propagates to the host.
if [ -z "${FRESH_ROOT_UNSHARED:-}" ] && command -v unshare >/dev/null; then
  FRESH_ROOT_UNSHARED=1 exec unshare --mount --propagation private "$0" "${args[@]}"
fi
command -v debootstrap >/dev/null || {
  echo "fresh-root.sh: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
src=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
root=${root:-/var/tmp/shmtrain-fresh-$suite}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [ $keep = 0 ] && [ -d "$root" ]; then rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
bind() { mkdir -p "$root$2"; mount "${@:3}" "$1" "$root$2"; mounted+=("$root$2"); }

[ ! -e "$root" ] || { echo "fresh-root.sh: $root exists; remove it or give another --root" >&2; trap - EXIT; exit 2; }
t0=$(date +%s)
echo "fresh-root.sh: debootstrap --variant=minbase $suite into $root"
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$logs/debootstrap.log" 2>&1 ||
  { echo "fresh-root.sh: debootstrap failed (see $logs/debootstrap.log)" >&2; exit 1; }
# debootstrap made the root's own device nodes; the host's /dev is not bound
# (its /dev/shm would be the host's, and a mount under a shared bind
# propagates back to the host)
bind proc /proc -t proc
bind sysfs /sys -t sysfs
bind devpts /dev/pts -t devpts -o newinstance,ptmxmode=0666
bind tmpfs /dev/shm -t tmpfs -o mode=1777
cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "127.0.1.1 $(hostname)" >>"$root/etc/hosts"  # sudo looks its host up

# What the issue's user had: make, git and sudo, and a user who may use sudo.
chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make git sudo ca-certificates' \
  >"$logs/base.log" 2>&1 || { echo "fresh-root.sh: installing make, git and sudo failed (see $logs/base.log)" >&2; exit 1; }
# The host's own certificate authorities (a proxy's), so that pip reaches
# PyPI from the root as it does from the host: the network's detail, not
# something the project needs.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >>"$logs/base.log" 2>&1
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
fi
chroot "$root" useradd -m -s /bin/bash dev
echo 'dev ALL=(ALL) NOPASSWD: ALL' >"$root/etc/sudoers.d/dev"

# The checkout: HEAD, or HEAD with the working tree's changes as a commit.
rev=$(git -C "$src" rev-parse HEAD)
if [ $committed = 0 ]; then  # tracked changes and untracked files, as `git add -A` would take them
  index=$(mktemp)
  cp "$(git -C "$src" rev-parse --absolute-git-dir)/index" "$index"
  GIT_INDEX_FILE=$index git -C "$src" add -A
  tree=$(GIT_INDEX_FILE=$index git -C "$src" write-tree)
  rm -f "$index"
  [ "$tree" = "$(git -C "$src" rev-parse HEAD^{tree})" ] ||
    rev=$(git -C "$src" commit-tree "$tree" -p HEAD -m "fresh-root.sh: the working tree")
fi
git clone -q --no-checkout "$src" "$root/home/dev/shmtrain"
git -C "$root/home/dev/shmtrain" fetch -q "$src" "$rev" 2>/dev/null || true
git -C "$root/home/dev/shmtrain" checkout -q "$rev"
chroot "$root" chown -R dev:dev /home/dev/shmtrain
echo "fresh-root.sh: $(git -C "$src" log -1 --format='%h %s' HEAD)$([ "$rev" = "$(git -C "$src" rev-parse HEAD)" ] || echo ' (and the working tree'"'"'s changes)')"

failed=0
printf '%-8s %-6s %8s  %s\n' step exit seconds command >"$logs/summary.txt"
for s in $steps; do
  start=$(date +%s)
  set +e
  chroot "$root" su - dev -c "cd shmtrain && ${cmd[$s]}" >"$logs/$s.log" 2>&1
  rc=$?
  set -e
  [ $rc = 0 ] || failed=1
  printf '%-8s %-6s %8s  %s\n' "$s" "$rc" "$(($(date +%s) - start))" "${cmd[$s]}" | tee -a "$logs/summary.txt"
  [ $rc = 0 ] || tail -20 "$logs/$s.log" | sed "s/^/  $s: /"
done
# The compiler of that release (Debian 13: GCC 14) warns nowhere in our code.
warnings=$(cat "$logs"/*.log | grep -E '^[^ ]+:[0-9]+:[0-9]+: warning: ' | sort -u || true)
if [ -n "$warnings" ]; then
  echo "fresh-root.sh: $(echo "$warnings" | wc -l) compiler warning(s):"; echo "$warnings" | head -20
  failed=1
fi
# ctest's skips, named (optional parts missing there, scripts/deps.table)
for s in test torch; do
  grep -A20 'tests did not run' "$logs/$s.log" 2>/dev/null | grep -E '^\s+[0-9]+ - ' | sed "s/^\s*/$s: skipped: /" || true
done
echo "fresh-root.sh: $suite, $(($(date +%s) - t0)) s in all; logs in $logs" | tee -a "$logs/summary.txt"
exit $failed
