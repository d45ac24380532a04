"""Descriptive baseline tags: kept as dataset attributes, served back as the same tags.

A scanner, a camera or an archive's TIFF says who made the image, with what, when and which way up
(DocumentName, Make, Model, PageName, DateTime, Artist, HostComputer, Copyright, Orientation). No
pixel depends on them, but they are what such a file is about beyond its pixels, and a copy of the
view's file (or a viewer honouring Orientation) should find them again. Like the GeoTIFF tags
(geo.py) each is an attribute named like the tag (tifffile's names), text as a string and
Orientation (1 to 8) as an integer, and the view writes them back onto every page. An attribute of
the wrong kind (made elsewhere: an HDF5 file's ``Model`` that is a number) is left out of the file.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...model import types as T
from ...model.schema import Dataset, Shape


@dataclass(frozen=True)
class DescriptiveTag:
    code: int
    name: str  # tifffile's tag name: the attribute's name too
    kind: str  # "text" (ASCII) or "orientation" (SHORT 1..8)


DESCRIPTIVE_TAGS: tuple[DescriptiveTag, ...] = (
    DescriptiveTag(269, "DocumentName", "text"),
    DescriptiveTag(271, "Make", "text"),
    DescriptiveTag(272, "Model", "text"),
    DescriptiveTag(274, "Orientation", "orientation"),
    DescriptiveTag(285, "PageName", "text"),
    DescriptiveTag(306, "DateTime", "text"),
    DescriptiveTag(315, "Artist", "text"),
    DescriptiveTag(316, "HostComputer", "text"),
    DescriptiveTag(33432, "Copyright", "text"),
)
DESCRIPTIVE_NAMES = tuple(t.name for t in DESCRIPTIVE_TAGS)
DESCRIPTIVE_CODES = frozenset(t.code for t in DESCRIPTIVE_TAGS)


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if not isinstance(v, str):
        return None
    v = v.rstrip("\0")
    return v if v and "\0" not in v else None  # a NUL would end the served tag's text


def _orientation(v: Any) -> int | None:
    try:
        n = int(v)
    except (TypeError, ValueError):
        return None
    return n if 1 <= n <= 8 and not isinstance(v, (bool, float)) else None


def descriptive_attributes(key: Any) -> dict[str, tuple[T.DType, Shape, Any]]:
    """The attributes (name -> type, shape, JSON value) a page's descriptive tags make."""
    tags = key.tags if hasattr(key, "tags") else {}
    out: dict[str, tuple[T.DType, Shape, Any]] = {}
    for d in DESCRIPTIVE_TAGS:
        tag = tags.get(d.code)
        value = _value(d, tag.value) if tag is not None else None
        if value is not None:
            kind = T.StringType(None, "utf8", "nullterm") if d.kind == "text" else T.IntType(2, False)
            out[d.name] = (kind, Shape("scalar"), value)
    return out


def descriptive_tags(ds: Dataset) -> tuple[tuple[str, Any], ...]:
    """(tag name, value) of the descriptive tags ``ds``'s attributes hold (module doc)."""
    out: list[tuple[str, Any]] = []
    for d in DESCRIPTIVE_TAGS:
        a = ds.attributes.get(d.name)
        value = _value(d, a.value) if a is not None else None
        if value is not None:
            out.append((d.name, value))
    return tuple(out)


def _value(d: DescriptiveTag, raw: Any) -> str | int | None:
    """``raw`` as tag ``d`` holds it (text, or an Orientation 1 to 8), or None if it is not one."""
    return _text(raw) if d.kind == "text" else _orientation(raw)
