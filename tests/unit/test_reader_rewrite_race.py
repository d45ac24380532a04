"""A chunk rewritten while the reader is producing (transcoding) bytes from its old version:
what was made from the old bytes must not outlive the rewrite in the produced-bytes cache.

Found by the soak (tests/soakkit.py): N5 blocks of a dataset written through zarr/ are
transcoded (little- to big-endian); a transcode that fetched the old chunk just before a
commit, and finished just after the commit's ``forget_chunks``, left the old block cached,
so readers that opened after the write was acknowledged were served the old version.

Found again in CI (``test_concurrency_explore13``): two zarr-python processes rewriting one
shard of an h5py gzip array through ``zarr/``. A gzip trailer cached from a chunk's old bytes
was still served during the commit (between the store's put and the CRC table's fsync)
beside the new body of the same size: the member failed its CRC check, zarr-python wrote it
back as an untouched chunk of its shard, and the daemon refused the write with EINVAL. The
commit now tells the reader before the put as well as after (``Catalog.rewriting``)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from polyfs.reader import Reader
from polyfs.store.recent import RecentVersions
from polyfs.store.memory import MemoryStore
from polyfs.vfile import Produced, VFile

KEY = "db/x/d/y/0_0"


@dataclass(frozen=True)
class SlowCopy:
    """Produces the stored chunk's bytes; the first production waits, once it has fetched
    them, until ``release`` is set (a transcode in progress)."""

    fetched: threading.Event
    release: threading.Event
    length: int = 4

    @property
    def cache_key(self) -> Hashable:
        return ("transcode", KEY, "copy")

    def produce(self, ctx: Any) -> bytes:
        data = ctx.store.get(KEY)
        if not self.fetched.is_set():
            self.fetched.set()
            assert self.release.wait(10)
        return data


class Ctx:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.catalog = type("Catalog", (), {"rewrite_watchers": [], "dataset_listeners": [],
                                            "recent": RecentVersions()})()


def test_a_transcode_overtaken_by_a_rewrite_is_not_cached():
    store = MemoryStore()
    store.put(KEY, b"old!")
    reader = Reader(Ctx(store))
    producer = SlowCopy(threading.Event(), threading.Event())
    vf = VFile([Produced(producer)])
    first: list[bytes] = []
    t = threading.Thread(target=lambda: first.append(bytes(reader.read(vf, 0, 4))))
    t.start()
    assert producer.fetched.wait(10)  # the transcode has the old bytes in hand
    watchers = reader.ctx.catalog.rewrite_watchers
    for w in watchers:
        w.rewriting({KEY})  # a commit: the catalog tells the reader ...
    store.put(KEY, b"new!")  # ... the chunk is rewritten ...
    for w in watchers:
        w.rewritten({KEY})  # ... and it is over
    # a read that starts now (after the write was acknowledged) must not join the old transcode
    second: list[bytes] = []
    t2 = threading.Thread(target=lambda: second.append(bytes(reader.read(vf, 0, 4))))
    t2.start()
    t2.join(5)
    joined_old = t2.is_alive()
    producer.release.set()
    t.join(10)
    t2.join(10)
    assert not joined_old, "a read after the rewrite waited for the transcode of the old bytes"
    assert second == [b"new!"]
    assert first in ([b"old!"], [b"new!"])  # it asked before the rewrite (and was read again after it)
    assert bytes(reader.read(vf, 0, 4)) == b"new!", "the old transcode must not be left in the cache"
    reader.close()


@dataclass(frozen=True)
class Copy:
    """Produces the stored chunk's bytes (a gzip trailer stands for any production)."""

    length: int = 4

    @property
    def cache_key(self) -> Hashable:
        return ("gzip-trailer", KEY, 4)

    def produce(self, ctx: Any) -> bytes:
        return ctx.store.get(KEY)


def read_across_commit_end(reader: Reader, vf: VFile, n: int, land: Callable[[], None], why: str) -> bytes:
    """Read ``n`` bytes in a thread while the rewrite begun is under way: the read must wait;
    then ``land`` (the new version, put), the rewrite ends, and the read's bytes are returned."""
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(bytes(reader.read(vf, 0, n))))
    t.start()
    t.join(0.3)
    assert t.is_alive(), why
    land()
    (w,) = reader.ctx.catalog.rewrite_watchers
    w.rewritten({KEY})
    t.join(10)
    assert len(got) == 1
    return got[0]


