# Sourced by the command-line tests: expect NAME RC FRAGMENT -- COMMAND...
# runs COMMAND, and records a failure (failed=1) unless it exits RC with a
# line containing FRAGMENT.  Needs $tmp (a scratch directory) and $failed.
expect() { # name rc fragment -- command...
  name=$1 want_rc=$2 fragment=$3; shift 4
  "$@" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -q -- "$fragment" "$tmp/out"; then
    echo "FAIL $name: rc $rc (want $want_rc), output:"; sed 's/^/    /' "$tmp/out"
    echo "    (wanted a line with: $fragment)"
    failed=1
  else
    echo "ok   $name: rc $rc, $(grep -m1 -- "$fragment" "$tmp/out")"
  fi
}
