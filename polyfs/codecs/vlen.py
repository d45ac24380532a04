"""HSDS's chunk encoding for variable-length data.

Elements in C order; a variable-length element is a little-endian int32 byte
count followed by its bytes (UTF-8 for text); fixed-size parts (and fields of
a compound) are their plain bytes. This is the decoded form that the filter
pipeline then compresses.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ..errors import CodecError
from ..model import values
from ..model.types import (ArrayType, CompoundType, DType, ReferenceType, StringType, VlenType, resolved)

_COUNT = struct.Struct("<i")


def _enc_element(t: DType, x: Any, out: bytearray) -> None:
    t = resolved(t)
    if isinstance(t, StringType) and t.length is None:
        b = x.encode("utf-8") if isinstance(x, str) else (bytes(x) if x is not None else b"")
        out += _COUNT.pack(len(b))
        out += b
    elif isinstance(t, ReferenceType) and t.kind == "region":
        b = bytes(x) if x is not None else b""
        out += _COUNT.pack(len(b))
        out += b
    elif isinstance(t, VlenType):
        b = values.elements(x if x is not None else [], t.base.numpy()).tobytes()
        out += _COUNT.pack(len(b))
        out += b
    elif isinstance(t, CompoundType) and t.is_vlen:
        for i, (_, ft) in enumerate(t.fields):
            _enc_element(ft, x[i], out)
    elif isinstance(t, ArrayType) and t.is_vlen:
        for e in np.asarray(x, dtype=object).reshape(-1):
            _enc_element(t.base, e, out)
    else:
        dt = t.numpy()
        one = values.elements(x, dt)  # a compound's array member: its values once
        if dt.subdtype is not None and len(one) != 1:
            raise CodecError(f"an element of {dt} holds {one.size} values")
        out += one.tobytes()


def encode(t: DType, arr: np.ndarray) -> bytes:
    """Serialize an array of a variable-length type."""
    out = bytearray()
    for x in np.asarray(arr).reshape(-1):
        _enc_element(t, x, out)
    return bytes(out)


def _dec_element(t: DType, buf: memoryview, pos: int) -> tuple[Any, int]:
    t = resolved(t)
    if (isinstance(t, StringType) and t.length is None) or (isinstance(t, ReferenceType) and t.kind == "region") \
            or isinstance(t, VlenType):
        if pos + 4 > len(buf):
            raise CodecError("variable-length chunk is truncated")
        (n,) = _COUNT.unpack_from(buf, pos)
        pos += 4
        if n < 0 or pos + n > len(buf):
            raise CodecError("variable-length element overruns its chunk")
        raw = bytes(buf[pos:pos + n])
        pos += n
        if isinstance(t, StringType):
            return (raw.decode("utf-8", "surrogateescape") if t.charset == "utf8" else raw), pos
        if isinstance(t, VlenType):
            return np.frombuffer(raw, dtype=t.base.numpy()).copy(), pos
        return raw, pos
    if isinstance(t, CompoundType) and t.is_vlen:
        vals = []
        for _, ft in t.fields:
            v, pos = _dec_element(ft, buf, pos)
            vals.append(v)
        return tuple(vals), pos
    if isinstance(t, ArrayType) and t.is_vlen:
        arr = np.empty(t.dims, dtype=object)
        for i in range(arr.size):
            arr.flat[i], pos = _dec_element(t.base, buf, pos)
        return arr, pos
    dt = t.numpy()
    if pos + dt.itemsize > len(buf):
        raise CodecError("variable-length chunk is truncated")
    return np.frombuffer(buf[pos:pos + dt.itemsize], dtype=dt)[0], pos + dt.itemsize


def decode(t: DType, data: bytes, count: int) -> np.ndarray:
    """``count`` elements (a 1-D object array, or a compound array) from chunk bytes."""
    base = resolved(t)
    if isinstance(base, CompoundType):
        dt = np.dtype([(n, np.dtype(object) if ft.is_vlen else ft.numpy()) for n, ft in base.fields])
        out = np.empty(count, dtype=dt)
    else:
        out = np.empty(count, dtype=object)
    buf = memoryview(data)
    pos = 0
    for i in range(count):
        out[i], pos = _dec_element(t, buf, pos)
    if pos != len(buf):
        raise CodecError(f"variable-length chunk has {len(buf) - pos} trailing bytes")
    return out
