"""A TIFF's pages as segments (tiles or strips): where each is, how it decodes, and reads of
any region of the dataset they make, decoding only the segments it overlaps.

Both the importer (source.py: data that is decoded and re-chunked) and the
view's ingester (ingest.py: written files) read pixels so, never a whole page:
memory holds a chunk and the segments it overlaps (plus a bounded cache of
decoded segments, so strips across a page are decoded once per band of chunks).
"""
from __future__ import annotations

import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InvalidInput, UnsupportedType
from ...model.schema import Dataset
from ...writes.protocol import ByteSource
from .source import Geometry, copy_filters, geometry, missing_value

CACHE_BYTES = 32 << 20


class SegmentCache:
    """Decoded segments, least recently used dropped past ``limit`` bytes (thread-safe)."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self._items: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[int, ...]) -> np.ndarray | None:
        with self._lock:
            got = self._items.get(key)
            if got is not None:
                self._items.move_to_end(key)
            return got

    def put(self, key: tuple[int, ...], arr: np.ndarray) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.used -= old.nbytes
            self._items[key] = arr
            self.used += arr.nbytes
            while self.used > self.limit and len(self._items) > 1:
                _, old = self._items.popitem(last=False)
                self.used -= old.nbytes


class FileSource:
    """A ByteSource over an open file (tifffile's handle of an imported file), one read at a time."""

    def __init__(self, fh: Any, size: int) -> None:
        self._fh = fh
        self._size = size
        self._lock = threading.Lock()

    def size(self) -> int:
        return self._size

    def read(self, off: int, n: int) -> bytes:
        with self._lock:
            self._fh.seek(off)
            return self._fh.read(n)


@dataclass
class Segments:
    """The pages of a TIFF as a dataset of ``lead + geo.dims``: where each page's segments
    (tiles or strips) are and how they decode; regions are read segment by segment."""

    offsets: np.ndarray  # (npages, nsegments)
    counts: np.ndarray
    key: Any  # the key page (tags, jpegtables)
    keys: list  # each page's key frame (its decode)
    geo: Geometry
    lead: tuple[int, ...]
    dtype: np.dtype  # in the file's byte order
    filters: list | None  # the table codec the segments are in as they are (None: decode them)
    row_bytes: int = 0  # uncompressed strips: bytes of one row (rows are read by range, never whole strips)
    missing: Any = 0  # what an unwritten segment (byte count 0) holds: the nodata value or 0 (missing_value)

    @classmethod
    def of(cls, pages: list, key: Any, geo: Geometry, lead: tuple[int, ...], dtype: np.dtype,
           where: str) -> Segments:
        nseg = math.prod(geo.grid)
        if any(len(p.dataoffsets) != nseg or len(p.databytecounts) != nseg for p in pages):
            raise UnsupportedType(f"{where}: pages are laid out differently (tiles or strips); "
                                  f"they cannot be one dataset")
        offsets = np.array([p.dataoffsets for p in pages], dtype=np.int64).reshape(len(pages), nseg)
        counts = np.array([p.databytecounts for p in pages], dtype=np.int64).reshape(len(pages), nseg)
        filters = copy_filters(key, pages, geo, dtype, raw_ok=True)
        keys = [getattr(p, "keyframe", None) or key for p in pages]
        out = cls(offsets, counts, key, keys, geo, lead, dtype, filters, missing=missing_value(key, dtype))
        if _raw_strips(key, pages, dtype):
            out.row_bytes = geo.shaped[3] * geo.shaped[4] * dtype.itemsize
            out._check_strips(where)
        return out

    def _check_strips(self, where: str) -> None:
        """Every uncompressed strip holds its rows (they are read by range, so never padded)."""
        local = np.unravel_index(np.arange(self.offsets.shape[1]), self.geo.grid)
        r0 = local[2] * self.geo.chunk[2]
        rows = np.minimum(r0 + self.geo.chunk[2], self.geo.shaped[2]) - r0
        short = (self.counts > 0) & (self.counts < rows[None, :] * self.row_bytes)
        if short.any():
            n, t = (int(x) for x in np.argwhere(short)[0])
            raise InvalidInput(f"{where}: page {n} strip {t} is {int(self.counts[n, t])} bytes; its "
                               f"{int(rows[t])} rows need {int(rows[t]) * self.row_bytes}")

    @property
    def dims(self) -> tuple[int, ...]:
        return self.lead + self.geo.dims

    @property
    def npages(self) -> int:
        return self.offsets.shape[0]

    def check_bounds(self, size: int, where: str) -> None:
        bad = (self.counts > 0) & ((self.offsets < 8) | (self.offsets + self.counts > size))
        if bad.any():
            n, t = (int(x) for x in np.argwhere(bad)[0])
            off, cnt = int(self.offsets[n, t]), int(self.counts[n, t])
            kind = "tile" if self.key.is_tiled else "strip"
            raise InvalidInput(f"{where}: page {n} {kind} {t}: bytes {off}..{off + cnt} lie outside the file "
                               f"({size} bytes): bogus offset or truncated file")

    # -- geometry -------------------------------------------------------------------
    def segment_box(self, n: int, t: int) -> tuple[slice, ...]:
        """The region of the dataset that segment ``t`` of page ``n`` covers."""
        lead = np.unravel_index(n, self.lead) if self.lead else ()
        local = np.unravel_index(t, self.geo.grid)
        box = [slice(int(i), int(i) + 1) for i in lead]
        for li, c, s, k in zip(local, self.geo.chunk, self.geo.shaped, self.geo.keep):
            if k:
                box.append(slice(int(li) * c, min((int(li) + 1) * c, s)))
        return tuple(box)

    def aligned(self, ds: Dataset) -> bool:
        """Is every chunk of ``ds`` exactly one full segment (the segment is the chunk)?"""
        if tuple(ds.chunks) != (1,) * len(self.lead) + self.geo.chunk_dims:
            return False
        return bool(self.key.is_tiled) or self.geo.shaped[2] % self.geo.chunk[2] == 0

    def segment_of(self, coords: tuple[int, ...]) -> tuple[int, int]:
        """The segment that is chunk ``coords`` (when :meth:`aligned`)."""
        nlead = len(self.lead)
        n = int(np.ravel_multi_index(coords[:nlead], self.lead)) if nlead else 0
        it = iter(coords[nlead:])
        local = [next(it) if k else 0 for k in self.geo.keep]
        return n, int(np.ravel_multi_index(local, self.geo.grid))

    # -- data ----------------------------------------------------------------------
    def raw(self, src: ByteSource, n: int, t: int, where: str) -> bytes | None:
        off, cnt = int(self.offsets[n, t]), int(self.counts[n, t])
        if cnt <= 0 or off <= 0:
            return None
        data = src.read(off, cnt)
        if len(data) != cnt:
            raise InvalidInput(f"{where}: page {n} segment {t} lies past the end of the file")
        return data

    def segment(self, src: ByteSource, n: int, t: int, where: str) -> np.ndarray | None:
        """Segment ``t`` of page ``n`` decoded, full size, as a 5-D block (None: not written)."""
        data = self.raw(src, n, t, where)
        if data is None:
            return None
        try:
            k = self.keys[n]
            arr, _, shape = k.decode(data, t, jpegtables=getattr(k, "jpegtables", None),
                                     jpegheader=getattr(k, "jpegheader", None), _fullsize=True)
        except Exception as exc:  # noqa: BLE001 - imagecodecs and tifffile raise many kinds
            raise InvalidInput(f"{where}: page {n} segment {t} does not decode "
                               f"({type(exc).__name__}: {' '.join(str(exc).split())})") from None
        want = tuple(self.geo.chunk[1:])
        if arr is None or tuple(shape) != want:
            raise InvalidInput(f"{where}: page {n} segment {t} decodes to shape {shape}, not {want}")
        return np.asarray(arr).reshape((1, *want))

    def segments_in(self, region: tuple[slice, ...]) -> Iterator[tuple[int, int]]:
        """(page, segment) of every segment overlapping a dataset region."""
        nlead = len(self.lead)
        it = iter(region[nlead:])
        ranges = []
        for c, k in zip(self.geo.chunk, self.geo.keep):
            if k:
                sl = next(it)
                ranges.append(range(sl.start // c, -(-sl.stop // c)))
            else:
                ranges.append(range(1))
        leads = itertools.product(*(range(s.start, s.stop) for s in region[:nlead]))
        for lc in leads:
            n = int(np.ravel_multi_index(lc, self.lead)) if nlead else 0
            for local in itertools.product(*ranges):
                yield n, int(np.ravel_multi_index(local, self.geo.grid))

    def read(self, src: ByteSource, region: tuple[slice, ...], where: str,
             only: set[tuple[int, int]] | None = None, out: np.ndarray | None = None,
             cache: SegmentCache | None = None) -> np.ndarray:
        """The dataset region as the file has it (unwritten segments read as :attr:`missing`); with
        ``only``, just those segments are painted over ``out``; ``cache`` keeps decoded
        segments for the next regions (a strip serves every chunk across the image)."""
        shape = tuple(s.stop - s.start for s in region)
        if out is None:
            out = np.full(shape, self.missing, dtype=self.dtype)
        for n, t in self.segments_in(region):
            if only is not None and (n, t) not in only:
                continue
            if self.row_bytes:
                self._rows(src, out, region, n, t, where, only is not None, cache)
                continue
            seg = cache.get((n, t)) if cache is not None else None
            if seg is None:
                seg = self.segment(src, n, t, where)
                if cache is not None and seg is not None:
                    cache.put((n, t), seg)
            if seg is None:
                if only is None:
                    continue
                seg = np.full((1, *self.geo.chunk[1:]), self.missing, dtype=self.dtype)
            self._paint(out, region, n, t, seg)
        return out

    def _rows(self, src: ByteSource, out: np.ndarray, region: tuple[slice, ...], n: int, t: int,
              where: str, zero_missing: bool, cache: SegmentCache | None) -> None:
        """The rows of an uncompressed strip inside ``region``, read by range (whole rows: the
        chunks across the image that share them find them in ``cache``)."""
        local = [int(x) for x in np.unravel_index(t, self.geo.grid)]
        r0 = local[2] * self.geo.chunk[2]
        ysl = region[len(self.lead) + sum(self.geo.keep[:2])]
        lo, hi = max(r0, ysl.start), min(r0 + self.geo.chunk[2], ysl.stop, self.geo.shaped[2])
        if hi <= lo:
            return
        off, cnt = int(self.offsets[n, t]), int(self.counts[n, t])
        if cnt <= 0 or off <= 0:
            if zero_missing:
                self._paint(out, region, n, local,
                            np.full((1, 1, hi - lo, *self.geo.shaped[3:]), self.missing, self.dtype), lo)
            return
        key = (n, t, lo, hi)
        rows = cache.get(key) if cache is not None else None  # type: ignore[arg-type]
        if rows is None:
            data = src.read(off + (lo - r0) * self.row_bytes, (hi - lo) * self.row_bytes)
            if len(data) != (hi - lo) * self.row_bytes:
                raise InvalidInput(f"{where}: page {n} strip {t} lies past the end of the file")
            rows = np.frombuffer(data, dtype=self.dtype).reshape(1, 1, hi - lo, *self.geo.shaped[3:])
            if cache is not None:
                cache.put(key, rows)  # type: ignore[arg-type]
        self._paint(out, region, n, local, rows, lo)

    def _paint(self, out: np.ndarray, region: tuple[slice, ...], n: int, t: Any, seg: np.ndarray,
               first_row: int | None = None) -> None:
        """Copy the part of a 5-D block of page ``n`` inside ``region`` into ``out`` (the region's
        shape); the block is segment ``t`` (an index, or its grid position), starting at
        ``first_row`` when it holds only some of the segment's rows."""
        nlead = len(self.lead)
        lead = [int(i) for i in np.unravel_index(n, self.lead)] if nlead else []
        local = np.unravel_index(t, self.geo.grid) if isinstance(t, (int, np.integer)) else t
        dst: list[slice] = [slice(p - r.start, p - r.start + 1) for p, r in zip(lead, region[:nlead])]
        srcs: list[slice] = []
        it = iter(region[nlead:])
        for axis, (li, c, s, k) in enumerate(zip(local, self.geo.chunk, self.geo.shaped, self.geo.keep)):
            start = int(li) * c
            if axis == 2 and first_row is not None:
                start = first_row
            if not k:
                srcs.append(slice(0, 1))
                continue
            sl = next(it)
            lo, hi = max(start, sl.start), min(start + seg.shape[axis], sl.stop, s)
            if hi <= lo:
                return
            dst.append(slice(lo - sl.start, hi - sl.start))
            srcs.append(slice(lo - start, hi - start))
        part = seg[tuple(srcs)]
        target = out[tuple(dst)]
        target[...] = part.reshape(target.shape)


def segments_of(pages: list, key: Any, geo: Geometry, lead: tuple[int, ...], dtype: np.dtype,
                where: str) -> Segments | PageRuns:
    """The pages' segments: one :class:`Segments` when every page is tiled or stripped alike,
    else (a one-dimensional stack: pages appended by ``tiffcp -a`` in their own strips or
    tiles) runs of pages laid out alike; UnsupportedType otherwise."""
    layouts = [_layout(p) for p in pages]
    if all(x == layouts[0] for x in layouts[1:]):
        return Segments.of(pages, key, geo, lead, dtype, where)
    if len(lead) != 1:
        raise UnsupportedType(f"{where}: pages are laid out differently (tiles or strips); "
                              f"they cannot be one dataset")
    runs: list[tuple[int, Segments]] = []
    start = 0
    for i in range(1, len(pages) + 1):
        if i == len(pages) or layouts[i] != layouts[start]:
            part = pages[start:i]
            k = getattr(part[0], "keyframe", None) or part[0]
            g = geometry(k)
            if g.dims != geo.dims:
                raise UnsupportedType(f"{where}: page {start} is {g.dims}, not {geo.dims}; "
                                      f"a file of this view is one dataset")
            runs.append((start, Segments.of(part, k, g, (len(part),), dtype, where)))
            start = i
    return PageRuns(runs, lead, geo, dtype)


def _layout(page: Any) -> tuple[Any, ...]:
    """What places a page's segments: tiles or strips, their shape and number."""
    k = getattr(page, "keyframe", None) or page
    return bool(k.is_tiled), geometry(k).chunk, len(page.dataoffsets)


class _RunCache:
    """One run's view of a shared SegmentCache (its keys prefixed by the run)."""

    def __init__(self, cache: SegmentCache, run: int) -> None:
        self._cache, self._run = cache, run

    def get(self, key: tuple[int, ...]) -> np.ndarray | None:
        return self._cache.get((self._run, *key))

    def put(self, key: tuple[int, ...], arr: np.ndarray) -> None:
        self._cache.put((self._run, *key), arr)


@dataclass
class PageRuns:
    """A stack whose runs of pages are laid out unlike each other (each run a :class:`Segments`
    of its own): regions are read run by run. No chunk is ever one segment as it is."""

    runs: list[tuple[int, Segments]]  # (first page, its run's segments)
    lead: tuple[int, ...]
    geo: Geometry
    dtype: np.dtype
    filters: None = None

    @property
    def dims(self) -> tuple[int, ...]:
        return self.lead + self.geo.dims

    @property
    def npages(self) -> int:
        return self.lead[0]

    def aligned(self, ds: Dataset) -> bool:
        return False

    def check_bounds(self, size: int, where: str) -> None:
        for _, run in self.runs:
            run.check_bounds(size, where)

    def read(self, src: ByteSource, region: tuple[slice, ...], where: str, only: Any = None,
             out: np.ndarray | None = None, cache: SegmentCache | None = None) -> np.ndarray:
        """The dataset region (as :meth:`Segments.read`, all segments)."""
        if only is not None:
            raise UnsupportedType(f"{where}: pages laid out unlike each other cannot be rewritten in place")
        shape = tuple(s.stop - s.start for s in region)
        if out is None:
            out = np.zeros(shape, dtype=self.dtype)
        first = region[0]
        for i, (p0, run) in enumerate(self.runs):
            lo, hi = max(first.start, p0), min(first.stop, p0 + run.npages)
            if hi <= lo:
                continue
            sub = (slice(lo - p0, hi - p0), *region[1:])
            keyed = _RunCache(cache, i) if cache is not None else None
            out[lo - first.start:hi - first.start] = run.read(src, sub, where, cache=keyed)  # type: ignore[arg-type]
        return out


def _raw_strips(key: Any, pages: list, dtype: np.dtype) -> bool:
    """Uncompressed strips of whole-byte samples in the file's order, every page alike."""
    if key.is_tiled or int(key.compression) != 1 or int(key.predictor) != 1 or int(key.fillorder) != 1:
        return False
    bps = key.bitspersample[0] if isinstance(key.bitspersample, tuple) else key.bitspersample
    if int(bps) != 8 * dtype.itemsize or dtype.kind not in "uif" or int(key.sampleformat) not in (1, 2, 3):
        return False
    if getattr(key, "subsampling", None) not in (None, (1, 1)):
        return False
    return all(not hasattr(p, "tags") or p is key or (int(p.compression) == 1 and not p.is_tiled
                                                     and int(p.predictor) == 1) for p in pages)
