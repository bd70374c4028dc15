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

gpt-mini per sample (context 64, width 128, 4 blocks, 4 heads, vocabulary
256), its tied head's loss fused with it, so the head's three products are
one row, "head+loss":
  a block: qkv 2*128*384*64, projection 2*128*128*64, MLP 2*2*128*512*64,
           causal attention 2*2*128*(64*65/2)          = 26,230,784 forward
  head     2*64*128*256                                 =  4,194,304 forward
  every layer's input takes a gradient: backward twice forward, the step
  three times: 3 * (4 * 26,230,784 + 4,194,304)        = 327,352,320

    roofline_accounts.py ST_ROOFLINE
"""
import csv
import io
import subprocess
import sys

PER_SAMPLE = 2 * 9 * 32 * 26 * 26 * 2 + 2 * 288 * 64 * 11 * 11 * 3 + 2 * 1600 * 128 * 3 + 2 * 128 * 10 * 3
GPT_HEAD = 2 * 64 * 128 * 256
GPT_BLOCK = 64 * (2 * 128 * 384 + 2 * 128 * 128 + 2 * 2 * 128 * 512) + 2 * 2 * 128 * (64 * 65 // 2)
GPT_PER_SAMPLE = 3 * (4 * GPT_BLOCK + GPT_HEAD)


def rows_of(tool, model, batch):
    out = subprocess.run([tool, model, "--batch", str(batch), "--csv"], capture_output=True, text=True,
                         check=True).stdout
    return list(csv.DictReader(io.StringIO(out)))


def gpt_fused_head(tool):
    """The gpt preset's step, its fused head and loss one row with the head's three products."""
    batch = 2
    rows = rows_of(tool, "gpt-mini", batch)
    total = sum(float(r["gflop"]) for r in rows)
    heads = [r for r in rows if "head+loss" in r["layer"]]
    failed = False
    if abs(total - GPT_PER_SAMPLE * batch / 1e9) > 0.000001 * len(rows):
        print(f"FAIL: gpt-mini: the rows' FLOPs sum to {total:.4f} GFLOP, the step does {GPT_PER_SAMPLE * batch / 1e9:.4f}")
        failed = True
    if len(heads) != 1 or heads[0]["pass"] != "forward+backward" or \
            abs(float(heads[0]["gflop"]) - 3 * GPT_HEAD * batch / 1e9) > 0.0001 or float(heads[0]["ms"]) <= 0:
        print(f"FAIL: gpt-mini: not one timed head+loss row of {3 * GPT_HEAD * batch / 1e9:.4f} GFLOP: {heads}")
        failed = True
    if any(r["layer"].startswith("#43 head ") for r in rows):
        print("FAIL: gpt-mini: the fused head also timed as itself")
        failed = True
    print(f"gpt-mini batch {batch}: {len(rows)} rows, {total:.4f} GFLOP; head+loss {heads[0]['gflop'] if heads else '-'}")
    return failed


def main():
    tool = sys.argv[1]
    failed = False
    for batch in (8, 64):
        rows = rows_of(tool, "cnn", batch)
        total = sum(float(r["gflop"]) for r in rows)
        want = PER_SAMPLE * batch / 1e9
        moved = [r["layer"] for r in rows if "+#" in r["layer"]]
        if abs(total - want) > 0.000001 * len(rows):  # each row printed to 6 decimals
            print(f"FAIL: batch {batch}: the rows' FLOPs sum to {total:.4f} GFLOP, the step does {want:.4f}")
            failed = True
        if any(float(r["gflop"]) > 0 and float(r["ms"]) <= 0 for r in rows):
            print(f"FAIL: batch {batch}: a row with FLOPs and no time")
            failed = True
        if batch == 64 and not any("+#1" in m for m in moved):
            print(f"FAIL: batch 64: the first convolution's work, run in its pool's chunks, not moved there: {moved}")
            failed = True
        print(f"batch {batch}: {len(rows)} rows, {total:.4f} of {want:.4f} GFLOP; moved: {', '.join(moved) or 'none'}")
    failed |= gpt_fused_head(tool)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
