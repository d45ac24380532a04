"""Reliability under concurrency found by a user's tests (explore 6), operations awaited directly.

- A file of the HDF5 (or TIFF) view opened for writing reads the view's bytes on demand, and
  a write into a page it had not written yet first copied the rest of that page from the view
  file. The view file holds every dataset's stored chunks: when another process had rewritten
  one of them since the open (zarr-python or tensorstore writing another array of the same
  domain), that copy found the chunk changed (``ChunkChanged``) and the *write* failed with
  EIO. h5py ``r+`` writing dataset C could not even open the file (HDF5 writes its superblock
  at open) while a Zarr writer filled array A of the same domain. Those bytes were never the
  writer's: the write is kept, the page stays partial (the rest reads the view file, EIO only
  if someone reads it), and its untouched bytes count as untouched, so the flush never reads
  the changed chunk and the other writer's chunk stays.
"""
from __future__ import annotations

import io
import os
import random

import h5py
import numpy as np
import pytest
from writeharness import FS, n5_block

from polyfs.errors import ChunkChanged, ChunkMissing
from polyfs.fs.overlay import PendingFile, WriteBudget
from polyfs.importers import import_source


# -- tier 1: a base whose stored chunks changed under it ---------------------------------------
class ChangedBase:
    """A view file over ``data`` whose bytes in ``broken`` ranges belong to chunks rewritten
    since it was laid out: any read overlapping them raises ChunkChanged, as Reader does."""

    def __init__(self, data: bytes, broken: list[tuple[int, int]]) -> None:
        self.data, self.size, self.broken = bytes(data), len(data), broken

    def read(self, off: int, n: int) -> bytes:
        if any(off < e and s < off + n for s, e in self.broken):
            raise ChunkChanged(f"stored object at {off} changed size")
        return self.data[off:off + n]


def _random_ops_over_changed_chunks(seed: int, page: int = 64) -> None:
    rng = random.Random(seed)
    data = rng.randbytes(rng.randrange(4 * page, 12 * page))
    broken = []
    for _ in range(rng.randrange(1, 5)):
        s = rng.randrange(0, len(data) - 8)
        broken.append((s, s + rng.randrange(1, 2 * page)))
    base = ChangedBase(data, broken)
    f = PendingFile("hdf5/x.h5", True, 0.0, WriteBudget(3 * page, page_size=page), base)
    model = bytearray(data)
    touched = bytearray(len(data))  # 1: written, or past a shrink (no base byte any more)
    for step in range(150):
        op = rng.random()
        size = len(model)
        if op < 0.5:
            off = rng.randrange(0, size + page)
            buf = rng.randbytes(rng.choice([1, rng.randrange(1, 40), rng.randrange(1, 3 * page)]))
            assert f.write(off, buf) == len(buf), (seed, step)  # never the base's failure
            end = off + len(buf)
            if end > size:
                model.extend(bytes(end - size))
                touched.extend(b"\1" * (end - size))
            model[off:end] = buf
            touched[off:end] = b"\1" * len(buf)
        elif op < 0.6:
            new = rng.randrange(0, size + page)
            f.truncate(new)
            if new < size:
                del model[new:], touched[new:]
            else:
                model.extend(bytes(new - size))
                touched.extend(b"\1" * (new - size))
        else:
            off, n = rng.randrange(0, size + 1), rng.randrange(1, 3 * page)
            end = min(off + n, size)
            needs_broken = any(not touched[i] and any(s <= i < e for s, e in broken) for i in range(off, end))
            if needs_broken:
                with pytest.raises(ChunkMissing):
                    f.read(off, n)
            else:
                assert f.read(off, n) == bytes(model[off:end]), (seed, step, off, n)
        assert f.size() == len(model), (seed, step)
        for _ in range(5):  # never "untouched" over a written byte or a changed one
            off, n = rng.randrange(0, len(model) + 1), rng.randrange(1, 2 * page)
            if f.untouched(off, n):
                assert off + n <= len(model) and not any(touched[off:off + n]), (seed, step, off, n)
    f.discard()


@pytest.mark.parametrize("seed", range(25))
def test_writes_over_a_view_file_whose_chunks_changed_are_kept(seed: int) -> None:
    _random_ops_over_changed_chunks(seed)


