"""Reliability under stress, found by a user's tests (explore 4): concurrent writers of one
array through different tools and views, on a real mount.

- tensorstore's file driver makes a read-modify-write atomic with a lock file it tells from
  its successor by inode number (``X.__lock``: lock it, re-open the name, compare ``st_ino``).
  A file made where an unlinked one was still open got the unlinked file's inode, so a writer
  whose lock file the previous owner had unlinked took the new, empty lock file for its own:
  it wrote its shard into the unlinked file and renamed the empty one onto the shard, which
  deleted every chunk of it. Two tensorstore processes writing parts of the same inner chunks
  lost most of the array, silently.
- A file of the HDF5 view is written back in whole pages: h5py ``r+`` changing one chunk also
  wrote the chunks beside it as they were when the page was first filled, reverting what
  another process had written there meanwhile. And a shard that zarr-python read before
  h5py changed one of its chunks, written back after, reverted h5py's chunk: only writes
  through shard files were remembered as replaced versions.
- ``open(O_CREAT)`` of a name another process unlinks between the kernel's lookup and its open
  got ENOENT (tensorstore failed writes with four writers of one shard); on a disk it opens
  the unlinked file.
- With ``scratch_dir`` full, a writer whose own file was kept in memory was told EIO because
  another file's spill failed: it gave its file up, and its close stored what was there.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")


@pytest.fixture
def store(tmp_path) -> Path:
    d = tmp_path / "store"
    d.mkdir()
    return d


def test_a_file_made_where_an_open_one_was_unlinked_is_another_file(mount_store, store):
    """As on a disk: the unlinked file keeps its inode, size and bytes for whoever holds it
    open, and the new file at its name has an inode of its own."""
    m = mount_store(str(store))
    d = m.path / "zarr" / "ino.zarr" / "g"
    os.makedirs(d)
    path = d / "x.__lock"
    fd1 = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    try:
        os.unlink(path)
        fd2 = os.open(path, os.O_CREAT | os.O_WRONLY)
        try:
            os.write(fd1, b"AAAA")
            assert os.fstat(fd1).st_ino != os.fstat(fd2).st_ino
            assert os.fstat(fd1).st_size == 4 and os.fstat(fd2).st_size == 0
            assert os.stat(path).st_ino == os.fstat(fd2).st_ino and os.stat(path).st_size == 0
        finally:
            os.close(fd2)
    finally:
        os.close(fd1)
    os.unlink(path)
    assert not path.exists()


def _ts_spec(path: str) -> dict:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}


def _ts_writer(path: str, i: int, n: int) -> None:
    t = ts.open(_ts_spec(path)).result()
    for k in range(8):  # 8x8 pieces: every inner chunk (32x32) is shared by both writers
        for c in range(i * 8, 64, n * 8):
            t[k * 8:(k + 1) * 8, c:c + 8].write(np.full((8, 8), 100 * (i + 1) + k, "uint16")).result()


def test_tensorstore_writers_sharing_inner_chunks_lose_nothing(mount_store, store):
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "tsc.zarr")
    path = str(m.path / "zarr" / "tsc.zarr" / "a")
    ts.open({**_ts_spec(path), "create": True, "metadata": {
        "shape": [64, 64], "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64]}},
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [32, 32], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]}}).result()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_ts_writer, args=(path, i, 2)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, m.log_text()[-3000:]
    want = np.zeros((64, 64), "uint16")
    for i in range(2):
        for k in range(8):
            for c in range(i * 8, 64, 16):
                want[k * 8:(k + 1) * 8, c:c + 8] = 100 * (i + 1) + k
    np.testing.assert_array_equal(ts.open(_ts_spec(path)).result().read().result(), want)
    assert "deleting chunks" not in m.log_text()  # nothing was ever written as an empty shard


def _zarr_write(path: str, rows: slice, cols: slice, value: int) -> None:
    code = (f"import zarr; a = zarr.open_array({path!r}, mode='r+'); "
            f"a[{rows.start}:{rows.stop}, {cols.start}:{cols.stop}] = {value}")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_h5py_writing_one_chunk_keeps_the_chunk_beside_it_another_process_wrote(mount_store, store):
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "pg.zarr")
    path = str(m.path / "zarr" / "pg.zarr" / "a")
    a = zarr.create_array(path, shape=(16, 64), chunks=(16, 16), dtype="uint16", compressors=None)
    a[...] = 1
    with h5py.File(m.path / "hdf5" / "pg.h5", "r+") as f:
        f["a"][:, 16:32] = 3  # chunk (0, 1): its page, holding chunk (0, 0) too, is filled now
        f.flush()
        _zarr_write(path, slice(0, 16), slice(0, 16), 2)  # chunk (0, 0), by another process
    got = zarr.open_array(path, mode="r")[...]
    np.testing.assert_array_equal(got[:, :16], 2)
    np.testing.assert_array_equal(got[:, 16:32], 3)
    np.testing.assert_array_equal(got[:, 32:], 1)
    assert "stale copy" in m.log_text()


def test_a_shard_read_before_h5py_changed_a_chunk_of_it_does_not_revert_it(mount_store, store):
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "sh.zarr")
    path = m.path / "zarr" / "sh.zarr" / "a"
    a = zarr.create_array(str(path), shape=(32, 32), chunks=(16, 16), shards=(32, 32), dtype="uint16",
                          compressors=None)
    a[...] = 1
    shard = path / "c" / "0" / "0"
    with open(shard, "rb") as f:  # a read-modify-write begins: the whole shard read
        before = f.read()
    code = f"import h5py\nwith h5py.File({str(m.path / 'hdf5' / 'sh.h5')!r}, 'r+') as f:\n    f['a'][16:, 16:] = 7"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)  # another process changes chunk (1, 1)
    with open(shard, "r+b") as f:  # ... and the shard written back with the copy it read
        f.write(before)
    got = zarr.open_array(str(path), mode="r")[...]
    np.testing.assert_array_equal(got[16:, 16:], 7)
    np.testing.assert_array_equal(got[:16], 1)


def test_a_failed_spill_is_not_the_error_of_a_write_whose_file_was_kept(monkeypatch) -> None:
    """Writers relieve the budget after their own write (writeops.write): one whose file stays
    intact while a spill fails must not get EIO for bytes that were kept. Only the files that
    pushed memory past the budget are failed, and only their writers hear it. (A writer told
    EIO gives its file up, and its close would then store what was there.)"""
    import errno

    from polyfs.fs import overlay
    from polyfs.fs.overlay import PendingFile, ScratchFailed, WriteBudget

    page = 1024
    budget = WriteBudget(2 * page, page_size=page)
    kept = PendingFile("kept", True, 0.0, budget)
    kept.write(0, b"1" * page, relieve=False)  # within the budget
    pushing = PendingFile("pushing", True, 0.0, budget)
    pushing.write(0, b"2" * 2 * page, relieve=False)  # past it, its writer not yet relieving

    def no_space(fd: int, data, at: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(overlay, "_pwrite_all", no_space)
    budget.relieve(kept)  # the first writer sees the budget over and spills: that fails
    assert pushing.failed and not kept.failed
    assert kept.read(0, page) == b"1" * page
    with pytest.raises(ScratchFailed):
        pushing.write(0, b"x")
    pushing.truncate(0)
    pushing.write(0, b"2" * 3 * page, relieve=False)
    with pytest.raises(ScratchFailed):
        budget.relieve(pushing)  # the writer whose file is failed hears it
    assert pushing.failed and not kept.failed


def test_an_open_racing_the_unlink_of_the_name_it_looked_up_opens_the_unlinked_file() -> None:
    """``open(O_CREAT)`` of an existing name: the kernel looks the name up, drops the directory's
    lock, then sends the open; another process's ``unlink`` may come in between. As on a disk
    the open gets the unlinked file (held open or not), never ENOENT: tensorstore failed its
    write (NOT_FOUND on its lock file) with four writers of one shard. Nothing written there is
    stored, and the name is free for a new file with an inode of its own."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fs"))
    from writeharness import FS

    fs = FS()
    try:
        fs.mkdir("zarr/o.zarr")
        fs.makedirs("zarr/o.zarr/g")
        lock = "zarr/o.zarr/g/c.__lock"
        for held in (True, False):
            first = fs.open_file(lock)
            first.write(b"shard bytes")
            ino = fs.ino(lock)  # the second process's lookup
            if not held:
                first.release()
            fs.unlink(lock)  # the first process unlinks it: the second's open arrives now
            fi = fs.call(fs.ops.open, ino, os.O_WRONLY, fs.ctx)
            fs.call(fs.ops.write, fi.fh, 0, b"lost")
            fs.call(fs.ops.flush, fi.fh)
            fs.call(fs.ops.release, fi.fh)
            if held:
                assert first.read(0, 100) == b"lostd bytes"  # one file, written through both opens
                first.release()
            new = fs.open_file(lock)
            assert fs.ino(lock) != ino
            new.release()
            fs.unlink(lock)
            assert not fs.exists(lock)
    finally:
        fs.close()


