"""Attribute and fill values: the JSON HSDS stores <-> numpy arrays.

HSDS keeps attribute values (and ``fillValue``) as JSON in the object body:
numbers, ``true``/``false`` for bool enums, text for strings, lists for
compounds and array types, ``"groups/<id>"`` for object references and base64
for opaque data. Everything that turns such values into bytes (the HDF5
view) or back (import) goes through here.
"""
from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

from ..errors import InvalidInput
from .types import (ArrayType, CompoundType, DType, EnumType, FloatType, IntType, OpaqueType, ReferenceType,
                    StringType, TimeType, VlenType, is_raw, resolved)
from .schema import Shape

REF_PREFIXES = {"g": "groups/", "d": "datasets/", "t": "datatypes/"}


def ref_to_json(obj_id: str | None) -> str:
    """``groups/g-...`` (HDF5/JSON's spelling of an object reference), ``""`` for null."""
    if not obj_id:
        return ""
    return REF_PREFIXES[obj_id[0]] + obj_id


def ref_from_json(value: Any) -> str | None:
    """The object id in a reference value, None for a null reference."""
    if isinstance(value, bytes):
        value = value.rstrip(b"\0").decode("ascii", "replace")
    if not value:
        return None
    text = str(value)
    return text.split("/", 1)[1] if "/" in text else text


def raw_to_int(t: IntType | TimeType, raw: bytes) -> int:
    """The integer held by the HDF5 bytes of a raw integer or time element
    (its ``precision`` bits from ``offset``, sign-extended when signed)."""
    word = int.from_bytes(bytes(raw), "big" if t.byteorder == ">" else "little")
    offset = getattr(t, "offset", 0)
    bits = t.bits
    v = (word >> offset) & ((1 << bits) - 1)
    if getattr(t, "signed", False) and v >> (bits - 1):
        v -= 1 << bits
    return v


def int_to_raw(t: IntType | TimeType, value: int) -> bytes:
    """The HDF5 bytes of a raw integer or time element (pad bits as the type says)."""
    offset = getattr(t, "offset", 0)
    bits = t.bits
    word = (int(value) & ((1 << bits) - 1)) << offset
    lo, hi = getattr(t, "pad", (0, 0))
    if lo:
        word |= (1 << offset) - 1
    if hi:
        word |= ((1 << (8 * t.size)) - 1) ^ ((1 << (offset + bits)) - 1)
    return word.to_bytes(t.size, "big" if t.byteorder == ">" else "little")


def region_to_json(x: Any) -> Any:
    """A region reference element (HSDS-style JSON text in the chunks) as HDF5/JSON's
    ``{"id": "datasets/d-...", "class": "H5S_SEL_...", "selection": ...}`` (None if null)."""
    if isinstance(x, dict) or x is None:
        return x
    b = bytes(x) if isinstance(x, (bytes, np.bytes_, memoryview)) else str(x).encode("utf-8")
    b = b.rstrip(b"\0")
    if not b:
        return None
    try:
        return json.loads(b)
    except ValueError:
        raise InvalidInput(f"region reference {b[:60]!r} is not JSON") from None


def region_from_json(v: Any) -> bytes:
    """A region reference as the chunks hold it: compact JSON text (``b""`` for null)."""
    if v is None or v == "" or v == b"":
        return b""
    if isinstance(v, (bytes, str)):
        v = region_to_json(v.encode("utf-8") if isinstance(v, str) else v)
    return json.dumps(v, separators=(",", ":"), sort_keys=True).encode("ascii")


def _decode_text(b: bytes, charset: str) -> str:
    try:
        return b.decode("utf-8" if charset == "utf8" else "ascii")
    except UnicodeDecodeError:
        return b.decode("latin-1")


def _encode_text(s: Any, charset: str) -> bytes:
    if isinstance(s, bytes):
        return s
    s = "" if s is None else str(s)
    try:
        return s.encode("utf-8" if charset == "utf8" else "ascii")
    except UnicodeEncodeError:
        return s.encode("utf-8")


