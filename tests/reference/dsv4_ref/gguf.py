"""A small, independent GGUF reader (model.md §3.1).

Owns: parsing the header, the metadata table (every value type, nested arrays included), the
tensor directory and the aligned data section of a GGUF v2/v3 file, and exposing each tensor's
raw bytes as a read-only numpy view of the memory-mapped file. It does not know what the
tensors mean (see model.py) nor how to decode quantized blocks (see dequant.py).
"""

import mmap
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"

# Metadata value type ids (model.md §3.1).
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)

_SCALAR_FORMATS = {
    T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
    T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d",
}
_SCALAR_NUMPY = {
    T_U8: "<u1", T_I8: "<i1", T_U16: "<u2", T_I16: "<i2", T_U32: "<u4", T_I32: "<i4",
    T_F32: "<f4", T_BOOL: "<u1", T_U64: "<u8", T_I64: "<i8", T_F64: "<f8",
}

# GGML tensor types used by DeepSeek V4 files: id -> (name, block elements, block bytes).
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    8: ("Q8_0", 32, 34),
    10: ("Q2_K", 256, 84),
    12: ("Q4_K", 256, 144),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    26: ("I32", 1, 4),
    30: ("BF16", 1, 2),
}


class GGUFError(Exception):
    pass


class TensorInfo:
    """One entry of the tensor directory. `ne` is in GGUF order (ne[0] contiguous)."""

    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = tuple(ne)
        self.ggml_type = ggml_type
        self.offset = offset  # relative to the data section
        if ggml_type not in GGML_TYPES:
            raise GGUFError(f"tensor {name}: unsupported ggml type {ggml_type}")
        self.type_name, self.block_elems, self.block_bytes = GGML_TYPES[ggml_type]
        n = 1
        for d in self.ne:
            n *= d
        self.n_elements = n
        if self.ne[0] % self.block_elems != 0:
            raise GGUFError(f"tensor {name}: row length {self.ne[0]} is not a multiple of the "
                            f"{self.type_name} block size {self.block_elems}")
        self.n_bytes = (n // self.block_elems) * self.block_bytes

    def __repr__(self):
        return f"TensorInfo({self.name}, {self.type_name}, ne={list(self.ne)})"


class _Cursor:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def scalar(self, fmt):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise GGUFError("unexpected end of file in header")
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def string(self):
        n = self.scalar("<Q")
        if self.pos + n > len(self.buf):
            raise GGUFError("string runs past the end of the file")
        s = self.buf[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[vtype])
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype = self.scalar("<I")
            count = self.scalar("<Q")
            if etype in _SCALAR_NUMPY:
                # Fast path for numeric arrays: one vectorised read.
                dt = np.dtype(_SCALAR_NUMPY[etype])
                end = self.pos + count * dt.itemsize
                if end > len(self.buf):
                    raise GGUFError("array runs past the end of the file")
                arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos)
                self.pos = end
                if etype == T_BOOL:
                    return [bool(x) for x in arr]
                return arr.tolist()
            if etype == T_STRING:
                # Token tables hold ~10^5 strings: a tight loop over the mapped bytes.
                out, buf, pos = [], self.buf, self.pos
                for _ in range(count):
                    n = int.from_bytes(buf[pos:pos + 8], "little")
                    pos += 8
                    out.append(buf[pos:pos + n].decode("utf-8", errors="replace"))
                    pos += n
                if pos > len(buf):
                    raise GGUFError("string array runs past the end of the file")
                self.pos = pos
                return out
            # Nested arrays: element by element.
            return [self.value(etype) for _ in range(count)]
        raise GGUFError(f"unknown metadata value type {vtype}")


class GGUFFile:
    """A memory-mapped GGUF file: `.metadata` (dict), `.tensors` (name -> TensorInfo)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.mm = np.frombuffer(self._map, dtype=np.uint8)   # read-only view of the file
        cur = _Cursor(self._map)
        if self._map[:4] != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        cur.pos = 4
        self.version = cur.scalar("<I")
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors = cur.scalar("<Q")
        n_kv = cur.scalar("<Q")

        self.metadata = {}
        self.metadata_types = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.scalar("<I")
            self.metadata[key] = cur.value(vtype)
            self.metadata_types[key] = vtype

        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.scalar("<I")
            ne = [cur.scalar("<Q") for _ in range(n_dims)]
            ggml_type = cur.scalar("<I")
            offset = cur.scalar("<Q")
            if name in self.tensors:
                raise GGUFError(f"duplicate tensor name {name}")
            self.tensors[name] = TensorInfo(name, ne, ggml_type, offset)

        alignment = self.metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0:
            raise GGUFError(f"bad general.alignment {alignment!r}")
        self.alignment = alignment
        self.data_start = (cur.pos + alignment - 1) // alignment * alignment
        for t in self.tensors.values():
            if t.offset % alignment != 0:
                raise GGUFError(f"tensor {t.name}: offset {t.offset} not aligned to {alignment}")
            end = self.data_start + t.offset + t.n_bytes
            if end > len(self.mm):
                raise GGUFError(f"tensor {t.name}: data runs past the end of the file")

    def raw(self, name):
        """The tensor's bytes as a read-only uint8 array view of the mapped file."""
        t = self.tensors[name]
        start = self.data_start + t.offset
        return self.mm[start:start + t.n_bytes]

    def raw_rows(self, name, row_begin, row_end):
        """Bytes of rows [row_begin, row_end) of a tensor viewed as (n_elements/ne0) rows of ne0."""
        t = self.tensors[name]
        row_bytes = t.ne[0] // t.block_elems * t.block_bytes
        start = self.data_start + t.offset + row_begin * row_bytes
        return self.mm[start:start + (row_end - row_begin) * row_bytes]

    def has(self, name):
        return name in self.tensors
