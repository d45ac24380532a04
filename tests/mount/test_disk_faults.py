"""Local disk faults under a real mount: a store on a small tmpfs that fills up while
tools write through the views, a full scratch directory, a read-only store.

Which errno a writer gets, and where: every store write of a commit happens at FUSE
``flush`` (each ``close()``), ``fsync``, or the ``rename``/``link`` that gives a
temporary file its final name (zarr-python writes ``*.partial`` and renames it), so a
full store is reported there, never at ``write`` (whose bytes are kept by the daemon).
The local store raises ``NoSpace`` (a ``StoreError``), which the one errno table
(``polyfs/errors.py``) maps to ``ENOSPC``: the writer sees "No space left on device"
(h5py as a ``RuntimeError``/``OSError`` from ``close()``, zarr-python as ``OSError`` from
the rename); other store failures are ``EIO``. A full *scratch* directory is hit at
``write`` (spilling past ``write_buffer_mb``) and is ``EIO`` (the file is failed whole);
tests of whole tools accept either.

What must hold after each failure: nothing half committed (every chunk reads old or
new as a whole, a new domain or array is there whole or not at all, metadata JSON is
byte for byte the old one), no temporary files or empty prefixes left in the store,
``polyfs check --deep`` clean without ``--repair``, the mount still serving every other
file, and the same writes accepted once space is freed.

Needs root (tmpfs mounts) and /dev/fuse. Every tmpfs made here is unmounted in a
``finally``, lazily if a daemon still holds it.
"""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from conftest import fuse_available, is_mounted, polyfs_cmd

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.skipif(not fuse_available(), reason="needs root (tmpfs mounts) and /dev/fuse")

STEM = "disk"
SHAPE, CHUNKS = (32, 64, 64), (8, 32, 32)  # 16 chunks of 16 KiB (uint16)
FAULTS = (errno.EIO, errno.ENOSPC)


# -- tmpfs and space ---------------------------------------------------------------------------
@contextmanager
def tmpfs(path: Path, size: str, *opts: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``, always unmounted afterwards (lazily if still busy)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}", *opts)), "polyfs-test", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
        assert not is_mounted(path)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(fs: Path, leave: int) -> Path:
    """Take all but ``leave`` bytes of ``fs`` with a ballast file."""
    ballast = fs / "ballast"
    n = free_bytes(fs) - leave
    assert n > 0, f"only {free_bytes(fs)} bytes free"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, n)
    finally:
        os.close(fd)
    return ballast


# -- the store ---------------------------------------------------------------------------------
def keep_data() -> np.ndarray:
    return (np.arange(np.prod(SHAPE), dtype=np.uint32) % 60000).astype(np.uint16).reshape(SHAPE)


def d_data() -> np.ndarray:
    return np.random.default_rng(7).integers(0, 65535, SHAPE, dtype=np.uint16)


WIDE, WIDE_CHUNKS = (128, 64, 96), (1, 64, 96)  # 128 chunks: two commit batches of the HDF5 view


def wide_data() -> np.ndarray:
    return np.full(WIDE, 5, dtype=np.uint16)  # each chunk deflates to a few dozen bytes


