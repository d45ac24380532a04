"""Dataset region references: HDF5/JSON's selection value <-> HDF5's serialized selection.

The model holds a region reference as HDF5/JSON spells it::

    {"id": "datasets/d-...", "class": "H5S_SEL_HYPERSLABS",
     "selection": [{"start": [1, 2], "opposite": [2, 4]}, ...]}   # blocks, corners inclusive
    {"id": ..., "class": "H5S_SEL_POINTS", "selection": [[0, 1], [2, 11]]}
    {"id": ..., "class": "H5S_SEL_ALL"} / {"id": ..., "class": "H5S_SEL_NONE"}

In an HDF5 file the element is a global heap id whose object is the dataset's
object header address followed by the selection serialized as libhdf5 writes
it for references (version 1: hyperslabs as a block list, points as a list).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...errors import InvalidInput
from .layout import AddrKey, Blob
from .structs import SEL_ALL, SEL_HYPERSLABS, SEL_NONE, SEL_POINTS, SELECTION, SELECTION_LIST

CLASSES = {"H5S_SEL_NONE": SEL_NONE, "H5S_SEL_POINTS": SEL_POINTS, "H5S_SEL_HYPERSLABS": SEL_HYPERSLABS,
           "H5S_SEL_ALL": SEL_ALL}


def selection_bytes(value: Mapping[str, Any]) -> bytes:
    """The serialized selection of a region value (version 1, 32-bit coordinates)."""
    kind = CLASSES.get(str(value.get("class")))
    if kind is None:
        raise InvalidInput(f"region reference has an unknown selection class {value.get('class')!r}")
    if kind in (SEL_NONE, SEL_ALL):
        return SELECTION.pack(kind=kind, length=0)
    sel = value.get("selection") or []
    if kind == SEL_POINTS:
        coords = np.asarray(sel, dtype=np.int64).reshape(len(sel), -1) if sel else np.zeros((0, 0), np.int64)
    else:
        coords = np.asarray([list(b["start"]) + list(b["opposite"]) for b in sel], dtype=np.int64)
        coords = coords.reshape(len(sel), -1) if sel else np.zeros((0, 0), np.int64)
    rank = coords.shape[1] if kind == SEL_POINTS else coords.shape[1] // 2
    if coords.size and (coords.min() < 0 or coords.max() > 0xFFFFFFFF):
        raise InvalidInput("region reference coordinates do not fit 32 bits")
    body = SELECTION_LIST.pack(rank=rank, count=len(coords)) + coords.astype("<u4").tobytes()
    return SELECTION.pack(kind=kind, length=len(body)) + body


def region_object(target: AddrKey, value: Mapping[str, Any]) -> Blob:
    """The global heap object of a region reference to the dataset at ``target``."""
    blob = Blob()
    blob.addr(target)
    blob.write(selection_bytes(value))
    return blob


def selection_json(space: Any) -> dict[str, Any]:
    """An h5py dataspace's selection as HDF5/JSON's region value (without ``id``)."""
    from h5py import h5s

    kind = space.get_select_type()
    if kind == h5s.SEL_ALL:
        return {"class": "H5S_SEL_ALL"}
    if kind == h5s.SEL_POINTS:
        pts = space.get_select_elem_pointlist()
        return {"class": "H5S_SEL_POINTS", "selection": np.asarray(pts).tolist()}
    if kind == h5s.SEL_HYPERSLABS:
        blocks = np.asarray(space.get_select_hyper_blocklist())
        return {"class": "H5S_SEL_HYPERSLABS",
                "selection": [{"start": b[0].tolist(), "opposite": b[1].tolist()} for b in blocks]}
    return {"class": "H5S_SEL_NONE"}