def test_a_scratch_dir_that_cannot_hold_files_refuses_the_mount(tmp_path) -> None:
    """``-o scratch_dir=`` naming a file, or a directory on a read-only file system: the mount is
    refused with one line naming the option. It used to mount, and every file written past
    ``write_buffer_mb`` then failed with EIO at its writes and close."""
    from conftest import fuse_available, is_mounted, polyfs_cmd

    if not fuse_available():
        pytest.skip("needs /dev/fuse and root (bind mounts)")
    store, mnt, src, ro = (tmp_path / n for n in ("store", "mnt", "src", "ro"))
    for d in (store, mnt, src, ro):
        d.mkdir()
    (tmp_path / "afile").write_bytes(b"")
    subprocess.run(["mount", "--bind", str(src), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        for scratch, why in ((tmp_path / "afile", "not a directory"), (ro, "Read-only file system"),
                             (ro / "sub", "Read-only file system")):
            res = subprocess.run(polyfs_cmd("mount", str(store), str(mnt), "-o", f"scratch_dir={scratch}"),
                                 capture_output=True, text=True, timeout=60)
            assert res.returncode != 0 and not is_mounted(mnt), res
            assert f"scratch_dir {scratch}: {why}" in res.stderr, res.stderr
        res = subprocess.run(polyfs_cmd("mount", str(store), str(mnt), "-o", f"ro,scratch_dir={ro}"),
                             capture_output=True, text=True, timeout=60)  # a read-only mount writes nothing
        assert res.returncode == 0, res.stderr
        subprocess.run(polyfs_cmd("umount", str(mnt)), capture_output=True, timeout=60)
    finally:
        if is_mounted(mnt):
            subprocess.run(polyfs_cmd("umount", str(mnt)), capture_output=True, timeout=60)
        if subprocess.run(["umount", str(ro)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(ro)], capture_output=True)
    assert not is_mounted(ro) and not is_mounted(mnt)
