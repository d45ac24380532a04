"""Variable-length sequences of a byte-swapped base type, as h5py reads them.

h5py (3.x) reads a sequence of a non-native base type (``H5T_VLEN {H5T_STD_U64BE}`` on a
little-endian machine; pyfive's ``attr_datatypes.hdf5`` has one) as arrays labelled with the
native order that hold the file's bytes: ``(1, 2)`` comes back as ``[1 << 56, 2 << 56]``, even
through ``Dataset.astype``. Imported or written through ``hdf5/`` as h5py gives them, such
values were stored byte-swapped. What h5py does is probed once on a tiny in-memory file, so
an h5py that reads them right is left alone.
"""
from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from ...model import types as T

NATIVE = "<" if sys.byteorder == "little" else ">"


@functools.cache
def h5py_swaps_vlen_bytes() -> bool:
    """True when h5py gives a swapped-order sequence's file bytes under the native label."""
    import h5py

    swapped = ">" if NATIVE == "<" else "<"
    with h5py.File(f"polyfs-vlen-probe-{id(object())}", "w", driver="core", backing_store=False) as f:
        d = f.create_dataset("v", shape=(1,), dtype=h5py.vlen_dtype(np.dtype(f"{swapped}i2")))
        d[0] = np.array([1], dtype=f"{swapped}i2")
        got = int(np.asarray(d[0])[0])
    return got != 1


def _swapped_base(t: T.DType) -> bool:
    base = T.resolved(t)
    return base.order in "<>" and base.order != NATIVE and base.numpy().kind in "iuf"


def _fix_sequence(seq: Any, t: T.DType) -> Any:
    """One sequence read by h5py, its values as the file holds them."""
    if not isinstance(seq, np.ndarray) or seq.dtype.kind not in "iuf" or seq.dtype.itemsize == 1:
        return seq
    if seq.dtype.byteorder not in ("=", NATIVE):
        return seq  # already labelled with the file's order: h5py read it right
    return seq.view(seq.dtype.newbyteorder(T.resolved(t).order))


def fix_vlen_order(arr: Any, t: T.DType) -> Any:
    """``arr`` (h5py's values of type ``t``) with byte-swapped sequences read as the file holds
    them: top-level sequences and compound members that are sequences."""
    base = T.resolved(t)
    if isinstance(base, T.VlenType):
        if not _swapped_base(base.base) or not h5py_swaps_vlen_bytes():
            return arr
        if not isinstance(arr, np.ndarray) or arr.dtype != object:
            return arr
        out = np.empty(arr.shape, dtype=object)
        for i, seq in enumerate(arr.flat):
            out.flat[i] = _fix_sequence(seq, base.base)
        return out
    if isinstance(base, T.CompoundType) and isinstance(arr, np.ndarray) and arr.dtype.names:
        fields = [(n, ft) for n, ft in base.fields if isinstance(T.resolved(ft), T.VlenType)
                  and _swapped_base(T.resolved(ft).base) and n in arr.dtype.names]
        if not fields or not h5py_swaps_vlen_bytes():
            return arr
        arr = arr.copy()
        for n, ft in fields:
            arr[n] = fix_vlen_order(arr[n], ft)
    return arr
