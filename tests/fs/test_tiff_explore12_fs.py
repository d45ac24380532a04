"""Tier 2: the TIFF view as image libraries read it, exploratory round 12 (operations awaited
directly).

- an RGB image stored by the HDF5 Image and Palette Specification (``CLASS`` ``IMAGE``,
  ``IMAGE_SUBCLASS`` ``IMAGE_TRUECOLOR``: what ``H5IMmake_image_24bit``, HDFView and IDL
  write; h5py users copy the attributes) was served as H pages of W x 3 grey pixels, so
  Pillow, GDAL and every viewer showed a thin stack, not the picture. It is an RGB TIFF now,
  contig for ``INTERLACE_PIXEL`` and separate planes for ``INTERLACE_PLANE``; a grey image
  with ``IMAGE_WHITE_IS_ZERO`` 1 is MinIsWhite;
- a 1-bit TIFF (a bilevel scan, a fax page, a mask: tifffile's bool, Pillow's mode ``1``)
  written into ``tiff/`` or imported was served as 8-bit 0 and 1: black in every viewer
  (Pillow mode ``L``, OpenCV), no GDAL palette, and tifffile read uint8 back, not bool. It is
  served 1-bit again (rows packed), stacks too, whatever ``tiff_level``.
"""
from __future__ import annotations

import io
import logging

import h5py
import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)
from writeharness import FS

tifffile = pytest.importorskip("tifffile")

RNG = np.random.default_rng(12)
RGB = RNG.integers(0, 255, (40, 50, 3)).astype("u1")
GREY = RNG.integers(0, 255, (40, 50)).astype("u1")
BITS = RNG.integers(0, 2, (64, 90)).astype(bool)
BIT_STACK = RNG.integers(0, 2, (3, 40, 70)).astype(bool)


def spec_string(obj: h5py.HLObject, name: str, text: str) -> None:
    """An attribute as ``H5LTset_attribute_string`` writes it: fixed length, null terminated."""
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(len(text) + 1)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    attr = h5py.h5a.create(obj.id, name.encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
    attr.write(np.array(text.encode(), dtype=f"S{len(text) + 1}"))


def h5_images() -> bytes:
    """An HDF5 file of images by the HDF5 Image Specification, and one plain (H, W, 3) array."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        pixel = f.create_dataset("pixel", data=RGB, chunks=(16, 16, 3))
        plane = f.create_dataset("plane", data=np.moveaxis(RGB, -1, 0).copy(), chunks=(1, 16, 16))
        for d, mode in ((pixel, "INTERLACE_PIXEL"), (plane, "INTERLACE_PLANE")):
            for k, v in (("CLASS", "IMAGE"), ("IMAGE_VERSION", "1.2"), ("IMAGE_SUBCLASS", "IMAGE_TRUECOLOR"),
                         ("INTERLACE_MODE", mode)):
                spec_string(d, k, v)
        by_h5py = f.create_dataset("by_h5py", data=RGB)  # h5py's own strings, no interlace: pixel
        by_h5py.attrs["CLASS"] = np.bytes_("IMAGE")
        by_h5py.attrs["IMAGE_SUBCLASS"] = "IMAGE_TRUECOLOR"
        grey = f.create_dataset("grey", data=GREY)
        for k, v in (("CLASS", "IMAGE"), ("IMAGE_VERSION", "1.2"), ("IMAGE_SUBCLASS", "IMAGE_GRAYSCALE")):
            spec_string(grey, k, v)
        grey.attrs["IMAGE_WHITE_IS_ZERO"] = np.uint8(1)
        f.create_dataset("plain", data=RGB)
    return buf.getvalue()


def served(fs: FS, path: str) -> tifffile.TiffFile:
    return tifffile.TiffFile(io.BytesIO(fs.read_file(path)))


def test_hdf5_image_spec_truecolor_is_an_rgb_tiff(fs):
    fs.write_file("hdf5/pics.h5", h5_images())
    for name in ("pixel", "by_h5py"):
        with served(fs, f"tiff/pics/{name}.tif") as t:
            page = t.pages[0]
            assert len(t.pages) == 1 and page.photometric == 2 and page.samplesperpixel == 3, name
            assert page.planarconfig == 1
            np.testing.assert_array_equal(t.series[0].asarray(), RGB)
    with served(fs, "tiff/pics/plane.tif") as t:
        page = t.pages[0]
        assert len(t.pages) == 1 and page.photometric == 2 and page.samplesperpixel == 3
        assert page.planarconfig == 2
        np.testing.assert_array_equal(page.asarray(), np.moveaxis(RGB, -1, 0))
    with served(fs, "tiff/pics/grey.tif") as t:
        assert t.pages[0].photometric == 0  # MinIsWhite: IMAGE_WHITE_IS_ZERO
        np.testing.assert_array_equal(t.pages[0].asarray(), GREY)
    with served(fs, "tiff/pics/plain.tif") as t:  # no attribute says these are samples
        assert len(t.pages) == 40


def tif(data: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("kw", [{}, {"tile": (32, 32), "compression": "zlib"}, {"tile": (16, 16)}],
                         ids=["strips", "tiled_deflate", "tiled_none"])
def test_1bit_image_written_into_tiff_is_served_1bit(fs, kw):
    fs.write_file("tiff/exp/scan.tif", tif(BITS, **kw))
    with served(fs, "tiff/exp/scan.tif") as t:
        assert t.pages[0].bitspersample == 1
        got = t.series[0].asarray()
    assert got.dtype == bool
    np.testing.assert_array_equal(got, BITS)
    with h5py.File(io.BytesIO(fs.read_file("hdf5/exp.h5")), "r") as f:  # stored as booleans
        np.testing.assert_array_equal(f["scan"][()], BITS)


def test_1bit_stack_and_deflated_tiles(fs):
    fs.write_file("tiff/exp/masks.tif", tif(BIT_STACK))
    for level in (0, 6):
        reader = fs.fresh(read_only=True, tiff_level=level)
        try:
            with served(reader, "tiff/exp/masks.tif") as t:
                assert len(t.pages) == 3 and all(p.bitspersample == 1 for p in t.pages)
                assert t.pages[0].compression == (1 if level == 0 else 8)
                np.testing.assert_array_equal(t.series[0].asarray(), BIT_STACK)
        finally:
            reader.close()


def test_copy_of_a_1bit_view_file_keeps_it_and_says_nothing_dropped(fs, caplog):
    fs.write_file("tiff/exp/scan.tif", tif(BITS, photometric="miniswhite"))
    raw = fs.read_file("tiff/exp/scan.tif")
    with caplog.at_level(logging.WARNING):
        fs.write_file("tiff/exp/copy.tif", raw)
    assert not [r for r in caplog.records if "copy.tif" in r.getMessage()]
    with served(fs, "tiff/exp/copy.tif") as t:
        assert t.pages[0].bitspersample == 1 and t.pages[0].photometric == 0
        np.testing.assert_array_equal(t.series[0].asarray(), BITS)


def test_h5py_bool_mask_stays_8bit_zero_copy(fs):
    """A boolean dataset that no 1-bit file made keeps its chunks served as they are (8-bit)."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_dataset("mask", data=BITS, chunks=(32, 32), compression="gzip")
    fs.write_file("hdf5/masks.h5", buf.getvalue())
    with served(fs, "tiff/masks/mask.tif") as t:
        assert t.pages[0].bitspersample == 8
        np.testing.assert_array_equal(t.pages[0].asarray(), BITS.astype("u1"))
