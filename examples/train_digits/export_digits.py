#!/usr/bin/env python3
"""Writes scikit-learn's bundled 8x8 handwritten digits (1797 images, UCI) to a
safetensors file for examples/train_digits: "images" u8 [1797, 64] (pixel values 0-16)
and "labels" i64 [1797].

    python3 -m pip install scikit-learn==1.7.2
    python3 examples/train_digits/export_digits.py digits.safetensors
"""
import json
import os
import struct
import sys

import numpy as np
from sklearn.datasets import load_digits


def save(path, tensors):
    """A safetensors file from {name: numpy array} (written whole, then renamed)."""
    header, blobs, offset = {}, [], 0
    codes = {np.dtype(np.uint8): "U8", np.dtype(np.int64): "I64"}
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": codes[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(tmp, path)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: export_digits.py OUT.safetensors")
    digits = load_digits()
    save(sys.argv[1], {"images": digits.data.astype(np.uint8),
                       "labels": digits.target.astype(np.int64)})


if __name__ == "__main__":
    main()
