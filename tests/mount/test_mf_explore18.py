"""Many files and many writers at once, as data scientists use them (explore 18).

Pinned here, each compared value by value with the same files on local disk or a numpy model:

- ``xarray.open_mfdataset`` (``parallel=True``, dask threads) over imported netCDF files through
  ``hdf5/`` (engines netcdf4 and h5netcdf) and their groups through ``zarr/`` (engine zarr);
  ``netCDF4.MFDataset`` over NETCDF4_CLASSIC files.
- ``xarray.save_mfdataset`` writing four netCDF files into ``hdf5/`` at once, read back through
  ``hdf5/`` (xarray, ``MFDataset``), ``zarr/`` and ``n5/``.
- a ``multiprocessing.Pool`` and a ``ThreadPoolExecutor`` writing disjoint shard-aligned
  regions of one zarr-python array, and a pool writing regions aligned to inner chunks only
  (several processes rewriting one shard at once); dask ``to_zarr(region=..., compute=False)``
  computed with the threads scheduler; ``to_zarr(append_dim=...)`` from two processes in turn.
  h5py through ``hdf5/`` agrees, and ``polyfs check --deep`` is clean.
- h5py reading through ``hdf5/`` (a file held open all along, and fresh opens) while a
  zarr-python process grows and rewrites the array: every chunk read is one version's value,
  never anything else, and no read fails; h5py ``r+`` through ``hdf5/`` and zarr-python through
  ``zarr/`` writing the two halves of one shard at the same moment, round after round.

Not pinned (as on a local disk): threads of *one* process rewriting inner chunks of one shard
at once. zarr-python rewrites the whole shard from what it read, and polyfs keeps the base of a
read-modify-write per process (a read and its write may come from different threads), so such
threads lose one another's chunks exactly as they do on a local file system.
"""
from __future__ import annotations

import multiprocessing as mp
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from support import deep_check

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")
dask = pytest.importorskip("dask")
netCDF4 = pytest.importorskip("netCDF4")
pytest.importorskip("h5netcdf")
pd = pytest.importorskip("pandas")

pytestmark = pytest.mark.filterwarnings("ignore")


