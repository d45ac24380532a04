"""Real tools over a mount, exploratory round 14: a coordinate variable of an imported netCDF-4
file deleted or made again with zarr-python through ``zarr/``, read back by ncdump, netCDF4,
h5netcdf and xarray through ``hdf5/`` and ``zarr/`` (kernel-free tests of the fix are in
tests/fs/test_scales_explore14_fs.py).

The other variables' stored ``DIMENSION_LIST`` kept naming the deleted dataset: ``ncdump`` and
``xr.load_dataset(hdf5/...)`` failed ("NetCDF: HDF error") and ``xr.open_zarr`` showed a
dimension named ``None``. Made again with the same name and length, the new array is the
dimension's scale for every view; deleted outright, the dimension stays (netCDF's dimension
without a variable) and the file opens.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest
from support import quiet_local_mount as _mounted

from polyfs.check import check_store
from polyfs.importers import import_source

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")
netCDF4 = pytest.importorskip("netCDF4")
pytest.importorskip("h5netcdf")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _source(path) -> xr.Dataset:
    ds = xr.Dataset({"t": (("time", "y", "x"), np.arange(24, dtype="f4").reshape(2, 3, 4)),
                     "s": (("time",), np.array([1.5, 2.5]))},
                    coords={"time": [10.0, 20.0], "y": np.arange(3.0), "x": np.arange(4.0)})
    ds.to_netcdf(path, engine="netcdf4")
    return ds


def _ncdump_ok(path) -> str:
    got = subprocess.run(["ncdump", str(path)], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    return got.stdout


@pytest.mark.skipif(subprocess.run(["which", "ncdump"], capture_output=True).returncode != 0, reason="no ncdump")
def test_zarr_python_deletes_and_makes_again_a_netcdf_coordinate_variable(mount_store, tmp_path):
    src = _source(tmp_path / "f.nc")
    store, m = _mounted(mount_store, tmp_path)
    for name in ("f.nc", "g.nc"):
        import_source(str(tmp_path / "f.nc"), str(store), domain="/" + name, progress=False)
    # made again: same name and length, new values
    g = zarr.open_group(str(m.path / "zarr" / "f.nc.zarr"), mode="r+")
    a = g.create_array("time", shape=(2,), dtype="f8", overwrite=True, dimension_names=["time"])
    a[:] = [100.0, 200.0]
    h5 = m.path / "hdf5" / "f.nc"
    assert "double time(time)" in _ncdump_ok(h5) and "float t(time, y, x)" in _ncdump_ok(h5)
    want = src.assign_coords(time=[100.0, 200.0])
    for engine in ("netcdf4", "h5netcdf"):
        got = xr.load_dataset(h5, engine=engine)
        xr.testing.assert_equal(got, want)
    with netCDF4.Dataset(h5) as d:
        assert d["t"].dimensions == ("time", "y", "x") and d["s"].dimensions == ("time",)
    xr.testing.assert_equal(xr.open_zarr(m.path / "zarr" / "f.nc.zarr", consolidated=False).load(), want)
    # deleted outright: the dimension stays, without a variable
    g = zarr.open_group(str(m.path / "zarr" / "g.nc.zarr"), mode="r+")
    del g["time"]
    h5 = m.path / "hdf5" / "g.nc"
    _ncdump_ok(h5)
    for engine in ("netcdf4", "h5netcdf"):
        got = xr.load_dataset(h5, engine=engine)
        assert "time" not in got.variables
        dim = got["t"].dims[0]
        assert got["t"].dims == (dim, "y", "x") and got["s"].dims == (dim,) and got.sizes[dim] == 2
        np.testing.assert_array_equal(got["t"].values, src["t"].values)
    z = xr.open_zarr(m.path / "zarr" / "g.nc.zarr", consolidated=False)
    assert None not in z["t"].dims and z["t"].dims[1:] == ("y", "x") and z["s"].dims == z["t"].dims[:1]
    m.stop()
    assert not check_store(str(store), deep=True).problems