def test_nothing_cached_from_a_chunk_is_served_while_it_is_rewritten():
    store = MemoryStore()
    store.put(KEY, b"old!")
    reader = Reader(Ctx(store))
    vf = VFile([Produced(Copy())])
    assert bytes(reader.read(vf, 0, 4)) == b"old!"  # cached now
    (w,) = reader.ctx.catalog.rewrite_watchers
    w.rewriting({KEY})
    store.put(KEY, b"new!")  # landed; the commit goes on (the CRC table's fsync, the index)
    got = read_across_commit_end(reader, vf, 4, lambda: store.put(KEY, b"nxt!"),  # a second writer's
                                 "read a chunk in the middle of its commit")
    assert got == b"nxt!", "served what was made from the old bytes"
    store.put(KEY, b"bad!")  # behind the reader's back: the cache holds again once settled
    assert bytes(reader.read(vf, 0, 4)) == b"nxt!"
    reader.close()


def test_overlapping_rewrites_of_one_chunk_keep_nothing_until_both_are_over():
    store = MemoryStore()
    store.put(KEY, b"old!")
    reader = Reader(Ctx(store))
    vf = VFile([Produced(Copy())])
    (w,) = reader.ctx.catalog.rewrite_watchers
    w.rewriting({KEY})
    w.rewriting({KEY})
    w.rewritten({KEY})
    got = read_across_commit_end(reader, vf, 4, lambda: store.put(KEY, b"new!"),
                                 "read a chunk while a second rewrite of it went on")
    assert got == b"new!"
    store.put(KEY, b"bad!")
    assert bytes(reader.read(vf, 0, 4)) == b"new!"
    reader.close()


def test_the_commit_tells_watchers_before_the_put_and_after_the_index(tmp_path):
    """``DomainEditor.put_chunks`` is the one commit point of chunk bytes: watchers hear of a
    rewrite before the store changes and of its end once the cached index has the new size."""
    import numpy as np

    from polyfs.codecs.registry import DEFLATE, Filter
    from polyfs.model import keys, types as T
    from polyfs.model.catalog import Catalog
    from polyfs.model.editor import DomainEditor
    from polyfs.model.schema import Shape
    from polyfs.model.writer import DomainWriter
    from polyfs.store import open_store

    cat = Catalog(open_store(str(tmp_path / "store"), create=True))
    with DomainWriter(cat, "/a.h5") as w:
        d = w.add_dataset(w.root, "d", T.IntType(2, True), Shape("simple", (8, 8), (None, None)), (4, 4),
                          [Filter(DEFLATE, (4,))])
        w.write_array(d, np.ones((8, 8), "i2"))
    ds = cat.load("/a.h5").datasets[d.id]
    key = keys.chunk_key(ds.id, (1, 0))
    new = __import__("zlib").compress(np.full((4, 4), 7, "i2").tobytes())
    seen: list[tuple[str, set[str], bytes, int]] = []

    class Watcher:
        def rewriting(self, ks: set[str]) -> None:
            seen.append(("rewriting", ks, cat.store.get(key), cat.chunk_index(ds).size_of(2)))

        def rewritten(self, ks: set[str]) -> None:
            seen.append(("rewritten", ks, cat.store.get(key), cat.chunk_index(ds).size_of(2)))

    old = cat.store.get(key)
    cat.rewrite_watchers.append(Watcher())
    DomainEditor(cat).put_chunks("/a.h5", ds, [((1, 0), new)], deletes=[(1, 1)])
    gone = keys.chunk_key(ds.id, (1, 1))
    assert seen == [("rewriting", {key, gone}, old, len(old)), ("rewritten", {key, gone}, new, len(new))]


class RewrittenMidRead(MemoryStore):
    """A store whose chunk is rewritten through the daemon (bracketed as a commit does) right
    after a read took the old body, before the same read produces the trailer."""

    def __init__(self) -> None:
        super().__init__()
        self.reader: Reader | None = None
        self.armed = True

    def get_range(self, key: str, start: int, length: int) -> bytes:
        data = super().get_range(key, start, length)
        if self.armed and self.reader is not None:
            self.armed = False
            (w,) = self.reader.ctx.catalog.rewrite_watchers
            w.rewriting({KEY})
            self.put(KEY, b"new!")
            w.rewritten({KEY})
        return data


