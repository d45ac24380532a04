"""PyTables and pandas writing through ``hdf5/`` of a real mount (round 14).

What this module pins:

- ``DataFrame.to_hdf`` straight into ``hdf5/`` (``format="fixed"`` and ``"table"`` with
  ``data_columns``, compression and appends) was refused at close with ``EINVAL``: every
  pandas file holds PyTables' ``H5T_STD_B8`` bitfield attributes, which the written-file diff
  could not read. The same session then edited with PyTables (``modify_column``,
  ``remove_rows``, ``rename_node``, ``copy_node``, ``remove_node``, an index, attributes)
  reads back after a remount as the same session on a local file, and ``h5dump`` reads it.
"""
from __future__ import annotations

import shutil
import subprocess
import warnings

import numpy as np
import pytest

from support import assert_same_pytables_nodes
from test_hdf5_tools_explore import check_deep, seeded_store  # noqa: F401

tables = pytest.importorskip("tables")
pd = pytest.importorskip("pandas")

pytestmark = pytest.mark.mount


def _frame(n: int, start: int = 0):
    return pd.DataFrame({"a": np.arange(start, start + n, dtype="i8"), "b": np.linspace(0, 1, n),
                         "s": [f"s{i}" for i in range(start, start + n)],
                         "t": pd.date_range("2020-01-01", periods=n, freq="h")})


def _session(path) -> None:
    """A pandas user's file, then a PyTables user's edits of it (``"a"``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw = {"format": "table", "data_columns": ["a", "s"], "min_itemsize": {"s": 8}, "complevel": 5,
              "complib": "zlib"}
        _frame(20).to_hdf(path, key="df", **kw)
        _frame(5, 100).to_hdf(path, key="df", append=True, **kw)
        _frame(6).to_hdf(path, key="fixed", format="fixed")
        with tables.open_file(str(path), "a") as f:
            t = f.root.df.table
            t.modify_column(0, 2, column=np.array([-1, -2], dtype="i8"), colname="a")
            t.remove_rows(3, 6)
            t.attrs.note = "edited"
            f.rename_node("/df", "renamed")
            f.copy_node("/renamed/table", "/", "copied")
            f.remove_node("/fixed", recursive=True)
            f.create_carray("/", "c", obj=np.arange(60, dtype="i4").reshape(6, 10),
                            filters=tables.Filters(5, "zlib", shuffle=True, fletcher32=True), chunkshape=(3, 5))
            f.root.copied.cols.a.create_index()


def test_pandas_and_pytables_sessions_in_the_view_read_back_after_a_remount(mount_store, seeded_store, tmp_path):
    local = tmp_path / "local.h5"
    _session(local)
    m = mount_store(str(seeded_store))
    view = m.path / "hdf5" / "frames.h5"
    _session(view)
    m.stop()
    m = mount_store(str(seeded_store))
    view = m.path / "hdf5" / "frames.h5"
    assert_same_pytables_nodes(local, view)
    got = pd.read_hdf(view, "renamed", where="a < 0")
    assert got["a"].tolist() == [-1, -2]
    pd.testing.assert_frame_equal(pd.read_hdf(view, "copied"), pd.read_hdf(local, "copied"))
    if shutil.which("h5dump"):
        res = subprocess.run(["h5dump", "-d", "/c", str(view)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    m.stop()
    check_deep(seeded_store)
