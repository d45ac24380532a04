"""Tier 2: the TIFF view as rasterio (GDAL) writes it, exploratory round 15 (operations awaited
directly).

- rasterio's usual way to give a band a colour table, ``dst.write(arr, 1)`` then
  ``dst.write_colormap(1, cmap)``, makes GDAL write a ColorMap tag under PhotometricInterpretation
  MinIsBlack (the photometric was already written with the pixels); GDAL reads such a file as a
  palette image. Written into ``tiff/``, the colour table was lost: the view served a grey
  MinIsBlack image, and ``ds.colormap(1)`` raised ``NULL color table``. Such a page is a palette
  now: stored with its ``colormap`` attribute, served as Palette with the same colours;
- a netCDF variable's ``_FillValue`` (else ``missing_value``) is its nodata for GDAL's netCDF driver
  (``rasterio.open("netcdf:...:tas").nodata``), but its file in ``tiff/`` carried no GDAL_NODATA:
  rasterio/GDAL read the same variable there with every fill value valid (statistics, masks,
  overviews averaged them in). The view serves it as GDAL_NODATA now, when the dataset has none of
  its own; a file edited in place or rewritten (rasterio ``r+``) that leaves it as served does not
  store it on the variable.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)
from writeharness import FS, write_changes

tifffile = pytest.importorskip("tifffile")

RNG = np.random.default_rng(15)
INDEX = RNG.integers(0, 4, (40, 70)).astype("u1")
COLOURS = {0: (255, 0, 0), 1: (0, 255, 0), 2: (0, 0, 255), 3: (1, 2, 3)}


def grey_with_colormap(data: np.ndarray) -> bytes:
    """A MinIsBlack page that carries a ColorMap, as GDAL writes a table set after the pixels."""
    size = 1 << (8 * data.dtype.itemsize)
    cmap = np.zeros((3, size), "u2")
    for i, rgb in COLOURS.items():
        cmap[:, i] = np.asarray(rgb) * 257
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, photometric="minisblack", tile=(16, 16),
                     extratags=[(320, "H", cmap.size, cmap.reshape(-1).tolist(), True)])
    return buf.getvalue()


def served_palette(fs: FS, path: str) -> tuple[np.ndarray, np.ndarray]:
    with tifffile.TiffFile(io.BytesIO(fs.read_file(path))) as t:
        page = t.pages[0]
        assert page.photometric == tifffile.PHOTOMETRIC.PALETTE
        return page.asarray(), page.colormap


@pytest.mark.parametrize("dtype", ["u1", "u2"])
def test_grey_page_with_a_colormap_is_kept_as_a_palette(fs, dtype):  # noqa: F811
    data = INDEX.astype(dtype)
    fs.write_file("tiff/exp/classes.tif", grey_with_colormap(data))
    got, cmap = served_palette(fs, "tiff/exp/classes.tif")
    np.testing.assert_array_equal(got, data)
    for i, rgb in COLOURS.items():
        assert tuple(int(c) // 257 for c in cmap[:, i]) == rgb


def test_rasterio_colormap_written_after_the_pixels_reads_back(fs, tmp_path):  # noqa: F811
    rasterio = pytest.importorskip("rasterio")
    from rasterio.transform import from_origin

    src = tmp_path / "classes.tif"
    with rasterio.open(src, "w", driver="GTiff", width=70, height=40, count=1, dtype="uint8",
                       crs="EPSG:32633", transform=from_origin(500000, 4000000, 10, 10)) as ds:
        ds.write(INDEX, 1)
        ds.write_colormap(1, {i: (*rgb, 255) for i, rgb in COLOURS.items()})
    fs.write_file("tiff/exp/classes.tif", src.read_bytes())
    back = tmp_path / "back.tif"
    back.write_bytes(fs.read_file("tiff/exp/classes.tif"))
    with rasterio.open(back) as ds:
        assert ds.colorinterp[0] == rasterio.enums.ColorInterp.palette
        table = ds.colormap(1)
        assert all(table[i][:3] == rgb for i, rgb in COLOURS.items())
        np.testing.assert_array_equal(ds.read(1), INDEX)
        assert ds.crs.to_epsg() == 32633 and ds.transform == from_origin(500000, 4000000, 10, 10)


def test_grey_page_with_a_colormap_of_float_samples_stays_grey(fs):  # noqa: F811
    """A ColorMap beside samples no palette can index (float) changes nothing: grey as before."""
    buf = io.BytesIO()
    tifffile.imwrite(buf, INDEX.astype("f4"), photometric="minisblack", tile=(16, 16),
                     extratags=[(320, "H", 3 * 256, [0] * (3 * 256), True)])
    fs.write_file("tiff/exp/f.tif", buf.getvalue())
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/exp/f.tif"))) as t:
        assert t.pages[0].photometric == tifffile.PHOTOMETRIC.MINISBLACK
        np.testing.assert_array_equal(t.pages[0].asarray(), INDEX.astype("f4"))


def netcdf_bytes(fill: dict[str, object]) -> bytes:
    """A netCDF-4 file of one (lat, lon) float variable ``tas`` with the given attributes."""
    netCDF4 = pytest.importorskip("netCDF4")
    d = netCDF4.Dataset("inmemory.nc", "w", memory=0)
    d.createDimension("lat", 20)
    d.createDimension("lon", 30)
    v = d.createVariable("tas", "f4", ("lat", "lon"), chunksizes=(16, 16), zlib=True,
                         fill_value=fill.pop("_FillValue", None))
    for k, val in fill.items():
        v.setncattr(k, val)
    v[:] = np.arange(600, dtype="f4").reshape(20, 30)
    return bytes(d.close())


def gdal_nodata_of(fs: FS, path: str) -> str | None:
    with tifffile.TiffFile(io.BytesIO(fs.read_file(path))) as t:
        tag = t.pages[0].tags.get("GDAL_NODATA")
        return None if tag is None else tag.value.strip("\0")


def variable_attrs(fs: FS, name: str) -> set[str]:
    h5py = pytest.importorskip("h5py")
    with h5py.File(io.BytesIO(fs.read_file(f"hdf5/{name}.nc")), "r") as f:
        return set(f["tas"].attrs)


@pytest.mark.parametrize("attrs, want", [({"_FillValue": np.float32(-999)}, -999.0),
                                         ({"missing_value": np.float32(1e20)}, float(np.float32(1e20))),
                                         ({"_FillValue": np.float32(np.nan)}, "nan")])
def test_cf_fill_value_is_served_as_gdal_nodata(fs, attrs, want):  # noqa: F811
    fs.write_file("hdf5/clim.nc", netcdf_bytes(dict(attrs)))
    text = gdal_nodata_of(fs, "tiff/clim.nc/tas.tif")
    assert text is not None
    if want == "nan":
        assert np.isnan(float(text))
    else:
        assert np.float32(float(text)) == np.float32(want)


def test_a_file_without_cf_fill_gets_no_gdal_nodata(fs):  # noqa: F811
    fs.write_file("hdf5/clim.nc", netcdf_bytes({}))
    assert gdal_nodata_of(fs, "tiff/clim.nc/tas.tif") is None


def test_own_gdal_nodata_wins_over_the_cf_fill(fs):  # noqa: F811
    fs.write_file("hdf5/clim.nc", netcdf_bytes({"_FillValue": np.float32(-999), "GDAL_NODATA": "-1"}))
    assert gdal_nodata_of(fs, "tiff/clim.nc/tas.tif") == "-1"


def test_served_cf_nodata_written_back_is_not_stored(fs):  # noqa: F811
    """A tile rewritten in place and the whole file written back (rasterio ``r+``, ``cp``): the
    pixels change, the variable's attributes do not (no GDAL_NODATA beside its ``_FillValue``)."""
    fs.write_file("hdf5/clim.nc", netcdf_bytes({"_FillValue": np.float32(-999)}))
    before = fs.read_file("tiff/clim.nc/tas.tif")
    with tifffile.TiffFile(io.BytesIO(before)) as t:
        page = t.pages[0]
        at, n = page.dataoffsets[0], page.databytecounts[0]
        data = page.asarray()
    assert n == 16 * 16 * 4  # an uncompressed tile: rewritten in place below
    tile = np.full((16, 16), -999, "<f4").tobytes()
    after = before[:at] + tile + before[at + n:]
    write_changes(fs, "tiff/clim.nc/tas.tif", before, after)
    assert "GDAL_NODATA" not in variable_attrs(fs, "clim")
    data[:16, :16] = -999
    fs.write_file("tiff/clim.nc/tas.tif", fs.read_file("tiff/clim.nc/tas.tif"))
    assert "GDAL_NODATA" not in variable_attrs(fs, "clim")
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/clim.nc/tas.tif"))) as t:
        np.testing.assert_array_equal(t.pages[0].asarray(), data)
        assert float(t.pages[0].tags["GDAL_NODATA"].value.strip("\0")) == -999
