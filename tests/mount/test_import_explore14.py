"""Tier 3: a Zarr v2 dataset xarray wrote (``zarr_format=2``, the layout of most Zarr data
in the wild) is imported and read back through the mount's views by independent readers:
xarray on the HDF5 view (netCDF dims from ``_ARRAY_DIMENSIONS``, CF attributes, NaN fill)
and on the Zarr view, zarr-python on the Zarr view. Before, the import refused it."""
from __future__ import annotations

import numpy as np
import pytest

from polyfs.importers import import_source

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")
pytest.importorskip("h5netcdf")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::RuntimeWarning")


def test_xarray_zarr_v2_dataset_through_hdf5_and_zarr_views(tmp_path, mount_store):
    t = np.arange(4)
    temp = (np.arange(4 * 5 * 6, dtype="f4").reshape(4, 5, 6) / 3).round(2)
    temp[0, 0, 0] = np.nan
    ds = xr.Dataset({"temp": (("time", "y", "x"), temp, {"units": "K", "long_name": "temperature"}),
                     "count": (("y", "x"), np.arange(30, dtype="i2").reshape(5, 6))},
                    coords={"time": t, "y": np.linspace(0, 1, 5), "x": np.arange(6) * 10.0},
                    attrs={"title": "xarray v2"})
    src = tmp_path / "xr.zarr"
    ds.to_zarr(src, zarr_format=2, consolidated=True,
               encoding={"temp": {"chunks": (2, 5, 3)}, "count": {"chunks": (5, 6)}})
    store = tmp_path / "store"
    import_source(src, str(store), domain="/xr.h5", progress=False)
    m = mount_store(str(store))
    want = xr.open_zarr(src, zarr_format=2).load()
    for opened in (xr.open_dataset(m.path / "hdf5" / "xr.h5", engine="h5netcdf"),
                   xr.open_zarr(m.path / "zarr" / "xr.zarr", consolidated=False)):
        with opened as got:
            got = got.load()
            assert got.attrs["title"] == "xarray v2"
            assert got["temp"].dims == ("time", "y", "x") and got["temp"].attrs["units"] == "K"
            np.testing.assert_array_equal(got["temp"].values, want["temp"].values)
            np.testing.assert_array_equal(got["count"].values, want["count"].values)
            np.testing.assert_array_equal(got["x"].values, want["x"].values)
    z = zarr.open_group(str(m.path / "zarr" / "xr.zarr"), mode="r")
    assert z["temp"].chunks == (2, 5, 3)
