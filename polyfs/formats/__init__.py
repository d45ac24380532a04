"""One package per format: everything a format means lives in its package.

Each package (``zarr``, ``n5``, ``hdf5``, ``tiff``, ``polyglot``) holds its
metadata and binary layouts (``spec.py``), its view (``view.py``: model ->
files), its ingester (``ingest.py``: written files -> a change set) and its
importer (``source.py``), and declares them with a :class:`Format` in its
``__init__``. :data:`PACKAGES` is the one list of formats; its order is the
order of the view directories and of import detection.
"""
from __future__ import annotations

import importlib
from functools import cache

from .base import Format

PACKAGES = ("zarr", "n5", "hdf5", "tiff", "polyglot")


@cache
def formats() -> tuple[Format, ...]:
    return tuple(importlib.import_module(f"{__name__}.{p}").FORMAT for p in PACKAGES)


def by_name(name: str) -> Format | None:
    for f in formats():
        if f.name == name:
            return f
    return None


__all__ = ["Format", "PACKAGES", "formats", "by_name"]
