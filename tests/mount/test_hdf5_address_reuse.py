"""netCDF4-python ``renameDimension`` of a dimension without a coordinate variable, through
``hdf5/`` on a real mount: netCDF-C deletes the dimension's placeholder dataset and makes
another, which HDF5 puts at the freed object header address. polyfs takes it for a new
dataset (not the old one with another layout or filters), so close succeeds; netCDF4, h5py
and ncdump read the renamed dimensions, their sizes and the data back."""
from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
netCDF4 = pytest.importorskip("netCDF4")


def _make(path) -> None:
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("t", None)
        d.createDimension("x", 4)
        v = d.createVariable("m", "i2", ("t", "x"))
        v[0:2] = np.arange(8, dtype="i2").reshape(2, 4)


@pytest.mark.parametrize("old, new, dims", [("x", "xx", ("t", "xx")), ("t", "time", ("time", "x"))])
def test_netcdf_rename_dimension_without_coordinate_variable(mount_store, tmp_path, old, new, dims):
    src = tmp_path / "d.nc"
    _make(src)
    store = tmp_path / "store"
    import_source(src, str(store), domain="/d.nc", progress=False)
    m = mount_store(str(store))
    path = m.path / "hdf5" / "d.nc"
    # in a child: close was refused with ENOTSUP before, and netCDF-C then crashed
    code = "import netCDF4, sys; d = netCDF4.Dataset(sys.argv[1], 'a'); d.renameDimension(sys.argv[2], sys.argv[3]); " \
           "d.close(); print('closed')"
    res = subprocess.run([sys.executable, "-c", code, str(path), old, new], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "closed" in res.stdout, (res.returncode, res.stderr[-2000:])
    assert "flush refused" not in m.log_text()

    want = np.arange(8).reshape(2, 4)
    sizes = dict(zip(dims, (2, 4)))
    with netCDF4.Dataset(path) as nc:
        assert {k: len(v) for k, v in nc.dimensions.items()} == sizes
        assert nc.dimensions[dims[0]].isunlimited() and not nc.dimensions[dims[1]].isunlimited()
        assert nc.variables["m"].dimensions == dims
        np.testing.assert_array_equal(nc.variables["m"][:], want)
    with h5py.File(path, "r") as f:
        assert set(f) == {*dims, "m"}
        np.testing.assert_array_equal(f["m"][...], want)
        assert f[dims[1]].shape == (4,) and f[dims[0]].maxshape == (None,)  # as netCDF-C makes them
        assert [f["m"].dims[i][0].name for i in range(2)] == [f"/{n}" for n in dims]
    if shutil.which("ncdump"):
        out = subprocess.run(["ncdump", str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        head = " ".join(out.stdout.split())
        assert f"{dims[0]} = UNLIMITED ; // (2 currently)" in head and f"{dims[1]} = 4 ;" in head
        assert f"short m({dims[0]}, {dims[1]}) ;" in head
        assert "m = 0, 1, 2, 3, 4, 5, 6, 7 ;" in head
