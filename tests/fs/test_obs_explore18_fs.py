"""Kernel-free tests, exploratory round 18: tools that remove the empty parent directories of
each object they delete, such as obstore's ``LocalStore(prefix, automatic_cleanup=True)`` under
zarr-python's ``zarr.storage.ObjectStore`` (the mount tests are in
tests/mount/test_obs_explore18.py).

Such a tool deletes ``a/c/0/0`` and then calls ``rmdir`` on ``a/c/0``, ``a/c``, ``a``, ... until one
fails, as on a local disk, where the array's directory still holds ``zarr.json``. zarr-python
deletes every chunk that equals the fill value (``write_empty_chunks=False``, its default), so
``a[:] = 0`` left an array with no chunks. ``rmdir`` of an array directory (or of a group
directory whose metadata file is listed) then deleted the array, its attributes and the
emptied group above it. Now such a directory is not empty (``ENOTEMPTY``, as on a disk):
only its metadata file's ``unlink`` (which ``rm -r`` does first) makes it removable.
"""
from __future__ import annotations

import errno
import logging

import numpy as np
import pytest
from writeharness import FS, n5_attrs, read_zarr_array, zarr_array_meta, zarr_group_meta


@pytest.fixture
def fs():
    f = FS()
    f.mkdir("zarr/t.zarr")
    f.write_json("zarr/t.zarr/zarr.json", zarr_group_meta({"title": "run"}))
    yield f
    f.close()


def _refused_unchanged(fs: FS, path: str, caplog) -> None:
    """``rmdir path`` is ENOTEMPTY, with one log line naming it, and the store is unchanged."""
    before = fs.state()
    caplog.clear()
    with pytest.raises(OSError) as ei:
        fs.rmdir(path)
    assert ei.value.errno == errno.ENOTEMPTY
    assert fs.state() == before, "a refused rmdir changed the store"
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(path in line for line in lines), lines


def _cleanup_parents(fs: FS, path: str, root: str) -> None:
    """What obstore's ``automatic_cleanup`` does after deleting ``path``: ``rmdir`` each parent
    up to (not including) ``root`` until one fails."""
    parent = path.rsplit("/", 1)[0]
    while parent != root:
        try:
            fs.rmdir(parent)
        except OSError:
            return
        parent = parent.rsplit("/", 1)[0]


def test_rmdir_of_array_without_chunks_keeps_it(fs, caplog):
    meta = zarr_array_meta((4, 4), "<f4", (2, 2), codecs=(), attributes={"units": "m"})
    fs.makedirs("zarr/t.zarr/sub/a")
    fs.write_json("zarr/t.zarr/sub/zarr.json", zarr_group_meta({"k": 1}))
    fs.write_json("zarr/t.zarr/sub/a/zarr.json", meta)
    fs.makedirs("zarr/t.zarr/sub/a/c/0")
    fs.write_file("zarr/t.zarr/sub/a/c/0/0", np.ones((2, 2), "<f4").tobytes())
    fs.unlink("zarr/t.zarr/sub/a/c/0/0")  # zarr-python: the chunk now equals the fill value
    _cleanup_parents(fs, "zarr/t.zarr/sub/a/c/0/0", "zarr/t.zarr")
    got, data = read_zarr_array(fs, "zarr/t.zarr/sub/a")
    assert got["attributes"] == {"units": "m"} and got["shape"] == [4, 4]
    np.testing.assert_array_equal(data, np.zeros((4, 4), "<f4"))
    assert fs.read_json("zarr/t.zarr/sub/zarr.json")["attributes"] == {"k": 1}
    _refused_unchanged(fs, "zarr/t.zarr/sub/a", caplog)
    _refused_unchanged(fs, "n5/t.n5/sub/a", caplog)


def test_rmdir_of_group_with_its_metadata_listed_keeps_it(fs, caplog):
    fs.mkdir("zarr/t.zarr/g")
    fs.write_json("zarr/t.zarr/g/zarr.json", zarr_group_meta({"k": 1}))
    _refused_unchanged(fs, "zarr/t.zarr/g", caplog)
    fs.mkdir("n5/t.n5/h")
    fs.write_json("n5/t.n5/h/attributes.json", {"x": 2})
    _refused_unchanged(fs, "n5/t.n5/h", caplog)
    assert fs.read_json("zarr/t.zarr/h/zarr.json")["attributes"] == {"x": 2}


def test_rm_r_and_unlinked_metadata_still_remove(fs):
    """What works unchanged: ``rm -r`` unlinks the metadata file first; a directory made by
    ``mkdir`` alone, or whose metadata file was unlinked, is empty."""
    meta = zarr_array_meta((4, 4), "<u1", (2, 2), codecs=())
    fs.makedirs("zarr/t.zarr/a")
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    fs.unlink("zarr/t.zarr/a/zarr.json")
    fs.rmdir("zarr/t.zarr/a")
    fs.makedirs("zarr/t.zarr/b")
    fs.write_json("zarr/t.zarr/b/zarr.json", meta)
    fs.makedirs("zarr/t.zarr/b/c/1")
    fs.write_file("zarr/t.zarr/b/c/1/1", np.full((2, 2), 5, "u1").tobytes())
    fs.rm_r("zarr/t.zarr/b")
    fs.mkdir("zarr/t.zarr/g")
    fs.rmdir("zarr/t.zarr/g")
    fs.mkdir("n5/t.n5/d")
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs((4, 4), "uint8", (2, 2), "raw"))
    fs.rm_r("n5/t.n5/d")
    assert fs.ls("zarr/t.zarr") == ["zarr.json"]
    fs.rm_r("zarr/t.zarr")  # the domain: its root group's metadata is unlinked first
    assert fs.domains() == []
