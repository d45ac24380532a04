"""Read planning (pure) and the one executor, including producers and the cache."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from polyfs.binfmt import Layout
from polyfs.errors import ChunkMissing
from polyfs.model.chunks import ChunkIndex
from polyfs.reader import ByteLRU, Reader
from polyfs.store import open_store
from polyfs.vfile import ChunkRun, Literal, Produced, RangePiece, Stored, VFile, Zeros, coalesce


@dataclass(frozen=True)
class Counting:
    """A producer that counts how often it really runs."""

    data: bytes
    calls: list

    @property
    def cache_key(self):
        return ("count", self.data)

    @property
    def length(self):
        return len(self.data)

    def produce(self, ctx):
        self.calls.append(self.data[:1])
        return self.data


class Ctx:
    def __init__(self, store):
        self.store = store
        self.catalog = None


@pytest.fixture
def store():
    s = open_store("memory://vfile-tests")
    for i, blob in enumerate([b"AAAA", b"BBBBBB", b"CC"]):
        s.put(f"d/{i}", blob)
    return s


def expected_bytes(store, vf_parts):
    return b"".join(vf_parts)


def test_plan_and_read_every_range(store):
    calls: list = []
    vf = VFile([Literal(b"hdr:"), Stored("d/1", 1, 4), Zeros(3), Produced(Counting(b"xyz", calls)), Stored("d/0", 0, 4)])
    whole = b"hdr:" + b"BBBB" + b"\0\0\0" + b"xyz" + b"AAAA"
    r = Reader(Ctx(store))
    assert vf.size == len(whole)
    for off in range(len(whole) + 2):
        for n in (1, 2, 5, 100):
            assert r.read(vf, off, n) == whole[off:off + n], (off, n)
    assert len(calls) == 1  # produced once, then cached


def test_chunk_run_with_head_skip_and_tail(store):
    idx = ChunkIndex.from_listing("d-x", "d/", (3,), [("0", 4), ("1", 6), ("2", 2)])
    calls: list = []
    run = ChunkRun(idx, idx.linear, idx.sizes, head=b"<", skip_head=1, skip_tail=0,
                   tail=lambda lin, size: Counting(b">%d" % lin, calls), tail_len=2)
    vf = VFile([run])
    whole = b"<AAA>0<BBBBB>1<C>2"
    r = Reader(Ctx(store))
    assert vf.size == len(whole) and run.item_offsets().tolist() == [0, 6, 14]
    for off in range(len(whole)):
        for n in (1, 3, 7, 50):
            assert r.read(vf, off, n) == whole[off:off + n]


def test_coalesce_merges_per_key():
    pieces = [RangePiece("a", 0, 10), RangePiece("b", 5, 5), RangePiece("a", 10, 5), RangePiece("a", 40, 1)]
    assert sorted(coalesce(pieces)) == [("a", 0, 15), ("a", 40, 1), ("b", 5, 5)]


def test_vanished_chunk_is_an_error_for_that_read_only(store, caplog):
    vf = VFile([Literal(b"x" * 10), Stored("d/gone", 0, 4)])
    r = Reader(Ctx(store))
    assert r.read(vf, 0, 10) == b"x" * 10
    with pytest.raises(ChunkMissing):
        r.read(vf, 8, 4)
    assert "d/gone" in caplog.text


def test_produced_once_under_concurrency(store):
    calls: list = []
    p = Counting(b"q" * 1000, calls)
    vf = VFile([Produced(p)])
    r = Reader(Ctx(store))
    out = []
    threads = [threading.Thread(target=lambda: out.append(r.read(vf, 0, 1000))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [b"q" * 1000] * 8 and len(calls) == 1


def _blocks(n: int, size: int, calls: list) -> VFile:
    return VFile([Produced(Counting(bytes([i]) * size, calls)) for i in range(n)])


def test_sequential_reads_have_what_follows_produced_ahead(store):
    """A reader going through a file in order finds the next producers' bytes made
    in the background; each producer still runs once."""
    calls: list = []
    vf = _blocks(64, 1000, calls)
    r = Reader(Ctx(store), cache_bytes=1 << 20)
    r.readahead = 8000
    assert r.read(vf, 0, 1000) == b"\x00" * 1000
    assert len(calls) == 1  # a first read is not yet a sequence
    assert r.read(vf, 1000, 1000) == b"\x01" * 1000
    r._ahead_pool.submit(lambda: None).result()
    for _ in range(100):  # the pool has the next ones queued: wait for them
        if len(calls) >= 10:
            break
        threading.Event().wait(0.01)
    assert len(calls) == 10  # blocks 0, 1 and the 8000 bytes after them
    for i in range(2, 20):
        assert r.read(vf, i * 1000, 1000) == bytes([i]) * 1000
    r._ahead_pool.shutdown(wait=True)
    assert len(calls) == len(set(calls)) <= 20 + 8  # each once; no further than the window past the reader
    assert r.cache.get(("count", bytes([19]) * 1000)) is not None


def test_random_reads_produce_nothing_ahead(store):
    calls: list = []
    vf = _blocks(64, 1000, calls)
    r = Reader(Ctx(store), cache_bytes=1 << 20)
    r.readahead = 8000
    for i in (5, 40, 12, 33, 2):
        assert r.read(vf, i * 1000, 1000) == bytes([i]) * 1000
    r._ahead_pool.shutdown(wait=True)
    assert len(calls) == 5


def test_lru_is_bounded():
    c = ByteLRU(10)
    c.put("a", b"12345")
    c.put("b", b"12345")
    assert c.get("a") == b"12345"
    c.put("c", b"123")
    assert c.get("b") is None and c.get("a") is not None and c.used <= 10
    c.put("big", b"x" * 11)
    assert c.get("big") is None


def test_binfmt_layout_packs_and_parses_from_one_declaration():
    hdr = Layout.of("hdr", [("magic", "4s", b"POLY"), ("version", "B"), ("count", "I")], ">")
    data = hdr.pack(version=2, count=7)
    assert data == b"POLY\x02\x00\x00\x00\x07" and hdr.size == 9
    assert hdr.unpack(data) == {"magic": b"POLY", "version": 2, "count": 7}
    assert hdr.with_endian("<").pack(version=1, count=1)[-4:] == b"\x01\x00\x00\x00"
    assert hdr.offset_of("count") == 5
    with pytest.raises(KeyError):
        hdr.pack(count=1)
    with pytest.raises(ValueError):
        hdr.unpack(data[:5])


class RemoteCounting:
    """A store that costs a round trip per request (an object store): counts its GETs."""

    concurrent_fetches = True

    def __init__(self, inner) -> None:
        self.inner = inner
        self.gets: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def get_range(self, key, start, length):
        with self._lock:
            self.gets.append((key, start, length))
        return self.inner.get_range(key, start, length)

    def read_into(self, key, start, buf, expect_size=-1):  # a range GET whose size is checked
        with self._lock:
            self.gets.append((key, start, len(buf)))
        return self.inner.read_into(key, start, buf, expect_size)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _remote_file(n: int, size: int) -> tuple[RemoteCounting, VFile, bytes]:
    inner = open_store(f"memory://ahead-{n}-{size}")
    blobs = [bytes([65 + i % 26]) * size for i in range(n)]
    for i, b in enumerate(blobs):
        inner.put(f"o/{i}", b)
    return RemoteCounting(inner), VFile([Stored(f"o/{i}", 0, size, size) for i in range(n)]), b"".join(blobs)


def test_sequential_reads_of_a_remote_store_fetch_the_next_objects_ahead_once():
    store, vf, whole = _remote_file(40, 1000)
    r = Reader(Ctx(store), cache_bytes=1 << 20)
    r.readahead = 8000
    got = b"".join(r.read(vf, off, 500) for off in range(0, len(whole), 500))
    r._fetch_ahead_pool.shutdown(wait=True)
    assert got == whole
    whole_gets = [g for g in store.gets if g[1:] == (0, 1000)]
    assert len(whole_gets) >= 20  # most objects came whole, ahead of the reader
    fetched = [g[0] for g in store.gets]
    assert len(fetched) - len(set(fetched)) <= 2  # each object asked for once (but a read racing its fetch)
    assert not [k for k in r.cache._items if k[0] == "object"] or len(r.cache._items) < 10  # consumed ones go


def test_random_reads_of_a_remote_store_fetch_nothing_ahead():
    store, vf, whole = _remote_file(40, 1000)
    r = Reader(Ctx(store), cache_bytes=1 << 20)
    r.readahead = 8000
    for i in (5, 30, 12, 33, 2):
        assert r.read(vf, i * 1000, 500) == whole[i * 1000:i * 1000 + 500]
    r._fetch_ahead_pool.shutdown(wait=True)
    assert len(store.gets) == 5


def test_an_object_fetched_ahead_and_rewritten_is_not_served():
    store, vf, whole = _remote_file(8, 1000)
    r = Reader(Ctx(store), cache_bytes=1 << 20)
    r.readahead = 8000
    r.read(vf, 0, 500)
    r.read(vf, 500, 500)
    r._fetch_ahead_pool.shutdown(wait=True)
    store.inner.put("o/5", b"z" * 1000)
    r.forget_chunks({"o/5"})  # what a write through polyfs does
    assert r.read(vf, 5000, 1000) == b"z" * 1000
