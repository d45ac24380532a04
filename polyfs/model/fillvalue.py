"""The ``fillValue`` of a dataset's creation properties in its two HSDS spellings.

HSDS takes a fill value either as a JSON value (h5pyd, polyfs) or, with
``"fillValue_encoding": "base64"``, as base64 of one element's stored bytes: the
HDF5 REST VOL connector (HDF5 C programs talking to HSDS) sends every fill value
that way and, reading a dataset back, accepts nothing else. polyfs works with the
JSON value and writes the stored spelling back as it found it, so a dataset such
a program made stays readable by it after polyfs rewrites the object.
"""
from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping

import numpy as np

from ..errors import InvalidInput, SchemaError
from .types import DType

ENCODING_KEY = "fillValue_encoding"
BASE64 = "base64"


def is_base64(cpl: Mapping[str, Any]) -> bool:
    """Whether ``creationProperties`` spell the fill value as base64 bytes (HSDS also
    accepts the string ``"None"`` for no encoding)."""
    return cpl.get(ENCODING_KEY) == BASE64


def from_stored(t: DType, cpl: Mapping[str, Any], where: str) -> Any:
    """The fill value as a JSON value (None = the type's zeros), whatever the spelling."""
    fill = cpl.get("fillValue")
    if fill is None or not is_base64(cpl):
        return fill
    if not isinstance(fill, str):
        raise SchemaError(f"{where}: a base64 fillValue must be a string, not {fill!r:.60}")
    try:
        raw = base64.b64decode(fill.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SchemaError(f"{where}: fillValue {fill!r:.60} is not base64") from None
    dt = t.numpy()
    if dt.hasobject:
        raise SchemaError(f"{where}: a base64 fillValue needs a fixed-size type, not {t}")
    if len(raw) != dt.itemsize:
        raise SchemaError(f"{where}: base64 fillValue holds {len(raw)} bytes, one element of {t} "
                          f"is {dt.itemsize}")
    from .values import element_to_json  # values imports schema, which imports this module

    element = np.frombuffer(raw, dtype=np.dtype([("v", dt)]))[0]["v"]
    try:
        return element_to_json(t, element)
    except InvalidInput as exc:
        raise SchemaError(f"{where}: fillValue: {exc}") from None


def to_stored(t: DType, fill: Any, cpl: Mapping[str, Any]) -> Any:
    """The ``fillValue`` to write for the JSON value ``fill``, in the dataset's spelling."""
    if not is_base64(cpl):
        return fill
    from .values import fill_bytes

    return base64.b64encode(fill_bytes(t, fill)).decode("ascii")
