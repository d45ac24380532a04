"""The TIFF view used with real tools and real files on a mount, exploratory round 8: what it found
and what now holds.

- a sparse GeoTIFF whose nodata is ``-3.4028234663852886e+38`` (``-FLT_MAX``, the nodata of ESRI
  float rasters and of DEMs made from them) read its blocks of nodata as 0 through the mount:
  tifffile refuses that text for float32 samples, so GDAL's unwritten (``SPARSE_OK``) blocks were
  stored as zeros: ``gdalinfo -stats`` said mean 42.6 where the source says 511.5;
- ``rm -r tiff/exp/run1`` of a directory of TIFFs written before a remount removed the files,
  then failed (``rm`` exit 1, ENOENT) and left the empty group in the store: the view showed a
  directory only for a group that holds images;
- ``tiffcp`` out of the mount of an RGB image stored in separate planes (tifffile's default for
  ``(3, H, W)``) failed, "image raster scan line size is too large": the view served one tile
  wider than the image, which libtiff's tiffcp refuses for separate planes;
- ``tiff2rgba`` (libtiff's RGBA reader, as OpenCV uses it) of a 300x200 RGB image written through
  the mount failed, "Invalid tile byte count for tile 0. Expected 379392, got 379904": libtiff
  cannot map such files (``mmap`` is refused there), reads tiles into a buffer rounded up to 1 KiB
  and refuses uncompressed tiles of another size. Uncompressed tiles are now whole KiB.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")

needs_gdal = pytest.mark.skipif(shutil.which("gdal_translate") is None or shutil.which("gdalinfo") is None,
                                reason="needs GDAL")
needs_tiffcp = pytest.mark.skipif(shutil.which("tiffcp") is None, reason="needs libtiff tools")
needs_tiff2rgba = pytest.mark.skipif(shutil.which("tiff2rgba") is None, reason="needs libtiff tools")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def gdal_stats(path: Path) -> list[str]:
    """What ``gdalinfo -stats -checksum`` says of the pixels (approximate statistics off)."""
    out = subprocess.run(["gdalinfo", "-stats", "-checksum", "--config", "GDAL_PAM_ENABLED", "NO", str(path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [ln.strip() for ln in out.splitlines() if "Checksum=" in ln or "Minimum=" in ln or "NoData" in ln]


# -- 1. ESRI's float nodata ---------------------------------------------------------------------------
@needs_gdal
def test_sparse_dem_with_esri_nodata_keeps_its_nodata_blocks(mount_store, store, tmp_path):
    nodata = "-3.4028234663852886e+38"
    data = np.full((96, 128), -np.finfo(np.float32).max, np.float32)
    data[32:64, 32:64] = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, data)
    src = tmp_path / "dem.tif"
    subprocess.run(["gdal_translate", "-q", "-a_nodata", nodata, "-co", "TILED=YES", "-co", "BLOCKXSIZE=32",
                    "-co", "BLOCKYSIZE=32", "-co", "SPARSE_OK=TRUE", str(plain), str(src)], check=True, timeout=60)
    with tifffile.TiffFile(src) as t:  # GDAL left the blocks of nodata unwritten
        assert (np.asarray(t.pages[0].databytecounts) == 0).sum() == 11
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "dem.tif"
    shutil.copyfile(src, view)
    assert gdal_stats(view) == gdal_stats(src)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "exp.zarr" / "dem"), mode="r")[...], data)
    deep_check(store)


# -- 2. rm -r of a directory of TIFFs -------------------------------------------------------------
def test_rm_r_of_a_directory_of_tiffs_written_before_a_remount(mount_store, store):
    m = mount_store(str(store))
    run = m.path / "tiff" / "exp" / "run1"
    run.mkdir()
    for i in range(3):
        tifffile.imwrite(run / f"frame{i}.tif", np.full((32, 32), i, np.uint8))
    m.stop()
    m = mount_store(str(store))
    run = m.path / "tiff" / "exp" / "run1"
    assert sorted(p.name for p in run.iterdir()) == ["frame0.tif", "frame1.tif", "frame2.tif"]
    res = subprocess.run(["rm", "-r", str(run)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert not (m.path / "zarr" / "exp.zarr" / "run1").exists()
    deep_check(store)


# -- 3. tiffcp out of the mount ----------------------------------------------------------------------
@needs_tiffcp
def test_tiffcp_copies_an_rgb_image_stored_in_planes(mount_store, store, tmp_path):
    data = np.random.default_rng(8).integers(0, 255, (3, 300, 200)).astype(np.uint8)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "planes.tif"
    tifffile.imwrite(view, data, photometric="rgb", planarconfig="separate")
    out = tmp_path / "copy.tif"
    res = subprocess.run(["tiffcp", str(view), str(out)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(tifffile.imread(out), data)


# -- 4. libtiff's RGBA reader -----------------------------------------------------------------------
@needs_tiff2rgba
@pytest.mark.parametrize("dtype", ["u1", "u2"])
def test_tiff2rgba_reads_an_rgb_image_written_through_the_mount(mount_store, store, tmp_path, dtype):
    data = np.random.default_rng(9).integers(0, 200, (300, 200, 3)).astype(dtype)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "photo.tif"
    tifffile.imwrite(view, data, photometric="rgb")
    out = tmp_path / "rgba.tif"
    res = subprocess.run(["tiff2rgba", str(view), str(out)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    rgba = tifffile.imread(out)
    assert rgba.shape == (300, 200, 4) and (rgba[..., 3] == 255).all()
    if dtype == "u1":  # 16-bit samples are scaled to 8 by libtiff
        np.testing.assert_array_equal(rgba[..., :3], data)
