"""The peer of st-decode-bench: an ImageFolder pipeline as a PyTorch
DataLoader worker runs it (PIL: open, convert, Resize(S) with antialiased
bilinear, CenterCrop), one process, one core; images per second.

    python pil_decode.py DIR CHANNELS SIZE [RESIZE] [--compare DUMP]

--compare DUMP: the largest byte difference against st-decode-bench's
--dump of the same folder (the same order: classes, then files, by name).
"""
import os
import sys
import time

import numpy as np
from PIL import Image


def files(root):
    for cls in sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            if name.lower().endswith((".png", ".jpg", ".jpeg")):
                yield os.path.join(root, cls, name)


def load(path, mode, size, resize):
    img = Image.open(path).convert(mode)
    w, h = img.size
    short, long_ = (w, h) if w <= h else (h, w)
    if short != resize:  # torchvision.transforms.functional.resize on a PIL image
        nlong = int(resize * long_ / short)
        img = img.resize((resize, nlong) if w <= h else (nlong, resize), Image.BILINEAR)
    w, h = img.size
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return np.asarray(img.crop((left, top, left + size, top + size)))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--compare")]
    dump = sys.argv[sys.argv.index("--compare") + 1] if "--compare" in sys.argv else None
    if dump:
        args.remove(dump)
    root, channels, size = args[0], int(args[1]), int(args[2])
    resize = int(args[3]) if len(args) > 3 else size
    mode = "RGB" if channels == 3 else "L"
    paths = list(files(root))
    t0 = time.perf_counter()
    out = [load(p, mode, size, resize) for p in paths]
    s = time.perf_counter() - t0
    print(f"PIL {Image.__version__}: decoded {len(paths)} images in {s:.3f} s: {len(paths) / s:.0f} images/s")
    if dump:
        ours = np.fromfile(dump, dtype=np.uint8).reshape(len(paths), channels, size, size)
        theirs = np.stack([o.reshape(size, size, channels).transpose(2, 0, 1) for o in out])
        diff = np.abs(ours.astype(int) - theirs.astype(int))
        print(f"largest difference from shmtrain's bytes: {diff.max()} (mean {diff.mean():.4f}, "
              f"{(diff > 0).mean() * 100:.2f}% of bytes differ)")


if __name__ == "__main__":
    main()
