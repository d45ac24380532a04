"""Tier 2: TIFF internal transparency masks (NewSubfileType 4), exploratory round 16
(operations awaited directly).

A GDAL file with an internal mask (``gdal_translate -mask``, rasterio's ``write_mask``, GDAL's
default ``GDAL_TIFF_INTERNAL_MASK=YES``) written into ``tiff/`` was refused at close
(EOPNOTSUPP), and GDAL ignores close's error: the new file silently vanished. The mask is kept
now as the sibling dataset ``<name>_mask`` (uint8 0/255, named by the image's ``tiff_mask``
attribute), and the view's file of the image carries it again as its mask IFD. A mask page of
another size than the image is refused, the store untouched.
"""
from __future__ import annotations

import errno
import io

import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)

tifffile = pytest.importorskip("tifffile")

RNG = np.random.default_rng(16)
RGB = RNG.integers(0, 255, (100, 150, 3)).astype("u1")
GREY = RNG.integers(0, 255, (100, 150)).astype("u1")
MASK = np.zeros((100, 150), bool)
MASK[10:70, 30:120] = True


def masked_file(image: np.ndarray, mask: np.ndarray, bits: int = 1) -> bytes:
    """A tiled image and its transparency mask page, laid out as GDAL writes them (the mask
    as the second IFD, NewSubfileType 4, Photometric MASK, same tiles, deflate)."""
    buf = io.BytesIO()
    photometric = "rgb" if image.ndim == 3 else "minisblack"
    with tifffile.TiffWriter(buf) as w:
        w.write(image, tile=(64, 64), compression="zlib", photometric=photometric, metadata=None)
        if bits == 1:
            w.write(mask, tile=(64, 64), compression="zlib", photometric=4, subfiletype=4, metadata=None)
        else:  # tifffile writes masks 1-bit only: an 8-bit page, then made a mask as the view serves it
            w.write(mask.astype("u1") * 255, tile=(64, 64), compression="zlib", photometric="minisblack",
                    extratags=[(254, "I", 1, 4, True)], metadata=None)
    if bits != 1:
        buf.seek(0)
        with tifffile.TiffFile(buf) as t:
            t.pages[1].tags[262].overwrite(4)
    return buf.getvalue()


def pages(fs, path: str) -> list:
    with tifffile.TiffFile(io.BytesIO(fs.read_file(path))) as t:
        return [(int(p.subfiletype), int(p.photometric), int(p.bitspersample), p.tile, p.asarray())
                for p in t.pages]


@pytest.mark.parametrize("bits", [1, 8])
@pytest.mark.parametrize("image", [RGB, GREY], ids=["rgb", "grey"])
def test_new_file_keeps_its_mask_and_serves_it_back(fs, image, bits):
    fs.write_file("tiff/exp/pic.tif", masked_file(image, MASK, bits))
    assert {"pic.tif", "pic_mask.tif"} <= set(fs.ls("tiff/exp"))
    got = pages(fs, "tiff/exp/pic.tif")
    assert len(got) == 2
    np.testing.assert_array_equal(got[0][4], image)
    sub, photometric, nbits, tile, data = got[1]
    assert (sub, photometric, nbits) == (4, 4, 8) and tile == got[0][3]
    np.testing.assert_array_equal(data, MASK.astype("u1") * 255)
    # the mask is data every view shows: a uint8 0/255 array beside the image
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/exp/pic_mask.tif"))) as t:
        np.testing.assert_array_equal(t.asarray(), MASK.astype("u1") * 255)


def test_view_file_written_back_with_a_new_mask_updates_the_mask(fs):
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, MASK))
    other = ~MASK
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, other))
    np.testing.assert_array_equal(pages(fs, "tiff/exp/pic.tif")[1][4], other.astype("u1") * 255)
    before = fs.snapshot()
    fs.write_file("tiff/exp/pic.tif", fs.read_file("tiff/exp/pic.tif"))  # the view's own file: no change
    assert fs.snapshot() == before


def test_mask_added_to_an_existing_image(fs):
    buf = io.BytesIO()
    tifffile.imwrite(buf, GREY, tile=(64, 64))
    fs.write_file("tiff/exp/pic.tif", buf.getvalue())
    assert len(pages(fs, "tiff/exp/pic.tif")) == 1
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, MASK))
    got = pages(fs, "tiff/exp/pic.tif")
    assert len(got) == 2 and "pic_mask.tif" in fs.ls("tiff/exp")
    np.testing.assert_array_equal(got[1][4], MASK.astype("u1") * 255)


@pytest.mark.parametrize("shape", [(50, 150), (100, 149)])
def test_mask_of_another_size_is_refused_store_untouched(fs, shape):
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, MASK))
    before = fs.snapshot()
    bad = masked_file(GREY, np.ones(shape, bool))
    for name in ("pic.tif", "new.tif"):
        with pytest.raises(OSError) as exc:
            fs.write_file(f"tiff/exp/{name}", bad)
        assert exc.value.errno == errno.EINVAL
        assert fs.snapshot() == before
    np.testing.assert_array_equal(pages(fs, "tiff/exp/pic.tif")[1][4], MASK.astype("u1") * 255)


def test_removing_the_image_removes_its_mask(fs):
    """``rm pic.tif`` deletes the mask with the image: left behind, ``pic_mask`` took the name a
    new masked ``pic.tif`` needs, so writing one again was refused."""
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, MASK))
    fs.unlink("tiff/exp/pic.tif")
    assert not {"pic.tif", "pic_mask.tif"} & set(fs.ls("tiff/exp"))
    fs.write_file("tiff/exp/pic.tif", masked_file(GREY, ~MASK))
    np.testing.assert_array_equal(pages(fs, "tiff/exp/pic.tif")[1][4], (~MASK).astype("u1") * 255)
