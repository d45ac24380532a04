"""Writes through the HDF5 view of a file holding types numpy lacks and region references:
changing one dataset keeps every other one exactly (operations awaited directly)."""
from __future__ import annotations

import io
import subprocess

import h5py
import numpy as np

import exotic_corpus
from polyfs.importers import import_source
from support import fill_time_file
from writeharness import FS


def test_r_plus_write_keeps_exotic_types(tmp_path):
    src = exotic_corpus.make_hdf5_types_corpus(tmp_path / "src")[0]
    import_source(src, str(tmp_path / "store"), progress=False)
    fs = FS(f"file://{tmp_path / 'store'}")
    buf = io.BytesIO(fs.read_file("hdf5/types.h5"))
    with h5py.File(buf, "r+") as f:
        f["data"][0, 0] = 777
        f.attrs["new"] = 5
    assert fs.write_file("hdf5/types.h5", buf.getvalue()) == len(buf.getvalue())
    after = tmp_path / "after.h5"
    after.write_bytes(fs.fresh(read_only=True).read_file("hdf5/types.h5"))
    with h5py.File(after) as b, h5py.File(src) as a:
        assert b["data"][0, 0] == 777 and b.attrs["new"] == 5
        assert set(a) == set(b)
        for name in ("longdouble", "quad", "i24", "u12", "time", "spacepad", "regref"):
            assert a[name].id.get_type().encode() == b[name].id.get_type().encode(), name
        np.testing.assert_array_equal(b["data"][b["regref"][0]], [[12, 13, 14], [22, 23, 24]])
    for name in ("longdouble", "quad", "i24", "u12_offset_be", "spacepad", "regref"):
        res = subprocess.run(["h5diff", str(src), str(after), f"/{name}", f"/{name}"], capture_output=True, text=True)
        assert res.returncode == 0, f"{name}: {res.stdout[-2000:]}"


def test_a_written_file_keeps_each_datasets_fill_time(tmp_path):
    """h5py's file written into the HDF5 view: each dataset's fill time (HDF5's default, or
    "never" as netCDF-C's NC_NOFILL makes it, or "at allocation") is stored and read back."""
    src = tmp_path / "ft.h5"
    fill_time_file(src)
    fs = FS()
    fs.write_file("hdf5/ft.h5", src.read_bytes())
    back = tmp_path / "back.h5"
    back.write_bytes(fs.fresh(read_only=True).read_file("hdf5/ft.h5"))
    with h5py.File(src, "r") as orig, h5py.File(back, "r") as got:
        for name in ("never", "alloc", "ifset"):
            assert got[name].id.get_create_plist().get_fill_time() == \
                orig[name].id.get_create_plist().get_fill_time(), name
            assert got[name][()].tolist() == orig[name][()].tolist(), name
    fs.close()
