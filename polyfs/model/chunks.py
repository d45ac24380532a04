"""Which chunks of a dataset exist and how big they are, from one listing.

A :class:`ChunkIndex` is built from a single listing of the dataset's prefix
(names and sizes only), never from chunk data; it holds numpy arrays so a
domain of a million chunks costs tens of MB, not Python objects per chunk.
The :class:`CrcTable` is polyfs's derived data for deflate chunks (CRC32 of
the decoded bytes, keyed by the stream's own Adler-32 so a chunk rewritten
behind polyfs's back is detected, never served with a stale CRC).
"""
from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .keys import chunk_name

CRC_DTYPE = np.dtype([("linear", "<i8"), ("adler", "<u4"), ("crc", "<u4")])


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
        inside = (coords < np.asarray(grid, dtype=np.int64)).all(axis=1)  # beyond the current extent: ignored
        coords, sizes = coords[inside], sizes[inside]
        strides = np.asarray([math.prod(grid[i + 1:]) for i in range(rank)], dtype=np.int64)
        linear = coords @ strides if len(coords) else np.zeros(0, dtype=np.int64)
        order = np.argsort(linear, kind="stable")
        return cls(dataset_id, prefix, grid, linear[order], sizes[order])

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
        return int(np.ravel_multi_index(tuple(int(c) for c in coords), self.grid))

    def key(self, linear: int) -> str:
        return self.prefix + chunk_name(self.coords_of(int(linear)))

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
        return int(self.sizes_for(np.asarray([linear]))[0])

    def first(self) -> int | None:
        return int(self.linear[0]) if self.linear.size else None


def _parse_names(names: list[str], rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid coordinates ``(n, rank)`` of the chunk names among ``names``, and which they are.

    One regular-expression pass over all names finds the few that are not
    chunk names of this rank (``.dataset.json``, stray objects); the digits
    are converted in one numpy call, so a million names cost well under a
    second (no Python object per chunk).
    """
    n = len(names)
    if n == 0:
        return np.zeros((0, rank), dtype=np.int64), np.zeros(0, dtype=bool)
    text = "\n".join(names)
    bad = _BAD_LINE[rank] if rank in _BAD_LINE else _BAD_LINE.setdefault(
        rank, re.compile(r"^(?!\d+" + r"(?:_\d+)" * (rank - 1) + r"$)", re.M))
    keep = np.ones(n, dtype=bool)
    starts = [m.start() for m in bad.finditer(text)]
    if starts:
        line_starts = np.zeros(n, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, names[:-1]), dtype=np.int64, count=n - 1) + 1, out=line_starts[1:])
        bad_rows = np.searchsorted(line_starts, np.asarray(starts, dtype=np.int64))
        keep[bad_rows] = False
        good = list(names)
        for i in sorted(bad_rows.tolist(), reverse=True):
            del good[i]
        text = "\n".join(good)
    count = int(keep.sum())
    if count == 0:
        return np.zeros((0, rank), dtype=np.int64), keep
    flat = np.array(text.replace("_", "\n").split("\n"), dtype=np.int64) if count < 64 else \
        np.fromstring(text.replace("_", " ").replace("\n", " "), dtype=np.int64, sep=" ")
    return flat.reshape(count, rank), keep


_BAD_LINE: dict[int, "re.Pattern[str]"] = {}


@dataclass
class CrcTable:
    """CRC32 of each deflate chunk's decoded bytes, keyed by linear index and Adler-32."""

    entries: np.ndarray  # CRC_DTYPE, sorted by linear

    @classmethod
    def empty(cls) -> "CrcTable":
        return cls(np.zeros(0, dtype=CRC_DTYPE))

    @classmethod
    def from_bytes(cls, data: bytes) -> "CrcTable":
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception:
            return cls.empty()  # derived data: a damaged table is just rebuilt
        if arr.dtype != CRC_DTYPE:
            return cls.empty()
        return cls(np.sort(arr, order="linear"))

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.save(buf, self.entries, allow_pickle=False)
        return buf.getvalue()

    def lookup(self, linear: int, adler: int) -> int | None:
        e = self.entries
        i = int(np.searchsorted(e["linear"], linear))
        if i < e.size and int(e["linear"][i]) == linear and int(e["adler"][i]) == adler:
            return int(e["crc"][i])
        return None

    def merged(self, items: Iterable[tuple[int, int, int]]) -> "CrcTable":
        """A new table with ``(linear, adler, crc)`` entries added or replaced."""
        new = np.asarray(list(items), dtype=CRC_DTYPE) if items else np.zeros(0, dtype=CRC_DTYPE)
        if new.size == 0:
            return self
        keep = self.entries[~np.isin(self.entries["linear"], new["linear"])]
        return CrcTable(np.sort(np.concatenate([keep, new]), order="linear"))

    def __len__(self) -> int:
        return int(self.entries.size)
