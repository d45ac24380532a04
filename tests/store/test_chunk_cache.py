"""The local chunk cache of remote stores (polyfs/store/chunkcache.py): hits without
requests, the LRU bound, ETag revalidation after the ttl, write-through, broken cache
files never served, and an index that survives a reopen. Time is a fake clock: no test
waits for, or times, anything."""
from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest

from polyfs.errors import ChunkChanged, NotFound
from polyfs.model import ids, keys
from polyfs.store import open_store
from polyfs.store.chunkcache import LIST_MIN, ChunkCacheStore, _key_hash
from polyfs.store.chunkversions import Fetched, GenericVersions, TaggedVersions
from polyfs.store.memory import MemoryStore

ROOT = ids.new_root_id()
DSET = ids.new_id("d", ROOT)


def chunk(*coords: int) -> str:
    return keys.chunk_key(DSET, coords or (0,))


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class CountingStore(MemoryStore):
    """A memory store that counts the requests a remote store would answer."""

    def __init__(self) -> None:
        super().__init__(name=uuid.uuid4().hex)
        self.calls: Counter[str] = Counter()

    def get(self, key: str) -> bytes:
        self.calls["get"] += 1
        return super().get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self.calls["get_range"] += 1
        return super().get_range(key, start, length)

    def head(self, key):
        self.calls["head"] += 1
        return super().head(key)

    def list(self, prefix=""):
        self.calls["list"] += 1
        return super().list(prefix)

    def requests(self) -> int:
        return sum(self.calls.values())


@pytest.fixture
def inner() -> CountingStore:
    return CountingStore()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def cache(inner, tmp_path: Path, clock: Clock, capacity: int = 1 << 20, ttl: float = 60.0) -> ChunkCacheStore:
    return ChunkCacheStore(inner, tmp_path / "cache", capacity, ttl=ttl, clock=clock)


def cache_files(c: ChunkCacheStore) -> list[Path]:
    return sorted(p for p in c.dir.glob("??/*") if p.is_file())


DATA = bytes(range(256)) * 40


def test_second_reads_are_served_from_disk_without_requests(inner, tmp_path, clock):
    inner.put(chunk(0), DATA)
    c = cache(inner, tmp_path, clock)
    assert c.get_range(chunk(0), 10, 20) == DATA[10:30]  # a miss fetches the whole object
    assert c.stats.misses == 1 and len(cache_files(c)) == 1
    before = inner.requests()
    assert c.get(chunk(0)) == DATA
    assert c.get_range(chunk(0), 1000, 500) == DATA[1000:1500]
    assert c.get_range(chunk(0), len(DATA) - 5, 100) == DATA[-5:]  # short only at the end
    assert c.get_range(chunk(0), len(DATA) + 10, 5) == b""
    assert c.get_ranges(chunk(0), [(0, 3), (100, 4), (5000, 0), (9000, 240)]) == \
        [DATA[:3], DATA[100:104], b"", DATA[9000:9240]]
    buf = bytearray(64)
    assert c.read_into(chunk(0), 200, memoryview(buf), len(DATA)) == 64 and bytes(buf) == DATA[200:264]
    got = c.read_into_nowait(chunk(0), 300, memoryview(buf), len(DATA))
    assert got is None or (got == 64 and bytes(buf) == DATA[300:364])  # None: not in the page cache
    assert inner.requests() == before
    assert c.stats.hits >= 6


def test_metadata_and_other_keys_always_go_to_the_store(inner, tmp_path, clock):
    meta = keys.dataset_key(DSET)
    inner.put(meta, b'{"a": 1}')
    inner.put("polyfs/chunks/x.idx", b"idx")
    c = cache(inner, tmp_path, clock)
    for _ in range(3):
        assert c.get(meta) == b'{"a": 1}'
        assert c.get_range("polyfs/chunks/x.idx", 0, 2) == b"id"
    assert inner.calls["get"] == 3 and inner.calls["get_range"] == 3
    assert not cache_files(c)
    c.put(meta, b"{}")  # writes of metadata pass through, nothing cached
    assert inner.get(meta) == b"{}" and not cache_files(c)


def test_lru_bound_evicts_least_recently_used(inner, tmp_path, clock):
    for i in range(12):
        inner.put(chunk(i), bytes([i]) * 3000)  # one 4 KiB block each on disk
    c = cache(inner, tmp_path, clock, capacity=8 * 4096)
    for i in range(8):
        c.get(chunk(i))
    assert c.entry_count == 8 and c.used_bytes == 8 * 4096
    c.get(chunk(0))  # now the most recently used
    gets = inner.calls["get"]
    c.get(chunk(8))  # evicts chunk 1, the least recently used
    assert inner.calls["get"] == gets + 1
    assert c.entry_count == 8 and c.used_bytes <= 8 * 4096 and len(cache_files(c)) == 8
    for i in range(9, 12):
        c.get(chunk(i))
    assert c.used_bytes <= 8 * 4096 and len(cache_files(c)) == 8 and c.stats.evicted == 4
    gets = inner.calls["get"]
    assert c.get(chunk(0)) == bytes([0]) * 3000 and inner.calls["get"] == gets  # kept
    assert c.get(chunk(1)) == bytes([1]) * 3000 and inner.calls["get"] == gets + 1  # evicted, fetched again


