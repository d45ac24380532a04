"""An HDF5 file's datatypes as model types, and values read as the file's own bytes.

h5py's TypeIDs become model types with their exact HDF5 description (odd-size and
partial-precision integers, non-IEEE floats, times, compound member offsets, the character
order of variable-length strings); types numpy has no equivalent of, and fixed strings, are
read with the file type as the memory type (:func:`read_raw`), so their bytes and padding
are kept. Used by the importer (source.py) and the written-file diff (diff.py).
"""
from __future__ import annotations

import numpy as np

from ...model import types as T
from .dtypes import compound_from_library, disk_dtype
from .repack import packed_values


def model_type(tid, where: str) -> T.DType:
    """The model type of an h5py TypeID (committedness handled by the caller)."""
    from h5py import h5t

    cls = tid.get_class()
    order = ">" if cls in (h5t.INTEGER, h5t.FLOAT, h5t.BITFIELD) and tid.get_order() == h5t.ORDER_BE else "<"
    if cls == h5t.INTEGER:
        return _int_type(tid, order, tid.get_sign() != h5t.SGN_NONE)
    if cls == h5t.BITFIELD:  # PyTables' bool (pandas' ``transposed``, bool columns): H5T_STD_B8
        return _bitfield_type(tid, where)
    if cls == h5t.FLOAT:
        return _float_type(tid, order)
    if cls == h5t.TIME:
        return _time_type(tid, where)
    if cls == h5t.STRING:
        cset = "utf8" if tid.get_cset() == h5t.CSET_UTF8 else "ascii"
        pad = {h5t.STR_NULLTERM: "nullterm", h5t.STR_NULLPAD: "nullpad", h5t.STR_SPACEPAD: "spacepad"}.get(
            tid.get_strpad(), "nullpad")
        if tid.is_variable_str():
            return T.StringType(None, cset, pad, _vlen_char_order(tid))
        return T.StringType(tid.get_size(), cset, pad)
    if cls == h5t.COMPOUND:  # member offsets and size kept exactly (C-struct padding)
        n = range(tid.get_nmembers())
        return compound_from_library(
            tuple((tid.get_member_name(i).decode("utf-8", "surrogateescape"), model_type(tid.get_member_type(i), where))
                  for i in n),
            tuple(tid.get_member_offset(i) for i in n), tid.get_size(), tuple(tid.get_member_type(i).get_size() for i in n))
    if cls == h5t.ENUM:
        base = model_type(tid.get_super(), where)
        if not isinstance(base, T.IntType):
            raise T.UnsupportedType(f"{where}: enum over a non-integer type")
        return T.EnumType(base, tuple((tid.get_member_name(i).decode("utf-8", "surrogateescape"),
                                       int(tid.get_member_value(i))) for i in range(tid.get_nmembers())))
    if cls == h5t.ARRAY:
        return T.ArrayType(model_type(tid.get_super(), where), tuple(int(d) for d in tid.get_array_dims()))
    if cls == h5t.REFERENCE:
        if tid.equal(h5t.STD_REF_OBJ):
            return T.ReferenceType("object")
        if tid.equal(h5t.STD_REF_DSETREG):
            return T.ReferenceType("region")
        raise T.UnsupportedType(f"{where}: HDF5 1.12 references (H5T_STD_REF) are not supported")
    if cls == h5t.OPAQUE:
        return T.OpaqueType(tid.get_size(), (tid.get_tag() or b"").decode("ascii", "replace"))
    if cls == h5t.VLEN:
        return T.VlenType(model_type(tid.get_super(), where))
    if cls == getattr(h5t, "COMPLEX", -1):  # HDF5 2.0 complex: stored like h5py's {r, i} compound
        half = model_type(tid.get_super(), where)
        return T.CompoundType((("r", half), ("i", half)))
    raise T.UnsupportedType(f"{where}: HDF5 type class {cls} is not supported")


def _pad_bits(pads) -> tuple[int, ...]:
    """h5py's padding types as the model keeps them: 1 where pad bits are ones."""
    from h5py import h5t

    return tuple(1 if p == h5t.PAD_ONE else 0 for p in pads)


def _int_type(tid, order: str, signed: bool) -> T.IntType:
    """An integer with its exact bit layout (precision, offset, padding)."""
    size = tid.get_size()
    precision = tid.get_precision()
    return T.IntType(size, signed, order, None if precision == 8 * size else precision, tid.get_offset(),
                     _pad_bits(tid.get_pad()))  # type: ignore[arg-type]


def _bitfield_type(tid, where: str) -> T.IntType:
    """A bitfield as the unsigned integer of its bits, marked a bitfield (the HDF5 view shows
    ``H5T_STD_B<n>`` again), read from its encoded datatype message: h5py's bitfield TypeIDs
    have no precision, offset or padding accessors."""
    from .structs import DATATYPE, FIXED_POINT

    msg = tid.encode()[2:]  # H5Tencode: object type, version, then the datatype message
    if len(msg) < DATATYPE.size + FIXED_POINT.size:
        raise T.UnsupportedType(f"{where}: unreadable bitfield type")
    head = DATATYPE.unpack(msg)
    props = FIXED_POINT.unpack(msg, DATATYPE.size)
    size, bits, precision = head["size"], head["bits0"], props["precision"]
    return T.IntType(size, False, ">" if bits & 1 else "<", None if precision == 8 * size else precision,
                     props["offset"], ((bits >> 1) & 1, (bits >> 2) & 1), bitfield=True)  # type: ignore[arg-type]


