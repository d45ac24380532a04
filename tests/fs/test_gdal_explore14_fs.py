"""Tier 2: GDAL's netCDF files in the TIFF view, exploratory round 14 (operations awaited directly).

GDAL's netCDF driver (``gdal_translate -of netCDF``, its default ``WRITE_BOTTOMUP=YES``) writes
the rows south to north, with the ``y``/``lat`` coordinate ascending, and the grid mapping's
``GeoTransform`` attribute describing the picture it shows when it reads the file back: north
up (origin at the top edge, negative row step). The TIFF view served the rows as stored with
that transform: the picture upside down on its map (``gdallocationinfo -geoloc`` read the
mirrored row). The transform is now turned to the stored rows' order when the y coordinate
variable runs against it; a GeoTransform that already agrees with the coordinates (rioxarray's
of an ascending ``y``, GDAL's ``WRITE_BOTTOMUP=NO``) is served as it was.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)
from test_tiff_explore9_fs import UTM33, page_of, zarr_array
from writeharness import FS

from polyfs.importers import import_source

tifffile = pytest.importorskip("tifffile")
h5py = pytest.importorskip("h5py")

NORTH_UP = "500000 30 0 4000000 0 -30 "  # GDAL's GeoTransform text: 32 rows of 30 m below y=4000000
ROWS, COLS = 32, 48


def cf_raster(fs: FS, transform: str, y: np.ndarray) -> np.ndarray:
    """An array with a CF grid mapping holding ``transform``, and its x/y coordinate variables."""
    data = np.arange(ROWS * COLS, dtype=np.int16).reshape(ROWS, COLS)
    zarr_array(fs, "zarr/exp.zarr/crs", np.zeros((), np.int64), (), None,
               {"crs_wkt": UTM33, "GeoTransform": transform})
    zarr_array(fs, "zarr/exp.zarr/x", 500015.0 + 30 * np.arange(COLS), (COLS,), ["x"])
    zarr_array(fs, "zarr/exp.zarr/y", y, (ROWS,), ["y"])
    zarr_array(fs, "zarr/exp.zarr/Band1", data, (16, 16), ["y", "x"], {"grid_mapping": "crs"})
    return data


def transform_of(tags: dict) -> tuple[float, ...]:
    """GDAL's geotransform (x0, dx, rx, y0, ry, dy) of a page's GeoTIFF tags."""
    if "ModelTransformationTag" in tags:
        m = list(tags["ModelTransformationTag"])
        return (m[3], m[0], m[1], m[7], m[4], m[5])
    sx, sy, _ = tags["ModelPixelScaleTag"]
    t = tags["ModelTiepointTag"]
    return (t[3] - t[0] * sx, sx, 0.0, t[4] + t[1] * sy, 0.0, -sy)


def test_bottom_up_rows_with_a_north_up_geotransform_are_placed_as_stored(fs):
    """GDAL's default netCDF layout: y ascending (row 0 is the southern edge), GeoTransform north up."""
    y_up = 3999055.0 + 30 * np.arange(ROWS)  # pixel centres, south to north
    data = cf_raster(fs, NORTH_UP, y_up)
    tags, pixels = page_of(fs.read_file("tiff/exp/Band1.tif"))
    np.testing.assert_array_equal(pixels, data)  # the rows as stored
    x0, dx, rx, y0, ry, dy = transform_of(tags)
    assert (x0, dx, rx, ry) == (500000.0, 30.0, 0.0, 0.0)
    assert (y0, dy) == (4000000.0 - 30 * ROWS, 30.0)  # origin at the southern edge, rows going north
    for row in (0, 7, ROWS - 1):  # each stored row lies where its y coordinate says
        assert y0 + dy * (row + 0.5) == y_up[row]
    assert list(tags["GeoKeyDirectoryTag"])[-4:] == [3072, 0, 1, 32633]


