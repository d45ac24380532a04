"""The TIFF view with GDAL, libtiff and tifffile as writers on a mount, exploratory round 11: what
it found and what now holds.

- a multi-page TIFF grown a page at a time onto a file written into ``tiff/`` (``gdal_translate
  -co APPEND_SUBDATASET=YES``, ``tiffcp -a``, ``tifffile.imwrite(f, frame, append="force")`` per
  frame) kept only the first page: the dataset the first file made had one page and no rank to
  grow, every append was refused with EINVAL, which GDAL, libtiff and ``tifffile.imwrite(path)``
  do not report. The one-page image becomes a stack of pages;
- GDAL's creation options (tiles, DEFLATE/LZW/ZSTD with predictors, BigTIFF, band interleave,
  COG) give back what the same command gives on a local disk (``gdalinfo -checksum``).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

tifffile = pytest.importorskip("tifffile")

needs_gdal = pytest.mark.skipif(shutil.which("gdal_translate") is None or shutil.which("gdalinfo") is None,
                                reason="needs GDAL")
needs_tiffcp = pytest.mark.skipif(shutil.which("tiffcp") is None, reason="needs libtiff-tools")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def run(*cmd: str) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=120, check=True).stdout


def georaster(tmp_path: Path, dtype: str = "int16", bands: int = 1) -> Path:
    """A UTM raster with nodata 0, as GDAL writes it (strips)."""
    y, x = np.mgrid[0:120, 0:200]
    base = (x * 7 + y * 3) % 1000
    plain = tmp_path / f"plain_{dtype}_{bands}.tif"
    if bands == 1:
        tifffile.imwrite(plain, base.astype(dtype))
    else:
        tifffile.imwrite(plain, np.stack([(base + 40 * b) % 256 for b in range(bands)], -1).astype(dtype),
                         photometric="rgb")
    out = tmp_path / f"src_{dtype}_{bands}.tif"
    run("gdal_translate", "-q", "-a_srs", "EPSG:32633", "-a_ullr", "500000", "4000000", "506000", "3996400",
        "-a_nodata", "0", str(plain), str(out))
    return out


def checksums(path: Path) -> list[str]:
    out = run("gdalinfo", "-checksum", "--config", "GDAL_PAM_ENABLED", "NO", str(path))
    return [ln.strip() for ln in out.splitlines()
            if ln.strip().startswith(("Checksum=", "NoData", "Origin", "Pixel Size", "Size is"))]


def pages(path: Path) -> np.ndarray:
    with tifffile.TiffFile(path) as t:
        return np.stack([p.asarray() for p in t.pages if not p.subfiletype & 1])


@needs_gdal
def test_gdal_append_subdataset_makes_a_stack_of_pages(mount_store, store, tmp_path):
    src = georaster(tmp_path)
    m = mount_store(str(store))
    view, local = m.path / "tiff" / "exp" / "multi.tif", tmp_path / "multi.tif"
    for out in (view, local):
        run("gdal_translate", "-q", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", str(src), str(out))
        for _ in range(2):
            run("gdal_translate", "-q", "-co", "APPEND_SUBDATASET=YES", "-co", "TILED=YES", str(src), str(out))
    np.testing.assert_array_equal(tifffile.imread(view), pages(local))
    info = run("gdalinfo", str(view))
    assert "SUBDATASET_3_NAME=GTIFF_DIR:3:" in info and "EPSG\",32633" in info
    assert checksums(view) == checksums(local)
    deep_check(store)


@needs_tiffcp
def test_frames_appended_one_at_a_time_through_the_mount(mount_store, store, tmp_path):
    frames = np.random.default_rng(5).integers(0, 4000, (4, 48, 80)).astype("u2")
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "lapse.tif"
    with open(view, "wb") as f:  # a handle of one's own: close() reports a refusal
        tifffile.imwrite(f, frames[0], tile=(16, 16), compression="zlib")
    for frame in frames[1:3]:
        with open(view, "r+b") as f:
            tifffile.imwrite(f, frame, append="force", compression="zstd")
    one = tmp_path / "one.tif"
    tifffile.imwrite(one, frames[3])
    run("tiffcp", "-a", str(one), str(view))  # libtiff: exits 0 whatever close() says
    np.testing.assert_array_equal(tifffile.imread(view), frames)
    np.testing.assert_array_equal(tifffile.imread(m.path / "tiff" / "exp" / "lapse.tif", key=2), frames[2])
    deep_check(store)


GDAL_WRITES = {
    "zstd_float_predictor3": ("float32", 1, ["-co", "TILED=YES", "-co", "COMPRESS=ZSTD", "-co", "PREDICTOR=3"]),
    "bigtiff_lzw_predictor2": ("int16", 1, ["-co", "TILED=YES", "-co", "COMPRESS=LZW", "-co", "PREDICTOR=2",
                                            "-co", "BIGTIFF=YES", "-co", "BLOCKXSIZE=64", "-co", "BLOCKYSIZE=32"]),
    "rgb_band_interleaved": ("uint8", 3, ["-co", "TILED=YES", "-co", "INTERLEAVE=BAND", "-co", "COMPRESS=DEFLATE"]),
    "cog": ("int16", 1, ["-of", "COG", "-co", "COMPRESS=DEFLATE"]),
}


@needs_gdal
@pytest.mark.parametrize("case", list(GDAL_WRITES))
def test_gdal_creation_options_read_back_as_on_a_disk(mount_store, store, tmp_path, case):
    dtype, bands, opts = GDAL_WRITES[case]
    src = georaster(tmp_path, dtype, bands)
    m = mount_store(str(store))
    view, local = m.path / "tiff" / "exp" / f"{case}.tif", tmp_path / f"{case}.tif"
    for out in (view, local):
        run("gdal_translate", "-q", *opts, str(src), str(out))
    assert checksums(view) == checksums(local)
    np.testing.assert_array_equal(tifffile.imread(view), tifffile.imread(local, key=0))
