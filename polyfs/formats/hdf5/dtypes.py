"""The model's datatypes as HDF5 datatype messages, and values as HDF5 disk bytes.

Message versions are the oldest that express each class (what HDF5 writes for
``libver="earliest"``; the unit tests compare the bytes with libhdf5's):
version 1 for atomic, string and reference types; composite types (compound,
enum, variable-length) share one version per type tree, 2 when an array type
is anywhere in it, else 1; array types are version 2. A variable-length
string's base type is an unsigned byte, as libhdf5 writes it.

Disk bytes equal the model's chunk bytes for every fixed-size type without
references (integers, floats, bool/enums, fixed strings, opaque, packed
compounds and arrays of those): such chunks are served as stored. Object
references (``"groups/<id>"`` text in the model, an 8-byte object header
address in HDF5) and variable-length data (length-prefixed in the model,
``(length, global heap collection, index)`` in HDF5) are converted by
:class:`DiskEncoder`, which writes address slots resolved once the layout is
known (see layout.py).
"""
from __future__ import annotations

import struct
from typing import Any, Callable

import numpy as np

from ...errors import UnsupportedType
from ...model import types as T
from ...model.values import ref_from_json
from .layout import AddrKey, Blob
from .structs import (ARRAY_V2, CLASS_ARRAY, CLASS_COMPOUND, CLASS_ENUM, CLASS_FIXED, CLASS_FLOAT, CLASS_OPAQUE, CLASS_REFERENCE, CLASS_STRING, CLASS_VLEN, COMPOUND_MEMBER_V1, COMPOUND_MEMBER_V2, DATATYPE, FIXED_POINT, FLOATING_POINT, SHARED_V2, VL_HEAP_ID, padded)

# (sign bit, exponent location, exponent size, mantissa location, mantissa size, bias) per IEEE size
_IEEE = {2: (15, 10, 5, 0, 10, 15), 4: (31, 23, 8, 0, 23, 127), 8: (63, 52, 11, 0, 52, 1023)}
_PADS = {"nullterm": 0, "nullpad": 1, "spacepad": 2}
_CSETS = {"ascii": 0, "utf8": 1}
VL_SIZE = VL_HEAP_ID.size  # 16: length, collection address, index
REF_SIZE = 8


def _header(cls: int, version: int, size: int, bits: int = 0) -> bytes:
    return DATATYPE.pack(class_version=(version << 4) | cls, bits0=bits & 0xFF, bits1=(bits >> 8) & 0xFF,
                         bits2=(bits >> 16) & 0xFF, size=size)


def encode_type(t: T.DType) -> bytes:
    """The datatype message body of ``t`` (committed types inlined; unpadded).

    Like libhdf5, every composite type of one type tree gets the same
    version: 2 when an array type is anywhere in it, else 1.
    """
    return _encode(t, 2 if _has_array(t) else 1)


def _has_array(t: T.DType) -> bool:
    t = T.resolved(t)
    if isinstance(t, T.ArrayType):
        return True
    if isinstance(t, T.CompoundType):
        return any(_has_array(ft) for _, ft in t.fields)
    if isinstance(t, T.VlenType):
        return _has_array(t.base)
    return False


def _encode(t: T.DType, v: int) -> bytes:
    t = T.resolved(t)
    if isinstance(t, T.IntType):
        bits = (1 if t.byteorder == ">" else 0) | (0x08 if t.signed else 0)
        return _header(CLASS_FIXED, 1, t.size, bits) + FIXED_POINT.pack(precision=8 * t.size)
    if isinstance(t, T.FloatType):
        sign, eloc, esize, mloc, msize, bias = _IEEE[t.size]
        bits = (1 if t.byteorder == ">" else 0) | 0x20 | (sign << 8)  # mantissa normalization: implied msb
        return _header(CLASS_FLOAT, 1, t.size, bits) + FLOATING_POINT.pack(
            precision=8 * t.size, exponent_location=eloc, exponent_size=esize, mantissa_location=mloc,
            mantissa_size=msize, exponent_bias=bias)
    if isinstance(t, T.StringType):
        if t.length is None:
            bits = 1 | (_PADS[t.pad] << 4) | (_CSETS[t.charset] << 8)
            base = _header(CLASS_FIXED, 1, 1, 0) + FIXED_POINT.pack(precision=8)
            return _header(CLASS_VLEN, v, VL_SIZE, bits) + base
        if t.length < 1:
            raise UnsupportedType("a fixed-length string of length 0 has no HDF5 equivalent")
        return _header(CLASS_STRING, 1, t.length, _PADS[t.pad] | (_CSETS[t.charset] << 4))
    if isinstance(t, T.EnumType):
        names = b"".join(padded(n.encode("utf-8") + b"\0") for n, _ in t.members)
        vals = np.asarray([v for _, v in t.members], dtype=t.base.numpy()).tobytes()
        return _header(CLASS_ENUM, v, t.base.size, len(t.members)) + _encode(t.base, v) + names + vals
    if isinstance(t, T.CompoundType):
        out = [b""]
        offset = 0
        for name, ft in t.fields:
            out.append(padded(name.encode("utf-8") + b"\0"))
            out.append((COMPOUND_MEMBER_V1 if v == 1 else COMPOUND_MEMBER_V2).pack(offset=offset))
            out.append(_encode(ft, v))
            offset += disk_itemsize(ft)
        out[0] = _header(CLASS_COMPOUND, v, offset, len(t.fields))
        return b"".join(out)
    if isinstance(t, T.ArrayType):
        rank = len(t.dims)
        dims = struct.pack(f"<{rank}I", *t.dims)
        perm = struct.pack(f"<{rank}I", *range(rank))
        return (_header(CLASS_ARRAY, 2, disk_itemsize(t)) + ARRAY_V2.pack(rank=rank) + dims + perm
                + _encode(t.base, v))
    if isinstance(t, T.ReferenceType):
        if t.kind != "object":
            raise UnsupportedType("region references are not supported by the HDF5 view")
        return _header(CLASS_REFERENCE, 1, REF_SIZE, 0)
    if isinstance(t, T.OpaqueType):
        tag = padded(t.tag.encode("ascii", "replace") + b"\0") if t.tag else b""
        return _header(CLASS_OPAQUE, 1, t.size, len(tag)) + tag
    if isinstance(t, T.VlenType):
        return _header(CLASS_VLEN, v, VL_SIZE, 0) + _encode(t.base, v)
    raise UnsupportedType(f"type {t!r} has no HDF5 encoding here")


