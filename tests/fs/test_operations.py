"""Tier 2: the pyfuse3 operations awaited directly, without the kernel."""
from __future__ import annotations

import errno
import os
import stat

import pyfuse3
import pytest
import trio

from polyfs.fs.inodes import ROOT_INODE
from polyfs.fs.operations import Operations
from polyfs.reader import Reader
from polyfs.store import open_store
from polyfs.vfile import Literal, Stored, VFile
from polyfs.views.base import DirNode, FileNode, json_file


class Ctx:
    def __init__(self, store):
        self.store = store
        self.catalog = None


def boom():
    raise RuntimeError("a bug in a view")


@pytest.fixture
def ops():
    store = open_store("memory://fs-ops")
    store.put("chunks/0", b"0123456789")
    tree = DirNode("", {
        "a": DirNode("a", lambda: {"f.txt": FileNode("f.txt", VFile([Literal(b"head-"), Stored("chunks/0", 2, 5)]))}),
        "meta.json": json_file("meta.json", {"x": 1}),
        "gone": FileNode("gone", VFile([Stored("chunks/missing", 0, 4)])),
        "buggy": FileNode("buggy", boom, size_hint=lambda: 3),
    })
    return Operations(tree, Reader(Ctx(store)), read_only=True)


def run(coro_fn, *args):
    return trio.run(coro_fn, *args)


def test_lookup_getattr_open_read(ops):
    attr = run(ops.lookup, ROOT_INODE, b"a", None)
    assert stat.S_ISDIR(attr.st_mode)
    f = run(ops.lookup, attr.st_ino, b"f.txt", None)
    assert stat.S_ISREG(f.st_mode) and f.st_size == 10
    assert run(ops.getattr, f.st_ino, None).st_size == 10
    fi = run(ops.open, f.st_ino, os.O_RDONLY, None)
    assert not fi.keep_cache  # first open: nothing cached to keep
    assert run(ops.open, f.st_ino, os.O_RDONLY, None).keep_cache  # unchanged: the page cache is kept
    assert run(ops.read, fi.fh, 0, 100) == b"head-23456"
    assert run(ops.read, fi.fh, 3, 4) == b"d-23"
    run(ops.release, fi.fh)
    # the same path keeps its inode
    assert run(ops.lookup, attr.st_ino, b"f.txt", None).st_ino == f.st_ino


def test_read_only_mount_asks_the_kernel_to_stop_flushing(ops):
    """A read-only mount answers FLUSH with ENOSYS, after which the kernel sends none:
    every close() of a file saves a round trip. A writable mount flushes (it stores there)."""
    f = run(ops.lookup, run(ops.lookup, ROOT_INODE, b"a", None).st_ino, b"f.txt", None)
    fi = run(ops.open, f.st_ino, os.O_RDONLY, None)
    assert fuse_errno(ops.flush, fi.fh) == errno.ENOSYS
    run(ops.release, fi.fh)


def fuse_errno(fn, *args):
    with pytest.raises(pyfuse3.FUSEError) as ei:
        run(fn, *args)
    return ei.value.errno


def test_errors_map_to_errno(ops):
    assert fuse_errno(ops.lookup, ROOT_INODE, b"nope", None) == errno.ENOENT
    meta = run(ops.lookup, ROOT_INODE, b"meta.json", None)
    assert fuse_errno(ops.lookup, meta.st_ino, b"x", None) == errno.ENOTDIR
    assert fuse_errno(ops.open, meta.st_ino, os.O_RDWR, None) == errno.EROFS
    assert fuse_errno(ops.open, ROOT_INODE, os.O_RDONLY, None) == errno.EISDIR
    assert fuse_errno(ops.getattr, 987654, None) == errno.ENOENT
    calls = {ops.mkdir: (ROOT_INODE, b"x", 0o755, None), ops.unlink: (ROOT_INODE, b"x", None),
             ops.rmdir: (ROOT_INODE, b"x", None), ops.create: (ROOT_INODE, b"x", 0o644, os.O_WRONLY, None),
             ops.rename: (ROOT_INODE, b"x", ROOT_INODE, b"y", 0, None),
             ops.setattr: (ROOT_INODE, pyfuse3.EntryAttributes(), pyfuse3.SetattrFields(), None, None),
             ops.write: (1, 0, b"x"), ops.link: (ROOT_INODE, ROOT_INODE, b"y", None)}
    for op, args in calls.items():
        assert fuse_errno(op, *args) == errno.EROFS, op


def test_missing_chunk_is_eio_for_that_read_only(ops, caplog):
    gone = run(ops.lookup, ROOT_INODE, b"gone", None)
    fi = run(ops.open, gone.st_ino, os.O_RDONLY, None)
    assert fuse_errno(ops.read, fi.fh, 0, 4) == errno.EIO
    assert "chunks/missing" in caplog.text
    meta = run(ops.lookup, ROOT_INODE, b"meta.json", None)
    fi2 = run(ops.open, meta.st_ino, os.O_RDONLY, None)
    assert b'"x": 1' in run(ops.read, fi2.fh, 0, 100)  # the daemon keeps serving


def test_unexpected_exception_is_logged_once_and_eio(ops, caplog):
    buggy = run(ops.lookup, ROOT_INODE, b"buggy", None)  # size from the hint
    assert buggy.st_size == 3
    assert fuse_errno(ops.open, buggy.st_ino, os.O_RDONLY, None) == errno.EIO
    assert fuse_errno(ops.open, buggy.st_ino, os.O_RDONLY, None) == errno.EIO
    assert caplog.text.count("Traceback") == 1 and "a bug in a view" in caplog.text


def test_forget_drops_inodes(ops):
    a = run(ops.lookup, ROOT_INODE, b"a", None)
    n = len(ops.inodes)
    run(ops.forget, [(a.st_ino, 1)])
    assert len(ops.inodes) == n - 1
    assert fuse_errno(ops.getattr, a.st_ino, None) == errno.ENOENT
