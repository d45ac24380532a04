"""Tier 3: a dataset xarray writes through ``zarr/`` reads as netCDF-4 through ``hdf5/``.

xarray's ``to_zarr`` (Zarr v3, ``dimension_names``) writes no HDF5 dimension scales;
the HDF5 view shows the ones netCDF-4 would have (formats/hdf5/scales.py), so xarray
(``netcdf4`` and ``h5netcdf`` engines), netCDF4-python and ``ncdump`` see the named
dimensions and coordinates. Writes through ``hdf5/`` (h5py ``r+``, netCDF4 ``"a"``)
keep working, the Zarr view's ``dimension_names`` stay as written, and
``polyfs check --deep`` is clean afterwards.
"""
from __future__ import annotations

import json
import os
import subprocess
import warnings

import numpy as np
import pytest

from conftest import polyfs_cmd

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")
pytest.importorskip("h5netcdf")

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)


def polyfs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(polyfs_cmd(*args), capture_output=True, text=True, env=ENV, timeout=300)


def ncdump_h(path) -> str:
    res = subprocess.run(["ncdump", "-h", str(path)], capture_output=True, text=True, env=ENV, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def climate() -> xr.Dataset:
    rng = np.random.default_rng(3)
    return xr.Dataset(
        {"temp": (("time", "lat", "lon"), rng.random((3, 4, 5)).astype("f4"), {"units": "K"}),
         "mask": (("lat", "lon"), (np.arange(20) % 3).astype("i2").reshape(4, 5))},
        coords={"time": np.arange(3.0), "lat": np.linspace(-30, 30, 4), "lon": np.linspace(0, 288, 5)},
        attrs={"title": "through zarr"})


def dimension_names(mnt, name: str, array: str) -> list:
    return json.loads((mnt / "zarr" / name / array / "zarr.json").read_text())["dimension_names"]


def open_both(path, **kw):
    for engine in ("netcdf4", "h5netcdf"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # h5netcdf warns of phony dimensions: there must be none
            ds = xr.open_dataset(path, engine=engine, **kw)
        yield engine, ds


def test_xarray_zarr_write_reads_as_netcdf_and_takes_writes(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    want = climate()
    want.to_zarr(m.path / "zarr" / "clim.zarr", zarr_format=3, consolidated=False, mode="w")
    h5 = m.path / "hdf5" / "clim.h5"

    for engine, ds in open_both(h5):
        with ds:
            assert ds["temp"].dims == ("time", "lat", "lon"), engine
            assert ds["mask"].dims == ("lat", "lon"), engine
            assert set(ds.coords) == {"time", "lat", "lon"}, engine
            xr.testing.assert_identical(ds.load(), want)
    with netCDF4.Dataset(h5) as nc:
        assert {n: len(d) for n, d in nc.dimensions.items()} == {"time": 3, "lat": 4, "lon": 5}
        assert nc["temp"].dimensions == ("time", "lat", "lon")
    head = ncdump_h(h5)
    assert "float temp(time, lat, lon) ;" in head and "short mask(lat, lon) ;" in head
    assert "phony_dim" not in head and "_ARRAY_DIMENSIONS" not in head

    # h5py r+: an attribute and data written; nothing shown is stored
    with h5py.File(h5, "r+") as f:
        f["temp"].attrs["note"] = "edited"
        f["temp"][0, 0, 0] = 42
        f["lat"].attrs["units"] = "degrees_north"
    z = zarr.open_group(str(m.path / "zarr" / "clim.zarr"), mode="r")
    assert z["temp"].attrs["note"] == "edited" and z["lat"].attrs["units"] == "degrees_north"
    assert not {"DIMENSION_LIST", "CLASS", "NAME", "REFERENCE_LIST"} & (set(z["temp"].attrs) | set(z["lat"].attrs))
    assert z["temp"][0, 0, 0] == 42
    assert dimension_names(m.path, "clim.zarr", "temp") == ["time", "lat", "lon"]

    # netCDF4 "a": a variable appended along existing dimensions (netCDF-C attaches it to the scales)
    with netCDF4.Dataset(h5, "a") as nc:
        assert nc["temp"].dimensions == ("time", "lat", "lon")
        v = nc.createVariable("extra", "f8", ("lat", "lon"))
        v[:] = np.ones((4, 5))
    for engine, ds in open_both(h5):
        with ds:
            assert ds["extra"].dims == ("lat", "lon") and ds["temp"].dims == ("time", "lat", "lon"), engine
            assert ds["temp"].attrs["note"] == "edited" and float(ds["temp"][0, 0, 0]) == 42, engine
            np.testing.assert_array_equal(ds["lat"].values, want["lat"].values)
    assert "phony_dim" not in ncdump_h(h5)
    for array, dims in (("temp", ["time", "lat", "lon"]), ("mask", ["lat", "lon"]), ("lat", ["lat"]),
                        ("extra", ["lat", "lon"])):
        assert dimension_names(m.path, "clim.zarr", array) == dims, array
    with xr.open_zarr(m.path / "zarr" / "clim.zarr", consolidated=False) as back:
        assert back["temp"].dims == ("time", "lat", "lon") and back["extra"].dims == ("lat", "lon")
    m.stop()

    res = polyfs("check", "--deep", str(store))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "problem" not in res.stdout, res.stdout


def test_dimensions_without_coordinates_and_detached_scales(mount_store, tmp_path):
    """A dimension with no coordinate gets netCDF's dimension-only dataset in ``hdf5/`` (only
    there: not stored while no writer changes it); a scale detached with h5py is stored
    as the file has it."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    want = climate().assign(noco=(("y",), np.arange(6.0)), both=(("lat", "y"), np.ones((4, 6))))
    want.to_zarr(m.path / "zarr" / "c2.zarr", zarr_format=3, consolidated=False, mode="w")
    h5 = m.path / "hdf5" / "c2.h5"
    for engine, ds in open_both(h5):
        with ds:
            assert ds["noco"].dims == ("y",) and ds["both"].dims == ("lat", "y"), engine
            assert "y" not in ds.variables and ds.sizes["y"] == 6, engine
            xr.testing.assert_identical(ds.load(), want)
    head = ncdump_h(h5)
    assert "double both(lat, y) ;" in head and "phony_dim" not in head
    # netCDF4 "a" changing an attribute and data: nothing else is stored (no dimension dataset)
    with netCDF4.Dataset(h5, "a") as nc:
        nc["noco"].note = "n"
        nc["noco"][0] = 7
    z = zarr.open_group(str(m.path / "zarr" / "c2.zarr"), mode="r")
    assert sorted(z.array_keys()) == ["both", "lat", "lon", "mask", "noco", "temp", "time"]
    assert z["noco"].attrs["note"] == "n" and z["noco"][0] == 7
    assert dimension_names(m.path, "c2.zarr", "noco") == ["y"]

    with h5py.File(h5, "r+") as f:
        f["mask"].dims[1].detach_scale(f["lon"])
    with h5py.File(h5, "r") as f:
        assert [len(row) for row in f["mask"].attrs["DIMENSION_LIST"]] == [1, 0]
        assert h5py.h5ds.is_attached(f["temp"].id, f["lon"].id, 2)
        assert not h5py.h5ds.is_attached(f["mask"].id, f["lon"].id, 1)
        assert h5py.h5ds.is_attached(f["both"].id, f["y"].id, 1)
    z = zarr.open_group(str(m.path / "zarr" / "c2.zarr"), mode="r")
    assert "y" in z.array_keys()  # stored now, as netCDF-C would have made it
    assert dimension_names(m.path, "c2.zarr", "temp") == ["time", "lat", "lon"]
    assert dimension_names(m.path, "c2.zarr", "noco") == ["y"]
    m.stop()
    res = polyfs("check", "--deep", str(store))
    assert res.returncode == 0, res.stdout + res.stderr


def test_netcdf_append_along_a_dimension_without_coordinate(mount_store, tmp_path):
    """netCDF4 ``"a"`` adding a variable along a dimension the view made a dimension-only
    dataset for: the file's scales are stored (that dataset too), and every reader agrees."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    want = climate().assign(noco=(("y",), np.arange(6.0)))
    want.to_zarr(m.path / "zarr" / "c3.zarr", zarr_format=3, consolidated=False, mode="w")
    h5 = m.path / "hdf5" / "c3.h5"
    with netCDF4.Dataset(h5, "a") as nc:
        v = nc.createVariable("added", "i4", ("y", "lat"))
        v[:] = np.arange(24).reshape(6, 4)
    for engine, ds in open_both(h5):
        with ds:
            assert ds["added"].dims == ("y", "lat") and ds["noco"].dims == ("y",), engine
            assert ds["temp"].dims == ("time", "lat", "lon") and "y" not in ds.variables, engine
            np.testing.assert_array_equal(ds["added"].values, np.arange(24).reshape(6, 4))
    head = ncdump_h(h5)
    assert "int added(y, lat) ;" in head and "phony_dim" not in head
    for array, dims in (("added", ["y", "lat"]), ("noco", ["y"]), ("temp", ["time", "lat", "lon"])):
        assert dimension_names(m.path, "c3.zarr", array) == dims, array
    m.stop()
    m.start()  # what is stored, not what this daemon remembers
    with xr.open_dataset(h5, engine="h5netcdf") as ds:
        assert ds["added"].dims == ("y", "lat") and ds.sizes["y"] == 6
    m.stop()
    res = polyfs("check", "--deep", str(store))
    assert res.returncode == 0, res.stdout + res.stderr
