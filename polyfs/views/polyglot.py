"""The polyglot view: one file that is a TIFF, an HDF5 file and a Zarr v3 shard at once.

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

The Zarr array is one shard covering the whole array (shard shape = the
chunk grid times the chunk, i.e. the shape rounded up to whole chunks) with
the stored chunk as inner chunk, codecs ``bytes`` (stored byte order) then
``zstd`` if compressed; attributes and dimension names as the Zarr view
gives them (zarr3.py). Writes are not supported here (read-only names).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..codecs.pipeline import Pipeline
from ..codecs.registry import ZSTD
from ..errors import PolyfsError, UnsupportedType
from ..model.chunks import ChunkIndex
from ..model.schema import Dataset, Group
from ..model.tree import DomainModel
from ..vfile import Literal, VFile, Zeros
from . import hdmf, tiff, zarr3
from .base import DirNode, FileNode, Node, ViewContext, literal_file
from .hdf5.dtypes import same_bytes
from .hdf5.single import SingleDatasetFile
from .tifftiles import tiff_code, zero_copy, zero_copy_tiles

log = logging.getLogger(__name__)

SUFFIX = ""
KIND = "dir"
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
              bigtiff: bool | None = None) -> PolyglotFile:
    """Lay the file out from the model and chunk sizes (pure). ``bigtiff``: force it
    on/off; None = BigTIFF when the file reaches 4 GiB."""
    reason = why_not(ds, pipe)
    if reason is not None:
        raise UnsupportedType(f"{title}: cannot be a polyglot file: {reason}")
    ok = idx.sizes > 0  # an empty object cannot be a chunk (HDF5): missing
    if not ok.all():
        idx = ChunkIndex(idx.dataset_id, idx.prefix, idx.grid, idx.linear[ok], idx.sizes[ok])
    geo, tiles = zero_copy_tiles(ds, idx, pipe)
    image = tiff.dataset_image(ds, parent, name, title, geo.tile, tiff_code(pipe))  # type: ignore[arg-type]
    h5 = SingleDatasetFile(ds, pipe, idx.linear, name=name, user_block=USER_BLOCK)
    fill = tiles.fill_tile if bool(np.any(tiles.rel < 0)) else b""
    nentries = ds.nchunks
    index_len = nentries * zarr3.INDEX_ENTRY.itemsize + zarr3.INDEX_CRC.size
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
    index = zarr3.shard_index_bytes(nentries, idx.linear, offsets, sizes)
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
    pf = plan_file(ds, parent, name, f"{model.path}{path}", idx, pipe)
    with _SHARED_LOCK:
        per = _SHARED.setdefault(catalog, {})
        hit = per.get(key)
        if hit is not None and hit[0] is model and hit[1] is idx:
            return hit[2]  # planned meanwhile by the other view: serve that one
        per[key] = (model, idx, pf)
    return pf


# -- the Zarr array ---------------------------------------------------------------------------
@dataclass
class OneShardPlan(zarr3.ArrayPlan):
    """The Zarr view's array plan with one shard covering the whole chunk grid."""

    @cached_property
    def factors(self) -> tuple[int, ...]:
        return tuple(self.grid)


def zarr_metadata(zdom: zarr3.ZarrDomain, ds: Dataset, path: str) -> dict[str, Any]:
    """``zarr.json`` of the polyglot array (the Zarr view's metadata, one whole-array shard)."""
    plan = zdom.array_plan(ds, path)
    if plan is None:
        raise UnsupportedType(f"{zdom.where(path)} has no Zarr form")
    whole = OneShardPlan(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.init})
    whole.sharded = True
    recipe, _ = whole.recipe_codecs
    if recipe.mode != "stored" or recipe.head or not whole.use_shards:
        raise UnsupportedType(f"{zdom.where(path)}: the Zarr view does not serve its chunks as stored")
    return whole.metadata()


