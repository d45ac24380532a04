"""One dataset as an HDF5 file whose chunk bytes the caller places (polyglot files).

A polyglot file is at once a TIFF (header at offset 0, inside HDF5's 512-byte
user block), an HDF5 file and a Zarr v3 shard (index as the last bytes; HDF5
ignores bytes past its end-of-file address). The chunk bytes are stored once
and every format's index points at them. This module gives the HDF5 part:

    from polyfs.views.hdf5.single import SingleDatasetFile

    h5 = SingleDatasetFile(ds, catalog.pipeline(ds), linear, name="data")
    h5.metadata_size        # bytes of HDF5 metadata, written at offset h5.user_block (512)
    h5.data_start           # user_block + metadata_size: the first offset free for chunk data
    # ... the caller puts chunk i (C-order number linear[i]) at absolute offset offsets[i] ...
    blob = h5.render(offsets, sizes, end)   # bytes for [512, 512 + metadata_size)

``linear`` (sorted C-order chunk numbers of the chunks that exist) fixes the
size of the chunk B-tree, so ``metadata_size`` is known before any offset;
``offsets`` and ``sizes`` (absolute file offsets and stored sizes, aligned
with ``linear``) may point anywhere at or past ``data_start``, in any order,
and several entries may share bytes. ``end`` is HDF5's end-of-file address
(absolute): at least the end of every chunk, at most the file size; put the
shard index after it. Missing chunks are simply not in ``linear`` (HDF5
returns the fill value). The structures are those of the domain view
(superblock 0, version 1 object headers and B-tree): HDF5 1.10 to 2.0 and
pyfive read the file. The dataset's attributes come along (``attributes``);
references inside them can only point at the dataset itself.

Only chunked datasets of fixed-size types without references qualify (their
chunk bytes are HDF5's chunk bytes); anything else is UnsupportedType.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...codecs.pipeline import Pipeline
from ...errors import InvalidInput
from ...model import ids
from ...model.schema import Dataset, Domain, Group, Link
from ...model.tree import DomainModel
from ...vfile import Literal, Produced, Segment
from .btree import LazyNodes
from .render import USER_BLOCK, DomainRenderer


class SingleDatasetFile:
    def __init__(self, ds: Dataset, pipeline: Pipeline, linear: np.ndarray, name: str = "data",
                 attributes: bool = True, user_block: int = USER_BLOCK) -> None:
        if user_block < 512 or user_block & (user_block - 1):
            raise InvalidInput(f"an HDF5 user block is a power of two of at least 512 bytes, not {user_block}")
        root_id = ids.root_of(ds.id)
        root = Group(root_id, root_id, links={name: Link(name, "hard", id=ds.id)})
        shown = ds if attributes else dataclasses.replace(ds, attributes={})
        model = DomainModel(Domain.new("/" + name, root_id), groups={root_id: root}, datasets={ds.id: shown})
        self.linear = np.asarray(linear, dtype=np.int64)
        if len(self.linear) and (np.any(np.diff(self.linear) <= 0) or self.linear[0] < 0
                                 or self.linear[-1] >= max(1, ds.nchunks)):
            raise InvalidInput(f"dataset {ds.id}: chunk numbers must be sorted, unique and inside the grid")
        self.user_block = user_block
        self._renderer = DomainRenderer(model, None, user_block, placed={ds.id: (self.linear, pipeline)})
        self._plan = self._renderer.layout()
        self._btree = self._renderer.datasets[ds.id].btree
        self.metadata_size = self._plan.end

    @property
    def data_start(self) -> int:
        return self.user_block + self.metadata_size

    def render(self, offsets: np.ndarray, sizes: np.ndarray, end: int) -> bytes:
        """The metadata bytes (for offset ``user_block``) indexing chunks at ``offsets``."""
        return b"".join(seg.data if isinstance(seg, Literal) else seg.producer.produce(None)  # type: ignore[attr-defined]
                        for seg in self.render_segments(offsets, sizes, end))

    def render_segments(self, offsets: np.ndarray, sizes: np.ndarray, end: int) -> list[Segment]:
        """:meth:`render` as segments: a chunk B-tree of many nodes stays a producer packed
        on first read (as in the HDF5 view), so planning a million chunks does not pack it."""
        offsets = np.asarray(offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        n = len(self.linear)
        if offsets.shape != (n,) or sizes.shape != (n,):
            raise InvalidInput(f"need {n} chunk offsets and sizes, got {offsets.shape} and {sizes.shape}")
        if n and (offsets.min() < self.data_start or sizes.min() <= 0 or int((offsets + sizes).max()) > end):
            raise InvalidInput("chunks must lie between the HDF5 metadata and the end-of-file address")
        if n and int(sizes.max()) >= 1 << 32:
            raise InvalidInput("a chunk of 4 GiB or more cannot be indexed by an HDF5 chunk B-tree")
        if end < self.data_start:
            raise InvalidInput(f"end {end} is inside the HDF5 metadata (ends at {self.data_start})")
        self._btree.offsets = offsets - self.user_block  # HDF5 addresses are relative to the superblock
        self._btree.sizes = sizes
        self._plan.eof = end - self.user_block
        out: list[Segment] = []
        for seg in self._plan.render()[1:]:  # [0]: the user block's zeros
            if isinstance(seg, Produced) and isinstance(seg.producer, LazyNodes):
                lazy = seg.producer  # keep this call's addresses: the tree object is reused by the next call
                seg = Produced(dataclasses.replace(lazy, tree=dataclasses.replace(lazy.tree)))
            out.append(seg)
        assert sum(seg.length for seg in out) == self.metadata_size
        return out

__all__ = ["SingleDatasetFile"]
