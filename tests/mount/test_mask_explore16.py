"""Tier 3: TIFF internal transparency masks through a real mount, exploratory round 16.

rasterio 1.4 (GDAL 3.10) writes ``ds.write_mask(...)`` as an internal mask page (NewSubfileType
4) by default; ``gdal_translate -mask`` with ``GDAL_TIFF_INTERNAL_MASK=YES`` too. Such a file
written into ``tiff/`` was refused at close with EOPNOTSUPP, which GDAL ignores: the user's new
file silently vanished. Now the mask is kept as the sibling dataset ``<name>_mask`` (uint8 0/255)
and the image's file is served with its mask page again, so GDAL reports ``Mask Flags:
PER_DATASET`` and rasterio's ``dataset_mask()`` gives the mask back; rewriting in place
(``r+``: a window and ``write_mask``) updates image and mask; ``polyfs import`` keeps the mask
the same way; a mask page of another size is refused (EINVAL), the store untouched.
"""
from __future__ import annotations

import errno
import shutil
import subprocess
import sys

import numpy as np
import pytest

from support import deep_check, seeded_store
from test_tiff_explore5 import snapshot

tifffile = pytest.importorskip("tifffile")
zarr = pytest.importorskip("zarr")

needs_gdal = pytest.mark.skipif(shutil.which("gdalinfo") is None, reason="needs GDAL")
RNG = np.random.default_rng(16)
DATA = RNG.integers(1, 200, (1, 100, 150)).astype("u1")
MASK = np.zeros((100, 150), "u1")
MASK[10:60, 20:90] = 255


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def write_with_mask(rio, path) -> None:
    """A new GeoTIFF written by rasterio with ``write_mask`` (an internal mask by default)."""
    with rio.open(path, "w", driver="GTiff", width=150, height=100, count=1, dtype="uint8", tiled=True,
                  blockxsize=64, blockysize=64, compress="deflate") as d:
        d.write(DATA)
        d.write_mask(MASK)


def test_rasterio_write_mask_keeps_the_file_and_its_mask(mount_store, store, rasterio):
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "rw.tif"
    write_with_mask(rasterio, view)
    assert view.exists()
    with rasterio.open(view) as d:
        assert d.mask_flag_enums == ([rasterio.enums.MaskFlags.per_dataset],)
        np.testing.assert_array_equal(d.read(), DATA)
        np.testing.assert_array_equal(d.dataset_mask(), MASK)
        np.testing.assert_array_equal(d.read_masks(1), MASK)
    mask = zarr.open_array(str(m.path / "zarr" / "exp.zarr" / "rw_mask"), mode="r")
    assert mask.dtype == np.uint8
    np.testing.assert_array_equal(mask[...], MASK)
    np.testing.assert_array_equal(tifffile.imread(view), DATA[0])
    # rewritten in place: a window of pixels and a new mask
    other = np.zeros_like(MASK)
    other[50:, :] = 255
    with rasterio.open(view, "r+") as d:
        d.write(np.full((1, 32, 32), 7, "u1"), window=rasterio.windows.Window(0, 0, 32, 32))
        d.write_mask(other)
    want = DATA.copy()
    want[:, :32, :32] = 7
    with rasterio.open(view) as d:
        np.testing.assert_array_equal(d.read(), want)
        np.testing.assert_array_equal(d.dataset_mask(), other)
    np.testing.assert_array_equal(mask[...], other)
    deep_check(store)


@needs_gdal
def test_gdal_and_libtiff_read_the_served_mask(mount_store, store, tmp_path, rasterio):
    src = tmp_path / "src.tif"
    write_with_mask(rasterio, src)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "g.tif"
    shutil.copyfile(src, view)
    info = subprocess.run(["gdalinfo", str(view)], capture_output=True, text=True, timeout=60)
    assert "Mask Flags: PER_DATASET" in info.stdout, info.stdout + info.stderr
    tinfo = subprocess.run(["tiffinfo", str(view)], capture_output=True, text=True, timeout=60)
    assert tinfo.returncode == 0 and "transparency mask" in tinfo.stdout, tinfo.stderr
    out = tmp_path / "copy.tif"  # gdal_translate copies image and mask out of the view
    subprocess.run(["gdal_translate", "-q", str(view), str(out)], check=True, timeout=60)
    with rasterio.open(out) as d:
        np.testing.assert_array_equal(d.dataset_mask(), MASK)


def test_import_keeps_the_mask(mount_store, tmp_path, rasterio):
    src = tmp_path / "src.tif"
    write_with_mask(rasterio, src)
    store = tmp_path / "store"
    res = subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(store), "--domain", "/m.h5"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    m = mount_store(str(store))
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "m.zarr" / "image_mask"), mode="r")[...],
                                  MASK)
    with rasterio.open(m.path / "tiff" / "m" / "image.tif") as d:
        np.testing.assert_array_equal(d.read(), DATA)
        np.testing.assert_array_equal(d.dataset_mask(), MASK)


def test_mask_of_another_size_is_refused(mount_store, store, tmp_path):
    bad = tmp_path / "bad.tif"
    with tifffile.TiffWriter(bad) as w:
        w.write(DATA[0], tile=(64, 64), compression="zlib", metadata=None)
        w.write(np.ones((50, 150), bool), tile=(64, 64), compression="zlib", photometric=4, subfiletype=4,
                metadata=None)
    before = snapshot(store)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "bad.tif"
    with pytest.raises(OSError) as exc:
        shutil.copyfile(bad, view)
    assert exc.value.errno == errno.EINVAL
    assert not view.exists()
    assert snapshot(store) == before
    lines = [ln for ln in m.log_text().splitlines() if "tiff/exp/bad.tif" in ln]
    assert len(lines) == 1 and "transparency mask" in lines[0] and "150x50" in lines[0], lines
