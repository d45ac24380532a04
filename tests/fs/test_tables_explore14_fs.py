"""PyTables and pandas as users of ``hdf5/`` and ``polyfs import`` (round 14, kernel-free).

What this module pins:

- Every file pandas' ``to_hdf`` writes (``format="fixed"`` or ``"table"``) holds HDF5 bitfield
  attributes (PyTables stores numpy bools as ``H5T_STD_B8``: pandas' ``transposed``, bool
  columns). The importer and the written-file diff asked h5py's bitfield type for its
  precision, which it has no accessor for: ``polyfs import`` failed with ``AttributeError``
  and a file written into ``hdf5/`` was refused with ``EINVAL``. Bitfields are read from
  their encoded datatype message now, their bits kept exactly.
- A PyTables VLArray of a shaped atom (``H5T_VLEN { H5T_ARRAY { [2] H5T_STD_I32LE } }``) was
  stored with every value repeated across a whole element (numpy's conversion of an
  ``(n, 2)`` array to the subarray dtype) and served so that HDF5 could not read it ("Expected
  global heap object size does not match"). Fixed in the view's encoder and in the chunk codec
  (``polyfs/codecs/vlen.py``).
- PyTables sessions on such a domain (appends, ``modify_rows``, ``remove_rows``, node renames,
  copies, removals, indexes, attributes) store what a local file holds.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from support import assert_same_pytables_nodes
from writeharness import FS, write_changes

from polyfs.importers import import_source

tables = pytest.importorskip("tables")
pd = pytest.importorskip("pandas")


def _frame(n: int = 12, start: int = 0):
    """A frame of the column kinds pandas users write (no bool column: see the bitfield test)."""
    return pd.DataFrame({"a": np.arange(start, start + n, dtype="i8"), "b": np.linspace(0, 1, n),
                         "s": [f"s{i}" for i in range(start, start + n)],
                         "t": pd.date_range("2020-01-01", periods=n, freq="h")})


def _check_deep(store) -> None:
    res = subprocess.run([sys.executable, "-m", "polyfs", "check", str(store), "--deep"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def _pandas_file(path, fmt: str, complib: str | None) -> None:
    kw = {"complevel": 5, "complib": complib} if complib else {}
    if fmt == "fixed":
        _frame().to_hdf(path, key="df", format="fixed", **kw)
        pd.Series(np.arange(4.0)).to_hdf(path, key="ser", format="fixed", **kw)
    else:
        _frame().to_hdf(path, key="df", format="table", data_columns=["a", "s"], min_itemsize={"s": 8}, **kw)
        _frame(5, 100).to_hdf(path, key="df", format="table", append=True, data_columns=["a", "s"],
                              min_itemsize={"s": 8}, **kw)


@pytest.mark.parametrize("fmt,complib", [("fixed", None), ("fixed", "zlib"), ("table", None), ("table", "zlib"),
                                         ("table", "blosc")])
@pytest.mark.parametrize("how", ["import", "new file"])
def test_pandas_files_are_imported_and_taken_as_new_files(tmp_path, fmt, complib, how):
    src = tmp_path / "df.h5"
    _pandas_file(src, fmt, complib)
    store = tmp_path / "store"
    store.mkdir()
    if how == "import":
        import_source(src, str(store), domain="/df.h5", progress=False)
        fs = FS(f"file://{store}")
    else:
        fs = FS(f"file://{store}")
        fs.write_file("hdf5/df.h5", src.read_bytes())
    shown = tmp_path / "shown.h5"
    shown.write_bytes(fs.fresh(read_only=True).read_file("hdf5/df.h5"))
    pd.testing.assert_frame_equal(pd.read_hdf(shown, "df"), pd.read_hdf(src, "df"))
    if fmt == "table":
        sel = pd.read_hdf(shown, "df", where="a >= 100 & s != 's101'")
        assert list(sel["a"]) == [100, 102, 103, 104]
    assert_same_pytables_nodes(src, shown)
    _check_deep(store)


def _bool_file(path) -> np.ndarray:
    flags = np.array([True, False, True, True])
    with tables.open_file(str(path), "w") as f:
        f.create_array("/", "flags", flags)
        f.root.flags.attrs.ok = np.True_
    return flags


def test_a_pytables_bool_array_keeps_its_bits(tmp_path):
    """``H5T_STD_B8`` data and attributes come back with the bits the file held."""
    src = tmp_path / "b.h5"
    flags = _bool_file(src)
    store = tmp_path / "store"
    import_source(src, str(store), domain="/b.h5", progress=False)
    shown = tmp_path / "shown.h5"
    shown.write_bytes(FS(f"file://{store}", read_only=True).read_file("hdf5/b.h5"))
    with tables.open_file(str(shown)) as f:
        np.testing.assert_array_equal(f.root.flags.read().astype(bool), flags)
        assert f.root.flags.read().view(np.uint8).tolist() == [1, 0, 1, 1]
        assert bool(f.root.flags.attrs.ok)


def test_a_bitfield_is_shown_as_a_bitfield(tmp_path):
    """PyTables and pandas read ``H5T_STD_B8`` as numpy bool; shown as an unsigned integer
    a bool column comes back ``uint8``."""
    src = tmp_path / "b.h5"
    flags = _bool_file(src)
    frame = pd.DataFrame({"flag": [True, False, True], "x": [1.0, 2.0, 3.0]})
    frame.to_hdf(tmp_path / "p.h5", key="df", format="table")
    store = tmp_path / "store"
    store.mkdir()
    fs = FS(f"file://{store}")
    fs.write_file("hdf5/b.h5", src.read_bytes())
    fs.write_file("hdf5/p.h5", (tmp_path / "p.h5").read_bytes())
    shown = tmp_path / "shown.h5"
    shown.write_bytes(fs.fresh(read_only=True).read_file("hdf5/b.h5"))
    with tables.open_file(str(shown)) as f:
        assert f.root.flags.read().dtype == np.bool_
        np.testing.assert_array_equal(f.root.flags.read(), flags)
    (tmp_path / "p_shown.h5").write_bytes(fs.fresh(read_only=True).read_file("hdf5/p.h5"))
    pd.testing.assert_frame_equal(pd.read_hdf(tmp_path / "p_shown.h5", "df"), frame)


def _session(path) -> None:
    """What a PyTables user does to a pandas table file opened ``"a"``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _frame(4, 200).to_hdf(path, key="df", format="table", append=True, data_columns=["a", "s"])
        with tables.open_file(str(path), "a") as f:
            t = f.root.df.table
            t.modify_column(0, 2, column=np.array([-1, -2], dtype="i8"), colname="a")
            t.remove_rows(3, 5)
            t.attrs.note = "edited"
            f.rename_node("/df", "renamed")
            f.copy_node("/renamed/table", "/", "copied")
            f.remove_node("/ser", recursive=True)
            f.create_earray("/", "e", tables.Float32Atom(), (0, 3),
                            filters=tables.Filters(5, "zlib", shuffle=True, fletcher32=True)).append(np.ones((2, 3)))
            f.root.copied.cols.a.create_index()


