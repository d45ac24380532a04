"""Tier 2 (no kernel): one dataset open in one view while another view writes it,
exploratory round 11 (real tools over a mount are in tests/mount/test_xview_explore11.py).

A view file is laid out at open from the chunk sizes listed then; a reader that opened
before a write through another view reads the version it opened (the write side keeps
the replaced chunk versions for it) or gets EIO. The gzip members that ``zarr/`` and
``n5/`` splice from stored zlib streams (deflate datasets: the import default) broke
this: the member's body came from the version the layout planned, but its CRC32/ISIZE
trailer from the store's current object (read at the planned size's offset, then
inflated whole when the CRC table did not know that Adler-32), so the held reader got
the old body closed by the new chunk's CRC32: a member every gzip reader refuses.
"""
from __future__ import annotations

import errno
import gzip
import zlib

import numpy as np
import pytest
from writeharness import FS, FsError, n5_block, n5_parse_block

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")

SMOOTH = (np.arange(32 * 32) % 7).astype("u2").reshape(32, 32)  # compresses to a few bytes
NOISE = np.random.RandomState(5).randint(0, 60000, (32, 32)).astype("u2")  # does not compress


def _deflate_domain(tmp_path, first: np.ndarray) -> FS:
    """A mount of a local store (whose backend checks an object's planned size on every
    read, as S3's does not) holding domain ``/d.h5``: ``img`` (64x64 uint16, 32x32 chunks,
    deflate) whose chunk (0, 0) is ``first``."""
    data = np.zeros((64, 64), "u2")
    data[:32, :32] = first
    src = tmp_path / "d.h5"
    with h5py.File(src, "w") as f:
        # big-endian: imported as big-endian deflate, which n5/ serves as spliced gzip members
        f.create_dataset("img", data=data.astype(">u2"), chunks=(32, 32))
    store = tmp_path / "store"
    store.mkdir()
    import_source(src, str(store), domain="/d.h5", progress=False)
    return FS(str(store))


def _held_read(fs: FS, path: str, write) -> tuple[bytes, bytes | None]:
    """What a reader that opened ``path`` before ``write()`` read then, and reads after it
    through the same open file (None: EIO)."""
    ino = fs.ino(path)
    fi = fs.call(fs.ops.open, ino, 0, fs.ctx, path=path)
    try:
        before = fs.call(fs.ops.read, fi.fh, 0, 1 << 22, path=path)
        write()
        try:
            after = fs.call(fs.ops.read, fi.fh, 0, 1 << 22, path=path)
        except FsError as exc:
            assert exc.errno == errno.EIO, exc
            after = None
    finally:
        fs.call(fs.ops.release, fi.fh, path=path)
    return before, after


def _gunzip_payload(blob: bytes) -> bytes:
    ndim = int.from_bytes(blob[2:4], "big")
    return gzip.decompress(blob[4 + 4 * ndim:])


@pytest.mark.parametrize("first,new", [(SMOOTH, NOISE), (NOISE, SMOOTH)], ids=["grows", "shrinks"])
def test_held_n5_block_when_another_daemon_rewrites_the_chunk(tmp_path, first, new):
    """An N5 block open while another mount of the store rewrites its chunk with another
    stored size: the held reader decodes the values it opened or gets EIO, never a CRC
    mismatch; a reader opening after sees the new values."""
    fs = _deflate_domain(tmp_path, first)
    view = fs.fresh()
    try:
        block = "n5/d.n5/img/0/0"
        other = fs.fresh()

        def write() -> None:  # a z5py block write through the other mount's n5/
            other.write_file(block, n5_block(new, "gzip"))

        before, after = _held_read(view, block, write)
        assert n5_parse_block(before, {"type": "gzip"}, np.dtype("u2")).tolist() == first.tolist()
        if after is not None:
            try:
                raw = _gunzip_payload(after)
            except (OSError, zlib.error, EOFError) as exc:
                pytest.fail(f"the held block is no valid gzip member: {exc}")
            assert raw == _gunzip_payload(before)
        got = n5_parse_block(view.fresh(read_only=True).read_file(block), {"type": "gzip"}, np.dtype("u2"))
        assert got.tolist() == new.tolist()
        other.close()
    finally:
        view.close()
        fs.close()


def test_held_n5_block_same_process_write_through_the_other_view(tmp_path):
    """The same with writer and reader in one daemon (one mount, two processes): the N5
    block held open while the chunk is rewritten through ``n5/`` by another handle."""
    fs = _deflate_domain(tmp_path, SMOOTH)
    try:
        block = "n5/d.n5/img/0/0"
        writer = fs.as_pid(4242)
        before, after = _held_read(fs, block, lambda: writer.write_file(block, n5_block(NOISE, "gzip")))
        if after is not None:
            try:
                assert _gunzip_payload(after) == _gunzip_payload(before)
            except (OSError, zlib.error, EOFError) as exc:
                pytest.fail(f"the held block is no valid gzip member: {exc}")
        assert n5_parse_block(fs.read_file(block), {"type": "gzip"}, np.dtype("u2")).tolist() == NOISE.tolist()
    finally:
        fs.close()
