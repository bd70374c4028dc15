#!/bin/sh
# Issue 45: docs/engine.md's walk-through of adding a layer stays true to
# the layer table (src/nn/layers.h): the example's header and CONV row are
# the table's own lines, every column the header names has a row in the
# doc's column table, and every file that table sends a reader to exists.
# Usage: engine_doc_table.sh SOURCE_DIR
set -u
src=$1 failed=0
table=$src/src/nn/layers.h doc=$src/docs/engine.md
for kind in 'KIND        keyword' 'X(CONV,'; do
  line=$(grep -F "$kind" "$table" | head -1)
  if ! grep -qxF "$line" "$doc"; then
    echo "FAIL: docs/engine.md's example lacks layers.h's line: $line"; failed=1
  fi
done
for column in $(grep -F 'KIND        keyword' "$table" | sed 's|.*/\*||; s|\*/.*||'); do
  case $column in KIND|keyword|ref_forward|ref_backward) continue ;; esac
  grep -q "^| \`$column\`" "$doc" || { echo "FAIL: the column '$column' has no row in docs/engine.md's column table"; failed=1; }
done
for file in $(sed -n '/^| column | file |/,/^$/p' "$doc" | grep -o '`[a-z_/<>]*\.[ch]`' | tr -d '`' | grep -v '<'); do
  [ -e "$src/src/nn/$file" ] || { echo "FAIL: docs/engine.md names src/nn/$file, which does not exist"; failed=1; }
done
[ $failed = 0 ] && echo "ok: docs/engine.md's layer walk-through matches src/nn/layers.h"
exit $failed