def test_one_read_never_mixes_two_versions_of_a_chunk():
    """A gzip member's body is a stored range and its trailer is produced from the stored
    stream: a commit landing between the two gave a member failing its CRC check."""
    from polyfs.vfile import Stored

    store = RewrittenMidRead()
    store.put(KEY, b"old!")
    reader = Reader(Ctx(store))
    store.reader = reader
    reader.rewrites.begin(set())  # a daemon that has written before (the gate is armed)
    reader.rewrites.end(set())
    vf = VFile([Stored(KEY, 0, 4, 4), Produced(Copy())])
    got = bytes(reader.read(vf, 0, 8))
    assert got in (b"old!old!", b"new!new!"), got
    reader.close()


def test_a_read_of_a_chunk_being_rewritten_waits_for_the_commit():
    from polyfs.vfile import Stored

    store = MemoryStore()
    store.put(KEY, b"old!")
    reader = Reader(Ctx(store))
    vf = VFile([Stored(KEY, 0, 4, 4), Produced(Copy())])
    (w,) = reader.ctx.catalog.rewrite_watchers
    w.rewriting({KEY})
    got = read_across_commit_end(reader, vf, 8, lambda: store.put(KEY, b"new!"),
                                 "read a chunk in the middle of its commit")
    assert got == b"new!new!"
    reader.close()


def test_a_file_open_before_a_same_size_rewrite_reads_the_version_it_opened():
    """Body and trailer alike: a descriptor opened before the rewrite reads the kept version,
    one opened after it the new one, and what is made for the first is not cached for the
    second."""
    from polyfs.vfile import Stored

    store = MemoryStore()
    store.put(KEY, b"old!")
    reader = Reader(Ctx(store))
    vf = VFile([Stored(KEY, 0, 4, 4), Produced(Copy())])
    opened = reader.rewrites.epoch
    assert bytes(reader.read(vf, 0, 2, as_of=opened)) == b"ol"  # the first request
    (w,) = reader.ctx.catalog.rewrite_watchers
    reader.ctx.catalog.recent.keep(KEY, store.get(KEY))  # as the write side does, before the commit
    w.rewriting({KEY})
    store.put(KEY, b"new!")  # the same size: its layout cannot tell
    w.rewritten({KEY})
    assert bytes(reader.read(vf, 2, 6, as_of=opened)) == b"d!old!"  # the second request
    later = reader.rewrites.epoch
    assert bytes(reader.read(vf, 0, 8, as_of=later)) == b"new!new!"
    assert bytes(reader.read(vf, 0, 8)) == b"new!new!"
    reader.ctx.catalog.recent.keep(KEY, store.get(KEY))
    w.rewriting({KEY})
    store.put(KEY, b"nxt!")
    w.rewritten({KEY})
    # one version is held per chunk and size (the newest replaced): a descriptor opened before
    # both rewrites reads that one now, body and trailer alike, never a mix
    assert bytes(reader.read(vf, 0, 8, as_of=opened)) == b"new!new!"
    assert bytes(reader.read(vf, 0, 8, as_of=later)) == b"new!new!"
    assert bytes(reader.read(vf, 0, 8, as_of=reader.rewrites.epoch)) == b"nxt!nxt!"
    reader.close()


@dataclass(frozen=True)
class SizedCopy:
    """A production planned from a version ``stored_size`` bytes long (a gzip trailer reads
    the stream's tail at that size)."""

    stored_size: int
    length: int = 4

    @property
    def cache_key(self) -> Hashable:
        return ("gzip-trailer", KEY, self.stored_size)

    def produce(self, ctx: Any) -> bytes:
        buf = bytearray(self.stored_size)
        n = ctx.store.read_into(KEY, 0, memoryview(buf), self.stored_size)
        return bytes(buf[:n])[-4:]


def test_a_file_laid_out_after_a_rewrite_it_opened_before_reads_the_new_version():
    """Opened while a rewrite landed: its epoch is older than the rewrite but its layout has
    the new version's size. The old version does not fit that layout: the new one is read,
    body and trailer, never an EIO."""
    from polyfs.vfile import Stored

    store = MemoryStore()
    store.put(KEY, b"old!")
    reader = Reader(Ctx(store))
    opened = reader.rewrites.epoch
    (w,) = reader.ctx.catalog.rewrite_watchers
    reader.ctx.catalog.recent.keep(KEY, store.get(KEY))
    w.rewriting({KEY})
    store.put(KEY, b"longer!!")
    w.rewritten({KEY})
    vf = VFile([Stored(KEY, 0, 8, 8), Produced(SizedCopy(8))])  # laid out from the new listing
    assert bytes(reader.read(vf, 0, 12, as_of=opened)) == b"longer!!er!!"
    reader.close()