def element_from_json(t: DType, v: Any) -> Any:
    """One element as numpy wants it for ``t.numpy()``."""
    t = resolved(t)
    if is_raw(t):
        return _raw_from_json(t, v)
    if isinstance(t, EnumType):
        if t.is_bool:
            return bool(v)
        return int(v)
    if isinstance(t, IntType):
        return int(v)
    if isinstance(t, FloatType):
        return float(v) if not isinstance(v, str) else float(v.replace("Infinity", "inf"))
    if isinstance(t, StringType):
        if t.length is None:
            return v if isinstance(v, (str, bytes)) else ("" if v is None else str(v))
        b = _encode_text(v, t.charset)
        return b.ljust(t.length, b" ") if t.pad == "spacepad" else b  # space padding is part of the value
    if isinstance(t, CompoundType):
        if isinstance(v, dict):
            v = [v[n] for n, _ in t.fields]
        return tuple(element_from_json(ft, fv) for (_, ft), fv in zip(t.fields, v))
    if isinstance(t, ArrayType):
        arr = np.zeros(t.dims, dtype=t.base.numpy())
        if t.base.is_vlen:
            flat = _flatten(v)
        elif isinstance(resolved(t.base), CompoundType):  # a member is a list too: only the array's dims
            flat = _flatten_to_rank(v.tolist() if isinstance(v, np.ndarray) else v, len(t.dims))
        else:
            flat = np.asarray(v, dtype=object).reshape(-1)
        for i, x in enumerate(flat):
            arr.flat[i] = element_from_json(t.base, x)
        return arr
    if isinstance(t, ReferenceType):
        if t.kind == "region":
            return region_from_json(v)
        return _encode_text(ref_to_json(ref_from_json(v)), "ascii")
    if isinstance(t, OpaqueType):
        return base64.b64decode(v) if v else b""
    if isinstance(t, VlenType):
        items = [element_from_json(t.base, x) for x in (v or [])]
        dt = t.base.numpy()
        if not has_gaps(dt):
            return np.asarray(items, dtype=dt)
        out = np.zeros(len(items), dtype=dt)  # padded compounds: zero padding
        for i, x in enumerate(items):
            out[i] = x
        return out
    raise InvalidInput(f"cannot convert a value of type {t}")


def _flatten(v: Any) -> list:
    if isinstance(v, (list, tuple)):
        out = []
        for x in v:
            out.extend(_flatten(x))
        return out
    return [v]


def _raw_from_json(t: DType, v: Any) -> bytes:
    """Raw atomic types: integers and times are JSON numbers, floats numpy has no type
    for are base64 of their HDF5 bytes (no JSON number holds an 80-bit value exactly)."""
    base = t.base if isinstance(t, EnumType) else t
    if isinstance(base, FloatType):
        raw = base64.b64decode(v) if isinstance(v, str) and v else b""
        if len(raw) != base.size:
            raise InvalidInput(f"a {8 * base.size}-bit float value must be base64 of {base.size} bytes: {v!r}")
        return raw
    return int_to_raw(base, int(v))  # type: ignore[arg-type]


def _raw_to_json(t: DType, x: Any) -> Any:
    base = t.base if isinstance(t, EnumType) else t
    raw = x.tobytes() if isinstance(x, (np.void, np.ndarray)) else bytes(x)
    if isinstance(base, FloatType):
        return base64.b64encode(raw).decode("ascii")
    return raw_to_int(base, raw)  # type: ignore[arg-type]


def element_to_json(t: DType, x: Any) -> Any:
    t = resolved(t)
    if is_raw(t):
        return _raw_to_json(t, x)
    if isinstance(t, EnumType):
        return bool(x) if t.is_bool else int(x)
    if isinstance(t, IntType):
        return int(x)
    if isinstance(t, FloatType):
        f = float(x)
        return f if math.isfinite(f) else f  # json.dumps writes NaN/Infinity
    if isinstance(t, StringType):
        if isinstance(x, (bytes, np.bytes_)):
            b = bytes(x)
            if t.length is not None:
                b = b.rstrip(b"\0") if t.pad != "spacepad" else b.rstrip(b" ")
            return _decode_text(b, t.charset)
        return "" if x is None else str(x)
    if isinstance(t, CompoundType):
        return [element_to_json(ft, x[i]) for i, (_, ft) in enumerate(t.fields)]
    if isinstance(t, ArrayType):
        arr = np.asarray(x)
        return _nested(arr, lambda e: element_to_json(t.base, e))
    if isinstance(t, ReferenceType):
        if t.kind == "region":
            return region_to_json(x)
        return ref_to_json(ref_from_json(x))
    if isinstance(t, OpaqueType):
        b = bytes(x)
        return base64.b64encode(b).decode("ascii") if any(b) else ""
    if isinstance(t, VlenType):
        return [element_to_json(t.base, e) for e in np.asarray(x).reshape(-1)]
    raise InvalidInput(f"cannot convert a value of type {t}")


