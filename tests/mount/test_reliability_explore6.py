"""Reliability under concurrency, found by a user's tests (explore 6): several processes on ONE
domain through different views of a real mount.

- h5py ``r+`` holding ``hdf5/dom.h5`` open while zarr-python or tensorstore added chunks to
  another array of the same domain: at h5py's close, every chunk the file's chunk index
  lacked was deleted, and the file's index is the one h5py opened. The other writers' new
  chunks were lost silently (every view, after remount too). A chunk a document file lacks is
  now deleted only if it was stored when the file was opened (or by the writer itself), as
  for chunk files.
- ``rsync -a`` of a Zarr tree into ``zarr/`` makes every directory first (``x/c/0``), then
  writes ``x/zarr.json``, then the chunks: the empty groups ``mkdir`` made went with the group
  that the metadata turned into an array, and each chunk's temporary file got ENOENT (exit 23,
  no chunk stored; a second run said 0 and still stored none). They stay the array's chunk
  directories now.
- A write into a page of such a file first copied the rest of the page from the view file,
  whose stored chunks another process may have rewritten since the open (a changed size):
  the write failed with EIO, so h5py's edit of its own dataset was lost (``r+`` with the
  default driver could not even open the file, it writes the superblock at open). The write
  is kept now and the changed bytes stay the view file's (tests/fs/test_reliability_explore6_fs.py).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import deep_check

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

SHAPE = (128, 128)


@pytest.fixture
def store(tmp_path) -> Path:
    """Domain ``/dom.h5``: ``A`` (int32, gzip, only chunk (0, 0) stored) and ``C`` (uint16, gzip)."""
    src = tmp_path / "dom.h5"
    with h5py.File(src, "w") as f:
        a = f.create_dataset("A", shape=SHAPE, dtype="i4", chunks=(32, 32), compression="gzip", fillvalue=0)
        a[0:32, 0:32] = 1
        f.create_dataset("C", data=np.zeros(SHAPE, "u2"), chunks=(32, 32), compression="gzip")
    out = tmp_path / "store"
    import_source(src, str(out), domain="/dom.h5", progress=False)
    return out


def _zarr_write(path: str, region: tuple[slice, slice], seed: int) -> np.ndarray:
    """zarr-python writes random values into ``region`` of the array at ``path``, in another process."""
    vals = np.random.default_rng(seed).integers(1, 1 << 30, (region[0].stop - region[0].start,
                                                               region[1].stop - region[1].start), dtype="i4")
    code = ("import sys, numpy as np, zarr\n"
            "a = zarr.open_array(sys.argv[1], mode='r+')\n"
            f"a[{region[0].start}:{region[0].stop}, {region[1].start}:{region[1].stop}] = "
            "np.load(sys.argv[2])\n")
    tmp = Path(path).parents[3] / f"vals{seed}.npy"
    np.save(tmp, vals)
    subprocess.run([sys.executable, "-c", code, path, str(tmp)], check=True, timeout=120)
    return vals


def _views_hold(m, name: str, want: np.ndarray) -> None:
    with h5py.File(m.path / "hdf5" / "dom.h5", "r") as f:
        np.testing.assert_array_equal(f[name][()], want)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "dom.zarr" / name), mode="r")[:], want)


def test_h5py_r_plus_keeps_chunks_another_process_added_meanwhile(mount_store, store):
    m = mount_store(str(store))
    with h5py.File(m.path / "hdf5" / "dom.h5", "r+") as f:
        vals = _zarr_write(str(m.path / "zarr" / "dom.zarr" / "A"), (slice(64, 96), slice(64, 96)), 1)
        f["C"][0:10, 0:10] = 3
    a = np.zeros(SHAPE, "i4")
    a[0:32, 0:32] = 1
    a[64:96, 64:96] = vals
    c = np.zeros(SHAPE, "u2")
    c[0:10, 0:10] = 3
    _views_hold(m, "A", a)  # before: chunk (2, 2) of A deleted at h5py's close
    _views_hold(m, "C", c)
    # (the file is compared with the plan h5py opened, where A had chunk (0, 0) only: the chunks
    # zarr-python added are no deletion of h5py's; service._seen_deletes guards the other paths)
    m.stop()
    deep_check(store)
    m = mount_store(str(store))
    _views_hold(m, "A", a)


def _zarr_new_array(path: str, seed: int) -> np.ndarray:
    """zarr-python makes a new array at ``path`` and fills it, in another process."""
    vals = np.random.default_rng(seed).integers(0, 1000, (40, 24)).astype("i2")
    tmp = Path(path).parents[3] / f"new{seed}.npy"
    np.save(tmp, vals)
    code = ("import sys, numpy as np, zarr\n"
            "v = np.load(sys.argv[2])\n"
            "a = zarr.create_array(sys.argv[1], shape=v.shape, chunks=(16, 16), dtype=v.dtype, fill_value=0)\n"
            "a[...] = v\n")
    subprocess.run([sys.executable, "-c", code, path, str(tmp)], check=True, timeout=120)
    return vals


def test_h5py_r_plus_commits_beside_an_array_another_view_made_meanwhile(mount_store, store):
    """h5py ``r+`` holds the file while zarr-python makes a new array in the domain: h5py's
    close was refused (EOPNOTSUPP, "the domain changed in the store since this file was
    opened"), losing its edit. The file is compared with the plan h5py opened and applied to
    the domain as it is now: h5py's changes (data, an attribute, a deleted dataset) land and
    the new array stays."""
    m = mount_store(str(store))
    with h5py.File(m.path / "hdf5" / "dom.h5", "r+") as f:
        new = _zarr_new_array(str(m.path / "zarr" / "dom.zarr" / "N"), 7)
        f["C"][0:10, 0:10] = 5
        f["C"].attrs["units"] = "counts"
        del f["A"]
    c = np.zeros(SHAPE, "u2")
    c[0:10, 0:10] = 5
    _views_hold(m, "C", c)
    _views_hold(m, "N", new)
    with h5py.File(m.path / "hdf5" / "dom.h5", "r") as f:
        assert sorted(f) == ["C", "N"] and f["C"].attrs["units"] == "counts"
    assert "cannot be told deleted" not in m.log_text()
    m.stop()
    deep_check(store)


def test_h5py_write_beside_a_chunk_another_process_rewrote(mount_store, store):
    """h5py's file-object driver writes nothing at open: its first write at close copies the
    page holding A's chunk (0, 0), which another process rewrote at another size meanwhile."""
    m = mount_store(str(store))
    with open(m.path / "hdf5" / "dom.h5", "r+b", buffering=0) as fo:
        f = h5py.File(fo, "r+")
        vals = _zarr_write(str(m.path / "zarr" / "dom.zarr" / "A"), (slice(0, 32), slice(0, 32)), 2)
        f["C"][100:110, 100:110] = 7
        f.close()  # before: EIO from a write (the page copy met the changed chunk): nothing stored
    a = np.zeros(SHAPE, "i4")
    a[0:32, 0:32] = vals
    c = np.zeros(SHAPE, "u2")
    c[100:110, 100:110] = 7
    _views_hold(m, "A", a)
    _views_hold(m, "C", c)
    m.stop()
    deep_check(store)


# -- three tools, three views, one domain, at once ----------------------------------------------
def _zarr_writer(mnt: str, out: str, rounds: int) -> None:
    rng = np.random.default_rng(11)
    a = zarr.open_array(f"{mnt}/zarr/dom.zarr/Z", mode="r+")
    model = np.zeros(SHAPE, "i4")
    for _ in range(rounds):
        y, x = rng.integers(0, 96, 2)
        h, w = rng.integers(1, 32, 2)
        v = rng.integers(1, 1 << 30, (h, w), dtype="i4")
        a[y:y + h, x:x + w] = v
        model[y:y + h, x:x + w] = v
    np.save(f"{out}/Z.npy", model)


def _ts_writer(mnt: str, out: str, rounds: int) -> None:
    rng = np.random.default_rng(12)
    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": f"{mnt}/n5/dom.n5/N"}}).result()
    model = np.zeros(SHAPE, "f4")  # in N5's (reversed) axis order, as tensorstore shows it
    for _ in range(rounds):
        y, x = rng.integers(0, 96, 2)
        h, w = rng.integers(1, 32, 2)
        v = rng.random((h, w), dtype="f4") + 1
        t[y:y + h, x:x + w].write(v).result()
        model[y:y + h, x:x + w] = v
    np.save(f"{out}/N.npy", model.T)


def _h5_writer(mnt: str, out: str, rounds: int) -> None:
    rng = np.random.default_rng(13)
    model = np.zeros(SHAPE, "u2")
    done = 0
    while done < rounds:
        try:
            f = h5py.File(f"{mnt}/hdf5/dom.h5", "r+")
        except BlockingIOError:  # a reader holds HDF5's file lock: as on a disk, try again
            continue
        with f:
            for _ in range(3):
                y, x = rng.integers(0, 96, 2)
                h, w = rng.integers(1, 32, 2)
                v = rng.integers(1, 60000, (h, w), dtype="u2")
                f["C"][y:y + h, x:x + w] = v
                model[y:y + h, x:x + w] = v
        done += 1
    np.save(f"{out}/C.npy", model)


def _reader(mnt: str, stop) -> None:
    """Reads every array through two views and lists the mount until told to stop. Errors a
    reader may see while writers replace chunks (EIO: close-to-open) are not the point here."""
    while not stop.is_set():
        for read in (lambda: zarr.open_array(f"{mnt}/zarr/dom.zarr/C", mode="r")[:],
                     lambda: zarr.open_array(f"{mnt}/zarr/dom.zarr/Z", mode="r")[:],
                     lambda: zarr.open_array(f"{mnt}/zarr/dom.zarr/N", mode="r")[:]):
            try:
                read()
            except (OSError, KeyError, ValueError):
                pass
        subprocess.run(["ls", "-lR", mnt], capture_output=True, check=False)


def test_three_tools_through_three_views_of_one_domain_at_once(mount_store, store, tmp_path):
    """zarr-python (zarr/), tensorstore (n5/) and h5py r+ (hdf5/) each write their own array of
    one domain while a process reads them and lists the mount: every array ends as its writer's
    numpy model in every view, ``check --deep`` is clean, and a remount shows the same."""
    m = mount_store(str(store))
    zarr.create_array(str(m.path / "zarr" / "dom.zarr" / "Z"), shape=SHAPE, chunks=(32, 32), shards=(64, 64),
                      dtype="i4", fill_value=0)
    ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "dom.n5" / "N")},
             "metadata": {"dimensions": list(SHAPE), "blockSize": [32, 32], "dataType": "float32",
                          "compression": {"type": "gzip"}}}, create=True).result()
    out = tmp_path / "models"
    out.mkdir()
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    args = (str(m.path), str(out), 30)
    writers = [ctx.Process(target=fn, args=args) for fn in (_zarr_writer, _ts_writer)]
    writers.append(ctx.Process(target=_h5_writer, args=(str(m.path), str(out), 6)))
    reader = ctx.Process(target=_reader, args=(str(m.path), stop))
    for p in [*writers, reader]:
        p.start()
    for p in writers:
        p.join(timeout=240)
    stop.set()
    reader.join(timeout=60)
    assert [p.exitcode for p in writers] == [0, 0, 0], m.log_text()[-3000:]
    models = {n: np.load(out / f"{n}.npy") for n in ("Z", "N", "C")}

    def check_all() -> None:
        for name, want in models.items():
            _views_hold(m, name, want)

    check_all()
    m.stop()
    deep_check(store)
    m = mount_store(str(store))
    check_all()


@pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")
def test_rsync_of_a_zarr_tree_into_the_zarr_view(mount_store, store, tmp_path):
    src = tmp_path / "local.zarr"
    g = zarr.open_group(str(src), mode="w")
    g.attrs["title"] = "rsync"
    x = g.create_array("x", shape=(100, 80), chunks=(32, 32), dtype="i2")
    x[:] = np.arange(8000, dtype="i2").reshape(100, 80)
    y = g.create_array("s/y", shape=(64, 64), chunks=(16, 16), shards=(32, 32), dtype="f4")
    y[:] = np.random.default_rng(3).random((64, 64), dtype="f4")
    m = mount_store(str(store))
    dst = m.path / "zarr" / "synced.zarr"
    for _ in range(2):  # the second run finds everything there (and must say so)
        res = subprocess.run(["rsync", "-a", f"{src}/", f"{dst}/"], capture_output=True, text=True, timeout=120,
                             check=False)
        assert res.returncode == 0, res.stderr  # before: 23, mkstemp ".../x/c/0/.0.XXXXXX" ENOENT
    got = zarr.open_group(str(dst), mode="r")
    assert got.attrs["title"] == "rsync"
    np.testing.assert_array_equal(got["x"][:], x[:])
    np.testing.assert_array_equal(got["s/y"][:], y[:])
    with h5py.File(m.path / "hdf5" / "synced.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][()], x[:])
    m.stop()
    deep_check(store)


def test_umount_while_a_writer_holds_a_file_says_so_and_keeps_its_write(mount_store, store):
    """``polyfs umount`` of a busy mount detaches it lazily: it said nothing, so an operator
    took it for done. It says so now; the writer still finishes, its close stores the chunk,
    and the daemon exits after it."""
    import time

    from conftest import is_mounted, polyfs_cmd

    m = mount_store(str(store))
    pid = m.daemon_pid()
    block = np.full((32, 32), 77, dtype="i4")
    meta = json.loads((m.path / "n5" / "dom.n5" / "A" / "attributes.json").read_text())
    assert meta["dataType"] == "int32"
    os.makedirs(m.path / "n5" / "dom.n5" / "A" / "1", exist_ok=True)
    f = open(m.path / "n5" / "dom.n5" / "A" / "1" / "1", "wb")  # noqa: SIM115 - held across the umount
    try:
        res = subprocess.run(polyfs_cmd("umount", str(m.path)), capture_output=True, text=True, timeout=60,
                             check=False)
        assert res.returncode == 0 and "busy" in res.stderr, res
        assert not is_mounted(m.path)
        header = struct.pack(">HHII", 0, 2, 32, 32)
        f.write(header + gzip_raw(block.astype(">i4").tobytes()) if meta["compression"]["type"] == "gzip"
                else header + block.astype(">i4").tobytes())
    finally:
        f.close()  # stored by the detached daemon, which then exits
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}")
    m = mount_store(str(store))
    got = zarr.open_array(str(m.path / "zarr" / "dom.zarr" / "A"), mode="r")[32:64, 32:64]
    np.testing.assert_array_equal(got, block)


