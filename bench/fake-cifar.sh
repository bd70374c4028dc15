#!/usr/bin/env bash
# CIFAR-10's binary layout (a label byte, 3 x 32 x 32 pixel bytes per record)
# with seeded random contents, for benches that time steps, not learning:
# data_batch_1..5.bin and test_batch.bin of N records each (default 2000).
#   bench/fake-cifar.sh DIR [N]
set -euo pipefail
dir=${1:?usage: fake-cifar.sh DIR [N]}; n=${2:-2000}
mkdir -p "$dir"
perl -e 'srand(1); my $n = shift; for my $f (@ARGV) {
  open(my $o, ">", $f) or die "$f: $!"; binmode $o;
  for (1 .. $n) { print $o chr(int(rand(10))), pack("C*", map { int(rand(256)) } 1 .. 3072) } close $o or die "$f: $!" }' \
  "$n" "$dir"/data_batch_{1,2,3,4,5}.bin "$dir"/test_batch.bin
