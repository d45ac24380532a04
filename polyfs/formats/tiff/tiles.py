"""Where a TIFF view's tiles come from: stored chunks as they are, or transcoded.

**Zero-copy** when the stored bytes are valid TIFF tiles: the codec has a
TIFF code (none=1, deflate=8, zstd=50000; ``CodecSpec.tiff``), nothing else is
in the pipeline, the chunk's two plane dims are multiples of 16 and the chunk
is one plane deep. Uncompressed chunks qualify at any depth: plane ``k`` of a
chunk is the contiguous byte range ``k * plane_bytes``. The tile data is then
one :class:`ChunkRun` of the whole chunk objects in C order, and the tile
offsets come from the chunk sizes alone (no chunk data is read).

**Transcoded** otherwise (blosc, bzip2, shuffle, HSDS Blosc frames, 3-D
chunks, plane dims that are not multiples of 16). Tiles are then grouped so
that a group is produced from one decoding of its source chunks: a group is
one tile position of the plane times the pages of one chunk along the leading
dims (for a 32^3 chunk, 32 tiles from one decode), or one page for
uncompressed sources (read by range, never whole). Tile dims per plane axis:
the chunk dim if it is a multiple of 16; else one tile across the whole axis
if it is short; else ``k * chunk`` (the smallest multiple of 16 made of whole
chunks) up to :data:`MAX_TILE`; else the chunk dim rounded up to 16, where
tiles straddle chunk edges and a chunk is decoded by up to 4 groups. Samples in
separate planes never get a tile wider than the image (16 or more wide): the
width rounded down to 16 instead (libtiff's ``tiffcp`` cannot copy such planes).
Uncompressed tiles are a whole number of KiB (taller by up to 48 rows; a 16x16 uint8
chunk plane is re-tiled, even when stored uncompressed): libtiff's RGBA reader refuses
others in a file it cannot map (:func:`_kib_rows`, :func:`served_as_stored`).
Tiles are stored uncompressed by default (``tiff_deflate_level`` 0,
Compression=1): their sizes are known from the shape, so a stat costs nothing
and a first read only decodes; a group that is one chunk's planes is the
decoded chunk itself (no copy). At levels 1-9 tiles are deflated with libdeflate
(imagecodecs; level 1 is its fastest, zlib-ng's level 1 does not compress such
data), whose sizes are measured once, when the file is first sized (all groups,
in parallel): the first groups made then are kept (:data:`KEPT`, a quarter of
the mount's cache) for the read that follows, the rest only sized. libdeflate is
deterministic, so a group produced again after cache eviction has exactly the
measured length (the reader checks it).

Groups are produced by the reader (:meth:`polyfs.reader.Reader.produced`):
cached under keys that hold across opens of one layout (a re-planned file gets
new ones), and made ahead of a sequential reader on the other cores. Decoding
(libdeflate, GIL released) is nearly all of a transcoded first read's CPU.

**Missing chunks** become tiles of the fill value: one encoded fill tile is
stored once in the file and every missing tile points at it. Edge tiles are
full size (padded with the chunk's padding, or the fill value), as TIFF wants.
"""
from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import imagecodecs
import numpy as np

from ...codecs.pipeline import Pipeline
from ...errors import NotFound, SchemaError
from ...model.chunks import ChunkIndex
from ...parallel import bounded_map
from ...model.schema import Dataset
from ...vfile import ChunkRun, ProducedPiece, Segment
from ...views.transcode import fetch_chunk
from .raster import Raster, fill_pixels, raster
from .structs import COMPRESSION_DEFLATE, COMPRESSION_NONE

MAX_TILE = 2048  # largest tile edge made of whole chunks before tiles straddle chunk edges
MEASURE_THREADS = max(2, min(8, (os.cpu_count() or 2)))
_PLAN_SERIAL = itertools.count(1)  # makes cache keys of a re-planned file (after a write) new


