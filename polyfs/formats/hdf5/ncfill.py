"""``_FillValue`` shown with its variable's type, as netCDF-4 requires.

netCDF-C refuses a ``_FillValue`` attribute whose type is not its variable's
(``NC_EBADTYPE``, "Not a valid data type or _FillValue type mismatch") when
it copies or defines one: ``nccopy`` of such a file fails, and so does
``xarray.open_dataset(...).to_netcdf()`` through netCDF4 wherever the value
is passed on as it was read. JSON attributes (Zarr ``zarr.json``, N5
``attributes.json``, written through the views or imported) are typed from
JSON alone (int64 or float64): xarray's ``_FillValue`` of a ``float32`` or
``int16`` array arrives as a float64 or int64. The HDF5 view shows such an
attribute with its dataset's numeric type when the value is one of that type
(what netCDF and xarray's netCDF writer would have written); the store keeps
it as written, and a writer of the HDF5 view that leaves it as shown changes
nothing (diff.py compares against what is shown here).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import PolyfsError
from ...model import types as T
from ...model import values
from ...model.schema import Attribute, Dataset

FILL = "_FillValue"


def _numeric(t: T.DType) -> T.IntType | T.FloatType | None:
    t = T.resolved(t)
    return t if isinstance(t, (T.IntType, T.FloatType)) and t.exact else None


def _fits(x: Any, target: T.IntType | T.FloatType) -> Any | None:
    """``x`` as a value of ``target``, or None when it is not one (out of range, a fraction)."""
    if isinstance(target, T.IntType):
        if isinstance(x, float) and not x.is_integer():
            return None
        try:
            v = int(x)
        except (ValueError, OverflowError):
            return None
        info = np.iinfo(target.numpy())
        return v if info.min <= v <= info.max else None
    v = float(x)
    if math.isnan(v):
        return v
    with np.errstate(over="ignore"):
        got = float(np.asarray(v).astype(target.numpy()))
    return got if math.isfinite(got) or not math.isfinite(v) else None


def shown_fill(obj: Any, name: str, attr: Attribute) -> Attribute:
    """``attr`` as the HDF5 view shows it on ``obj``: a one-element numeric ``_FillValue`` of a
    numeric dataset takes the dataset's type (little-endian) when its value is one of it."""
    if name != FILL or not isinstance(obj, Dataset):
        return attr
    target, have = _numeric(obj.type), _numeric(attr.type)
    if target is None or have is None or (type(target), target.size) == (type(have), have.size) and (
            not isinstance(target, T.IntType) or target.signed == have.signed):
        return attr
    if attr.shape.kind not in ("scalar", "simple") or attr.shape.kind == "simple" and attr.shape.size != 1:
        return attr
    try:
        x = values.to_numpy(attr.type, attr.shape, attr.value).reshape(-1)[0].item()
    except (PolyfsError, ValueError, TypeError, IndexError):  # a value that does not read: shown as it is
        return attr
    v = _fits(x, target)
    if v is None:
        return attr
    t = target.with_order("<")
    v = values.element_to_json(t, np.asarray(v, t.numpy())[()])
    value = v if attr.shape.kind == "scalar" else [v]
    return Attribute(name, t, attr.shape, value, attr.created, dict(attr.extra))


__all__ = ["FILL", "shown_fill"]