def test_objects_too_large_for_the_cache_pass_through(inner, tmp_path, clock):
    inner.put(chunk(0), DATA)  # 10 KiB: more than a quarter of 16 KiB
    c = cache(inner, tmp_path, clock, capacity=16 << 10)
    assert c.get_range(chunk(0), 5, 10) == DATA[5:15]
    assert not cache_files(c)
    ranges = inner.calls["get_range"]
    assert c.get_range(chunk(0), 100, 10) == DATA[100:110]
    assert inner.calls["get_range"] == ranges + 1  # a ranged request now, not the whole object again


def test_change_by_another_host_is_seen_after_ttl(inner, tmp_path, clock):
    inner.put(chunk(0), b"A" * 5000)
    c = cache(inner, tmp_path, clock, ttl=5.0)
    assert c.get(chunk(0)) == b"A" * 5000
    inner.put(chunk(0), b"B" * 5000)  # another host rewrites it, same size
    clock.t += 4.0
    before = inner.requests()
    assert c.get(chunk(0)) == b"A" * 5000  # validated less than ttl ago: no request
    assert inner.requests() == before
    clock.t += 1.5
    assert c.get(chunk(0)) == b"B" * 5000
    assert c.stats.refreshed == 1 and len(cache_files(c)) == 1  # the old version's file is gone
    clock.t += 6.0
    gets = inner.calls["get"]
    assert c.get_range(chunk(0), 0, 3) == b"BBB"
    assert c.stats.revalidated == 1 and inner.calls["get"] == gets  # unchanged: a head, no transfer
    inner.delete(chunk(0))  # and deleted behind our back
    clock.t += 6.0
    with pytest.raises(NotFound):
        c.get(chunk(0))
    assert c.entry_count == 0 and not cache_files(c)


def test_many_stale_chunks_of_a_dataset_are_revalidated_by_one_listing(inner, tmp_path, clock):
    n = LIST_MIN + 8
    for i in range(n):
        inner.put(chunk(i), bytes([i]) * 100)
    c = cache(inner, tmp_path, clock, ttl=5.0)
    for i in range(n):
        c.get(chunk(i))
    inner.put(chunk(0), b"new" * 10)  # another host changes one chunk and deletes another
    inner.delete(chunk(1))
    clock.t += 6
    before = inner.calls.copy()
    assert [c.get(chunk(i)) for i in range(2, n)] == [bytes([i]) * 100 for i in range(2, n)]
    spent = inner.calls - before
    assert spent == Counter(list=1) and c.stats.listings == 1  # one listing, no request per chunk
    assert c.get(chunk(0)) == b"new" * 10 and c.stats.refreshed == 1  # changed: its own request
    with pytest.raises(NotFound):
        c.get(chunk(1))  # the listing dropped it
    clock.t += 2
    assert c.get(chunk(2)) == bytes([2]) * 100 and c.stats.listings == 1  # current for another ttl


def test_planned_size_mismatch_checks_the_store_at_once(inner, tmp_path, clock):
    inner.put(chunk(0), b"A" * 100)
    c = cache(inner, tmp_path, clock)
    c.get(chunk(0))
    buf = bytearray(10)
    with pytest.raises(ChunkChanged):  # the store agrees with the cache: the listing is stale
        c.read_into(chunk(0), 0, memoryview(buf), 120)
    inner.put(chunk(0), b"C" * 120)  # rewritten behind us with the size the caller planned
    assert c.read_into(chunk(0), 0, memoryview(buf), 120) == 10 and bytes(buf) == b"C" * 10


def test_writes_and_deletes_through_the_cache_update_it(inner, tmp_path, clock):
    c = cache(inner, tmp_path, clock)
    c.put(chunk(0), b"one" * 100)
    assert inner.get(chunk(0)) == b"one" * 100
    before = inner.calls["get"]
    assert c.get(chunk(0)) == b"one" * 100 and inner.calls["get"] == before  # write-through
    c.get(chunk(0))
    c.put(chunk(0), b"two" * 100)  # our own rewrite shows at once, within the ttl
    assert c.get(chunk(0)) == b"two" * 100 and len(cache_files(c)) == 1
    c.put_many([(chunk(1), b"x" * 10), (chunk(2), b"y" * 10), (keys.dataset_key(DSET), b"{}")])
    assert c.get(chunk(1)) == b"x" * 10 and c.get(chunk(2)) == b"y" * 10
    assert inner.calls["get"] == before and len(cache_files(c)) == 3
    c.delete(chunk(0))
    with pytest.raises(NotFound):
        c.get(chunk(0))
    assert len(cache_files(c)) == 2
    assert c.delete_prefix(keys.dataset_prefix(DSET)) == 3
    assert not cache_files(c) and c.entry_count == 0
    with pytest.raises(NotFound):
        c.get(chunk(1))