def new_data(seed: int, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    """Incompressible, never the fill value 0 (a chunk reads old, new, or fill: never unclear)."""
    return np.random.default_rng(seed).integers(1, 65535, shape, dtype=np.uint16)


@pytest.fixture
def small_fs(tmp_path) -> Iterator[Path]:
    with tmpfs(tmp_path / "fs", "6m") as fs:
        yield fs


@pytest.fixture
def disk_store(tmp_path, small_fs) -> Path:
    """A store on a 6 MiB tmpfs holding ``/disk.h5``: ``keep`` (deflate), ``d`` (deflate,
    random: its chunks are as large as raw) and ``wide`` (128 tiny deflate chunks)."""
    src = tmp_path / f"{STEM}.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("keep", data=keep_data(), chunks=CHUNKS, compression="gzip")
        f.create_dataset("d", data=d_data(), chunks=CHUNKS, compression="gzip", compression_opts=1)
        f.create_dataset("wide", data=wide_data(), chunks=WIDE_CHUNKS, compression="gzip", compression_opts=1)
        f.attrs["title"] = "disk"
        f["d"].attrs["unit"] = "K"
    store = small_fs / "store"
    assert import_source(src, str(store), progress=False) == f"/{STEM}.h5"
    return store


def store_files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def json_objects(store: Path) -> dict[str, bytes]:
    return {k: v for k, v in store_files(store).items() if k.endswith(".json")}


def leftovers(store: Path) -> list[str]:
    """Temporary files, and directories holding no object (a prefix a failed write made)."""
    out = [str(p.relative_to(store)) for p in store.rglob(".polyfs-tmp-*")]
    out += [str(p.relative_to(store)) + "/" for p in store.rglob("*") if p.is_dir() and not any(p.iterdir())]
    return out


def polyfs_check(store: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(polyfs_cmd("check", str(store), *flags), capture_output=True, text=True, timeout=300)


STALE_INDEX = "persisted chunk index disagrees with the store (run --repair)"


def assert_consistent(store: Path) -> list[str]:
    """``check --deep`` clean, at most after ``--repair``, which may only rebuild persisted chunk
    listings (derived data, keyed by the directory's change token: a temp file staged and
    removed in a dataset's directory by a failed write moves that token, so the listing is
    taken again on next use). No chunk, JSON object or prefix is ever repaired or deleted.
    Returns what repair did."""
    assert leftovers(store) == []
    res = polyfs_check(store, "--deep")
    repaired: list[str] = []
    if res.returncode != 0:
        problems = [ln for ln in res.stdout.splitlines() if ln.startswith("problem:")]
        assert problems and all(ln.endswith(STALE_INDEX) for ln in problems), res.stdout + res.stderr
        fix = polyfs_check(store, "--repair")
        repaired = [ln for ln in fix.stdout.splitlines() if ln.startswith("repaired:")]
        # (a writable check lists such a dataset afresh on load and saves the listing itself,
        # so repair may report fewer rebuilds than problems)
        assert fix.returncode == 0 and len(repaired) <= len(problems), fix.stdout + fix.stderr
        assert all(ln.endswith("rebuilt its persisted chunk index") for ln in repaired), fix.stdout
        res = polyfs_check(store, "--deep")
    assert res.returncode == 0 and "store is consistent" in res.stdout, res.stdout + res.stderr
    return repaired


def gone(path: Path, within: float = 3.0) -> bool:
    """``path`` disappears (a name the kernel cached stays up to ``entry_timeout``)."""
    deadline = time.monotonic() + within
    while path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def assert_serving(m, d_want: np.ndarray | None = None) -> None:
    """The mount still reads the untouched data through two views."""
    with h5py.File(m.path / "hdf5" / f"{STEM}.h5", "r") as f:
        np.testing.assert_array_equal(f["keep"][()], keep_data())
        if d_want is not None:
            np.testing.assert_array_equal(f["d"][()], d_want)
        assert f.attrs["title"] == "disk"
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / f"{STEM}.zarr" / "keep"), mode="r")[:],
                                  keep_data())


