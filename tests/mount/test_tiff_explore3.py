"""The TIFF view as GIS users use it (GDAL on a real mount): a GeoTIFF written into ``tiff/``
keeps where it lies on Earth.

- ``gdal_translate -of GTiff`` / ``-of COG`` of a georeferenced raster: the GeoTIFF tags (CRS
  keys and parameters, pixel scale and tiepoint) and GDAL's nodata and metadata tags were dropped,
  so ``gdalinfo`` of the view showed no CRS, a pixel geotransform and no nodata; they are now
  kept as attributes (shown by the other views too) and served back as the same tags;
- ``gdal_edit.py`` on the view's file (tags rewritten in place, tiles untouched) changes the
  CRS, geotransform and nodata it sets, ``-unsetnodata`` removes it.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import seeded_store


h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")

DOMAIN = "/geo.h5"
pytestmark = pytest.mark.skipif(shutil.which("gdalinfo") is None or shutil.which("gdal_translate") is None,
                                reason="needs GDAL")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path, "geo.h5")


def info(path: Path) -> dict:
    out = subprocess.run(["gdalinfo", "-json", "-checksum", str(path)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return json.loads(out)


def where(d: dict) -> tuple:
    """What says where a raster lies, its nodata, metadata and pixels (not how it is stored)."""
    bands = [(b["type"], b.get("noDataValue"), b.get("checksum"), b.get("description"), b.get("scale"),
              b.get("offset")) for b in d["bands"]]
    md = {k: v for k, v in d.get("metadata", {}).get("", {}).items() if not k.startswith("TIFFTAG_")}
    return d.get("coordinateSystem", {}).get("wkt"), d.get("geoTransform"), bands, md, d["size"]


def georeferenced(tmp_path: Path, data: np.ndarray, nodata: str) -> Path:
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, data, photometric="minisblack", planarconfig="separate" if data.ndim == 3 else None)
    out = tmp_path / "geo_src.tif"
    subprocess.run(["gdal_translate", "-q", "-a_srs", "EPSG:32633", "-a_ullr", "500000", "4200000", "503000",
                    "4198000", "-a_nodata", nodata, "-a_scale", "0.5", "-a_offset", "1", "-mo", "FOO=bar",
                    str(plain), str(out)], check=True, timeout=60)
    return out


CASES = [
    ("f32", np.float32, 1, ["-of", "GTiff", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", "-co", "PREDICTOR=3"]),
    ("i16pix", np.int16, 3, ["-of", "GTiff", "-co", "TILED=YES", "-co", "INTERLEAVE=PIXEL", "-co", "COMPRESS=ZSTD",
                             "-co", "PREDICTOR=2"]),
    ("u16band", np.uint16, 2, ["-of", "GTiff", "-co", "TILED=YES", "-co", "INTERLEAVE=BAND", "-co", "COMPRESS=LZW"]),
    ("bstrip", np.uint8, 1, ["-of", "GTiff"]),
    ("cog", np.uint8, 3, ["-of", "COG", "-co", "COMPRESS=DEFLATE", "-co", "BLOCKSIZE=128"]),
]


@pytest.mark.parametrize("name,dtype,bands,opts", CASES, ids=[c[0] for c in CASES])
def test_geotiff_written_by_gdal_keeps_crs_geotransform_nodata(mount_store, store, tmp_path, name, dtype, bands,
                                                              opts):
    rng = np.random.default_rng(1)
    shape = (bands, 200, 300) if bands > 1 else (200, 300)
    data = (rng.random(shape) * 200).astype(dtype)
    nodata = "-99" if np.dtype(dtype).kind in "if" else "255"
    src = georeferenced(tmp_path, data, nodata)
    local = tmp_path / f"{name}.tif"
    subprocess.run(["gdal_translate", "-q", *opts, str(src), str(local)], check=True, timeout=60)
    want = where(info(local))
    assert want[0] and want[1][0] == 500000 and want[2][0][1] is not None  # the case is georeferenced
    m = mount_store(str(store))
    view = m.path / "tiff" / "geo" / f"{name}.tif"
    subprocess.run(["gdal_translate", "-q", *opts, str(src), str(view)], check=True, timeout=60)
    assert where(info(view)) == want
    attrs = zarr.open_array(str(m.path / "zarr" / "geo.zarr" / name), mode="r").attrs
    assert attrs["GDAL_NODATA"] == nodata
    assert attrs["ModelPixelScaleTag"][:2] == [10.0, 10.0] and "GeoKeyDirectoryTag" in attrs
    with h5py.File(m.path / "hdf5" / "geo.h5", "r") as f:
        assert "FOO" in f[name].attrs["GDAL_METADATA"]


def test_gdal_edit_in_place_is_stored(mount_store, store, tmp_path):
    if shutil.which("gdal_edit.py") is None:
        pytest.skip("needs gdal_edit.py")
    data = np.arange(100 * 120, dtype="f4").reshape(100, 120)
    src = georeferenced(tmp_path, data, "-99")
    m = mount_store(str(store))
    view = m.path / "tiff" / "geo" / "e.tif"
    subprocess.run(["gdal_translate", "-q", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", str(src), str(view)],
                   check=True, timeout=60)
    before = info(view)
    subprocess.run(["gdal_edit.py", "-a_srs", "EPSG:4326", "-a_ullr", "10", "50", "22", "40", "-a_nodata", "7",
                    str(view)], check=True, timeout=60)
    attrs = zarr.open_array(str(m.path / "zarr" / "geo.zarr" / "e"), mode="r").attrs
    assert attrs["GDAL_NODATA"] == "7" and attrs["ModelPixelScaleTag"][:2] == [0.1, 0.1]
    after = info(view)
    assert after["geoTransform"] == [10.0, 0.1, 0.0, 50.0, 0.0, -0.1]
    assert "4326" in after["coordinateSystem"]["wkt"] and after["bands"][0]["noDataValue"] == 7
    assert after["bands"][0]["checksum"] == before["bands"][0]["checksum"]
    subprocess.run(["gdal_edit.py", "-unsetnodata", str(view)], check=True, timeout=60)
    attrs = zarr.open_array(str(m.path / "zarr" / "geo.zarr" / "e"), mode="r").attrs
    assert "GDAL_NODATA" not in attrs and "noDataValue" not in info(view)["bands"][0]
    np.testing.assert_array_equal(tifffile.imread(view), data)


def test_geo_attributes_made_elsewhere_are_served_only_when_well_formed(mount_store, store):
    m = mount_store(str(store))
    arr = zarr.open_array(str(m.path / "zarr" / "geo.zarr" / "seed"), mode="r+")
    arr.attrs.update({"GeoKeyDirectoryTag": [1, 1, 0], "ModelPixelScaleTag": "ten", "GDAL_NODATA": "5",
                      "ModelTiepointTag": [0, 0, 0, 100.0, 200.0, 0]})
    view = m.path / "tiff" / "geo" / "seed.tif"
    with tifffile.TiffFile(view) as t:
        tags = t.pages[0].tags
        assert 34735 not in tags and 33550 not in tags  # 3 keys, not a multiple of 4; text, not numbers
        assert tags[42113].value == "5" and list(tags[33922].value) == [0, 0, 0, 100.0, 200.0, 0]
        np.testing.assert_array_equal(t.asarray(), np.arange(32 * 32, dtype="u2").reshape(32, 32))
    assert info(view)["bands"][0]["noDataValue"] == 5
