"""GDAL's Zarr driver writing into the Zarr view of a mount, exploratory round 20.

- rasterio (its wheel's GDAL 3.10) writing ``driver="Zarr", FORMAT="ZARR_V3"`` into ``zarr/``
  reported success, but the view refused every array ``zarr.json`` it wrote (no array-to-bytes
  codec: GDAL leaves ``codecs`` out, or names only ``gzip``/``blosc``) at a close GDAL does not
  check: nothing was stored and the chunk files vanished at unmount. Such arrays are now read as
  GDAL means them (raw little-endian elements) and stored: the raster, its X/Y coordinate arrays,
  read back equal through zarr-python, the HDF5 view and the TIFF view, after a remount too;
- the system's GDAL 3.6 writes ``-co FORMAT=ZARR_V3`` as a draft of Zarr v3 (``meta/``,
  ``data/``): its metadata files are refused when made, so ``gdal_translate`` prints an error
  naming them, and no array appears;
- what holds (checked, not pinned before): ``gdalmdiminfo`` and ``gdalinfo -checksum`` of a
  netCDF-4 file in ``hdf5/`` (groups, CF attributes, ``NETCDF:``/``HDF5:`` subdatasets) say what
  they say of the local original, and ``gdalmdimtranslate -of netCDF`` into ``hdf5/`` reads back as
  the same command's local output.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

h5py = pytest.importorskip("h5py")
netCDF4 = pytest.importorskip("netCDF4")
zarr = pytest.importorskip("zarr")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path, "seed.h5")


def rasterio_zarr():
    rasterio = pytest.importorskip("rasterio")
    with rasterio.Env() as env:
        if "Zarr" not in env.drivers():
            pytest.skip("rasterio's GDAL has no Zarr driver")
    return rasterio


@pytest.mark.parametrize("compress", ["NONE", "GZIP", "BLOSC"])
def test_rasterio_zarr_v3_written_into_zarr_view_is_stored(mount_store, store, tmp_path, compress):
    rasterio = rasterio_zarr()
    from rasterio.transform import from_origin

    data = (np.arange(3 * 37 * 45) % 251).astype("int16").reshape(3, 37, 45) - 100
    m = mount_store(str(store))
    path = m.path / "zarr" / "rz.zarr"
    with rasterio.open(path, "w", driver="Zarr", width=45, height=37, count=3, dtype="int16", FORMAT="ZARR_V3",
                       BLOCKSIZE="1,16,16", COMPRESS=compress, crs="EPSG:32633",
                       transform=from_origin(500000, 4000000, 10, 10)) as d:
        d.write(data)
    x = 500005.0 + 10 * np.arange(45)
    for attempt in range(2):  # as written, then after a remount
        g = zarr.open_group(m.path / "zarr" / "rz.zarr", mode="r")
        np.testing.assert_array_equal(g["rz"][...], data)
        np.testing.assert_array_equal(g["X"][...], x)
        with h5py.File(m.path / "hdf5" / "rz.h5", "r") as f:
            np.testing.assert_array_equal(f["rz"][...], data)
        tifffile = pytest.importorskip("tifffile")
        np.testing.assert_array_equal(tifffile.imread(m.path / "tiff" / "rz" / "rz.tif"), data)
        if attempt == 0:
            m.stop()
            m = mount_store(str(store))
    m.stop()
    deep_check(store)


@pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")
def test_gdal36_draft_zarr_v3_is_refused_with_an_error(mount_store, store, tmp_path):
    ver = subprocess.run(["gdal-config", "--version"], capture_output=True, text=True).stdout \
        if shutil.which("gdal-config") else subprocess.run(["gdalinfo", "--version"], capture_output=True,
                                                           text=True).stdout
    if tuple(int(x) for x in re.findall(r"(\d+)\.(\d+)", ver)[0]) >= (3, 8):
        pytest.skip("GDAL 3.8 and later write Zarr v3 as released")
    src = tmp_path / "src.tif"
    tifffile = pytest.importorskip("tifffile")
    tifffile.imwrite(src, np.arange(40 * 50, dtype="uint16").reshape(40, 50))
    m = mount_store(str(store))
    res = subprocess.run(["gdal_translate", "-q", "-of", "Zarr", "-co", "FORMAT=ZARR_V3", str(src),
                          str(m.path / "zarr" / "d3.zarr")], capture_output=True, text=True, timeout=120)
    assert "array.json" in res.stderr or res.returncode != 0, res.stderr
    m.stop()
    info = subprocess.run([str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "polyfs"), "info",
                           str(store), "/d3.h5"], capture_output=True, text=True)
    assert " 0 datasets" in info.stdout or info.returncode != 0, info.stdout
    deep_check(store)


def write_netcdf(path: Path) -> np.ndarray:
    tas = np.arange(4 * 20 * 30, dtype="f4").reshape(4, 20, 30)
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("lat", 20)
        d.createDimension("lon", 30)
        t = d.createVariable("time", "f8", ("time",))
        t.units, t.standard_name = "days since 2000-01-01", "time"
        t[:] = np.arange(4)
        lat = d.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lat[:] = np.linspace(-47.5, 42.5, 20)
        lon = d.createVariable("lon", "f4", ("lon",))
        lon.units = "degrees_east"
        lon[:] = np.linspace(0, 290, 30)
        v = d.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(1, 10, 15), fill_value=-999.0)
        v.units, v.long_name = "K", "temp"
        v[:] = tas
        g = d.createGroup("sub")
        g.createDimension("z", 5)
        g.createVariable("z", "i4", ("z",))[:] = np.arange(5)
        g.createVariable("w", "i2", ("z", "lat"), zlib=True)[:] = np.arange(100).reshape(5, 20)
        d.title = "test"
    return tas


def _mdim(path: Path) -> dict:
    out = subprocess.run(["gdalmdiminfo", str(path)], capture_output=True, text=True, check=True, timeout=120).stdout
    info = json.loads(out)

    def strip(node):  # storage layout (chunking, compression) may differ; names and values may not
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in ("block_size", "structural_info")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return strip(info)


@pytest.mark.skipif(any(shutil.which(t) is None for t in ("gdalmdiminfo", "gdalmdimtranslate", "gdalinfo")),
                    reason="needs GDAL's multidimensional CLI")
def test_gdal_multidim_of_a_grouped_netcdf_in_hdf5_view_matches_local(mount_store, tmp_path):
    from polyfs.importers import import_source

    local = tmp_path / "clim.nc"
    write_netcdf(local)
    store = tmp_path / "store"
    import_source(local, str(store), domain="/clim.nc", progress=False)
    m = mount_store(str(store))
    view = m.path / "hdf5" / "clim.nc"
    assert _mdim(view) == _mdim(local)
    for sub in ('NETCDF:"{}":tas', 'HDF5:"{}"://sub/w', 'NETCDF:"{}":/sub/w'):
        sums = [re.findall(r"Checksum=(\d+)", subprocess.run(["gdalinfo", "-checksum", sub.format(p)],
                                                             capture_output=True, text=True, timeout=120).stdout)
                for p in (local, view)]
        assert sums[0] and sums[0] == sums[1], sub
    out, ref = m.path / "hdf5" / "mt.nc", tmp_path / "mt.nc"
    for dst in (out, ref):
        subprocess.run(["gdalmdimtranslate", "-q", "-of", "netCDF", str(local), str(dst)], check=True,
                       capture_output=True, timeout=120)
    assert _mdim(out) == _mdim(ref)
    m.stop()
    deep_check(store)
