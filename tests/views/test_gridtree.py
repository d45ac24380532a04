"""Tier 1: chunk-grid directories (views/gridtree.py) make a child only for a name asked for,
and only for names the grid holds, spelled as the views spell them."""
from __future__ import annotations

import numpy as np
import pytest

from polyfs.views.base import DirNode, FileNode
from polyfs.views.gridtree import GridEntries, coord_tree


def tree(coords: list[tuple[int, ...]], made: list[int]) -> DirNode:
    c = np.asarray(sorted(coords), dtype=np.int64)

    def make_file(name: str, row: int) -> FileNode:
        made.append(row)
        return FileNode(name, lambda: None, 0.0)  # type: ignore[arg-type,return-value]

    return coord_tree("c", c, np.arange(len(c)), 0, make_file, 0.0)


def test_children_are_made_on_first_use_and_kept() -> None:
    made: list[int] = []
    root = tree([(i, j) for i in range(3) for j in range(700)], made)  # 700 rows: the numpy grouping
    top = root.entries()
    assert isinstance(top, GridEntries) and list(top) == ["0", "1", "2"] and len(top) == 3
    row1 = top["1"].entries()
    assert len(row1) == 700 and not made
    f = row1["650"]
    assert f.name == "650" and made == [700 + 650]
    assert row1["650"] is f and row1.get("650") is f and made == [1350]  # kept, not made again
    assert [name for name, _ in sorted(row1.items())][:3] == ["0", "1", "10"]  # a listing makes all
    assert len(made) == 700


@pytest.mark.parametrize("name", ["01", "-1", "+1", "1.0", " 1", "1 ", "", "a", "\u0663", "700", "99999999999999999999"])
def test_names_the_grid_does_not_hold_are_not_found(name: str) -> None:
    made: list[int] = []
    row = tree([(0, j) for j in range(700)], made).entries()["0"].entries()
    assert name not in row and row.get(name) is None and not made
    with pytest.raises(KeyError):
        row[name]


def test_sparse_coordinates_in_a_small_directory() -> None:
    made: list[int] = []
    top = tree([(0, 3), (0, 17), (5, 0), (12, 1)], made).entries()
    assert list(top) == ["0", "5", "12"] and "1" not in top and "12" in top
    assert list(top["0"].entries()) == ["3", "17"] and "4" not in top["0"].entries()
    assert top["12"].entries()["1"].name == "1" and made == [3]
    assert dict.fromkeys(top) == {"0": None, "5": None, "12": None}
