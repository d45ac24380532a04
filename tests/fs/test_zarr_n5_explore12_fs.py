"""Tier 2 (no kernel): CF netCDF-4 files through ``zarr/`` and ``n5/``, exploratory round 12
(real tools over a mount are in tests/mount/test_zarr_n5_explore12.py).

- z5py ``ds.attrs[k] = v`` on an imported netCDF variable rewrites its ``attributes.json``
  without the CF ``units`` string (the N5 view leaves out ``units``/``axes``/``resolution``
  not in N5's per-axis form, which tensorstore enforces); the rewrite was compared with
  every stored attribute, so ``units`` was deleted from the store: ``time`` lost
  ``days since ...`` and xarray no longer decoded it. What the view left out is now left
  alone (the rewrite is compared with the attributes the view shows).
- zarr-python ``attrs[k] = v`` (or xarray ``to_zarr(mode="a")``) on an imported netCDF
  variable stored its ``dimension_names`` as a new ``_ARRAY_DIMENSIONS`` attribute beside
  the variable's ``DIMENSION_LIST``: h5netcdf/h5py then listed ``_ARRAY_DIMENSIONS`` on every
  variable touched, and ``open_dataset(hdf5, engine="h5netcdf")`` differed from
  ``open_zarr``. Names the view derives from dimension scales, written back unchanged,
  store nothing.
- ``polyfs import`` of an xarray Zarr v3 store kept xarray's ``_FillValue`` spelling (base64
  text of a float64) as a string attribute: ``hdf5/`` showed ``string lat:_FillValue =
  "AAAAAAAA+H8="`` (not valid netCDF: a fill value must have its variable's type) and
  ``open_dataset(decode_cf=False)`` read text. It is stored as the number, as a write
  through ``zarr/`` stores it.
"""
from __future__ import annotations

import io
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_write_semantics import fs  # noqa: F401 - fixture

from polyfs.importers import import_source

netCDF4 = pytest.importorskip("netCDF4")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _cf_file(path: Path) -> Path:
    """A small CF netCDF-4 file: an unlimited noleap time axis, packed shorts with a fill
    value and a missing value, flags, a char coordinate and a group."""
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("lat", 3)
        d.createDimension("strlen", 4)
        d.Conventions = "CF-1.8"
        t = d.createVariable("time", "i4", ("time",))
        t.units, t.calendar = "days since 2000-01-01", "noleap"
        t[:] = [0, 31]
        lat = d.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lat[:] = [-10, 0, 10]
        v = d.createVariable("tas", "i2", ("time", "lat"), fill_value=np.int16(-32767))
        v.set_auto_maskandscale(False)
        v.scale_factor, v.add_offset = 0.01, 273.15
        v.missing_value = np.int16(-32766)
        v.valid_range = np.array([-30000, 30000], "i2")
        v.units = "K"
        v[:] = np.array([[0, 100, -32767], [200, -32766, 300]], "i2")
        q = d.createVariable("qc", "i1", ("lat",), fill_value=np.int8(-1))
        q.flag_values, q.flag_meanings = np.array([0, 1], "i1"), "good bad"
        q[:] = [0, 1, -1]
        g = d.createGroup("sub")
        gv = g.createVariable("gv", "u2", ("lat",), fill_value=np.uint16(65535))
        gv.units = "1"
        gv[:] = [1, 65535, 3]
    return path


def _hdf5(fs, name: str) -> h5py.File:  # noqa: F811 - the fixture's value
    return h5py.File(io.BytesIO(fs.read_file(f"hdf5/{name}")), "r")


def _attrs(f: h5py.File, path: str) -> dict:
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f[path].attrs.items()}


@pytest.mark.parametrize("path", ["time", "tas", "lat", "sub/gv"])
def test_n5_attribute_rewrite_keeps_the_cf_units_it_does_not_show(fs, tmp_path, path):  # noqa: F811
    import_source(str(_cf_file(tmp_path / "cf.nc")), fs.url, domain="/cf.nc")
    with _hdf5(fs, "cf.nc") as f:
        before = _attrs(f, path)
    meta = fs.read_json(f"n5/cf.nc.n5/{path}/attributes.json")
    assert "units" not in meta  # not N5's per-axis form: left out of the view
    meta["comment"] = "set through n5"  # what z5py's ds.attrs["comment"] = ... writes
    fs.write_json(f"n5/cf.nc.n5/{path}/attributes.json", meta)
    with _hdf5(fs, "cf.nc") as f:
        after = _attrs(f, path)
        dtypes = {k: f[path].attrs.get_id(k).dtype for k in f[path].attrs}
    assert after.pop("comment") == "set through n5"
    assert after.keys() == before.keys()
    assert after["units"] == before["units"]
    if path == "tas":  # the other attributes keep their netCDF types
        assert dtypes["_FillValue"] == np.dtype("i2") and dtypes["valid_range"] == np.dtype("i2")


def test_n5_attribute_rewrite_keeps_time_decodable(fs, tmp_path):  # noqa: F811
    xr = pytest.importorskip("xarray")
    import_source(str(_cf_file(tmp_path / "cf.nc")), fs.url, domain="/cf.nc")
    meta = fs.read_json("n5/cf.nc.n5/time/attributes.json")
    meta["long_name"] = "time"
    fs.write_json("n5/cf.nc.n5/time/attributes.json", meta)
    got = xr.open_dataset(io.BytesIO(fs.read_file("hdf5/cf.nc")), engine="h5netcdf").load()
    assert got["time"].attrs["long_name"] == "time"
    assert str(got["time"].values[1]) == "2000-02-01 00:00:00"


