"""Tier 2: 1-bit pictures written through the TIFF view and read back by OpenCV, exploratory
round 18 (operations awaited directly, no kernel; see writeharness.py).

- a black-and-white picture Pillow saves (mode ``1``, raw or CCITT Group 4) is stored as booleans
  and served as uncompressed packed 1-bit tiles. Their byte count (a 64 x 48 tile: 384 bytes)
  was not a whole number of KiB, and libtiff reading a file it does not map (``cv2.imdecode``,
  and ``cv2.imread`` of a domain written through the mount, whose files refuse ``mmap``)
  rounds its raw buffer up to 1 KiB, then refuses the tile in ``TIFFReadRGBATile`` ("Invalid
  tile byte count for tile 0. Expected 384, got 1024"): OpenCV gave ``None``. The tile rows
  now make packed tiles whole KiB, as they did for whole-byte pixels.
"""
from __future__ import annotations

import io

import h5py
import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)

tifffile = pytest.importorskip("tifffile")
Image = pytest.importorskip("PIL.Image")
cv2 = pytest.importorskip("cv2")

RNG = np.random.default_rng(1818)


def pillow_tiff(frames: list[np.ndarray], **kw) -> bytes:
    buf = io.BytesIO()
    ims = [Image.fromarray(a) for a in frames]
    ims[0].save(buf, format="TIFF", save_all=len(ims) > 1, append_images=ims[1:], **kw)
    return buf.getvalue()


def opencv_pages(raw: bytes) -> list[np.ndarray] | None:
    """OpenCV's pages of a file read from memory (libtiff unmapped, as on a direct-I/O file)."""
    ok, pages = cv2.imdecodemulti(np.frombuffer(raw, "u1"), cv2.IMREAD_UNCHANGED)
    return list(pages) if ok else None


@pytest.mark.parametrize("shape", [(40, 50), (64, 64), (16, 16), (100, 33), (300, 200)])
@pytest.mark.parametrize("compression", [None, "group4"])
def test_opencv_reads_the_1bit_picture_pillow_wrote(fs, shape, compression):
    want = RNG.integers(0, 2, shape).astype(bool)
    kw = {"compression": compression} if compression else {}
    fs.write_file("tiff/exp/bits.tif", pillow_tiff([want], **kw))
    served = fs.read_file("tiff/exp/bits.tif")
    with tifffile.TiffFile(io.BytesIO(served)) as t:
        page = t.pages[0]
        assert page.bitspersample == 1
        np.testing.assert_array_equal(page.asarray(), want)
    got = cv2.imdecode(np.frombuffer(served, "u1"), cv2.IMREAD_UNCHANGED)
    assert got is not None, "OpenCV could not read the served 1-bit page"
    np.testing.assert_array_equal(got > 0, want)
    with Image.open(io.BytesIO(served)) as im:
        assert im.mode == "1"
        np.testing.assert_array_equal(np.asarray(im), want)
    with h5py.File(io.BytesIO(fs.read_file("hdf5/exp.h5")), "r") as f:
        np.testing.assert_array_equal(f["bits"][()], want)


def test_opencv_reads_every_page_of_a_1bit_stack(fs):
    frames = [RNG.integers(0, 2, (37, 45)).astype(bool) for _ in range(3)]
    fs.write_file("tiff/exp/scan.tif", pillow_tiff(frames, compression="packbits"))
    served = fs.read_file("tiff/exp/scan.tif")
    pages = opencv_pages(served)
    assert pages is not None and len(pages) == 3
    for got, want in zip(pages, frames):
        np.testing.assert_array_equal(got > 0, want)
    np.testing.assert_array_equal(tifffile.imread(io.BytesIO(served)), np.stack(frames))


def test_opencv_four_channel_image_keeps_its_unspecified_extra_sample(fs):
    """OpenCV writes BGRA with no ExtraSamples tag: libtiff takes the band
    past the colour as unspecified. It was served as unassociated alpha, and OpenCV reading that
    file back gave other pixel values than from its own file on disk."""
    want = RNG.integers(0, 256, (40, 50, 4), dtype=np.uint8)
    ok, raw = cv2.imencode(".tif", want)
    assert ok
    with tifffile.TiffFile(io.BytesIO(raw.tobytes())) as t:
        assert not t.pages[0].extrasamples  # what OpenCV writes: no tag
    local = cv2.imdecode(raw, cv2.IMREAD_UNCHANGED)
    fs.write_file("tiff/exp/bgra.tif", raw.tobytes())
    served = fs.read_file("tiff/exp/bgra.tif")
    with tifffile.TiffFile(io.BytesIO(served)) as t:
        assert [e.name for e in t.pages[0].extrasamples] == ["UNSPECIFIED"]
    np.testing.assert_array_equal(cv2.imdecode(np.frombuffer(served, "u1"), cv2.IMREAD_UNCHANGED), local)