def _nc_sources(d: Path, n: int = 3, classic: bool = False) -> list[Path]:
    """``n`` netCDF files of consecutive times, compressed with odd chunkings and a fill value."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(18)
    out = []
    for i in range(n):
        t = pd.date_range("2020-01-01", periods=4, freq="D") + pd.Timedelta(days=4 * i)
        ds = xr.Dataset(
            {"tas": (("time", "lat", "lon"), rng.standard_normal((4, 8, 10)).astype("f4")),
             "pr": (("time", "lat", "lon"), rng.integers(0, 100, (4, 8, 10)).astype("i2"))},
            coords={"time": t, "lat": np.linspace(-10, 10, 8), "lon": np.arange(10.0)})
        ds.tas.attrs["units"] = "K"
        ds["pr"][0, 0, 0] = -1  # the fill value: NaN after decoding
        fmt = "NETCDF4_CLASSIC" if classic or i % 2 else "NETCDF4"
        p = d / f"f{i}.nc"
        ds.to_netcdf(p, format=fmt, encoding={
            "tas": {"zlib": True, "chunksizes": (2, 4, 5)},
            "pr": {"zlib": True, "chunksizes": (4, 8, 10), "_FillValue": -1}})
        out.append(p)
    return out


def _same(a, b) -> None:
    """Same variables, values (NaN where NaN), dtypes and attributes."""
    a, b = a.load(), b.load()
    assert sorted(a.variables) == sorted(b.variables)
    for v in a.variables:
        assert a[v].dtype == b[v].dtype, v
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)
        assert a[v].attrs == b[v].attrs, v


@pytest.fixture
def mf_store(tmp_path) -> tuple[Path, list[Path]]:
    srcs = _nc_sources(tmp_path / "src")
    store = tmp_path / "store"
    for p in srcs:
        import_source(p, str(store), domain=f"/mf/{p.name}", progress=False)
    return store, srcs


def test_open_mfdataset_parallel_over_hdf5_and_zarr_views(mount_store, mf_store):
    store, srcs = mf_store
    m = mount_store(str(store))
    local = xr.open_mfdataset(srcs, engine="netcdf4")
    with dask.config.set(scheduler="threads"):
        for eng in ("netcdf4", "h5netcdf"):
            files = [m.path / "hdf5/mf" / p.name for p in srcs]
            with xr.open_mfdataset(files, engine=eng, parallel=True, combine="by_coords") as ds:
                _same(local, ds)
                assert ds.pr.encoding["_FillValue"] == -1
        groups = [m.path / "zarr/mf" / f"{p.name}.zarr" for p in srcs]
        with xr.open_mfdataset(groups, engine="zarr", parallel=True, consolidated=False) as ds:
            _same(local, ds)
    local.close()
    classic = [m.path / "hdf5/mf" / p.name for p in srcs if p.name == "f1.nc"]
    with netCDF4.MFDataset(classic, aggdim="time") as mfd, netCDF4.Dataset(srcs[1]) as one:
        np.testing.assert_array_equal(mfd["tas"][:], one["tas"][:])
        assert mfd["tas"].units == "K"


def test_save_mfdataset_into_hdf5_read_back_in_every_view(mount_store, tmp_path):
    srcs = _nc_sources(tmp_path / "src", classic=True)
    local = xr.open_mfdataset(srcs, engine="netcdf4").load()
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    (m.path / "hdf5/out").mkdir()
    parts = [local.isel(time=slice(3 * i, 3 * i + 3)).chunk({"time": 1}) for i in range(4)]
    paths = [m.path / "hdf5/out" / f"s{i}.nc" for i in range(4)]
    with dask.config.set(scheduler="threads"):
        xr.save_mfdataset(parts, paths, format="NETCDF4_CLASSIC")
    with xr.open_mfdataset(paths, engine="h5netcdf") as back:
        _same(local, back)
    with netCDF4.MFDataset(paths, aggdim="time") as mfd:
        np.testing.assert_array_equal(mfd["tas"][:], local.tas.values)
        np.testing.assert_array_equal(mfd["time"][:], np.arange(12))
    groups = [m.path / "zarr/out" / f"s{i}.nc.zarr" for i in range(4)]
    with xr.open_mfdataset(groups, engine="zarr", consolidated=False) as z:
        _same(local, z)
    z5py = pytest.importorskip("z5py")
    for i in range(4):
        n = z5py.File(str(m.path / "n5/out" / f"s{i}.nc.n5"), "r")
        np.testing.assert_array_equal(n["tas"][:], parts[i].tas.values)
        np.testing.assert_array_equal(n["pr"][:], local.pr.isel(time=slice(3 * i, 3 * i + 3)).fillna(-1).values)
    deep_check(store)


# -- concurrent zarr-python writers --------------------------------------------------------
def _write(args) -> bool:
    """One region of one array, written as a pool worker does: open ``r+``, assign."""
    path, sl, val = args
    a = zarr.open_array(path, mode="r+")
    a[sl] = val
    return True


def _h5_agrees(mnt: Path, domain: str, want: dict[str, np.ndarray]) -> None:
    with h5py.File(mnt / "hdf5" / domain, "r") as f:
        for name, arr in want.items():
            np.testing.assert_array_equal(f[name][:], arr, err_msg=name)


@pytest.mark.slow
def test_pool_and_threads_write_regions_of_one_array(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    g = zarr.open_group(m.path / "zarr/cw.zarr", mode="w")
    g.create_array("A", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="i4", fill_value=-1)
    g.create_array("B", shape=(60, 60), chunks=(6, 6), shards=(30, 30), dtype="f8", fill_value=0.0,
                   compressors=zarr.codecs.GzipCodec(level=1))
    pa, pb = str(m.path / "zarr/cw.zarr/A"), str(m.path / "zarr/cw.zarr/B")
    ma, mb = np.full((64, 64), -1, "i4"), np.zeros((60, 60))
    aligned, inner = [], []
    for k in range(4):  # one shard each
        sl = (slice(32 * (k // 2), 32 * (k // 2) + 32), slice(32 * (k % 2), 32 * (k % 2) + 32))
        ma[sl] = k + 1
        aligned.append((pa, sl, k + 1))
    for k in range(8):  # a row of inner chunks across two shards: four processes on one shard at once
        sl = (slice(8 * k, 8 * k + 8), slice(8, 48))
        inner.append((pa, sl, 100 + k))
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        assert pool.map(_write, aligned) == [True] * 4
        for _, sl, v in inner:
            ma[sl] = v
        assert pool.map(_write, inner) == [True] * 8
    threads = []
    for k in range(4):
        sl = (slice(30 * (k // 2), 30 * (k // 2) + 30), slice(30 * (k % 2), 30 * (k % 2) + 30))
        mb[sl] = k + 0.5
        threads.append((pb, sl, k + 0.5))
    with ThreadPoolExecutor(4) as ex:
        assert list(ex.map(_write, threads)) == [True] * 4
    np.testing.assert_array_equal(zarr.open_array(pa, mode="r")[:], ma)
    np.testing.assert_array_equal(zarr.open_array(pb, mode="r")[:], mb)
    _h5_agrees(m.path, "cw.h5", {"A": ma, "B": mb})
    deep_check(store)


def _append(args) -> None:
    mnt, i = args
    t = pd.date_range("2021-01-01", periods=3, freq="D") + pd.Timedelta(days=3 * i)
    ds = xr.Dataset({"v": (("time", "x"), np.full((3, 5), i, "f4"))}, coords={"time": t, "x": np.arange(5)})
    kw = {"append_dim": "time"} if i else {"mode": "w"}  # as on a local disk: the first one creates
    ds.to_zarr(f"{mnt}/zarr/ap.zarr", consolidated=False, zarr_format=3, **kw)


@pytest.mark.slow
def test_dask_region_and_append_from_two_processes(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    da = dask.array
    # dask region writes of a template made with compute=False, computed with threads
    full = np.arange(48 * 20, dtype="f8").reshape(48, 20)
    tmpl = xr.Dataset({"v": (("y", "x"), da.zeros((48, 20), chunks=(8, 20)))}, coords={"x": np.arange(20)})
    path = m.path / "zarr/rg.zarr"
    tmpl.to_zarr(path, compute=False, consolidated=False, zarr_format=3)
    delayed = []
    for k in range(3):
        part = xr.Dataset({"v": (("y", "x"), da.from_array(full[16 * k:16 * k + 16], chunks=(8, 20)))})
        delayed.append(part.to_zarr(path, region={"y": slice(16 * k, 16 * k + 16)}, compute=False,
                                    consolidated=False))
    with dask.config.set(scheduler="threads"):
        dask.compute(*delayed)
    with xr.open_zarr(path, consolidated=False) as back:
        np.testing.assert_array_equal(back.v.values, full)
    # two processes appending one after the other
    ctx = mp.get_context("spawn")
    for i in range(3):
        p = ctx.Process(target=_append, args=((str(m.path), i),))
        p.start()
        p.join(120)
        assert p.exitcode == 0
    want = np.repeat(np.arange(3, dtype="f4"), 3)[:, None] * np.ones((1, 5), "f4")
    with xr.open_zarr(m.path / "zarr/ap.zarr", consolidated=False) as ap:
        np.testing.assert_array_equal(ap.v.values, want)
        assert list(ap.time.values) == list(pd.date_range("2021-01-01", periods=9, freq="D").values)
    with xr.open_dataset(m.path / "hdf5/ap.h5", engine="h5netcdf") as h:
        np.testing.assert_array_equal(h.v.values, want)
    _h5_agrees(m.path, "rg.h5", {"v": full})
    deep_check(store)


# -- h5py readers and writers through hdf5/ while a zarr/ writer runs ----------------------
def _rewriter(path: str, rounds: int, q) -> None:
    """Grows the array by a chunk row each round and rewrites its first row of chunks."""
    try:
        a = zarr.open_array(path, mode="r+")
        for r in range(1, rounds + 1):
            a.resize((16 * (r + 1), 32))
            a[16 * r:16 * (r + 1)] = r
            a[0:16] = r
        q.put("ok")
    except Exception as e:  # noqa: BLE001 - the parent asserts on it
        q.put(repr(e))


def _whole_chunks(got: np.ndarray, rounds: int) -> None:
    for i in range(0, got.shape[0], 16):
        for j in (0, 16):
            c = got[i:i + 16, j:j + 16]
            assert (c == c.flat[0]).all() and 0 <= c.flat[0] <= rounds, (got.shape, i, j, np.unique(c))


@pytest.mark.slow
def test_h5py_reads_whole_chunks_while_zarr_process_grows_and_rewrites(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    path = m.path / "zarr/live.zarr"
    g = zarr.open_group(path, mode="w")
    a = g.create_array("A", shape=(16, 32), chunks=(16, 16), shards=(32, 32), dtype="i4", fill_value=-7,
                       compressors=zarr.codecs.GzipCodec())
    a[:] = 0
    rounds = 6
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    held = h5py.File(m.path / "hdf5/live.h5", "r")  # one open file for the whole run, and fresh ones
    p = ctx.Process(target=_rewriter, args=(str(path / "A"), rounds, q))
    p.start()
    try:
        while p.is_alive():
            _whole_chunks(held["A"][:], rounds)
            with h5py.File(m.path / "hdf5/live.h5", "r") as f:
                _whole_chunks(f["A"][:], rounds)
    finally:
        p.join(120)
        held.close()
    assert q.get(timeout=10) == "ok"
    want = np.repeat(np.r_[rounds, np.arange(1, rounds + 1)], 16).astype("i4")[:, None] * np.ones((1, 32), "i4")
    with h5py.File(m.path / "hdf5/live.h5", "r") as f:
        np.testing.assert_array_equal(f["A"][:], want)
    deep_check(store)


def _h5_rows(mnt: str, rounds: int, bar, q) -> None:
    try:
        for r in range(rounds):
            bar.wait(60)
            with h5py.File(f"{mnt}/hdf5/mix.h5", "r+") as f:
                f["A"][0:32, :] = 100 + r
        q.put("ok")
    except Exception as e:  # noqa: BLE001
        q.put("h5py " + repr(e))


def _zarr_rows(mnt: str, rounds: int, bar, q) -> None:
    try:
        for r in range(rounds):
            bar.wait(60)
            zarr.open_array(f"{mnt}/zarr/mix.zarr/A", mode="r+")[32:64, :] = 200 + r
        q.put("ok")
    except Exception as e:  # noqa: BLE001
        q.put("zarr " + repr(e))


@pytest.mark.slow
def test_h5py_rplus_and_zarr_write_halves_of_one_shard_at_once(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    g = zarr.open_group(m.path / "zarr/mix.zarr", mode="w")
    a = g.create_array("A", shape=(64, 64), chunks=(16, 16), shards=(64, 64), dtype="i4", fill_value=0,
                       compressors=zarr.codecs.GzipCodec())
    a[:] = 1
    rounds = 4
    ctx = mp.get_context("spawn")
    bar, q = ctx.Barrier(2), ctx.Queue()
    ps = [ctx.Process(target=t, args=(str(m.path), rounds, bar, q)) for t in (_h5_rows, _zarr_rows)]
    for p in ps:
        p.start()
    res = [q.get(timeout=200) for _ in ps]
    for p in ps:
        p.join(30)
    assert res == ["ok", "ok"]
    want = np.full((64, 64), 200 + rounds - 1, "i4")
    want[:32] = 100 + rounds - 1
    np.testing.assert_array_equal(zarr.open_array(m.path / "zarr/mix.zarr/A", mode="r")[:], want)
    _h5_agrees(m.path, "mix.h5", {"A": want})
    deep_check(store)