@pytest.mark.parametrize("path", ["tas", "time", "qc", "sub/gv"])
def test_zarr_metadata_rewrite_of_a_netcdf_variable_stores_no_array_dimensions(fs, tmp_path, path):  # noqa: F811
    import_source(str(_cf_file(tmp_path / "cf.nc")), fs.url, domain="/cf.nc")
    meta = fs.read_json(f"zarr/cf.nc.zarr/{path}/zarr.json")
    assert meta["dimension_names"]
    meta["attributes"]["comment"] = "set through zarr"  # what zarr-python's attrs[...] = ... writes
    fs.write_json(f"zarr/cf.nc.zarr/{path}/zarr.json", meta)
    with _hdf5(fs, "cf.nc") as f:
        attrs = _attrs(f, path)
    assert attrs["comment"] == "set through zarr"
    assert "_ARRAY_DIMENSIONS" not in attrs
    assert fs.read_json(f"zarr/cf.nc.zarr/{path}/zarr.json")["dimension_names"] == meta["dimension_names"]


def test_h5netcdf_reads_what_open_zarr_reads_after_attribute_rewrites(fs, tmp_path):  # noqa: F811
    xr = pytest.importorskip("xarray")
    import_source(str(_cf_file(tmp_path / "cf.nc")), fs.url, domain="/cf.nc")
    for path in ("tas", "time", "lat", "qc"):
        meta = fs.read_json(f"zarr/cf.nc.zarr/{path}/zarr.json")
        meta["attributes"]["comment"] = path
        fs.write_json(f"zarr/cf.nc.zarr/{path}/zarr.json", meta)
    local = tmp_path / "view.zarr"
    for rel in fs.walk_files("zarr/cf.nc.zarr"):
        out = local / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(fs.read_file(f"zarr/cf.nc.zarr/{rel}"))
    for kw in ({}, {"decode_cf": False}):
        want = xr.open_zarr(str(local), consolidated=False, **kw).load()
        got = xr.open_dataset(io.BytesIO(fs.read_file("hdf5/cf.nc")), engine="h5netcdf", **kw).load()
        xr.testing.assert_identical(got, want)


def test_renamed_dimension_names_are_still_stored(fs, tmp_path):  # noqa: F811
    """Names other than those the scales give are the writer's: kept as before."""
    import_source(str(_cf_file(tmp_path / "cf.nc")), fs.url, domain="/cf.nc")
    meta = fs.read_json("zarr/cf.nc.zarr/qc/zarr.json")
    meta["dimension_names"] = ["y"]
    fs.write_json("zarr/cf.nc.zarr/qc/zarr.json", meta)
    with _hdf5(fs, "cf.nc") as f:
        assert list(f["qc"].attrs["_ARRAY_DIMENSIONS"]) in (["y"], [b"y"])


def test_imported_xarray_zarr_fill_value_is_a_number_of_the_variable_type(fs, tmp_path):  # noqa: F811
    xr = pytest.importorskip("xarray")
    pytest.importorskip("zarr")
    src = tmp_path / "x.zarr"
    ds = xr.Dataset({"t": (("lat",), np.array([1.5, np.nan, 2.5], "f4")),
                     "d": (("lat",), np.array([1.0, 2.0, np.nan]))},
                    coords={"lat": np.array([-1.0, 0.0, 1.0], "f4")})
    ds["t"].encoding["_FillValue"] = np.float32(-999.0)
    ds.to_zarr(src, zarr_format=3, mode="w")
    import_source(str(src), fs.url, domain="/x.h5")
    with _hdf5(fs, "x.h5") as f:
        fills = {k: f[k].attrs["_FillValue"] for k in ("t", "d", "lat")}
        types = {k: f[k].attrs.get_id("_FillValue").dtype for k in ("t", "d", "lat")}
    assert fills["t"] == np.float32(-999.0) and np.isnan(fills["d"]) and np.isnan(fills["lat"])
    assert types == {"t": np.dtype("f4"), "d": np.dtype("f8"), "lat": np.dtype("f4")}
    for kw in ({}, {"decode_cf": False}):
        want = xr.open_zarr(str(src), **kw).load()
        got = xr.open_dataset(io.BytesIO(fs.read_file("hdf5/x.h5")), engine="h5netcdf", **kw).load()
        xr.testing.assert_identical(got, want)


def test_attributes_of_a_netcdf_char_variable_can_be_rewritten(fs, tmp_path):  # noqa: F811
    """netCDF stores a ``char`` variable's fill ``\\0`` as ``""``, shown in ``zarr/`` as zero
    bytes that parse back to None: an ``attrs[...] =`` rewrite was refused (EINVAL, "the fill
    value of an existing array cannot change")."""
    src = tmp_path / "c.nc"
    with netCDF4.Dataset(src, "w") as d:
        d.createDimension("n", 2)
        d.createDimension("strlen", 3)
        v = d.createVariable("code", "S1", ("n", "strlen"))
        v[:] = netCDF4.stringtochar(np.array(["ab", "c"], "S3"))
    import_source(str(src), fs.url, domain="/c.nc")
    meta = fs.read_json("zarr/c.nc.zarr/code/zarr.json")
    meta["attributes"]["long_name"] = "station code"
    fs.write_json("zarr/c.nc.zarr/code/zarr.json", meta)
    with _hdf5(fs, "c.nc") as f:
        assert _attrs(f, "code")["long_name"] == "station code"
