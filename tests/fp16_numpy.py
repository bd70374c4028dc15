#!/usr/bin/env python3
"""fp16 in the collectives, bit for bit against numpy's float16.

For fp32 values on an fp16 wire and for fp16 payloads, over 1-4 forked
ranks, counts 1, 37 and 20,000 (pieces of a 16 KiB staging area), sum, avg
and (payloads) max: st-wire-probe's every rank must hold exactly the bits
numpy gives for "each rank's values as float16, summed in float32 in rank
order, divided in float32 for an average, rounded once to float16" (and
widened back for an fp32 buffer).  The inputs hold the values rounding is
about: ties between two halves (to even), values past 65504 and sums that
overflow to infinity, fp16 subnormals and values below the smallest, signed
zeros and a NaN.

    fp16_numpy.py PROBE WORKDIR
"""
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    # optional (scripts/deps.table): counted as a skip, never left out of the suite
    print("skipped: no numpy in " + sys.executable + " (scripts/install-deps.sh --bench puts it in .deps/torch-venv)")
    sys.exit(77)


def inputs(world, count, rng):
    rows = rng.standard_normal((world, count)).astype(np.float32) * np.float32(3.0)
    special = np.array([
        1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, -(1 + 2.0 ** -11), 2048 + 1, 2048 + 3,  # ties: to even
        65504, 65519.99, 65520, 60000, -60000,                                       # the top; sums overflow
        2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -14 - 2.0 ** -25, 3e-9,     # subnormals, below them
        0.0, -0.0, 1e-3, -7.3125, 0.1,
    ], dtype=np.float32)
    for r in range(world):
        k = min(count, len(special))
        rows[r, :k] = np.roll(special, r)[:k]  # each rank a different special at each place
    return rows


def expected(rows, dtype, op):
    halves = [r.astype(np.float16) for r in rows]
    acc = halves[0].astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for h in halves[1:]:
            x = h.astype(np.float32)
            # MAX keeps the first of equal values (rank order, as gloo's std::max):
            # -0 then +0 stays -0, where np.maximum would say +0
            acc = np.where(x > acc, x, acc) if op == "max" else acc + x
        if op == "avg":
            acc = acc / np.float32(len(rows))
        out = acc.astype(np.float16)
    return out.astype(np.float32) if dtype == "fp32" else out


def run(probe, work, world, count, dtype, op, rng, nan):
    rows = inputs(world, count, rng)
    if nan and count > 25:
        rows[world - 1, 25] = np.nan
    payload = rows if dtype == "fp32" else rows.astype(np.float16)
    src, dst = os.path.join(work, "in.raw"), os.path.join(work, "out")
    payload.tofile(src)
    r = subprocess.run([probe, src, dst, str(world), str(count), dtype, "fp16", op], capture_output=True, text=True)
    if r.returncode != 0:
        return "probe failed (%d): %s" % (r.returncode, r.stderr.strip())
    want = expected(rows, dtype, op)
    bits = np.uint32 if dtype == "fp32" else np.uint16
    for rank in range(world):
        got = np.fromfile("%s.%d" % (dst, rank), dtype=want.dtype)
        if got.shape != want.shape:
            return "rank %d: %d values, want %d" % (rank, got.size, want.size)
        wrong = np.nonzero(got.view(bits) != want.view(bits))[0]
        if wrong.size:
            i = wrong[0]
            return "rank %d: %d values differ, first at %d: %#x, numpy %#x" % (
                rank, wrong.size, i, int(got.view(bits)[i]), int(want.view(bits)[i]))
    return None


def main():
    probe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(20261126)
    failures, cases = [], 0
    for world in (1, 2, 3, 4):
        for count in (1, 37, 20000):
            for dtype, ops in (("fp32", ("sum", "avg")), ("fp16", ("sum", "avg", "max"))):
                for op in ops:
                    cases += 1
                    why = run(probe, work, world, count, dtype, op, rng, nan=op != "max")
                    if why:
                        failures.append("%d ranks, %d %s on an fp16 wire, %s: %s" % (world, count, dtype, op, why))
    for f in failures:
        print("FAIL", f)
    print("%d of %d cases the bits of numpy %s" % (cases - len(failures), cases, np.__version__))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
