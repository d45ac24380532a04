"""Tier 2: what the operations let the kernel cache, and what they tell it to drop
(fs/kernelcache.py), awaited directly; pyfuse3's notifications are recorded, not sent.
Also: one read plan per request (reader.py)."""
from __future__ import annotations

import gc
import os
import time

import numpy as np
import pyfuse3
import pytest
import trio

from polyfs import config as config_mod
from polyfs.codecs.registry import ZSTD, Filter
from polyfs.daemon import build_operations
from polyfs.fs.operations import VOLATILE_DIR_TIMEOUT
from polyfs.fs.inodes import ROOT_INODE, InodeTable
from polyfs.fs.kernelcache import KernelNotifier
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.editor import DomainEditor
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store
from polyfs.vfile import VFile
from polyfs.views.base import DirNode
from support import drop_page_cache


class Ctx:
    uid = os.getuid()
    gid = os.getgid()
    pid = os.getpid()
    umask = 0o022


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    cat = Catalog(open_store(str(root), create=True))
    with DomainWriter(cat, "/k.h5") as w:
        for name in "ab":
            ds = w.add_dataset(w.root, name, T.IntType(2, False, ">"), Shape("simple", (32,)), (16,),
                               [Filter(ZSTD, (3,))])
            for c in range(2):
                stored, _ = w.encode_chunk(ds, np.full(16, c, ">u2"))
                w.write_chunk(ds, (c,), stored)
    return root


@pytest.fixture
def sent(monkeypatch):
    """The notifications the operations send, instead of sending them. The watcher threads
    of mounts earlier tests left open are silenced first: pyfuse3's functions are patched
    for the whole process, so their pushes (a domain of theirs whose store went away) would
    land here too."""
    for obj in gc.get_objects():
        if isinstance(obj, KernelNotifier):
            obj.push_entries = lambda *a, **k: None  # type: ignore[method-assign]
            obj.idle(1.0)  # and what they had queued is sent before the patch
    calls: list[tuple] = []
    monkeypatch.setattr(pyfuse3, "invalidate_entry", lambda p, name, *a: calls.append(("entry", p, name)))
    monkeypatch.setattr(pyfuse3, "invalidate_inode", lambda ino, *a: calls.append(("inode", ino)))
    return calls


def make(store, **opts):
    cfg = config_mod.MountConfig(store=str(store), mountpoint="/nonexistent", **opts)
    return build_operations(cfg)


def walk(ops, *names: str) -> list:
    async def go():
        ino, out = ROOT_INODE, []
        for n in names:
            attr = await ops.lookup(ino, n.encode(), Ctx())
            out.append(attr)
            ino = attr.st_ino
        return out
    return trio.run(go)


def test_timeouts_long_in_domains_short_above_them_and_zero_for_written_ones(store):
    ops = make(store, domain_ttl=0.0, read_only=True)  # no watcher thread here
    view, leaf, arr, meta = walk(ops, "n5", "k.n5", "a", "attributes.json")
    assert ops.entry_timeout == 60.0  # the documented default
    assert (view.entry_timeout, view.attr_timeout) == (60.0, 60.0)  # domain_ttl 0: no list timer either
    for a in (leaf, arr, meta):
        assert (a.entry_timeout, a.attr_timeout) == (60.0, 60.0)
    assert ops.kernel_domains() == ["/k.h5"]

    ops = make(store, domain_ttl=2.0)
    view, leaf, arr = walk(ops, "n5", "k.n5", "a")
    assert view.entry_timeout == 2.0 and leaf.entry_timeout == 60.0  # the domain list is re-read every 2 s
    assert trio.run(ops.getattr, arr.st_ino, None).attr_timeout == 60.0
    ops.writes._volatile = ("n5/k.n5",)  # as after a write through the mount (writeops.WriteSide)
    # its files' sizes change with every write: never cached; its directories briefly
    assert trio.run(ops.getattr, arr.st_ino, None).attr_timeout == VOLATILE_DIR_TIMEOUT
    assert walk(ops, "n5", "k.n5", "b")[2].entry_timeout == VOLATILE_DIR_TIMEOUT
    assert walk(ops, "n5", "k.n5", "a", "attributes.json")[3].entry_timeout == 0.0
    assert walk(ops, "n5", "k.n5", "a", "attributes.json")[3].attr_timeout == 0.0


def test_shared_stores_never_cache_past_domain_ttl(store):
    ops = make(store, domain_ttl=3.0, entry_timeout=60.0)
    assert ops.entry_timeout == 60.0
    from polyfs import daemon

    class Shared:  # what build_operations sees of an s3:// store
        url = "s3://bucket/x"

        def __getattr__(self, name):
            return getattr(local, name)

    local = open_store(str(store))
    cfg = config_mod.MountConfig(store=str(store), mountpoint="/nonexistent", domain_ttl=3.0)
    ops = daemon.build_operations(cfg, store=Shared())
    assert ops.entry_timeout == 3.0


