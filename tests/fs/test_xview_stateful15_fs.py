"""Kernel-free regressions for what the cross-view stateful test through a real mount
(``tests/mount/test_xview_stateful15.py``) found, round 15.

- ``cp -r zarr/x.zarr/a zarr/x.zarr/d``, then ``d`` deleted through another view (a ``tiff/``
  unlink, h5py ``del`` in ``hdf5/``), then ``cp -r`` of it again: ``cp`` failed with
  "cannot create directory 'd/c': File exists" (and a fresh ``mkdir d`` listed a ``c``). The
  directories the first copy made inside the array (kept until the view shows them) outlived
  the array when another view deleted it, and reappeared inside the new directory of that name.
"""
from __future__ import annotations

import pytest

from writeharness import FS, zarr_array_meta, zarr_group_meta


@pytest.fixture
def fs():
    f = FS()
    yield f
    f.close()


def _array_with_chunk_dir(fs: FS, name: str) -> None:
    """An array made as ``cp -r`` makes it: its directory, its ``c/`` directory, then ``zarr.json``."""
    fs.mkdir(f"zarr/x.zarr/{name}")
    fs.mkdir(f"zarr/x.zarr/{name}/c")
    fs.write_json(f"zarr/x.zarr/{name}/zarr.json", zarr_array_meta((16, 16), "<u2", (8, 8), codecs=()))


@pytest.mark.parametrize("how", ["tiff-unlink", "zarr-rm"])
def test_a_new_directory_of_a_deleted_arrays_name_is_empty(fs, how):
    """The directories kept inside an array go with it, whichever view deletes it: a new
    directory of its name is empty and ``mkdir`` inside it works (``cp -r`` again)."""
    fs.mkdir("zarr/x.zarr")
    fs.write_json("zarr/x.zarr/zarr.json", zarr_group_meta())
    _array_with_chunk_dir(fs, "d")
    assert "d.tif" in fs.ls("tiff/x")
    if how == "tiff-unlink":
        fs.unlink("tiff/x/d.tif")
    else:
        fs.rm_r("zarr/x.zarr/d")
    assert not fs.exists("zarr/x.zarr/d")
    fs.mkdir("zarr/x.zarr/d")
    assert fs.ls("zarr/x.zarr/d") == [], "a directory just made lists what an old array had"
    fs.mkdir("zarr/x.zarr/d/c")  # EEXIST before: cp -r failed here
    fs.write_json("zarr/x.zarr/d/zarr.json", zarr_array_meta((16, 16), "<u2", (8, 8), codecs=()))
    assert fs.read_json("zarr/x.zarr/d/zarr.json")["shape"] == [16, 16]
