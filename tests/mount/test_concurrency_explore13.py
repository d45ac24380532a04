"""Concurrent writers across views of one mount, found by a user's tests (explore 13).

- Two zarr-python processes writing disjoint inner chunks of one shard of an array h5py had
  written with gzip (its default level 4: zlib header 78 5e) lost one another's writes. Each
  rewrites the whole shard; the inner chunks it did not change are the gzip members the view
  spliced from the stored streams, and written back they become zlib streams with the default
  header (78 9c). So they counted as changed (every chunk of the shard was stored again), and
  the stale copy of a chunk the other process had just replaced was not recognised as one (its
  bytes differed from the replaced version's by that header byte): it won, and the other
  process's acknowledged write was gone, in every view. Deflate chunks are compared without
  their header's level hint now (``polyfs/writes/history.py: zlib_canonical``).

Also exercised here, and held unchanged: h5py ``r+``, zarr-python, tifffile and z5py writing
four datasets of one domain through four views at once; 24 processes each creating and
growing its own array.
"""
from __future__ import annotations

import multiprocessing as mp
import traceback
from pathlib import Path

import numpy as np
import pytest
from support import deep_check

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

SHAPE, CH = (64, 64), (16, 16)


@pytest.fixture
def store(tmp_path) -> Path:
    """Domain ``/x.h5``: ``A`` (int32, h5py's gzip), ``B`` (int32, gzip), ``D`` (uint16, gzip)."""
    src = tmp_path / "x.h5"
    with h5py.File(src, "w") as f:
        for name, dt in (("A", "i4"), ("B", "i4"), ("D", "u2")):
            f.create_dataset(name, data=np.full(SHAPE, 5, dt), chunks=CH, compression="gzip")
    out = tmp_path / "store"
    import_source(src, str(out), domain="/x.h5", progress=False)
    return out


def _report(q, name: str, fn) -> None:
    try:
        q.put((name, fn()))
    except Exception:  # noqa: BLE001 - the parent asserts on it
        q.put((name, "ERR " + traceback.format_exc()))


# -- two zarr-python writers, disjoint inner chunks of one shard -----------------------------
def _disjoint_writer(mnt: str, i: int, rounds: int, bar, q) -> None:
    def run() -> list[int]:
        acked = []
        for r in range(rounds):
            a = zarr.open_array(f"{mnt}/zarr/x.zarr/A", mode="r+")
            row, col = divmod(2 * r + i, 4)  # each round: an inner chunk nobody wrote yet
            bar.wait(60)  # both read the shard, then both write it back
            a[row * 16:row * 16 + 16, col * 16:col * 16 + 16] = 100 * (i + 1) + r
            acked.append(2 * r + i)
        return acked
    _report(q, f"w{i}", run)


def test_two_zarr_writers_of_one_shard_over_h5py_gzip_chunks_lose_nothing(mount_store, store):
    m = mount_store(str(store))
    ctx = mp.get_context("spawn")
    bar, q = ctx.Barrier(2), ctx.Queue()
    rounds = 8
    ps = [ctx.Process(target=_disjoint_writer, args=(str(m.path), i, rounds, bar, q)) for i in range(2)]
    for p in ps:
        p.start()
    res = dict(q.get(timeout=120) for _ in ps)
    for p in ps:
        p.join(30)
    want = np.full(SHAPE, 5, "i4")
    for name, acked in res.items():
        assert not isinstance(acked, str), acked
        i = int(name[1:])
        for n in acked:  # every write its writer was told succeeded
            row, col = divmod(n, 4)
            want[row * 16:row * 16 + 16, col * 16:col * 16 + 16] = 100 * (i + 1) + n // 2
    got = zarr.open_array(str(m.path / "zarr" / "x.zarr" / "A"), mode="r")[:]
    np.testing.assert_array_equal(got, want)
    with h5py.File(m.path / "hdf5" / "x.h5", "r") as f:
        np.testing.assert_array_equal(f["A"][()], want)
    m.stop()
    deep_check(store)


# -- four tools, four views, one domain, at once ---------------------------------------------
def _h5_rplus(mnt: str, rounds: int, bar, q) -> None:
    def run() -> str:
        with h5py.File(f"{mnt}/hdf5/x.h5", "r+") as f:
            bar.wait(60)
            for r in range(rounds):
                f["A"][(r % 4) * 16:(r % 4) * 16 + 16, :] = r + 1
        return "ok"
    _report(q, "A", run)


