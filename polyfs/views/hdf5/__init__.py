"""The HDF5 view: ``MNT/hdf5/<stem>.h5``, a whole domain as one HDF5 file.

The file is synthesized from the model and the chunk sizes (render.py):
superblock 0 after a free 512-byte user block, version 1 object headers,
symbol-table groups (link messages where external links are), attributes of
every type, committed types, fill values, the effective filter pipeline and
a version 1 B-tree chunk index whose addresses point at the stored chunk
objects laid out after all metadata (served zero-copy). HDF5 1.10, 1.14, 2.0,
pyfive, netCDF and GDAL read it. Opening never reads chunk data except for
variable-length datasets, whose global heap is built from their chunks.

Modules: structs.py (binary layouts as data), layout.py (address planning),
dtypes.py (datatype messages, disk bytes), messages.py (object header
messages), btree.py (chunk and group B-trees), vlheap.py (global heaps),
render.py (a domain's file), single.py (the polyglot API below).

Polyglot API (single.py): one dataset as HDF5 metadata for chunks the caller
places (shared with TIFF tiles and a Zarr shard)::

    h5 = SingleDatasetFile(ds, catalog.pipeline(ds), linear, name="data")
    h5.metadata_size, h5.data_start      # known before any chunk offset
    meta = h5.render(offsets, sizes, end)  # bytes for [512, h5.data_start)

The first 512 bytes stay free (TIFF header); ``end`` is HDF5's end of file
(the shard index goes after it).
"""
from __future__ import annotations

import threading

from ...model.tree import DomainModel
from ..base import FileNode, ViewContext
from .render import HDF5File, render_domain
from .single import SingleDatasetFile

SUFFIX = ".h5"
KIND = "file"


def domain_node(model: DomainModel, ctx: ViewContext, name: str) -> FileNode:
    """The domain's file node; planned once, on first ``stat`` or open."""
    holder: dict[str, HDF5File] = {}
    lock = threading.Lock()

    def build() -> HDF5File:
        with lock:
            if "file" not in holder:
                holder["file"] = render_domain(model, ctx)
            return holder["file"]

    mtime = model.domain.last_modified or None
    node = FileNode(name, lambda: build().vfile, mtime=mtime, size_hint=lambda: build().size)
    node.hdf5 = build  # type: ignore[attr-defined]  # tests and tools reach the plan through this
    return node


__all__ = ["SUFFIX", "KIND", "domain_node", "render_domain", "HDF5File", "SingleDatasetFile"]
