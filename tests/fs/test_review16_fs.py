"""Tier 2: review of the TIFF transparency-mask feature (round 16; mask.py, maskin.py), operations
awaited directly.

A written file's mask is kept as the sibling dataset ``<name>_mask`` (named by the image's
``tiff_mask`` attribute). That name is only a default, yet a dataset already holding it was
either refused or taken over:

- an orphan ``<name>_mask`` (its image deleted through ``zarr/``/``hdf5/``, or rewritten without a
  mask and then ``rm``'d: SEMANTICS keeps its data) made every new masked ``<name>.tif`` fail at
  close with EINVAL, which GDAL and rasterio ignore: the user's file silently vanished;
- a user's own array called ``<name>_mask`` (a cloud mask, 0/1 uint8) was overwritten with the
  file's 0/255 mask, or, of another type, refused the file.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
from test_mask_explore16_fs import GREY, MASK, masked_file
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)

tifffile = pytest.importorskip("tifffile")

CLOUDS = (np.arange(100 * 150).reshape(100, 150) % 7 == 0).astype("u1")  # a user's 0/1 array


def plain(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, image, tile=(64, 64), metadata=None)
    return buf.getvalue()


def served(fs, path: str) -> list[np.ndarray]:
    """The view file's pages (image, then its mask if served); its stat size is its length."""
    data = fs.read_file(path)
    assert fs.stat(path).st_size == len(data)
    with tifffile.TiffFile(io.BytesIO(data)) as t:
        return [p.asarray() for p in t.pages]


def view_array(fs, path: str) -> np.ndarray:
    with tifffile.TiffFile(io.BytesIO(fs.read_file(path))) as t:
        return t.asarray()


def test_masked_file_written_again_after_rm_of_an_unmasked_rewrite(fs):
    """masked ``pic.tif``; rewritten without a mask (``pic_mask`` stays, unnamed); ``rm pic.tif``;
    a masked ``pic.tif`` again was EINVAL ("would be kept as pic_mask, which exists already")."""
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, MASK))
    fs.write_file("tiff/exp/pic.tif", plain(GREY))
    fs.unlink("tiff/exp/pic.tif")
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, ~MASK))
    got = served(fs, "tiff/exp/pic.tif")
    assert len(got) == 2
    np.testing.assert_array_equal(got[0], GREY)
    np.testing.assert_array_equal(got[1], (~MASK).astype("u1") * 255)


def test_masked_file_written_again_after_its_image_was_deleted_through_zarr(fs):
    """``rm -r zarr/exp.zarr/pic`` (or h5py's ``del``) leaves ``pic_mask``: ``cp masked.tif
    tiff/exp/pic.tif`` was then EINVAL."""
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, MASK))
    fs.rm_r("zarr/exp.zarr/pic")
    assert "pic.tif" not in fs.ls("tiff/exp")
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, ~MASK))
    got = served(fs, "tiff/exp/pic.tif")
    assert len(got) == 2
    np.testing.assert_array_equal(got[1], (~MASK).astype("u1") * 255)


def test_new_masked_file_beside_a_users_array_of_that_name(fs):
    """A user's own ``scene_mask`` (0/1 clouds) must neither refuse a new masked ``scene.tif`` nor
    be changed by it."""
    fs.write_file("tiff/exp/scene_mask.tif", plain(CLOUDS))
    fs.write_file("tiff/exp/scene.tif", masked_file(GREY, MASK))
    np.testing.assert_array_equal(view_array(fs, "tiff/exp/scene_mask.tif"), CLOUDS)
    got = served(fs, "tiff/exp/scene.tif")
    assert len(got) == 2
    np.testing.assert_array_equal(got[1], MASK.astype("u1") * 255)


def test_mask_added_to_an_image_does_not_overwrite_a_users_array_of_that_name(fs):
    """An existing unmasked ``scene`` written again with a mask took over the user's uint8
    ``scene_mask`` (0/1 clouds became the file's 0/255 mask): data loss."""
    fs.write_file("tiff/exp/scene.tif", plain(GREY))
    fs.write_file("tiff/exp/scene_mask.tif", plain(CLOUDS))
    fs.write_file("tiff/exp/scene.tif", masked_file(GREY, MASK))
    np.testing.assert_array_equal(view_array(fs, "tiff/exp/scene_mask.tif"), CLOUDS)
    got = served(fs, "tiff/exp/scene.tif")
    assert len(got) == 2
    np.testing.assert_array_equal(got[1], MASK.astype("u1") * 255)


def test_mask_added_to_an_image_beside_a_float_array_of_that_name(fs):
    """A float ``scene_mask`` (e.g. a probability raster) made a masked rewrite of ``scene.tif``
    EINVAL ("not a 2-D uint8 dataset"): GDAL ignores it, the rewrite was lost."""
    prob = np.linspace(0, 1, 100 * 150, dtype="f4").reshape(100, 150)
    fs.write_file("tiff/exp/scene.tif", plain(GREY))
    fs.write_file("tiff/exp/scene_mask.tif", plain(prob))
    fs.write_file("tiff/exp/scene.tif", masked_file(GREY[::-1].copy(), MASK))
    np.testing.assert_array_equal(view_array(fs, "tiff/exp/scene_mask.tif"), prob)
    got = served(fs, "tiff/exp/scene.tif")
    np.testing.assert_array_equal(got[0], GREY[::-1])
    np.testing.assert_array_equal(got[1], MASK.astype("u1") * 255)
