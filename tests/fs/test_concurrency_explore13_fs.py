"""Concurrent readers and writers across views (explore 13), operations awaited directly.

- zarr-python rewrites a whole shard to change one inner chunk; the others come back as the
  gzip members the Zarr view spliced from the stored zlib streams, and were stored again as
  zlib streams with the default header (78 9c) where h5py's default gzip level wrote 78 5e:
  every chunk of the shard rewritten for nothing, and, worse, a stale copy of a chunk another
  process had replaced meanwhile was not recognised as one (its bytes differed from the
  replaced version's in that header byte), so two processes writing disjoint inner chunks of
  one shard lost one another's acknowledged writes. Deflate chunks are compared without their
  header's level hint now (``polyfs/writes/history.py: zlib_canonical``).
- A reader that opened a view file (h5py ``r`` on ``hdf5/x.h5``, a viewer on ``tiff/x/A.tif``,
  a Zarr shard) before another process wrote the fill value into a region through ``zarr/``
  (zarr-python leaves an all-fill inner chunk out of the shard, so the chunk object is deleted)
  got EIO and one ERROR line "chunk object vanished from the store" for every read touching
  that chunk. SEMANTICS.md promises close-to-open: a reader laid out before a write reads the
  version it opened. The write side keeps the versions of chunks a write deletes (up to 64 at
  once) for such readers; the read side must serve them when the object is gone, as it does
  when the object changed size (``polyfs/reader.py``, ``polyfs/views/transcode.py``: not
  owned here, see the explore-13 report). The N5 view of a little-endian array re-encodes
  its blocks: the producer carries the planned stored size now (``TranscodedChunk.stored_size``).
"""
from __future__ import annotations

import io
import os
import re

import h5py
import numpy as np
import pytest
from writeharness import FS, decode_shard, encode_shard

from polyfs.importers import import_source

SHAPE, CH = (64, 64), (16, 16)


@pytest.fixture
def fs(tmp_path):
    """Domain ``/x.h5``: ``A`` (int32, gzip, every chunk 5) and ``B`` (uint16, every chunk 9)."""
    src = tmp_path / "x.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("A", data=np.full(SHAPE, 5, "i4"), chunks=CH, compression="gzip")
        f.create_dataset("B", data=np.full(SHAPE, 9, "u2"), chunks=CH)
    f = FS()
    import_source(str(src), f.url, domain="/x.h5", progress=False)
    yield f
    f.close()


