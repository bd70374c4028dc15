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

# safetensors: files by the format's definition (shmtrain export writes the same shape)
import json
def safetensors(tensors, metadata=None, pad=True):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data
put("safetensors", "two.safetensors", safetensors([("w", "F32", [2, 2], floats(4)), ("b", "F32", [2], floats(2))],
                                                 {"format": "pt", "producer": "shmtrain"}))
put("safetensors", "dtypes.safetensors", safetensors([("h", "F16", [3], b"\x00\x3c" * 3), ("z", "BF16", [0], b""),
                                                      ("i", "I64", [1], struct.pack("<q", -1)),
                                                      ("u", "U8", [2, 1], b"\x01\x02")], None, pad=False))
put("safetensors", "escapes.safetensors", safetensors([("blk.0/na\u00efve \"q\"", "F32", [1], floats(1))], {}))
put("safetensors", "empty.safetensors", safetensors([]))

# images: two target bytes (fuzz_image.c), then a PNG or a JPEG
def png(w, h, grey=False, depth=8):
    kind = 0 if grey else 2
    chan = 1 if grey else 3
    bpp = chan * depth // 8
    raw = b"".join(b"\x00" + bytes((x * 13 + y * 7) % 256 for x in range(w * bpp)) for y in range(h))
    chunk = lambda tag, body: struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, kind, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
JPEG_RGB = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d"
    "283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffdb004301111212181518"
    "2f1a1a2f63423842636363636363636363636363636363636363636363636363636363636363636363636363636363636363"
    "6363636363636363ffc00011080007000a03012200021101031101ffc4001f00000105010101010101000000000000000001"
    "02030405060708090a0bffc400b5100002010303020403050504040000017d01020300041105122131410613516107227114"
    "328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a53545556"
    "5758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5"
    "b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffc4001f010003"
    "0101010101010101010000000000000102030405060708090a0bffc400b51100020102040403040705040400010277000102"
    "031104052131061241510761711322328108144291a1b1c109233352f0156272d10a162434e125f11718191a262728292a35"
    "363738393a434445464748494a535455565758595a636465666768696a737475767778797a82838485868788898a92939495"
    "969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9ea"
    "f2f3f4f5f6f7f8f9faffda000c03010002110311003f0076990c5a46932dfc91ef10a82141fbc49000fcc8ac669f55998cad"
    "a8dd02e7710b332819f400f028a29b8465bab9373fffd9")  # 10x7 RGB, quality 50, written by libjpeg-turbo (jpeg_set_quality)
JPEG_GREY = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300140e0f120f0d14121012171514181e32211e1c1c1e3d2c2e24"
    "3249404c4b47404645505a736250556d5645466488656d777b8182814e608d978c7d96737e817cffc0000b08000c00090101"
    "1100ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b51000020103030204030505"
    "04040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a"
    "25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475767778797a8384858687"
    "88898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2"
    "e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100003f00a167a574f96b43fb2bfd9adeb3b78f8f96b8ff00f84c"
    "6fbfe7ded3fef86ffe2abfffd9")  # 9x12 grey, quality 40
put("image", "png-rgb", bytes([0x07, 0x23]) + png(9, 6))
put("image", "png-grey16", bytes([0x04, 0x42]) + png(5, 5, grey=True, depth=16))
put("image", "jpeg-rgb", bytes([0x05, 0x03]) + JPEG_RGB)
put("image", "jpeg-grey", bytes([0x02, 0x65]) + JPEG_GREY)

# folders: one entry a line (fuzz_folder.c)
put("folder", "flat", "d cat\nd dog\nf cat/1.png x\nf dog/1.png y\nf dog/readme.txt z\n")
put("folder", "splits", "d train\nd val\nd train/a\nd val/a\nf train/a/1.jpg q\nf val/a/2.jpeg r\n")
put("folder", "fifo", "d a\nf a/1.png x\np a/2.png\n")
put("folder", "loop", "d a\nf a/1.png x\nl b b\nl a/c.png a/c.png\n")