def test_a_domain_change_drops_every_name_the_kernel_holds_of_it(store, sent):
    ops = make(store, domain_ttl=0.0, read_only=True)
    n5, leaf, arr, meta = walk(ops, "n5", "k.n5", "a", "attributes.json")
    z, zleaf = walk(ops, "zarr", "k.zarr")
    ops.domains_changed(["/k.h5"])
    assert ops.kernel.idle()
    entries = {(c[1], c[2]) for c in sent if c[0] == "entry"}
    inodes = {c[1] for c in sent if c[0] == "inode"}
    assert {(n5.st_ino, b"k.n5"), (leaf.st_ino, b"a"), (arr.st_ino, b"attributes.json"),
            (z.st_ino, b"k.zarr")} <= entries  # every view; the leaf in its parent too
    assert {leaf.st_ino, arr.st_ino, meta.st_ino, zleaf.st_ino} <= inodes
    sent.clear()
    ops.domains_changed(["/k.h5"])  # nothing handed out since: nothing left to drop
    assert ops.kernel.idle() and not [c for c in sent if c[0] == "entry"]


def test_the_watcher_finds_another_writers_change_and_drops_the_names(store, sent):
    ops = make(store, domain_ttl=0.3, read_only=True)
    _, leaf, b = walk(ops, "n5", "k.n5", "b")
    time.sleep(1.0)  # several watcher passes: the domain stays in use while the kernel holds it
    assert not sent
    DomainEditor(Catalog(open_store(str(store)))).delete("/k.h5", "b")  # another process
    deadline = time.monotonic() + 30  # polled: a loaded machine may run the watcher late
    while ("entry", leaf.st_ino, b"b") not in sent:
        assert time.monotonic() < deadline, sent
        time.sleep(0.05)
    assert ("inode", b.st_ino) in sent


def test_one_plan_per_read_request(store, monkeypatch):
    ops = make(store, domain_ttl=0.0, read_only=True)
    *_, block = walk(ops, "n5", "k.n5", "a", "1")
    plans = []
    real = VFile.plan
    monkeypatch.setattr(VFile, "plan", lambda self, off, size: plans.append((off, size)) or real(self, off, size))

    async def go():
        fi = await ops.open(block.st_ino, os.O_RDONLY, Ctx())
        drop_page_cache(store / "db")
        data = await ops.read(fi.fh, 0, 1 << 20)
        await ops.release(fi.fh)
        return data

    data = trio.run(go)
    assert len(data) == block.st_size and plans == [(0, 1 << 20)]
    vfile = ops.inodes.get(block.st_ino).served
    drop_page_cache(store / "db")
    got = ops.reader.read_nowait(vfile, 0, 64)
    if isinstance(got, list):  # not page-cached: the plan comes back, for the worker thread
        assert bytes(ops.reader.read(vfile, 0, 64, got)) == data[:64]
        assert len(plans) == 2
    else:  # the kernel kept the pages after all (fadvise is advice)
        assert bytes(got) == data[:64]


def _named_entries(n: int = 2):
    """An inode table with directories ``d`` and ``d/s<i>`` whose names the kernel holds."""
    inodes = InodeTable(DirNode("", {}))
    d = inodes.remember("d", DirNode("d", {}))
    subs = [inodes.remember(f"d/s{i}", DirNode(f"s{i}", {})) for i in range(n)]
    for e in (d, *subs):
        e.name_until = time.monotonic() + 60
    return inodes, d, subs


def test_a_change_waits_for_its_names_and_names_in_locked_directories_go_after(monkeypatch):
    """A request waits (wait_named) until the names it pushed were sent, so another view looked
    at after the syscall returns no longer shows them; a name inside a directory the kernel
    holds locked for that request is sent after it (sending it first would wait on that lock)."""
    calls: list[tuple] = []
    monkeypatch.setattr(pyfuse3, "invalidate_entry", lambda p, name, *a: calls.append(("entry", p, name)))
    monkeypatch.setattr(pyfuse3, "invalidate_inode", lambda ino, *a: calls.append(("inode", ino)))
    inodes, d, subs = _named_entries()
    kernel = KernelNotifier(inodes)
    with kernel.locked([d.ino]):
        seq = kernel.push_entries([d, *subs])
        assert seq == kernel.named() > 0
        assert kernel.wait_named(seq, 5.0)
        assert ("entry", ROOT_INODE, b"d") in calls  # not in a locked directory: sent before the return
        assert not [c for c in calls if c[0] == "entry" and c[1] == d.ino]  # held back
    assert kernel.idle(5.0)
    assert {c[2] for c in calls if c[0] == "entry" and c[1] == d.ino} == {b"s0", b"s1"}  # sent after
    assert kernel.push_entries([d]) == 0 or kernel.wait_named(kernel.named(), 5.0)  # nothing held: 0


