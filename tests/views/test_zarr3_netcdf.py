"""Tier 2: a netCDF-4 file (netCDF4-python) imported and shown as Zarr v3: each variable's
``dimension_names`` are its netCDF dimensions (from the HDF5 dimension scales), values and
attributes as netCDF4 reads them, for coordinate variables, dimension-only scales and a
dimension of a parent group."""
from __future__ import annotations

import numpy as np
import pytest

from polyfs.importers import import_source
from polyfs.store import open_store
from polyfs.formats.zarr import view as zarr3
from support import make_ctx, materialize

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def netcdf_view(tmp_path_factory):
    import netCDF4

    base = tmp_path_factory.mktemp("nc3")
    src = base / "climate.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.title = "polyfs test"
        nc.createDimension("time", None)
        nc.createDimension("lat", 4)
        nc.createDimension("lon", 5)
        nc.createDimension("nv", 2)  # a dimension without a coordinate variable
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(3)
        nc.createVariable("lat", "f4", ("lat",))[:] = np.linspace(-45, 45, 4)
        nc.createVariable("lon", "f4", ("lon",))[:] = np.linspace(0, 360, 5, endpoint=False)
        v = nc.createVariable("temp", "f4", ("time", "lat", "lon"), zlib=True, complevel=4, fill_value=-999.0,
                              chunksizes=(1, 4, 5))
        v.units = "K"
        v[:] = 250 + np.arange(60).reshape(3, 4, 5) / 10
        b = nc.createVariable("lat_bnds", "f4", ("lat", "nv"))
        b[:] = np.arange(8).reshape(4, 2)
        g = nc.createGroup("forecast")
        g.createDimension("step", 2)
        g.createVariable("lead", "i4", ("step",))[:] = [6, 12]
        g.createVariable("field", "f8", ("step", "lat"))[:] = np.arange(8).reshape(2, 4)
    store_url = str(base / "store")
    domain = import_source(src, store_url, progress=False)
    ctx, reader = make_ctx(open_store(store_url))
    dest = materialize(zarr3.domain_node(ctx.catalog.load(domain), ctx, "climate.zarr"), base / "climate.zarr", reader)
    return src, dest


def test_dimension_names_are_the_netcdf_dimensions(netcdf_view):
    import netCDF4
    import zarr

    src, dest = netcdf_view
    g = zarr.open_group(str(dest), mode="r")
    checked = 0
    with netCDF4.Dataset(src) as nc:
        for grp, prefix in ((nc, ""), (nc["forecast"], "forecast/")):
            for name, var in grp.variables.items():
                arr = g[prefix + name]
                assert arr.metadata.dimension_names == tuple(var.dimensions), name
                np.testing.assert_array_equal(arr[...], np.ma.getdata(var[...]), err_msg=name)
                checked += 1
        assert g["temp"].attrs["units"] == "K" and g.attrs["title"] == "polyfs test"
        assert g["temp"].metadata.fill_value == -999.0
    assert checked == 7


def test_xarray_reads_the_view_as_it_reads_the_file(netcdf_view):
    """xarray's Zarr v3 reading of the view equals its netCDF reading of the file, for the root
    and a subgroup; netCDF's own attributes and dimension-only scales are not shown."""
    import json

    import xarray as xr

    src, dest = netcdf_view
    for group in (None, "forecast"):
        want = xr.open_dataset(src, group=group).load()
        got = xr.open_zarr(dest, group=group, consolidated=False).load()
        xr.testing.assert_identical(got, want)
    assert not (dest / "nv").exists()
    hidden = {"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Dimid", "_Netcdf4Coordinates",
              "_NCProperties"}
    for meta in dest.rglob("zarr.json"):
        assert not hidden & set(json.loads(meta.read_bytes())["attributes"]), meta
    temp = json.loads((dest / "temp" / "zarr.json").read_bytes())
    assert temp["attributes"]["_FillValue"] == "AAAAAAA4j8A="  # -999.0 as xarray spells it
    # zlib=True means shuffle+deflate in netCDF-4: decoded, as tensorstore has no shuffle codec
    assert [c["name"] for c in temp["codecs"][0]["configuration"]["codecs"]] == ["bytes"]


def test_multidimensional_coordinate_variable_gets_its_dimensions(tmp_path):
    """A char coordinate variable ``station(station, nchar)`` is a dimension scale (no
    DIMENSION_LIST): its dimensions come from ``_Netcdf4Coordinates`` / ``_Netcdf4Dimid``."""
    import json

    import netCDF4
    import xarray as xr

    src = tmp_path / "stations.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("station", 3)
        nc.createDimension("nchar", 4)
        nc.createDimension("t", 2)
        nc.createVariable("station", "S1", ("station", "nchar"))[:] = \
            netCDF4.stringtochar(np.array(["ab", "cd", "ef"], "S4"))
        nc.createVariable("v", "f4", ("t", "station"))[:] = np.arange(6).reshape(2, 3)
    store_url = str(tmp_path / "store")
    domain = import_source(src, store_url, progress=False)
    ctx, reader = make_ctx(open_store(store_url))
    dest = materialize(zarr3.domain_node(ctx.catalog.load(domain), ctx, "s.zarr"), tmp_path / "s.zarr", reader)
    assert json.loads((dest / "station" / "zarr.json").read_bytes())["dimension_names"] == ["station", "nchar"]
    xr.testing.assert_identical(xr.open_zarr(dest, consolidated=False).load(), xr.open_dataset(src).load())
