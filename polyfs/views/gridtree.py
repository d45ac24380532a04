"""Chunk-grid directories (Zarr's ``c/i/j/k``, N5's ``k/j/i``) over known chunk coordinates.

A directory of a chunk grid is rebuilt each time its array changes (every chunk written or
deleted through the mount re-renders the domain). Its entries are therefore made lazily:
the distinct coordinate values of one level are found with numpy, and a child node is made
only when somebody asks for that name. A lookup after each of ``rm``'s unlinks in a
directory of N chunk files then costs a binary search, not N new nodes (which made deleting
an array's chunk files quadratic in their number). A listing still makes every node.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping
from typing import Callable

import numpy as np

from .base import DirNode, Node

SMALL_DIR = 512  # directories of up to this many rows are grouped in Python, larger ones in numpy


class GridEntries(Mapping[str, Node]):
    """One level of a chunk-grid directory: its names are the distinct coordinate values in
    ascending order (decimal, no leading zeros), each child made on first use and kept."""

    __slots__ = ("_values", "_bounds", "_make", "_made")

    def __init__(self, values: list[int], bounds: list[int],
                 make: Callable[[str, int, int], Node]) -> None:
        """``values`` ascending; rows ``bounds[i]:bounds[i + 1]`` hold ``values[i]``;
        ``make(name, lo, hi)`` builds the child of those rows."""
        self._values = values
        self._bounds = bounds
        self._make = make
        self._made: dict[str, Node] = {}

    def _index(self, name: str) -> int | None:
        if not (name.isascii() and name.isdigit()) or (len(name) > 1 and name[0] == "0"):
            return None  # not a name this directory can hold ("01", "-1", "1.0", "a")
        v = int(name)
        i = bisect_left(self._values, v)
        return i if i < len(self._values) and self._values[i] == v else None

    def __getitem__(self, name: str) -> Node:
        node = self._made.get(name)
        if node is not None:
            return node
        i = self._index(name) if isinstance(name, str) else None
        if i is None:
            raise KeyError(name)
        # two threads may make the same child: both keep the one stored first
        return self._made.setdefault(name, self._make(name, self._bounds[i], self._bounds[i + 1]))

    def __contains__(self, name: object) -> bool:
        return name in self._made or (isinstance(name, str) and self._index(name) is not None)

    def __iter__(self) -> Iterator[str]:
        return (str(v) for v in self._values)

    def __len__(self) -> int:
        return len(self._values)


def coord_tree(name: str, coords: np.ndarray, rows: np.ndarray, depth: int,
               make_file: Callable[[str, int], Node], mtime: float | None) -> DirNode:
    """Directories ``i/j/.../k`` for the (lexicographically sorted) file coordinates
    ``coords[rows]``; ``make_file(name, row)`` makes the file of row ``row``."""

    def load() -> GridEntries:
        col = coords[rows, depth]
        if len(rows) <= SMALL_DIR:  # the rows are sorted: runs of one value, found in Python
            vals = col.tolist()  # (np.unique costs more than that on a few rows: one per directory)
            starts = [i for i in range(len(vals)) if i == 0 or vals[i] != vals[i - 1]]
            values = [vals[i] for i in starts]
        else:  # sorted too: a value starts where the column steps (no sort, as np.unique would)
            first = np.concatenate([[0], np.flatnonzero(col[1:] != col[:-1]) + 1])
            values, starts = col[first].tolist(), first.tolist()
        bounds = starts + [len(rows)]
        if depth == coords.shape[1] - 1:
            return GridEntries(values, bounds, lambda child, lo, hi: make_file(child, int(rows[lo])))
        return GridEntries(values, bounds, lambda child, lo, hi: coord_tree(
            child, coords, rows[lo:hi], depth + 1, make_file, mtime))

    return DirNode(name, load, mtime, cheap=True)  # numpy over known coordinates: no I/O