def _drop_inner_chunk(fs: FS, array: str, local: int) -> None:
    """What zarr-python writes for ``a[0:16, 0:16] = fill``: the shard without that inner chunk
    (another process: its own read-modify-write base)."""
    other = fs.as_pid(os.getpid() + 7001)
    path = f"zarr/x.zarr/{array}/c/0/0"
    n_inner = (SHAPE[0] // CH[0]) * (SHAPE[1] // CH[1])
    inner = decode_shard(other.read_file(path), n_inner)
    assert local in inner
    del inner[local]
    other.write_file(path, encode_shard(inner, n_inner))


@pytest.mark.parametrize("view", ["n5/x.n5/A/0/0", "tiff/x/A.tif", "hdf5/x.h5", "zarr/x.zarr/A/c/0/0"])
def test_a_file_opened_before_a_write_deleted_a_chunk_reads_what_it_opened(fs, view):
    want = fs.read_file(view)
    h = fs.open_file(view, os.O_RDONLY)
    try:
        _drop_inner_chunk(fs, "A", 0)
        got = h.read(0, len(want) + 1)
    finally:
        h.release()
    assert got == want


def test_h5py_holding_the_file_reads_its_data_after_zarr_wrote_the_fill_value(fs):
    """The live-viewer case: h5py opened the file, then a region was reset to the fill value."""
    h = fs.open_file("hdf5/x.h5", os.O_RDONLY)
    size = fs.stat("hdf5/x.h5").st_size

    class Raw(io.RawIOBase):
        pos = 0

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return True

        def seek(self, off: int, whence: int = 0) -> int:
            self.pos = off if whence == 0 else (self.pos + off if whence == 1 else size + off)
            return self.pos

        def tell(self) -> int:
            return self.pos

        def readinto(self, b) -> int:
            data = h.read(self.pos, len(b))
            b[:len(data)] = data
            self.pos += len(data)
            return len(data)

    try:
        with h5py.File(io.BufferedReader(Raw()), "r") as f:
            _drop_inner_chunk(fs, "A", 0)
            np.testing.assert_array_equal(f["A"][()], np.full(SHAPE, 5, "i4"))
    finally:
        h.release()
    # a new open sees the write: the chunk is the fill value now, in every view
    with h5py.File(io.BytesIO(fs.read_file("hdf5/x.h5")), "r") as f:
        a = f["A"][()]
    assert (a[:16, :16] == 0).all() and (a[16:, :] == 5).all() and (a[:, 16:] == 5).all()


# -- disjoint writers of one shard over chunks h5py compressed at its default gzip level -------
N_INNER = (SHAPE[0] // CH[0]) * (SHAPE[1] // CH[1])


def _gzip_member(arr: np.ndarray) -> bytes:
    import gzip

    return gzip.compress(np.ascontiguousarray(arr, "<i4").tobytes(), mtime=0)


def _chunk_objects(fs: FS) -> dict[str, bytes]:
    return {k: v for k, v in fs.snapshot().items() if re.fullmatch(r"\d+(_\d+)*", k.rsplit("/", 1)[-1])}


def test_a_shard_written_back_does_not_rewrite_the_chunks_it_did_not_change(fs):
    """zarr-python rewrites a whole shard for one inner chunk: the others come back as the gzip
    members the view spliced from the stored zlib streams (h5py's level 4: header 78 5e). They
    were stored again with another header (78 9c): every chunk rewritten for nothing."""
    before = _chunk_objects(fs)
    path = "zarr/x.zarr/A/c/0/0"
    inner = decode_shard(fs.read_file(path), N_INNER)
    inner[5] = _gzip_member(np.full(CH, 77, "i4"))
    fs.write_file(path, encode_shard(inner, N_INNER))
    after = _chunk_objects(fs)
    changed = sorted(k.rsplit("/", 1)[-1] for k in before if before[k] != after.get(k))
    assert changed == ["1_1"]


@pytest.mark.parametrize("target", [0, 3, 15])
def test_a_stale_copy_of_a_chunk_does_not_undo_another_writers_newer_write(fs, target):
    """Two zarr-python processes writing disjoint inner chunks of one shard: process 1 reads
    the shard, process 2 reads it, changes inner chunk ``target`` and writes it; process 1
    writes its shard with a change to inner chunk 5 only, so ``target`` in it is the stale copy
    it read. That copy was not recognised as stale (its zlib header, 78 9c, differed from the
    stored version replaced, 78 5e) and process 2's acknowledged write was lost."""
    p1, p2 = fs.as_pid(os.getpid() + 101), fs.as_pid(os.getpid() + 202)
    path = "zarr/x.zarr/A/c/0/0"
    mine = decode_shard(p1.read_file(path), N_INNER)
    theirs = decode_shard(p2.read_file(path), N_INNER)
    theirs[target] = _gzip_member(np.full(CH, 1000 + target, "i4"))
    p2.write_file(path, encode_shard(theirs, N_INNER))
    mine[5] = _gzip_member(np.full(CH, 77, "i4"))
    p1.write_file(path, encode_shard(mine, N_INNER))
    with h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/x.h5")), "r") as f:
        a = f["A"][()]
    want = np.full(SHAPE, 5, "i4")
    want[16:32, 16:32] = 77
    row, col = divmod(target, 4)
    want[row * 16:row * 16 + 16, col * 16:col * 16 + 16] = 1000 + target
    np.testing.assert_array_equal(a, want)