@pytest.mark.parametrize("transform, y", [
    (NORTH_UP, 3999985.0 - 30 * np.arange(ROWS)),  # GDAL WRITE_BOTTOMUP=NO: y descending
    ("500000 30 0 3999040 0 30", 3999055.0 + 30 * np.arange(ROWS)),  # rioxarray's of an ascending y
], ids=["top-down", "agreeing-south-up"])
def test_geotransform_agreeing_with_the_coordinates_is_served_unchanged(fs, transform, y):
    cf_raster(fs, transform, y)
    tags, _ = page_of(fs.read_file("tiff/exp/Band1.tif"))
    assert transform_of(tags) == tuple(float(v) for v in transform.split())


def test_geotransform_without_a_y_coordinate_is_served_unchanged(fs):
    data = np.arange(ROWS * COLS, dtype=np.int16).reshape(ROWS, COLS)
    zarr_array(fs, "zarr/exp.zarr/crs", np.zeros((), np.int64), (), None,
               {"crs_wkt": UTM33, "GeoTransform": NORTH_UP})
    zarr_array(fs, "zarr/exp.zarr/Band1", data, (16, 16), ["y", "x"], {"grid_mapping": "crs"})
    tags, _ = page_of(fs.read_file("tiff/exp/Band1.tif"))
    assert transform_of(tags) == (500000.0, 30.0, 0.0, 4000000.0, 0.0, -30.0)


def test_netcdf4_file_of_gdal_layout_imported_is_placed_as_stored(tmp_path):
    """The same through ``polyfs import`` of a netCDF-4 file (dimensions as HDF5 dimension scales,
    no dimension names on the variable), as GDAL's netCDF driver lays it out."""
    src = tmp_path / "gd.nc"
    y_up = 3999055.0 + 30 * np.arange(ROWS)
    data = (np.arange(ROWS * COLS) % 251).astype(np.uint8).reshape(ROWS, COLS)
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=500015.0 + 30 * np.arange(COLS)).make_scale("x")
        f.create_dataset("y", data=y_up).make_scale("y")
        crs = f.create_dataset("transverse_mercator", data=np.array(b"", dtype="S1"))
        crs.attrs["crs_wkt"] = UTM33
        crs.attrs["GeoTransform"] = NORTH_UP
        band = f.create_dataset("Band1", data=data, chunks=(16, 16))
        band.dims[0].attach_scale(f["y"])
        band.dims[1].attach_scale(f["x"])
        band.attrs["grid_mapping"] = "transverse_mercator"
    store = tmp_path / "store"
    assert import_source(src, str(store), progress=False) == "/gd.h5"
    reader = FS(str(store), read_only=True)
    try:
        raw = reader.read_file("tiff/gd/Band1.tif")
    finally:
        reader.close()
    tags, pixels = page_of(raw)
    np.testing.assert_array_equal(pixels, data)
    assert transform_of(tags) == (500000.0, 30.0, 0.0, 4000000.0 - 30 * ROWS, 0.0, 30.0)
    with tifffile.TiffFile(io.BytesIO(raw)) as t:
        assert t.pages[0].shape == (ROWS, COLS)


def test_unedited_cf_tags():
    """Which tags of a file edited in place repeat the CF georeferencing the view served."""
    from polyfs.formats.tiff.geo import unedited_cf_tags

    class DS:  # only ``attributes`` is read
        def __init__(self, attributes: dict) -> None:
            self.attributes = attributes

    gt = (None, None, [30.0, 0.0, 0.0, 500000.0, 0.0, 30.0] + [0.0] * 10)
    keys = (None, None, [1, 1, 0, 1, 3072, 0, 1, 32633])
    served = {"ModelTransformationTag": gt, "GeoKeyDirectoryTag": keys}
    assert unedited_cf_tags(DS({}), {**served, "GDAL_NODATA": (None, None, "7")}, served) == set(served)
    edited = {"ModelTransformationTag": gt, "GeoKeyDirectoryTag": (None, None, [1, 1, 0, 1, 3072, 0, 1, 32632])}
    assert unedited_cf_tags(DS({}), edited, served) == set()  # -a_srs: all stored
    assert unedited_cf_tags(DS({}), {"GeoKeyDirectoryTag": keys}, served) == set()  # -unsetgt: stored
    assert unedited_cf_tags(DS({"GeoKeyDirectoryTag": 1}), served, served) == set()  # tags of its own