def _nested(arr: Any, fn) -> Any:
    """Nested lists over ``arr``'s own dims only: an element of an object array
    may itself be an array (a variable-length sequence) and goes to ``fn`` whole."""
    if not isinstance(arr, np.ndarray):
        return fn(arr)

    def rec(idx: tuple) -> Any:
        if len(idx) == arr.ndim:
            return fn(arr[idx])
        return [rec(idx + (i,)) for i in range(arr.shape[len(idx)])]

    return rec(())


def to_numpy(t: DType, shape: Shape, value: Any) -> np.ndarray:
    """The array a JSON value stands for (0-d for scalars, empty for null)."""
    dt = t.numpy()
    dims = shape.array_shape
    if shape.kind == "null":
        return np.empty((0,), dtype=dt)
    out = np.zeros(dims, dtype=dt)  # compound padding: zero bytes
    if shape.kind == "scalar":
        v = value[0] if isinstance(value, list) and len(value) == 1 and not _is_compound_list(t, value) else value
        out[()] = element_from_json(t, v)
        return out
    flat = _flatten_to_rank(value, len(dims))
    if len(flat) != out.size:
        raise InvalidInput(f"attribute value has {len(flat)} elements, shape {list(dims)} needs {out.size}")
    for i, v in enumerate(flat):
        out.flat[i] = element_from_json(t, v)
    return out


def _is_compound_list(t: DType, value: list) -> bool:
    return isinstance(resolved(t), (CompoundType, ArrayType, VlenType))


def _flatten_to_rank(value: Any, rank: int) -> list:
    if rank == 0:
        return [value]
    if not isinstance(value, (list, tuple)):
        return [value]
    out = []
    for v in value:
        out.extend(_flatten_to_rank(v, rank - 1))
    return out


def from_numpy(t: DType, arr: Any) -> Any:
    """The JSON value HSDS stores for an array (scalar element for 0-d)."""
    arr = np.asarray(arr, dtype=object) if not isinstance(arr, np.ndarray) else arr
    base = resolved(t)
    if isinstance(base, ArrayType) and arr.dtype.subdtype is None:
        # numpy folds an array type's dims into the array shape: split them off again
        outer = arr.ndim - len(base.dims)
        return _nested_outer(arr, outer, lambda e: element_to_json(t, e))
    if arr.ndim == 0:
        return element_to_json(t, arr[()])
    return _nested(arr, lambda e: element_to_json(t, e))


def _nested_outer(arr: np.ndarray, depth: int, fn) -> Any:
    if depth == 0:
        return fn(arr)
    return [_nested_outer(arr[i], depth - 1, fn) for i in range(arr.shape[0])]


def fill_array(t: DType, fill_json: Any, shape: tuple[int, ...]) -> np.ndarray:
    """An array of ``shape`` holding the dataset fill value (zeros if none)."""
    dt = t.numpy()
    if dt.kind == "O":
        out = np.empty(shape, dtype=dt)
        base = resolved(t)
        empty: Any = "" if isinstance(base, StringType) else None
        if fill_json is not None:
            empty = element_from_json(t, fill_json)
        out.fill(empty)
        return out
    if fill_json is None:
        return np.zeros(shape, dtype=dt)
    out = np.zeros(shape, dtype=dt)  # compound padding: zero bytes
    out[...] = element_from_json(t, fill_json)
    return out


