#!/bin/sh
# The environment is read in one place (include/shmtrain/env.h): every C and
# C++ reader of a variable in the programs and the library (src, launcher,
# the torch backend, bench) goes through src/common/env.c, so a value's
# meaning (unset, empty, a bad number) is decided once and env.h's table of
# readers can be kept true.  (tests/ read their harness's own variables.)
# Fails naming each getenv found elsewhere.
#   env_read_once.sh SOURCE_DIR
set -u
cd "${1:?usage: env_read_once.sh SOURCE_DIR}" || exit 1
found=$(grep -rnE '\b(secure_)?getenv[[:space:]]*\(' src launcher include python/shmtrain_torch/csrc bench \
          --include='*.c' --include='*.h' --include='*.cpp' 2>/dev/null | grep -v '^src/common/env\.c:')
if [ -n "$found" ]; then
  echo "FAIL: getenv outside src/common/env.c (use st_env_text or a typed reader, include/shmtrain/env.h):"
  echo "$found"
  exit 1
fi
n=$(grep -c 'getenv(' src/common/env.c)
[ "$n" -gt 0 ] || { echo "FAIL: src/common/env.c reads no variable: is this the source tree?"; exit 1; }
echo "ok: getenv only in src/common/env.c ($n calls)"
