"""Tier 2: what ``create`` and ``rename`` decide about a name, operations awaited directly.

``create`` makes all its checks in one worker-thread call (``WriteSide._plan_create``) and
``rename`` asks which scratch files beside its target became chunk files in the call that
ingests it (``_ingest_and_look_below``): the kernel holds the directory locked across both,
so every thread hand-off there delays every other writer of that directory. These tests pin
the decisions and their order, which must not change with the number of hand-offs.
"""
from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest
from writeharness import FS, n5_block

ZARR_META = {"zarr_format": 3, "node_type": "array", "shape": [4, 4], "data_type": "int16",
             "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
             "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
             "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
             "attributes": {}}
N5_META = {"dimensions": [4, 4], "blockSize": [2, 2], "dataType": "int16", "compression": {"type": "raw"}}
BLOCK = np.array([[1, 2], [3, 4]], "i2")


def publish(fs: FS, tmp: str, final: str, data: bytes) -> None:
    """A tool's temporary, written and renamed over its final name (rsync, zarr-python)."""
    h = fs.open_file(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    h.write(data, 0)
    fs.rename(tmp, final)
    h.close()


def zarr_array() -> FS:
    """A mount-like FS holding domain ``zarr/d.zarr`` with the 4x4 int16 array ``a``."""
    fs = FS()
    fs.mkdir("zarr/d.zarr")
    fs.mkdir("zarr/d.zarr/a")
    fs.write_json("zarr/d.zarr/a/zarr.json", ZARR_META)
    return fs


@pytest.mark.parametrize("view", ["zarr", "n5"])
def test_chunks_written_before_metadata_published_by_rename_are_stored(view: str) -> None:
    """rsync's order (``c`` sorts before ``zarr.json``): chunk files land first, as scratch,
    beside a lock file; the metadata renamed into place makes the array, and the chunk files
    are stored then. The lock file stays scratch, and a temporary still open stays unstored
    until its writer renames it."""
    fs = FS()
    dom = f"{view}/d.{view}"
    fs.mkdir(dom)
    chunk_dir, block, meta_name, meta = (("c/0", "c/0/1", "zarr.json", ZARR_META) if view == "zarr"
                                         else ("0", "0/1", "attributes.json", N5_META))
    fs.makedirs(f"{dom}/a/{chunk_dir}")
    data = BLOCK.astype("<i2").tobytes() if view == "zarr" else n5_block(BLOCK)
    publish(fs, f"{dom}/a/{chunk_dir}/.1.AbC", f"{dom}/a/{block}", data)
    fs.write_file(f"{dom}/a/.lock", b"pid 1")
    publish(fs, f"{dom}/a/.{meta_name}.XyZ", f"{dom}/a/{meta_name}", json.dumps(meta).encode())
    fresh = fs.fresh(read_only=True)
    assert fresh.read_file(f"n5/d.n5/a/{'1/0' if view == 'zarr' else '0/1'}") == n5_block(BLOCK)
    assert not fresh.exists(f"{dom}/a/.lock")  # scratch: never stored
    assert fs.read_file(f"{dom}/a/.lock") == b"pid 1"  # still there for its maker
    fs.close()


def test_create_refuses_a_name_the_format_refuses() -> None:
    """Zarr v2 metadata is refused by name when made (EOPNOTSUPP), not kept as scratch."""
    fs = FS()
    fs.mkdir("zarr/d.zarr")
    assert fs.errno_of(fs.create_excl, "zarr/d.zarr/.zarray") == errno.EOPNOTSUPP
    assert fs.errno_of(fs.create_excl, "zarr/d.zarr/.zattrs") == errno.EOPNOTSUPP
    fs.close()


def test_create_of_an_existing_file_with_o_excl_is_eexist_and_without_it_opens_it() -> None:
    fs = zarr_array()
    fs.makedirs("zarr/d.zarr/a/c/0")
    fs.write_file("zarr/d.zarr/a/c/0/0", BLOCK.astype("<i2").tobytes())
    assert fs.errno_of(fs.create_excl, "zarr/d.zarr/a/c/0/0") == errno.EEXIST
    h = fs.open_file("zarr/d.zarr/a/c/0/0", os.O_RDWR | os.O_CREAT)  # no O_TRUNC: the stored bytes
    assert h.read(0, 8) == BLOCK.astype("<i2").tobytes()
    h.close()
    fs.close()


def test_create_above_the_domains_is_refused_and_a_scratch_file_in_a_domain_is_kept() -> None:
    fs = FS()
    assert fs.errno_of(fs.create_excl, "zarr/notes.txt") == errno.EPERM
    fs.mkdir("zarr/d.zarr")
    fs.write_file("zarr/d.zarr/notes.txt", b"scratch")
    assert fs.read_file("zarr/d.zarr/notes.txt") == b"scratch"
    assert not fs.fresh(read_only=True).exists("zarr/d.zarr/notes.txt")
    fs.close()


def test_a_chunk_file_outside_the_extent_is_refused_at_its_rename_and_the_store_kept() -> None:
    fs = zarr_array()
    before = fs.snapshot()
    fs.makedirs("zarr/d.zarr/a/c/9")
    h = fs.open_file("zarr/d.zarr/a/c/9/.9.tmp", os.O_RDWR | os.O_CREAT | os.O_EXCL)
    h.write(BLOCK.astype("<i2").tobytes(), 0)
    assert fs.errno_of(fs.rename, "zarr/d.zarr/a/c/9/.9.tmp", "zarr/d.zarr/a/c/9/9") == errno.EINVAL
    h.close()
    assert fs.snapshot() == before
    fs.close()