def _float_type(tid, order: str) -> T.FloatType:
    """A float with its exact bit fields; IEEE binary16/32/64/128 need none."""
    from h5py import h5t

    size = tid.get_size()
    spos, epos, esize, mpos, msize = tid.get_fields()
    norm = {h5t.NORM_IMPLIED: "implied", h5t.NORM_MSBSET: "msbset", h5t.NORM_NONE: "none"}[tid.get_norm()]
    bits = T.FloatBits(tid.get_precision(), tid.get_offset(), spos, epos, esize, mpos, msize, tid.get_ebias(), norm,
                       _pad_bits(tuple(tid.get_pad()) + (tid.get_inpad(),)))  # type: ignore[arg-type]
    return T.FloatType(size, order, None if T.IEEE_BITS.get(size) == bits else bits)


def _vlen_char_order(tid) -> str:
    """The byte order libhdf5 recorded for a variable-length string's characters (its
    base type, big-endian when written on s390x and friends): read from the encoded message."""
    msg = tid.encode()[2:]  # H5Tencode: object type, version, then the datatype message
    return ">" if len(msg) > 9 and msg[8] & 0x0F == 0 and msg[9] & 1 else "<"


def _time_type(tid, where: str) -> T.TimeType:
    """A time type, read from its encoded datatype message (h5py has no accessors for it)."""
    msg = tid.encode()[2:]  # H5Tencode: object type, version, then the datatype message
    if len(msg) < 10:
        raise T.UnsupportedType(f"{where}: unreadable time type")
    size = int.from_bytes(msg[4:8], "little")
    precision = int.from_bytes(msg[8:10], "little")
    return T.TimeType(size, ">" if msg[1] & 1 else "<", None if precision == 8 * size else precision)


def raw_read_type(t: T.DType) -> bool:
    """True when values are read as the file's own bytes (no conversion by HDF5):
    types numpy has no equivalent of, and fixed strings (their padding is kept)."""
    base = T.resolved(t)
    if isinstance(base, T.ArrayType):
        base = T.resolved(base.base)
    return T.has_raw(base) or (isinstance(base, T.StringType) and base.length is not None)


def read_raw(obj, t: T.DType, region: tuple = ()) -> np.ndarray:
    """Values of a dataset (``region``: slices) or attribute as the file's bytes,
    in the model type's numpy layout (the file type as the memory type)."""
    from h5py import h5a, h5s

    dt = disk_dtype(t)  # the file's layout; padded compounds come back packed
    oid = obj if isinstance(obj, h5a.AttrID) else obj.id
    ftype = oid.get_type()
    if ftype.get_size() != dt.itemsize:
        raise T.UnsupportedType(f"a {ftype.get_size()}-byte element does not fit the packed {dt.itemsize}-byte layout")
    if isinstance(oid, h5a.AttrID):
        out = np.empty(oid.shape, dtype=dt)
        oid.read(out, mtype=ftype)
        return packed_values(out, t)
    space = oid.get_space()
    if not region or space.get_simple_extent_type() != h5s.SIMPLE:
        out = np.empty(obj.shape or (), dtype=dt)
        oid.read(h5s.ALL, h5s.ALL, out, mtype=ftype)
        return packed_values(out, t)
    start = tuple(s.start for s in region)
    count = tuple(s.stop - s.start for s in region)
    space.select_hyperslab(start, count)
    out = np.empty(count, dtype=dt)
    if out.size:
        oid.read(h5s.create_simple(count), space, out, mtype=ftype)
    return packed_values(out, t)


def raw_layout_matches(tid) -> bool:
    """True when the file's element bytes are exactly the model's layout (no
    variable-length parts, no references; compounds keep their offsets and size)."""
    from h5py import h5t

    cls = tid.get_class()
    if cls in (h5t.VLEN, h5t.REFERENCE) or (cls == h5t.STRING and tid.is_variable_str()):
        return False
    if cls == h5t.COMPOUND:
        return all(raw_layout_matches(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    if cls == h5t.ARRAY:
        return raw_layout_matches(tid.get_super())
    return cls in (h5t.INTEGER, h5t.FLOAT, h5t.BITFIELD, h5t.STRING, h5t.ENUM, h5t.OPAQUE, h5t.TIME) or \
        cls == getattr(h5t, "COMPLEX", -1)


def null_vlen_strings(aid, t: T.DType) -> np.ndarray | None:
    """Which elements of a variable-length string attribute are null pointers (netCDF's
    ``NIL``, not ``""``: h5py reads both as empty), or None when the type is not one.
    The attribute is read as HDF5's ``char *`` elements; the strings it allocated are freed."""
    import ctypes

    if not (isinstance(T.resolved(t), T.StringType) and T.resolved(t).length is None):
        return None
    mtype = aid.get_type()
    if mtype.get_size() != ctypes.sizeof(ctypes.c_void_p):
        return None
    ptrs = np.zeros(aid.shape, dtype=np.uintp)
    aid.read(ptrs, mtype=mtype)
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
    for p in ptrs.reshape(-1):
        if p:
            free(int(p))
    return ptrs == 0