def test_a_changed_chunk_beside_a_write_stays_untouched() -> None:
    """The page's base copy fails: the write is kept, the changed bytes are untouched (the
    flush never reads them) and reading them is the base's error, not stale bytes."""
    page = 1024
    base = ChangedBase(bytes(range(256)) * 16, [(600, 700)])
    f = PendingFile("hdf5/x.h5", True, 0.0, WriteBudget(page_size=page), base)
    f.write(10, b"abc")  # page 0 holds the changed chunk at 600..700
    assert f.read(0, 20) == base.data[:10] + b"abc" + base.data[13:20]
    assert f.untouched(600, 100) and f.untouched(13, 587) and not f.untouched(9, 3)
    assert f.dirty_ranges() == [(10, 13)]
    with pytest.raises(ChunkChanged):
        f.read(0, page)
    f.write(0, bytes(page))  # the whole page written over: whole again, no base needed
    assert f.read(0, page) == bytes(page) and not f.untouched(600, 100)
    f.discard()


# -- tier 2: h5py r+ of a domain whose other dataset another process rewrote --------------------
class FuseFile(io.RawIOBase):
    """An h5py file object over a file opened through the operations (no write at open)."""

    def __init__(self, fs: FS, path: str) -> None:
        self.h, self.fs, self.path, self.pos = fs.open_file(path, os.O_RDWR), fs, path, 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = off if whence == 0 else self.pos + off if whence == 1 else self.fs.stat(self.path).st_size + off
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, b) -> int:
        d = self.h.read(self.pos, len(b))
        b[:len(d)] = d
        self.pos += len(d)
        return len(d)

    def write(self, b) -> int:
        n = self.h.write(bytes(b), self.pos)
        self.pos += n
        return n

    def truncate(self, size: int | None = None) -> int:
        self.h.ftruncate(self.pos if size is None else size)
        return self.pos if size is None else size


def _two_dataset_domain(tmp_path, a_value: int) -> tuple:
    """Store with domain ``/dom.h5`` holding gzip datasets A (all ``a_value``) and C (zeros),
    64x64 uint16 in 32x32 chunks, and an FS over it."""
    src = tmp_path / "dom.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("A", data=np.full((64, 64), a_value, "u2"), chunks=(32, 32), compression="gzip")
        f.create_dataset("C", data=np.zeros((64, 64), "u2"), chunks=(32, 32), compression="gzip")
    store = tmp_path / "store"
    import_source(src, str(store), domain="/dom.h5", progress=False)
    return store, FS(str(store))


def test_h5py_r_plus_while_another_process_rewrites_another_dataset(tmp_path) -> None:
    """h5py changes C while another process rewrites chunk (0, 0) of A through the N5 view
    (its size changes): the close commits C's change (before: EIO at the page copy, the whole
    edit lost) and A keeps the other process's chunk."""
    store, fs = _two_dataset_domain(tmp_path, a_value=0)
    h5w, other = fs.as_pid(1_000_001), fs.as_pid(1_000_002)
    fo = FuseFile(h5w, "hdf5/dom.h5")
    f = h5py.File(fo, "r+")
    new_a = np.random.default_rng(6).integers(0, 60000, (32, 32), dtype="u2")
    attrs = other.read_json("n5/dom.n5/A/attributes.json")
    other.write_file("n5/dom.n5/A/0/0", n5_block(new_a, attrs["compression"]))
    f["C"][40:50, 40:50] = 7
    f.attrs["edited"] = 1
    f.close()
    fo.h.close()  # close(2): flush stores the edit (raised before the fix: EIO at a write)
    fo.h.release()
    with h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/dom.h5")), "r") as g:
        np.testing.assert_array_equal(g["A"][0:32, 0:32], new_a)
        c = np.zeros((64, 64), "u2")
        c[40:50, 40:50] = 7
        np.testing.assert_array_equal(g["C"][()], c)
        assert g.attrs["edited"] == 1
    fs.close()


# -- rsync: every directory first, then the array's metadata, then its chunks ------------------
def _forget_below(fs: FS, prefix: str) -> None:
    """What the kernel does once the daemon invalidated a domain's entries: it drops its
    dentries and forgets their inodes (so only the store says what is there)."""
    entries = [e for e in fs.ops.inodes.entries() if e.path.startswith(prefix + "/")]
    fs.call(fs.ops.forget, [(e.ino, e.lookups) for e in entries])


