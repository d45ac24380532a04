"""Tier 2: GDAL's external mask sidecar ``<name>.tif.msk`` written into ``tiff/`` (operations
awaited directly), exploratory round 16.

GDAL 3.6 writes a per-dataset mask beside the image as ``x.tif.msk`` by default
(``gdal_translate -mask``, or any copy of a masked file, without ``GDAL_TIFF_INTERNAL_MASK=YES``).
polyfs kept that name as an in-memory scratch file only: after unmount the image had no mask,
silently. Now the ``.msk`` becomes the image's mask, as an internal mask page does (the sibling
dataset named by ``tiff_mask``, served as the image's mask IFD), whichever of the two files is
closed first; one beside no image is refused at create (EOPNOTSUPP), one of another size at
close (EINVAL), the store untouched.
"""
from __future__ import annotations

import errno
import io

import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)

tifffile = pytest.importorskip("tifffile")

RNG = np.random.default_rng(1616)
GREY = RNG.integers(0, 255, (100, 150)).astype("u1")
MASK = np.zeros((100, 150), "u1")
MASK[10:70, 30:120] = 7  # GDAL's mask: any non-zero value is valid (stored as 255)
WANT = np.where(MASK != 0, 255, 0).astype("u1")


def image_file(image: np.ndarray = GREY) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, image, tile=(64, 64), compression="zlib", photometric="minisblack", metadata=None)
    return buf.getvalue()


def msk_file(mask: np.ndarray = MASK) -> bytes:
    """A .msk as GDAL 3.6 writes it: one 8-bit band in strips, deflate (plus a reduced level)."""
    buf = io.BytesIO()
    with tifffile.TiffWriter(buf) as w:
        w.write(mask, rowsperstrip=54, compression="zlib", photometric="minisblack", metadata=None)
        w.write(mask[::2, ::2], compression="zlib", photometric="minisblack", subfiletype=1, metadata=None)
    return buf.getvalue()


def served_mask(fs, path: str = "tiff/exp/pic.tif") -> np.ndarray | None:
    with tifffile.TiffFile(io.BytesIO(fs.read_file(path))) as t:
        masks = [p for p in t.pages if int(p.subfiletype) == 4]
        np.testing.assert_array_equal(t.pages[0].asarray(), GREY)
        return masks[0].asarray() if masks else None


def gdal_pair(fs) -> None:  # noqa: F811
    """GDAL's own order: x.tif made, x.tif.msk made while x.tif is open, x.tif closed, then the .msk."""
    img = fs.open_file("tiff/exp/pic.tif")
    img.write(image_file())
    msk = fs.open_file("tiff/exp/pic.tif.msk")
    msk.write(msk_file())
    img.flush()
    img.release()
    msk.flush()
    msk.release()


def test_gdal_order_image_closed_first_then_msk(fs):
    gdal_pair(fs)
    np.testing.assert_array_equal(served_mask(fs), WANT)
    names = set(fs.ls("tiff/exp"))
    assert "pic.tif.msk" not in names  # GDAL sees one mask: the internal one the view serves
    assert "pic_mask.tif" in names


def test_msk_closed_before_its_image_is_stored_with_it(fs):
    img = fs.open_file("tiff/exp/pic.tif")
    img.write(image_file())
    fs.write_file("tiff/exp/pic.tif.msk", msk_file())  # kept until the image is stored
    img.flush()
    img.release()
    np.testing.assert_array_equal(served_mask(fs), WANT)
    assert "pic.tif.msk" not in fs.ls("tiff/exp")


def test_msk_written_beside_a_stored_image_and_rewritten(fs):
    fs.write_file("tiff/exp/pic.tif", image_file())
    assert served_mask(fs) is None
    fs.write_file("tiff/exp/pic.tif.msk", msk_file())
    np.testing.assert_array_equal(served_mask(fs), WANT)
    other = np.full_like(MASK, 1)
    other[:50] = 0
    fs.write_file("tiff/exp/pic.tif.msk", msk_file(other))  # the same mask dataset, updated
    np.testing.assert_array_equal(served_mask(fs), np.where(other != 0, 255, 0))
    assert sorted(n for n in fs.ls("tiff/exp") if n.startswith("pic")) == ["pic.tif", "pic_mask.tif"]


@pytest.mark.parametrize("name", ["nothing.tif.msk", "gone.TIFF.MSK"])
def test_msk_beside_no_image_is_refused_at_create(fs, name):
    before = fs.snapshot()
    with pytest.raises(OSError) as exc:
        fs.write_file(f"tiff/exp/{name}", msk_file())
    assert exc.value.errno == errno.EOPNOTSUPP
    assert fs.snapshot() == before
    assert name not in fs.ls("tiff/exp")


@pytest.mark.parametrize("bad", [np.ones((50, 150), "u1"), np.ones((100, 149), "u1"),
                                 np.ones((100, 150, 3), "u1")], ids=["rows", "cols", "bands"])
def test_msk_of_another_shape_is_refused_store_untouched(fs, bad):
    fs.write_file("tiff/exp/pic.tif", image_file())
    before = fs.snapshot()
    with pytest.raises(OSError) as exc:
        fs.write_file("tiff/exp/pic.tif.msk", msk_file(bad))
    assert exc.value.errno == (errno.EOPNOTSUPP if bad.ndim == 3 else errno.EINVAL)
    assert fs.snapshot() == before
    assert served_mask(fs) is None


def test_msk_of_another_size_closed_before_its_image_is_logged_not_stored(fs, caplog):
    """The .msk's writer has closed it when its image is stored: refused then, it is said in the log."""
    img = fs.open_file("tiff/exp/pic.tif")
    img.write(image_file())
    fs.write_file("tiff/exp/pic.tif.msk", msk_file(np.ones((50, 150), "u1")))
    img.flush()
    img.release()
    assert served_mask(fs) is None
    lines = [r.getMessage() for r in caplog.records if "pic.tif.msk" in r.getMessage()]
    assert len(lines) == 1 and "150x50" in lines[0], lines
    assert "pic.tif.msk" not in fs.ls("tiff/exp")
