#!/usr/bin/env python3
"""st-roofline accounts every layer's FLOPs once, work another layer's ops
ran included (issue 66): cnn's step, counted by hand, against the sum of
its CSV's GFLOP column, at batch 8 and at 64 (where the chunking pass runs
each convolution inside its max-pool's steps, forward and the first
layer's backward-weights, and the tool must move their FLOPs there).

cnn per sample (a multiply-add is two):
  conv 32 k3 on 1x28x28   forward 2*9*32*26*26    = 389,376; backward: weights only (the input takes none)
  conv 64 k3 on 32x13x13  forward 2*288*64*11*11  = 4,460,544; backward twice (data and weights)
  linear 1600 -> 128      forward 409,600; backward twice
  linear 128 -> 10        forward 2,560; backward twice
  step: 5,262,080 forward + 10,134,784 backward = 15,396,864

    roofline_accounts.py ST_ROOFLINE
"""
import csv
import io
import subprocess
import sys

PER_SAMPLE = 2 * 9 * 32 * 26 * 26 * 2 + 2 * 288 * 64 * 11 * 11 * 3 + 2 * 1600 * 128 * 3 + 2 * 128 * 10 * 3


def main():
    tool = sys.argv[1]
    failed = False
    for batch in (8, 64):
        out = subprocess.run([tool, "cnn", "--batch", str(batch), "--csv"], capture_output=True, text=True,
                             check=True).stdout
        rows = list(csv.DictReader(io.StringIO(out)))
        total = sum(float(r["gflop"]) for r in rows)
        want = PER_SAMPLE * batch / 1e9
        moved = [r["layer"] for r in rows if "+#" in r["layer"]]
        if abs(total - want) > 0.0002 * len(rows):  # each row printed to 4 decimals
            print(f"FAIL: batch {batch}: the rows' FLOPs sum to {total:.4f} GFLOP, the step does {want:.4f}")
            failed = True
        if any(float(r["gflop"]) > 0 and float(r["ms"]) <= 0 for r in rows):
            print(f"FAIL: batch {batch}: a row with FLOPs and no time")
            failed = True
        if batch == 64 and not any("+#1" in m for m in moved):
            print(f"FAIL: batch 64: the first convolution's work, run in its pool's chunks, not moved there: {moved}")
            failed = True
        print(f"batch {batch}: {len(rows)} rows, {total:.4f} of {want:.4f} GFLOP; moved: {', '.join(moved) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