# -- the view tree ------------------------------------------------------------------------------
class _DatasetFiles:
    """The three names of one dataset, built lazily around one shared plan."""

    def __init__(self, model: DomainModel, ds: Dataset, parent: Group | None, path: str, ctx: ViewContext,
                 zdom: "_LazyZarrDomain") -> None:
        self.model, self.ds, self.parent, self.path, self.ctx, self.zdom = model, ds, parent, path, ctx, zdom
        self.mtime = ds.last_modified or ds.created or None

    def vfile(self) -> VFile:
        pf = shared_file(self.model, self.ds, self.parent, self.path, self.ctx)
        if pf is None:  # qualified when listed; its chunks changed since
            raise UnsupportedType(f"{self.model.path}:{self.path} is no longer a polyglot dataset")
        return pf.vfile

    def nodes(self, stem: str) -> dict[str, Node]:
        return {stem + ".tif": FileNode(stem + ".tif", self.vfile, self.mtime),
                stem + ".h5": FileNode(stem + ".h5", self.vfile, self.mtime),
                stem + ".zarr": DirNode(stem + ".zarr", self._zarr_entries, self.mtime)}

    def _zarr_entries(self) -> dict[str, Node]:
        meta = zarr_metadata(self.zdom.get(), self.ds, self.path)
        node: Node = FileNode("0", self.vfile, self.mtime)
        for _ in range(self.ds.rank - 1):
            node = DirNode("0", {"0": node}, self.mtime)
        return {zarr3.META: literal_file(zarr3.META, hdmf.dumps(meta), self.mtime),
                zarr3.CHUNK_DIR: DirNode(zarr3.CHUNK_DIR, {"0": node}, self.mtime)}


class _LazyZarrDomain:
    """The Zarr view's hierarchy of the domain (object paths for attributes), made once."""

    def __init__(self, model: DomainModel, ctx: ViewContext) -> None:
        self.model, self.ctx = model, ctx
        self._zdom: zarr3.ZarrDomain | None = None
        self._lock = threading.Lock()

    def get(self) -> zarr3.ZarrDomain:
        with self._lock:
            if self._zdom is None:
                self._zdom = zarr3.ZarrDomain(self.model, self.ctx)
            return self._zdom


def domain_node(model: DomainModel, ctx: ViewContext, name: str) -> DirNode:
    """``polyglot/<stem>/``: per qualifying dataset ``<path>.tif``, ``<path>.h5``, ``<path>.zarr/``."""
    return DirNode(name, lambda: _tree(model, ctx), mtime=model.domain.last_modified or None)


def _qualifying(model: DomainModel, ctx: ViewContext) -> list[tuple[Any, Dataset]]:
    found = []
    for e in model.walk():
        ds = e.obj
        if not isinstance(ds, Dataset):
            continue
        try:
            if _candidate(ds, ctx):
                found.append((e, ds))
        except PolyfsError as exc:  # e.g. an unknown filter: that dataset only is left out
            log.info("polyglot view of %s: %s left out: %s", model.path, e.path, exc)
    ctx.catalog.prefetch_chunk_indexes([ds for _, ds in found])
    out = []
    for e, ds in found:
        try:
            reason = why_not(ds, ctx.catalog.pipeline(ds))
        except PolyfsError as exc:
            reason = str(exc)
        if reason is None:
            out.append((e, ds))
        else:
            log.info("polyglot view of %s: %s left out: %s", model.path, e.path, reason)
    return out


def _tree(model: DomainModel, ctx: ViewContext) -> dict[str, Node]:
    root: dict[str, Any] = {}
    files: dict[str, _DatasetFiles] = {}  # dataset id -> its files (aliases share them)
    zdom = _LazyZarrDomain(model, ctx)

    def place(path: str, f: _DatasetFiles) -> None:
        parts = [p for p in path.split("/") if p]
        d = root
        for part in parts[:-1]:
            sub = d.setdefault(part, {})
            if not isinstance(sub, dict):
                log.warning("polyglot view of %s: %s hides group %s", model.path, part, path)
                return
            d = sub
        leaves = f.nodes(parts[-1])
        if any(k in d for k in leaves):
            log.warning("polyglot view of %s: %s is shown once (name taken)", model.path, path)
            return
        d.update(leaves)

    for e, ds in _qualifying(model, ctx):
        parent = e.parent.obj if e.parent is not None and isinstance(e.parent.obj, Group) else None
        files[ds.id] = _DatasetFiles(model, ds, parent, e.path, ctx, zdom)
        place(e.path, files[ds.id])
    for gpath, link in model.aliases():
        if link.kind == "external":
            continue
        path = gpath.rstrip("/") + "/" + link.name
        try:
            target = model.resolve(path)
        except PolyfsError:  # dangling soft link
            continue
        if isinstance(target, Dataset) and target.id in files:
            place(path, files[target.id])

    def to_nodes(d: dict[str, Any]) -> dict[str, Node]:
        return {k: DirNode(k, to_nodes(v)) if isinstance(v, dict) else v for k, v in d.items()}

    return to_nodes(root)


__all__ = ["SUFFIX", "KIND", "PolyglotFile", "plan_file", "shared_file", "why_not", "zarr_metadata",
           "domain_node"]