def gzip_raw(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data)


def test_umount_aborts_the_connection_of_a_daemon_that_could_not_die(mountstore_stopped):
    """A daemon SIGKILLed while one of its threads waited in the kernel (a reverse invalidation
    waiting for a directory lock a request to this daemon held) cannot finish dying: /dev/fuse
    stays open, every process on the mount hangs in D state for ever, and ``fusermount -u -z``
    frees none of them (seen in the crash loop: writers stuck 15 minutes until fusectl's
    ``abort``). ``polyfs umount`` aborts the connection of a daemon that is gone: here the
    daemon is stopped and its note names a dead pid, which is what that state looks like."""
    from conftest import polyfs_cmd

    m, note, _pid, stuck = mountstore_stopped
    dead = Path(note).read_text()
    res = subprocess.run(polyfs_cmd("umount", str(m.path)), capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0 and "aborted" in res.stderr, res
    _out, err = stuck.communicate(timeout=60)  # before: hung for ever
    assert stuck.returncode != 0 and "connection abort" in err, err  # ECONNABORTED
    # the note it acted on is gone (the connection id is free again: a mount made since may
    # have noted itself under it, seen once in a full run)
    left = Path(note).read_text() if os.path.exists(note) else None
    assert left != dead, left


@pytest.fixture
def mountstore_stopped(mount_store, store):
    import signal
    import time

    from polyfs.daemon import FUSECTL, _conn_file, connection_of

    m = mount_store(str(store))
    pid = m.daemon_pid()
    conn = connection_of(str(m.path))
    note = _conn_file(conn)
    deadline = time.monotonic() + 60
    while not os.path.exists(note) and time.monotonic() < deadline:  # written once the mount is live
        time.sleep(0.05)
    assert Path(note).read_text().split() == [str(pid), os.path.realpath(m.path)]
    os.kill(pid, signal.SIGSTOP)
    stuck = subprocess.Popen(["stat", str(m.path / "zarr" / "dom.zarr" / "nothing")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        waiting = os.path.join(FUSECTL, conn, "waiting")
        while int(Path(waiting).read_text()) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        dead = subprocess.Popen(["true"])
        dead.wait()
        with open(note, "w") as f:
            f.write(f"{dead.pid} {os.path.realpath(m.path)}\n")
        yield m, note, pid, stuck
    finally:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if stuck.poll() is None:
            stuck.kill()
        subprocess.run(["fusermount3", "-u", "-z", str(m.path)], capture_output=True, check=False)


def test_the_daemon_notes_its_pid_and_removes_the_note_at_unmount(mount_store, store):
    import time

    from polyfs.daemon import _conn_file, connection_of

    m = mount_store(str(store))
    note = _conn_file(connection_of(str(m.path)))
    deadline = time.monotonic() + 60
    while not os.path.exists(note) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Path(note).read_text().split()[0] == str(m.daemon_pid())
    m.stop()
    deadline = time.monotonic() + 60
    while os.path.exists(note) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(note)
