"""Tier 2: the TIFF view of data from other writers, exploratory round 9 (operations awaited
directly).

- a stripped RGB photo (a camera's, tifffile's default layout) written into ``tiff/`` or imported
  was stored in chunks of the common rule, which took the samples axis for the image's width:
  a 3000x4000 photo became (87, 4000, 3) chunks, never TIFF tiles, so every read of its file in
  ``tiff/`` transcoded the whole image (twice the bytes, the daemon's cache). Decoded strips are
  now chunked with the samples whole and the plane in multiples of 16: the file serves the
  stored chunks as its tiles;
- an xarray image whose last dimension is named ``band`` (``(y, x, band)``: an RGB picture) was
  a stack of 200 pages of 300x3 pixels (GDAL: "Size is 3, 300"), and rioxarray's ``(band, y,
  x)`` three one-band pages (GDAL: one band). They are now samples per pixel and separate planes;
- an array xarray/rioxarray wrote with a CF ``grid_mapping`` (``crs_wkt`` and GDAL's
  ``GeoTransform`` on the ``spatial_ref`` variable) had no georeferencing in its TIFF: now
  ModelPixelScale/ModelTiepoint and the EPSG code as GeoKeys.
"""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)
from writeharness import FS

from polyfs.importers import import_source

tifffile = pytest.importorskip("tifffile")

UTM33 = ('PROJCS["WGS 84 / UTM zone 33N",GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,'
         '298.257223563,AUTHORITY["EPSG","7030"]],AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0],'
         'UNIT["degree",0.0174532925199433],AUTHORITY["EPSG","4326"]],PROJECTION["Transverse_Mercator"],'
         'PARAMETER["latitude_of_origin",0],PARAMETER["central_meridian",15],PARAMETER["scale_factor",0.9996],'
         'PARAMETER["false_easting",500000],PARAMETER["false_northing",0],UNIT["metre",1],'
         'AUTHORITY["EPSG","32633"]]')
WGS84_WKT2 = ('GEOGCRS["WGS 84",DATUM["World Geodetic System 1984",ELLIPSOID["WGS 84",6378137,298.257223563]],'
              'CS[ellipsoidal,2],AXIS["latitude",north],AXIS["longitude",east],ANGLEUNIT["degree",0.0174532925199433],'
              'USAGE[SCOPE["Horizontal component of 3D system."],AREA["World."],BBOX[-90,-180,90,180]],'
              'ID["EPSG",4326]]')


