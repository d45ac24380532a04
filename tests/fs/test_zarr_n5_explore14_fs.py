"""Tier 2 (no kernel): removing what ``zarr/`` shows of an imported netCDF-4 file, exploratory
round 14 (real tools over a mount are in tests/mount/test_zarr_n5_explore14.py).

- A netCDF-4 file with a dimension that has no variable (``x = 3`` used only by ``v(time, x)``:
  most real files) keeps netCDF-C's placeholder dataset for it, which ``zarr/`` hides (as
  ``open_dataset`` does). ``rm -r zarr/f.nc.zarr`` (and so xarray ``to_zarr(mode="w")`` and
  zarr-python ``open_group(mode="w")``, which remove the hierarchy first) removed every array
  the user saw, then ``rmdir`` found the group still had a member and failed with
  ``ENOTEMPTY``: the root ``zarr.json`` stayed listed and the overwrite was impossible. A
  member the view hides now goes with its group; a member it shows still keeps it.
"""
from __future__ import annotations

import errno
import io
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_write_semantics import fs  # noqa: F401 - fixture

from polyfs.check import check_store
from polyfs.importers import import_source

netCDF4 = pytest.importorskip("netCDF4")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _nc_file(path: Path) -> Path:
    """netCDF-4 with dimensions that have no variable, at the root and in a group."""
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("x", 3)
        t = d.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = [0, 1]
        v = d.createVariable("v", "i2", ("time", "x"), fill_value=np.int16(-9))
        v[:] = [[1, 2, 3], [4, 5, 6]]
        g = d.createGroup("sub")
        g.createDimension("n", 2)
        g.createVariable("w", "f4", ("n",))[:] = [1.5, 2.5]
    return path


def _imported(fs, tmp_path: Path) -> None:  # noqa: F811 - the fixture's value
    import_source(str(_nc_file(tmp_path / "f.nc")), fs.url, domain="/f.nc")
    assert sorted(fs.ls("zarr/f.nc.zarr")) == ["sub", "time", "v", "zarr.json"]  # x: hidden
    assert sorted(fs.ls("zarr/f.nc.zarr/sub")) == ["w", "zarr.json"]  # n: hidden


def test_rm_r_of_an_imported_netcdf_removes_the_domain(fs, tmp_path):  # noqa: F811
    _imported(fs, tmp_path)
    fs.rm_r("zarr/f.nc.zarr")
    assert "f.nc.zarr" not in fs.ls("zarr") and "f.nc" not in fs.ls("hdf5")
    assert not check_store(fs.url, deep=True).problems


def test_rm_r_of_a_netcdf_group_whose_dimension_has_no_variable(fs, tmp_path):  # noqa: F811
    _imported(fs, tmp_path)
    fs.rm_r("zarr/f.nc.zarr/sub")
    assert sorted(fs.ls("zarr/f.nc.zarr")) == ["time", "v", "zarr.json"]
    with h5py.File(io.BytesIO(fs.read_file("hdf5/f.nc")), "r") as f:
        assert "sub" not in f
        np.testing.assert_array_equal(f["v"][...], [[1, 2, 3], [4, 5, 6]])
        assert f["x"].shape == (3,)  # the root's dimension is still there for v
    assert not check_store(fs.url, deep=True).problems


def test_a_group_with_a_member_the_view_shows_is_still_not_empty(fs, tmp_path):  # noqa: F811
    _imported(fs, tmp_path)
    fs.unlink("zarr/f.nc.zarr/zarr.json")
    assert fs.errno_of(fs.rmdir, "zarr/f.nc.zarr") == errno.ENOTEMPTY
    assert fs.errno_of(fs.rmdir, "zarr/f.nc.zarr/sub") == errno.ENOTEMPTY
    with h5py.File(io.BytesIO(fs.read_file("hdf5/f.nc")), "r") as f:
        assert sorted(f) == ["sub", "time", "v", "x"] and sorted(f["sub"]) == ["n", "w"]


def test_the_zarr_view_can_be_rewritten_after_its_removal(fs, tmp_path):  # noqa: F811
    """What ``to_zarr(mode="w")`` does: remove the hierarchy, make the directory again, write
    the root ``zarr.json``: the domain keeps its name."""
    _imported(fs, tmp_path)
    fs.rm_r("zarr/f.nc.zarr")
    fs.mkdir("zarr/f.nc.zarr")
    fs.write_json("zarr/f.nc.zarr/zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {"k": 1}})
    assert "f.nc" in fs.ls("hdf5")
    with h5py.File(io.BytesIO(fs.read_file("hdf5/f.nc")), "r") as f:
        assert list(f) == [] and f.attrs["k"] == 1


def test_n5_rm_r_of_an_imported_netcdf_is_unchanged(fs, tmp_path):  # noqa: F811
    """N5 shows the placeholder datasets: ``rm -r`` removes them as files, as before."""
    _imported(fs, tmp_path)
    assert "x" in fs.ls("n5/f.nc.n5")
    fs.rm_r("n5/f.nc.n5")
    assert "f.nc" not in fs.ls("hdf5")
