"""GGUF in and out for the trainer.

Owns: loading a DeepSeek V4 GGUF into a dict of torch tensors keyed by tensor name (PyTorch
orientation, via the reference's reader and dequantizers), and writing a new file that keeps a
template's metadata and tensor directory (names, shapes, types, order) with new tensor data and
a few metadata keys replaced or added. The writer supports the types the trainer produces:
F32 (floats) and I32 (tables) - a trained file is quantized afterwards by `magnetar quantize`.

Does not own: the model (v4_model.py) or training (train.py).
"""

import os
import struct

import numpy as np
import torch

from dsv4_ref import gguf as rgguf
from dsv4_ref.model import HParams, Weights

T_F32, T_I32 = 0, 26
V_STRING, V_U32, V_F32 = 8, 4, 6


def load(path, dtype=torch.float32):
    """(GGUFFile, HParams, {name: tensor}) with every tensor dequantized to `dtype` (I32 kept)."""
    f = rgguf.GGUFFile(path)
    hp = HParams(f.metadata, f.tensors)
    w = Weights(f, dtype)
    return f, hp, {name: w(name) for name in f.tensors}


def _kv_spans(path):
    """The raw bytes of every metadata entry of a GGUF file, in order: [(key, bytes)], plus the
    tensor directory [(name, ne, ggml_type)]."""
    with open(path, "rb") as fh:
        buf = fh.read()
    cur = rgguf._Cursor(buf)
    cur.pos = 4
    version = cur.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"{path}: unsupported GGUF version {version}")
    n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
    kvs = []
    for _ in range(n_kv):
        start = cur.pos
        key = cur.string()
        vtype = cur.scalar("<I")
        cur.value(vtype)
        kvs.append((key, buf[start:cur.pos]))
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        nd = cur.scalar("<I")
        ne = [cur.scalar("<Q") for _ in range(nd)]
        gtype = cur.scalar("<I")
        cur.scalar("<Q")
        infos.append((name, ne, gtype))
    return kvs, infos


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv_string(key, value):
    return key, _string(key) + struct.pack("<I", V_STRING) + _string(value)


def kv_u32(key, value):
    return key, _string(key) + struct.pack("<I", V_U32) + struct.pack("<I", value)


def kv_f32(key, value):
    return key, _string(key) + struct.pack("<I", V_F32) + struct.pack("<f", value)


def write_like(template, out_path, tensors, meta=(), alignment=32):
    """Writes `out_path` with the metadata and tensor directory of `template`.

    tensors: {name: tensor or array} in PyTorch orientation (reversed ne), one per template
    tensor; F32 tensors are written as float32, I32 tensors as int32. meta: [(key, raw bytes)]
    from kv_string / kv_u32 / kv_f32, replacing the template's entry of that key or appended.
    """
    kvs, infos = _kv_spans(template)
    replace = dict(meta)
    out_kvs = [(k, replace.pop(k, raw)) for k, raw in kvs] + list(replace.items())
    if any(k == "general.alignment" for k, _ in out_kvs):
        raise ValueError("write_like: templates with general.alignment are not supported")
    blobs, dir_bytes, offset = [], b"", 0
    for name, ne, gtype in infos:
        if name not in tensors:
            raise KeyError(f"write_like: no data for tensor {name}")
        t = tensors[name]
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        if tuple(a.shape) != tuple(reversed(ne)):
            raise ValueError(f"{name}: shape {a.shape}, template has {tuple(reversed(ne))}")
        if gtype == T_F32:
            data = np.ascontiguousarray(a, dtype="<f4").tobytes()
        elif gtype == T_I32:
            data = np.ascontiguousarray(a, dtype="<i4").tobytes()
        else:
            raise ValueError(f"{name}: template type {gtype} (the trainer writes F32 and I32)")
        dir_bytes += _string(name) + struct.pack("<I", len(ne))
        dir_bytes += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", gtype, offset)
        pad = (-len(data)) % alignment
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(out_kvs))
    head += b"".join(raw for _, raw in out_kvs) + dir_bytes
    head += b"\0" * ((-len(head)) % alignment)
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(head)
        for b in blobs:
            fh.write(b)

    os.replace(tmp, out_path)