def shared_type(committed_id: str, blob: Blob) -> None:
    """A shared (committed) datatype message body: the type object's header address."""
    pos = blob.write(SHARED_V2.pack(address=0))
    blob.slot_at(pos + SHARED_V2.offset_of("address"), ("oh", committed_id))


# -- disk representation ------------------------------------------------------------
def disk_itemsize(t: T.DType) -> int:
    t = T.resolved(t)
    if isinstance(t, T.StringType) and t.length is None or isinstance(t, T.VlenType):
        return VL_SIZE
    if isinstance(t, T.ReferenceType):
        if t.kind != "object":
            raise UnsupportedType("region references are not supported by the HDF5 view")
        return REF_SIZE
    if isinstance(t, T.CompoundType):
        return sum(disk_itemsize(ft) for _, ft in t.fields)
    if isinstance(t, T.ArrayType):
        return int(np.prod(t.dims)) * disk_itemsize(t.base)
    if isinstance(t, T.EnumType):
        return t.base.size
    return t.numpy().itemsize


def same_bytes(t: T.DType) -> bool:
    """True when HDF5's disk bytes are the model's chunk bytes (zero-copy possible)."""
    return not t.is_vlen and not T.has_reference(t)


def _base_dtype(t: T.DType) -> np.dtype:
    dt = t.numpy()
    return dt.subdtype[0] if dt.subdtype is not None else dt


class DiskEncoder:
    """Values of the model (numpy, as ``values.to_numpy``/``vlen.decode`` give them)
    into HDF5 disk bytes, allocating variable-length data in a global heap."""

    def __init__(self, heap: Any, ref_key: Callable[[str], AddrKey | None]) -> None:
        self.heap = heap  # vlheap.GlobalHeap (or None when no vlen data is expected)
        self.ref_key = ref_key  # object id -> address key (None: not in this file)

    def encode(self, t: T.DType, arr: Any) -> Blob:
        """All elements of ``arr`` (any shape, C order) as one blob."""
        if same_bytes(t):
            a = np.asarray(arr)
            return Blob(np.ascontiguousarray(a, dtype=_base_dtype(t)).tobytes())
        blob = Blob()
        base = T.resolved(t)
        a = np.asarray(arr, dtype=object) if not isinstance(arr, np.ndarray) else arr
        if isinstance(base, T.ArrayType) and a.dtype.kind != "O" and a.dtype.names is None:
            # numpy folded the array type's dims into the shape: one element per base value
            for x in a.reshape(-1):
                self.element(base.base, x, blob)
            return blob
        for x in a.reshape(-1) if a.ndim else [a[()]]:
            self.element(t, x, blob)
        return blob

    def element(self, t: T.DType, x: Any, out: Blob) -> None:
        t = T.resolved(t)
        if isinstance(t, T.ReferenceType):
            oid = ref_from_json(x) if x is not None else None
            key = self.ref_key(oid) if oid else None
            if key is None:
                out.write(bytes(REF_SIZE))  # a null reference
            else:
                out.addr(key)
        elif isinstance(t, T.StringType) and t.length is None:
            data = x.encode("utf-8", "surrogateescape") if isinstance(x, str) else (bytes(x) if x is not None else b"")
            self._vl(len(data), Blob(data), out)
        elif isinstance(t, T.VlenType):
            items = np.asarray(x if x is not None else [], dtype=_base_dtype(t.base) if same_bytes(t.base) else object)
            inner = self.encode(t.base, items)
            count = len(items) if items.ndim else 1
            self._vl(count, inner, out)
        elif isinstance(t, T.CompoundType):
            for i, (_, ft) in enumerate(t.fields):
                self.element(ft, x[i], out)
        elif isinstance(t, T.ArrayType):
            flat = np.asarray(x, dtype=object).reshape(-1)
            for e in flat:
                self.element(t.base, e, out)
        else:
            out.write(np.asarray(x, dtype=_base_dtype(t)).tobytes())

    def _vl(self, count: int, data: Blob, out: Blob) -> None:
        if self.heap is None:
            raise UnsupportedType("variable-length data needs a global heap here")
        key, index = self.heap.add(data)
        out.write(struct.pack("<I", count))
        out.addr(key)
        out.write(struct.pack("<I", index))