def test_other_store_methods_reach_the_backend(inner, tmp_path, clock):
    meta = keys.dataset_key(DSET)
    c = cache(inner, tmp_path, clock)
    tag = c.put_if(meta, b"{}", None)  # compare-and-swap is the backend's
    assert c.get_tagged(meta) == (b"{}", tag)
    inner.put(chunk(0), b"z" * 50)
    c.get(chunk(0))
    c.put_if(chunk(0), b"w" * 50, c.inner.get_tagged(chunk(0))[1])  # a conditional chunk write drops the entry
    assert c.get(chunk(0)) == b"w" * 50


def test_a_fetch_overtaken_by_our_own_write_is_not_kept(inner, tmp_path, clock):
    class RacingVersions(GenericVersions):
        """The fetch reads the old bytes; our own write lands before it files them."""

        race = True

        def fetch(self, key: str) -> Fetched:
            got = super().fetch(key)
            if self.race:
                self.race = False
                c.put(key, b"new" * 10)
            return got

    inner.put(chunk(0), b"old" * 10)
    c = ChunkCacheStore(inner, tmp_path / "cache", 1 << 20, ttl=60, versions=RacingVersions(inner), clock=clock)
    assert c.get(chunk(0)) == b"old" * 10  # what that read fetched
    assert c.get(chunk(0)) == b"new" * 10  # but the cache holds what we wrote
    assert c.stats.uncached == 1


def test_concurrent_misses_fetch_once(inner, tmp_path, clock):
    inner.put(chunk(0), DATA)
    c = cache(inner, tmp_path, clock)
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(c.get(chunk(0)))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [DATA] * 8 and c.stats.misses == 1


def test_index_survives_reopen(inner, tmp_path, clock):
    for i in range(3):
        inner.put(chunk(i), bytes([i]) * 2000)
    c = cache(inner, tmp_path, clock)
    for i in range(3):
        c.get(chunk(i))
    c.close()
    before = inner.requests()
    c = cache(inner, tmp_path, clock, ttl=3600)  # files validated moments ago: still current
    assert c.entry_count == 3
    assert [c.get(chunk(i)) for i in range(3)] == [bytes([i]) * 2000 for i in range(3)]
    assert inner.requests() == before and c.stats.hits == 3
    c.close()
    c = cache(inner, tmp_path, clock, ttl=0.0)  # every read revalidates: a head, never a transfer
    assert c.get(chunk(1)) == bytes([1]) * 2000
    assert c.stats.revalidated == 1 and c.stats.misses == 0 and inner.calls["get"] == 3


def test_broken_cache_files_are_never_served(inner, tmp_path, clock):
    for i in range(4):
        inner.put(chunk(i), bytes([65 + i]) * 5000)
    c = cache(inner, tmp_path, clock)
    for i in range(4):
        c.get(chunk(i))
    files = {p.name.split(".")[0]: p for p in cache_files(c)}
    path = {i: files[_key_hash(chunk(i))] for i in range(4)}
    c.close()
    with open(path[0], "r+b") as f:  # a crash while filling (were it not renamed into place)
        f.truncate(3000)
    with open(path[1], "r+b") as f:  # data lost under a renamed file (power loss): CRC
        f.seek(-1, os.SEEK_END)
        f.write(b"\0")
    path[2].write_bytes(b"garbage" * 800)  # not a cache file at all
    (c.dir / "tmp" / "leftover.123.0").write_bytes(b"partial")  # a temp file a crash left
    stray = path[3].parent / "not-a-cache-file"
    stray.write_bytes(b"?")
    c = cache(inner, tmp_path, clock, ttl=3600)
    gets = inner.calls["get"]
    assert [c.get(chunk(i)) for i in range(4)] == [bytes([65 + i]) * 5000 for i in range(4)]
    assert c.stats.corrupt == 3 and inner.calls["get"] == gets + 3  # only the intact one was served
    assert not list((c.dir / "tmp").iterdir()) and not stray.exists()
    assert len(cache_files(c)) == 4  # the broken ones were replaced by good copies


