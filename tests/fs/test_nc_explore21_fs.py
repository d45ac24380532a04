"""netCDF string variables in ``hdf5/``, exploratory round 21 (kernel-free; the real tools
over a mount are in tests/mount/test_nc_explore21.py).

1. The view put equal variable-length elements of a dataset into ONE global heap object
   (deduplicated). HDF5 frees an element's heap object when a writer overwrites that
   element, so overwriting one of several equal strings (h5py ``r+``, netCDF4 ``"a"``) cut
   all its equals off: "bad heap pointer" on the next read, or another string's bytes.
2. A variable-length string's fill value (netCDF's string ``_FillValue``) was neither kept
   by ``polyfs import`` / a new file written into ``hdf5/`` nor shown in the view's fill
   value message: netCDF saw ``_NoFill = "true"`` and a variable extended through the view
   read ``""`` where a disk file reads its ``_FillValue``.
"""
from __future__ import annotations

import io
import shutil

import h5py
import numpy as np
import pytest

from polyfs.importers import import_source
from writeharness import FS, write_changes

netCDF4 = pytest.importorskip("netCDF4")


def _import(tmp_path, src, domain: str) -> FS:
    store = tmp_path / "store"
    import_source(str(src), str(store), domain=domain, progress=False)
    return FS(f"file://{store}")


def _local(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_overwriting_one_of_equal_strings_keeps_the_others(tmp_path):
    src = tmp_path / "src.h5"
    names = np.array(["dup", "dup", "dup", "dup", "zz"], dtype=object)
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=names, dtype=h5py.string_dtype(), chunks=(5,), maxshape=(None,))
    fs = _import(tmp_path, src, "/d.h5")
    before = fs.read_file("hdf5/d.h5")
    local = _local(tmp_path, "view.h5", before)
    with h5py.File(local, "r+") as f:  # as a writer does through the mount
        f["x"][0] = "new"
    with h5py.File(local, "r") as f:  # the file itself: its other "dup" elements still there
        assert list(f["x"].asstr()[:]) == ["new", "dup", "dup", "dup", "zz"]
    write_changes(fs, "hdf5/d.h5", before, local.read_bytes())
    with h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/d.h5")), "r") as f:
        assert list(f["x"].asstr()[:]) == ["new", "dup", "dup", "dup", "zz"]


def _string_nc(path) -> None:
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("t", None)
        nc.createVariable("s", str, ("t",), fill_value="none")[0] = "a"
        nc.createVariable("plain", str, ("t",))[0] = "p"


def test_a_string_fill_value_is_kept_and_shown(tmp_path):
    src = tmp_path / "s.nc"
    _string_nc(src)
    fs = _import(tmp_path, src, "/s.nc")
    view = fs.read_file("hdf5/s.nc")
    with h5py.File(io.BytesIO(view), "r") as f:
        assert f["s"].fillvalue == b"none"
        assert f["s"].id.get_create_plist().fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED
    with netCDF4.Dataset("s", memory=view) as nc:
        assert nc["s"]._FillValue == "none"


def test_a_string_variable_extended_through_the_view_reads_its_fill_value(tmp_path):
    src = tmp_path / "s.nc"
    _string_nc(src)
    fs = _import(tmp_path, src, "/s.nc")
    before = fs.read_file("hdf5/s.nc")
    local = _local(tmp_path, "view.nc", before)
    disk = tmp_path / "disk.nc"
    shutil.copyfile(src, disk)
    for path in (local, disk):  # netCDF4 "a": the same edit on the view's file and on a disk file
        with netCDF4.Dataset(path, "a") as nc:
            nc["s"][3] = "d"
            nc["plain"][2] = "q"
    write_changes(fs, "hdf5/s.nc", before, local.read_bytes())
    with netCDF4.Dataset(disk) as want, \
            netCDF4.Dataset("s", memory=fs.fresh(read_only=True).read_file("hdf5/s.nc")) as got:
        assert list(got["s"][:]) == list(want["s"][:]) == ["a", "none", "none", "d"]
        assert list(got["plain"][:]) == list(want["plain"][:])
