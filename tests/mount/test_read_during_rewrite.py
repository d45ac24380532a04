"""Readers of ``zarr/`` while another process keeps rewriting the same chunks.

The view serves h5py's deflate chunks as gzip members: the stored body plus a trailer made
from the stream's checksum. A rewrite of a chunk with a new version of the same size landed
between the two (or the trailer was kept from the old version until the commit's end), and
a reader got a member failing its CRC check: zarr-python raised, and a zarr-python writer
copying that chunk into its shard had its write refused (EINVAL). Every chunk a reader gets
must decode, and hold one of the versions written.
"""
from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
from support import deep_check

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

SHAPE, CH = (64, 64), (16, 16)
SECONDS = 4.0


@pytest.fixture
def store(tmp_path) -> Path:
    src = tmp_path / "x.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("A", data=np.full(SHAPE, 5, "i4"), chunks=CH, compression="gzip")
    out = tmp_path / "store"
    import_source(src, str(out), domain="/x.h5", progress=False)
    return out


def _writer(path: str, q) -> None:
    try:
        a = zarr.open_array(path, mode="r+")
        r = 0
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            r += 1
            a[:] = 1000 + r  # every chunk rewritten, each version as long as the last
        q.put(("writer", r))
    except Exception:  # noqa: BLE001 - the parent asserts on it
        q.put(("writer", "ERR " + traceback.format_exc()))


def _reader(path: str, q) -> None:
    try:
        reads, bad = 0, []
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            got = zarr.open_array(path, mode="r")[:]
            reads += 1
            for i in range(0, SHAPE[0], CH[0]):
                for j in range(0, SHAPE[1], CH[1]):
                    block = got[i:i + CH[0], j:j + CH[1]]
                    v = int(block[0, 0])
                    if not (block == v).all() or not (v == 5 or v > 1000):
                        bad.append((i, j, v))
        q.put(("reader", (reads, bad[:5])))
    except Exception:  # noqa: BLE001
        q.put(("reader", "ERR " + traceback.format_exc()))


def test_zarr_readers_of_gzip_members_never_see_a_torn_chunk(mount_store, store):
    m = mount_store(str(store))
    path = str(m.path / "zarr" / "x.zarr" / "A")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_writer, args=(path, q))] + [ctx.Process(target=_reader, args=(path, q))
                                                         for _ in range(2)]
    for p in ps:
        p.start()
    res = [q.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(30)
    for who, what in res:
        assert not isinstance(what, str), f"{who}: {what}\n{m.log_text()[-3000:]}"
    rounds = next(what for who, what in res if who == "writer")
    for who, what in res:
        if who == "reader":
            reads, bad = what
            assert reads > 0 and not bad, (reads, bad)
    want = np.full(SHAPE, 1000 + rounds, "i4")
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[:], want)
    with h5py.File(m.path / "hdf5" / "x.h5", "r") as f:
        np.testing.assert_array_equal(f["A"][()], want)
    m.stop()
    deep_check(store)
