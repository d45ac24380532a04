"""An open view file read while another process writes (explore 22), operations awaited
directly (no kernel): what the daemon itself serves to a descriptor opened before a write.

- SEMANTICS.md ("Close-to-open"): a chunk this daemon rewrote underneath an open file is read
  as the version the file was opened with, as on a local disk. Versions were told apart by
  size (``polyfs/store/recent.py``), so a same-size rewrite (every rewrite of an uncompressed
  chunk) was served as the new bytes: a chunk read in two requests through one descriptor was
  half old, half new. Descriptors are now pinned to the rewrite epoch of their open
  (``Reader._pins``). A read() of more than 1 MiB is two FUSE requests, so zarr-python read
  2 MiB raw chunks of two versions while another process rewrote them (2-5% of its reads).
- A descriptor opened while another process was writing the file reads the writer's pages;
  once the writer closed, every read of it was EIO ("the file being written was discarded",
  logged at debug only). On a disk it reads the file as written.
"""
from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fs"))
from writeharness import FS, FsError, decode_shard, encode_shard  # noqa: E402

from polyfs.importers import import_source  # noqa: E402

SHAPE, CH = (32, 32), (16, 16)
N_INNER = 4


def _old() -> np.ndarray:
    return np.arange(SHAPE[0] * SHAPE[1], dtype="<f4").reshape(SHAPE)


@pytest.fixture
def fs(tmp_path):
    """Domain ``/x.h5``: ``A`` (float32, stored uncompressed: every rewrite is the same size),
    ``G`` (float32, gzip)."""
    src = tmp_path / "x.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("A", data=_old(), chunks=CH)
        f.create_dataset("G", data=_old(), chunks=CH, compression="gzip")
    f = FS()
    import_source(str(src), f.url, domain="/x.h5", codec="none", progress=False)
    yield f
    f.close()


def _open_read(fs: FS, path: str):
    return fs.open_file(path, os.O_RDONLY)


def test_a_descriptor_reads_one_version_of_a_chunk_rewritten_at_the_same_size(fs):
    h5 = "hdf5/x.h5"
    with h5py.File(io.BytesIO(fs.read_file(h5)), "r") as f:
        info = f["A"].id.get_chunk_info(0)
    assert info.size == CH[0] * CH[1] * 4
    held = _open_read(fs, h5)
    try:
        half = info.size // 2
        first = held.read(info.byte_offset, half)
        other = fs.as_pid(os.getpid() + 2201)  # another process rewrites every chunk through zarr/
        shard = "zarr/x.zarr/A/c/0/0"
        inner = decode_shard(other.read_file(shard), N_INNER)
        assert sorted(inner) == list(range(N_INNER)) and all(len(b) == info.size for b in inner.values())
        other.write_file(shard, encode_shard({k: np.full(CH, 7, "<f4").tobytes() for k in inner}, N_INNER))
        second = held.read(info.byte_offset + half, info.size - half)
    finally:
        held.release()
    got = np.frombuffer(first + second, "<f4")
    old = _old()[:CH[0], :CH[1]].ravel()
    assert (got == old).all() or (got == 7).all(), "one chunk, two versions"


def test_a_reader_opened_while_a_block_was_written_reads_it_as_written(fs):
    block = "n5/x.n5/G/0/0"
    old = fs.read_file(block)
    writer = fs.open_file(block, os.O_WRONLY | os.O_TRUNC)  # z5py writes a block in place
    try:
        writer.write(old[:50], 0)
        reader = fs.as_pid(os.getpid() + 2202).open_file(block, os.O_RDONLY)  # tensorstore reads meanwhile
        try:
            assert reader.read(0, 1 << 20) == old[:50]
            writer.write(old[50:], 50)
            writer.close()
            try:
                got = reader.read(0, 1 << 20)
            except FsError as exc:
                pytest.fail(f"read after the writer's close: {exc}")
            assert got == old
        finally:
            reader.release()
    finally:
        writer.release()