def chunk_slices(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    for idx in np.ndindex(*(-(-s // c) for s, c in zip(shape, chunks))):
        yield tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, shape))


def old_or_new(got: np.ndarray, old: np.ndarray, new: np.ndarray, chunks: tuple[int, ...]) -> dict[str, int]:
    """How many chunks read wholly old and wholly new; fails on any other chunk."""
    count = {"old": 0, "new": 0}
    for sl in chunk_slices(new.shape, chunks):
        if np.array_equal(got[sl], new[sl]):
            count["new"] += 1
        else:
            np.testing.assert_array_equal(got[sl], old[sl], err_msg=f"chunk {sl}: neither old nor new")
            count["old"] += 1
    return count


def fault_errno(exc: BaseException) -> int | None:
    """The errno a tool's exception carries (h5py names it in a RuntimeError's text)."""
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    text = str(exc)
    for code in FAULTS:
        if f"errno = {code}" in text or os.strerror(code) in text:
            return code
    return None


# -- a store that fills up ---------------------------------------------------------------------
def test_local_store_writes_on_a_full_disk_leave_the_old_objects(small_fs):
    """The store backend alone: on a full file system every kind of write fails with a
    StoreError (EIO in the errno table), the old object stays byte for byte (temp file +
    fsync + rename: ``.domain.json``, ``.dataset.json``, a chunk, a CRC table), a batch
    (``put_many``) lands nothing, and neither a temp file nor a directory made for the
    write stays behind. Deleting a prefix removes its directories too."""
    from polyfs.errors import StoreError, errno_of
    from polyfs.model import ids, keys
    from polyfs.store.local import LocalStore

    store = LocalStore(small_fs / "s", create=True)
    root = ids.new_root_id()
    ds = ids.new_id("d", root)
    old = {keys.domain_key("/a.h5"): b'{"root": "%s"}' % root.encode(), keys.dataset_key(ds): b'{"v": 1}',
           keys.chunk_key(ds, (0, 0)): b"\1" * 5000, keys.crc_table_key(ds): b"\2" * 100}
    for k, v in old.items():
        store.put(k, v)
    ballast = fill(small_fs, 0)
    before = store_files(small_fs / "s")
    other = ids.new_root_id()
    attempts = [lambda k=k: store.put(k, b"x" * 9000) for k in old]
    attempts.append(lambda: store.put_many([(k, b"y" * 9000) for k in old]))
    attempts.append(lambda: store.put(keys.group_key(other), b"{}"))  # a new prefix: its directory goes too
    attempts.append(lambda: store.put_many([(keys.chunk_key(ids.new_id("d", other), (i,)), b"z" * 9000)
                                            for i in range(3)]))
    for attempt in attempts:
        with pytest.raises(StoreError) as info:
            attempt()
        assert errno_of(info.value) == errno.ENOSPC and "No space left" in str(info.value)
    assert store_files(small_fs / "s") == before
    assert leftovers(small_fs / "s") == []
    assert [p.name for p in (small_fs / "s" / "db").iterdir()] == [keys.domain_db_prefix(root)[3:-1]]
    ballast.unlink()
    store.put(keys.chunk_key(ids.new_id("d", other), (0,)), b"z")
    assert store.delete_prefix(keys.domain_db_prefix(other)) == 1
    assert not (small_fs / "s" / keys.domain_db_prefix(other)).exists()


@pytest.mark.parametrize("tool", ["zarr-python", "tensorstore"])
def test_zarr_writer_overflowing_the_store(small_fs, disk_store, mount_store, tool):
    """A new 2 MiB Zarr array written into ~0.5 MiB of free space: the writer fails at the
    rename (zarr-python) or flush (tensorstore) of some shard with EIO. Each shard is stored
    whole (its chunks staged before any is renamed) or not at all; the domain's other
    datasets are untouched; after freeing space the same write succeeds."""
    m = mount_store(str(disk_store))
    shape, chunks, shards = (512, 1024), (64, 128), (128, 256)  # 2 MiB; shards of 4 chunks (64 KiB)
    data = new_data(11, shape)
    path = m.path / "zarr" / f"{STEM}.zarr" / "big"
    before = json_objects(disk_store)
    ballast = fill(small_fs, 512 << 10)

    def write() -> None:
        if tool == "zarr-python":
            a = zarr.create_array(str(path), shape=shape, chunks=chunks, shards=shards, dtype="uint16",
                                  compressors=None, fill_value=0, overwrite=True)
            a[:] = data
            return
        ts = pytest.importorskip("tensorstore")
        t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)},
                     "metadata": {"shape": list(shape), "data_type": "uint16", "fill_value": 0,
                                  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shards)}},
                                  "codecs": [{"name": "sharding_indexed", "configuration": {
                                      "chunk_shape": list(chunks),
                                      "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]},
                     "create": True, "delete_existing": True}).result()
        t[...] = data

    with pytest.raises(Exception) as info:
        write()
    assert fault_errno(info.value) in FAULTS, repr(info.value)
    got = zarr.open_array(str(path), mode="r")[:]  # the array exists (its zarr.json fit), partly stored
    count = old_or_new(got, np.zeros_like(data), data, chunks)
    assert count["old"] > 0, count
    print(f"{tool}: chunks stored before the store filled: {count}")
    after = json_objects(disk_store)  # only the root group changed (it links "big" now)
    assert {k: v for k, v in after.items() if k in before and not k.endswith(".group.json")} == \
        {k: v for k, v in before.items() if not k.endswith(".group.json")}
    assert_serving(m, d_data())
    assert_consistent(disk_store)

    ballast.unlink()
    write()
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], data)
    with h5py.File(m.path / "hdf5" / f"{STEM}.h5", "r") as f:
        np.testing.assert_array_equal(f["big"][()], data)
    m.stop()
    assert_consistent(disk_store)


