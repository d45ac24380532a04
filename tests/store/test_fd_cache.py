"""Tier 1: the local store's cache of read descriptors (store/fdcache.py): reused while
young, never for an object this process replaced or deleted, never past an unlink by
another process, bounded in count, and all closed once idle."""
from __future__ import annotations

import os
import threading
import time

import pytest

from polyfs.errors import ChunkChanged, NotFound
from polyfs.store.fdcache import FdCache, default_capacity
from polyfs.store.local import LocalStore


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def store(tmp_path):
    s = LocalStore(tmp_path / "s", create=True)
    s.put("db/x/c/0", b"0123456789")
    return s


def read(store: LocalStore, key: str, n: int = 10, expect: int = -1) -> bytes:
    buf = bytearray(n)
    got = store.read_into(key, 0, memoryview(buf), expect)
    return bytes(buf[:got])


def test_a_descriptor_is_reused_while_young(store):
    assert read(store, "db/x/c/0") == b"0123456789"
    opens = store._fds.opens
    for _ in range(5):
        assert store.get_range("db/x/c/0", 2, 3) == b"234"
        assert read(store, "db/x/c/0") == b"0123456789"
    assert store._fds.opens == opens and store._fds.hits >= 10


def test_no_reuse_after_its_life(tmp_path):
    s = LocalStore(tmp_path / "s", create=True)
    s._fds = FdCache(life=0.05)
    s.put("k/a", b"one")
    assert s.get_range("k/a", 0, 3) == b"one"
    time.sleep(0.1)
    assert s.get_range("k/a", 0, 3) == b"one"
    assert s._fds.opens == 2 and s._fds.hits == 0


def test_this_process_never_reads_what_it_replaced_or_deleted(store):
    os.link(store.root / "db/x/c/0", store.root / "hardlink")  # the old object stays linked
    assert read(store, "db/x/c/0") == b"0123456789"
    store.put("db/x/c/0", b"abcdefghij")
    assert read(store, "db/x/c/0") == b"abcdefghij"
    store.put_many([("db/x/c/0", b"ABCDEFGHIJ"), ("db/x/c/1", b"z")])
    assert read(store, "db/x/c/0") == b"ABCDEFGHIJ"
    store.delete("db/x/c/0")
    with pytest.raises(NotFound):
        read(store, "db/x/c/0")


def test_an_object_another_process_replaced_is_opened_afresh(store):
    assert read(store, "db/x/c/0") == b"0123456789"
    tmp = store.root / "db/x/c/tmp"
    tmp.write_bytes(b"9876543210")
    os.replace(tmp, store.root / "db/x/c/0")  # as a writer elsewhere does: the old inode is unlinked
    assert read(store, "db/x/c/0") == b"9876543210"
    assert store.get_range("db/x/c/0", 0, 4) == b"9876"
    os.unlink(store.root / "db/x/c/0")
    with pytest.raises(NotFound):
        store.get_range("db/x/c/0", 0, 4)


def test_a_size_change_in_place_is_still_caught(store):
    assert read(store, "db/x/c/0", expect=10) == b"0123456789"
    with open(store.root / "db/x/c/0", "ab") as f:  # rewritten in place: same inode, new size
        f.write(b"++")
    with pytest.raises(ChunkChanged):
        read(store, "db/x/c/0", expect=10)


def test_bounded_count_and_closed_when_idle(tmp_path):
    s = LocalStore(tmp_path / "s", create=True)
    s._fds = FdCache(capacity=4, life=0.2)
    for i in range(20):
        s.put(f"k/{i}", b"x")
    before = open_fds()
    for i in range(20):
        assert s.get_range(f"k/{i}", 0, 1) == b"x"
        assert len(s._fds) <= 4
    assert open_fds() <= before + 4
    deadline = time.monotonic() + 30  # polled: a loaded machine may run the sweeper late
    while len(s._fds) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(s._fds) == 0 and open_fds() <= before  # the sweeper closed them all


def test_capacity_follows_the_descriptor_limit():
    assert 0 <= default_capacity() <= 64
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        assert default_capacity() <= soft // 16


def test_a_descriptor_in_use_is_closed_by_its_last_user(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    c = FdCache(capacity=1, life=10)
    fd, token, cached = c.acquire("f", lambda: path)
    assert not cached and token is not None
    c.discard("f")  # dropped while in use: still readable until released
    assert os.pread(fd, 5, 0) == b"hello"
    c.release(fd, token)
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_descriptor_opened_across_a_discard_is_not_kept(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old")
    c = FdCache(capacity=8, life=10)

    def opener():
        c.discard("f")  # a write lands between the reader's look-up and its open
        return path

    fd, token, _ = c.acquire("f", opener)
    c.release(fd, token)
    assert token is None and len(c) == 0


def test_many_threads_share_and_replace_without_stale_or_closed_reads(store):
    """Readers hammer one key while this process keeps replacing it: every read is a whole
    version (never a closed descriptor's EBADF), and after each put returns, readers that
    start later see that version or a newer one."""
    versions = [bytes([65 + i]) * 10 for i in range(20)]
    store.put("db/x/c/0", versions[0])
    latest = [0]
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                floor = latest[0]
                got = read(store, "db/x/c/0")
                assert got in versions and versions.index(got) >= floor, (got, floor)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(1, len(versions)):
        store.put("db/x/c/0", versions[i])
        latest[0] = i
        time.sleep(0.005)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
