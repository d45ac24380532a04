"""Padded compounds at import: the file's chunks re-encoded in the store's packed layout.

The store is HSDS's: a compound's chunk bytes are its members back to back
(``CompoundType.numpy()``), whatever HDF5 offsets and size the type records
(C-struct alignment, as netCDF writes it; kept under the type JSON's
``"polyfs"`` key for the HDF5 view). A chunked dataset whose filters would let
its chunks be copied (source.py) is imported with the same filters and byte
order, but each chunk is decoded with the file's filters, its elements moved
from the file's layout to the packed one, and encoded again with the stored
pipeline. Shuffle (and blosc's typesize) then work on the packed element size,
as HSDS sets them from the type. A chunk stored with a filter skipped (nonzero
filter mask) is read through HDF5 instead.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...codecs.pipeline import Pipeline
from ...codecs.registry import BLOSC, SHUFFLE, Filter
from ...importers.common import ChunkSink, Progress, chunk_region, padded
from ...model import types as T
from ...model import values
from ...model.schema import Dataset
from .dtypes import disk_dtype, disk_itemsize, has_padding


def needs_repack(t: T.DType) -> bool:
    """True when the file's element bytes of ``t`` are not the store's packed layout."""
    return not t.is_vlen and not T.has_reference(t) and has_padding(t)


def packed_filters(filters: list[Filter], t: T.DType) -> list[Filter]:
    """The file's filters for chunks of the packed layout: shuffle's element size and
    blosc's typesize become the packed element size (HSDS derives them from the type)."""
    size = _element(t.numpy()).itemsize
    out = []
    for f in filters:
        if f.id == SHUFFLE:
            f = Filter(SHUFFLE, (size,) + tuple(f.cd_values[1:]))
        elif f.id == BLOSC and len(f.cd_values) > 2:
            f = Filter(BLOSC, tuple(f.cd_values[:2]) + (min(size, 255),) + tuple(f.cd_values[3:]))
        out.append(f)
    return out


def packed_values(arr: np.ndarray, t: T.DType) -> np.ndarray:
    """Values read in the file's layout (h5py, raw reads) in the packed layout of ``t``."""
    arr = np.asarray(arr)
    base = _element(t.numpy())
    if arr.dtype == base or arr.dtype.names is None:
        return arr
    return values.as_layout(arr, base)


def copy_repacked(d: Any, ds: Dataset, source_filters: list[Filter], t: T.DType, sink: ChunkSink,
                  chunks: list[tuple[tuple[int, ...], int, tuple[int, ...]]],
                  read: Callable[[tuple], np.ndarray], bar: Progress) -> None:
    """Every chunk of ``d`` the file holds (``chunks``: coords, filter mask, offset) decoded
    with the file's filters, repacked, and handed to ``sink`` to encode as stored."""
    disk = _element(disk_dtype(t))
    count = int(np.prod(ds.chunks))
    source = Pipeline(tuple(source_filters), disk.itemsize)
    nbytes = count * disk_itemsize(t)
    for coords, mask, offset in chunks:
        if mask == 0:
            _, data = d.id.read_direct_chunk(offset)
            sink.job(ds, coords, _repack_one, sink.writer, ds, source, bytes(data), nbytes, disk)
        else:  # a filter was skipped for this chunk: HDF5 decodes it
            sink.encoded(ds, coords, padded(ds, packed_values(read(chunk_region(ds, coords)), t)))
        bar(1)


def _repack_one(writer: Any, ds: Dataset, source: Pipeline, data: bytes, nbytes: int,
                disk: np.dtype) -> tuple[bytes, int | None]:
    raw = source.decode(data, nbytes) if not source.is_identity else data
    block = np.frombuffer(raw, dtype=disk).reshape(_block_shape(ds, disk))
    return writer.encode_chunk(ds, block)


def _block_shape(ds: Dataset, disk: np.dtype) -> tuple[int, ...]:
    """The chunk's shape in elements of ``disk`` (an array type folds its dims in)."""
    t = T.resolved(ds.type)
    inner = tuple(t.dims) if isinstance(t, T.ArrayType) else ()
    return tuple(ds.chunks) + inner if ds.chunks else inner


def _element(dt: np.dtype) -> np.dtype:
    return dt.subdtype[0] if dt.subdtype is not None else dt


__all__ = ["needs_repack", "packed_filters", "packed_values", "copy_repacked"]
