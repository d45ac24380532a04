"""Is metadata written over an existing array the same array?

A tool rewrites an array's metadata to resize it or change its attributes; its type,
chunk shape and fill value must be the stored ones, or those the view shows where it
shows them otherwise (a scalar as one element in N5, HDF5 array elements as trailing
dimensions). Anything else would reinterpret stored chunks, so it is refused.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import InvalidInput
from ..model.schema import Dataset
from .chunkin import stored_dtype
from .protocol import ArrayWrite


def check_same_array(ds: Dataset, meta: ArrayWrite, where: str,
                     shown: Callable[[], ArrayWrite | None] = lambda: None) -> None:
    """Metadata written over an existing array must describe it as stored or as the view
    shows it (``shown()``, asked only when it differs from the stored one)."""
    have = stored_dtype(ds)
    want = meta.dtype.numpy()
    if not _same_kind(have, want) and not ((s := shown()) is not None and _same_kind(s.dtype.numpy(), want)):
        raise InvalidInput(f"{where}: the data type of an existing array cannot change ({have} -> {want})")
    if tuple(meta.chunks) != tuple(ds.chunks) and not ((s := shown()) is not None and
                                                       tuple(meta.chunks) == tuple(s.chunks)):
        raise InvalidInput(f"{where}: the chunk shape of an existing array cannot change "
                           f"({list(ds.chunks)} -> {list(meta.chunks)})")
    fill, old = meta.fill, ds.fill_value
    if meta.fill_declared and not same_json_value(fill, old) and not (_zero(fill) and _zero(old)):
        raise InvalidInput(f"{where}: the fill value of an existing array cannot change ({old!r} -> {fill!r})")


def _same_kind(a: np.dtype, b: np.dtype) -> bool:
    """Element types one array may be declared with (uint8 and bool are one byte alike)."""
    return (a.kind, a.itemsize) == (b.kind, b.itemsize) or (a.kind in "bu" and b.kind in "bu"
                                                           and a.itemsize == b.itemsize == 1)


def _zero(v: Any) -> bool:
    """A fill value of all zero bytes: None (none set), 0, or netCDF's ``char`` fill ``\\0``
    (stored as ``""``; the view shows it as zero bytes, which parse back to None)."""
    return v is None or (isinstance(v, (int, float, str, bytes)) and v in (0, "", b""))


def same_json_value(a: Any, b: Any) -> bool:
    """Values as JSON gives them (fill values, attributes), NaN equal to NaN (also inside lists:
    a complex ``[re, im]``, an attribute array)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_json_value(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return bool(a == b)