def tiff_code(pipe: Pipeline) -> int | None:
    """The TIFF Compression code of a pipeline whose bytes are valid TIFF tiles, or None."""
    if pipe.is_identity:
        return COMPRESSION_NONE
    if len(pipe.filters) != 1:
        return None
    return pipe.filters[0].spec.tiff


def _round16(n: int) -> int:
    return -(-n // 16) * 16


def tile_axis(n: int, c: int) -> int:
    """Tile edge along one plane axis of extent ``n`` and chunk edge ``c``."""
    if c % 16 == 0:
        return c
    whole = _round16(n)
    if n <= c:
        return whole  # one chunk along this axis: one tile covers it
    k = 16 // math.gcd(c, 16)
    if whole <= min(k * c, MAX_TILE):
        return whole  # one tile across the axis, made of all its chunks
    if k * c <= MAX_TILE:
        return k * c
    return _round16(c)


def _kib_rows(ty: int, row_bytes: int) -> int:
    """Tile rows (a multiple of 16) making an uncompressed tile a whole number of KiB. libtiff
    reading a file it cannot map (``mmap`` is refused in a domain written through the mount)
    rounds its buffer up to 1 KiB and then refuses an uncompressed tile of any other size for
    ``TIFFReadRGBATile`` ("Invalid tile byte count ... Expected 379392, got 379904": tiff2rgba,
    OpenCV, on every 1-bit page). ``row_bytes`` is even (a 1-bit row of a multiple of 16
    pixels packed is 2k bytes), so 512 rows always do, and 64 rows do for whole-byte pixels."""
    while (ty * row_bytes) % 1024:
        ty += 16
    return ty


@dataclass
class TileData:
    """The tile region of a TIFF file and where each tile is in it.

    ``rel[p, t]`` is the offset of tile ``t`` of page ``p`` inside the region
    (``-1``: the shared fill tile), ``counts[p, t]`` its byte count.
    """

    segments: list[Segment]
    length: int
    rel: np.ndarray
    counts: np.ndarray
    fill_tile: bytes

    def absolute(self, data_start: int, fill_offset: int) -> tuple[np.ndarray, np.ndarray]:
        offsets = np.where(self.rel < 0, fill_offset, self.rel + data_start)
        return offsets, self.counts


# -- shared geometry -------------------------------------------------------------
@dataclass
class Geometry:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    grid: tuple[int, ...]
    tile: tuple[int, int]

    @property
    def lead(self) -> tuple[int, ...]:
        return self.shape[:-2]

    @property
    def npages(self) -> int:
        return math.prod(self.lead)

    @property
    def tiles_down(self) -> int:
        return -(-self.shape[-2] // self.tile[0])

    @property
    def tiles_across(self) -> int:
        return -(-self.shape[-1] // self.tile[1])

    @property
    def ntiles(self) -> int:
        return self.tiles_down * self.tiles_across

    def page_coords(self) -> np.ndarray:
        """(npages, nlead) leading coordinates of every page, C order."""
        if not self.lead:
            return np.zeros((1, 0), dtype=np.int64)
        return np.indices(self.lead, dtype=np.int64).reshape(len(self.lead), -1).T


def _ravel(coords: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """C-order linear index of rows of ``coords`` in per-row (or shared) extents ``dims``."""
    out = np.zeros(coords.shape[0], dtype=np.int64)
    for i in range(coords.shape[1]):
        out = out * (dims[:, i] if dims.ndim == 2 else dims[i]) + coords[:, i]
    return out


def _unravel_one(index: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    """C-order coordinates of one linear index (numpy's unravel_index costs ~10 us a call)."""
    out = []
    for d in reversed(dims):
        index, k = divmod(index, d)
        out.append(k)
    return tuple(reversed(out))


def _ravel_one(coords: tuple[int, ...], dims: tuple[int, ...]) -> int:
    out = 0
    for k, d in zip(coords, dims):
        out = out * d + k
    return out


def _raster(ds: Dataset) -> Raster:
    r = raster(ds)
    if r is None:
        raise SchemaError(f"dataset {ds.id}: not an image")
    return r


# -- zero-copy ---------------------------------------------------------------------
def zero_copy(ds: Dataset, idx: ChunkIndex | None, pipe: Pipeline) -> bool:
    """Are the stored chunks (or their planes) valid TIFF tiles? Pure: ``idx`` is not needed."""
    code = tiff_code(pipe)
    r = raster(ds)
    if r is None:
        return False
    cy, cx = r.chunks[-2:]
    if code is None or cy % 16 or cx % 16 or r.bits < 8:  # 1-bit tiles are packed: transcoded
        return False
    return code == COMPRESSION_NONE or all(c == 1 for c in r.chunks[:-2])


def served_as_stored(ds: Dataset, pipe: Pipeline) -> bool:
    """Does the TIFF view serve the stored chunks (or their planes) as its tiles? Zero-copy
    chunks, except uncompressed planes that are not a whole number of KiB (a 16x16 uint8 plane
    is 256 bytes): libtiff's RGBA reader refuses them in a file it cannot map
    (:func:`_kib_rows`), so those are re-tiled. Compressed chunks are served unchanged. Pure."""
    if not zero_copy(ds, None, pipe):
        return False
    r = _raster(ds)
    return tiff_code(pipe) != COMPRESSION_NONE or (r.chunks[-2] * r.chunks[-1] * r.pixel_bytes) % 1024 == 0


def tile_sources(ds: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """For tiles that are chunks (or planes of chunks): ``(linear, plane)`` per (page, tile).

    ``linear[p, t]`` is the C-order index of the chunk holding tile ``t`` of
    page ``p``, ``plane[p, t]`` the index of that plane inside the chunk (0
    for one-plane chunks). A polyglot file that places chunk ``i`` at offset
    ``at[i]`` has its tile offsets at ``at[linear] + plane * plane_bytes``.
    """
    ras = _raster(ds)
    geo = Geometry(ras.shape, ras.chunks, ras.grid, ras.chunks[-2:])
    lead_chunks = np.asarray(ras.chunks[:-2], dtype=np.int64)
    pages = geo.page_coords()
    r, c = np.divmod(np.arange(geo.ntiles, dtype=np.int64), geo.tiles_across)
    grid = np.asarray(ras.grid, dtype=np.int64)
    if len(lead_chunks):
        lead_lin = _ravel(pages // lead_chunks, grid[:len(lead_chunks)])
        within = _ravel(pages % lead_chunks, lead_chunks)
    else:
        lead_lin = within = np.zeros(len(pages), dtype=np.int64)
    linear = (lead_lin[:, None] * grid[-2] + r[None, :]) * grid[-1] + c[None, :]
    return linear, np.broadcast_to(within[:, None], linear.shape)


def zero_copy_tiles(ds: Dataset, idx: ChunkIndex, pipe: Pipeline) -> tuple[Geometry, TileData]:
    """Tiles that are the stored chunk objects (or planes of uncompressed ones)."""
    r = _raster(ds)
    geo = Geometry(r.shape, r.chunks, r.grid, r.chunks[-2:])
    identity = pipe.is_identity
    plane_bytes = r.chunks[-2] * r.chunks[-1] * r.pixel_bytes
    if identity and len(idx) and np.any(idx.sizes != ds.chunk_nbytes):
        bad = int(idx.linear[np.argmax(idx.sizes != ds.chunk_nbytes)])
        raise SchemaError(f"dataset {ds.id}: uncompressed chunk {idx.key(bad)} is not "
                          f"{ds.chunk_nbytes} bytes long")
    run = ChunkRun(idx, idx.linear, idx.sizes)
    linear, within = tile_sources(ds)
    fill_raw = fill_pixels(ds, r, tuple(r.chunks[-2:])).tobytes()
    fill_tile = pipe.encode(fill_raw)
    rel = np.full(linear.shape, -1, dtype=np.int64)
    counts = np.full(linear.shape, len(fill_tile), dtype=np.int64)
    if len(idx):
        pos = np.minimum(np.searchsorted(idx.linear, linear), len(idx) - 1)
        exists = idx.linear[pos] == linear
        starts = run.item_offsets()[pos]
        if identity:
            rel = np.where(exists, starts + within * plane_bytes, -1)
            counts = np.where(exists, plane_bytes, counts)
        else:
            rel = np.where(exists, starts, -1)
            counts = np.where(exists, idx.sizes[pos], counts)
    return geo, TileData([run], run.length, rel, counts, fill_tile)


# -- transcoded ---------------------------------------------------------------------
@dataclass
class TranscodePlan:
    """Groups of tiles made from one decoding of their source chunks (see module doc)."""

    ds: Dataset
    idx: ChunkIndex
    pipe: Pipeline
    level: int  # deflate level; 0 = uncompressed tiles
    geo: Geometry = field(init=False)
    block: tuple[int, ...] = field(init=False)  # pages of a group along each leading dim

    def __post_init__(self) -> None:
        r = raster(self.ds)
        if r is None:
            raise SchemaError(f"dataset {self.ds.id}: not an image")
        self.r = r
        shape = self.r.shape
        ty = tile_axis(shape[-2], self.r.chunks[-2])
        tx = tile_axis(shape[-1], self.r.chunks[-1])
        if self.r.planes > 1 and tx > shape[-1] >= 16:
            # libtiff's tiffcp (and any tool on its readSeparateTilesIntoBuffer) refuses separate
            # planes whose tile is wider than the image: "image raster scan line size is too large"
            tx = shape[-1] // 16 * 16
        self.packed = r.bits < 8  # 1-bit samples: each tile row packed into whole bytes
        row_bytes = -(-tx // 8) if self.packed else tx * r.pixel.itemsize
        if self.level == 0:  # even a tile that is a chunk's plane: 16x16 u8 is 256 bytes
            ty = _kib_rows(ty, row_bytes)
        self.geo = Geometry(shape, self.r.chunks, self.r.grid, (ty, tx))
        lead_chunks = self.r.chunks[:-2]
        self.block = tuple(1 for _ in lead_chunks) if self.pipe.is_identity else tuple(lead_chunks)
        self.dtype = r.pixel  # one pixel (all its samples): a chunk's plane is (cy, cx) of them
        self.compression = COMPRESSION_NONE if self.level == 0 else COMPRESSION_DEFLATE
        self.tile_raw = ty * row_bytes
        self.fill_value = fill_pixels(self.ds, r, ())
        self.fill_tile = self.encode(self._pack(fill_pixels(self.ds, r, (ty, tx))))
        self.bgrid = tuple(-(-n // b) for n, b in zip(self.geo.lead, self.block))
        self.ngroups = math.prod(self.bgrid) * self.geo.ntiles
        self.serial = next(_PLAN_SERIAL)
        self._existing = set(self.idx.linear.tolist()) if len(self.idx) < 4_000_000 else None

    # -- encoding -----------------------------------------------------------
    def _pack(self, pixels: np.ndarray) -> bytes:
        """Tile pixels as the file holds them: 1-bit rows packed (MSB first, FillOrder 1)."""
        return np.packbits(pixels != 0, axis=-1).tobytes() if self.packed else pixels.tobytes()

    def encode(self, raw: bytes) -> bytes:
        return raw if self.level == 0 else imagecodecs.deflate_encode(raw, level=self.level)

    # -- groups ---------------------------------------------------------------
    def group_coords(self, gid: int) -> tuple[tuple[int, ...], int, int]:
        """(block coords, tile row, tile col) of group ``gid``."""
        rest, c = divmod(gid, self.geo.tiles_across)
        rest, r = divmod(rest, self.geo.tiles_down)
        return _unravel_one(rest, self.bgrid), r, c

    def group_pages(self, b: tuple[int, ...]) -> list[range]:
        return [range(bi * n, min((bi + 1) * n, extent)) for bi, n, extent in zip(b, self.block, self.geo.lead)]

    def _axis_chunks(self, t: int, axis: int) -> range:
        edge, c, g = self.geo.tile[axis], self.r.chunks[axis - 2], self.r.grid[axis - 2]
        return range((t * edge) // c, min(-(-((t + 1) * edge) // c), g))

    def sources(self, gid: int) -> list[tuple[int, int, int]]:
        """(linear, chunk row, chunk col) of the chunks a group reads that exist."""
        b, r, c = self.group_coords(gid)
        lead_chunk = tuple(bi * n // lc for bi, n, lc in zip(b, self.block, self.r.chunks[:-2]))
        out = []
        for i in self._axis_chunks(r, 0):
            for j in self._axis_chunks(c, 1):
                lin = _ravel_one((*lead_chunk, i, j), self.r.grid)
                if self._exists(lin):
                    out.append((lin, i, j))
        return out

    def _exists(self, lin: int) -> bool:
        if self._existing is not None:
            return lin in self._existing
        return self.idx.size_of(lin) >= 0

    def produce_tiles(self, ctx: Any, gid: int) -> list[bytes]:
        """The encoded tiles of one group, pages in C order."""
        raw = self.produce_raw(ctx, gid)
        view = memoryview(raw)
        n = self.tile_raw
        return [self.encode(view[k * n:(k + 1) * n]) for k in range(len(raw) // n)]

    def produce_group(self, ctx: Any, gid: int) -> bytes:
        """The group's tiles back to back (uncompressed: the raw pages as they lie)."""
        if self.level == 0:
            return self.produce_raw(ctx, gid)
        return b"".join(self.produce_tiles(ctx, gid))

    def produce_raw(self, ctx: Any, gid: int) -> bytes:
        """The group's uncompressed tiles back to back. A group that is one chunk's planes
        (tile = chunk plane, the chunk exists) is the decoded chunk itself, or its first
        pages at the array's leading edge: no region is assembled, no byte is copied."""
        whole = None if self.packed else self._single_chunk(gid)
        if whole is None:
            return self._pack(self.produce_region(ctx, gid))
        lin, npg = whole
        key = self.idx.key(lin)
        if self.pipe.is_identity:  # one page: the plane's bytes, read by range
            return self._plane(ctx, key, gid)
        raw = self.pipe.decode(fetch_chunk(ctx, key), self.ds.chunk_nbytes)
        n = npg * self.tile_raw
        return raw if n == len(raw) else raw[:n]

    def _single_chunk(self, gid: int) -> tuple[int, int] | None:
        """(chunk linear index, pages) when the group's pixels are exactly the first
        ``pages`` planes of one stored chunk, in the chunk's own byte order; else None."""
        if self.geo.tile != tuple(self.r.chunks[-2:]):
            return None
        b, r, c = self.group_coords(gid)
        lin = _ravel_one((*(bi * n // lc for bi, n, lc in zip(b, self.block, self.r.chunks[:-2])), r, c),
                         self.r.grid)
        if not self._exists(lin):
            return None
        counts = [len(p) for p in self.group_pages(b)]
        if counts[1:] != list(self.block[1:]):  # a short inner leading dim: pages not contiguous
            return None
        return lin, math.prod(counts)

    def _plane(self, ctx: Any, key: str, gid: int) -> bytes:
        """One page of an uncompressed chunk (groups of identity pipelines are single pages)."""
        pages = self.group_pages(self.group_coords(gid)[0])
        within = [p.start % lc for p, lc in zip(pages, self.r.chunks[:-2])]
        k = _ravel_one(tuple(within), tuple(self.r.chunks[:-2])) if within else 0
        plane_bytes = self.r.chunks[-2] * self.r.chunks[-1] * self.dtype.itemsize
        try:
            raw = ctx.store.get_range(key, k * plane_bytes, plane_bytes)
        except NotFound:
            raw = fetch_chunk(ctx, key)  # raises ChunkMissing
        if len(raw) != plane_bytes:
            raise SchemaError(f"uncompressed chunk {key} is shorter than {self.ds.chunk_nbytes} bytes")
        return raw

    def produce_region(self, ctx: Any, gid: int) -> np.ndarray:
        """The raw (pages, tile rows, tile cols) of one group, fill value where no chunk is."""
        b, r, c = self.group_coords(gid)
        pages = self.group_pages(b)
        counts = tuple(len(p) for p in pages)
        npg = math.prod(counts)
        ty, tx = self.geo.tile
        cy, cx = self.r.chunks[-2:]
        region = np.empty((npg, ty, tx), dtype=self.dtype)
        y0, x0 = r * ty, c * tx
        sources = self.sources(gid)
        if not self._covers(sources, y0, x0):
            region[...] = self.fill_value
        for lin, i, j in sources:
            key = self.idx.key(lin)
            if self.pipe.is_identity:  # one page: read only its plane
                block = np.frombuffer(self._plane(ctx, key, gid), dtype=self.dtype).reshape(1, cy, cx)
            else:
                raw = self.pipe.decode(fetch_chunk(ctx, key), self.ds.chunk_nbytes)
                arr = np.frombuffer(raw, dtype=self.dtype).reshape(self.r.chunks)
                arr = arr[tuple(slice(0, n) for n in counts)]
                block = arr.reshape(npg, cy, cx)
            # intersect chunk (i, j) with the tile's plane region
            ys, ye = max(y0, i * cy), min(y0 + ty, (i + 1) * cy)
            xs, xe = max(x0, j * cx), min(x0 + tx, (j + 1) * cx)
            region[:, ys - y0:ye - y0, xs - x0:xe - x0] = block[:, ys - i * cy:ye - i * cy, xs - j * cx:xe - j * cx]
        return region

    def _covers(self, sources: list[tuple[int, int, int]], y0: int, x0: int) -> bool:
        """Do the chunks found fill the whole tile (so no fill value needs writing first)?
        Tiles past the array's edge and tiles with a missing chunk do not."""
        ty, tx = self.geo.tile
        cy, cx = self.r.chunks[-2:]
        ny, nx = self.r.grid[-2:]
        if y0 + ty > ny * cy or x0 + tx > nx * cx:
            return False
        rows = range(y0 // cy, -(-(y0 + ty) // cy))
        cols = range(x0 // cx, -(-(x0 + tx) // cx))
        return len(sources) == len(rows) * len(cols)

    # -- layout ---------------------------------------------------------------
    def group_ids_of_tiles(self) -> tuple[np.ndarray, np.ndarray]:
        """(group id, index within the group) of every (page, tile)."""
        geo = self.geo
        pages = geo.page_coords()
        block = np.asarray(self.block, dtype=np.int64)
        lead = np.asarray(geo.lead, dtype=np.int64)
        if len(block):
            b = pages // block
            k = pages % block
            ext = np.minimum(block, lead - b * block)
            within = _ravel(k, ext)
            blin = _ravel(b, np.asarray(self.bgrid, dtype=np.int64))
        else:
            within = np.zeros(1, np.int64)
            blin = np.zeros(1, np.int64)
        t = np.arange(geo.ntiles, dtype=np.int64)
        gid = blin[:, None] * geo.ntiles + t[None, :]
        return gid, np.broadcast_to(within[:, None], gid.shape)

    def has_data(self) -> np.ndarray:
        """Per group (in group order): does any of its source chunks exist?"""
        grid = self.r.grid
        exists = np.zeros(math.prod(grid), dtype=np.int32)
        exists[self.idx.linear] = 1
        e = exists.reshape(grid)
        for axis in (-2, -1):  # chunks -> tile rows, then tile columns (ranges may overlap)
            t = np.arange(self.geo.tiles_down if axis == -2 else self.geo.tiles_across)
            edge, c, g = self.geo.tile[axis], self.r.chunks[axis], grid[axis]
            a = np.minimum(t * edge // c, g)
            b = np.minimum(-(-((t + 1) * edge) // c), g)
            cs = np.concatenate([np.zeros_like(np.take(e, [0], axis=axis)), np.cumsum(e, axis=axis)], axis=axis)
            e = np.take(cs, b, axis=axis) - np.take(cs, a, axis=axis)
        nlead = len(self.geo.lead)
        if nlead and self.pipe.is_identity:  # groups are pages: page -> its chunk along each leading dim
            for axis in range(nlead):
                e = np.take(e, np.arange(self.geo.lead[axis]) // self.r.chunks[axis], axis=axis)
        return (e > 0).reshape(-1)

    def tiles(self, ctx: Any) -> TileData:
        """Sizes (measured if deflated) and places of every tile; groups with data in order."""
        gid, within = self.group_ids_of_tiles()
        data = self.has_data()
        produced = np.flatnonzero(data)
        is_data = data[gid]
        dg, dw = gid[is_data], within[is_data]
        order = np.lexsort((dw, dg))  # file order: group, then page within the group
        per_group = np.bincount(np.searchsorted(produced, dg), minlength=len(produced)).astype(np.int64)
        if self.level == 0:
            flat = np.full(len(order), self.tile_raw, dtype=np.int64)
        else:
            measured = self.measure(ctx, produced)
            parts = [measured[int(g)] for g in produced]
            for g, n, part in zip(produced, per_group, parts):
                if len(part) != n:
                    raise SchemaError(f"dataset {self.ds.id}: group {g} made {len(part)} tiles, expected {n}")
            flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        starts = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum(flat, out=starts[1:])
        rel = np.full(gid.shape, -1, dtype=np.int64)
        counts = np.full(gid.shape, len(self.fill_tile), dtype=np.int64)
        pos = np.empty(len(order), dtype=np.int64)
        pos[order] = starts[:-1]
        size = np.empty(len(order), dtype=np.int64)
        size[order] = flat
        rel[is_data] = pos
        counts[is_data] = size
        bounds = np.zeros(len(produced) + 1, dtype=np.int64)
        np.cumsum(per_group, out=bounds[1:])
        group_len = starts[bounds[1:]] - starts[bounds[:-1]]
        run = GroupRun(self, produced, group_len)
        return TileData([run], run.length, rel, counts, self.fill_tile)

    def measure(self, ctx: Any, gids: np.ndarray) -> dict[int, np.ndarray]:
        """Encoded size of every tile of the given groups (transcoding them, in parallel).

        The first groups made are kept (:data:`KEPT`, up to a quarter of the mount's
        cache) for the read that usually follows a stat, which then starts without
        transcoding them a second time."""
        budget = getattr(getattr(ctx, "options", None), "transcode_cache_bytes", 0) // KEEP_SHARE
        KEPT.resize(budget)
        KEPT.drop_dataset(self.ds.id)  # groups of an older plan of this dataset: never read now

        def one(gid: int) -> tuple[int, list[bytes]]:
            return gid, self.produce_tiles(ctx, gid)

        if len(gids) <= 1:
            made: Iterable[tuple[int, list[bytes]]] = [one(int(g)) for g in gids]
            return self._sizes(made, budget)
        with ThreadPoolExecutor(MEASURE_THREADS, thread_name_prefix="polyfs-tiff-measure") as pool:
            # in group order, a few groups ahead: memory holds a window of tiles, not the file's
            made = bounded_map(pool, one, (int(g) for g in gids), MEASURE_THREADS * 2)
            return self._sizes(made, budget)

    def _sizes(self, made: Iterable[tuple[int, list[bytes]]], budget: int) -> dict[int, np.ndarray]:
        """Tile sizes of groups made in file order; the first ``budget`` bytes of them kept."""
        out = {}
        for gid, tiles in made:
            out[gid] = np.fromiter((len(t) for t in tiles), dtype=np.int64, count=len(tiles))
            length = int(out[gid].sum())
            if budget >= length:
                budget -= length
                KEPT.put(GroupProducer.key_of(self, gid, length), b"".join(tiles))
        return out


@dataclass(frozen=True)
class GroupProducer:
    """The encoded tiles of one group, back to back (cached by the reader)."""

    plan: TranscodePlan = field(compare=False, hash=False)
    gid: int
    length: int

    @property
    def cache_key(self) -> Hashable:
        """Flat, with the dataset id (for cache invalidation by dataset) and the plan's serial:
        stable across opens of one layout, new for a re-planned file."""
        return self.key_of(self.plan, self.gid, self.length)

    @staticmethod
    def key_of(plan: TranscodePlan, gid: int, length: int) -> Hashable:
        return ("tiff-tiles", plan.ds.id, plan.serial, gid, length)

    def produce(self, ctx: Any) -> bytes:
        kept = KEPT.take(self.cache_key)  # made when the file was measured
        return kept if kept is not None else self.plan.produce_group(ctx, self.gid)


class GroupRun(Segment):
    """Transcoded groups back to back; producers are made on demand from numpy arrays."""

    def __init__(self, source: TranscodePlan, gids: np.ndarray, lengths: np.ndarray) -> None:
        self.source = source
        self.gids = np.asarray(gids, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.starts = np.zeros(len(self.gids) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.starts[1:])
        self.length = int(self.starts[-1])

    def producer(self, i: int) -> GroupProducer:
        return GroupProducer(self.source, int(self.gids[i]), int(self.lengths[i]))

    def plan(self, start: int, end: int, out: list) -> None:  # type: ignore[override]
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        while start < end and i < len(self.gids):
            base, stop = int(self.starts[i]), int(self.starts[i + 1])
            hi = min(end, stop)
            if hi > start:
                out.append(ProducedPiece(self.producer(i), start - base, hi - start))
            start = hi
            i += 1


class KeptGroups:
    """Deflated groups made while a file was measured, held (bounded, oldest dropped) until
    the reader's first read of each takes it over into the reader's cache. A group not read
    within ``life`` seconds (a stat-only walk) or of a re-planned dataset is dropped."""

    def __init__(self, life: float = 60.0) -> None:
        self._items: OrderedDict[Hashable, tuple[bytes, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = 0
        self.used = 0
        self.life = life

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(0, capacity)
            self._trim()

    def put(self, key: Hashable, data: bytes) -> None:
        with self._lock:
            if len(data) > self.capacity or key in self._items:
                return
            self._items[key] = (data, time.monotonic())
            self.used += len(data)
            self._trim()

    def take(self, key: Hashable) -> bytes | None:
        with self._lock:
            got = self._items.pop(key, None)
            if got is not None:
                self.used -= len(got[0])
            self._trim()
            return got[0] if got is not None and got[1] >= time.monotonic() - self.life else None

    def drop_dataset(self, ds_id: str) -> None:
        """Forget the groups of ``ds_id`` (keys are ``("tiff-tiles", ds_id, ...)``)."""
        with self._lock:
            for k in [k for k in self._items if isinstance(k, tuple) and len(k) > 1 and k[1] == ds_id]:
                self.used -= len(self._items.pop(k)[0])

    def _trim(self) -> None:
        old = time.monotonic() - self.life
        while self._items and (self.used > self.capacity or next(iter(self._items.values()))[1] < old):
            self.used -= len(self._items.popitem(last=False)[1][0])


KEEP_SHARE = 4  # measured groups kept for the first read: up to cache_mb / KEEP_SHARE
KEPT = KeptGroups()


def plan_tiles(ds: Dataset, idx: ChunkIndex, pipe: Pipeline, level: int,
               ctx: Any) -> tuple[Geometry, int, TileData]:
    """(geometry, TIFF compression code, tile data) of one dataset's TIFF."""
    if served_as_stored(ds, pipe):
        geo, data = zero_copy_tiles(ds, idx, pipe)
        return geo, tiff_code(pipe), data  # type: ignore[return-value]
    plan = TranscodePlan(ds, idx, pipe, level)
    return plan.geo, plan.compression, plan.tiles(ctx)

