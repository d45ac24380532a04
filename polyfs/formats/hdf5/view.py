"""The HDF5 view: ``MNT/hdf5/<stem>.h5``, a whole domain as one HDF5 file.

The file is synthesized from the model and the chunk sizes (render.py):
superblock 0 at offset 0 (2 or 3 when the file was written so: hints.py; after the
user block the domain's file had, a MAT-file's header: userblock.py), version 2
object headers recording the creation order of attributes (unless the file's object
tracked none), link messages with creation orders (symbol-table groups
past 1024 links), attributes of every type, committed types, fill values,
the effective filter pipeline and a version 1 B-tree chunk index whose
addresses point at the stored chunk objects laid out after all metadata
(served zero-copy). HDF5 1.10, 1.14, 2.0,
pyfive, netCDF and GDAL read it. Opening never reads chunk data except for
variable-length datasets, whose global heap is built from their chunks.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ...codecs.pipeline import Pipeline
from ...errors import InvalidInput, UnsupportedType
from ...model import types as T
from ...model.schema import Dataset
from ...model.tree import DomainModel
from ...views.base import FileNode, ViewContext
from .dtypes import disk_itemsize, encode_type, has_padding
from .render import HDF5File, Planner, plan_domain
from .single import SingleDatasetFile

def domain_node(model: DomainModel, ctx: ViewContext, name: str) -> FileNode:
    """The domain's file node; planned once, on first ``stat`` or open."""
    holder: dict[str, Any] = {}
    lock = threading.Lock()

    def build() -> HDF5File:
        with lock:
            if "file" not in holder:
                holder["planner"], holder["file"] = plan_domain(model, ctx)
            return holder["file"]

    def opened() -> OpenedFile:
        hf = build()
        return OpenedFile(model, holder["planner"], hf)

    mtime = ctx.catalog.domain_modified(model)  # the newest object, chunk writes through any view included
    node = FileNode(name, lambda: build().vfile, mtime=mtime, size_hint=lambda: build().size)
    node.hdf5 = build  # type: ignore[attr-defined]  # tests and tools reach the plan through this
    node.opened = opened  # type: ignore[attr-defined]  # the ingester compares a written file with it
    return node


@dataclass(frozen=True)
class OpenedFile:
    """What a writer opened: the model the view's file was planned from, the plan and the file."""

    model: DomainModel
    planner: Planner
    file: HDF5File


def describe(ds: Dataset, pipe: Pipeline) -> str:
    """How this view serves a dataset (``polyfs info``): chunk bytes as stored, except
    variable-length and reference data, whose disk form HDF5 spells differently, padded
    compounds and filtered scalars (render.py)."""
    try:
        encode_type(ds.type)
        disk_itemsize(ds.type)
    except (UnsupportedType, InvalidInput):
        return "-"  # left out of the file
    if ds.type.is_vlen:
        return "transcoded (variable-length)"
    if T.has_reference(ds.type):
        return "transcoded (references)"
    if has_padding(ds.type):  # stored packed (HSDS's layout); render.py places the members, unfiltered
        return "transcoded (padded compound)"
    if ds.shape.kind == "scalar" and not pipe.is_identity:  # HDF5 cannot chunk a scalar: decoded
        return "transcoded (filtered scalar)"
    return "zero-copy"


__all__ = ["domain_node", "describe", "OpenedFile", "HDF5File", "SingleDatasetFile"]
