"""Real tools over a mount, exploratory round 12: a CF netCDF-4 file imported, then read and
written through ``zarr/`` and ``n5/`` by xarray, zarr-python, z5py and tensorstore, and read
back through ``hdf5/`` with ncdump and h5netcdf (kernel-free tests of the fixes are in
tests/fs/test_zarr_n5_explore12_fs.py).

- z5py ``attrs[...] =`` through ``n5/`` deleted the variable's CF ``units`` (hidden by the N5
  view), so ``time`` no longer decoded; zarr-python ``attrs[...] =`` and xarray
  ``to_zarr(mode="a")`` through ``zarr/`` stored a ``_ARRAY_DIMENSIONS`` attribute that
  h5netcdf listed on every variable touched.
- pinned (worked unchanged): ``open_zarr`` of the view equals ``open_dataset`` of the file
  (decoded and raw) for packed shorts with ``_FillValue`` and ``missing_value``,
  ``valid_range``, noleap/360_day times in int and float, flags, ``_Unsigned`` bytes, char and
  string coordinates, scalars, a 0-length unlimited dimension and a group; z5py, tensorstore
  and dask read the same values; ``to_zarr(mode="a")`` of new packed variables and
  ``region=`` writes show in ``ncdump -h`` with typed ``_FillValue``.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from polyfs.importers import import_source

netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _cf_file(path) -> None:
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("lat", 3)
        d.createDimension("lon", 4)
        d.createDimension("strlen", 5)
        d.createDimension("empty", None)
        d.Conventions = "CF-1.8"
        d.history = ["made", "copied"]
        t = d.createVariable("time", "i4", ("time",))
        t.units, t.calendar = "days since 2000-01-01", "noleap"
        t[:] = [0, 31]
        t2 = d.createVariable("t360", "f8", ("time",))
        t2.units, t2.calendar = "hours since 1900-01-01", "360_day"
        t2[:] = [0.5, 48.25]
        d.createVariable("lat", "f4", ("lat",))[:] = [-10, 0, 10]
        d.createVariable("lon", "f8", ("lon",))[:] = [0, 90, 180, 270]
        v = d.createVariable("tas", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767), zlib=True)
        v.set_auto_maskandscale(False)
        v.scale_factor, v.add_offset, v.units = 0.01, 273.15, "K"
        v.missing_value = np.int16(-32766)
        v.valid_range = np.array([-30000, 30000], "i2")
        data = (np.arange(24, dtype="i2") * 10).reshape(2, 3, 4)
        data[0, 0, :2] = [-32767, -32766]
        v[:] = data
        q = d.createVariable("qc", "i1", ("lat", "lon"), fill_value=np.int8(-1))
        q.flag_values, q.flag_meanings = np.array([0, 1, 2], "i1"), "good suspect bad"
        q[:] = np.array([0, 1, 2, -1] * 3, "i1").reshape(3, 4)
        u = d.createVariable("ub", "i1", ("lon",), fill_value=np.int8(-1))
        u._Unsigned = "true"
        u.set_auto_maskandscale(False)
        u[:] = np.array([1, -56, -1, 127], "i1")
        c = d.createVariable("code", "S1", ("lat", "strlen"))
        c[:] = netCDF4.stringtochar(np.array(["ab", "cdefg", "h"], "S5"))
        s = d.createVariable("name", str, ("lat",))
        for i, x in enumerate(["x", "é", ""]):
            s[i] = x
        d.createVariable("scalar", "f8", ())[...] = 3.5
        d.createVariable("nothing", "f4", ("empty",)).units = "1"
        g = d.createGroup("sub")
        g.createVariable("gv", "u2", ("lat",), fill_value=np.uint16(65535))[:] = [1, 65535, 3]


@pytest.fixture
def cf_mount(mount_store, tmp_path):
    src = tmp_path / "cf.nc"
    _cf_file(src)
    import warnings

    warnings.filterwarnings("ignore")
    store = tmp_path / "store"
    import_source(str(src), str(store), domain="/cf.nc")
    return src, mount_store(str(store))


def test_open_zarr_and_n5_readers_match_the_netcdf_file(cf_mount):
    src, m = cf_mount
    view = str(m.path / "zarr" / "cf.nc.zarr")
    for group in (None, "sub"):
        for kw in ({}, {"decode_cf": False}, {"use_cftime": True}):
            want = xr.open_dataset(src, group=group, **kw).load()
            got = xr.open_zarr(view, group=group, consolidated=False, **kw).load()
            xr.testing.assert_identical(got, want)
    with netCDF4.Dataset(src) as d:
        d.set_auto_maskandscale(False)
        raw = {k: d[k][...] for k in ("tas", "qc", "ub", "lat", "time")}
    z5py = pytest.importorskip("z5py")
    f = z5py.File(str(m.path / "n5" / "cf.nc.n5"), "r")
    for k, want in raw.items():
        np.testing.assert_array_equal(f[k][...], np.asarray(want))
    assert f["tas"].attrs["scale_factor"] in (0.01, [0.01])
    ts = pytest.importorskip("tensorstore")
    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "cf.nc.n5" / "tas")}},
                read=True).result()
    np.testing.assert_array_equal(t.read().result(), np.asarray(raw["tas"]).transpose())  # N5 axis order
    da = pytest.importorskip("dask.array")
    a = da.from_zarr(view, component="tas")
    assert a.chunks[1:] == ((3,), (4,))
    np.testing.assert_array_equal(a.compute(), np.asarray(raw["tas"]))


def test_attribute_updates_through_n5_and_zarr_keep_valid_cf(cf_mount):
    src, m = cf_mount
    z5py = pytest.importorskip("z5py")
    zarr = pytest.importorskip("zarr")
    f = z5py.File(str(m.path / "n5" / "cf.nc.n5"), "a")
    for k in ("time", "tas", "t360"):
        f[k].attrs["comment"] = "n5"
    for k in ("lat", "qc", "sub/gv"):
        zarr.open_array(str(m.path / "zarr" / "cf.nc.zarr" / k), mode="r+").attrs["comment"] = "zarr"
    got = xr.open_dataset(m.path / "hdf5" / "cf.nc", engine="h5netcdf").load()
    assert got["tas"].attrs["units"] == "K" and got["time"].dtype.kind == "O"  # noleap: cftime
    assert str(got["time"].values[1]) == "2000-02-01 00:00:00"
    for k in ("time", "tas", "t360", "lat", "qc"):
        assert "_ARRAY_DIMENSIONS" not in got[k].attrs, k
    want = xr.open_zarr(str(m.path / "zarr" / "cf.nc.zarr"), consolidated=False).load()
    xr.testing.assert_identical(got, want)


def test_xarray_appends_and_region_writes_show_in_ncdump(cf_mount):
    src, m = cf_mount
    view = str(m.path / "zarr" / "cf.nc.zarr")
    new = xr.Dataset({"pr": (("time", "lat", "lon"), np.arange(24, dtype="f4").reshape(2, 3, 4) / 10)})
    new["pr"][0, 0, 0] = np.nan
    new.to_zarr(view, mode="a", encoding={"pr": {"dtype": "i2", "scale_factor": 0.1, "_FillValue": -9999}})
    reg = xr.Dataset({"qc": (("lat", "lon"), np.full((3, 4), 2.0))})
    reg["qc"][0, 0] = np.nan
    reg.to_zarr(view, region={"lat": slice(0, 3), "lon": slice(0, 4)})
    got = xr.open_dataset(m.path / "hdf5" / "cf.nc", engine="h5netcdf").load()
    xr.testing.assert_identical(got, xr.open_zarr(view, consolidated=False).load())
    np.testing.assert_allclose(got["pr"].values[1], new["pr"].values[1], atol=0.051)
    assert np.isnan(got["pr"].values[0, 0, 0]) and got["pr"].encoding["_FillValue"] == -9999
    assert np.isnan(got["qc"].values[0, 0]) and (got["qc"].values.ravel()[1:] == 2).all()
    if shutil.which("ncdump"):
        cdl = subprocess.run(["ncdump", "-h", str(m.path / "hdf5" / "cf.nc")], capture_output=True, text=True,
                             check=True).stdout
        assert "short pr(time, lat, lon)" in cdl and "pr:_FillValue = -9999s ;" in cdl
        assert cdl.count("tas:_FillValue") == 1 and "tas:missing_value = -32766s ;" in cdl
        assert "_ARRAY_DIMENSIONS" not in cdl
