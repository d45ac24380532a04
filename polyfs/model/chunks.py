"""Which chunks of a dataset exist and how big they are, from one listing.

A :class:`ChunkIndex` is built from a single listing of the dataset's prefix
(names and sizes only), never from chunk data; it holds numpy arrays so a
domain of a million chunks costs tens of MB, not Python objects per chunk.
The :class:`CrcTable` is polyfs's derived data for deflate chunks (CRC32 of
the decoded bytes, keyed by the stream's own Adler-32 so a chunk rewritten
behind polyfs's back is detected, never served with a stale CRC).
"""
from __future__ import annotations

import bisect
import io
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .keys import chunk_name

CRC_DTYPE = np.dtype([("linear", "<i8"), ("adler", "<u4"), ("crc", "<u4")])
CRC_FILE_FIELDS = ("coords", "adler", "crc")  # a stored table: entries by chunk coordinates


def _file_dtype(rank: int) -> np.dtype:
    return np.dtype([("coords", "<i8", (rank,)), ("adler", "<u4"), ("crc", "<u4")])


def storage_grid(grid: tuple[int, ...]) -> tuple[int, ...]:
    """Scalar datasets are one chunk named ``0``: treat them as a 1-D grid of one."""
    return grid if grid else (1,)


@dataclass
class ChunkIndex:
    dataset_id: str
    prefix: str  # the dataset's key prefix, ending with "/"
    grid: tuple[int, ...]  # storage grid (never empty)
    linear: np.ndarray  # sorted C-order linear indexes of the chunks that exist
    sizes: np.ndarray  # stored size of each, aligned with ``linear``

    @classmethod
    def from_listing(cls, dataset_id: str, prefix: str, grid: tuple[int, ...],
                     names_sizes: Iterable[tuple[str, int]]) -> "ChunkIndex":
        grid = storage_grid(grid)
        rank = len(grid)
        pairs = names_sizes if isinstance(names_sizes, list) else list(names_sizes)
        names = [n for n, _ in pairs]
        coords, keep = _parse_names(names, rank)
        sizes = np.fromiter((s for _, s in pairs), dtype=np.int64, count=len(pairs))[keep]
        return cls._build(dataset_id, prefix, grid, coords, sizes)

    @classmethod
    def from_records(cls, dataset_id: str, prefix: str, grid: tuple[int, ...], records: bytes) -> "ChunkIndex":
        """From a store's bulk listing: NUL-terminated ``<size>_<name>`` records."""
        grid = storage_grid(grid)
        rank = len(grid)
        fields, _ = parse_lines(records, rank + 1, end=0)
        sizes, coords = fields[:, 0], fields[:, 1:]
        return cls._build(dataset_id, prefix, grid, coords, sizes)

    @classmethod
    def many_from_records(cls, specs: list[tuple[str, str, tuple[int, ...]]], blobs: list[bytes]) -> list["ChunkIndex"]:
        """Indexes of several datasets of one rank from their records, parsed in one pass."""
        if len(specs) == 1:
            return [cls.from_records(*specs[0], blobs[0])]
        rank = len(storage_grid(specs[0][2]))
        counts = np.asarray([b.count(b"\0") + (1 if b and not b.endswith(b"\0") else 0) for b in blobs],
                            dtype=np.int64)
        fields, valid = parse_lines(b"".join(b if not b or b.endswith(b"\0") else b + b"\0" for b in blobs),
                                    rank + 1, end=0)
        owner = np.repeat(np.arange(len(specs)), counts)[valid]
        bounds = np.searchsorted(owner, np.arange(1, len(specs)))
        out = []
        for (did, prefix, grid), part in zip(specs, np.split(fields, bounds)):
            out.append(cls._build(did, prefix, storage_grid(grid), part[:, 1:], part[:, 0]))
        return out

    @classmethod
    def _build(cls, dataset_id: str, prefix: str, grid: tuple[int, ...], coords: np.ndarray,
               sizes: np.ndarray) -> "ChunkIndex":
        inside = (coords < np.asarray(grid, dtype=np.int64)).all(axis=1)  # beyond the current extent: ignored
        coords, sizes = coords[inside], sizes[inside]
        strides = np.asarray([math.prod(grid[i + 1:]) for i in range(len(grid))], dtype=np.int64)
        linear = coords @ strides if len(coords) else np.zeros(0, dtype=np.int64)
        order = np.argsort(linear, kind="stable")
        return cls(dataset_id, prefix, grid, linear[order], sizes[order].astype(np.int64))

    def __len__(self) -> int:
        return int(self.linear.size)

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum())

    @property
    def nchunks_grid(self) -> int:
        return math.prod(self.grid)

    def coords_of(self, linear: int | np.ndarray) -> tuple[int, ...] | np.ndarray:
        c = np.unravel_index(linear, self.grid)
        if np.isscalar(linear) or np.ndim(linear) == 0:
            return tuple(int(x) for x in c)
        return np.stack(c, axis=-1)

    def linear_of(self, coords: Sequence[int]) -> int:
        """C-order number of a chunk (plain arithmetic: called per chunk on the write path);
        ValueError for coordinates outside the grid, as ``np.ravel_multi_index``."""
        if len(coords) != len(self.grid):
            raise ValueError(f"chunk coordinates {list(coords)} do not match grid {list(self.grid)}")
        linear = 0
        for c, n in zip(coords, self.grid):
            c = int(c)
            if not 0 <= c < n:
                raise ValueError(f"chunk coordinates {list(coords)} lie outside grid {list(self.grid)}")
            linear = linear * n + c
        return linear

    def key(self, linear: int) -> str:
        """The store key of one chunk (on the read path: plain integer arithmetic)."""
        rest = int(linear)
        parts = []
        for n in reversed(self.grid):
            rest, c = divmod(rest, n)
            parts.append(str(c))
        return self.prefix + "_".join(reversed(parts))

    def key_of(self, coords: Sequence[int]) -> str:
        return self.prefix + chunk_name(coords)

    def sizes_for(self, linear: np.ndarray) -> np.ndarray:
        """Stored sizes of the given chunks; -1 where a chunk does not exist."""
        linear = np.asarray(linear, dtype=np.int64)
        if self.linear.size == 0:
            return np.full(linear.shape, -1, dtype=np.int64)
        pos = np.searchsorted(self.linear, linear)
        pos_c = np.minimum(pos, self.linear.size - 1)
        hit = self.linear[pos_c] == linear
        return np.where(hit, self.sizes[pos_c], -1)

    def size_of(self, linear: int) -> int:
        """Stored size of one chunk; -1 where it does not exist. A bisection in Python: numpy's
        searchsorted lets go of the GIL, and getting it back costs more than the search."""
        pos = bisect.bisect_left(self.linear, linear)
        if pos < self.linear.size and int(self.linear[pos]) == linear:
            return int(self.sizes[pos])
        return -1

    def updated(self, sizes: dict[int, int], removed: Sequence[int] = ()) -> "ChunkIndex":
        """A new index with chunks added or resized (linear -> size) and others removed."""
        drop = np.asarray(list(sizes) + list(removed), dtype=np.int64)
        keep = ~np.isin(self.linear, drop)
        add_l = np.fromiter(sizes.keys(), dtype=np.int64, count=len(sizes))
        add_s = np.fromiter(sizes.values(), dtype=np.int64, count=len(sizes))
        linear = np.concatenate([self.linear[keep], add_l])
        size = np.concatenate([self.sizes[keep], add_s])
        order = np.argsort(linear, kind="stable")
        return ChunkIndex(self.dataset_id, self.prefix, self.grid, linear[order], size[order])

    def first(self) -> int | None:
        return int(self.linear[0]) if self.linear.size else None


