"""Creation order through the HDF5 view of a real mount, read and written.

Two sources tracking creation order (h5py ``track_order=True`` with dense
attribute and link storage; netCDF4, which tracks it everywhere) are imported
and opened by path on the mount: h5py, pyfive, netCDF4, ncdump and h5dump list
attributes, links and variables in the order they were made. Writers that add
attributes, links and variables through the view (h5py ``"r+"``, netCDF4
``"a"``) find them after the old ones on the next open, and a value changed
in place keeps its position.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
netCDF4 = pytest.importorskip("netCDF4")

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
ATTRS = ["zeta", "alpha", "mid", "Beta", "omega", "a2", "a10", "k", "c", "b", "x", "y"]
LINKS = ["q", "b", "z", "a", "m", "c", "y", "d", "x", "e"]
VARS = ["w", "b", "a"]


def make_sources(base: Path) -> None:
    with h5py.File(base / "ordered.h5", "w", track_order=True) as f:
        f.attrs["zz"] = 1
        f.attrs["aa"] = 2
        g = f.create_group("grp", track_order=True)
        for i, n in enumerate(ATTRS):
            g.attrs[n] = i
        for n in LINKS:
            g.create_dataset(n, data=np.arange(5) * len(n), chunks=(5,), compression="gzip", track_order=True)
    with netCDF4.Dataset(base / "ordered.nc", "w") as nc:
        nc.zz = "first"
        nc.aa = "second"
        nc.createDimension("t", 4)
        for name in VARS:
            v = nc.createVariable(name, "f4", ("t",), zlib=True)
            v.units = "m"
            v.long_name = name
            v.axis = "X"
            v[:] = np.arange(4) + len(name)


@pytest.fixture
def mounted(tmp_path, mount_store):
    make_sources(tmp_path)
    store = tmp_path / "store"
    import_source(tmp_path / "ordered.h5", str(store), progress=False)
    import_source(tmp_path / "ordered.nc", str(store), domain="/ordered.nc", progress=False)  # hdf5/ordered.nc
    m = mount_store(str(store))
    return tmp_path, m.path / "hdf5"


def test_readers_open_by_path_and_see_creation_order(mounted):
    import pyfive

    src, view = mounted
    h5 = view / "ordered.h5"
    assert h5.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"  # the superblock at 0
    with h5py.File(h5, "r") as f:
        assert list(f.attrs) == ["zz", "aa"] and list(f) == ["grp"]
        assert list(f["grp"].attrs) == ATTRS and list(f["grp"]) == LINKS
    p = pyfive.File(str(h5))  # by path: pyfive 1.3 reads a file whose superblock is at 0
    assert list(p.attrs) == ["zz", "aa"] and list(p["grp"].attrs) == ATTRS and list(p["grp"]) == LINKS
    for n in LINKS:
        np.testing.assert_array_equal(p["grp"][n][()], np.arange(5) * len(n))
    res = subprocess.run(["h5dump", "-A", "--sort_by=creation_order", "-g", "/grp", str(h5)], capture_output=True,
                         text=True, env=ENV, timeout=120)
    assert res.returncode == 0, res.stderr
    assert re.findall(r'^   ATTRIBUTE "([^"]+)"', res.stdout, re.M) == ATTRS
    with netCDF4.Dataset(view / "ordered.nc") as nc, netCDF4.Dataset(src / "ordered.nc") as orig:
        assert list(nc.variables) == list(orig.variables) == VARS
        assert nc.ncattrs() == orig.ncattrs() == ["zz", "aa"]
        for name in VARS:
            assert nc[name].ncattrs() == orig[name].ncattrs()
            np.testing.assert_array_equal(nc[name][:], orig[name][:])
    got = subprocess.run(["ncdump", "-h", str(view / "ordered.nc")], capture_output=True, text=True, env=ENV,
                         timeout=120)
    want = subprocess.run(["ncdump", "-h", str(src / "ordered.nc")], capture_output=True, text=True, env=ENV,
                          timeout=120)
    assert got.returncode == want.returncode == 0, got.stderr
    assert got.stdout.splitlines()[1:] == want.stdout.splitlines()[1:]


def test_h5py_r_plus_adds_after_the_old_ones(mounted):
    _, view = mounted
    h5 = view / "ordered.h5"
    with h5py.File(h5, "r+") as f:
        g = f["grp"]
        g.attrs["new_b"] = 1
        g.attrs["new_a"] = 2
        g.attrs.modify("mid", 99)  # same type and shape: written in place
        g.create_group("aaa")
        f.attrs["between"] = 3
    with h5py.File(h5, "r") as f:
        assert list(f["grp"].attrs) == [*ATTRS, "new_b", "new_a"]
        assert f["grp"].attrs["mid"] == 99
        assert list(f["grp"]) == [*LINKS, "aaa"]
        assert list(f.attrs) == ["zz", "aa", "between"]


def test_netcdf4_a_adds_after_the_old_ones(mounted):
    _, view = mounted
    path = view / "ordered.nc"
    with netCDF4.Dataset(path, "a") as nc:
        nc["b"].comment = "added"
        nc.createVariable("c0", "i2", ("t",))[:] = [1, 2, 3, 4]
        nc.history = "appended"
    with netCDF4.Dataset(path, "r") as nc:
        assert list(nc.variables) == [*VARS, "c0"]
        assert nc.ncattrs() == ["zz", "aa", "history"]
        assert nc["b"].ncattrs() == ["units", "long_name", "axis", "comment"]
        np.testing.assert_array_equal(nc["c0"][:], [1, 2, 3, 4])