def _zarr_rows(mnt: str, rounds: int, bar, q) -> None:
    def run() -> str:
        a = zarr.open_array(f"{mnt}/zarr/x.zarr/B", mode="r+")
        bar.wait(60)
        for r in range(rounds):
            a[(r % 4) * 16:(r % 4) * 16 + 16, :] = 100 + r
        return "ok"
    _report(q, "B", run)


def _tiff_new(mnt: str, rounds: int, bar, q) -> None:
    def run() -> str:
        import tifffile

        bar.wait(60)
        for r in range(rounds):
            tifffile.imwrite(f"{mnt}/tiff/x/C.tif", np.full(SHAPE, 200 + r, "u1"), tile=CH)
        return "ok"
    _report(q, "C", run)


def _n5_cols(mnt: str, rounds: int, bar, q) -> None:
    def run() -> str:
        import z5py

        d = z5py.File(f"{mnt}/n5/x.n5", use_zarr_format=False, mode="a")["D"]
        bar.wait(60)
        for r in range(rounds):
            d[:, (r % 4) * 16:(r % 4) * 16 + 16] = 300 + r
        return "ok"
    _report(q, "D", run)


def _model(rounds: int) -> dict[str, np.ndarray]:
    a, b, d = np.full(SHAPE, 5, "i4"), np.full(SHAPE, 5, "i4"), np.full(SHAPE, 5, "u2")
    for r in range(rounds):
        s = slice((r % 4) * 16, (r % 4) * 16 + 16)
        a[s, :], b[s, :], d[:, s] = r + 1, 100 + r, 300 + r
    return {"A": a, "B": b, "C": np.full(SHAPE, 200 + rounds - 1, "u1"), "D": d}


def test_four_tools_write_four_datasets_of_one_domain_at_once(mount_store, store):
    pytest.importorskip("tifffile")
    pytest.importorskip("z5py")
    import tifffile

    m = mount_store(str(store))
    ctx = mp.get_context("spawn")
    bar, q = ctx.Barrier(4), ctx.Queue()
    rounds = 6
    ps = [ctx.Process(target=t, args=(str(m.path), rounds, bar, q)) for t in (_h5_rplus, _zarr_rows, _tiff_new, _n5_cols)]
    for p in ps:
        p.start()
    res = dict(q.get(timeout=120) for _ in ps)
    for p in ps:
        p.join(30)
    assert all(v == "ok" for v in res.values()), res
    want = _model(rounds)
    with h5py.File(m.path / "hdf5" / "x.h5", "r") as f:
        for name, arr in want.items():
            np.testing.assert_array_equal(f[name][()], arr)
    for name, arr in want.items():
        np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "x.zarr" / name), mode="r")[:], arr)
        np.testing.assert_array_equal(tifffile.imread(m.path / "tiff" / "x" / f"{name}.tif"), arr)
    m.stop()
    deep_check(store)


# -- many processes, each growing its own array ----------------------------------------------
def _appender(mnt: str, i: int, rounds: int, bar, q) -> None:
    def run() -> int:
        a = zarr.create_array(f"{mnt}/zarr/x.zarr/app{i}", shape=(0, 8), chunks=(4, 8), dtype="i4",
                              fill_value=-1)
        bar.wait(120)
        n = 0
        for r in range(rounds):
            a.resize((a.shape[0] + 4, 8))
            a[-4:, :] = 1000 * i + r
            n += 1
        return n
    _report(q, f"{i}", run)


def test_many_processes_each_appending_to_its_own_array(mount_store, store):
    m = mount_store(str(store))
    ctx = mp.get_context("spawn")
    n, rounds = 22, 3
    bar, q = ctx.Barrier(n), ctx.Queue()
    ps = [ctx.Process(target=_appender, args=(str(m.path), i, rounds, bar, q)) for i in range(n)]
    for p in ps:
        p.start()
    res = dict(q.get(timeout=180) for _ in ps)
    for p in ps:
        p.join(30)
    assert all(not isinstance(v, str) for v in res.values()), [v for v in res.values() if isinstance(v, str)]
    with h5py.File(m.path / "hdf5" / "x.h5", "r") as f:
        for key, acked in res.items():
            i = int(key)
            want = np.repeat(np.arange(acked, dtype="i4") + 1000 * i, 4)[:, None] * np.ones((1, 8), "i4")
            np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "x.zarr" / f"app{i}"), mode="r")[:],
                                          want)
            np.testing.assert_array_equal(f[f"app{i}"][()], want)
    m.stop()
    deep_check(store)