# what a sweep reads back (fuzz_metrics.c): the first byte picks the system (bits 2-3) and
# the target (bit 0: loss, bit 1: set); then a metrics file, or a launcher's report
SHM_METRICS = (
    '{"type":"run","system":"shmtrain","instances":2,"threads":1,"model":"mlp","params":100,'
    '"batch_per_instance":64,"onednn":"3.2.0","isa":"avx512_core_bf16","precision":"fp32","first_step":0}\n'
    '{"type":"train","step":100,"epoch":0.2,"loss":1.0,"accuracy":0.5,"lr":0.05,"samples_per_s":6400.0,'
    '"time_s":2.0,"compute_s":1.5,"allreduce_s":0.3,"wait_s":0.2}\n'
    '{"type":"eval","step":100,"epoch":0,"test_loss":0.6,"test_accuracy":0.8,"time_s":2.2,"eval_s":0.1}\n'
    '{"type":"train","step":200,"epoch":0.4,"loss":0.8,"accuracy":0.6,"lr":0.05,"samples_per_s":25600.0,'
    '"time_s":2.7,"compute_s":0.3,"allreduce_s":0.1,"wait_s":0.04}\n'
    '{"type":"summary","steps":200,"instances":2,"batch_per_instance":64,"total_s":4.0,"train_s":3.6,'
    '"samples_per_s":10666.0,"final_test_accuracy":0.86,"best_test_accuracy":0.86,"time_to_accuracy_s":{"0.80":2.2}}\n')
put("metrics", "shmtrain", bytes([0x02]) + SHM_METRICS.encode())
PEER_METRICS = (
    '{"type":"run","system":"pytorch-ddp","instances":2,"threads":1,"model":"gpt-mini","params":800,'
    '"batch_per_instance":4,"torch":"2.13.0+cpu","backend":"shm","first_step":0,"context":64,'
    '"precision":"bf16","mode":"compile","grad_accum":2}\n'
    '{"type":"train","step":5,"epoch":0.1,"loss":3.0,"accuracy":0,"lr":0.001,"samples_per_s":40.0,'
    '"tokens_per_s":2560.0,"time_s":1.0,"compute_s":0.9,"allreduce_s":0.1}\n'
    '{"type":"train","step":10,"epoch":0.2,"loss":2.5,"accuracy":0,"lr":0.001,"samples_per_s":45.0,'
    '"tokens_per_s":2880.0,"time_s":1.9,"compute_s":0.8,"allreduce_s":0.1}\n'
    '{"type":"eval","step":10,"epoch":0,"test_loss":2.4,"test_accuracy":0,"time_s":2.0,"eval_s":0.1}\n'
    '{"type":"summary","steps":10,"instances":2,"batch_per_instance":4,"total_s":2.1,"train_s":1.9,"samples_per_s":42.0}\n')
put("metrics", "peer-shm-loss", bytes([0x0b]) + PEER_METRICS.encode())
put("metrics", "report", bytes([0x00]) + b'{"job":"j","instances":2,"seconds":4.500,"ok":true,"ranks":['
    b'{"rank":0,"pus":"0","exit":0,"max_rss_kb":91000,"cpu_s":3.9},'
    b'{"rank":1,"pus":"1","exit":0,"max_rss_kb":90000,"cpu_s":3.8}]}\n')

# config files (fuzz_config.c): a run's config.txt, a user's with comments,
# '=' and quotes, one with a byte-order mark and CRLF line ends
put("config", "config.txt", "# the settings in effect\nmodel gpt-mini\ntext \"a #1.txt\"\nlr 0.001\n"
    "batch-size 12\naugment\ninstances 2\n")
put("config", "user.cfg", "model=lenet   # a comment\n--lr = 0.05\n\n  epochs 3\nname \"quo\\\"te\\x41\\n\"\n")
put("config", "windows.cfg", b"\xef\xbb\xbfmodel mlp\r\nmax-steps 1\r\n")

# the kernel tuner's kept answers (fuzz_tunekept.c): under the harness's key,
# one choosing switches (a kernel one, one that is none, an unknown word), the
# defaults, and another key's
TUNE_KEY = ("# shmtrain's kernels\nmachine a CPU\nonednn 3.2.0 avx512_core\nmodel 0123456789abcdef\n"
            "batch 64\nthreads 2\nprecision fp32\nswitches\n")
put("tunekept", "chose.txt", TUNE_KEY + "chose SHMTRAIN_ONEDNN_POOL (0.93 of the step) SHMTRAIN_NN_VERBOSE "
    "SHMTRAIN_NOT_A_SWITCH\nmeasured in 1.2 s: 14 kernel switches tried, 3 timed\n")
put("tunekept", "defaults.txt", TUNE_KEY + "chose the defaults\nmeasured in 0.3 s: 14 kernel switches tried, 1 timed\n")
put("tunekept", "other-key.txt", TUNE_KEY.replace("batch 64", "batch 32") + "chose SHMTRAIN_ONEDNN_POOL\n")
