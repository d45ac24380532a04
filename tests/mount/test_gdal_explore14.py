"""GDAL as a user of a mount (its GTiff, netCDF and HDF5 drivers), exploratory round 14: what it
found and what now holds.

- ``gdal_translate -of netCDF -co FORMAT=NC4`` of a GeoTIFF into ``hdf5/`` (GDAL's default
  ``WRITE_BOTTOMUP=YES``: rows stored south to north, the ``y`` coordinate ascending, the grid
  mapping's ``GeoTransform`` north up) made a ``tiff/<file>/Band1.tif`` placed upside down on
  its map: ``gdallocationinfo -geoloc`` of a point gave the value of the mirrored row. It is now
  georeferenced as its rows are stored (origin at the southern edge, rows going north), so every
  point reads the source's value, and ``gdalwarp`` of it gives back the source's picture;
- ``gdal_edit.py -a_nodata`` (or ``-mo``) on such a band's file stored the georeferencing the view
  had derived from the CF grid mapping as GeoTIFF attributes of the netCDF variable
  (``ModelTransformationTag``, ``GeoKeyDirectoryTag`` in ``ncdump -h``), which then hid any later
  change of the grid mapping. Only what the editor changed is stored now; an edit of the
  georeferencing itself (``-a_srs``, ``-unsetgt``) is stored whole, as before;
- what holds (checked here, not pinned before): the netCDF file reads back through GDAL's netCDF
  and HDF5 drivers with the source's checksums, through h5py with its values, after a remount
  too, and ``polyfs check --deep`` is clean.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("gdal_translate", "gdalinfo", "gdallocationinfo", "gdalwarp")),
    reason="needs GDAL")

ROWS, COLS = 64, 80
# (easting, northing) inside pixels, away from their edges (an edge reads either neighbour)
POINTS = [(500105.0, 3999903.0), (500707.0, 3999404.0), (500333.0, 3999777.0), (500795.0, 3999362.0)]


def run(*cmd: str) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=120, check=True).stdout


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path, "seed.h5")


@pytest.fixture
def geotiff(tmp_path) -> Path:
    """A 3-band UTM GeoTIFF, north up, 10 m pixels, every row different."""
    y, x = np.mgrid[0:ROWS, 0:COLS]
    bands = np.stack([(y * 3 + x) % 251, (y * 7 + 2 * x) % 253, (y + x * 5) % 241]).astype("u1")
    raw = tmp_path / "raw.tif"
    import tifffile

    tifffile.imwrite(raw, bands, photometric="minisblack", planarconfig="separate")
    out = tmp_path / "rgb.tif"
    run("gdal_translate", "-q", "-a_srs", "EPSG:32633", "-a_ullr", "500000", "4000000", "500800", "3999360",
        str(raw), str(out))
    return out


def value_at(path: Path, e: float, n: float) -> list[str]:
    return run("gdallocationinfo", "-valonly", "-geoloc", str(path), str(e), str(n)).split()


def checksums(name: str) -> list[str]:
    return re.findall(r"Checksum=(\d+)", run("gdalinfo", "-checksum", "--config", "GDAL_PAM_ENABLED", "NO", name))


@pytest.mark.parametrize("bottom_up", ["YES", "NO"])
def test_gdal_netcdf_written_into_hdf5_is_placed_right_in_tiff(mount_store, store, geotiff, tmp_path, bottom_up):
    m = mount_store(str(store))
    nc = m.path / "hdf5" / "gd.nc"
    run("gdal_translate", "-q", "-of", "netCDF", "-co", "FORMAT=NC4", "-co", "COMPRESS=DEFLATE",
        "-co", f"WRITE_BOTTOMUP={bottom_up}", str(geotiff), str(nc))
    local = tmp_path / "local.nc"
    run("gdal_translate", "-q", "-of", "netCDF", "-co", "FORMAT=NC4", "-co", "COMPRESS=DEFLATE",
        "-co", f"WRITE_BOTTOMUP={bottom_up}", str(geotiff), str(local))
    src_sums = checksums(str(geotiff))

    def check(root: Path) -> None:
        view = root / "hdf5" / "gd.nc"
        for b in (1, 2, 3):  # GDAL's netCDF and HDF5 drivers read what GDAL wrote
            assert checksums(f'NETCDF:"{view}":Band{b}') == [src_sums[b - 1]]
            assert checksums(f'HDF5:"{view}"://Band{b}') == checksums(f'HDF5:"{local}"://Band{b}')
        with h5py.File(view, "r") as f, h5py.File(local, "r") as g:
            for name in ("Band1", "Band2", "Band3", "x", "y"):
                np.testing.assert_array_equal(f[name][...], g[name][...])
        for b in (1, 2, 3):  # each band's TIFF lies where the source does
            band = root / "tiff" / "gd.nc" / f"Band{b}.tif"
            for e, n in POINTS:
                assert value_at(band, e, n) == [value_at(geotiff, e, n)[b - 1]], (b, e, n)
        warped = tmp_path / f"warped_{bottom_up}.tif"
        run("gdalwarp", "-q", "-overwrite", str(root / "tiff" / "gd.nc" / "Band2.tif"), str(warped))
        assert checksums(str(warped)) == [src_sums[1]]

    check(m.path)
    m.stop()
    deep_check(store)
    m2 = mount_store(str(store))
    check(m2.path)


def test_gdal_edit_of_a_cf_band_stores_only_what_it_changed(mount_store, store, geotiff, tmp_path):
    if shutil.which("gdal_edit.py") is None:
        pytest.skip("needs gdal_edit.py")
    m = mount_store(str(store))
    run("gdal_translate", "-q", "-of", "netCDF", "-co", "FORMAT=NC4", str(geotiff), str(m.path / "hdf5" / "gd.nc"))
    band = m.path / "tiff" / "gd.nc" / "Band2.tif"
    before = [value_at(band, e, n) for e, n in POINTS]
    run("gdal_edit.py", "-a_nodata", "7", "-mo", "SOURCE=survey", str(band))
    geotiff_attrs = {"ModelPixelScaleTag", "ModelTiepointTag", "ModelTransformationTag", "GeoKeyDirectoryTag"}
    with h5py.File(m.path / "hdf5" / "gd.nc", "r") as f:
        attrs = dict(f["Band2"].attrs)
    assert not geotiff_attrs & set(attrs), sorted(attrs)
    assert attrs["GDAL_NODATA"] == "7" and "survey" in attrs["GDAL_METADATA"]
    info = run("gdalinfo", "--config", "GDAL_PAM_ENABLED", "NO", str(band))
    assert "NoData Value=7" in info and "UTM zone 33N" in info
    assert [value_at(band, e, n) for e, n in POINTS] == before
    run("gdal_edit.py", "-a_srs", "EPSG:32632", str(m.path / "tiff" / "gd.nc" / "Band3.tif"))  # a geo edit: stored
    m.stop()
    deep_check(store)
    m2 = mount_store(str(store))
    with h5py.File(m2.path / "hdf5" / "gd.nc", "r") as f:
        assert not geotiff_attrs & set(f["Band2"].attrs)
        assert {"GeoKeyDirectoryTag", "ModelTransformationTag"} <= set(f["Band3"].attrs)
    assert "UTM zone 32N" in run("gdalinfo", str(m2.path / "tiff" / "gd.nc" / "Band3.tif"))
    assert [value_at(m2.path / "tiff" / "gd.nc" / "Band3.tif", e, n) for e, n in POINTS[:2]] == \
        [[value_at(geotiff, e, n)[2]] for e, n in POINTS[:2]]


def stats(path: str) -> list[str]:
    """What ``gdalinfo -stats -checksum`` says of the pixels (type, statistics, checksum, signedness)."""
    out = run("gdalinfo", "-stats", "-checksum", "--config", "GDAL_PAM_ENABLED", "NO", path)
    return [ln.strip() for ln in out.splitlines()
            if ln.strip().startswith(("Band ", "Minimum=", "Checksum=", "PIXELTYPE="))]


def test_sample_types_gdal_reads_as_from_a_local_file(mount_store, tmp_path):
    """Int8 (GDAL 3.6: Byte with PIXELTYPE=SIGNEDBYTE), 64-bit integers, half floats and
    big-endian datasets: ``gdalinfo -stats -checksum`` of the view's file says what it says of
    tifffile's file of the same values."""
    import tifffile

    rng = np.random.default_rng(14)
    src = tmp_path / "types.h5"
    arrays = {}
    with h5py.File(src, "w") as f:
        for dt in ("i1", "i8", "u8", "f2", ">i2", ">f4"):
            a = (rng.random((50, 60)) * 200 - 100).astype(dt)
            name = "t_" + dt.replace(">", "be")
            f.create_dataset(name, data=a, chunks=(32, 32), compression="gzip")
            arrays[name] = a
    store = tmp_path / "store"
    import_source(src, str(store), progress=False)
    m = mount_store(str(store))
    for name, a in arrays.items():
        local = tmp_path / f"{name}.tif"
        tifffile.imwrite(local, a.astype(a.dtype.newbyteorder("=")), tile=(32, 32))
        assert stats(str(m.path / "tiff" / "types" / f"{name}.tif")) == stats(str(local)), name


def test_gdal_zarr_driver_on_the_zarr_view_fails_cleanly_or_reads_right(mount_store, store):
    """GDAL 3.6's Zarr driver knows only a draft of Zarr v3 (no sharding): it must say so and
    fail, never read other values; a later GDAL reads the view's values."""
    m = mount_store(str(store))
    want = checksums(str(m.path / "tiff" / "seed" / "seed.tif"))
    res = subprocess.run(["gdalinfo", "-checksum", f'ZARR:"{m.path / "zarr" / "seed.zarr"}":/seed'],
                         capture_output=True, text=True, timeout=120)
    if res.returncode == 0:
        assert re.findall(r"Checksum=(\d+)", res.stdout) == want
    else:
        assert "ERROR" in res.stderr and "Checksum" not in res.stdout
    m.stop()
    deep_check(store)
