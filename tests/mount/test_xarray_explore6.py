"""Tier 3: a climate scientist's xarray workflows across the views, sixth round (real mount).

What this module pins:

- A Blosc-compressed array written through ``zarr/`` (xarray ``to_zarr`` with a
  ``BloscCodec``, as users pick for speed) was served in ``hdf5/`` under a *mandatory*
  blosc filter. The HDF5 blosc filter gives up on a chunk it cannot shrink (any chunk
  under blosc's 128-byte minimum, or incompressible data) and relies on being optional,
  as h5py and hdf5plugin make it: so netCDF4 ``"a"`` appending records to such a
  variable, or h5py ``r+`` writing into it, failed at flush with "filter returned
  failure" (netCDF: "HDF error" from ``close()``) and stored nothing. The view now serves
  blosc as optional; a chunk HDF5 then writes unfiltered is encoded at commit.
- xarray's ``_FillValue`` of a ``float32`` or ``int16`` array, written through ``zarr/``,
  arrived in ``hdf5/`` as a float64 / int64 attribute (JSON types it so). netCDF-C
  requires a ``_FillValue`` of its variable's type: ``nccopy`` of the view file failed
  ("Not a valid data type or _FillValue type mismatch") and ``ncdump`` showed
  ``-999.`` where a netCDF file has ``-999.f``. The view shows it with its variable's type
  (the store keeps it as written; an ``"a"`` session that leaves it alone stores nothing).
- xarray ``to_zarr`` of dask arrays into shards, ``append_dim`` steps, ``region=`` writes
  from several processes into disjoint parts of one shard, and ``mode="a"`` adding a
  variable read back the same through ``zarr/``, ``hdf5/`` (both engines) and ``n5/``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from support import deep_check

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")
pd = pytest.importorskip("pandas")
netCDF4 = pytest.importorskip("netCDF4")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    store.mkdir()
    return store


def _python(code: str, timeout: int = 120) -> str:
    """``code`` in a fresh interpreter (h5py with hdf5plugin's filters registered there)."""
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _blosc_dataset(rng: np.random.Generator) -> tuple[xr.Dataset, dict]:
    ny, nx, n = 6, 10, 8
    ds = xr.Dataset({"temp": (("time", "y", "x"), rng.random((n, ny, nx)).astype("f4"), {"units": "K"})},
                    coords={"time": pd.date_range("2001-01-01", periods=n, freq="6h"),
                            "y": np.arange(ny) * 1.0, "x": np.arange(nx) * 1.0})
    enc = {"temp": {"chunks": (2, 3, 5), "shards": (4, 6, 10), "_FillValue": -999.0,
                    "compressors": [zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")]},
           "time": {"units": "hours since 2001-01-01", "dtype": "i8", "chunks": (4,)}}
    return ds, enc


def test_netcdf4_appends_to_a_blosc_array_written_through_zarr(mount_store, tmp_path):
    rng = np.random.default_rng(6)
    store = _store(tmp_path)
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    ds, enc = _blosc_dataset(rng)
    ds.chunk({"time": 4}).to_zarr(str(m.path / "zarr" / "c.zarr"), zarr_format=3, mode="w", encoding=enc,
                                  consolidated=False)
    path = m.path / "hdf5" / "c.h5"
    new = rng.random((2, 6, 10)).astype("f4")  # incompressible: blosc gives up on these chunks
    with netCDF4.Dataset(path, "a") as nc:
        n = len(nc.dimensions["time"])
        nc["time"][n:n + 2] = [48, 54]
        nc["temp"][n:n + 2] = new
        v = nc.createVariable("sst", "f4", ("time", "y", "x"), fill_value=np.float32(-5))
        v[:] = 1.5
    want_temp = np.concatenate([ds.temp.values, new])
    z = xr.open_zarr(str(m.path / "zarr" / "c.zarr"), consolidated=False).load()
    np.testing.assert_array_equal(z.temp.values, want_temp)
    np.testing.assert_array_equal(z.sst.values, np.full((10, 6, 10), 1.5, "f4"))
    assert list(z.time.values[-2:]) == list(np.array(["2001-01-03T00:00", "2001-01-03T06:00"], "M8[ns]"))
    for engine in ("netcdf4", "h5netcdf"):
        with xr.open_dataset(path, engine=engine) as h:
            np.testing.assert_array_equal(h.temp.values, want_temp, err_msg=engine)
    # h5py r+ into the same array, random bytes in one chunk (HDF5 skips blosc for it)
    out = _python(f"""
        import h5py, hdf5plugin, numpy as np
        with h5py.File({str(path)!r}, "r+") as f:
            d = f["temp"]
            print(d.id.get_create_plist().get_filter(0)[1])
            d[0, :3, :5] = np.frombuffer(np.arange(15, dtype="u4").tobytes(), "f4").reshape(3, 5)
        with h5py.File({str(path)!r}, "r") as f:
            assert (f["temp"][0, :3, :5].view("u4") == np.arange(15).reshape(3, 5)).all()
    """)
    assert out.split() == ["1"]  # served optional, as h5py makes plugin filters
    z = zarr.open_array(str(m.path / "zarr" / "c.zarr" / "temp"), mode="r")
    assert (z[0, :3, :5].view("u4") == np.arange(15).reshape(3, 5)).all()
    np.testing.assert_array_equal(z[0, 3:], want_temp[0, 3:])
    m.stop()
    deep_check(store)


def _nc_header(path: Path) -> str:
    res = subprocess.run(["ncdump", "-h", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.split("\n", 1)[1]


def _stored_fill_types(store: Path) -> dict[str, str]:
    """{dataset id: the stored type of its ``_FillValue`` attribute}."""
    out = {}
    for p in store.glob("db/*/d/*/.dataset.json"):
        attrs = json.loads(p.read_text()).get("attributes", {})
        if "_FillValue" in attrs:
            out[p.parent.name] = json.dumps(attrs["_FillValue"]["type"], sort_keys=True)
    return out


def test_fill_values_written_through_zarr_have_their_variables_type(mount_store, tmp_path):
    store = _store(tmp_path)
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    ds = xr.Dataset({"t": (("x",), np.array([1, np.nan, 3, 4, 5, 6], "f4")),
                     "p": (("x",), np.array([0.5, 1.0, np.nan, 2.0, 2.5, 3.0])),
                     "u": (("x",), np.array([1, 2, 3, 4, 5, 6], "u1"))},
                    coords={"x": np.arange(6.0)})
    enc = {"t": {"_FillValue": np.float32(-1e30)},
           "p": {"dtype": "i2", "scale_factor": 0.5, "add_offset": 0.0, "_FillValue": -9999},
           "u": {"_FillValue": 255}}
    ds.to_zarr(str(m.path / "zarr" / "f.zarr"), zarr_format=3, mode="w", encoding=enc, consolidated=False)
    view = m.path / "hdf5" / "f.h5"
    local = tmp_path / "f.nc"
    ds.to_netcdf(local, encoding=enc)  # what netCDF makes of the same
    head = _nc_header(view)
    for want in ("t:_FillValue = -1.e+30f ;", "p:_FillValue = -9999s ;", "u:_FillValue = 255UB ;"):
        assert want in head and want in _nc_header(local), (want, head)
    copy = tmp_path / "copy.nc"
    res = subprocess.run(["nccopy", str(view), str(copy)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    for engine in ("netcdf4", "h5netcdf"):
        with xr.open_dataset(view, engine=engine) as a, xr.open_dataset(copy, engine=engine) as b, \
                xr.open_dataset(local, engine=engine) as c:
            xr.testing.assert_identical(a.load(), b.load())
            for v in ("t", "p", "u"):
                np.testing.assert_array_equal(a[v].values, c[v].values, err_msg=v)
                assert a[v].encoding["_FillValue"] == c[v].encoding["_FillValue"], v
    # an "a" session that changes something else stores the _FillValue attributes as they were
    before = _stored_fill_types(store)
    assert len(before) == 4 and all("64" in t for t in before.values())  # typed from JSON (x's NaN too)
    with netCDF4.Dataset(view, "a") as nc:
        nc["t"].units = "K"
        nc["p"][0] = 7.0
    assert _stored_fill_types(store) == before
    back = xr.open_zarr(str(m.path / "zarr" / "f.zarr"), consolidated=False).load()
    assert back.t.attrs["units"] == "K" and float(back.p[0]) == 7.0
    np.testing.assert_array_equal(back.t.values, ds.t.values)
    assert "-1.e+30f" in _nc_header(view)
    m.stop()
    deep_check(store)


def _stored_scale_attributes(store: Path) -> dict[str, object]:
    """{dataset id: its stored REFERENCE_LIST / DIMENSION_LIST values}."""
    out: dict[str, object] = {}
    for p in store.glob("db/*/d/*/.dataset.json"):
        attrs = json.loads(p.read_text()).get("attributes", {})
        for name in ("REFERENCE_LIST", "DIMENSION_LIST"):
            if name in attrs:
                out[f"{p.parent.name}:{name}"] = attrs[name]["value"]
    return out


def test_a_variable_added_through_zarr_to_a_netcdf_file_has_its_dimensions(mount_store, tmp_path):
    """xarray ``to_zarr(mode="a")`` of a new variable into the Zarr view of a netCDF file: it
    named its dimensions only in ``_ARRAY_DIMENSIONS``, and a domain with scales of its own
    got none synthesized, so netCDF readers saw ``orog(phony_dim_3, phony_dim_4)`` and
    xarray's netCDF4 engine dropped the variable altogether."""
    store = _store(tmp_path)
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    ds = xr.Dataset({"tas": (("time", "lat", "lon"), np.arange(60, dtype="f4").reshape(3, 4, 5), {"units": "K"})},
                    coords={"time": pd.date_range("2000-01-01", periods=3), "lat": [-10.0, 0.0, 10.0, 20.0],
                            "lon": np.arange(5.0) * 30})
    view, local = m.path / "hdf5" / "c.nc", tmp_path / "c.nc"
    for p in (view, local):
        ds.to_netcdf(p, unlimited_dims=["time"])
    orog = xr.Dataset({"orog": (("lat", "lon"), np.arange(20.0).reshape(4, 5), {"units": "m"}),
                       "snow": (("time", "lon"), np.ones((3, 5), "f4"))})
    orog.to_zarr(str(m.path / "zarr" / "c.nc.zarr"), mode="a", consolidated=False)
    orog.to_netcdf(local, mode="a")  # the same on a local file
    assert "phony" not in _nc_header(view)
    for engine in ("netcdf4", "h5netcdf"):
        with xr.open_dataset(view, engine=engine) as a, xr.open_dataset(local, engine=engine) as b:
            a, b = a.load(), b.load()
            assert a.orog.dims == ("lat", "lon") and a.snow.dims == ("time", "lon"), engine
            for v in b.variables:
                np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=f"{engine} {v}")
    # a netCDF session that leaves the dimensions alone stores none of what the view showed
    before = _stored_scale_attributes(store)
    with netCDF4.Dataset(view, "a") as nc:
        nc["tas"].comment = "edited"
    assert _stored_scale_attributes(store) == before
    # one that adds a variable stores the file's scales: every attachment once
    with netCDF4.Dataset(view, "a") as nc:
        nc.createVariable("pr", "f4", ("time", "lat", "lon"))[:] = 2.0
    assert _stored_scale_attributes(store) != before
    out = _python(f"""
        import h5py
        with h5py.File({str(view)!r}, "r") as f:
            for s in ("time", "lat", "lon"):
                print(s, sorted((f[r].name, int(i)) for r, i in f[s].attrs["REFERENCE_LIST"]))
    """)
    assert out.splitlines() == [
        "time [('/pr', 0), ('/snow', 0), ('/tas', 0)]",
        "lat [('/orog', 0), ('/pr', 1), ('/tas', 1)]",
        "lon [('/orog', 1), ('/pr', 2), ('/snow', 1), ('/tas', 2)]"]
    with xr.open_dataset(view) as a:
        assert a.orog.dims == ("lat", "lon") and a.pr.dims == ("time", "lat", "lon")
    m.stop()
    deep_check(store)


def _region_worker(path: str, k: int) -> None:
    """One worker of a template-then-regions job: time steps 2k, 2k+1 (inner chunks of a shard
    other workers write too)."""
    import warnings

    import numpy as np
    import xarray as xr

    warnings.filterwarnings("ignore")
    d = xr.Dataset({"tas": (("time", "y", "x"), np.full((2, 4, 6), 270.0 + k, "f4"))})
    d.to_zarr(path, region={"time": slice(2 * k, 2 * k + 2)}, consolidated=False, safe_chunks=False)


def test_dask_shards_appends_regions_and_a_new_variable_read_alike_everywhere(mount_store, tmp_path):
    """xarray's write patterns for large jobs: dask chunks written in parallel into shards,
    ``append_dim`` steps, a template (``compute=False``) filled by ``region=`` writes from
    processes that share shards (zarr-python rewrites the whole shard each time: on a local
    disk they lose each other's chunks; the view merges them), ``mode="a"`` adding a variable.
    Every view reads what was written."""
    import multiprocessing

    dask_array = pytest.importorskip("dask.array")
    tensorstore = pytest.importorskip("tensorstore")
    store = _store(tmp_path)
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    rng = np.random.default_rng(2)
    zpath = str(m.path / "zarr" / "d.zarr")

    def part(t0: str, n: int) -> xr.Dataset:
        return xr.Dataset({"pr": (("time", "y", "x"), rng.random((n, 4, 6)), {"units": "mm"})},
                          coords={"time": pd.date_range(t0, periods=n, freq="D"), "y": np.arange(4.0),
                                  "x": np.arange(6.0)})

    first = part("2000-01-01", 8)
    enc = {"pr": {"chunks": (2, 2, 3), "shards": (4, 4, 6)}, "time": {"units": "days since 2000-01-01", "chunks": (4,)}}
    first.chunk({"time": 4}).to_zarr(zpath, zarr_format=3, mode="w", encoding=enc, consolidated=False)
    full = first
    for t0 in ("2000-01-09", "2000-01-13"):
        more = part(t0, 4)
        more.chunk({"time": 4}).to_zarr(zpath, append_dim="time", consolidated=False)
        full = xr.concat([full, more], dim="time")
    tmpl = xr.Dataset({"tas": (("time", "y", "x"), dask_array.zeros((16, 4, 6), chunks=(8, 4, 6), dtype="f4"))})
    tmpl.to_zarr(zpath, mode="a", compute=False, encoding={"tas": {"chunks": (2, 4, 6), "shards": (8, 4, 6)}},
                 consolidated=False)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.starmap(_region_worker, [(zpath, k) for k in range(8)])
    full["tas"] = (("time", "y", "x"), np.repeat(270.0 + np.arange(8), 2)[:, None, None] * np.ones((1, 4, 6), "f4"))
    full["tas"] = full.tas.astype("f4")
    back = xr.open_zarr(zpath, consolidated=False).load()
    for v in full.variables:
        np.testing.assert_array_equal(back[v].values, full[v].values, err_msg=v)
    for engine in ("netcdf4", "h5netcdf"):
        with xr.open_dataset(m.path / "hdf5" / "d.h5", engine=engine) as h:
            for v in full.variables:
                np.testing.assert_array_equal(h[v].values, full[v].values, err_msg=f"{engine} {v}")
    n5 = tensorstore.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "d.n5" / "tas")}},
                          read=True).result()
    np.testing.assert_array_equal(n5.read().result().T, full.tas.values)  # N5 lists dimensions fastest first
    m.stop()
    deep_check(store)
