"""Real tools over a mount, exploratory round 14: overwrite, append and region workflows
through ``zarr/`` and ``n5/``, read back through ``hdf5/`` and after a remount, with
``polyfs check --deep`` clean (kernel-free tests of the fix are in
tests/fs/test_zarr_n5_explore14_fs.py).

- xarray ``to_zarr(mode="w")`` and zarr-python ``open_group(mode="w")`` over an imported
  netCDF-4 file with a dimension that has no variable failed with ``ENOTEMPTY`` (the hidden
  netCDF placeholder dataset kept the root group non-empty after ``rmtree``).
- pinned (worked unchanged): ``mode="w"`` then three ``append_dim`` sessions, ``region="auto"``
  and explicit ``region=`` writes with bool, string, packed (``scale_factor``/``add_offset``/
  ``_FillValue``) and CF time variables and a coordinate-only variable; ``compute=False`` then
  dask ``compute()`` and region writes into a template; ``write_empty_chunks=False``;
  zarr-python ``open_group(mode="w")`` over a group of its own, ``create_array(overwrite=True)``,
  ``resize``/``append``, ``del group[...]``, ``attrs.update``, ``consolidate_metadata``;
  tensorstore ``delete_existing`` and resize (zarr3 and n5); dask ``store`` into shards its
  chunks do not align with; z5py groups, datasets and attributes through ``n5/``.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from support import quiet_local_mount as _mounted

from polyfs.check import check_store
from polyfs.importers import import_source

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _netcdf(path) -> None:
    netCDF4 = pytest.importorskip("netCDF4")
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("x", 3)  # no variable: netCDF-C stores a placeholder dataset
        t = d.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = [0, 1]
        v = d.createVariable("v", "i2", ("time", "x"), fill_value=np.int16(-9))
        v.scale_factor = 0.1
        v[:] = [[1, 2, 3], [4, 5, 6]]


def _remounted(mount_store, m, store):
    m.stop()
    assert not check_store(str(store), deep=True).problems
    return mount_store(str(store))


def test_overwrites_of_an_imported_netcdf_file(mount_store, tmp_path):
    h5py = pytest.importorskip("h5py")
    _netcdf(tmp_path / "f.nc")
    store = tmp_path / "store"
    for name in ("f.nc", "g.nc"):
        import_source(str(tmp_path / "f.nc"), str(store), domain="/" + name, progress=False)
    m = mount_store(str(store))
    new = xr.Dataset({"w": (("y",), np.arange(3, dtype="u2"))}, coords={"y": [1.0, 2.0, 3.0]}, attrs={"k": "v"})
    new.to_zarr(str(m.path / "zarr" / "f.nc.zarr"), mode="w", zarr_format=3)
    xr.testing.assert_identical(xr.load_dataset(m.path / "hdf5" / "f.nc", engine="h5netcdf"), new)
    g = zarr.open_group(str(m.path / "zarr" / "g.nc.zarr"), mode="w")
    g.create_array("a", shape=(4,), chunks=(2,), dtype="i4")[:] = [1, 2, 3, 4]
    m = _remounted(mount_store, m, store)
    assert sorted(os.listdir(m.path / "hdf5")) == ["f.nc", "g.nc"]
    xr.testing.assert_identical(xr.load_dataset(m.path / "hdf5" / "f.nc", engine="h5netcdf"), new)
    with h5py.File(m.path / "hdf5" / "g.nc", "r") as f:
        assert list(f) == ["a"] and not dict(f.attrs)
        np.testing.assert_array_equal(f["a"][...], [1, 2, 3, 4])


def _sessions(root: str) -> xr.Dataset:
    """mode="w", three appends along time, a region="auto" and an explicit region write."""
    def made(n: int, start: str) -> xr.Dataset:
        return xr.Dataset({"tas": (("time", "y", "x"), np.arange(n * 12, dtype="f4").reshape(n, 3, 4)),
                           "ok": (("time",), np.arange(n) % 2 == 0),
                           "name": (("time",), np.array([f"s{i}" for i in range(n)])),
                           "packed": (("time", "y"), np.arange(n * 3, dtype="f8").reshape(n, 3) * 0.5)},
                          coords={"time": pd.date_range(start, periods=n), "y": [10.0, 20.0, 30.0],
                                  "lbl": ("x", np.array(list("abcd")))}, attrs={"title": "t"})
    first = made(4, "2000-01-01")
    first["packed"][0, 0] = np.nan
    enc = {"packed": {"dtype": "i2", "scale_factor": 0.5, "add_offset": 1.0, "_FillValue": -999},
           "tas": {"chunks": (2, 3, 2), "shards": (4, 3, 4)}}
    first.to_zarr(root, mode="w", zarr_format=3, encoding=enc, consolidated=False)
    for k in range(3):
        made(3, f"2000-02-{1 + 3 * k:02d}").to_zarr(root, append_dim="time", consolidated=False)
    part = xr.open_zarr(root, consolidated=False).isel(time=slice(2, 6)).load()
    part["tas"][:] = -5
    part[["tas"]].to_zarr(root, region="auto", consolidated=False)
    xr.Dataset({"tas": (("time", "y", "x"), np.full((2, 3, 4), 7, "f4"))}).to_zarr(
        root, region={"time": slice(8, 10)}, consolidated=False)
    return xr.open_zarr(root, consolidated=None).load()


def test_append_and_region_sessions_read_alike_everywhere(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    want = _sessions(str(tmp_path / "local.zarr"))
    (m.path / "zarr" / "s.zarr").mkdir()
    xr.testing.assert_identical(_sessions(str(m.path / "zarr" / "s.zarr")), want)
    m = _remounted(mount_store, m, store)
    xr.testing.assert_identical(xr.open_dataset(m.path / "zarr" / "s.zarr", engine="zarr", consolidated=False).load(),
                                want)
    for engine in ("h5netcdf", "netcdf4"):
        xr.testing.assert_identical(xr.load_dataset(m.path / "hdf5" / "s.h5", engine=engine), want)


def _group_session(root: str) -> dict:
    g = zarr.open_group(root, mode="w")
    g.create_array("x", shape=(10,), chunks=(4,), dtype="i8")[:] = np.arange(10)
    g.create_group("sub").create_array("z", shape=(3,), dtype="u1")[:] = [1, 2, 3]
    g = zarr.open_group(root, mode="w")  # over the group just written: all of it goes
    g.attrs.update({"c": 3})
    y = g.create_array("y", shape=(4, 4), chunks=(2, 2), shards=(4, 4), dtype="i2", fill_value=-1)
    y[:2] = 5
    y.resize((6, 5))
    y.append(np.full((2, 5), 9, "i2"), axis=0)
    g.create_array("x", shape=(6,), chunks=(3,), dtype="f4")[:] = 1.5
    g.create_array("x", shape=(8,), chunks=(8,), dtype="u4", overwrite=True)[:] = 7
    g.create_array("gone", shape=(3,), dtype="i1")[:] = 1
    del g["gone"]
    zarr.consolidate_metadata(root)
    g = zarr.open_group(root, mode="r")
    return {"attrs": dict(g.attrs), "groups": sorted(g.group_keys()),
            **{k: g[k][:] for k in sorted(g.array_keys())}}


def test_zarr_python_overwrites_a_group_of_its_own(mount_store, tmp_path):
    h5py = pytest.importorskip("h5py")
    store, m = _mounted(mount_store, tmp_path)
    want = _group_session(str(tmp_path / "local.zarr"))
    (m.path / "zarr" / "g.zarr").mkdir()
    got = _group_session(str(m.path / "zarr" / "g.zarr"))
    assert got.keys() == want.keys() == {"attrs", "groups", "x", "y"}
    assert got["attrs"] == want["attrs"] and got["groups"] == want["groups"] == []
    m = _remounted(mount_store, m, store)
    with h5py.File(m.path / "hdf5" / "g.h5", "r") as f:
        assert sorted(f) == ["x", "y"] and f.attrs["c"] == 3
        for k in ("x", "y"):
            assert got[k].dtype == want[k].dtype == f[k].dtype
            np.testing.assert_array_equal(got[k], want[k])
            np.testing.assert_array_equal(f[k][...], want[k])


def test_tensorstore_delete_existing_and_z5py_through_n5(mount_store, tmp_path):
    ts = pytest.importorskip("tensorstore")
    z5py = pytest.importorskip("z5py")
    h5py = pytest.importorskip("h5py")
    store, m = _mounted(mount_store, tmp_path)
    (m.path / "zarr" / "t.zarr").mkdir()
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(m.path / "zarr" / "t.zarr" / "a")}}
    meta = {"shape": [10, 6], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 6]}},
            "data_type": "int32", "fill_value": -7}
    ts.open({**spec, "metadata": meta}, create=True, delete_existing=True).result()[...] = 1
    t = ts.open({**spec, "metadata": {**meta, "data_type": "float32", "fill_value": 0}},
                create=True, delete_existing=True).result()
    t[2:5] = 1.5
    t = t.resize(exclusive_max=[14, 6]).result()
    t[12:14] = 3
    t = t.resize(exclusive_max=[7, 6], shrink_only=True).result()
    t.resize(exclusive_max=[9, 6]).result()
    want = np.zeros((9, 6), "f4")
    want[2:5] = 1.5
    (m.path / "n5" / "z.n5").mkdir()
    f = z5py.File(str(m.path / "n5" / "z.n5"), mode="a", use_zarr_format=False)
    f.attrs["title"] = "z5"
    d = f.create_group("g").create_dataset("d", shape=(10, 7), chunks=(4, 3), dtype="float32", compression="gzip")
    d[:] = np.arange(70, dtype="f4").reshape(10, 7)
    d[2:4, 1:2] = -1
    d.attrs["units"] = "m"
    m = _remounted(mount_store, m, store)
    got = ts.open({**spec, "kvstore": {**spec["kvstore"], "path": str(m.path / "zarr" / "t.zarr" / "a")}}).result()
    np.testing.assert_array_equal(got.read().result(), want)
    z = np.arange(70, dtype="f4").reshape(10, 7)
    z[2:4, 1:2] = -1
    with h5py.File(m.path / "hdf5" / "t.h5", "r") as h:
        np.testing.assert_array_equal(h["a"][...], want)
    with h5py.File(m.path / "hdf5" / "z.h5", "r") as h:
        np.testing.assert_array_equal(h["g/d"][...], z)
        assert h.attrs["title"] == "z5" and h["g/d"].attrs["units"] == "m"
