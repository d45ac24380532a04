"""Tier 2: review of GDAL's external mask ``x.tif.msk`` (round 17; maskin.py external_mask,
writeops._refuse_orphan/_adopt_below), operations awaited directly.

A ``.msk`` comes after its image: the image file is written anew without an internal mask, so
its store stops naming its mask (mask.py, "its data stays"); the ``.msk`` then finds no mask
named and, since the old ``<name>_mask`` is "a dataset the image does not name", makes
``<name>_mask1``. Every re-copy of an image with its ``.msk`` (``cp x.tif x.tif.msk MNT/...``
again, ``rsync`` after the image changed) left one more orphan mask dataset in the store, one
more listed ``x_maskN.tif`` and one warning, while the served mask was right.
"""
from __future__ import annotations

import numpy as np
import pytest
from test_msk_explore16_fs import WANT, gdal_pair, image_file, msk_file, served_mask
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)

tifffile = pytest.importorskip("tifffile")


def copy_pair(fs) -> None:  # noqa: F811
    """``cp pic.tif pic.tif.msk MNT/tiff/exp/`` (or rsync's order): the image closed, then its .msk."""
    fs.write_file("tiff/exp/pic.tif", image_file())
    fs.write_file("tiff/exp/pic.tif.msk", msk_file())


@pytest.mark.parametrize("write", [copy_pair, gdal_pair], ids=["cp-order", "gdal-order"])
def test_copying_an_image_and_its_msk_again_keeps_one_mask(fs, write):  # noqa: F811
    write(fs)
    first = fs.snapshot()
    write(fs)  # the same two files again (a second cp, rsync -c, a re-run without deleting)
    write(fs)
    np.testing.assert_array_equal(served_mask(fs), WANT)
    assert sorted(n for n in fs.ls("tiff/exp") if n.startswith("pic")) == ["pic.tif", "pic_mask.tif"]
    assert sorted(fs.snapshot()) == sorted(first)  # no new objects: the same mask's chunks, unchanged


def test_rm_after_a_recopy_leaves_no_mask_behind(fs):  # noqa: F811
    copy_pair(fs)
    copy_pair(fs)
    fs.unlink("tiff/exp/pic.tif")
    assert [n for n in fs.ls("tiff/exp") if n.startswith("pic")] == []
