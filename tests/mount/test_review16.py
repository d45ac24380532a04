"""Tier 3: review of TIFF transparency masks (round 16) through a real mount.

A masked image deleted through ``hdf5/`` (h5py's ``del``) leaves its mask dataset ``<name>_mask``
behind (SEMANTICS: deleting a dataset through another view deletes that dataset). Writing a masked
``<name>.tif`` again, as GDAL/rasterio do, was then refused at close (EINVAL: "would be kept as
<name>_mask, which exists already"), which both ignore (exit status 0): the file silently vanished.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from support import deep_check, seeded_store
from test_mask_explore16 import DATA, MASK, write_with_mask

h5py = pytest.importorskip("h5py")
needs_gdal = pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


@needs_gdal
def test_masked_file_written_again_after_h5py_deleted_its_image(mount_store, store, tmp_path, rasterio):
    src = tmp_path / "src.tif"
    write_with_mask(rasterio, src)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "pic.tif"
    shutil.copyfile(src, view)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r+") as f:
        del f["pic"]
    assert not view.exists()
    res = subprocess.run(["gdal_translate", "-q", "--config", "GDAL_TIFF_INTERNAL_MASK", "YES", str(src), str(view)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0  # GDAL's status says nothing of close()'s error: the file must be there
    assert view.exists(), res.stderr
    assert os.stat(view).st_size == len(view.read_bytes())
    with rasterio.open(view) as d:
        np.testing.assert_array_equal(d.read(), DATA)
        np.testing.assert_array_equal(d.dataset_mask(), MASK)
    deep_check(store)


@pytest.mark.parametrize("how", ["hard link", "copy"])
def test_rm_of_a_second_name_keeps_the_mask_the_image_still_has(mount_store, store, tmp_path, rasterio, how):
    """``rm`` of an image deletes its mask (companion_paths). An image reachable under a second name
    (an h5py hard link ``f["b"] = f["a"]``, or a copy ``f.copy("a", "b")`` that keeps the
    ``tiff_mask`` attribute) lost its mask when that second file was removed: ``a.tif`` stayed but
    GDAL no longer found a mask in it."""
    src = tmp_path / "src.tif"
    write_with_mask(rasterio, src)
    m = mount_store(str(store))
    tiff = m.path / "tiff" / "exp"
    shutil.copyfile(src, tiff / "a.tif")
    with h5py.File(m.path / "hdf5" / "exp.h5", "r+") as f:
        if how == "hard link":
            f["b"] = f["a"]
        else:
            f.copy("a", "b")
    (tiff / "b.tif").unlink()
    assert {"a.tif", "a_mask.tif"} <= set(os.listdir(tiff)) and "b.tif" not in os.listdir(tiff)
    with rasterio.open(tiff / "a.tif") as d:
        assert d.mask_flag_enums == ([rasterio.enums.MaskFlags.per_dataset],)
        np.testing.assert_array_equal(d.dataset_mask(), MASK)
    deep_check(store)
