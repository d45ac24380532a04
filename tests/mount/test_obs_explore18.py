"""Real tools over a mount, exploratory round 18: zarr-python through obstore
(``zarr.storage.ObjectStore(obstore.store.LocalStore(prefix=...))``), fsspec and xarray, every
result compared with the same calls on a local-disk directory (kernel-free tests are in
tests/fs/test_obs_explore18_fs.py).

- ``LocalStore(automatic_cleanup=True)`` removes each deleted object's empty parents with
  ``rmdir``; zarr-python deletes chunks equal to the fill value, so ``a[:] = 0`` deleted the
  array and its emptied group (attributes and all). Now ENOTEMPTY, as on a disk.
- pinned (worked unchanged): obstore's puts (``<key>#<n>`` staged, then ``rename``; mode
  ``create`` by ``link``, EEXIST for an existing key), bad chunks and metadata refused at the
  rename with nothing left behind, xarray ``to_zarr``/append/region writes and ``open_zarr``,
  the same data through ``hdf5/`` and ``n5/``.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from support import quiet_local_mount as _mounted

zarr = pytest.importorskip("zarr")
obstore = pytest.importorskip("obstore")
xr = pytest.importorskip("xarray")
from obstore.store import LocalStore  # noqa: E402
from zarr.storage import ObjectStore  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _files(base: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), base) for d, _, fs in os.walk(base) for f in fs)


def _zero_an_array(base: str) -> tuple[list[str], object, dict]:
    """zarr-python over obstore with automatic cleanup: write an array, then zeros over it."""
    st = ObjectStore(LocalStore(prefix=base, mkdir=True, automatic_cleanup=True))
    g = zarr.open_group(st, mode="w", zarr_format=3, attributes={"title": "run"})
    a = g.create_group("sub", attributes={"k": 1}).create_array(
        "a", shape=(4, 4), chunks=(2, 2), dtype="f4", fill_value=0, attributes={"units": "m"})
    a[:] = 1
    a[:] = 0  # every chunk equals the fill value: zarr-python deletes them all
    back = zarr.open_group(ObjectStore(LocalStore(prefix=base)), mode="r")
    arr = back["sub/a"]
    return _files(base), arr[:], {"a": dict(arr.attrs), "sub": dict(back["sub"].attrs)}


def test_obstore_automatic_cleanup_keeps_an_array_whose_chunks_are_deleted(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    disk = _zero_an_array(str(tmp_path / "disk.zarr"))
    mnt = _zero_an_array(str(m.path / "zarr" / "e.zarr"))
    assert mnt[0] == disk[0] == ["sub/a/zarr.json", "sub/zarr.json", "zarr.json"]
    np.testing.assert_array_equal(mnt[1], disk[1])
    assert mnt[2] == disk[2] == {"a": {"units": "m"}, "sub": {"k": 1}}


def _obstore_session(base: str) -> dict:
    """Puts, a refused put and a listing through obstore; what zarr-python reads back."""
    ls = LocalStore(prefix=base, mkdir=True)
    st = ObjectStore(ls)
    g = zarr.open_group(st, mode="w", zarr_format=3)
    a = g.create_array("s", shape=(8, 8), chunks=(2, 4), shards=(4, 8), dtype="u2", attributes={"u": 1})
    a[:] = np.arange(64, dtype="u2").reshape(8, 8)
    a[1:3, 1:7] = 999
    a.resize((10, 8))
    out: dict = {}
    try:
        obstore.put(ls, "g2/zarr.json", b'{"zarr_format":3,"node_type":"group","attributes":{"k":1}}', mode="create")
        obstore.put(ls, "g2/zarr.json", b'{"zarr_format":3,"node_type":"group"}', mode="create")
    except Exception as e:  # noqa: BLE001 - the exact obstore exception type is what is compared
        out["create_again"] = type(e).__name__
    out["list"] = sorted(x["path"] for x in obstore.list(ls).collect())
    back = zarr.open_group(ObjectStore(LocalStore(prefix=base)), mode="r")
    out["data"] = back["s"][:].tolist()
    out["attrs"] = (dict(back["s"].attrs), dict(back["g2"].attrs))
    return out


def test_obstore_puts_match_a_local_disk(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    disk = _obstore_session(str(tmp_path / "disk.zarr"))
    base = str(m.path / "zarr" / "o.zarr")
    mnt = _obstore_session(base)
    assert mnt == disk and mnt["create_again"] == "AlreadyExistsError"
    ls = LocalStore(prefix=base)
    before = _files(base)
    for key, data in [("s/c/0/0", b"garbage"), ("s/zarr.json", b"{not json")]:
        with pytest.raises(Exception, match="Invalid argument"):
            obstore.put(ls, key, data)
    assert _files(base) == before  # no staged "#1" file is left behind
    np.testing.assert_array_equal(zarr.open_array(ObjectStore(ls), path="s", mode="r")[:], np.array(mnt["data"]))


def test_xarray_to_zarr_through_obstore_reads_back_everywhere(mount_store, tmp_path):
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("hdf5plugin")  # zstd chunks of hdf5/
    ts = pytest.importorskip("tensorstore")
    store, m = _mounted(mount_store, tmp_path)
    ds = xr.Dataset({"t": (("time", "x"), np.arange(12.0).reshape(3, 4), {"units": "K"})},
                    coords={"x": np.arange(4), "time": np.arange(3)})
    more = xr.Dataset({"t": (("time", "x"), np.arange(4.0).reshape(1, 4) + 100)},
                      coords={"x": np.arange(4), "time": [3]})
    st = ObjectStore(LocalStore(prefix=str(m.path / "zarr" / "w.zarr"), mkdir=True))
    ds.to_zarr(st, mode="w", zarr_format=3, consolidated=False)
    more.to_zarr(st, append_dim="time", consolidated=False)
    want = np.concatenate([ds.t.values, more.t.values])
    got = xr.open_zarr(st, consolidated=False)
    np.testing.assert_array_equal(got.t.values, want)
    assert got.t.attrs == {"units": "K"}
    with h5py.File(m.path / "hdf5" / "w.h5", "r") as f:
        np.testing.assert_array_equal(f["t"][:], want)
    n5 = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "w.n5" / "t")}}).result()
    np.testing.assert_array_equal(n5.read().result(), want.T)  # N5 lists dimensions fastest first