def test_a_file_removed_under_a_running_cache_is_refetched(inner, tmp_path, clock):
    inner.put(chunk(0), DATA)
    c = cache(inner, tmp_path, clock)
    c.get(chunk(0))
    for p in cache_files(c):
        p.unlink()
    assert c.get_range(chunk(0), 7, 3) == DATA[7:10] and c.stats.misses == 2


def test_each_running_cache_takes_its_own_directory(inner, tmp_path, clock):
    a = cache(inner, tmp_path, clock)
    b = cache(inner, tmp_path, clock)
    assert a.dir != b.dir and a.dir.parent == b.dir.parent
    a.close()
    c = cache(inner, tmp_path, clock)
    assert c.dir == a.dir  # a remount finds its files again


# -- the same through a real S3 endpoint (moto), ETags and conditional GETs ------------
def test_s3_etag_revalidation_and_write_through(s3_server, tmp_path, clock):
    bucket = s3_server.create_bucket(f"cc-{uuid.uuid4().hex[:12]}")
    url = f"s3://{bucket}/pre"
    other = open_store(url)  # another host writing to the same bucket
    c = ChunkCacheStore(open_store(url), tmp_path / "cache", 1 << 24, ttl=5.0, clock=clock)
    assert isinstance(c._versions, TaggedVersions)
    other.put(chunk(0), b"a" * 3000)
    assert c.get_range(chunk(0), 0, 4) == b"aaaa" and c.stats.misses == 1
    other.put(chunk(0), b"b" * 3000)
    assert c.get(chunk(0)) == b"a" * 3000  # within the ttl
    clock.t += 6
    assert c.get(chunk(0)) == b"b" * 3000 and c.stats.refreshed == 1
    clock.t += 6
    assert c.get(chunk(0)) == b"b" * 3000 and c.stats.revalidated == 1  # a 304
    c.put(chunk(1), b"mine" * 500)  # write-through: the entry carries the store's ETag
    clock.t += 6
    assert c.get(chunk(1)) == b"mine" * 500
    assert c.stats.revalidated == 2 and c.stats.misses == 1 and c.stats.refreshed == 1
    other.delete(chunk(1))
    clock.t += 6
    with pytest.raises(NotFound):
        c.get(chunk(1))


# -- the store interface holds through the wrapper ---------------------------------------
CONFORMANCE = ["test_put_get_roundtrip", "test_ranged_gets", "test_missing_objects",
               "test_head_and_list_with_sizes", "test_list_dir_one_level", "test_delete_and_delete_prefix",
               "test_put_many", "test_bulk_listing_records", "test_read_into"]


@pytest.mark.parametrize("name", CONFORMANCE)
def test_conformance_through_the_cache(name, tmp_path, clock):
    import test_conformance

    c = ChunkCacheStore(open_store(f"memory://{uuid.uuid4().hex}"), tmp_path / "cache", 1 << 20, clock=clock)
    getattr(test_conformance, name)(c)


# -- the mount options and where the daemon applies them ---------------------------------
def test_mount_options_and_wiring(s3_server, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from polyfs import config, daemon
    from polyfs.errors import InvalidInput

    monkeypatch.chdir(tmp_path)
    ns = SimpleNamespace(store="s3://b/p", mountpoint="/mnt/x", foreground=False, read_only=False,
                         options=["cache_gb=0.5,cache_dir=rel"], log_level=None, log_file=None, config=None)
    cfg = config.load(ns, environ={})
    assert cfg.cache_gb == 0.5 and cfg.cache_dir == str(tmp_path / "rel")  # absolute before the daemon's chdir
    assert config.load(SimpleNamespace(**{**vars(ns), "options": []}), environ={}).cache_gb == 10.0
    with pytest.raises(InvalidInput, match="cache_gb"):
        config.load(SimpleNamespace(**{**vars(ns), "options": ["cache_gb=-1"]}), environ={})
    bucket = s3_server.create_bucket(f"cw-{uuid.uuid4().hex[:12]}")
    s3 = open_store(f"s3://{bucket}/p")
    wrapped = daemon.with_chunk_cache(cfg, s3)
    assert isinstance(wrapped, ChunkCacheStore) and wrapped.capacity == 1 << 29
    assert wrapped.dir.parent == tmp_path / "rel" and wrapped.ttl == cfg.domain_ttl
    wrapped.close()
    cfg.cache_gb = 0
    assert daemon.with_chunk_cache(cfg, s3) is s3  # off
    cfg.cache_gb = 1
    local = open_store(str(tmp_path / "local"), create=True)
    assert daemon.with_chunk_cache(cfg, local) is local  # only remote stores
    (tmp_path / "file").write_text("")
    cfg.cache_dir = str(tmp_path / "file")  # a cache that cannot be made costs speed, not the mount
    assert daemon.with_chunk_cache(cfg, s3) is s3