def test_h5py_rewrite_overflowing_the_store(small_fs, disk_store, mount_store):
    """h5py ``r+`` rewrites every chunk of two datasets with incompressible data while the
    store has room for only part of it: ``close()`` fails (EIO at FUSE flush; h5py raises).

    What a failed commit leaves: the HDF5 view's chunks are stored in batches (64 chunks);
    each batch stages every chunk before renaming any, so a full disk fails a batch whole.
    Batches already stored are **not** rolled back: their chunks are new, the rest old, as
    after a crash mid-commit (SEMANTICS.md, "Chunks are atomic"), so each chunk is wholly old
    or wholly new; no object is unreferenced (they replace chunks of existing datasets), and
    the deflate CRC table holds entries for both versions, so ``check`` needs no repair.
    ``wide``'s 128 chunks grow from ~40 B to 12 KiB: its first batch fits, its second cannot.
    Freed space: the rewrite succeeds."""
    m = mount_store(str(disk_store))
    new_d, new_wide = new_data(21), new_data(22, WIDE)
    ballast = fill(small_fs, 1150 << 10)  # d (net 0: same size), one batch of wide (+512 KiB), not two
    before = json_objects(disk_store)
    f = h5py.File(m.path / "hdf5" / f"{STEM}.h5", "r+")
    f["d"][...] = new_d
    f["wide"][...] = new_wide
    with pytest.raises(Exception) as info:
        f.close()
    assert fault_errno(info.value) in FAULTS, repr(info.value)
    with h5py.File(m.path / "hdf5" / f"{STEM}.h5", "r") as g:
        got_d, got_wide = g["d"][()], g["wide"][()]
        assert g["d"].attrs["unit"] == "K"
    count_d = old_or_new(got_d, d_data(), new_d, CHUNKS)
    count_wide = old_or_new(got_wide, wide_data(), new_wide, WIDE_CHUNKS)
    print(f"h5py: chunks committed before the store filled: d {count_d}, wide {count_wide}")
    assert 0 < count_wide["old"] < 128, count_wide  # one batch of wide in, one not
    assert json_objects(disk_store) == before  # no extent, attribute or link changed
    assert_serving(m)
    assert_consistent(disk_store)

    ballast.unlink()
    with h5py.File(m.path / "hdf5" / f"{STEM}.h5", "r+") as f:
        f["d"][...] = new_d
        f["wide"][...] = new_wide
    with h5py.File(m.path / "hdf5" / f"{STEM}.h5", "r") as f:
        np.testing.assert_array_equal(f["d"][()], new_d)
        np.testing.assert_array_equal(f["wide"][()], new_wide)
    m.stop()
    assert_consistent(disk_store)


