"""The model's datatypes as HDF5 datatype messages, and values as HDF5 disk bytes.

Message versions are the oldest that express each class (what HDF5 writes for
``libver="earliest"``; the unit tests compare the bytes with libhdf5's):
version 1 for atomic, string and reference types; composite types (compound,
enum, variable-length) share one version per type tree, 2 when an array type
is anywhere in it, else 1; array types are version 2. A variable-length
string's base type is an unsigned byte, as libhdf5 writes it.

Disk bytes equal the model's chunk bytes for every fixed-size type without
references (integers, floats, bool/enums, fixed strings, opaque, packed
compounds and arrays of those): such chunks are served as stored. Padded
compounds (members at recorded offsets, C-struct alignment) are stored packed,
as HSDS reads them; their disk layout (:func:`disk_dtype`) places each member
at its offset with zero padding, so the view converts their chunks. Object
references (``"groups/<id>"`` text in the model, an 8-byte object header
address in HDF5) and variable-length data (length-prefixed in the model,
``(length, global heap collection, index)`` in HDF5) are converted by
:class:`DiskEncoder`, which writes address slots resolved once the layout is
known (see layout.py).
"""
from __future__ import annotations

import functools
import struct
from typing import Any, Callable

import numpy as np

from ...errors import UnsupportedType
from ...model import types as T
from ...model.values import as_layout, elements, fill_array, ref_from_json, region_to_json
from .layout import AddrKey, Blob
from .structs import (ARRAY_V2, CLASS_ARRAY, CLASS_BITFIELD, CLASS_COMPOUND, CLASS_ENUM, CLASS_FIXED, CLASS_FLOAT,
                      CLASS_OPAQUE, CLASS_REFERENCE, CLASS_STRING, CLASS_TIME, CLASS_VLEN, COMPOUND_MEMBER_V1,
                      COMPOUND_MEMBER_V2, DATATYPE, FIXED_POINT, FLOATING_POINT, REGION_REFERENCE, SHARED_V2,
                      TIME_PROPERTIES, VL_HEAP_ID, padded)
from .region import region_object

_PADS = {"nullterm": 0, "nullpad": 1, "spacepad": 2}
_CSETS = {"ascii": 0, "utf8": 1}
_NORM_BITS = {"none": 0, "msbset": 1, "implied": 2}  # the message's mantissa normalization field
VL_SIZE = VL_HEAP_ID.size  # 16: length, collection address, index
REF_SIZE = 8
REGION_SIZE = REGION_REFERENCE.size  # 12: global heap collection address, object index


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
        lo, hi = t.pad
        bits = (1 if t.byteorder == ">" else 0) | (lo << 1) | (hi << 2) | (0x08 if t.signed else 0)
        cls = CLASS_BITFIELD if t.bitfield else CLASS_FIXED  # same properties as integers
        return _header(cls, 1, t.size, bits) + FIXED_POINT.pack(offset=t.offset, precision=t.bits)
    if isinstance(t, T.FloatType):
        fb = t.bits
        lo, hi, inner = fb.pad
        bits = ((1 if t.byteorder == ">" else 0) | (lo << 1) | (hi << 2) | (inner << 3)
                | (_NORM_BITS[fb.norm] << 4) | (fb.sign << 8))
        return _header(CLASS_FLOAT, 1, t.size, bits) + FLOATING_POINT.pack(
            offset=fb.offset, precision=fb.precision, exponent_location=fb.exp_location, exponent_size=fb.exp_size,
            mantissa_location=fb.mant_location, mantissa_size=fb.mant_size, exponent_bias=fb.exp_bias)
    if isinstance(t, T.TimeType):
        return _header(CLASS_TIME, 1, t.size, 1 if t.byteorder == ">" else 0) + TIME_PROPERTIES.pack(
            precision=t.bits)
    if isinstance(t, T.StringType):
        if t.length is None:
            bits = 1 | (_PADS[t.pad] << 4) | (_CSETS[t.charset] << 8)
            base = _header(CLASS_FIXED, 1, 1, 1 if t.char_order == ">" else 0) + FIXED_POINT.pack(precision=8)
            return _header(CLASS_VLEN, v, VL_SIZE, bits) + base
        if t.length < 1:
            raise UnsupportedType("a fixed-length string of length 0 has no HDF5 equivalent")
        return _header(CLASS_STRING, 1, t.length, _PADS[t.pad] | (_CSETS[t.charset] << 4))
    if isinstance(t, T.EnumType):
        names = b"".join(padded(n.encode("utf-8") + b"\0") for n, _ in t.members)
        vals = np.asarray([v for _, v in t.members], dtype=t.base.numpy()).tobytes()
        return _header(CLASS_ENUM, v, t.base.size, len(t.members)) + _encode(t.base, v) + names + vals
    if isinstance(t, T.CompoundType):
        out = [_header(CLASS_COMPOUND, v, disk_itemsize(t), len(t.fields))]
        for (name, ft), offset in zip(t.fields, member_offsets(t)):
            out.append(padded(name.encode("utf-8") + b"\0"))
            out.append((COMPOUND_MEMBER_V1 if v == 1 else COMPOUND_MEMBER_V2).pack(offset=offset))
            out.append(_encode(ft, v))
        return b"".join(out)
    if isinstance(t, T.ArrayType):
        rank = len(t.dims)
        dims = struct.pack(f"<{rank}I", *t.dims)
        perm = struct.pack(f"<{rank}I", *range(rank))
        return (_header(CLASS_ARRAY, 2, disk_itemsize(t)) + ARRAY_V2.pack(rank=rank) + dims + perm
                + _encode(t.base, v))
    if isinstance(t, T.ReferenceType):
        if t.kind == "region":
            return _header(CLASS_REFERENCE, 1, REGION_SIZE, 1)
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
        return REGION_SIZE if t.kind == "region" else REF_SIZE
    if isinstance(t, T.CompoundType):
        return t.size if t.size is not None else sum(disk_itemsize(ft) for _, ft in t.fields)
    if isinstance(t, T.ArrayType):
        return int(np.prod(t.dims)) * disk_itemsize(t.base)
    if isinstance(t, T.EnumType):
        return t.base.size
    return t.numpy().itemsize


