"""Real readers over a mount, exploratory round 9: HDF5/netCDF files copied into ``hdf5/``
read through ``zarr/`` by zarr-python, tensorstore and xarray (the cases are described in
tests/fs/test_zarr_n5_explore9_fs.py).

- h5py's variable-length bytes (``vlen_dtype(uint8)``) vanished from ``zarr/``; now
  ``variable_length_bytes`` arrays zarr-python reads.
- a netCDF ``char`` variable with a ``_FillValue`` made ``xarray.open_zarr`` of the file
  fail as a whole.
"""
from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
from support import quiet_local_mount as _mounted

zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")

BLOBS = [b"abc", b"", b"\x00\xff\x10", b"q" * 300, b"z"]



def test_vlen_bytes_and_complex_records_from_hdf5(mount_store, tmp_path):
    _, m = _mounted(mount_store, tmp_path)
    local = tmp_path / "b.h5"
    with h5py.File(local, "w") as f:
        d = f.create_dataset("vb", (5,), dtype=h5py.vlen_dtype(np.uint8), chunks=(2,), compression="gzip")
        for i, b in enumerate(BLOBS):
            d[i] = np.frombuffer(b, np.uint8)
        f["n"] = np.arange(3)
    shutil.copy(local, m.path / "hdf5" / "b.h5")
    root = m.path / "zarr" / "b.zarr"
    a = zarr.open_array(str(root / "vb"), mode="r")
    assert [bytes(x) for x in a[...]] == BLOBS
    assert sorted(zarr.open_group(str(root), mode="r").array_keys()) == ["n", "vb"]


def test_open_zarr_of_netcdf_with_a_char_fill_value(mount_store, tmp_path):
    netCDF4 = pytest.importorskip("netCDF4")
    xr = pytest.importorskip("xarray")
    _, m = _mounted(mount_store, tmp_path)
    local = tmp_path / "c.nc"
    with netCDF4.Dataset(local, "w") as ds:
        ds.createDimension("n", 3)
        v = ds.createVariable("flag", "S1", ("n",), fill_value=b"x")
        v[:] = np.array([b"a", b"b", b"c"], "S1")
        t = ds.createVariable("temp", "f8", ("n",), fill_value=-9.0)
        t[:] = [1.0, -9.0, 3.0]
    shutil.copy(local, m.path / "hdf5" / "c.nc")
    (root,) = [p for p in (m.path / "zarr").iterdir() if p.name.startswith("c.")]
    got = xr.open_zarr(str(root), consolidated=False).load()
    assert [bytes(x) for x in got["flag"].values] == [b"a", b"b", b"c"]
    np.testing.assert_array_equal(got["temp"].values, [1.0, np.nan, 3.0])
