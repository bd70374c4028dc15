#!/usr/bin/env python3
"""A run folder's TensorBoard events hold the metrics file's scalars.

    tensorboard_check.py SHMTRAIN (own | reader)

Trains mlp briefly into a fresh run folder, then reads its event file:
`own` with a reader written here from the formats' definitions (TFRecord
framing, CRC-32C masked, the Event/Summary/Value protocol buffers), every
CRC checked; `reader` with TensorBoard's own EventAccumulator (exit 77 where
the tensorboard package is absent).  Both must give, step for step, the loss,
accuracy and learning rate of metrics.jsonl's train records and the eval
records' loss and accuracy, and scalars.csv the same rows.
"""
import csv
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, i):
    shift = value = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(b, i)
        elif wire == 1:
            value, i = b[i:i + 8], i + 8
        elif wire == 5:
            value, i = b[i:i + 4], i + 4
        elif wire == 2:
            n, i = varint(b, i)
            value, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        yield number, value


def own_reader(path):
    data, i, scalars, version = open(path, "rb").read(), 0, {}, None
    while i < len(data):
        (n,) = struct.unpack_from("<Q", data, i)
        (len_crc,) = struct.unpack_from("<I", data, i + 8)
        assert len_crc == masked(data[i:i + 8]), f"record at {i}: length CRC"
        event = data[i + 12:i + 12 + n]
        (data_crc,) = struct.unpack_from("<I", data, i + 12 + n)
        assert data_crc == masked(event), f"record at {i}: data CRC"
        i += 12 + n + 4
        step = 0
        for number, value in fields(event):
            if number == 2:
                step = value
            elif number == 3:
                version = value.decode()
            elif number == 5:
                for vn, v in fields(value):
                    assert vn == 1
                    parts = dict(fields(v))
                    scalars.setdefault(parts[1].decode(), {})[step] = struct.unpack("<f", parts[2])[0]
    assert version == "brain.Event:2", version
    return scalars


def tensorboard_reader(path):
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        print("no tensorboard package (scripts/install-deps.sh --bench installs it): its reader not tried")
        sys.exit(77)
    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def main():
    shmtrain, how = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.chdir(tempfile.mkdtemp())
    subprocess.run([shmtrain, "--model", "mlp", "--max-steps", "20", "--log-every", "5", "--eval-every", "10",
                    "--train-subset", "2048", "--test-subset", "128", "--quiet", "--out", "run"], check=True)
    (events,) = glob.glob("run/events.out.tfevents.*")
    scalars = own_reader(events) if how == "own" else tensorboard_reader(events)
    want = {}
    for line in open("run/metrics.jsonl"):
        r = json.loads(line)
        if r["type"] == "train":
            for k in ("loss", "accuracy", "lr"):
                want.setdefault(f"train/{k}", {})[r["step"]] = r[k]
        elif r["type"] == "eval":
            want.setdefault("eval/loss", {})[r["step"]] = r["test_loss"]
            want.setdefault("eval/accuracy", {})[r["step"]] = r["test_accuracy"]
    rows = {}
    for row in csv.DictReader(open("run/scalars.csv")):
        rows.setdefault(row["tag"], {})[int(row["step"])] = float(row["value"])
    for tag, by_step in want.items():
        for name, got in ((how, scalars), ("scalars.csv", rows)):
            assert set(got.get(tag, {})) == set(by_step), f"{name}: {tag} at steps {sorted(got.get(tag, {}))}, " \
                                                          f"metrics.jsonl {sorted(by_step)}"
            for step, value in by_step.items():
                # the metrics file prints 5-6 significant digits; the events hold a float32
                assert abs(got[tag][step] - value) <= 1e-4 * max(1.0, abs(value)), (name, tag, step, got[tag][step], value)
    steps = sum(len(v) for v in want.values())
    print(f"ok   {how}: {len(want)} tags, {steps} scalars as metrics.jsonl has them; scalars.csv too "
          f"({len(scalars)} tags in the events)")


if __name__ == "__main__":
    main()
