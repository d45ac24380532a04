"""Tier 2: the TIFF view with tifffile and GDAL as writers, exploratory round 11 (operations
awaited directly).

- a time lapse written frame by frame into ``tiff/`` (``tifffile.imwrite(f, frame,
  append="force")`` with ``f`` the view's file opened ``r+b``, once per frame; ``tiffcp -a``):
  the first frame made a ``(height, width)`` dataset and every later frame was refused with
  EINVAL ("dataset has 2 dimensions"), which ``tifffile.imwrite(path, ...)`` does not report: the
  user kept one frame of many. Pages appended to a one-page dataset's file now make it a
  ``(pages, height, width)`` stack (a new dataset under the same name, keeping the old one's
  attributes);
- as many pages appended to a stack as it has, in another layout than the view's tiles
  (``TiffWriter.write(two_pages)`` onto a two-page stack) were taken for a 4-D image and refused;
- RGB frames appended to an RGB stack (its file has tifffile's shaped description, each appended
  frame one of its own) were refused as "images of different shapes";
- GDAL's CInt16 samples were also said to be "32-bit samples served as 64-bit (GDAL's NBITS is
  not kept)": GDAL set no NBITS; the complex-integer line says what happened.
"""
from __future__ import annotations

import errno
import io
import logging
import os

import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)
from writeharness import FS

tifffile = pytest.importorskip("tifffile")

RNG = np.random.default_rng(11)
FRAMES = RNG.integers(0, 4000, (5, 64, 96)).astype("u2")
RGB = RNG.integers(0, 255, (4, 40, 50, 3)).astype("u1")


def tiff(data: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, **kw)
    return buf.getvalue()


def append_to_view_file(fs: FS, path: str, data: np.ndarray, **kw) -> None:
    """What ``with open(path, "r+b") as f: tifffile.imwrite(f, data, append="force")`` does to
    the view's file: the bytes tifffile changes (the last IFD's next-IFD pointer) and the new
    page(s) after the end are written over it; the error of ``close()`` is raised."""
    old = fs.read_file(path)
    buf = io.BytesIO(old)
    with tifffile.TiffWriter(buf, append="force") as w:
        w.write(data, **kw)
    new = buf.getvalue()
    changed = [i for i in range(len(old)) if new[i] != old[i]]
    h = fs.open_file(path, os.O_RDWR)
    try:
        if changed:
            h.write(new[changed[0]:changed[-1] + 1], changed[0])
        h.write(new[len(old):], len(old))
        h.flush()
    finally:
        h.release()


def dataset_ids(fs: FS) -> set[str]:
    """The ids of the datasets the store holds objects of (JSON, chunks, CRC tables)."""
    out = set()
    for key in fs.snapshot():
        parts = key.split("/")
        if parts[0] == "db" and len(parts) > 3 and parts[2] == "d":
            out.add(parts[3])
        elif parts[:2] == ["polyfs", "crc32"]:
            out.add(parts[-1].split(".")[0])
    return out


def view_image(fs: FS, path: str) -> tuple[np.ndarray, str]:
    with tifffile.TiffFile(io.BytesIO(fs.read_file(path))) as t:
        return t.asarray(), t.series[0].axes


@pytest.mark.parametrize("kw", [{}, {"tile": (32, 32), "compression": "zlib"}, {"compression": "zstd"}],
                         ids=["strips", "zlib_tiles", "zstd"])
def test_frames_appended_one_by_one_make_a_stack(fs, kw):
    fs.write_file("tiff/exp/lapse.tif", tiff(FRAMES[0], description="day one", **kw))
    first = dataset_ids(fs)
    for i in range(1, len(FRAMES)):
        append_to_view_file(fs, "tiff/exp/lapse.tif", FRAMES[i], **kw)
        got, _ = view_image(fs, "tiff/exp/lapse.tif")
        np.testing.assert_array_equal(got, FRAMES[:i + 1])
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/exp/lapse.tif"))) as t:
        assert "day one" in t.ome_metadata  # the one-page dataset's description is the stack's
    assert fs.ls("tiff/exp").count("lapse.tif") == 1
    assert fs.read_json("n5/exp.n5/lapse/attributes.json")["dimensions"] == [96, 64, 5]  # in every view
    assert len(dataset_ids(fs)) == len(first)  # the one-page dataset's objects are gone


def test_rgb_frames_appended_to_a_photo_and_to_a_stack(fs):
    fs.write_file("tiff/exp/photo.tif", tiff(RGB[0], photometric="rgb"))
    append_to_view_file(fs, "tiff/exp/photo.tif", RGB[1], photometric="rgb")
    got, axes = view_image(fs, "tiff/exp/photo.tif")
    np.testing.assert_array_equal(got, RGB[:2])
    assert axes.endswith("YXS")
    for i in (2, 3):  # onto the stack: each frame its own shaped series
        append_to_view_file(fs, "tiff/exp/photo.tif", RGB[i], photometric="rgb", tile=(16, 16), compression="zlib")
    np.testing.assert_array_equal(view_image(fs, "tiff/exp/photo.tif")[0], RGB)


def test_as_many_pages_appended_as_the_stack_has_grow_it(fs):
    fs.write_file("tiff/exp/vol.tif", tiff(FRAMES[:2], photometric="minisblack"))
    append_to_view_file(fs, "tiff/exp/vol.tif", FRAMES[2:4], photometric="minisblack")
    np.testing.assert_array_equal(view_image(fs, "tiff/exp/vol.tif")[0], FRAMES[:4])


def test_appended_page_of_another_shape_leaves_the_one_page_dataset(fs):
    fs.write_file("tiff/exp/one.tif", tiff(FRAMES[0]))
    before = fs.state()
    with pytest.raises(OSError) as exc:
        append_to_view_file(fs, "tiff/exp/one.tif", FRAMES[0, :32])
    assert exc.value.errno == errno.EOPNOTSUPP
    assert fs.state() == before
    np.testing.assert_array_equal(view_image(fs, "tiff/exp/one.tif")[0], FRAMES[0])


def test_complex_integers_are_not_said_to_have_gdal_nbits(fs, caplog):
    data = (np.arange(16 * 24).reshape(16, 24) % 300 - 150).astype("i2")
    raw = bytearray(tiff(np.stack([data, -data], axis=-1).view("<i4")[..., 0]))
    with tifffile.TiffFile(io.BytesIO(bytes(raw))) as t:
        at = t.pages[0].tags["SampleFormat"].valueoffset
    raw[at:at + 2] = b"\x05\x00"  # SampleFormat 5: GDAL's CInt16
    with caplog.at_level(logging.WARNING):
        fs.write_file("tiff/exp/slc.tif", bytes(raw))
    said = [r.getMessage() for r in caplog.records if "tiff/exp/slc.tif" in r.getMessage()]
    assert any("complex integer" in m for m in said), said
    assert not any("NBITS" in m for m in said), said