def _parse_names(names: list[str], rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid coordinates ``(n, rank)`` of the chunk names among ``names``, and which they are."""
    if not names:
        return np.zeros((0, rank), dtype=np.int64), np.zeros(0, dtype=bool)
    return parse_lines("\n".join(names).encode("utf-8", "surrogateescape"), rank)


def parse_lines(text: bytes, rank: int, end: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Parse ``end``-terminated names ``i_j_k`` into coordinates, all in numpy.

    Returns ``(coords (n_valid, rank), valid (n_lines,))``: a line is valid when it
    is ``rank`` decimal numbers joined by ``_`` (``.dataset.json`` and stray
    objects are not). No Python object per name: a million names cost a few
    tens of milliseconds, which is what lets a domain of a million chunks be
    listed quickly (sizes are parsed the same way with ``rank=1``).
    """
    if not text:
        return np.zeros((0, rank), dtype=np.int64), np.zeros(0, dtype=bool)
    term = bytes([end])
    buf = np.frombuffer(text if text.endswith(term) else text + term, dtype=np.uint8)
    is_nl = buf == end
    is_digit = (buf >= 48) & (buf <= 57)
    is_us = buf == 95
    is_sep = is_us | is_nl
    nl = np.flatnonzero(is_nl)
    starts = np.empty(nl.size, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    # a byte that breaks a chunk name: foreign, an empty field ("1__2", "_1"), a leading zero ("05")
    broken = ~(is_digit | is_sep)
    broken[0] |= bool(is_sep[0])
    broken[1:] |= is_sep[1:] & is_sep[:-1]
    broken[:-1] |= (buf[:-1] == 48) & is_digit[1:] & np.r_[True, is_sep[:-2]]
    valid = ~np.logical_or.reduceat(broken, starts) \
        & (np.add.reduceat(is_us.view(np.uint8), starts, dtype=np.int32) == rank - 1)
    if not valid.any():
        return np.zeros((0, rank), dtype=np.int64), valid
    # Fields lie between separators: Horner's rule over at most 18 digit positions,
    # vectorized across all fields at once (no per-byte cumulative sums).
    sep_all = np.flatnonzero(is_sep)
    fstart = np.empty(sep_all.size, dtype=np.int64)
    fstart[0] = 0
    fstart[1:] = sep_all[:-1] + 1
    flen = sep_all - fstart
    longest = int(flen.max()) if flen.size else 0
    if longest > 18:
        raise ValueError("chunk coordinate or size with more than 18 digits")
    sums = buf[fstart].astype(np.int64) - 48 if longest else np.zeros(sep_all.size, dtype=np.int64)
    for k in range(1, longest):
        live = np.flatnonzero(flen > k)
        sums[live] = sums[live] * 10 + (buf[fstart[live] + k].astype(np.int64) - 48)
    # keep the fields of valid lines: each line has (its underscores + 1) fields
    per_line = np.add.reduceat(is_us.view(np.uint8), starts, dtype=np.int64) + 1
    fields = sums[np.repeat(valid, per_line)]
    return fields.reshape(-1, rank), valid


@dataclass
class CrcTable:
    """CRC32 of each deflate chunk's decoded bytes, keyed by linear index and Adler-32.

    Linear indexes hold for one grid only (a resize along any dimension but the first
    renumbers the chunks), so a table knows its ``grid`` and is stored by chunk coordinates
    (:data:`CRC_FILE_FIELDS`), which no resize changes: loaded under any grid it is keyed
    right, entries outside that grid left out (or, for an update, carried along unchanged as
    ``beyond``: a writer still at a smaller extent must not drop entries of chunks another
    wrote after a growth). Tables written before they knew their grid (``CRC_DTYPE``, by
    linear index) are read under the grid they are loaded with.
    """

    entries: np.ndarray  # CRC_DTYPE, sorted by linear
    grid: tuple[int, ...] | None = None  # the storage grid ``linear`` counts in (None: unknown)
    beyond: np.ndarray | None = None  # stored rows (by coordinates) outside ``grid``, written back as read

    @classmethod
    def empty(cls, grid: tuple[int, ...] | None = None) -> "CrcTable":
        return cls(np.zeros(0, dtype=CRC_DTYPE), grid)

    @classmethod
    def from_bytes(cls, data: bytes, grid: tuple[int, ...] | None = None, keep_beyond: bool = False) -> "CrcTable":
        """The stored table keyed under ``grid`` (a storage grid; None: as stored); ``keep_beyond``:
        entries outside ``grid`` kept as :attr:`beyond` (to be written back), else left out."""
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception:
            return cls.empty(grid)  # derived data: a damaged table is just rebuilt
        if not isinstance(arr, np.ndarray) or arr.ndim != 1:
            return cls.empty(grid)
        if arr.dtype == CRC_DTYPE:  # by linear index, grid unknown: taken to be ``grid``
            if grid is not None:
                arr = arr[(arr["linear"] >= 0) & (arr["linear"] < math.prod(grid))]
            return cls(np.sort(arr, order="linear"), grid)
        if arr.dtype.names != CRC_FILE_FIELDS or arr.dtype["coords"].base != np.dtype("<i8") \
                or len(arr.dtype["coords"].shape) != 1:
            return cls.empty(grid)
        coords = arr["coords"]
        if grid is None:
            grid = tuple(int(n) for n in coords.max(axis=0) + 1) if len(arr) else (1,) * coords.shape[1]
        if coords.shape[1] != len(grid):
            return cls.empty(grid)
        inside = ((coords >= 0) & (coords < np.asarray(grid, dtype=np.int64))).all(axis=1)
        beyond = arr[~inside & (coords >= 0).all(axis=1)] if keep_beyond else None
        arr = arr[inside]
        out = np.zeros(len(arr), dtype=CRC_DTYPE)
        out["linear"] = np.ravel_multi_index(tuple(arr["coords"].T), grid) if len(arr) else 0
        out["adler"], out["crc"] = arr["adler"], arr["crc"]
        return cls(np.sort(out, order="linear", kind="stable"), tuple(grid),
                   beyond if beyond is not None and len(beyond) else None)

    def to_bytes(self) -> bytes:
        """By coordinates when the grid is known (every writer of polyfs knows it)."""
        out = self.entries
        if self.grid is not None:
            rank = len(self.grid)
            out = np.zeros(len(self.entries), dtype=_file_dtype(rank))
            if len(out):
                out["coords"] = np.stack(np.unravel_index(self.entries["linear"], self.grid), axis=-1)
            out["adler"], out["crc"] = self.entries["adler"], self.entries["crc"]
            if self.beyond is not None and self.beyond.dtype == out.dtype:
                out = np.concatenate([out, self.beyond])
        buf = io.BytesIO()
        np.save(buf, out, allow_pickle=False)
        return buf.getvalue()

    def for_grid(self, grid: tuple[int, ...]) -> "CrcTable":
        """The same entries keyed under another grid (after a resize); those outside it dropped
        (and :attr:`beyond` with them)."""
        grid = tuple(int(n) for n in grid)
        e = self.entries
        if self.grid == grid:
            return self
        if self.grid is None:  # keyed under an unknown grid: taken to be this one
            return CrcTable(e[(e["linear"] >= 0) & (e["linear"] < math.prod(grid))], grid)
        if len(self.grid) != len(grid):
            return CrcTable.empty(grid)
        coords = np.stack(np.unravel_index(e["linear"], self.grid), axis=-1).reshape(len(e), len(grid))
        inside = (coords < np.asarray(grid, dtype=np.int64)).all(axis=1)
        out = e[inside].copy()
        if len(out):
            out["linear"] = np.ravel_multi_index(tuple(coords[inside].T), grid)
        return CrcTable(np.sort(out, order="linear", kind="stable"), grid)

    def without(self, linear: Iterable[int]) -> "CrcTable":
        """A new table without the entries of these chunks (deleted ones)."""
        drop = np.fromiter((int(x) for x in linear), dtype=np.int64)
        if not drop.size or not self.entries.size:
            return self
        return CrcTable(self.entries[~np.isin(self.entries["linear"], drop)], self.grid, self.beyond)

    def only(self, present: Iterable[int]) -> "CrcTable":
        """A new table with only the entries of these chunks (the ones that exist)."""
        keep = np.fromiter((int(x) for x in present), dtype=np.int64)
        return CrcTable(self.entries[np.isin(self.entries["linear"], keep)], self.grid, self.beyond)

    def lookup(self, linear: int, adler: int) -> int | None:
        e = self.entries
        lo = int(np.searchsorted(e["linear"], linear, side="left"))
        hi = int(np.searchsorted(e["linear"], linear, side="right"))
        for i in range(lo, hi):  # usually one; two while a chunk is being replaced
            if int(e["adler"][i]) == adler:
                return int(e["crc"][i])
        return None

    def merged(self, items: Iterable[tuple[int, int, int]], keep_old: bool = False) -> "CrcTable":
        """A new table with ``(linear, adler, crc)`` entries added or replaced; ``keep_old``:
        a chunk's old entry stays beside its new one (written before the chunk is replaced, so
        a crash between the two leaves a table that matches the chunk either way)."""
        new = np.asarray(list(items), dtype=CRC_DTYPE) if items else np.zeros(0, dtype=CRC_DTYPE)
        if new.size == 0:
            return self
        e = self.entries
        drop = np.isin(e["linear"], new["linear"])  # numpy over the table, Python over the few hits:
        if keep_old:  # a commit of a large table must not walk all of it in Python
            pairs = {(int(a), int(b)) for a, b in zip(new["linear"], new["adler"])}
            for i in np.flatnonzero(drop).tolist():
                drop[i] = (int(e["linear"][i]), int(e["adler"][i])) in pairs
        return CrcTable(np.sort(np.concatenate([e[~drop], new]), order="linear", kind="stable"), self.grid,
                        self.beyond)

    def __len__(self) -> int:
        return int(self.entries.size)
