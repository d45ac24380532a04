"""Attributes a Zarr or N5 metadata file carries -> typed model attributes and changes.

Pure: a metadata write's attributes are typed from their JSON values here, and a
rewrite is diffed against what the view showed, so attributes the view does not
show (netCDF bookkeeping, CF ``units`` in ``n5/``) are kept.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..model.changes import ObjectChange
from ..model.jsonattrs import json_attribute_record
from ..model.schema import Attribute, Dataset, Group, now
from ..views import hdmf
from .arraycheck import same_json_value


def typed_attributes(attrs: dict[str, Any], dimension_names: Sequence[str | None] | None) -> dict[str, Attribute]:
    """``attrs`` typed from JSON (polyfs's reserved names left out), and the dimension names
    (Zarr ``dimension_names``) as ``_ARRAY_DIMENSIONS`` when some are given and none is."""
    out = {}
    for name, value in attrs.items():
        if not name or name in hdmf.RESERVED:
            continue
        out[name] = json_attribute_record(name, value, now())
    if dimension_names and any(d is not None for d in dimension_names) and hdmf.ARRAY_DIMENSIONS not in out:
        out[hdmf.ARRAY_DIMENSIONS] = json_attribute_record(hdmf.ARRAY_DIMENSIONS,
                                                           [d or "" for d in dimension_names], now())
    return out


def attribute_change(obj: Group | Dataset, written: dict[str, Any], shown: dict[str, Any]) -> ObjectChange:
    """Attributes as written: changed or new ones typed from JSON, shown ones left out removed
    (attributes the view does not show are kept)."""
    changed = {k: v for k, v in written.items()
               if k not in hdmf.RESERVED and not (k in shown and same_json_value(shown[k], v))}
    removed = [k for k in shown if k not in written]
    return ObjectChange(obj.id, typed_attributes(changed, None), removed)


def recorded_dimension_names(names: list[str]) -> dict[str, Attribute]:
    """The attribute a delete of a dimension scale records on a dataset using it."""
    return {hdmf.ARRAY_DIMENSIONS: json_attribute_record(hdmf.ARRAY_DIMENSIONS, names, now())}