@pytest.mark.parametrize("view", ["zarr", "n5"])
def test_directories_made_before_an_arrays_metadata_stay_its_chunk_directories(view: str) -> None:
    """rsync makes ``a/c/0`` (N5: ``a/0``) and only then writes ``a/zarr.json``; meanwhile the
    kernel forgot the directories (another write invalidated the domain). The empty groups
    mkdir made went with the group the metadata turned into an array, and rsync's temporary
    file in ``a/c/0`` got ENOENT: its chunks were never stored (exit 23, or exit 0 with no
    chunks on a second run). They stay directories of the array."""
    fs = FS()
    dom = f"{view}/d.{view}"
    fs.mkdir(dom)
    chunk_dir = "c/0" if view == "zarr" else "0"
    fs.makedirs(f"{dom}/a/{chunk_dir}")
    _forget_below(fs, dom)
    if view == "zarr":
        meta = {"zarr_format": 3, "node_type": "array", "shape": [4, 4], "data_type": "int16",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "attributes": {}}
        name, block, data = "zarr.json", "c/0/1", np.array([[1, 2], [3, 4]], "<i2").tobytes()
    else:
        meta = {"dimensions": [4, 4], "blockSize": [2, 2], "dataType": "int16", "compression": {"type": "raw"}}
        name, block, data = "attributes.json", "0/1", n5_block(np.array([[1, 2], [3, 4]], "i2"))
    tmp = fs.open_file(f"{dom}/a/.{name}.XyZ", os.O_RDWR | os.O_CREAT | os.O_EXCL)
    tmp.write(json_bytes(meta), 0)
    fs.rename(f"{dom}/a/.{name}.XyZ", f"{dom}/a/{name}")
    tmp.close()
    assert fs.is_dir(f"{dom}/a/{chunk_dir}")  # before: ENOENT
    h = fs.open_file(f"{dom}/a/{chunk_dir}/.1.AbC", os.O_RDWR | os.O_CREAT | os.O_EXCL)
    h.write(data, 0)
    fs.rename(f"{dom}/a/{chunk_dir}/.1.AbC", f"{dom}/a/{block}")
    h.close()
    fresh = fs.fresh(read_only=True)
    got = fresh.read_file(f"n5/d.n5/a/{'1/0' if view == 'zarr' else '0/1'}")  # N5 names blocks x first
    assert got == n5_block(np.array([[1, 2], [3, 4]], "i2"))  # the chunk is stored: every view shows it
    fs.close()


def json_bytes(obj: object) -> bytes:
    import json

    return json.dumps(obj).encode()


# -- a full scratch_dir: one file failed, said once --------------------------------------------
def test_a_file_whose_spill_failed_is_refused_loudly_once(monkeypatch, caplog) -> None:
    """write_buffer_mb=1 and a scratch_dir that is full: the writer's file is failed (EIO, and
    its close fails) and the store is untouched; a tool that keeps writing after the first EIO
    (cp, h5py) got one warning line per write (hundreds for one file): the failure is said by
    the spill's error line and the first refused use, later ones are debug lines."""
    import errno
    import logging

    from polyfs.fs import overlay

    def full(self, p):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(overlay.PendingFile, "_spill", full)
    fs = FS(write_buffer_mb=1)
    before = fs.state()
    h = fs.open_file("hdf5/big.h5")
    refused = 0
    with caplog.at_level(logging.INFO):
        for i in range(24):
            try:
                h.write(bytes([i]) * (128 << 10), i * (128 << 10))
            except OSError as exc:
                assert exc.errno == errno.EIO
                refused += 1
        with pytest.raises(OSError) as err:
            h.close()
    assert err.value.errno == errno.EIO and refused >= 10
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= 3, [r.getMessage() for r in warnings]
    assert any("big.h5" in r.getMessage() for r in warnings)
    assert fs.state() == before  # nothing stored, no domain made
    f = PendingFile("x", True, 0.0, WriteBudget(page_size=64))
    f.fail("scratch full")
    with pytest.raises(overlay.ScratchFailed) as first:
        f.write(0, b"a")
    assert not isinstance(first.value, overlay.StillLost)
    with pytest.raises(overlay.StillLost):
        f.write(0, b"a")
    f.truncate(0)
    f.write(0, b"ok")
    f.fail("again")
    with pytest.raises(overlay.ScratchFailed) as again:
        f.read(0, 2)
    assert not isinstance(again.value, overlay.StillLost)
    fs.close()