def test_cp_of_a_new_hdf5_file_into_a_full_store(small_fs, disk_store, mount_store, tmp_path):
    """``cp big.h5 hdf5/`` with too little room: the new domain is imported at ``close()`` and
    fails (cp: "Input/output error", EIO at flush); the import is all or nothing (the
    writer deletes what it stored), so no domain, no ``db/`` prefix and no derived data of
    it remain. The same ``cp`` over the existing domain's file fails alike and leaves the old
    domain as it was. Freed space: the cp works."""
    m = mount_store(str(disk_store))
    src = tmp_path / "big.h5"
    data = new_data(31, (64, 128, 128))  # 2 MiB, incompressible
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=data, chunks=(8, 64, 64), compression="gzip", compression_opts=1)
    before = store_files(disk_store)
    ballast = fill(small_fs, 600 << 10)
    res = subprocess.run(["cp", str(src), str(m.path / "hdf5" / "big.h5")], capture_output=True, text=True)
    assert res.returncode != 0 and "failed to close" in res.stderr, res
    assert gone(m.path / "hdf5" / "big.h5")
    assert "big.zarr" not in os.listdir(m.path / "zarr")
    assert store_files(disk_store) == before  # byte for byte: nothing of the import stayed
    # over an existing domain: the new version is written before its .domain.json, so the old stays
    over = subprocess.run(["cp", str(src), str(m.path / "hdf5" / f"{STEM}.h5")], capture_output=True, text=True)
    assert over.returncode != 0 and "failed to close" in over.stderr, over
    assert store_files(disk_store) == before
    assert_serving(m, d_data())
    assert_consistent(disk_store)

    ballast.unlink()
    subprocess.run(["cp", str(src), str(m.path / "hdf5" / "big.h5")], check=True)
    with h5py.File(m.path / "hdf5" / "big.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][()], data)
    m.stop()
    assert_consistent(disk_store)
    assert "No space left on device" in res.stderr, res  # the store's ENOSPC, not EINVAL


def test_new_domain_array_and_metadata_in_a_full_store(small_fs, disk_store, mount_store):
    """With no byte free: ``mkdir zarr/<new>.zarr`` (a domain), a new Zarr array (its
    ``zarr.json`` makes a ``.dataset.json`` and rewrites the parent's ``.group.json``), new
    attributes of an array and of the root group (a ``.dataset.json`` / ``.group.json``
    replaced): each fails with EIO (mkdir at once, JSON at close) and every JSON object of
    the store, ``.domain.json`` included, is byte for byte the old one (temp file + rename:
    the old object is only replaced once the new one is whole). Freed space: all succeed."""
    m = mount_store(str(disk_store))
    zroot = m.path / "zarr" / f"{STEM}.zarr"
    before = store_files(disk_store)
    ballast = fill(small_fs, 0)

    with pytest.raises(OSError) as info:
        os.mkdir(m.path / "zarr" / "fresh.zarr")
    assert info.value.errno in FAULTS
    with pytest.raises(Exception) as info2:
        zarr.create_array(str(zroot / "arr"), shape=(10, 10), chunks=(5, 5), dtype="uint8")
    assert fault_errno(info2.value) in FAULTS, repr(info2.value)
    with pytest.raises(Exception) as info3:
        zarr.open_array(str(zroot / "d"), mode="r+").attrs["note"] = "x" * 20000
    assert fault_errno(info3.value) in FAULTS, repr(info3.value)
    with pytest.raises(Exception) as info4:
        zarr.open_group(str(zroot), mode="r+").attrs["note"] = "y" * 20000
    assert fault_errno(info4.value) in FAULTS, repr(info4.value)

    assert store_files(disk_store) == before  # every object as it was (JSON, chunks, derived data)
    assert "fresh.zarr" not in os.listdir(m.path / "zarr")
    with h5py.File(m.path / "hdf5" / f"{STEM}.h5", "r") as f:
        assert sorted(f) == ["d", "keep", "wide"] and "note" not in f["d"].attrs and "note" not in f.attrs
    assert_serving(m, d_data())
    assert_consistent(disk_store)

    ballast.unlink()
    os.mkdir(m.path / "zarr" / "fresh.zarr")
    a = zarr.create_array(str(zroot / "arr"), shape=(10, 10), chunks=(5, 5), dtype="uint8")
    a[:] = 3
    zarr.open_array(str(zroot / "d"), mode="r+").attrs["note"] = "x" * 20000
    with h5py.File(m.path / "hdf5" / f"{STEM}.h5", "r") as f:
        assert f["d"].attrs["note"] == "x" * 20000 and (f["arr"][()] == 3).all()
    assert (m.path / "hdf5" / "fresh.h5").exists()
    m.stop()
    assert_consistent(disk_store)


# -- a full scratch directory ------------------------------------------------------------------
def test_spill_to_a_full_scratch_dir(mount_store, tmp_path):
    """``write_buffer_mb=1`` and a 512 KiB scratch tmpfs: ``cp`` of a 6 MiB HDF5 file must
    spill, the spill fails, and the write gets EIO (cp: "Input/output error"). The file is
    failed as a whole (its pages and scratch space freed, never stored: no domain appears),
    the daemon keeps serving, and a file that fits in memory is then written normally."""
    store = tmp_path / "store"
    src = tmp_path / f"{STEM}.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("keep", data=keep_data(), chunks=CHUNKS, compression="gzip")
        f.create_dataset("d", data=d_data(), chunks=CHUNKS, compression="gzip")
        f.attrs["title"] = "disk"
    import_source(src, str(store), progress=False)
    big = tmp_path / "big.h5"
    with h5py.File(big, "w") as f:
        f.create_dataset("x", data=new_data(41, (96, 128, 256)))  # 6 MiB, contiguous
    small = tmp_path / "small.h5"
    with h5py.File(small, "w") as f:
        f.create_dataset("y", data=np.arange(1000, dtype="int32"))
    with tmpfs(tmp_path / "scratch", "512k") as scratch:
        m = mount_store(str(store), "write_buffer_mb=1", f"scratch_dir={scratch}")
        try:
            res = subprocess.run(["cp", str(big), str(m.path / "hdf5" / "big.h5")], capture_output=True, text=True)
            assert res.returncode != 0 and ("Input/output error" in res.stderr or "No space" in res.stderr), res
            assert gone(m.path / "hdf5" / "big.h5")
            assert_serving(m, d_data())
            assert "failing" in m.log_text() and "big.h5" in m.log_text()
            assert free_bytes(scratch) > 400 << 10  # the failed file's scratch space was given back
            shutil.copy(small, m.path / "hdf5" / "small.h5")
            with h5py.File(m.path / "hdf5" / "small.h5", "r") as f:
                np.testing.assert_array_equal(f["y"][()], np.arange(1000, dtype="int32"))
        finally:
            m.stop()  # before the tmpfs goes: the daemon holds its scratch files
    assert_consistent(store)


# -- a read-only store -------------------------------------------------------------------------
def test_read_only_store_mounts_read_only_with_one_warning(disk_store, small_fs, tmp_path):
    """A store on a file system mounted read-only: ``polyfs mount`` mounts read-only and says so
    in one warning line on stderr; reads work, every change gets EROFS."""
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    mp = tmp_path / "mnt"
    mp.mkdir()
    log = tmp_path / "polyfs.log"
    res = subprocess.run(polyfs_cmd("mount", str(disk_store), str(mp), "--log-file", str(log)),
                         capture_output=True, text=True, timeout=60)
    try:
        assert res.returncode == 0, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("polyfs: warning:") and "read-only" in lines[0], res.stderr
        assert str(disk_store) in lines[0]
        assert "mounting read-only" in log.read_text()
        with h5py.File(mp / "hdf5" / f"{STEM}.h5", "r") as f:
            np.testing.assert_array_equal(f["keep"][()], keep_data())
        for change in (lambda: os.mkdir(mp / "zarr" / "new.zarr"),
                       lambda: open(mp / "hdf5" / f"{STEM}.h5", "r+b"),
                       lambda: open(mp / "zarr" / f"{STEM}.zarr" / "d" / "zarr.json", "w"),
                       lambda: os.unlink(mp / "hdf5" / f"{STEM}.h5")):
            with pytest.raises(OSError) as info:
                change()
            assert info.value.errno == errno.EROFS
    finally:
        subprocess.run(polyfs_cmd("umount", str(mp)), capture_output=True, timeout=60)
    assert not is_mounted(mp)


def test_read_only_store_in_the_foreground_logs_the_warning(disk_store, small_fs, tmp_path):
    """``polyfs mount -f`` (systemd) on a read-only store: the same warning, in its log."""
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    mp = tmp_path / "mnt"
    mp.mkdir()
    log = tmp_path / "polyfs.log"
    proc = subprocess.Popen(polyfs_cmd("mount", "-f", str(disk_store), str(mp), "--log-file", str(log)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while not is_mounted(mp) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert is_mounted(mp), proc.stderr.read() if proc.poll() is not None else "not mounted"
        with pytest.raises(OSError) as info:
            os.mkdir(mp / "zarr" / "new.zarr")
        assert info.value.errno == errno.EROFS
        warnings = [ln for ln in log.read_text().splitlines() if "WARNING" in ln and "read-only" in ln]
        assert len(warnings) == 1 and "not writable" in warnings[0], log.read_text()
    finally:
        subprocess.run(polyfs_cmd("umount", str(mp)), capture_output=True, timeout=60)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert not is_mounted(mp)
