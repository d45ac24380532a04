"""GDAL 3.6's writing command-line tools pointed at a mount, exploratory round 17: what holds
(checked here, not pinned before; no bug was found in this area this round).

- ``gdalwarp`` (new file, ``-overwrite``, ``TILED``/``DEFLATE``, ``-dstnodata``, ``-dstalpha``,
  ``SPARSE_OK``), ``gdal_merge.py -o``, ``gdal_calc.py --outfile``, ``gdaldem``,
  ``gdal_proximity.py``, ``nearblack -o``, ``gdal_fillnodata.py`` write new images into
  ``tiff/<domain>/``; ``gdal_rasterize`` and ``gdal_sieve.py`` change one in place: each reads back
  with the checksums, nodata and georeferencing of the same command run on a local disk, also
  after a remount, and ``polyfs check --deep`` is clean;
- ``gdal_rasterize`` burning into a netCDF file written into ``hdf5/`` (GDAL's netCDF driver in
  update mode) changes the same pixels as on a local disk;
- GDAL's PAM sidecar (``gdalinfo -stats`` writes ``<image>.tif.aux.xml``) is a scratch file: read
  back in the session, never stored (the store is byte-identical), gone after a remount.
"""
from __future__ import annotations

import errno
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check
from test_gdal_explore14 import run, store  # noqa: F401 - runner, fixture

TOOLS = ("gdalwarp", "gdalinfo", "gdal_translate", "gdal_rasterize", "gdal_merge.py", "gdal_calc.py",
         "gdal_sieve.py", "gdaldem", "gdal_proximity.py", "nearblack", "gdal_fillnodata.py")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="needs GDAL's tools")

VECTOR = ('{"type":"FeatureCollection","crs":{"type":"name","properties":{"name":"urn:ogc:def:crs:EPSG::32633"}},'
          '"features":[{"type":"Feature","properties":{},"geometry":{"type":"Polygon","coordinates":'
          '[[[500100,3999900],[500300,3999900],[500300,3999700],[500100,3999700],[500100,3999900]]]}}]}')


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    """A UTM byte image with nodata 0 and a hole of it, a float DEM on the same grid, a polygon."""
    import tifffile

    y, x = np.mgrid[0:64, 0:80]
    img = ((y * 3 + x) % 251).astype("u1")
    img[10:14, 10:14] = 0
    tifffile.imwrite(tmp_path / "raw.tif", img)
    tifffile.imwrite(tmp_path / "rawf.tif", (y * 0.5 + x).astype("f4"))
    geo = ["-a_srs", "EPSG:32633", "-a_ullr", "500000", "4000000", "500800", "3999360"]
    run("gdal_translate", "-q", *geo, "-a_nodata", "0", str(tmp_path / "raw.tif"), str(tmp_path / "g.tif"))
    run("gdal_translate", "-q", *geo, str(tmp_path / "rawf.tif"), str(tmp_path / "dem.tif"))
    (tmp_path / "vec.geojson").write_text(VECTOR)
    return {"g": tmp_path / "g.tif", "dem": tmp_path / "dem.tif", "vec": tmp_path / "vec.geojson"}


def summary(path: Path) -> list[str]:
    """What GDAL reads of an image, without its block layout or file-level tags."""
    out = run("gdalinfo", "-checksum", "-nomd", "--config", "GDAL_PAM_ENABLED", "NO", str(path))
    keep = ("Size is", "Origin", "Pixel Size", "Checksum", "NoData", "Type=", "ID[\"EPSG\"")
    return [re.sub(r"Block=\d+x\d+ ", "", ln.strip()) for ln in out.splitlines() if any(k in ln for k in keep)]


def commands(i: dict[str, Path]) -> list[list[str]]:
    """Each writes (or changes in place) ``{out}/<name>.tif``; ``{out}`` is the local or mounted dir."""
    g, dem, vec = str(i["g"]), str(i["dem"]), str(i["vec"])
    return [
        ["gdalwarp", "-q", "-t_srs", "EPSG:4326", g, "{out}/w.tif"],
        ["gdalwarp", "-q", "-overwrite", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", "-dstnodata", "255",
         g, "{out}/w.tif"],
        ["gdalwarp", "-q", "-dstalpha", g, "{out}/wa.tif"],
        ["gdalwarp", "-q", "-co", "TILED=YES", "-co", "SPARSE_OK=TRUE", "-dstnodata", "0",
         "-te", "499000", "3998000", "501000", "4001000", g, "{out}/sparse.tif"],
        ["gdalwarp", "-q", "-ot", "Float32", "-dstnodata", "nan", "-co", "COMPRESS=ZSTD", "-co", "PREDICTOR=3",
         "-co", "TILED=YES", dem, "{out}/fnan.tif"],
        ["gdal_merge.py", "-q", "-separate", "-co", "INTERLEAVE=BAND", "-co", "TILED=YES", "-ot", "Float32",
         "-o", "{out}/merged.tif", g, dem, g],
        ["gdal_rasterize", "-q", "-b", "2", "-burn", "7", vec, "{out}/merged.tif"],
        ["gdal_calc.py", "--quiet", "-A", g, "--outfile={out}/calc.tif", "--calc=A*2", "--NoDataValue=0"],
        ["gdal_calc.py", "--quiet", "-A", g, "--outfile={out}/calc.tif", "--calc=A/3.0", "--type=Float32",
         "--overwrite"],
        ["gdaldem", "hillshade", "-q", dem, "{out}/hs.tif"],
        ["gdaldem", "slope", "-q", "-co", "TILED=YES", dem, "{out}/slope.tif"],
        ["gdal_proximity.py", "-q", g, "{out}/prox.tif", "-values", "0"],
        ["nearblack", "-q", "-o", "{out}/nb.tif", g],
        ["gdal_fillnodata.py", "-q", g, "{out}/filled.tif"],
        ["gdal_translate", "-q", "-co", "TILED=YES", "-co", "COMPRESS=LZW", g, "{out}/burn.tif"],
        ["gdal_rasterize", "-q", "-b", "1", "-burn", "9", vec, "{out}/burn.tif"],
        ["gdal_sieve.py", "-q", "-st", "30", "-8", "{out}/burn.tif"],
    ]