# -- df -------------------------------------------------------------------------------------------
def test_statfs_reports_the_stores_file_system(tmp_path) -> None:
    """``df`` of a mount showed 0 bytes, 0 free: a tool that checks for room before it writes
    (statvfs) would refuse. A local store reports its file system; one that cannot tell (an
    object store) has room without end when writable."""
    store = tmp_path / "store"
    store.mkdir()
    fs = FS(str(store))
    got = fs.call(fs.ops.statfs, fs.ctx)
    st = os.statvfs(store)
    assert got.f_blocks * got.f_frsize == st.f_blocks * st.f_frsize
    assert 0 < got.f_bavail * got.f_frsize <= st.f_blocks * st.f_frsize
    fs.close()
    mem = FS()
    got = mem.call(mem.ops.statfs, mem.ctx)
    assert got.f_bavail * got.f_frsize >= 1 << 40 and got.f_blocks >= got.f_bavail
    mem.close()


# -- rename over a file open for writing --------------------------------------------------------
def test_a_file_renamed_over_one_open_for_writing_wins_its_close() -> None:
    """Process A writes ``c/0/0`` in place; process B publishes a temporary over it by rename
    (zarr-python, rsync). As on a disk, A's file is unlinked by the rename: A's close stores
    nothing (it stored A's bytes over B's: the last close won, not the rename)."""
    fs = FS()
    fs.mkdir("zarr/d.zarr")
    fs.makedirs("zarr/d.zarr/a")
    meta = {"zarr_format": 3, "node_type": "array", "shape": [2, 2], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {}}
    fs.write_file("zarr/d.zarr/a/zarr.json", json_bytes(meta))
    fs.makedirs("zarr/d.zarr/a/c/0")
    a, b = fs.as_pid(1_000_011), fs.as_pid(1_000_012)
    ha = a.open_file("zarr/d.zarr/a/c/0/0")
    ha.write(b"\x05" * 4, 0)
    b.write_file("zarr/d.zarr/a/c/0/.0.tmp", b"\x09" * 4)
    b.rename("zarr/d.zarr/a/c/0/.0.tmp", "zarr/d.zarr/a/c/0/0")
    assert fs.read_file("zarr/d.zarr/a/c/0/0") == b"\x09" * 4
    ha.write(b"\x06" * 4, 0)  # A goes on writing its unlinked file, and reads it back
    assert ha.read(0, 4) == b"\x06" * 4
    ha.close()  # nothing to store: no error either
    assert fs.fresh(read_only=True).read_file("zarr/d.zarr/a/c/0/0") == b"\x09" * 4
    fs.close()


# -- a chunk deleted meanwhile by another process's write -----------------------------------------
def test_h5py_r_plus_does_not_bring_back_a_chunk_another_process_deleted(tmp_path) -> None:
    """h5py's default driver writes at open, so the page holding A's chunk (0, 0) is copied
    then; another process rewrites A's shard without that chunk (zarr-python leaves empty
    chunks out: deleted); h5py's close wrote the page back and the chunk came back with its
    old values. A deleted version is remembered like a replaced one, so its stale copy stays out."""
    from writeharness import decode_shard, encode_shard

    store, fs = _two_dataset_domain(tmp_path, a_value=1)
    h5w, other = fs.as_pid(1_000_021), fs.as_pid(1_000_022)
    fo = FuseFile(h5w, "hdf5/dom.h5")
    fo.h.write(fo.h.read(0, 64), 0)  # as HDF5's sec2 driver does at open: page 0 copied, A's chunks too
    f = h5py.File(fo, "r+")
    shard = other.read_file("zarr/dom.zarr/A/c/0/0")  # the whole array is one shard of 4 inner chunks
    inner = decode_shard(shard, 4)
    del inner[0]  # chunk (0, 0) left out: deleted
    other.write_file("zarr/dom.zarr/A/c/0/0", encode_shard(inner, 4))
    f["C"][40:44, 40:44] = 7
    f.close()
    fo.h.close()
    fo.h.release()
    with h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/dom.h5")), "r") as g:
        a = np.ones((64, 64), "u2")
        a[0:32, 0:32] = 0  # the fill value: the chunk is gone
        np.testing.assert_array_equal(g["A"][()], a)
        assert g["C"][40, 40] == 7
    fs.close()