def compound_from_library(fields: tuple[tuple[str, T.DType], ...], offsets: tuple[int, ...], size: int,
                          sizes: tuple[int, ...]) -> T.CompoundType:
    """A compound as libhdf5 describes it (member ``offsets``, element ``size``, member
    ``sizes``), with the disk layout the HDF5 view writes.

    ``H5Dget_type``/``H5Aget_type`` give a type laid out for memory: a variable-length
    string member is a pointer there (8 bytes, 16 on disk), and libhdf5 moves every later
    member and the size by the difference. Undone here in offset order, as libhdf5
    applies it; a type already laid out for disk comes back unchanged."""
    change = 0
    disk = [0] * len(fields)
    for i in sorted(range(len(fields)), key=lambda k: offsets[k]):
        disk[i] = offsets[i] + change
        change += disk_itemsize(fields[i][1]) - sizes[i]
    return T.CompoundType.laid_out(fields, tuple(disk), size + change,
                                   tuple(disk_itemsize(ft) for _, ft in fields))


def member_offsets(t: T.CompoundType) -> tuple[int, ...]:
    """HDF5 byte offsets of a compound's members: as kept, or packed in field order."""
    if t.offsets is not None:
        return t.offsets
    out, offset = [], 0
    for _, ft in t.fields:
        out.append(offset)
        offset += disk_itemsize(ft)
    return tuple(out)


def fixed(t: T.DType) -> bool:
    """True for fixed-size types without references: disk bytes are a numpy layout
    (:func:`disk_dtype`) of the model's values, no heap or address involved."""
    return not t.is_vlen and not T.has_reference(t)


def has_padding(t: T.DType) -> bool:
    """True when a padded compound (members at recorded offsets) is anywhere in ``t``
    (through compounds and arrays): its disk layout is not the packed chunk layout."""
    t = T.resolved(t)
    if isinstance(t, T.CompoundType):
        return t.offsets is not None or any(has_padding(ft) for _, ft in t.fields)
    if isinstance(t, T.ArrayType):
        return has_padding(t.base)
    return False


def same_bytes(t: T.DType) -> bool:
    """True when HDF5's disk bytes are the model's chunk bytes (zero-copy possible)."""
    return fixed(t) and not has_padding(t)


@functools.lru_cache(maxsize=256)
def disk_dtype(t: T.DType) -> np.dtype:
    """The numpy layout of a fixed-size type's HDF5 disk bytes: ``t.numpy()`` with every
    compound's members at their HDF5 offsets in its HDF5 size (padded compounds)."""
    r = T.resolved(t)
    if not fixed(r) or not has_padding(r):
        return r.numpy()
    if isinstance(r, T.ArrayType):
        return np.dtype((disk_dtype(r.base), tuple(r.dims)))
    assert isinstance(r, T.CompoundType)
    return np.dtype({"names": [n for n, _ in r.fields], "formats": [disk_dtype(ft) for _, ft in r.fields],
                     "offsets": list(member_offsets(r)), "itemsize": disk_itemsize(r)})


