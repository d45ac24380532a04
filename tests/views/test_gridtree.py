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


@pytest.mark.parametrize("grid,factors", [((5, 7), (1, 1)), ((5, 7), (2, 3)), ((), ()), ((9,), (1,))])
def test_zarr_file_layout_groups_chunks_into_files(grid, factors) -> None:
    """A file per chunk takes the shortcut (nothing sorted or grouped); shards group their
    inner chunks. Both must say the same as working it out from coordinates."""
    from polyfs.formats.zarr.view import FileLayout

    rng = np.random.default_rng(7)
    total = int(np.prod(grid)) if grid else 1
    linear = np.sort(rng.choice(total, size=max(1, total * 2 // 3), replace=False)).astype(np.int64)
    lay = FileLayout(linear, grid, factors)
    storage, fac = grid or (1,), factors or (1,)
    coords = np.stack(np.unravel_index(linear, storage), axis=-1)
    file_grid = tuple(-(-g // k) for g, k in zip(storage, fac))
    owner = np.ravel_multi_index(tuple((coords // np.asarray(fac)).T), file_grid)
    assert lay.file_grid == file_grid and lay.files.tolist() == sorted(set(owner.tolist()))
    for f in lay.files.tolist():
        members, inner = lay.members(f)
        mine = linear[owner == f]
        assert sorted(members.tolist()) == mine.tolist()
        expect_inner = np.ravel_multi_index(tuple((np.stack(np.unravel_index(members, storage), -1)
                                                   % np.asarray(fac)).T), fac)
        assert inner.tolist() == expect_inner.tolist()
        assert inner.tolist() == sorted(inner.tolist())  # inner chunks in shard-index order


def test_sparse_coordinates_in_a_large_directory() -> None:
    made: list[int] = []
    top = tree([(i, 3 * j) for i in (0, 4) for j in range(600)], made).entries()
    assert list(top) == ["0", "4"]
    row = top["4"].entries()
    assert len(row) == 600 and list(row)[:3] == ["0", "3", "6"] and "1" not in row and "1797" in row
    assert row["1797"].name == "1797" and made == [600 + 599]
