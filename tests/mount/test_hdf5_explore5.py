"""The HDF5 view as users use it, fifth round (real mount).

What this module pins:

- A scalar dataset of a variable-length type (h5py ``create_dataset("s", data="hello")``)
  was stored as written, but the next ``r+`` session that changed anything else in the
  file (a resize, one value, an attribute) rewrote the page holding its heap, and it was
  stored again as the memory of a numpy array object: garbage (a pointer), a different
  one each time, in every view. A file holding a scalar of an array type (``"(2,2)f4"``)
  or a scalar sequence (``vlen_dtype``) could not be written at all (``EINVAL``).
- ``h5repack -f SOFF=3,DSCALE in.nc hdf5/out.nc`` (an *optional* scale-offset filter on every
  dataset; HDF5 skips it for every chunk of an integer one, filter mask set) was refused
  whole with ``EOPNOTSUPP``: the store has no per-chunk filter mask and the filter cannot
  be applied to those chunks here either. Such a dataset is stored as HDF5 reads it, with
  the default encoding (one log line); datasets whose chunks it did filter keep it.
- A new file with a user block holding data (``h5jam -u header.txt``, or ``cp`` of such a
  file) was stored without it, not a word said: the view's file starts with its
  superblock. It is refused (``EOPNOTSUPP``, one log line), the store unchanged; a user
  block of zeros (h5py ``userblock_size=``) holds nothing and the file is stored, and so
  is a polyglot file's (its TIFF header is the views' own).
- xarray's ``to_netcdf`` of a realistic dataset (time with units and calendar, packed
  int16 with scale_factor/add_offset and _FillValue, float32 with _FillValue, zlib and
  shuffle, a string coordinate, 2-D lat/lon, an unlimited dimension) through ``hdf5/``
  with both engines, then appends along the unlimited dimension (netCDF4 ``"a"``,
  h5netcdf ``resize_dimension``), a variable added, an attribute deleted: xarray (both
  engines), ``ncdump`` and the zarr/ view read what the same steps give on a local disk.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")
netCDF4 = pytest.importorskip("netCDF4")
h5netcdf = pytest.importorskip("h5netcdf")
zarr = pytest.importorskip("zarr")

from test_hdf5_tools_explore import check_deep, seeded_store, snapshot, write_with_h5py  # noqa: F401


def _python(code: str, *args) -> str:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


SCALARS = """
    import sys, h5py, numpy as np
    with h5py.File(sys.argv[1], "w") as f:
        f.create_dataset("s", data="hello")
        f.create_dataset("seq", shape=(), dtype=h5py.vlen_dtype("f8"))
        f["seq"][()] = np.arange(3.0)
        f.create_dataset("vec", shape=(), dtype=np.dtype("(2,2)f4"))
        f["vec"][()] = [[1, 2], [3, 4]]
        f.create_dataset("grow", data=np.arange(4.0), chunks=(2,), maxshape=(None,))
