"""A chunk rewritten while the reader is producing (transcoding) bytes from its old version:
what was made from the old bytes must not outlive the rewrite in the produced-bytes cache.

Found by the soak (tests/soakkit.py): N5 blocks of a dataset written through zarr/ are
transcoded (little- to big-endian); a transcode that fetched the old chunk just before a
commit, and finished just after the commit's ``forget_chunks``, left the old block cached,
so readers that opened after the write was acknowledged were served the old version."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Hashable

from polyfs.reader import Reader
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
        self.catalog = type("Catalog", (), {"chunk_listeners": [], "dataset_listeners": []})()


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
    store.put(KEY, b"new!")  # a commit: the chunk is rewritten ...
    for listener in reader.ctx.catalog.chunk_listeners:
        listener({KEY})  # ... and the catalog tells the reader
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
    assert first == [b"old!"]  # it asked before the rewrite: old bytes are a valid answer
    assert bytes(reader.read(vf, 0, 4)) == b"new!", "the old transcode must not be left in the cache"
    reader.close()
