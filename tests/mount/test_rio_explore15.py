"""rasterio (its own GDAL 3.10 and libtiff) and GDAL's multidimensional CLI as users of a mount,
exploratory round 15: what it found and what now holds.

- ``dst.write(arr, 1); dst.write_colormap(1, cmap)`` (rasterio's usual way to make a classified
  map) into ``tiff/``: GDAL writes the ColorMap under MinIsBlack (the pixels went first) and reads
  such a file as a palette, but the view dropped the table: ``colormap(1)`` raised ``NULL color
  table`` on the file read back. The page is kept as a palette now;
- a netCDF variable's ``_FillValue`` is its nodata for GDAL's netCDF driver, but its file in
  ``tiff/`` had no GDAL_NODATA: rasterio read -999 as data there (``read(masked=True)`` masked
  nothing). The view serves it as GDAL_NODATA now; ``r+`` writes of a window leave the variable's
  attributes as they were (no GDAL_NODATA stored beside ``_FillValue``);
- what holds (checked here, not pinned before): rasterio writing tiled GeoTIFFs of several bands
  (deflate, LZW, zstd; predictor 2 and 3; pixel and band interleave) with CRS, transform, nodata,
  band descriptions and tags, reading them back (windows, ``out_shape``, ``block_windows``) and
  through tifffile, ``zarr/`` and ``hdf5/``, an ``r+`` window write; ``gdalmdiminfo`` and
  ``gdalmdimtranslate -of netCDF`` on ``hdf5/`` files (the source's values), and ``polyfs check
  --deep`` clean after all of it.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store


rasterio = pytest.importorskip("rasterio")
h5py = pytest.importorskip("h5py")
netCDF4 = pytest.importorskip("netCDF4")
tifffile = pytest.importorskip("tifffile")
zarr = pytest.importorskip("zarr")
from rasterio.transform import from_origin  # noqa: E402
from rasterio.windows import Window  # noqa: E402

UTM = from_origin(500000, 4000000, 10, 10)
CLASSES = {0: (255, 0, 0, 255), 1: (0, 255, 0, 255), 2: (0, 0, 255, 255), 3: (1, 2, 3, 255)}


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path, "seed.h5")


def bands() -> np.ndarray:
    y, x = np.mgrid[0:300, 0:400]
    data = np.stack([(y * 3 + x) % 1000, (y * 7 + 2 * x) % 997, (y + x * 5) % 991]).astype("f4")
    data[0, :10, :10] = -9999
    return data


@pytest.mark.parametrize("compress, predictor, interleave", [("deflate", 2, "pixel"), ("lzw", 3, "band"),
                                                              ("zstd", 2, "band")])
def test_rasterio_geotiff_written_into_tiff_reads_back_everywhere(mount_store, store, compress, predictor,
                                                                  interleave):
    m = mount_store(str(store))
    path = m.path / "tiff" / "seed" / "bands.tif"
    data = bands()
    with rasterio.open(path, "w", driver="GTiff", width=400, height=300, count=3, dtype="float32", crs="EPSG:32633",
                       transform=UTM, nodata=-9999, tiled=True, blockxsize=256, blockysize=256, compress=compress,
                       predictor=predictor, interleave=interleave) as ds:
        ds.write(data)
        ds.descriptions = ("red", "green", "blue")
        ds.update_tags(1, kind="reflectance")
        ds.update_tags(author="rio")
    with rasterio.open(path, "r+") as ds:  # a window of band 2 rewritten in place
        ds.write(np.full((20, 30), 7, "f4"), 2, window=Window(40, 30, 30, 20))
    data[1, 30:50, 40:70] = 7

    def check(root: Path) -> None:
        p = root / "tiff" / "seed" / "bands.tif"
        with rasterio.open(p) as ds:
            assert ds.crs.to_epsg() == 32633 and ds.transform == UTM and ds.nodata == -9999
            assert ds.descriptions == ("red", "green", "blue")
            assert ds.tags(1)["kind"] == "reflectance" and ds.tags()["author"] == "rio"
            np.testing.assert_array_equal(ds.read(), data)
            np.testing.assert_array_equal(ds.read(2, window=Window(35, 25, 50, 40)), data[1, 25:65, 35:85])
            assert ds.read(1, out_shape=(150, 200)).shape == (150, 200)
            assert ds.read(1, masked=True).mask[:10, :10].all()
            for _, w in ds.block_windows(3):
                np.testing.assert_array_equal(ds.read(3, window=w), data[2][w.toslices()])
        on_disk = tifffile.imread(p)
        np.testing.assert_array_equal(on_disk if on_disk.shape == data.shape else np.moveaxis(on_disk, -1, 0), data)
        z = zarr.open_array(root / "zarr" / "seed.zarr" / "bands", mode="r")
        assert z.fill_value == -9999
        with h5py.File(root / "hdf5" / "seed.h5", "r") as f:
            got = f["bands"][...]
        np.testing.assert_array_equal(got if got.shape == data.shape else np.moveaxis(got, -1, 0), data)

    check(m.path)
    m.stop()
    deep_check(store)
    check(mount_store(str(store)).path)


def test_rasterio_colormap_set_after_the_pixels_is_kept(mount_store, store):
    m = mount_store(str(store))
    path = m.path / "tiff" / "seed" / "classes.tif"
    index = np.random.default_rng(15).integers(0, 4, (128, 160)).astype("u1")
    with rasterio.open(path, "w", driver="GTiff", width=160, height=128, count=1, dtype="uint8", crs="EPSG:32633",
                       transform=UTM, tiled=True, blockxsize=64, blockysize=64, compress="deflate") as ds:
        ds.write(index, 1)
        ds.write_colormap(1, CLASSES)
    with rasterio.open(path) as ds:
        assert ds.colorinterp[0] == rasterio.enums.ColorInterp.palette
        table = ds.colormap(1)
        assert all(table[i] == rgba for i, rgba in CLASSES.items())
        np.testing.assert_array_equal(ds.read(1), index)
        assert ds.crs.to_epsg() == 32633
    m.stop()
    deep_check(store)


def write_netcdf(path: Path) -> np.ndarray:
    tas = np.arange(4 * 20 * 30, dtype="f4").reshape(4, 20, 30)
    tas[:, :2, :3] = -999
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("lat", 20)
        d.createDimension("lon", 30)
        d.createVariable("lat", "f4", ("lat",))[:] = np.linspace(-47.5, 42.5, 20)
        d.createVariable("lon", "f4", ("lon",))[:] = np.linspace(0, 290, 30)
        v = d.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(1, 20, 30),
                             fill_value=np.float32(-999))
        v.units = "K"
        v[:] = tas
    return tas


def test_netcdf_fill_value_is_the_nodata_of_its_tiff(mount_store, store):
    m = mount_store(str(store))
    nc = m.path / "hdf5" / "clim.nc"
    tas = write_netcdf(nc)
    with rasterio.open(f"netcdf:{nc}:tas") as ds:
        driver_nodata = ds.nodata
    band = m.path / "tiff" / "clim.nc" / "tas.tif"
    with rasterio.open(band) as ds:
        assert ds.nodata == driver_nodata == -999
        got = ds.read(1, masked=True)
        np.testing.assert_array_equal(got.mask, tas[0] == -999)
    with rasterio.open(band, "r+") as ds:
        ds.write(np.full((2, 2), 5, "f4"), 1, window=Window(10, 10, 2, 2))
    tas[0, 10:12, 10:12] = 5
    with h5py.File(nc, "r") as f:
        assert "GDAL_NODATA" not in f["tas"].attrs
        np.testing.assert_array_equal(f["tas"][...], tas)
    m.stop()
    deep_check(store)


@pytest.mark.skipif(shutil.which("gdalmdimtranslate") is None or shutil.which("gdalmdiminfo") is None,
                    reason="needs GDAL's multidimensional CLI")
def test_gdal_multidim_cli_reads_and_writes_hdf5_view(mount_store, store, tmp_path):
    m = mount_store(str(store))
    nc = m.path / "hdf5" / "clim.nc"
    tas = write_netcdf(nc)
    info = json.loads(subprocess.run(["gdalmdiminfo", "-detailed", str(nc)], capture_output=True, text=True,
                                     check=True, timeout=120).stdout)
    assert info["arrays"]["tas"]["dimension_size"] == [4, 20, 30]
    out = m.path / "hdf5" / "copy.nc"
    subprocess.run(["gdalmdimtranslate", "-q", "-of", "netCDF", "-co", "FORMAT=NC4", str(nc), str(out)],
                   check=True, timeout=120, capture_output=True)
    local = tmp_path / "copy.nc"
    subprocess.run(["gdalmdimtranslate", "-q", "-of", "netCDF", "-co", "FORMAT=NC4", str(out), str(local)],
                   check=True, timeout=120, capture_output=True)
    for f in (out, local):
        with netCDF4.Dataset(f) as d:
            np.testing.assert_array_equal(d["tas"][...].filled(-999), tas)
            np.testing.assert_array_equal(d["lat"][...], np.linspace(-47.5, 42.5, 20).astype("f4"))
    m.stop()
    deep_check(store)