"""


def _scalars_ok(path) -> None:
    with h5py.File(path) as f:
        assert f["s"][()] == b"hello"
        np.testing.assert_array_equal(f["seq"][()], np.arange(3.0))
        np.testing.assert_array_equal(f["vec"][()], [[1, 2], [3, 4]])


def test_scalar_strings_and_sequences_survive_later_sessions(mount_store, seeded_store):
    m = mount_store(str(seeded_store))
    path = m.path / "hdf5" / "sc.h5"
    _python(SCALARS, path)
    _scalars_ok(path)
    for k in range(3):
        with h5py.File(path, "r+") as f:
            if k == 0:
                f["grow"].resize((7,))
            elif k == 1:
                f["grow"][0] = -1
            else:
                f.attrs["k"] = k
        _scalars_ok(path)
    dump = subprocess.run(["h5dump", "-d", "/s", str(path)], capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0 and '"hello"' in dump.stdout, dump.stdout + dump.stderr
    assert zarr.open_array(str(m.path / "zarr" / "sc.zarr" / "s"), mode="r")[()] == "hello"
    m.stop()
    check_deep(seeded_store)
    m2 = mount_store(str(seeded_store))
    _scalars_ok(m2.path / "hdf5" / "sc.h5")


# -- xarray / netCDF ------------------------------------------------------------------------
def _climate() -> tuple[xr.Dataset, dict]:
    rng = np.random.default_rng(0)
    nt, ny, nx = 6, 5, 4
    temp = (280 + 10 * rng.standard_normal((nt, ny, nx))).astype("f4")
    temp[0, 0, 0] = np.nan
    precip = rng.random((nt, ny, nx)) * 50
    precip[1, 2, 3] = np.nan
    ds = xr.Dataset(
        {"temp": (("time", "y", "x"), temp, {"long_name": "air temperature", "units": "K"}),
         "precip": (("time", "y", "x"), precip, {"units": "mm"}),
         "count": (("time", "x"), rng.integers(0, 100, (nt, nx)).astype("i4"))},
        coords={"time": pd.date_range("2000-01-01", periods=nt, freq="6h"),
                "lat": (("y", "x"), np.linspace(-10, 10, ny)[:, None] + np.zeros((ny, nx)), {"units": "degrees_north"}),
                "lon": (("y", "x"), np.zeros((ny, 1)) + np.linspace(100, 130, nx), {"units": "degrees_east"}),
                "station": (("x",), np.array(["alpha", "beta", "gamma", "delta"], dtype=object))},
        attrs={"title": "explore5", "history": "made by test", "version": 3})
    enc = {"time": {"units": "hours since 2000-01-01", "calendar": "proleptic_gregorian", "dtype": "f8"},
           "temp": {"dtype": "f4", "_FillValue": -999.0, "zlib": True, "complevel": 4, "shuffle": True,
                    "chunksizes": (2, 5, 4)},
           "precip": {"dtype": "i2", "scale_factor": 0.01, "add_offset": 0.0, "_FillValue": -32768, "zlib": True,
                      "chunksizes": (3, 5, 2)},
           "count": {"zlib": True, "shuffle": True}}
    return ds, enc


def _edit(path, engine: str) -> None:
    """Three appends along the unlimited dimension, a new variable, an attribute deleted."""
    for k in range(3):
        if engine == "netcdf4":
            with netCDF4.Dataset(path, "a") as nc:
                n = len(nc.dimensions["time"])
                nc["time"][n:n + 2] = [100.0 + 6 * k, 103.0 + 6 * k]
                nc["temp"][n:n + 2] = np.full((2, 5, 4), 300 + k, "f4")
                nc["precip"][n:n + 2] = np.full((2, 5, 4), 1.5 + k)
                nc["count"][n:n + 2] = np.full((2, 4), 7 + k)
        else:
            with h5netcdf.File(path, "a") as f:
                n = f.dimensions["time"].size
                f.resize_dimension("time", n + 2)
                f["time"][n:n + 2] = [200.0 + k, 201.0 + k]
                f["temp"][n:n + 2] = np.full((2, 5, 4), 250 + k, "f4")
                f["count"][n:n + 2] = k
    if engine == "netcdf4":
        with netCDF4.Dataset(path, "a") as nc:
            v = nc.createVariable("extra", "f8", ("y", "x"), zlib=True, fill_value=-1.0)
            v[:] = np.arange(20.0).reshape(5, 4)
            del nc["temp"].long_name
            nc.delncattr("history")
    else:
        with h5netcdf.File(path, "a") as f:
            f.create_variable("extra", ("y",), data=np.arange(5.0), fillvalue=np.nan)
            del f["precip"].attrs["units"]


def _same(ref, path, **kw) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for engine in ("netcdf4", "h5netcdf"):
            for opts in ({}, {"mask_and_scale": False, "decode_times": False}):
                want = xr.open_dataset(ref, engine=engine, **opts).load()
                got = xr.open_dataset(path, engine=engine, **opts).load()
                xr.testing.assert_identical(want, got)
                assert got.encoding["unlimited_dims"] == {"time"}


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_xarray_netcdf_round_trip_with_appends(mount_store, seeded_store, tmp_path, engine):
    ds, enc = _climate()
    if engine == "h5netcdf":  # h5netcdf spells compression its own way
        for v in enc.values():
            if v.pop("zlib", None):
                v["compression"] = "gzip"
            v.pop("complevel", None)
    m = mount_store(str(seeded_store))
    local, mounted = tmp_path / "local.nc", m.path / "hdf5" / "clim.nc"
    for p in (local, mounted):
        ds.to_netcdf(p, engine=engine, encoding=enc, unlimited_dims=["time"])
    _same(local, mounted)
    for p in (local, mounted):
        _edit(p, engine)
    _same(local, mounted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = xr.open_dataset(local).load()
        for opts in ({}, {"mask_and_scale": False, "decode_times": False}):
            z = xr.open_zarr(m.path / "zarr" / "clim.nc.zarr", consolidated=False, **opts).load()
            xr.testing.assert_identical(xr.open_dataset(local, **opts).load(), z)
    assert want.sizes["time"] == 12
    dumps = [subprocess.run(["ncdump", str(p)], capture_output=True, text=True, timeout=60) for p in (local, mounted)]
    assert all(d.returncode == 0 for d in dumps)
    assert dumps[0].stdout.split("\n", 1)[1] == dumps[1].stdout.split("\n", 1)[1]
    m.stop()
    check_deep(seeded_store)
    assert os.path.exists(seeded_store / "clim.nc" / ".domain.json")


def test_h5repack_optional_scale_offset_skipped_for_integer_datasets(mount_store, seeded_store, tmp_path):
    ds, enc = _climate()
    src, local = tmp_path / "src.nc", tmp_path / "soff.nc"
    ds.to_netcdf(src, encoding=enc, unlimited_dims=["time"])
    subprocess.run(["h5repack", "-f", "SOFF=3,DSCALE", str(src), str(local)], check=True, timeout=120)
    m = mount_store(str(seeded_store))
    out = m.path / "hdf5" / "soff.nc"
    res = subprocess.run(["h5repack", "-f", "SOFF=3,DSCALE", str(src), str(out)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr + m.log_text()[-2000:]
    assert "optional filter scaleoffset (6) was skipped" in m.log_text()
    with h5py.File(local) as a, h5py.File(out) as b:
        masks: list[int] = []
        a["precip"].id.chunk_iter(lambda i: masks.append(i.filter_mask))
        assert masks and all(masks)  # the premise: HDF5 skipped it on every integer chunk
        for name in ("precip", "count", "temp", "lat", "time"):
            np.testing.assert_array_equal(b[name][()], a[name][()])
        assert b["temp"].scaleoffset == a["temp"].scaleoffset  # filtered chunks keep the filter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.testing.assert_identical(xr.open_dataset(local).load(), xr.open_dataset(out).load())
    m.stop()
    check_deep(seeded_store)


def test_a_user_block_holding_data_is_refused(mount_store, seeded_store, tmp_path):
    header = tmp_path / "header.txt"
    header.write_bytes(b"MY HEADER v1\n" * 6000)  # a 128 KiB user block: over the 64 KiB the store keeps
    src, jammed = tmp_path / "src.h5", tmp_path / "jammed.h5"
    with h5py.File(src, "w") as f:
        f["a"] = np.arange(5)
    subprocess.run(["h5jam", "-i", str(src), "-u", str(header), "-o", str(jammed)], check=True, timeout=60)
    assert jammed.read_bytes().startswith(b"MY HEADER v1")
    before = snapshot(seeded_store)
    m = mount_store(str(seeded_store))
    res = subprocess.run(["cp", str(jammed), str(m.path / "hdf5" / "j.h5")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and "not supported" in res.stderr, res.stderr
    subprocess.run(["h5jam", "-i", str(src), "-u", str(header), "-o", str(m.path / "hdf5" / "j2.h5")],
                   capture_output=True, timeout=60)  # h5jam ignores close()'s error: the log says
    assert not {"j.h5", "j2.h5"} & set(os.listdir(m.path / "hdf5"))
    assert m.log_text().count("user block holds data") == 2
    _python("""
        import sys, h5py, numpy as np
        with h5py.File(sys.argv[1], "w", userblock_size=512) as f:
            f["a"] = np.arange(3)
    """, m.path / "hdf5" / "zeros.h5")
    with h5py.File(m.path / "hdf5" / "zeros.h5") as f:
        np.testing.assert_array_equal(f["a"][()], np.arange(3))
    img = np.arange(128 * 128, dtype="u2").reshape(128, 128)
    write_with_h5py("""
        with h5py.File(path, "w") as f:
            f.create_dataset("img", data=np.arange(128 * 128, dtype="u2").reshape(128, 128), chunks=(64, 64),
                             **hdf5plugin.Zstd())
    """, m.path / "hdf5" / "img.h5")
    poly = m.path / "polyglot" / "img" / "img.h5"
    assert poly.read_bytes()[:4] in (b"II*\x00", b"MM\x00*")  # the premise: a TIFF header as user block
    subprocess.run(["cp", str(poly), str(m.path / "hdf5" / "img2.h5")], check=True, timeout=60)
    with h5py.File(m.path / "hdf5" / "img2.h5") as f:
        np.testing.assert_array_equal(f["img"][()], img)
    m.stop()
    after = snapshot(seeded_store)
    assert {k: v for k, v in after.items() if k in before and not k.startswith("polyfs/")} == \
        {k: v for k, v in before.items() if not k.startswith("polyfs/")}
    assert not (seeded_store / "j.h5").exists() and not (seeded_store / "j2.h5").exists()
    check_deep(seeded_store)


def test_an_attribute_written_again_moves_last_as_in_hdf5(mount_store, tmp_path):
    """netCDF-C (and h5py) change an attribute by deleting and writing it again: in a file that
    tracks attribute creation order it is then last, and ``ncdump -h`` lists it last. The view
    kept it in its old place, so ``ncdump`` of the view differed from the same steps on a local
    file. An object that does not track the order (h5py's default) keeps the store's order."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    dumps = []
    for path in (tmp_path / "local.nc", m.path / "hdf5" / "v.nc"):
        with netCDF4.Dataset(path, "w") as d:
            d.createDimension("t", None)
            v = d.createVariable("temp", "f4", ("t",))
            v.units, v.long_name, v.comment = "K", "temperature", "c"
            d.title, d.history = "x", "h"
            v[:3] = [1, 2, 3]
        with netCDF4.Dataset(path, "a") as d:
            d["temp"].units = "degC"
            d.title = "y"
        dumps.append(subprocess.run(["ncdump", "-h", str(path)], capture_output=True, text=True,
                                    check=True).stdout.splitlines()[1:])
    assert dumps[0] == dumps[1]
    assert list(xr.open_dataset(m.path / "hdf5" / "v.nc")["temp"].attrs)[-1] == "units"
    with h5py.File(m.path / "hdf5" / "p.h5", "w") as f:  # no creation order tracked
        f.create_dataset("d", data=np.arange(3)).attrs.update({"b": 1, "a": 2, "c": 3})
    with h5py.File(m.path / "hdf5" / "p.h5", "r+") as f:
        f["d"].attrs["a"] = 5
    with h5py.File(m.path / "hdf5" / "p.h5", "r") as f:
        assert list(f["d"].attrs) == ["a", "b", "c"] and f["d"].attrs["a"] == 5
    check_deep(store)
