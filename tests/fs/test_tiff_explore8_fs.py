"""Tier 2: the TIFF view with files from other writers, exploratory round 8 (operations awaited
directly).

- a sparse float raster whose nodata value is ``-3.4028234663852886e+38`` (``-FLT_MAX``: what
  ArcGIS and most ESRI-derived DEMs and rasters carry, written by GDAL as that text) read its
  unwritten blocks as 0 instead of nodata, in a file written into ``tiff/`` and in ``polyfs
  import``: tifffile refuses that text for float32 samples ("not castable to float32"), so its
  ``page.nodata`` was 0 and so was the new dataset's fill value. GDAL takes it (and clamps any
  float beyond float32's range to its largest): ``gdalinfo -stats`` of the source and of the view
  disagreed (mean 511.5 against 42.6). The ``GDAL_NODATA`` text is now read as GDAL reads it.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from writeharness import FS

from polyfs.importers import import_source

tifffile = pytest.importorskip("tifffile")

FLT_MAX = float(np.finfo(np.float32).max)


@pytest.fixture
def fs():
    f = FS()
    f.mkdir("zarr/exp.zarr")  # domain /exp.h5: tiff/exp
    yield f
    f.close()


def sparse_raster(path: Path, nodata: str, dtype: str = "f4", reads_as: float | None = None) -> np.ndarray:
    """A GDAL ``SPARSE_OK`` raster: 96x128 in 32x32 tiles, only tile (1, 1) written, the others
    with offset and byte count 0 (GDAL reads them as its nodata value); what GDAL reads back."""
    data = np.zeros((96, 128), dtype)
    block = np.arange(32 * 32, dtype=dtype).reshape(32, 32)
    data[32:64, 32:64] = block
    tifffile.imwrite(path, data, tile=(32, 32), extratags=[(42113, "s", 0, nodata, True)])
    with tifffile.TiffFile(path, mode="r+") as t:
        page = t.pages[0]
        keep = 1 * 4 + 1  # tile (row 1, column 1)
        offsets = [o if i == keep else 0 for i, o in enumerate(page.dataoffsets)]
        counts = [c if i == keep else 0 for i, c in enumerate(page.databytecounts)]
        page.tags["TileOffsets"].overwrite(offsets)
        page.tags["TileByteCounts"].overwrite(counts)
    value = np.clip(float(nodata), -FLT_MAX, FLT_MAX) if reads_as is None else reads_as
    expected = np.full((96, 128), value, dtype)
    expected[32:64, 32:64] = block
    return expected


def view_pixels(fs: FS, path: str) -> np.ndarray:
    with tifffile.TiffFile(io.BytesIO(fs.read_file(path))) as t:
        return t.asarray()


NODATA = {  # the GDAL_NODATA text -> what it means for float32 samples
    "minus_flt_max": "-3.4028234663852886e+38",  # -FLT_MAX as GDAL prints it (%.17g)
    "flt_max_rounded": "3.40282347e+38",  # FLT_MAX printed to 9 digits, just past it: GDAL clamps
    "large": "-1e+30",
}


@pytest.mark.parametrize("nodata", list(NODATA.values()), ids=list(NODATA))
def test_unwritten_blocks_of_a_float_raster_read_as_its_nodata(fs, tmp_path, nodata):
    src = tmp_path / "dem.tif"
    expected = sparse_raster(src, nodata)
    fs.write_file("tiff/exp/dem.tif", src.read_bytes())
    meta = fs.read_json("zarr/exp.zarr/dem/zarr.json")
    assert np.float32(meta["fill_value"]) == expected[0, 0]
    assert meta["attributes"]["GDAL_NODATA"] == nodata
    np.testing.assert_array_equal(view_pixels(fs, "tiff/exp/dem.tif"), expected)


def test_unwritten_blocks_over_an_existing_dataset_read_as_nodata(fs, tmp_path):
    """A sparse file written over a dataset of fill value 0: the blocks it never wrote are
    stored as its nodata value, not left as the old data or read as 0."""
    fs.write_file("tiff/exp/dem.tif", _plain(np.full((96, 128), 7, "f4")))
    src = tmp_path / "dem.tif"
    expected = sparse_raster(src, NODATA["minus_flt_max"])
    fs.write_file("tiff/exp/dem.tif", src.read_bytes())
    np.testing.assert_array_equal(view_pixels(fs, "tiff/exp/dem.tif"), expected)


def test_import_reads_unwritten_blocks_as_nodata(tmp_path):
    src = tmp_path / "dem.tif"
    expected = sparse_raster(src, NODATA["minus_flt_max"])
    store = tmp_path / "store"
    assert import_source(src, str(store), progress=False) == "/dem.h5"
    reader = FS(str(store), read_only=True)
    try:
        np.testing.assert_array_equal(view_pixels(reader, "tiff/dem/image.tif"), expected)
    finally:
        reader.close()


def test_nodata_that_is_no_value_of_the_type_leaves_unwritten_blocks_zero(fs, tmp_path):
    """GDAL reads a nodata of -9999 on 8-bit samples as no nodata at all: unwritten blocks are 0."""
    src = tmp_path / "mask.tif"
    expected = sparse_raster(src, "-9999", dtype="u1", reads_as=0)
    fs.write_file("tiff/exp/mask.tif", src.read_bytes())
    np.testing.assert_array_equal(view_pixels(fs, "tiff/exp/mask.tif"), expected)


def _plain(data: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, tile=(32, 32))
    return buf.getvalue()


# -- rm -r of a directory of TIFFs ----------------------------------------------------------------
def test_rm_r_of_a_group_of_tiffs_after_a_remount_removes_the_group(fs, tmp_path):
    """``rm -r tiff/exp/run1`` after a remount removed the files, then ``rmdir`` got ENOENT (exit 1):
    the view showed a directory only for a group holding images, so the emptied group vanished from
    ``tiff/`` and stayed in the store (and in ``zarr/``, ``hdf5/``)."""
    fs.mkdir("tiff/exp/run1")
    for name in ("a", "b"):
        fs.write_file(f"tiff/exp/run1/{name}.tif", _plain(np.full((32, 32), 3, "u1")))
    later = fs.fresh()  # another daemon: the directory made by mkdir is no longer in its memory
    try:
        for name in sorted(later.ls("tiff/exp/run1")):  # what rm -r does
            later.unlink(f"tiff/exp/run1/{name}")
        assert later.ls("tiff/exp/run1") == []
        later.rmdir("tiff/exp/run1")
        assert not later.exists("zarr/exp.zarr/run1")
        assert "run1" not in later.ls("tiff/exp")
    finally:
        later.close()


def test_empty_group_is_a_directory_after_a_remount(fs):
    """An empty group (``mkdir`` in any view) is a directory of ``tiff/`` as of ``zarr/``, after a
    remount too, so a TIFF can be written into it then."""
    fs.mkdir("zarr/exp.zarr/plates")
    fs.mkdir("zarr/exp.zarr/plates/p1")
    later = fs.fresh()
    try:
        assert later.is_dir("tiff/exp/plates/p1")
        later.write_file("tiff/exp/plates/p1/well.tif", _plain(np.full((32, 32), 9, "u1")))
        assert later.ls("tiff/exp/plates/p1") == ["well.tif"]
    finally:
        later.close()


# -- samples in separate planes: tiles no wider than the image ------------------------------------
@pytest.mark.parametrize("shape", [(3, 300, 200), (3, 40, 50), (4, 30, 1000)])
def test_separate_planes_are_served_in_tiles_no_wider_than_the_image(fs, shape):
    """libtiff's ``tiffcp`` refuses a file of separate planes whose tile is wider than the image
    ("image raster scan line size is too large"): an RGB image tifffile writes in planes (its
    default for ``(3, H, W)``) was served as one 208-wide tile on a 200-wide image, so ``tiffcp``
    of the view's file failed where ``tiffcp`` of the written file worked."""
    data = np.random.default_rng(8).integers(0, 255, shape).astype("u1")
    photometric = "rgb" if shape[0] == 3 else "minisblack"
    fs.write_file("tiff/exp/planes.tif", _plain_strips(data, photometric))
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/exp/planes.tif"))) as t:
        page = t.pages[0]
        assert page.planarconfig == 2 and page.is_tiled
        assert page.tilewidth <= page.imagewidth
        np.testing.assert_array_equal(t.asarray(), data)


