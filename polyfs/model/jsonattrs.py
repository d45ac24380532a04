"""JSON attribute values (Zarr ``attributes``, N5 ``attributes.json``) as typed HDF5 attributes.

Both the importers and the write path read attributes written as JSON; the
rule that types them is here, once.
"""
from __future__ import annotations

import json
from typing import Any

from . import types as T
from .schema import Attribute, Shape

VL_UTF8 = T.StringType(None, "utf8", "nullterm")
INT64 = T.IntType(8, True, "<")
UINT64 = T.IntType(8, False, "<")
FLOAT64 = T.FloatType(8, "<")
JSON_TEXT = "polyfs_json"  # in an attribute's record: its string value is JSON text


def json_attribute(value: Any) -> tuple[T.DType, Shape, Any]:
    """(type, shape, JSON value) for an attribute given as JSON.

    bool -> bool enum, int -> int64 (uint64 beyond), float -> float64, str -> VL
    UTF-8 string, a non-empty flat list of one of those kinds -> a 1-D array of
    it (ints and floats mixed -> float64); anything else (objects, nested or
    mixed lists, null, empty lists) -> its JSON text as a VL UTF-8 string.
    """
    scalar = _json_scalar_type(value)
    if scalar is not None:
        return scalar, Shape("scalar"), value
    if isinstance(value, list) and value and not any(isinstance(v, (list, dict)) for v in value):
        kinds = {_json_scalar_type(v) for v in value}
        if len(kinds) == 1 and None not in kinds:
            return kinds.pop(), Shape("simple", (len(value),)), value
        if kinds <= {INT64, UINT64, FLOAT64}:
            return FLOAT64, Shape("simple", (len(value),)), [float(v) for v in value]
    return VL_UTF8, Shape("scalar"), json.dumps(value, allow_nan=True)


def json_attribute_record(name: str, value: Any, created: float) -> Attribute:
    """The attribute for a JSON value. One stored as JSON text (no HDF5 type holds it) is
    marked so, and the JSON views give it back as the value written (OME-Zarr
    ``multiscales``, a ``null``), while a string written as a string stays one."""
    t, shape, stored = json_attribute(value)
    extra = {JSON_TEXT: True} if t == VL_UTF8 and shape.kind == "scalar" and not isinstance(value, str) else {}
    return Attribute(name, t, shape, stored, created, extra)


def json_of(attr: Attribute, text: str) -> Any:
    """What a JSON view shows for a string attribute: the JSON value it holds when it was
    stored as JSON text (marked), else the string itself."""
    if not attr.extra.get(JSON_TEXT):
        return text
    try:
        return json.loads(text)
    except ValueError:  # rewritten since (through the HDF5 view) as plain text
        return text


def _json_scalar_type(v: Any) -> T.DType | None:
    if isinstance(v, bool):
        return T.BOOL
    if isinstance(v, int):
        if -(2 ** 63) <= v < 2 ** 63:
            return INT64
        if 0 <= v < 2 ** 64:
            return UINT64
        return None
    if isinstance(v, float):
        return FLOAT64
    if isinstance(v, str):
        return VL_UTF8
    return None


