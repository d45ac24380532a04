"""The TIFF view read by GDAL, libtiff and the Python image libraries on a mount, exploratory
round 12: what it found and what now holds.

- a 1-bit TIFF (bilevel scan, fax page, mask) imported with ``polyfs import`` was served as
  8-bit 0 and 1: GDAL lost the black-and-white palette (ColorInterp Gray, no NBITS), Pillow
  opened mode ``L`` and OpenCV read 0/1 (a black page), tifffile read uint8 where the original
  reads bool. It is served 1-bit, as the original (``gdalinfo -checksum`` alike);
- an RGB image stored by the HDF5 Image Specification (``CLASS`` ``IMAGE``,
  ``IMAGE_TRUECOLOR``) was H pages of W x 3 grey pixels in ``tiff/``: GDAL showed a 3-pixel
  wide band per row, not the picture. It is a 3-band RGB image now, alike in GDAL and libtiff
  (``tiff2rgba``) to a tifffile RGB file of the same pixels.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import deep_check

h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")

needs_gdal = pytest.mark.skipif(shutil.which("gdalinfo") is None, reason="needs GDAL")
needs_libtiff = pytest.mark.skipif(shutil.which("tiffcp") is None or shutil.which("tiff2rgba") is None,
                                   reason="needs libtiff-tools")

RNG = np.random.default_rng(1212)
BITS = RNG.integers(0, 2, (70, 100)).astype(bool)
RGB = RNG.integers(0, 255, (48, 64, 3)).astype("u1")


def run(*cmd: str) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=120, check=True).stdout


def polyfs_import(src: Path, store: Path, domain: str) -> None:
    subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(store), "--domain", domain],
                   capture_output=True, text=True, timeout=120, check=True)


def gdal_bands(path: Path) -> list[str]:
    """What GDAL says of the pixels: size, type, colour interpretation, NBITS, checksums."""
    out = run("gdalinfo", "-checksum", "--config", "GDAL_PAM_ENABLED", "NO", str(path))
    keep = []
    for ln in (x.strip() for x in out.splitlines()):
        if ln.startswith("Band "):
            keep.append(" ".join(w for w in ln.split() if not w.startswith("Block=")))
        elif ln.startswith(("Checksum=", "Size is", "NBITS=", "Color Table")):
            keep.append(ln)
    return keep


def rgba_of(path: Path, tmp: Path) -> np.ndarray:
    """The raster libtiff's RGBA interface (``tiff2rgba``) makes of a TIFF."""
    out = tmp / f"rgba_{path.parent.name}_{path.stem}.tif"
    run("tiff2rgba", str(path), str(out))
    return tifffile.imread(out)


@pytest.fixture
def scan_store(tmp_path):
    src = tmp_path / "scan.tif"
    tifffile.imwrite(src, BITS, tile=(32, 32), compression="zlib", photometric="miniswhite")
    store = tmp_path / "store"
    polyfs_import(src, store, "/scan.h5")
    return src, store


@needs_gdal
@needs_libtiff
def test_1bit_scan_imported_reads_as_the_original(mount_store, scan_store, tmp_path):
    src, store = scan_store
    m = mount_store(str(store))
    view = m.path / "tiff" / "scan" / "image.tif"
    assert tifffile.TiffFile(view).pages[0].bitspersample == 1
    got = tifffile.imread(view)
    assert got.dtype == bool
    np.testing.assert_array_equal(got, BITS)
    assert gdal_bands(view) == gdal_bands(src)
    copied = tmp_path / "copied.tif"
    run("tiffcp", str(view), str(copied))
    np.testing.assert_array_equal(tifffile.imread(copied), BITS)
    np.testing.assert_array_equal(rgba_of(view, tmp_path), rgba_of(src, tmp_path))
    try:
        from PIL import Image
    except ImportError:
        pass
    else:
        with Image.open(view) as a, Image.open(src) as b:
            assert a.mode == b.mode == "1"
            np.testing.assert_array_equal(np.array(a), np.array(b))
    deep_check(store)


def h5_image(path: Path) -> None:
    """An RGB image as ``H5IMmake_image_24bit`` writes it (fixed-length string attributes)."""
    with h5py.File(path, "w") as f:
        d = f.create_dataset("photo", data=RGB, chunks=(16, 16, 3), compression="gzip")
        for name, text in (("CLASS", "IMAGE"), ("IMAGE_VERSION", "1.2"), ("IMAGE_SUBCLASS", "IMAGE_TRUECOLOR"),
                           ("INTERLACE_MODE", "INTERLACE_PIXEL")):
            tid = h5py.h5t.C_S1.copy()
            tid.set_size(len(text) + 1)
            tid.set_strpad(h5py.h5t.STR_NULLTERM)
            a = h5py.h5a.create(d.id, name.encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
            a.write(np.array(text.encode(), dtype=f"S{len(text) + 1}"))


@needs_gdal
@needs_libtiff
def test_hdf5_image_spec_rgb_reads_as_rgb(mount_store, tmp_path):
    src = tmp_path / "pics.h5"
    h5_image(src)
    store = tmp_path / "store"
    polyfs_import(src, store, "/pics.h5")
    local = tmp_path / "local.tif"
    tifffile.imwrite(local, RGB, photometric="rgb", tile=(16, 16))
    m = mount_store(str(store))
    view = m.path / "tiff" / "pics" / "photo.tif"
    bands = gdal_bands(view)
    assert bands == gdal_bands(local)
    assert any("ColorInterp=Red" in b for b in bands)
    np.testing.assert_array_equal(rgba_of(view, tmp_path), rgba_of(local, tmp_path))
    np.testing.assert_array_equal(tifffile.imread(view), RGB)
    with h5py.File(m.path / "hdf5" / "pics.h5", "r") as f:  # the attributes are still there
        assert f["photo"].attrs["IMAGE_SUBCLASS"] == b"IMAGE_TRUECOLOR"
