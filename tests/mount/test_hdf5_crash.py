"""SIGKILL of the daemon while h5py writes through the HDF5 view (``hdf5/<stem>.h5``, ``"r+"``).

A writer process applies a deterministic sequence of writes (partial boxes across
chunk boundaries, appends along the unlimited axis) and acknowledges them every
few iterations, alternately by ``close()`` (FUSE flush + release: the commit) and
by ``flush()`` + ``os.fsync()`` on HDF5's own descriptor (h5py's ``flush()``
alone only ``pwrite``s HDF5's caches into the file, which the daemon keeps as
pages; the ``fsync`` is what reaches it as FUSE ``fsync`` and commits). A numpy
model replays the same sequence. After the kill and a remount, the store (read
through the HDF5 view, through the Zarr view and straight from the chunk
objects) must hold what the acknowledged writes made, every chunk must decode,
and ``polyfs check --deep`` must be clean.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import is_mounted, polyfs_cmd
from crashkit import check_deep

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

# The write sequence, shared by the writer process and the model (one source of truth).
OPS = r'''
import numpy as np

SHAPE0 = (40, 40, 40)  # axis 0 unlimited
CHUNKS = (8, 16, 16)  # edge chunks are partial in every axis
PER_ACK = 3  # iterations per acknowledgement


def initial():
    return (np.arange(np.prod(SHAPE0), dtype=np.uint32) % 50000).astype(np.uint16).reshape(SHAPE0)


def step(i, n):
    """Iteration ``i`` on a dataset of ``n`` planes: (planes afterwards, region, values)."""
    rng = np.random.default_rng(1000 + i)
    if i % 4 == 3:  # append 5 planes: past the last chunk's edge, then into new chunks
        region = (slice(n, n + 5), slice(0, 40), slice(0, 40))
        n += 5
    else:  # a box anywhere, mostly straddling chunk boundaries (read-modify-write of gzip chunks)
        z0, y0, x0 = (int(rng.integers(0, k - 1)) for k in (n, 40, 40))
        region = (slice(z0, min(n, z0 + int(rng.integers(1, 14)))),
                  slice(y0, min(40, y0 + int(rng.integers(1, 30)))),
                  slice(x0, min(40, x0 + int(rng.integers(1, 30)))))
    shape = tuple(s.stop - s.start for s in region)
    values = (rng.integers(0, 64, shape) + 100 * (i + 1)).astype(np.uint16)  # iteration readable in the data
    return n, region, values


def whole(i, n):
    """A rewrite of every plane (many chunks: a commit that takes a while)."""
    rng = np.random.default_rng(5000 + i)
    return n, (slice(0, n), slice(0, 40), slice(0, 40)), (rng.integers(0, 64, (n, 40, 40)) + 100 * (i + 1)).astype(np.uint16)
'''
_ops: dict = {}
exec(OPS, _ops)  # noqa: S102 - the model replays the writer's own code
SHAPE0, CHUNKS, initial, step, whole = (_ops[k] for k in ("SHAPE0", "CHUNKS", "initial", "step", "whole"))

WRITER = OPS + r'''
import os, sys, time, h5py

path, acks, extra, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def say(*a):
    print(*a, flush=True)


f = h5py.File(path, "r+")
d = f["d"]
i = done = 0


def apply(op):
    global i
    n, region, values = op(i, d.shape[0])
    if n != d.shape[0]:
        d.resize(n, axis=0)
    d[region] = values
    i += 1


while done < acks:
    apply(step)
    if i % PER_ACK:
        continue
    if done % 2 == 0:
        t0 = time.monotonic()
        f.close()
        say("ack", i, "close", time.monotonic() - t0)
        f = h5py.File(path, "r+")
        d = f["d"]
    else:
        f.flush()
        os.fsync(f.id.get_vfd_handle())
        say("ack", i, "fsync")
    done += 1
if mode == "dirty":  # written, in the daemon's pages, never acknowledged
    for _ in range(extra):
        apply(step)
    f.flush()  # HDF5's caches into the file: pwrite only
    say("dirty", i)
    sys.stdin.readline()
else:  # "commit": rewrite everything twice; the second close is the one the daemon dies in
    apply(whole)
    t0 = time.monotonic()
    f.close()
    say("ack", i, "close", time.monotonic() - t0)
    f = h5py.File(path, "r+")
    d = f["d"]
    apply(whole)
    say("closing", i)
    f.close()
    say("ack", i, "close")
'''


def model_after(iterations: int, big: tuple[int, ...] = ()) -> np.ndarray:
    """The dataset after the first ``iterations`` iterations (``big``: those that rewrote everything)."""
    a = initial()
    for i in range(iterations):
        n, region, values = (whole if i in big else step)(i, a.shape[0])
        if n != a.shape[0]:
            grown = np.zeros((n, *a.shape[1:]), dtype=a.dtype)  # fill value 0
            grown[:a.shape[0]] = a
            a = grown
        a[region] = values
    return a


@pytest.fixture
def imported(tmp_path):
    src = tmp_path / "crash.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("d", data=initial(), chunks=CHUNKS, maxshape=(None, *SHAPE0[1:]), compression="gzip",
                         compression_opts=1)
        f.attrs["title"] = "crash"
    store = tmp_path / "store"
    assert import_source(src, str(store), progress=False) == "/crash.h5"
    return store


def start_writer(path: Path, acks: int, extra: int, mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(acks), str(extra), mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_line(writer: subprocess.Popen) -> list[str]:
    line = writer.stdout.readline()
    assert line, f"writer ended early (exit {writer.poll()}): {writer.stderr.read()}"
    return line.split()


def kill_daemon(m, writer: subprocess.Popen) -> None:
    os.kill(m.daemon_pid(), signal.SIGKILL)
    writer.kill()  # blocked on the dead mount or on its stdin
    writer.communicate(timeout=30)
    res = subprocess.run(polyfs_cmd("umount", str(m.path)), capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert not is_mounted(m.path)


def chunk_blocks(a: np.ndarray):
    """(grid coords, block) of every chunk of ``a`` (edge blocks cut at the extent)."""
    grid = tuple(-(-s // c) for s, c in zip(a.shape, CHUNKS))
    for idx in np.ndindex(*grid):
        yield idx, a[tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, CHUNKS))]


def stored_views(m, store: Path) -> dict[str, np.ndarray]:
    """The dataset as the remounted HDF5 and Zarr views show it, and from the chunk objects themselves
    (every chunk decoded by the stored pipeline)."""
    from corpus import read_dataset

    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    with h5py.File(m.path / "hdf5" / "crash.h5", "r") as f:
        h5 = f["d"][()]
    z = zarr.open_array(str(m.path / "zarr" / "crash.zarr" / "d"), mode="r")[:]
    cat = Catalog(open_store(str(store), read_only=True))
    model = read_dataset(cat, cat.load("/crash.h5").resolve("/d"))
    return {"hdf5 view": h5, "zarr view": z, "chunk objects": model}


def test_sigkill_with_unacknowledged_writes_keeps_exactly_the_acknowledged_ones(mount_store, imported):
    """Six acknowledgements (three closes, three fsyncs of a file kept open), then two more
    iterations written and h5py-flushed but never acknowledged; the daemon dies while the
    writer holds the file open. The store is the model after the last acknowledgement: nothing
    acknowledged lost, nothing half-written ingested."""
    store = imported
    m = mount_store(str(store))
    writer = start_writer(m.path / "hdf5" / "crash.h5", acks=6, extra=2, mode="dirty")
    acked = 0
    kinds = []
    for _ in range(6):
        word, i, kind, *_ = read_line(writer)
        assert word == "ack"
        acked, kinds = int(i), kinds + [kind]
    assert kinds == ["close", "fsync"] * 3
    word, i = read_line(writer)
    assert word == "dirty" and int(i) == acked + 2
    # the writes after the last acknowledgement reached the daemon (as pages of the open file) ...
    assert model_after(acked + 2).shape != model_after(acked).shape or \
        not np.array_equal(model_after(acked + 2), model_after(acked))
    kill_daemon(m, writer)
    m.start()
    want = model_after(acked)
    for what, got in stored_views(m, store).items():
        assert got.shape == want.shape, (what, got.shape, want.shape)
        for idx, block in chunk_blocks(want):
            sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, CHUNKS))
            np.testing.assert_array_equal(got[sl], block, err_msg=f"{what}: chunk {idx}")
    m.stop()
    check_deep(store, allow_repair=False)  # nothing was being committed: no repair either


def test_sigkill_during_the_commit_of_a_close_leaves_each_chunk_old_or_new(mount_store, imported):
    """Four acknowledgements, then every chunk rewritten and closed (acknowledged; its commit
    timed), every chunk rewritten again and the daemon killed once the second close's commit
    has stored some of its chunks. Each chunk is then the acknowledged one or the one being
    committed, never lost, torn or undecodable."""
    store = imported
    m = mount_store(str(store))
    writer = start_writer(m.path / "hdf5" / "crash.h5", acks=4, extra=0, mode="commit")
    for _ in range(4):
        assert read_line(writer)[0] == "ack"
    word, i, _, _ = read_line(writer)  # the first whole rewrite, committed
    assert word == "ack"
    acked = int(i)
    big = (acked - 1, acked)
    old, new = model_after(acked, big), model_after(acked + 1, big)
    assert old.shape == new.shape
    ds_dir = _chunk_dir(store)
    before = _chunk_mtimes(ds_dir)
    word, _ = read_line(writer)
    assert word == "closing"
    deadline = time.monotonic() + 30
    # kill as soon as the commit has replaced a chunk object (objects are replaced by rename)
    while time.monotonic() < deadline and writer.poll() is None:
        if any(before.get(k) != t for k, t in _chunk_mtimes(ds_dir).items()):
            break
        time.sleep(0.001)
    kill_daemon(m, writer)
    m.start()
    mixed = {"old": 0, "new": 0}
    for what, got in stored_views(m, store).items():
        assert got.shape == new.shape, (what, got.shape)
        for idx, block in chunk_blocks(new):
            sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, CHUNKS))
            if np.array_equal(got[sl], block):
                mixed["new"] += what == "chunk objects"
            else:
                np.testing.assert_array_equal(got[sl], old[sl], err_msg=f"{what}: chunk {idx} neither old nor new")
                mixed["old"] += what == "chunk objects"
    m.stop()
    print(f"chunks after the kill: {mixed}")
    check_deep(store, allow_repair=False)  # CRC entries are written beside the old ones first


def _chunk_dir(store: Path) -> Path:
    """The directory of the dataset's chunk objects (``db/<root>/d/<id>/``)."""
    dirs = {p.parent for p in store.rglob("*") if p.is_file() and p.parent.parent.name == "d"
            and p.name.replace("_", "").isdigit()}
    assert len(dirs) == 1, dirs
    return dirs.pop()


def _chunk_mtimes(ds_dir: Path) -> dict[str, int]:
    """Chunk object name -> mtime (temporaries being staged beside them come and go)."""
    out = {}
    for e in os.scandir(ds_dir):
        if e.name.replace("_", "").isdigit():
            try:
                out[e.name] = e.stat().st_mtime_ns
            except FileNotFoundError:
                pass
    return out
