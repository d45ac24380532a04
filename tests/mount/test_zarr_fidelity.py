"""Tier 3: every Zarr array of a real mount opens in every Zarr v3 reader, and xarray reads an
imported netCDF file through the Zarr view as it reads the file itself.

- netCDF files made by netCDF4-python (dimensions, coordinate variables, an unlimited
  dimension, a dimension without a variable, zlib+shuffle, fill values, string attributes)
  and by ``xarray.to_netcdf`` are imported; ``xarray.open_zarr`` of the view equals
  ``xarray.open_dataset`` of the file (variables, coordinates, values, attributes).
- every numeric array of the view opens in tensorstore (its zarr3 driver has only the
  spec's codecs) with zarr-python's values; complex numbers are ``complex64``/``complex128``.
- chunks written back in the view's shown encoding (zarr-python, tensorstore) are taken.
- ``-o zarr_numcodecs`` serves the stored shuffle+deflate chunks as ``numcodecs.*``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from polyfs.importers import import_source
from polyfs.views.hdmf import view_root

xr = pytest.importorskip("xarray")
netCDF4 = pytest.importorskip("netCDF4")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")
h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def make_netcdf4(path: Path) -> Path:
    with netCDF4.Dataset(path, "w") as nc:
        nc.title = "polyfs fidelity"
        nc.Conventions = "CF-1.8"
        nc.history = "made by netCDF4-python"
        nc.createDimension("time", None)
        nc.createDimension("lat", 4)
        nc.createDimension("lon", 5)
        nc.createDimension("nv", 2)  # a dimension without a coordinate variable
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t.calendar = "standard"
        t[:] = np.arange(3)
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lat.bounds = "lat_bnds"
        lat[:] = np.linspace(-45, 45, 4)
        nc.createVariable("lon", "f4", ("lon",))[:] = np.linspace(0, 360, 5, endpoint=False)
        nc.createVariable("lat_bnds", "f4", ("lat", "nv"))[:] = np.arange(8).reshape(4, 2)
        v = nc.createVariable("temp", "f4", ("time", "lat", "lon"), zlib=True, shuffle=True, complevel=4,
                              fill_value=-999.0, chunksizes=(1, 4, 5))
        v.units = "K"
        v.long_name = "air temperature"
        v.valid_range = np.array([150, 350], "f4")
        v[:] = 250 + np.arange(60).reshape(3, 4, 5) / 10
        v[1, 2, 3] = np.ma.masked
        n = nc.createVariable("count", "i2", ("time", "lat"), zlib=True, shuffle=True, fill_value=-1)
        n[:] = np.arange(12).reshape(3, 4)
        n[0, 0] = np.ma.masked
        s = nc.createVariable("scaled", "i2", ("lat",), zlib=True)
        s.scale_factor = 0.5
        s.add_offset = 10.0
        s[:] = [1.0, 2.5, 3.0, 4.5]
        d = nc.createVariable("station", "u1", ("lon",))  # no zlib, default fill
        d.flag_meanings = "a b c"
        d[:] = [1, 2, 3, 4, 5]
    return path


def make_xarray_netcdf(path: Path) -> Path:
    rng = np.random.default_rng(7)
    time = np.array(["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-04"], dtype="datetime64[ns]")
    data = rng.normal(280, 5, (4, 3, 6)).astype("f4")
    data[0, 1, 2] = np.nan
    ds = xr.Dataset(
        {"tas": (("time", "y", "x"), data, {"units": "K", "standard_name": "air_temperature"}),
         "flag": (("y", "x"), np.arange(18, dtype="i4").reshape(3, 6), {"note": "flags"}),
         "pr": (("time",), np.array([0.1, 0.0, 2.5, np.nan]), {"units": "mm"})},
        coords={"time": time, "y": [10.0, 20.0, 30.0], "x": np.arange(6, dtype="f8"),
                "label": ("x", np.array([1, 2, 3, 4, 5, 6], "i8"), {"long_name": "a label"})},
        attrs={"institution": "polyfs", "version": 3, "comment": "made by xarray"})
    ds.to_netcdf(path, encoding={"tas": {"zlib": True, "shuffle": True, "complevel": 3, "_FillValue": -1e20},
                                 "flag": {"zlib": True, "_FillValue": -5}})
    return path


def mounted_zarr(mount_store, tmp_path: Path, src: Path, *options: str) -> tuple[Path, Path, str]:
    store = tmp_path / "store"
    domain = import_source(src, str(store), progress=False)
    m = mount_store(str(store), *options)
    return m.path / "zarr" / view_root(domain, ".zarr").lstrip("/"), m.path, domain


def assert_same_dataset(got, want) -> None:
    got, want = got.load(), want.load()
    assert set(got.variables) == set(want.variables)
    assert set(got.coords) == set(want.coords)
    xr.testing.assert_identical(got, want)


def arrays(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("zarr.json") if json.loads(p.read_bytes())["node_type"] == "array")


def assert_every_reader(root: Path) -> int:
    """Each numeric array opens in tensorstore and zarr-python with equal values, and names
    only Zarr v3 core codecs."""
    n = 0
    for path in arrays(root):
        meta = json.loads((path / "zarr.json").read_bytes())
        names = {c["name"] for c in meta["codecs"]}
        for c in meta["codecs"]:
            names |= {x["name"] for x in c.get("configuration", {}).get("codecs", [])}
        assert not any(n.startswith("numcodecs.") for n in names), (path, names)
        if meta["data_type"] == "string":
            continue
        got = ts.open({"driver": "zarr3", "kvstore": f"file://{path}"}, read=True).result().read().result()
        np.testing.assert_array_equal(got, zarr.open_array(str(path), mode="r")[...], err_msg=str(path))
        n += 1
    return n


def test_netcdf4_file_reads_the_same_through_the_zarr_view(mount_store, tmp_path):
    src = make_netcdf4(tmp_path / "clim.nc")
    root, _, _ = mounted_zarr(mount_store, tmp_path, src)
    want = xr.open_dataset(src)
    got = xr.open_zarr(root, consolidated=False)
    assert_same_dataset(got, want)
    assert got["temp"].isnull().sum() == 1 and got["count"].isnull().sum() == 1
    assert not (root / "nv").exists()  # a dimension, not a variable
    raw = xr.open_zarr(root, consolidated=False, mask_and_scale=False, decode_times=False)
    assert raw["count"].dtype == np.int16 and raw["temp"].attrs["_FillValue"] == -999.0
    with netCDF4.Dataset(src) as nc:
        for name, var in nc.variables.items():
            assert zarr.open_array(str(root / name), mode="r").metadata.dimension_names == var.dimensions
    assert assert_every_reader(root) == 8


def test_xarray_netcdf_reads_the_same_through_the_zarr_view(mount_store, tmp_path):
    src = make_xarray_netcdf(tmp_path / "made_by_xarray.nc")
    root, _, _ = mounted_zarr(mount_store, tmp_path, src)
    assert_same_dataset(xr.open_zarr(root, consolidated=False), xr.open_dataset(src))
    assert assert_every_reader(root) == 7


def test_complex_and_shuffled_arrays_open_in_tensorstore_and_take_writes(mount_store, tmp_path):
    src = tmp_path / "mixed.h5"
    c8 = (np.arange(40) + 1j * np.arange(40)[::-1]).astype("c8").reshape(8, 5)
    c16 = (np.arange(12) - 0.5j).astype(">c16")
    f4 = np.arange(48, dtype="<f4").reshape(6, 8)
    with h5py.File(src, "w") as f:
        f.create_dataset("c8", data=c8, chunks=(4, 5), compression="gzip", shuffle=True, fillvalue=1 + 2j)
        f.create_dataset("c16be", data=c16, chunks=(4,))
        f.create_dataset("shuffled", data=f4, chunks=(3, 4), compression="gzip", shuffle=True, fletcher32=True)
    root, mnt, domain = mounted_zarr(mount_store, tmp_path, src)
    meta = json.loads((root / "c8" / "zarr.json").read_bytes())
    assert meta["data_type"] == "complex64" and meta["fill_value"] == [1.0, 2.0]
    assert json.loads((root / "c16be" / "zarr.json").read_bytes())["data_type"] == "complex128"
    assert assert_every_reader(root) == 3
    np.testing.assert_array_equal(ts.open({"driver": "zarr3", "kvstore": f"file://{root}/c8"}).result()
                                  .read().result(), c8)
    # writes in the shown encoding: zarr-python and tensorstore, read back through HDF5
    a = zarr.open_array(str(root / "c8"), mode="r+")
    a[0:4, :] = c8[0:4, :] * 2
    t = ts.open({"driver": "zarr3", "kvstore": f"file://{root}/shuffled"}).result()
    t[3:6, 4:8].write(np.full((3, 4), -1, "f4")).result()
    want_f4 = f4.copy()
    want_f4[3:6, 4:8] = -1
    want_c8 = c8.copy()
    want_c8[0:4] *= 2
    with h5py.File(mnt / "hdf5" / (Path(domain).stem + ".h5"), "r") as f:
        np.testing.assert_array_equal(f["c8"][()], want_c8)
        np.testing.assert_array_equal(f["shuffled"][()], want_f4)
        assert f["shuffled"].shuffle and f["shuffled"].fletcher32  # the stored encoding is kept
    np.testing.assert_array_equal(zarr.open_array(str(root / "shuffled"), mode="r")[...], want_f4)


def test_numcodecs_option_serves_shuffle_as_stored(mount_store, tmp_path):
    src = make_netcdf4(tmp_path / "clim.nc")
    root, _, _ = mounted_zarr(mount_store, tmp_path, src, "zarr_numcodecs")
    inner = json.loads((root / "temp" / "zarr.json").read_bytes())["codecs"][0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes", "numcodecs.shuffle", "gzip"]
    assert_same_dataset(xr.open_zarr(root, consolidated=False), xr.open_dataset(src))


def test_xarray_dataset_written_through_the_view_reads_back(mount_store, tmp_path):
    """xarray's own Zarr v3 output (``_FillValue`` attributes, ``dimension_names``) written
    into the view reads back equal, and the HDF5 view holds the values."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    (m.path / "zarr" / "xw.zarr").mkdir()
    ds = xr.Dataset({"v": (("t", "x"), np.arange(12, dtype="f4").reshape(3, 4), {"units": "m"}),
                     "n": (("x",), np.array([1, 2, -9, 4], "i2"), {"note": "with a fill"})},
                    coords={"x": [0.5, 1.5, 2.5, 3.5]}, attrs={"title": "written by xarray"})
    ds["v"][1, 1] = np.nan
    enc = {"n": {"_FillValue": -9}}
    ds.to_zarr(m.path / "zarr" / "xw.zarr", zarr_format=3, consolidated=False, mode="a", encoding=enc)
    ds.to_zarr(tmp_path / "plain.zarr", zarr_format=3, consolidated=False, encoding=enc)  # the reference
    got = xr.open_zarr(m.path / "zarr" / "xw.zarr", consolidated=False)
    assert_same_dataset(got, xr.open_zarr(tmp_path / "plain.zarr", consolidated=False))
    assert int(got["n"].isnull().sum()) == 1
    with h5py.File(m.path / "hdf5" / "xw.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][()], ds["x"].values)
        np.testing.assert_array_equal(f["v"][()], ds["v"].values)


def test_rewriting_a_netcdf_arrays_zarr_json_keeps_what_the_view_hides(mount_store, tmp_path):
    """The view hides netCDF's own attributes; a tool rewriting ``zarr.json`` (as shown, plus a
    new attribute) changes only that attribute: netCDF still finds its dimensions."""
    src = make_netcdf4(tmp_path / "clim.nc")
    root, mnt, domain = mounted_zarr(mount_store, tmp_path, src)
    meta_path = root / "temp" / "zarr.json"
    meta = json.loads(meta_path.read_bytes())
    meta["attributes"]["comment"] = "added through Zarr"
    meta_path.write_text(json.dumps(meta))
    again = json.loads(meta_path.read_bytes())
    assert again["attributes"] == meta["attributes"] and again["dimension_names"] == ["time", "lat", "lon"]
    nc_file = mnt / "hdf5" / Path(domain).name
    with netCDF4.Dataset(nc_file) as nc:
        v = nc["temp"]
        assert v.dimensions == ("time", "lat", "lon") and v.comment == "added through Zarr"
        assert v.getncattr("_FillValue") == -999.0 and v.units == "K"
    a = zarr.open_group(str(root), mode="r+")
    a.attrs["extra"] = "group attribute"
    with netCDF4.Dataset(nc_file) as nc:
        assert nc.getncattr("extra") == "group attribute" and nc.title == "polyfs fidelity"
    assert_same_dataset(xr.open_zarr(root, consolidated=False).drop_attrs(),
                        xr.open_dataset(src).drop_attrs())
