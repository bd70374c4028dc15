#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (tests/fuzz/corpus/<harness>/):
small valid inputs of every kind each harness reads, so that a search starts
from files that parse.  Run from anywhere; the files are checked in, this
script says how they were made.  Regression inputs (regressions/) are not
made here: they are the inputs that once crashed a harness, kept as found."""
import gzip, os, struct, zlib

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")

def put(harness, name, data):
    d = os.path.join(here, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

# model text: the shipped models and a few small ones touching every keyword
for m in sorted(os.listdir(os.path.join(root, "models"))):
    with open(os.path.join(root, "models", m), "rb") as f:
        put("model", m, f.read())
put("model", "small-image.model", "input 2 6 6\nconv 3 k3 p1 s1 nobias\nbatchnorm\nrelu\nsave a\n"
    "conv 3 k3 p1\nadd a\nmaxpool k2\nconv 4 k1 s2\navgpool k1\nsave b\nconv 4 k1\nadd b\n"
    "dropout 0.25\nflatten\nlinear 5 nobias\nrelu\nlinear 3\n")
put("model", "small-proj.model", "input 1 8 8\nsave s\nconv 4 k3 s2 p1\nadd s proj\navgpool global\nlinear 2\n")
put("model", "small-gpt.model", "input tokens 8\nembed 16 8\nblock heads 2\nsave r\nlayernorm\nlinear 24\n"
    "attention heads 2\nlinear 8\nadd r\nlinear 32\ngelu\nlinear 8\nlayernorm\nhead tied\n")

# checkpoint payloads (the harness adds the header and CRC)
def section(tag, data):
    return tag + struct.pack("<Q", len(data)) + data

def state():
    return struct.pack("<5Q2I2d", 1, 64, 10, 1, 10, 2, 1, 0.5, 3.0)

def floats(n):
    return struct.pack("<%df" % n, *[0.01 * (i % 7) for i in range(n)])

put("ckpt", "image.payload", section(b"MODL", b"input 1 2 2\nflatten\nlinear 2\n") +
    section(b"PARM", floats(10)) + section(b"BUFS", b"") + section(b"OPTS", floats(20)) + section(b"STAT", state()))
put("ckpt", "batchnorm.payload", section(b"MODL", b"input 1 2 2\nconv 2 k1 p0 s1\nbatchnorm\nflatten\nlinear 2\n") +
    section(b"PARM", floats(4 + 4 + 8 + 2)) + section(b"BUFS", floats(4)) + section(b"OPTS", b"") +
    section(b"STAT", state()))
gpt = b"input tokens 4\nembed 8 4\nlayernorm\nhead tied\n"
put("ckpt", "gpt.payload", section(b"MODL", gpt) + section(b"PARM", floats(8 * 4 + 4 * 4 + 8)) +
    section(b"BUFS", b"") + section(b"OPTS", b"") + section(b"STAT", state()) + section(b"VOCB", b"abcde \n"))

# IDX: two little-endian bytes of the images file's length, images, labels
def idx(magic_type, dims, data):
    return struct.pack(">BBBB", 0, 0, magic_type, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + data

def idx_pair(images, labels):
    return struct.pack("<H", len(images)) + images + labels

imgs = idx(8, [3, 2, 2], bytes(range(12)))
labs = idx(8, [3], bytes([0, 2, 1]))
put("idx", "plain.idx", idx_pair(imgs, labs))
put("idx", "gzip.idx", idx_pair(gzip.compress(imgs, mtime=0), gzip.compress(labs, mtime=0)))
put("idx", "channels.idx", idx_pair(idx(8, [2, 3, 2, 2], bytes(range(24))), idx(8, [2], bytes([4, 9]))))

# CIFAR: a flag byte (bit 0: CIFAR-100, bit 1: two files), then records
rec10 = lambda label: bytes([label]) + bytes((label * 7 + i) % 256 for i in range(3072))
rec100 = lambda coarse, fine: bytes([coarse, fine]) + bytes((fine + i) % 256 for i in range(3072))
put("cifar", "cifar10.bin", b"\x00" + rec10(3) + rec10(9))
put("cifar", "cifar10-two.bin", b"\x02" + rec10(1) + rec10(2))
put("cifar", "cifar100.bin", b"\x01" + rec100(4, 77) + rec100(0, 99))

# text: a flag byte (bit 0: bytes, bit 1: two files, high nibble: context - 1), then text
prose = ("It is a truth universally acknowledged, that a single man in possession\n"
         "of a good fortune, must be in want of a wife.\n") * 3
put("text", "chars.txt", b"\x30" + prose.encode())
put("text", "bytes-two.txt", b"\x73" + prose.encode())
put("text", "utf8.txt", b"\x10" + "na\u00efve caf\u00e9 \u2014 \u00fcber\n".encode() * 6)

# placement: one line per variable, in fuzz_placement.c's order
names = ["SHMTRAIN_RANK", "SHMTRAIN_WORLD_SIZE", "SHMTRAIN_LOCAL_RANK", "SHMTRAIN_LOCAL_WORLD_SIZE",
         "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
         "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES", "SLURM_TASKS_PER_NODE",
         "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "SHMTRAIN_NODE_SIZE"]
def placement(**values):
    return "\n".join(values.get(n, "") for n in names) + "\n"
put("placement", "shmrun", placement(SHMTRAIN_RANK="1", SHMTRAIN_WORLD_SIZE="4", SHMTRAIN_LOCAL_RANK="1",
                                     SHMTRAIN_LOCAL_WORLD_SIZE="4"))
put("placement", "mpirun", placement(OMPI_COMM_WORLD_RANK="5", OMPI_COMM_WORLD_SIZE="8",
                                     OMPI_COMM_WORLD_LOCAL_RANK="1", OMPI_COMM_WORLD_LOCAL_SIZE="4"))
put("placement", "srun", placement(SLURM_PROCID="7", SLURM_NTASKS="8", SLURM_LOCALID="4", SLURM_NODEID="1",
                                   SLURM_NNODES="2", SLURM_TASKS_PER_NODE="3,5"))
put("placement", "srun-runlength", placement(SLURM_PROCID="5", SLURM_NTASKS="8", SLURM_LOCALID="1",
                                             SLURM_NODEID="1", SLURM_NNODES="2", SLURM_TASKS_PER_NODE="4(x2)"))
put("placement", "torchrun", placement(RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
                                       GROUP_RANK="1"))
put("placement", "node-size", placement(SHMTRAIN_RANK="3", SHMTRAIN_WORLD_SIZE="8", SHMTRAIN_NODE_SIZE="4"))
