"""The TIFF and polyglot views of data from xarray, zarr-python and tifffile, read with GDAL,
libtiff and tifffile on a mount, exploratory round 9: what it found and what now holds.

- ``xarray.Dataset.to_zarr`` of a raster with rioxarray's CF georeferencing (``grid_mapping`` ->
  ``spatial_ref`` with ``crs_wkt`` and GDAL's ``GeoTransform``): ``gdalinfo`` of its ``tiff/``
  (and ``polyglot/``) file showed no coordinate system and no origin, ``gdallocationinfo
  -geoloc`` could not find a pixel;
- the same Dataset's ``(y, x, band)`` RGB picture was 200 pages of 300x3 pixels (GDAL "Size is
  3, 300"), its ``(band, y, x)`` bands one band in GDAL;
- a stripped RGB photo written into ``tiff/`` by tifffile was stored in (rows, whole width, 3)
  chunks that no TIFF tile can be: every read transcoded the image; now its chunks are its tiles.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

tifffile = pytest.importorskip("tifffile")
xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")

needs_gdal = pytest.mark.skipif(shutil.which("gdalinfo") is None or shutil.which("gdallocationinfo") is None,
                                reason="needs GDAL")

UTM33 = ('PROJCS["WGS 84 / UTM zone 33N",GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,'
         '298.257223563,AUTHORITY["EPSG","7030"]],AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0,'
         'AUTHORITY["EPSG","8901"]],UNIT["degree",0.0174532925199433,AUTHORITY["EPSG","9122"]],'
         'AUTHORITY["EPSG","4326"]],PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],'
         'PARAMETER["central_meridian",15],PARAMETER["scale_factor",0.9996],PARAMETER["false_easting",500000],'
         'PARAMETER["false_northing",0],UNIT["metre",1,AUTHORITY["EPSG","9001"]],AXIS["Easting",EAST],'
         'AXIS["Northing",NORTH],AUTHORITY["EPSG","32633"]]')
NY, NX = 200, 300


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def gdal_json(path: Path) -> dict:
    out = subprocess.run(["gdalinfo", "-json", "--config", "GDAL_PAM_ENABLED", "NO", str(path)],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def raster_dataset() -> xr.Dataset:
    """What rioxarray makes of a UTM scene: NDVI, an RGB picture (``band`` last)."""
    rng = np.random.default_rng(0)
    x = 500000 + 30 * np.arange(NX) + 15.0
    y = 4000000 - 30 * np.arange(NY) - 15.0
    gm = {"grid_mapping": "spatial_ref"}
    return xr.Dataset(
        {"ndvi": (("y", "x"), rng.integers(0, 10000, (NY, NX)).astype("int16"), gm),
         "rgb": (("y", "x", "band"), rng.integers(0, 255, (NY, NX, 3)).astype("uint8"), gm),
         "spatial_ref": ((), 0, {"crs_wkt": UTM33, "spatial_ref": UTM33,
                                 "GeoTransform": "500000.0 30.0 0.0 4000000.0 0.0 -30.0"})},
        coords={"x": ("x", x), "y": ("y", y)})


@needs_gdal
def test_xarray_raster_is_a_georeferenced_tiff_with_its_bands(mount_store, store, tmp_path):
    ds = raster_dataset()
    four = xr.Dataset({"bands": (("band", "y", "x"), np.random.default_rng(1).integers(0, 4000, (4, NY, NX))
                                 .astype("uint16"), {"grid_mapping": "spatial_ref"}),
                       "spatial_ref": ds["spatial_ref"]}, coords={"x": ds.x, "y": ds.y})  # rioxarray's layout
    m = mount_store(str(store))
    ds.to_zarr(m.path / "zarr" / "geo.zarr", mode="w", consolidated=False, encoding={"ndvi": {"chunks": (64, 64)}})
    four.to_zarr(m.path / "zarr" / "geo.zarr", group="four", mode="w", consolidated=False,
                 encoding={"bands": {"chunks": (1, 64, 64)}})
    view = m.path / "tiff" / "geo"
    for name, nbands in (("ndvi", 1), ("rgb", 3), ("four/bands", 4)):
        info = gdal_json(view / f"{name}.tif")
        assert info["size"] == [NX, NY], name
        assert len(info["bands"]) == nbands, name
        assert info["geoTransform"] == [500000.0, 30.0, 0.0, 4000000.0, 0.0, -30.0], name
        assert 'ID["EPSG",32633]' in info["coordinateSystem"]["wkt"], name
    # the pixel under a map coordinate: row 10, column 20
    e, n = 500000 + 30 * 20 + 15, 4000000 - 30 * 10 - 15
    for name, want in (("ndvi", [ds["ndvi"].values[10, 20]]), ("rgb", list(ds["rgb"].values[10, 20])),
                       ("four/bands", list(four["bands"].values[:, 10, 20]))):
        out = subprocess.run(["gdallocationinfo", "-valonly", "-geoloc", str(view / f"{name}.tif"), str(e), str(n)],
                             capture_output=True, text=True, timeout=60, check=True).stdout.split()
        assert [int(v) for v in out] == [int(v) for v in want], name
    np.testing.assert_array_equal(tifffile.imread(view / "rgb.tif"), ds["rgb"].values)
    np.testing.assert_array_equal(tifffile.imread(view / "four" / "bands.tif"), four["bands"].values)
    deep_check(store)


@needs_gdal
def test_zstd_xarray_raster_in_polyglot_is_georeferenced_in_every_format(mount_store, store):
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("hdf5plugin")
    from zarr.codecs import ZstdCodec

    ds = raster_dataset()[["ndvi", "spatial_ref"]]
    m = mount_store(str(store))
    ds.to_zarr(m.path / "zarr" / "geo.zarr", mode="w", consolidated=False,
               encoding={"ndvi": {"chunks": (64, 64), "compressors": [ZstdCodec(level=3)]}})
    poly = m.path / "polyglot" / "geo" / "ndvi.tif"
    info = gdal_json(poly)
    assert info["geoTransform"] == [500000.0, 30.0, 0.0, 4000000.0, 0.0, -30.0]
    assert 'ID["EPSG",32633]' in info["coordinateSystem"]["wkt"]
    assert (m.path / "tiff" / "geo" / "ndvi.tif").read_bytes() == poly.read_bytes()  # one file
    with h5py.File(poly, "r") as f:
        np.testing.assert_array_equal(f["ndvi"][...], ds["ndvi"].values)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "polyglot" / "geo" / "ndvi.zarr"), mode="r")[...],
                                  ds["ndvi"].values)


def test_stripped_rgb_photo_written_by_tifffile_serves_its_chunks_as_tiles(mount_store, store, tmp_path):
    y, x = np.mgrid[0:1000, 0:1500]
    data = np.stack([(x // 7) % 256, (y // 5) % 256, ((x + y) // 11) % 256], -1).astype(np.uint8)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "photo.tif"
    tifffile.imwrite(view, data, photometric="rgb", rowsperstrip=8)
    with tifffile.TiffFile(view) as t:
        page = t.pages[0]
        assert page.compression == 8 and page.tilelength % 16 == 0 and page.tilewidth % 16 == 0
        np.testing.assert_array_equal(page.asarray(), data)
    zmeta = json.loads((m.path / "zarr" / "exp.zarr" / "photo" / "zarr.json").read_text())
    inner = zmeta["codecs"][0]["configuration"]["chunk_shape"]
    assert inner == [page.tilelength, page.tilewidth, 3]  # the stored chunk is the tile
    if shutil.which("tiffcp"):
        out = tmp_path / "out.tif"
        subprocess.run(["tiffcp", str(view), str(out)], check=True, timeout=120, capture_output=True)
        np.testing.assert_array_equal(tifffile.imread(out), data)
    deep_check(store)


@needs_gdal
@pytest.mark.parametrize("how", ["to_zarr", "to_netcdf"])
def test_cf_coordinates_without_geotransform_georeference_the_tiff(mount_store, store, how):
    """rioxarray's ``write_crs`` alone (or any CF writer): the CRS on ``spatial_ref``, the pixel
    centres in the ``x``/``y`` coordinates (xarray's dimension names in Zarr; dimension scales in
    a netCDF-4 file written into ``hdf5/``)."""
    pytest.importorskip("h5netcdf")
    ds = raster_dataset()
    del ds["spatial_ref"].attrs["GeoTransform"]
    m = mount_store(str(store))
    if how == "to_zarr":
        ds.to_zarr(m.path / "zarr" / "cf.zarr", mode="w", consolidated=False)
        view = m.path / "tiff" / "cf"
    else:
        ds.to_netcdf(m.path / "hdf5" / "cf.nc", engine="h5netcdf")
        view = m.path / "tiff" / "cf.nc"
    # (netCDF names the rgb picture's dims by dimension scales, which the TIFF view does not
    # read to find its samples axis: there it is still pages, without a transform)
    for name in ("ndvi", "rgb") if how == "to_zarr" else ("ndvi",):
        info = gdal_json(view / f"{name}.tif")
        assert info["geoTransform"] == [500000.0, 30.0, 0.0, 4000000.0, 0.0, -30.0], name
        assert 'ID["EPSG",32633]' in info["coordinateSystem"]["wkt"], name
    e, n = 500000 + 30 * 20 + 15, 4000000 - 30 * 10 - 15
    out = subprocess.run(["gdallocationinfo", "-valonly", "-geoloc", str(view / "ndvi.tif"), str(e), str(n)],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert [int(v) for v in out] == [int(ds["ndvi"].values[10, 20])]