def _plain_strips(data: np.ndarray, photometric: str) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, planarconfig="separate", photometric=photometric)
    return buf.getvalue()


# -- uncompressed tiles a whole number of KiB --------------------------------------------------------
@pytest.mark.parametrize("shape,dtype", [((300, 200, 3), "u2"), ((300, 200, 3), "u1"), ((40, 50), "u1"),
                                         ((3, 300, 200), "u1")])
def test_uncompressed_tiles_are_a_whole_number_of_kib(fs, shape, dtype):
    """libtiff's RGBA reader (``tiff2rgba``, OpenCV) refuses an uncompressed tile whose size is not
    its read buffer's, which it rounds up to 1 KiB when it cannot map the file (as in a domain
    written through the mount): a 300x200 RGB image served in 304x208 tiles of 379392 bytes failed
    with "Invalid tile byte count for tile 0. Expected 379392, got 379904"."""
    data = np.random.default_rng(9).integers(0, 200, shape).astype(dtype)
    planar = shape[0] == 3 and len(shape) == 3
    fs.write_file("tiff/exp/img.tif", _plain_strips(data, "rgb") if planar else _rgb_or_gray(data))
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/exp/img.tif"))) as t:
        page = t.pages[0]
        assert page.compression == 1 and page.is_tiled
        assert all(int(n) % 1024 == 0 for n in page.databytecounts)
        np.testing.assert_array_equal(t.asarray(), data)


def _rgb_or_gray(data: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, photometric="rgb" if data.ndim == 3 else "minisblack")
    return buf.getvalue()
