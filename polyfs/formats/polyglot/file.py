"""A polyglot file: one file that is a TIFF, an HDF5 file and a Zarr v3 shard at once.

``MNT/polyglot/<stem>/<dataset path>.tif`` and ``.h5`` are the same bytes;
``<dataset path>.zarr/`` is a Zarr v3 array (``zarr.json``) whose one shard
``c/0/0...`` (one ``0`` per dimension) is that same file again. The TIFF view
serves the same file as ``tiff/<stem>/<dataset path>.tif`` (see
:func:`shared_file`): it is one planned :class:`~polyfs.vfile.VFile`, so
every name reads identical bytes. Seed ``002_e4cb602d6657bcc2.txt`` (HDF5
user group 2025, "Using a HDF5 file as Zarr v3 shard") is the idea.

**Which datasets.** Images (``tiff.image_like``) whose stored chunks are
TIFF tiles as they are (``tifftiles.zero_copy``: chunk plane dims multiples
of 16, one plane deep, or uncompressed at any depth, where a tile is a plane
of the chunk) and whose effective pipeline is zstd or nothing: those bytes
are also valid HDF5 chunks (filter 32015 or none) and Zarr inner chunks
(``zstd`` or ``bytes`` alone). Deflate would need a gzip member for Zarr
(spliced bytes differ from the stored ones), so it is not shared; such
datasets keep the plain TIFF view and are absent here.

**Layout** (every offset from chunk sizes; no chunk data is read)::

    0        TIFF header (8 bytes, BigTIFF 16), then zeros: HDF5's user block
    512      HDF5 superblock 0 and metadata (hdf5/single.py)
    ...      TIFF IFD chain with its values (8-aligned; tiff.tiff_metadata)
    ...      one fill tile, if any tile has no chunk (the dataset's codec)
    ...      the stored chunk objects once, C order        <- HDF5 end of file
    ...      Zarr shard index, (offset, nbytes) LE per chunk + CRC32C: last bytes

TIFF tile offsets, HDF5 B-tree addresses and the shard index point at the
same chunk bytes. All metadata sits in the first few KB after the user
block, so opening the file through any format reads one region. A missing
chunk is, per format: the shared fill tile (TIFF needs every tile), absent
from the B-tree (HDF5 returns the fill value), ``2^64-1`` twice (Zarr uses
``fill_value``). Leading dimensions are TIFF pages (one IFD per plane); the
tiles of a page are chunks (or planes of uncompressed chunks), so a chunk is
still stored once. Past 4 GiB (the whole file) the TIFF part is BigTIFF;
HDF5 and Zarr use 8-byte offsets anyway. HDF5 ignores the bytes past its
end-of-file address, and Zarr junk before the first chunk.

The view of these files (three names per dataset) is view.py.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codecs.pipeline import Pipeline
from ...codecs.registry import ZSTD
from ...errors import UnsupportedType
from ...model.chunks import ChunkIndex
from ...model.schema import Dataset, Group
from ...model.tree import DomainModel
from ...vfile import Literal, VFile, Zeros
from ...views import hdmf
from ...views.base import ViewContext
from ..hdf5.dtypes import same_bytes
from ..hdf5.single import SingleDatasetFile
from ..tiff import image as tiff
from ..tiff.geo import CFGeo, find_cf_geo
from ..tiff.coords import coordinate_reader
from ..tiff.tiles import tiff_code, zero_copy, zero_copy_tiles
from ..zarr.spec import DEFAULT_INDEX, shard_index_bytes

USER_BLOCK = 512  # HDF5 user block: the TIFF header lives in it


# -- which datasets ----------------------------------------------------------------------
def why_not(ds: Dataset, pipe: Pipeline) -> str | None:
    """Why ``ds`` (stored under ``pipe``) cannot be a polyglot file; None if it can. Pure."""
    if not tiff.image_like(ds):
        return "not an image (two or more dimensions of a numeric type)"
    if not (pipe.is_identity or pipe.only(ZSTD)):
        return f"stored as {'+'.join(f.name for f in pipe.filters)}, not zstd or uncompressed"
    if not zero_copy(ds, None, pipe):
        return f"chunks {list(ds.chunks)} are not TIFF tiles (plane dims multiples of 16, one plane deep)"
    if not same_bytes(ds.type):
        return "HDF5 bytes differ from the stored ones"
    try:
        hdmf.zarr_type(ds.type)
    except UnsupportedType as exc:
        return str(exc)
    return None


def _candidate(ds: Dataset, ctx: ViewContext) -> bool:
    """Cheap pre-check from the model and the declared filters (no store access)."""
    if not tiff.image_like(ds):
        return False
    declared = ctx.catalog.declared_pipeline(ds)
    return why_not(ds, declared) is None


# -- the file ------------------------------------------------------------------------------
@dataclass
class PolyglotFile:
    """One dataset's polyglot file and where every format's index points."""

    vfile: VFile
    big: bool  # BigTIFF
    linear: np.ndarray  # existing chunks, C order (as laid out)
    chunk_offsets: np.ndarray  # absolute offset of each
    chunk_sizes: np.ndarray
    tile_offsets: np.ndarray  # (npages, tiles per page)
    tile_counts: np.ndarray
    tiff_at: int  # first IFD
    fill_at: int  # the fill tile, -1 if none
    hdf5_end: int  # HDF5's end-of-file address (absolute)
    index_at: int  # start of the shard index (runs to the end)

    @property
    def size(self) -> int:
        return self.vfile.size


def plan_file(ds: Dataset, parent: Group | None, name: str, title: str, idx: ChunkIndex, pipe: Pipeline,
              bigtiff: bool | None = None, cf: CFGeo | None = None) -> PolyglotFile:
    """Lay the file out from the model and chunk sizes (pure). ``bigtiff``: force it
    on/off; None = BigTIFF when the file reaches 4 GiB. ``cf``: the dataset's CF
    georeferencing (GeoTIFF tags, tiff/geo.py)."""
    reason = why_not(ds, pipe)
    if reason is not None:
        raise UnsupportedType(f"{title}: cannot be a polyglot file: {reason}")
    ok = idx.sizes > 0  # an empty object cannot be a chunk (HDF5): missing
    if not ok.all():
        idx = ChunkIndex(idx.dataset_id, idx.prefix, idx.grid, idx.linear[ok], idx.sizes[ok])
    geo, tiles = zero_copy_tiles(ds, idx, pipe)
    image = tiff.dataset_image(ds, parent, name, title, geo.tile, tiff_code(pipe),  # type: ignore[arg-type]
                               cf)
    h5 = SingleDatasetFile(ds, pipe, idx.linear, name=name, user_block=USER_BLOCK)
    fill = tiles.fill_tile if bool(np.any(tiles.rel < 0)) else b""
    nentries = ds.nchunks
    index_len = DEFAULT_INDEX.nbytes(nentries)
    tiff_at = -(-h5.data_start // 8) * 8  # IFDs: 2-aligned (classic), 8 (BigTIFF)
    for big in ((False, True) if bigtiff is None else (bigtiff,)):
        meta_len = tiff.tiff_metadata_size(image, big)
        fill_at = tiff_at + meta_len
        chunk_start = fill_at + len(fill)
        end = chunk_start + tiles.length
        if bigtiff is None and not big and tiff.needs_bigtiff(end + index_len):
            continue
        break
    sizes = idx.sizes.astype(np.int64)
    offsets = np.full(len(sizes), chunk_start, dtype=np.int64)
    if len(sizes) > 1:
        offsets[1:] += np.cumsum(sizes[:-1])
    assert int(sizes.sum()) == tiles.length  # the tile data is the chunk objects once, C order
    tile_offsets, tile_counts = tiles.absolute(chunk_start, fill_at)
    tiff_meta = tiff.tiff_metadata(image, tiff_at, tile_offsets, tile_counts, big)
    assert len(tiff_meta) == meta_len
    head = tiff.tiff_header(image, big, first_ifd=tiff_at)
    h5meta = h5.render_segments(offsets, sizes, end)  # a big chunk B-tree is packed on first read
    index = shard_index_bytes(nentries, idx.linear, offsets, sizes)
    vf = VFile([Literal(head.ljust(USER_BLOCK, b"\0")), *h5meta, Zeros(tiff_at - h5.data_start),
                Literal(tiff_meta), Literal(fill), *tiles.segments, Literal(index)])
    assert vf.size == end + index_len
    return PolyglotFile(vf, big, idx.linear, offsets, sizes, tile_offsets, tile_counts, tiff_at,
                        fill_at if fill else -1, end, end)


# one plan per dataset, shared by the TIFF view and this one (same VFile object);
# a new model or chunk index (a write, a re-listing) makes a new plan
_SHARED: "weakref.WeakKeyDictionary[Any, dict[tuple, tuple[Any, Any, PolyglotFile]]]" = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared_file(model: DomainModel, ds: Dataset, parent: Group | None, path: str,
                ctx: ViewContext) -> PolyglotFile | None:
    """The polyglot file of the dataset at canonical ``path``, or None if it does not
    qualify (the TIFF view then builds its own file). Lists chunks and sniffs one."""
    if not _candidate(ds, ctx):
        return None
    catalog = ctx.catalog
    idx = catalog.chunk_index(ds)
    pipe = catalog.pipeline(ds)
    if why_not(ds, pipe) is not None:
        return None
    key = (model.path, ds.id, path)
    with _SHARED_LOCK:
        hit = _SHARED.setdefault(catalog, {}).get(key)
    if hit is not None and hit[0] is model and hit[1] is idx:
        return hit[2]
    name = path.rsplit("/", 1)[-1]
    pf = plan_file(ds, parent, name, f"{model.path}{path}", idx, pipe,
                   cf=find_cf_geo(model, path, ds, coordinate_reader(ctx)))
    with _SHARED_LOCK:
        per = _SHARED.setdefault(catalog, {})
        hit = per.get(key)
        if hit is not None and hit[0] is model and hit[1] is idx:
            return hit[2]  # planned meanwhile by the other view: serve that one
        per[key] = (model, idx, pf)
    return pf
