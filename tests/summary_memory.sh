#!/bin/sh
# Issue 47: --summary prints the plan without the net's data.  gpt2 in bf16
# (124M parameters; its whole net at the recipe's batch 12 took 24 GB to
# print this table) under a 1 GiB address-space limit: the table, 61 of its
# 123 layers in bf16 (the 48 linear layers, the 12 GELUs between them and
# the tied head; 73 with the 12 attention layers, whose products run in bf16
# where the CPU has AVX512-BF16), and the same table at --batch-size 1 and 12.  bf16 is
# planned with SHMTRAIN_BF16_ANY_ISA where the CPU has no native bf16: the
# plan is the roles', not the kernels'.  A sanitizer build maps terabytes
# of shadow: skipped (77) there.
# Usage: summary_memory.sh SHMTRAIN
set -u
shmtrain=$1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
if ldd "$shmtrain" 2>/dev/null | grep -q 'libasan\|libubsan\|libtsan'; then
  echo "skipped: a sanitizer build reserves more address space than the limit"
  exit 77
fi
run() { # batch -> output in $tmp/out.$1
  SHMTRAIN_BF16_ANY_ISA=1 sh -c "ulimit -v 1048576 && exec \"\$0\" --model gpt2 --precision bf16 --summary \
    --batch-size $1" "$shmtrain" > "$tmp/out.$1" 2> "$tmp/err.$1"
}
failed=0
for b in 12 1; do
  if ! run $b; then
    echo "FAIL: --summary --batch-size $b under 1 GiB: exit $?: $(tail -2 "$tmp/err.$b")"
    failed=1
  fi
done
want=61
grep -qw avx512_bf16 /proc/cpuinfo && want=73
grep -q "^$want of 123 layers compute in bf16\$" "$tmp/out.12" ||
  { echo "FAIL: want '$want of 123 layers compute in bf16', got: $(tail -1 "$tmp/out.12")"; failed=1; }
grep -q '^123   head .* bf16 .* fp32$' "$tmp/out.12" ||
  { echo "FAIL: the head's row: $(grep 'head' "$tmp/out.12" | tail -1)"; failed=1; }
cmp -s "$tmp/out.12" "$tmp/out.1" || { echo "FAIL: the plan changed with the batch"; diff "$tmp/out.12" "$tmp/out.1" | head -5; failed=1; }
[ $failed = 0 ] && echo "ok: gpt2 --summary --precision bf16 under a 1 GiB address-space limit, $want of 123 layers in bf16"
exit $failed
