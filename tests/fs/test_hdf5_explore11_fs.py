"""The HDF5 view as users use it, eleventh round (kernel-free).

What this module pins:

- h5py lists a group's links by name unless the group tracks their creation order
  (``track_order=True``, netCDF-4). The view made every group track it, so ``list(f)`` of a
  file h5py wrote (copied in, imported, or made with ``"w"`` through the view) came back in
  creation order, not as ``list(f)`` of the same file on disk. A group that did not track it
  is now shown tracking none; groups that did keep their order.
- ``del f["t"]`` of a committed type a dataset still uses: HDF5 keeps the type (anonymous),
  but the store deleted the datatype object, leaving the dataset's type naming a ``t-...``
  object that no longer exists. It is kept now; and a file holding an anonymous committed
  type (what ``h5copy`` of such a dataset makes) is imported with it as an unlinked datatype.
"""
from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

from polyfs.importers import import_source
from polyfs.model import types as T
from polyfs.store import open_store
from support import make_ctx
from writeharness import FS, write_changes

PAIR = np.dtype([("x", "<f4"), ("y", "<i2")])


def _model(store: str, domain: str):
    ctx, _ = make_ctx(open_store(f"file://{store}"))
    return ctx.catalog.load(domain)


def _check_deep(store: str) -> None:
    res = subprocess.run([sys.executable, "-m", "polyfs", "check", store, "--deep"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def _unordered(path) -> None:
    """Links made out of name order, in groups that do not track creation order (h5py's default)."""
    with h5py.File(path, "w") as f:
        f["b"] = np.arange(3)
        f["a"] = np.arange(2)
        g = f.create_group("g")
        for n in ["z", "c", "m"]:
            g[n] = np.arange(1)
        t = f.create_group("tracked", track_order=True)
        for n in ["q", "b", "k"]:
            t[n] = np.arange(1)


def _listing(path) -> dict[str, list[str]]:
    with h5py.File(path, "r") as f:
        return {"/": list(f), "g": list(f["g"]), "tracked": list(f["tracked"])}


def test_imported_h5py_groups_list_links_as_the_file_did(tmp_path):
    src = tmp_path / "u.h5"
    _unordered(src)
    store = str(tmp_path / "store")
    import_source(src, store, domain="/u.h5", progress=False)
    shown = tmp_path / "shown.h5"
    shown.write_bytes(FS(f"file://{store}", read_only=True).read_file("hdf5/u.h5"))
    assert _listing(shown) == _listing(src) == {"/": ["a", "b", "g", "tracked"], "g": ["c", "m", "z"],
                                                  "tracked": ["q", "b", "k"]}


def test_h5py_w_through_the_view_then_r_plus_keeps_name_order(tmp_path):
    fs = FS()
    local = tmp_path / "local.h5"
    _unordered(local)
    fs.write_file("hdf5/u.h5", local.read_bytes())
    before = fs.read_file("hdf5/u.h5")
    work = tmp_path / "work.h5"
    work.write_bytes(before)
    for p in (local, work):
        with h5py.File(p, "a") as f:
            f["aa"] = np.arange(4)
            del f["g/c"]
            f["g/d"] = np.arange(2)
            f.move("b", "zz")
            f["tracked/a"] = np.arange(1)
    write_changes(fs, "hdf5/u.h5", before, work.read_bytes())
    shown = tmp_path / "shown.h5"
    shown.write_bytes(fs.fresh(read_only=True).read_file("hdf5/u.h5"))
    assert _listing(shown) == _listing(local)
    assert _listing(shown)["tracked"] == ["q", "b", "k", "a"]


def _typed(path) -> None:
    with h5py.File(path, "w") as f:
        f["t"] = PAIR
        f.create_dataset("d", data=np.array([(1.5, 2), (3.0, 4)], dtype=PAIR), dtype=f["t"], chunks=(2,),
                         compression="gzip")
        f["d"].attrs.create("a", data=np.zeros(1, dtype=PAIR), dtype=f["t"])


def test_deleting_the_link_of_a_committed_type_in_use_keeps_the_type(tmp_path):
    src = tmp_path / "t.h5"
    _typed(src)
    store = str(tmp_path / "store")
    import_source(src, store, domain="/t.h5", progress=False)
    fs = FS(f"file://{store}")
    before = fs.read_file("hdf5/t.h5")
    work = tmp_path / "work.h5"
    work.write_bytes(before)
    with h5py.File(work, "a") as f:
        del f["t"]
        assert f["d"].id.get_type().committed()  # HDF5 keeps it: the dataset uses it
    snapshot = fs.snapshot()
    write_changes(fs, "hdf5/t.h5", before, work.read_bytes())
    assert fs.snapshot() != snapshot
    model = _model(store, "/t.h5")
    d = model.resolve("/d")
    assert isinstance(d.type, T.Committed)
    ctx, _ = make_ctx(open_store(f"file://{store}"))
    from polyfs.model import keys
    assert ctx.store.get(keys.object_key(d.type.id)) is not None  # the datatype object the type names
    assert "t" not in model.root.links
    _check_deep(store)
    shown = tmp_path / "shown.h5"
    shown.write_bytes(fs.fresh(read_only=True).read_file("hdf5/t.h5"))
    with h5py.File(shown, "r") as f:
        assert list(f) == ["d"]
        np.testing.assert_array_equal(f["d"][...], np.array([(1.5, 2), (3.0, 4)], dtype=PAIR))
        assert f["d"].attrs["a"].dtype == PAIR


def test_an_anonymous_committed_type_is_imported_as_an_unlinked_datatype(tmp_path):
    src = tmp_path / "t.h5"
    _typed(src)
    with h5py.File(src, "a") as f:
        del f["t"]
    store = str(tmp_path / "store")
    import_source(src, store, domain="/t.h5", progress=False)
    model = _model(store, "/t.h5")
    d = model.resolve("/d")
    assert isinstance(d.type, T.Committed)
    assert isinstance(d.attributes["a"].type, T.Committed) and d.attributes["a"].type.id == d.type.id
    ctx, _ = make_ctx(open_store(f"file://{store}"))
    from polyfs.model import keys
    assert ctx.store.get(keys.object_key(d.type.id)) is not None
    _check_deep(store)
    shown = tmp_path / "shown.h5"
    shown.write_bytes(FS(f"file://{store}", read_only=True).read_file("hdf5/t.h5"))
    with h5py.File(shown, "r") as f:
        np.testing.assert_array_equal(f["d"][...], np.array([(1.5, 2), (3.0, 4)], dtype=PAIR))


@pytest.mark.parametrize("bad", [b"\x89HDF\r\n\x1a\n" + b"\x00" * 200, b"CDF\x01" + b"\x00" * 60])
def test_a_bad_file_written_over_an_h5py_domain_leaves_the_store_as_it_was(tmp_path, bad):
    src = tmp_path / "u.h5"
    _unordered(src)
    store = str(tmp_path / "store")
    import_source(src, store, domain="/u.h5", progress=False)
    fs = FS(f"file://{store}")
    snapshot = fs.snapshot()
    with pytest.raises(OSError):
        fs.write_file("hdf5/u.h5", bad)
    assert fs.snapshot() == snapshot
    _check_deep(store)