NAMES = ("w", "wa", "sparse", "fnan", "merged", "calc", "hs", "slope", "prox", "nb", "filled", "burn")


def test_gdal_writers_into_tiff_match_a_local_disk_after_remount(mount_store, store, inputs, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    m = mount_store(str(store))
    out = m.path / "tiff" / "seed"
    for cmd in commands(inputs):
        for where in (local, out):
            run(*[c.replace("{out}", str(where)) for c in cmd])
    want = {n: summary(local / f"{n}.tif") for n in NAMES}
    assert {n: summary(out / f"{n}.tif") for n in NAMES} == want
    assert any("NoData Value=nan" in ln for ln in want["fnan"]) and any("EPSG" in ln for ln in want["w"])
    m.stop()
    m = mount_store(str(store))
    assert {n: summary(m.path / "tiff" / "seed" / f"{n}.tif") for n in NAMES} == want
    import tifffile

    for n in ("burn", "fnan", "merged"):  # the values, through zarr/ too
        zarr = pytest.importorskip("zarr")
        got = zarr.open_array(str(m.path / "zarr" / "seed.zarr" / n), mode="r")[...]
        np.testing.assert_array_equal(got, tifffile.imread(local / f"{n}.tif"))
    m.stop()
    deep_check(store)


def test_gdal_rasterize_into_a_netcdf_in_hdf5_burns_the_same_pixels(mount_store, store, inputs, tmp_path):
    m = mount_store(str(store))
    nc, local = m.path / "hdf5" / "gt.nc", tmp_path / "gt.nc"
    for dst in (local, nc):
        run("gdal_translate", "-q", "-of", "netCDF", "-co", "FORMAT=NC4", str(inputs["g"]), str(dst))
        run("gdal_rasterize", "-q", "-b", "1", "-burn", "7", str(inputs["vec"]), str(dst))
    assert summary(nc) == summary(local)
    inside, outside = ("500155", "3999855"), ("500155", "3999455")
    band = m.path / "tiff" / "gt.nc" / "Band1.tif"
    assert run("gdallocationinfo", "-valonly", "-geoloc", str(band), *inside).split() == ["7"]
    assert run("gdallocationinfo", "-valonly", "-geoloc", str(band), *outside).split() == \
        run("gdallocationinfo", "-valonly", "-geoloc", str(inputs["g"]), *outside).split()
    m.stop()
    m = mount_store(str(store))
    assert summary(m.path / "hdf5" / "gt.nc") == summary(local)
    m.stop()
    deep_check(store)


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_gdalinfo_stats_sidecar_is_scratch_not_stored(mount_store, store, inputs):
    m = mount_store(str(store))
    img = m.path / "tiff" / "seed" / "g.tif"
    shutil.copyfile(inputs["g"], img)
    before = _tree_digest(Path(store))
    stats = run("gdalinfo", "-stats", str(img))
    aux = img.with_name("g.tif.aux.xml")
    assert aux.exists() and "STATISTICS_MEAN" in aux.read_text()
    assert "STATISTICS_MEAN" in run("gdalinfo", str(img))  # read back from the sidecar in the session
    assert "Minimum=1.000, Maximum=250.000" in stats
    assert _tree_digest(Path(store)) == before  # nothing of the sidecar reached the store
    m.stop()
    m = mount_store(str(store))
    assert not (m.path / "tiff" / "seed" / "g.tif.aux.xml").exists()
    assert summary(m.path / "tiff" / "seed" / "g.tif") == summary(inputs["g"])
    m.stop()
    deep_check(store)


def test_gdalbuildvrt_into_tiff_is_refused_not_lost_at_unmount(mount_store, store, inputs):
    """A ``.vrt`` written beside the images was kept only in the daemon's memory: gdalbuildvrt
    exited 0 and the user's virtual raster was gone after a remount. Refused when made now
    (EOPNOTSUPP, one log line naming it), so GDAL fails visibly; the store is unchanged."""
    m = mount_store(str(store))
    img = m.path / "tiff" / "seed" / "g.tif"
    shutil.copyfile(inputs["g"], img)
    before = _tree_digest(Path(store))
    vrt = m.path / "tiff" / "seed" / "all.vrt"
    res = subprocess.run(["gdalbuildvrt", "-q", str(vrt), str(img)], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert not vrt.exists()
    with pytest.raises(OSError) as exc:
        vrt.write_text("<VRTDataset/>")
    assert exc.value.errno == errno.EOPNOTSUPP
    assert _tree_digest(Path(store)) == before
    lines = [ln for ln in m.log_text().splitlines() if "all.vrt" in ln]
    assert lines and all("virtual raster" in ln for ln in lines), lines
    m.stop()
