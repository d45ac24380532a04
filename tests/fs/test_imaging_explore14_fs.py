"""Tier 2: the TIFF view with the common Python image libraries as writers and readers,
exploratory round 14 (operations awaited directly, no kernel; see writeharness.py).

- a picture Pillow, OpenCV, imageio or scikit-image writes is stripped and little-endian; as
  its strips are decoded and stored again, they were stored big-endian (the importers'
  default order for decoded data). Planes of 16-multiples are then served as the stored
  deflate chunks, ``MM``, and Pillow misread the float32, int32 and int16 images it had just
  written (its libtiff path unpacks those types byte-swapped: ``F;32BF``, ``I;32BS``,
  ``I;16BS``), and could not open big-endian uint32 at all. Decoded pixels keep the file's
  byte order now, so the view serves them ``II``, as written (``polyfs import`` the same).
"""
from __future__ import annotations

import io
import subprocess
import sys

import h5py
import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)
from writeharness import FS

tifffile = pytest.importorskip("tifffile")
Image = pytest.importorskip("PIL.Image")

RNG = np.random.default_rng(1414)
SHAPE = (256, 320)  # planes of 16-multiples: the stored chunks are the served tiles
IMAGES = {
    "F": RNG.random(SHAPE).astype("f4"),
    "I": RNG.integers(-500_000, 500_000, SHAPE).astype("i4"),
    "I;16": RNG.integers(0, 65535, SHAPE).astype("u2"),
}


def pillow_tiff(arr: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="TIFF", **kw)
    return buf.getvalue()


def pillow_reads(raw: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(raw)) as im:
        return np.asarray(im)


def same_values(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and bool(np.array_equal(got.astype(want.dtype), want))


@pytest.mark.parametrize("compression", [None, "tiff_adobe_deflate", "tiff_lzw"])
@pytest.mark.parametrize("mode", sorted(IMAGES))
def test_pillow_reads_back_the_image_it_wrote(fs, mode, compression):
    want = IMAGES[mode]
    fs.write_file("tiff/exp/pic.tif", pillow_tiff(want, compression=compression))
    served = fs.read_file("tiff/exp/pic.tif")
    assert same_values(pillow_reads(served), want)
    assert same_values(tifffile.imread(io.BytesIO(served)), want)
    with h5py.File(io.BytesIO(fs.read_file("hdf5/exp.h5")), "r") as f:
        assert f["pic"].dtype.byteorder in "<|="  # stored as written: little-endian
        np.testing.assert_array_equal(f["pic"][()], want)


def test_opencv_int16_image_reads_in_pillow(fs):
    """OpenCV writes signed 16-bit (LZW strips): the view's file reads the same in Pillow."""
    cv2 = pytest.importorskip("cv2")
    want = RNG.integers(-3000, 3000, SHAPE).astype("i2")
    ok, enc = cv2.imencode(".tif", want)
    assert ok
    fs.write_file("tiff/exp/cv.tif", enc.tobytes())
    served = fs.read_file("tiff/exp/cv.tif")
    assert same_values(pillow_reads(served), want)
    got = cv2.imdecode(np.frombuffer(served, "u1"), cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(got, want)


def test_rewrite_of_a_big_endian_dataset_keeps_its_byte_order(fs):
    """A dataset stored big-endian (an HDF5 import's default) rewritten by Pillow stays so."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_dataset("be", data=IMAGES["F"].astype(">f4"), chunks=(64, 64))
    fs.write_file("hdf5/be.h5", buf.getvalue())
    new = (IMAGES["F"] * 2).astype("f4")
    fs.write_file("tiff/be/be.tif", pillow_tiff(new))
    with h5py.File(io.BytesIO(fs.read_file("hdf5/be.h5")), "r") as f:
        assert f["be"].dtype == np.dtype(">f4")
        np.testing.assert_array_equal(f["be"][()], new)
    assert same_values(tifffile.imread(io.BytesIO(fs.read_file("tiff/be/be.tif"))), new)


@pytest.mark.parametrize("order", ["<", ">"])
def test_import_of_a_stripped_picture_keeps_its_byte_order(tmp_path, order):
    """``polyfs import`` of a float32 picture in small strips: the file's order, read by Pillow
    from the view as from the original (a big-endian original Pillow misreads alike)."""
    want = IMAGES["F"].astype(order + "f4")
    src = tmp_path / "pic.tif"
    tifffile.imwrite(src, want, byteorder=order, rowsperstrip=16, compression="zlib")
    store = tmp_path / "store"
    res = subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(store), "--domain", "/pic.h5"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    reader = FS(str(store), read_only=True)
    try:
        served = reader.read_file("tiff/pic/image.tif")
        with tifffile.TiffFile(io.BytesIO(served)) as t:
            assert t.byteorder == order
            np.testing.assert_array_equal(t.asarray(), want)
        if order == "<":
            assert same_values(pillow_reads(served), want)
        else:  # Pillow's own bug, on the original file too: no view can change it
            assert not same_values(pillow_reads(src.read_bytes()), want.astype("f4"))
    finally:
        reader.close()