def photo(h: int = 600, w: int = 1000) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([(x // 7) % 256, (y // 5) % 256, ((x + y) // 11) % 256], -1).astype(np.uint8)


def strip_tiff(data: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, photometric="rgb" if data.shape[-1] in (3, 4) else None, rowsperstrip=16, **kw)
    return buf.getvalue()


def page_of(raw: bytes) -> tuple[dict, np.ndarray]:
    """(first page's tags as name -> value, the pixels) of a TIFF's bytes."""
    with tifffile.TiffFile(io.BytesIO(raw)) as t:
        p = t.pages[0]
        return {tag.name: tag.value for tag in p.tags}, t.asarray()


def zarr_array(fs: FS, path: str, data: np.ndarray, chunks: tuple[int, ...], dims: list[str] | None = None,
               attrs: dict | None = None) -> None:
    """A Zarr v3 array as zarr-python writes it (unsharded, ``bytes`` codec), file by file."""
    meta = {"zarr_format": 3, "node_type": "array", "shape": list(data.shape), "data_type": data.dtype.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": attrs or {}}
    if dims is not None:
        meta["dimension_names"] = dims
    fs.makedirs(path)
    fs.write_file(f"{path}/zarr.json", json.dumps(meta).encode())
    grid = [-(-s // c) for s, c in zip(data.shape, chunks)]
    for idx in np.ndindex(*grid):
        block = np.zeros(chunks, data.dtype)
        part = data[tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks))]
        block[tuple(slice(0, n) for n in part.shape)] = part
        key = "/".join(str(i) for i in idx) if idx else "0"
        fs.makedirs(f"{path}/c/" + "/".join(str(i) for i in idx[:-1]) if len(idx) > 1 else f"{path}/c")
        fs.write_file(f"{path}/c/{key}", block.astype("<" + data.dtype.str[1:]).tobytes())


# -- 1. stripped RGB photos: chunks that are tiles ------------------------------------------------------
@pytest.mark.parametrize("compression", [None, "lzw"])
def test_stripped_rgb_photo_written_into_tiff_is_served_as_its_stored_tiles(fs, compression):
    data = photo()
    fs.write_file("tiff/exp/photo.tif", strip_tiff(data, compression=compression))
    meta = fs.read_json("zarr/exp.zarr/photo/zarr.json")
    inner = meta["codecs"][0]["configuration"]["chunk_shape"] if meta["codecs"][0]["name"] == "sharding_indexed" \
        else meta["chunk_grid"]["configuration"]["chunk_shape"]
    assert inner[-1] == 3 and inner[0] % 16 == 0 and inner[1] % 16 == 0, inner  # was [349, 1000, 3]
    tags, pixels = page_of(fs.read_file("tiff/exp/photo.tif"))
    assert tags["Compression"] == 8  # the stored deflate chunks, not transcoded uncompressed tiles
    assert (tags["TileLength"], tags["TileWidth"]) == tuple(inner[:2])
    np.testing.assert_array_equal(pixels, data)


def test_imported_stripped_rgb_photo_is_served_as_its_stored_tiles(tmp_path):
    data = photo(700, 900)
    src = tmp_path / "photo.tif"
    src.write_bytes(strip_tiff(data))
    store = tmp_path / "store"
    assert import_source(src, str(store), progress=False) == "/photo.h5"
    reader = FS(str(store), read_only=True)
    try:
        tags, pixels = page_of(reader.read_file("tiff/photo/image.tif"))
    finally:
        reader.close()
    assert tags["Compression"] == 8 and tags["SamplesPerPixel"] == 3
    assert tags["TileLength"] % 16 == 0 and tags["TileWidth"] % 16 == 0
    np.testing.assert_array_equal(pixels, data)


@pytest.mark.parametrize("shape,itemsize,contig,want", [
    ((3000, 4000, 3), 1, True, (384, 512, 3)),  # the photo of last round: was (87, 4000, 3)
    ((600, 800, 3), 1, True, (304, 400, 3)),  # 600 rows: halved to a multiple of 16
    ((200, 300, 3), 1, True, (200, 300, 3)),  # one chunk stays whole
    ((20000, 100), 2, False, (5008, 64)),  # grey, narrow: 100 columns to 64
    ((100, 64, 64, 3), 1, True, (85, 64, 64, 3)),  # small planes: stacked as the common rule does
])
def test_decoded_strip_chunks(shape, itemsize, contig, want):
    from polyfs.formats.tiff.source import decoded_chunks

    assert decoded_chunks(shape, itemsize, None, contig) == want
    assert decoded_chunks(shape, itemsize, tuple(min(10, d) for d in shape), contig) == \
        tuple(min(10, d) for d in shape)  # --chunks wins


# -- 2. xarray's band dimension ---------------------------------------------------------------------------
def test_xarray_rgb_with_a_band_dimension_last_is_one_page_of_samples(fs):
    data = np.random.default_rng(1).integers(0, 255, (40, 48, 3)).astype(np.uint8)
    zarr_array(fs, "zarr/exp.zarr/rgb", data, (40, 48, 3), ["y", "x", "band"])
    tags, pixels = page_of(fs.read_file("tiff/exp/rgb.tif"))
    assert (tags["ImageLength"], tags["ImageWidth"], tags["SamplesPerPixel"]) == (40, 48, 3)  # was 40 pages 48x3
    assert tags["PhotometricInterpretation"] == 2
    np.testing.assert_array_equal(pixels, data)


def test_rioxarray_band_first_is_one_page_of_separate_planes(fs):
    data = np.random.default_rng(2).integers(0, 4000, (4, 32, 48)).astype(np.uint16)
    zarr_array(fs, "zarr/exp.zarr/bands", data, (1, 32, 48), ["band", "y", "x"])
    raw = fs.read_file("tiff/exp/bands.tif")
    tags, pixels = page_of(raw)
    assert tags["SamplesPerPixel"] == 4 and tags["PlanarConfiguration"] == 2  # was 4 pages of one band
    with tifffile.TiffFile(io.BytesIO(raw)) as t:
        assert len(t.pages) == 1
    np.testing.assert_array_equal(pixels, data)


def test_other_last_dimension_names_stay_pages(fs):
    data = np.arange(5 * 16 * 3, dtype=np.uint8).reshape(5, 16, 3)
    zarr_array(fs, "zarr/exp.zarr/stack", data, (5, 16, 3), ["time", "y", "x"])
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/exp/stack.tif"))) as t:
        assert len(t.pages) == 5 and t.pages[0].shape == (16, 3)
        np.testing.assert_array_equal(t.asarray(), data)


# -- 3. CF grid mapping ----------------------------------------------------------------------------------
def geo_array(fs: FS, wkt: str, transform: str, name: str = "ndvi") -> np.ndarray:
    data = np.arange(32 * 48, dtype=np.int16).reshape(32, 48)
    zarr_array(fs, "zarr/exp.zarr/spatial_ref", np.zeros((), np.int64), (), None,
               {"crs_wkt": wkt, "spatial_ref": wkt, "GeoTransform": transform})
    zarr_array(fs, f"zarr/exp.zarr/{name}", data, (16, 16), ["y", "x"], {"grid_mapping": "spatial_ref"})
    return data


def test_cf_grid_mapping_is_served_as_geotiff_tags(fs):
    data = geo_array(fs, UTM33, "500000.0 30.0 0.0 4000000.0 0.0 -30.0")
    tags, pixels = page_of(fs.read_file("tiff/exp/ndvi.tif"))
    np.testing.assert_array_equal(pixels, data)
    assert list(tags["ModelPixelScaleTag"]) == [30.0, 30.0, 0.0]
    assert list(tags["ModelTiepointTag"]) == [0.0, 0.0, 0.0, 500000.0, 4000000.0, 0.0]
    keys = list(tags["GeoKeyDirectoryTag"])
    assert keys[:4] == [1, 1, 0, 3] and keys[4:] == [1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633]


def test_cf_geographic_wkt2_and_rotated_transform(fs):
    geo_array(fs, WGS84_WKT2, "10.0 0.01 0.001 50.0 0.0 -0.01")
    tags, _ = page_of(fs.read_file("tiff/exp/ndvi.tif"))
    assert "ModelPixelScaleTag" not in tags
    assert list(tags["ModelTransformationTag"])[:8] == [0.01, 0.001, 0.0, 10.0, 0.0, -0.01, 0.0, 50.0]
    assert list(tags["GeoKeyDirectoryTag"])[4:] == [1024, 0, 1, 2, 1025, 0, 1, 1, 2048, 0, 1, 4326]


def test_cf_grid_mapping_without_transform_or_with_garbage_adds_nothing(fs):
    geo_array(fs, UTM33, "not numbers")
    tags, _ = page_of(fs.read_file("tiff/exp/ndvi.tif"))
    assert not {"ModelPixelScaleTag", "ModelTransformationTag", "GeoKeyDirectoryTag"} & set(tags)


def test_cf_grid_mapping_without_geotransform_takes_evenly_spaced_coordinates(fs):
    """rioxarray's ``write_crs`` alone, or any CF writer: the CRS on the grid mapping, the
    pixel centres in the ``x``/``y`` coordinate variables."""
    data = np.arange(32 * 48, dtype=np.int16).reshape(32, 48)
    zarr_array(fs, "zarr/exp.zarr/spatial_ref", np.zeros((), np.int64), (), None, {"crs_wkt": UTM33})
    zarr_array(fs, "zarr/exp.zarr/x", 500015.0 + 30 * np.arange(48), (20,), ["x"])
    zarr_array(fs, "zarr/exp.zarr/y", 3999985.0 - 30 * np.arange(32), (32,), ["y"])
    zarr_array(fs, "zarr/exp.zarr/ndvi", data, (16, 16), ["y", "x"], {"grid_mapping": "spatial_ref"})
    tags, pixels = page_of(fs.read_file("tiff/exp/ndvi.tif"))
    np.testing.assert_array_equal(pixels, data)
    assert list(tags["ModelPixelScaleTag"]) == [30.0, 30.0, 0.0]
    assert list(tags["ModelTiepointTag"]) == [0.0, 0.0, 0.0, 500000.0, 4000000.0, 0.0]
    assert list(tags["GeoKeyDirectoryTag"])[-4:] == [3072, 0, 1, 32633]


def test_unevenly_spaced_coordinates_give_no_transform(fs):
    data = np.arange(32 * 48, dtype=np.int16).reshape(32, 48)
    zarr_array(fs, "zarr/exp.zarr/spatial_ref", np.zeros((), np.int64), (), None, {"crs_wkt": UTM33})
    zarr_array(fs, "zarr/exp.zarr/x", np.cumsum(np.arange(1, 49, dtype="f8")), (48,), ["x"])
    zarr_array(fs, "zarr/exp.zarr/y", 3999985.0 - 30 * np.arange(32), (32,), ["y"])
    zarr_array(fs, "zarr/exp.zarr/ndvi", data, (16, 16), ["y", "x"], {"grid_mapping": "spatial_ref"})
    tags, _ = page_of(fs.read_file("tiff/exp/ndvi.tif"))
    assert "ModelPixelScaleTag" not in tags and "ModelTransformationTag" not in tags


def test_cf_grid_mapping_of_a_transposed_array_adds_nothing(fs):
    data = np.arange(48 * 32, dtype=np.int16).reshape(48, 32)  # (x, y): rows run along x
    zarr_array(fs, "zarr/exp.zarr/spatial_ref", np.zeros((), np.int64), (), None,
               {"crs_wkt": UTM33, "GeoTransform": "500000.0 30.0 0.0 4000000.0 0.0 -30.0"})
    zarr_array(fs, "zarr/exp.zarr/t", data, (16, 16), ["x", "y"], {"grid_mapping": "spatial_ref"})
    tags, pixels = page_of(fs.read_file("tiff/exp/t.tif"))
    np.testing.assert_array_equal(pixels, data)
    assert not {"ModelPixelScaleTag", "ModelTransformationTag", "GeoKeyDirectoryTag"} & set(tags)


def test_wkt_crs():
    from polyfs.formats.tiff.geo import wkt_crs

    assert wkt_crs(UTM33) == (1, 32633)
    assert wkt_crs(WGS84_WKT2) == (2, 4326)
    assert wkt_crs('PROJCS["local",GEOGCS["x"],UNIT["metre",1]]') == (1, None)
    assert wkt_crs('COMPD_CS["x",PROJCS["y"]]') is None and wkt_crs(None) is None
