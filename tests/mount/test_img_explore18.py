"""The TIFF view written and read by the Python image libraries on a real mount, exploratory
round 18.

- OpenCV could not read a black-and-white picture Pillow had just saved into ``tiff/``
  (``cv2.imread`` gave ``None``: "Invalid tile byte count for tile 0. Expected 384, got 1024"):
  files of a domain written through the mount are direct I/O, libtiff cannot map them, and its
  unmapped path refuses an uncompressed tile that is not a whole number of KiB. The served
  packed 1-bit tiles are whole KiB now; after a remount (mapped) it read either way.
"""
from __future__ import annotations

import numpy as np
import pytest
from support import deep_check, seeded_store

h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")
Image = pytest.importorskip("PIL.Image")
cv2 = pytest.importorskip("cv2")

RNG = np.random.default_rng(18018)


def test_opencv_reads_the_1bit_picture_pillow_just_wrote(mount_store, tmp_path):
    store = seeded_store(tmp_path)
    m = mount_store(str(store))
    d = m.path / "tiff" / "exp"
    want = RNG.integers(0, 2, (40, 50)).astype(bool)
    Image.fromarray(want).save(d / "bits.tif")
    Image.fromarray(want).save(tmp_path / "bits.tif")
    local = cv2.imread(str(tmp_path / "bits.tif"), cv2.IMREAD_UNCHANGED)
    got = cv2.imread(str(d / "bits.tif"), cv2.IMREAD_UNCHANGED)
    assert got is not None, "OpenCV could not read the 1-bit page it reads on local disk"
    np.testing.assert_array_equal(got, local)
    ok, pages = cv2.imreadmulti(str(d / "bits.tif"), flags=cv2.IMREAD_UNCHANGED)
    assert ok and len(pages) == 1 and np.array_equal(pages[0], local)
    with Image.open(d / "bits.tif") as im:
        np.testing.assert_array_equal(np.asarray(im), want)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f["bits"][()], want)
    m.stop()
    deep_check(store)