def test_a_pytables_session_on_a_pandas_file_is_stored(tmp_path):
    src = tmp_path / "df.h5"
    _pandas_file(src, "fixed", None)
    _frame().to_hdf(src, key="df", format="table", data_columns=["a", "s"], min_itemsize={"s": 8})  # over the fixed one
    store = tmp_path / "store"
    import_source(src, str(store), domain="/df.h5", progress=False)
    fs = FS(f"file://{store}")
    before = fs.read_file("hdf5/df.h5")
    work = tmp_path / "work.h5"
    work.write_bytes(before)
    _session(work)
    write_changes(fs, "hdf5/df.h5", before, work.read_bytes())
    shown = tmp_path / "shown.h5"
    shown.write_bytes(fs.fresh(read_only=True).read_file("hdf5/df.h5"))  # a fresh load: a remount
    assert_same_pytables_nodes(work, shown)
    got = pd.read_hdf(shown, "renamed")
    assert got["a"].tolist()[:3] == [-1, -2, 2] and len(got) == 14
    _check_deep(store)
    assert os.path.getsize(shown) > 0


@pytest.mark.parametrize("how", ["import", "new file"])
def test_a_vlarray_of_a_shaped_atom_keeps_its_values(tmp_path, how):
    src = tmp_path / "v.h5"
    rows = [np.array([[1, 2], [3, 4]], dtype="i4"), np.zeros((0, 2), dtype="i4"), np.array([[5, 6]], dtype="i4")]
    with tables.open_file(str(src), "w") as f:
        v = f.create_vlarray("/", "v", tables.Int32Atom(shape=(2,)))
        for r in rows:
            v.append(r)
    store = tmp_path / "store"
    store.mkdir()
    if how == "import":
        import_source(src, str(store), domain="/v.h5", progress=False)
        fs = FS(f"file://{store}")
    else:
        fs = FS(f"file://{store}")
        fs.write_file("hdf5/v.h5", src.read_bytes())
    shown = tmp_path / "shown.h5"
    shown.write_bytes(fs.fresh(read_only=True).read_file("hdf5/v.h5"))
    with tables.open_file(str(shown)) as f:
        got = f.root.v.read()
    assert len(got) == 3
    for a, b in zip(got, rows):
        np.testing.assert_array_equal(a, b)
    _check_deep(store)