def test_a_notification_the_kernel_blocks_costs_the_wait_not_a_hang(monkeypatch):
    """Should the kernel block a notification on a lock nobody foresaw, the request waiting for
    it gives up after its timeout; the notification goes out once the lock is free."""
    import threading
    gate = threading.Event()
    calls: list[tuple] = []

    def blocked(p, name, *a):
        gate.wait(10)
        calls.append(("entry", p, name))
    monkeypatch.setattr(pyfuse3, "invalidate_entry", blocked)
    monkeypatch.setattr(pyfuse3, "invalidate_inode", lambda ino, *a: None)
    inodes, d, subs = _named_entries(1)
    kernel = KernelNotifier(inodes)
    seq = kernel.push_entries([subs[0]])
    t = time.monotonic()
    assert not kernel.wait_named(seq, 0.2)
    assert 0.15 < time.monotonic() - t < 3.0
    gate.set()
    assert kernel.wait_named(seq, 5.0) and calls == [("entry", d.ino, b"s0")]


def test_deleting_a_chunk_file_notifies_what_the_kernel_holds_not_every_sibling(sent, monkeypatch):
    """``rm`` of one chunk file of a domain written through the mount: its siblings' names and
    attributes were handed out with timeout 0, so the kernel is told of the directories it
    was handed, a file open for reading and files read since the last change (once), not of
    all N files at each change (that made each of ``rm``'s unlinks in a directory of N chunk
    files cost N notifications). A lookup after the change builds the node of the name
    looked up, not one per file."""
    from writeharness import FS, zarr_array_meta

    import polyfs.formats.zarr.view as zview
    fs = FS()
    fs.mkdir("zarr/d.zarr")
    fs.mkdir("zarr/d.zarr/a")
    fs.write_json("zarr/d.zarr/a/zarr.json", zarr_array_meta((1, 64), "<i2", (1, 1), codecs=()))
    fs.makedirs("zarr/d.zarr/a/c/0")
    for i in range(64):
        fs.write_file(f"zarr/d.zarr/a/c/0/{i}", np.int16(i).tobytes())
    assert len(fs.ls("zarr/d.zarr/a/c/0")) == 64 and len(fs.ls("n5/d.n5/a")) == 65
    inos = {i: fs.ino(f"zarr/d.zarr/a/c/0/{i}") for i in range(64)}
    n5_inos = {i: fs.ino(f"n5/d.n5/a/{i}/0") for i in range(64)}  # known in another view too
    reader = fs.open_file("zarr/d.zarr/a/c/0/9", os.O_RDONLY)
    assert reader.read(0, 2) == np.int16(9).tobytes()
    for i in range(64):  # every file read once: their pages go at the next change, once
        assert fs.read_file(f"zarr/d.zarr/a/c/0/{i}") == np.int16(i).tobytes()
    fs.unlink("zarr/d.zarr/a/c/0/4")
    assert fs.ops.kernel.idle()
    assert {inos[i] for i in range(64) if i != 4} <= {c[1] for c in sent if c[0] == "inode"}
    sent.clear()
    made = []

    class Counted(zview.FileNode):
        def __init__(self, name, *a, **k):
            made.append(name)
            super().__init__(name, *a, **k)

    monkeypatch.setattr(zview, "FileNode", Counted)
    fs.unlink("zarr/d.zarr/a/c/0/5")
    assert fs.ops.kernel.idle()
    notified = {c[1] for c in sent if c[0] == "inode"}
    assert inos[9] in notified  # open for reading: its pages go
    assert len([i for i in range(64) if inos[i] in notified or n5_inos[i] in notified]) <= 2, sent
    chunk_dir = fs.ino("zarr/d.zarr/a/c/0")
    assert {c[2] for c in sent if c[0] == "entry" and c[1] == chunk_dir} <= {b"5"}, sent
    assert fs.stat("zarr/d.zarr/a/c/0/7").st_size == 2
    assert not fs.exists("zarr/d.zarr/a/c/0/5")
    assert len(made) <= 2, made  # the names looked up, not all 63 files
    assert len(fs.ls("zarr/d.zarr/a/c/0")) == 62  # a listing still shows every one
    reader.close()
    fs.close()