def _base_dtype(t: T.DType) -> np.dtype:
    """The disk layout of one element of ``t`` (an array type's base: numpy folds its dims)."""
    dt = disk_dtype(t)
    return dt.subdtype[0] if dt.subdtype is not None else dt


def _sequence(base: T.DType, x: Any) -> np.ndarray:
    """The elements of one variable-length sequence (elements(): an array type's values
    once per element, PyTables' VLArray of a shaped atom)."""
    x = x if x is not None else []
    return elements(x, base.numpy()) if fixed(base) else np.asarray(x, dtype=object)


def to_disk(t: T.DType, raw: bytes) -> bytes:
    """Stored (packed) chunk bytes of a fixed-size type in its disk layout (zero padding)."""
    base = t.numpy()
    base = base.subdtype[0] if base.subdtype is not None else base
    return as_layout(np.frombuffer(raw, dtype=base), _base_dtype(t)).tobytes()


def disk_fill(t: T.DType, fill_json: Any) -> bytes:
    """One element of a fixed-size type's fill value in its disk layout."""
    return as_layout(fill_array(t, fill_json, ()), disk_dtype(t)).tobytes()


class DiskEncoder:
    """Values of the model (numpy, as ``values.to_numpy``/``vlen.decode`` give them)
    into HDF5 disk bytes, allocating variable-length data in a global heap."""

    def __init__(self, heap: Any, ref_key: Callable[[str], AddrKey | None]) -> None:
        self.heap = heap  # vlheap.GlobalHeap (or None when no vlen data is expected)
        self.ref_key = ref_key  # object id -> address key (None: not in this file)

    def encode(self, t: T.DType, arr: Any) -> Blob:
        """All elements of ``arr`` (any shape, C order) as one blob."""
        if fixed(t):
            a = np.asarray(arr)
            return Blob(as_layout(a, _base_dtype(t)).tobytes())
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
        if isinstance(t, T.ReferenceType) and t.kind == "region":
            self._region(x, out)
        elif isinstance(t, T.ReferenceType):
            oid = ref_from_json(x) if x is not None else None
            key = self.ref_key(oid) if oid else None
            if key is None:
                out.write(bytes(REF_SIZE))  # a null reference
            else:
                out.addr(key)
        elif isinstance(t, T.StringType) and t.length is None and x is None:
            out.write(bytes(VL_SIZE))  # a null pointer (netCDF's NIL), not an empty string
        elif isinstance(t, T.StringType) and t.length is None:
            data = x.encode("utf-8", "surrogateescape") if isinstance(x, str) else (bytes(x) if x is not None else b"")
            self._vl(len(data), Blob(data), out)
        elif isinstance(t, T.VlenType):
            items = _sequence(t.base, x)
            inner = self.encode(t.base, items)
            count = len(items) if items.ndim else 1
            self._vl(count, inner, out)
        elif isinstance(t, T.CompoundType):
            start = len(out)
            for i, ((_, ft), offset) in enumerate(zip(t.fields, member_offsets(t))):
                gap = start + offset - len(out)
                if gap < 0:
                    raise UnsupportedType("compound members out of offset order cannot be encoded here")
                out.write(bytes(gap))
                self.element(ft, x[i], out)
            out.write(bytes(start + disk_itemsize(t) - len(out)))  # trailing padding
        elif isinstance(t, T.ArrayType):
            flat = np.asarray(x, dtype=object).reshape(-1)
            for e in flat:
                self.element(t.base, e, out)
        else:
            out.write(as_layout(x, _base_dtype(t)).tobytes())

    def _region(self, x: Any, out: Blob) -> None:
        """A region reference: the dataset's header address and the selection go to the
        global heap, the element is the heap id (a null reference if the dataset is absent)."""
        value = region_to_json(x)
        key = self.ref_key(ref_from_json(value.get("id"))) if isinstance(value, dict) else None
        if key is None:
            out.write(bytes(REGION_SIZE))
            return
        if self.heap is None:
            raise UnsupportedType("region references need a global heap here")
        heap_key, index = self.heap.add(region_object(key, value))
        out.addr(heap_key)
        out.write(struct.pack("<I", index))

    def _vl(self, count: int, data: Blob, out: Blob) -> None:
        if self.heap is None:
            raise UnsupportedType("variable-length data needs a global heap here")
        key, index = self.heap.add(data)
        out.write(struct.pack("<I", count))
        out.addr(key)
        out.write(struct.pack("<I", index))