def fill_bytes(t: DType, fill_json: Any) -> bytes:
    """One element of the fill value as stored bytes (fixed-size types)."""
    return fill_array(t, fill_json, ()).tobytes()


def elements(x: Any, dt: np.dtype) -> np.ndarray:
    """``x`` as elements of ``dt``. For an array dtype (a subarray: an HDF5 array type) the
    values are converted to its base and shaped ``(n, *dims)``: numpy converting them to the
    subarray dtype itself would repeat each value across a whole element."""
    if dt.subdtype is None:
        return np.asarray(x, dtype=dt)
    base, dims = dt.subdtype
    return np.asarray(x, dtype=base).reshape((-1,) + dims)


def has_gaps(dt: np.dtype) -> bool:
    """True when some bytes of a ``dt`` element belong to no field (padded compounds)."""
    dt = np.dtype(dt)
    if dt.subdtype is not None:
        return has_gaps(dt.subdtype[0])
    if dt.names is None:
        return False
    spans = sorted((dt.fields[n][1], dt.fields[n][0]) for n in dt.names)
    end = 0
    for offset, ft in spans:
        if offset != end or has_gaps(ft):
            return True
        end = offset + ft.itemsize
    return end != dt.itemsize


def as_layout(arr: Any, dt: np.dtype) -> np.ndarray:
    """``arr`` as a C-contiguous array of ``dt`` (fields assigned by position). Converted
    into a padded compound layout, the padding bytes are zero, never left uninitialized.
    Complex numbers go into a two-field compound (h5py's ``{r, i}``) as their real and
    imaginary parts (numpy alone would put the real part in both fields)."""
    arr = np.asarray(arr)
    dt = np.dtype(dt)
    if dt.subdtype is not None and arr.dtype.subdtype is None:
        base, dims = dt.subdtype
        if dims and arr.shape[arr.ndim - len(dims):] == dims:
            # an array type's elements with its dims folded into the shape (numpy's way):
            # converting to the subarray dtype would repeat each value across a whole element
            return as_layout(arr, base)
    if arr.dtype.kind == "c" and dt.names is not None and len(dt.names) == 2:
        arr = complex_pairs(arr)
    if arr.dtype != dt and _splits_complex(arr.dtype, dt):
        out = np.zeros(arr.shape, dtype=dt)  # field by field: a complex field needs its two parts
        for a, d in zip(arr.dtype.names, dt.names):  # type: ignore[arg-type]
            out[d] = as_layout(arr[a], dt[d].base)
        return out
    if arr.dtype == dt or not has_gaps(dt):
        return np.ascontiguousarray(arr, dtype=dt)
    out = np.zeros(arr.shape, dtype=dt)
    out[...] = arr
    return out


def put(block: np.ndarray, part: Any, at: Any = ...) -> None:
    """``block[at] = part``; records are converted with :func:`as_layout` first, so their
    complex fields keep both parts (numpy's record assignment would not)."""
    part = np.asarray(part)
    if part.dtype.names is not None and block.dtype.names is not None:
        part = as_layout(part, block.dtype)
    block[at] = part


def _splits_complex(src: np.dtype, dt: np.dtype) -> bool:
    """Whether records of ``src`` going into ``dt`` (fields by position) hold a complex
    field that ``dt`` spells as an ``{r, i}`` compound, at any depth: numpy's own record
    assignment would then put the real part in both fields."""
    if src.names is None or dt.names is None or len(src.names) != len(dt.names):
        return False
    for a, d in zip(src.names, dt.names):
        s, t = src[a].base, dt[d].base
        if (s.kind == "c" and t.names is not None) or _splits_complex(s, t):
            return True
    return False


def complex_pairs(arr: np.ndarray) -> np.ndarray:
    """A complex array as the ``{r, i}`` compound of its parts (same bytes; a view when it can be)."""
    arr = np.asarray(arr)
    if arr.dtype.kind != "c":
        return arr
    order = arr.dtype.byteorder if arr.dtype.byteorder in "<>" else "="
    half = np.dtype(f"{order}f{arr.dtype.itemsize // 2}")
    return np.ascontiguousarray(arr).view(np.dtype([("r", half), ("i", half)])).reshape(arr.shape)
