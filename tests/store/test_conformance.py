"""One conformance suite for every backend: local directory, memory, S3 (moto)."""
from __future__ import annotations

import os
import threading
import uuid

import pytest

from polyfs.errors import InvalidInput, NotFound, ReadOnly
from polyfs.store import open_store
from polyfs.store.local import TMP_PREFIX


@pytest.fixture(params=["local", "memory", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return open_store(str(tmp_path / "store"), create=True)
    if request.param == "memory":
        return open_store(f"memory://{uuid.uuid4().hex}")
    server = request.getfixturevalue("s3_server")
    bucket = f"conf-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    return open_store(f"s3://{bucket}/some/prefix")


def test_put_get_roundtrip(store):
    store.put("a/b/c.bin", b"hello world")
    assert store.get("a/b/c.bin") == b"hello world"
    store.put("a/b/c.bin", b"replaced")
    assert store.get("a/b/c.bin") == b"replaced"
    store.put("empty", b"")
    assert store.get("empty") == b""


def test_ranged_gets(store):
    data = bytes(range(256)) * 40
    store.put("blob", data)
    assert store.get_range("blob", 0, 10) == data[:10]
    assert store.get_range("blob", 1000, 500) == data[1000:1500]
    assert store.get_range("blob", len(data) - 5, 100) == data[-5:]  # short only at the end
    assert store.get_range("blob", 7, 0) == b""
    assert store.get_ranges("blob", [(0, 3), (100, 4), (5000, 0), (9000, 240)]) == \
        [data[:3], data[100:104], b"", data[9000:9240]]


def test_missing_objects(store):
    with pytest.raises(NotFound):
        store.get("nope")
    with pytest.raises(NotFound):
        store.get_range("nope", 0, 4)
    with pytest.raises(NotFound):
        store.head("nope")
    assert not store.exists("nope")
    store.delete("nope")  # deleting a missing object is fine


def test_head_and_list_with_sizes(store):
    store.put("d/x/0_0", b"1234")
    store.put("d/x/0_1", b"12")
    store.put("d/x/.dataset.json", b"{}")
    store.put("d/y/1", b"abc")
    store.put("dz", b"z")
    assert store.head("d/x/0_1").size == 2
    listed = {o.key: o.size for o in store.list("d/x/")}
    assert listed == {"d/x/0_0": 4, "d/x/0_1": 2, "d/x/.dataset.json": 2}
    assert {o.key for o in store.list("d/")} == {"d/x/0_0", "d/x/0_1", "d/x/.dataset.json", "d/y/1"}
    # a partial name matches like a key prefix on every backend
    assert {o.key for o in store.list("d")} == {"d/x/0_0", "d/x/0_1", "d/x/.dataset.json", "d/y/1", "dz"}
    assert {o.key for o in store.list("")} >= {"dz", "d/y/1"}


def test_list_dir_one_level(store):
    for k in ["top.json", "db/a/g/1/.group.json", "db/a/.group.json", "home/x.h5/.domain.json", "home/.domain.json"]:
        store.put(k, b"{}")
    root = store.list_dir("")
    assert set(root.prefixes) == {"db/", "home/"}
    assert [o.key for o in root.objects] == ["top.json"]
    home = store.list_dir("home/")
    assert home.prefixes == ("home/x.h5/",)
    assert [o.key for o in home.objects] == ["home/.domain.json"]
    assert store.list_dir("nothing/here/").prefixes == ()


def test_delete_and_delete_prefix(store):
    for i in range(5):
        store.put(f"p/q/{i}", b"x" * i)
    store.put("p/keep", b"k")
    store.delete("p/q/0")
    assert not store.exists("p/q/0")
    assert store.delete_prefix("p/q/") == 4
    assert [o.key for o in store.list("p/")] == ["p/keep"]


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "trailing/", "./x"])
def test_invalid_keys_rejected(store, key):
    with pytest.raises(InvalidInput):
        store.put(key, b"x")


def test_concurrent_puts_are_atomic(store):
    """Readers racing writers see one whole version, never a mix or a part."""
    versions = [bytes([i]) * 200_000 for i in range(1, 6)]
    store.put("race", versions[0])
    errors = []

    def writer(v):
        store.put("race", v)

    def reader():
        for _ in range(20):
            got = store.get("race")
            if got not in versions:
                errors.append(len(got))

    threads = [threading.Thread(target=writer, args=(v,)) for v in versions] + \
              [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.get("race") in versions


def test_put_many(store):
    items = [(f"d/{i % 3}/c{i}", bytes([i]) * (i + 1)) for i in range(20)]
    store.put_many(items)
    for key, data in items:
        assert store.get(key) == data
    store.put_many([("d/0/c0", b"new"), ("d/1/c1", b"")])  # replaced atomically, empty allowed
    assert store.get("d/0/c0") == b"new" and store.get("d/1/c1") == b""
    with pytest.raises(InvalidInput):
        store.put_many([("ok/k", b"x"), ("bad//k", b"y")])


def test_read_only(store, tmp_path):
    store.put("k", b"v")
    ro = open_store(store.url if not store.url.startswith("file://") else store.url[7:], read_only=True)
    assert ro.get("k") == b"v"
    with pytest.raises(ReadOnly):
        ro.put("k2", b"x")
    with pytest.raises(ReadOnly):
        ro.delete("k")


def test_local_put_leaves_no_temp_files(tmp_path):
    store = open_store(str(tmp_path / "s"), create=True)
    store.put("a/b", b"x" * 1000)
    assert not [p for p in (tmp_path / "s" / "a").iterdir() if p.name.startswith(TMP_PREFIX)]
    # a temp file left by a crash is never listed
    (tmp_path / "s" / "a" / f"{TMP_PREFIX}dead").write_bytes(b"partial")
    assert [o.key for o in store.list("a/")] == ["a/b"]


def test_local_missing_root_is_an_error(tmp_path):
    with pytest.raises(NotFound):
        open_store(str(tmp_path / "does-not-exist"))


def test_local_delete_prunes_empty_dirs(tmp_path):
    store = open_store(str(tmp_path / "s"), create=True)
    store.put("x/y/z", b"1")
    store.delete("x/y/z")
    assert not os.path.exists(tmp_path / "s" / "x")


def test_local_put_survives_a_directory_pruned_under_its_mkdir(tmp_path, monkeypatch):
    """Parallel temp files of one batch share a new directory: one stage's mkdir can see
    EEXIST and then find the directory gone (another stage's failure pruned it), which
    pathlib reports as FileExistsError. The stage makes the directory again instead of
    failing the batch with a misleading "File exists" (seen on CI on a full disk, where
    the real error was ENOSPC)."""
    store = open_store(str(tmp_path / "s"), create=True)
    real_mkdir = os.mkdir
    raced = []

    def mkdir_losing_a_race(path, mode=0o777):
        if not raced and os.fspath(path).endswith("new"):
            raced.append(path)
            raise FileExistsError(17, "File exists", os.fspath(path))
        return real_mkdir(path, mode)

    monkeypatch.setattr(os, "mkdir", mkdir_losing_a_race)
    store.put_many([("new/a", b"1"), ("new/b", b"2")])
    assert raced and store.get("new/a") == b"1" and store.get("new/b") == b"2"


def _records(blob: bytes) -> set[bytes]:
    return set(r for r in blob.split(b"\0") if r)


def test_bulk_listing_records(store):
    prefixes = [f"db/u/d/{i:03d}/" for i in range(20)]  # enough for the local backend's find path
    for i, p in enumerate(prefixes):
        store.put(p + ".dataset.json", b"{}")
        for j in range(i % 4):
            store.put(f"{p}{j}_{i}", b"x" * (j + 10))
    store.put("db/u/d/000/sub/deeper", b"not a direct child")
    rec = store.list_records(prefixes)
    assert set(rec) == set(prefixes)
    for i, p in enumerate(prefixes):
        want = {b"2_.dataset.json"} | {f"{j + 10}_{j}_{i}".encode() for j in range(i % 4)}
        assert _records(rec[p]) == want, p


def test_read_into(store):
    store.put("r", bytes(range(100)))
    buf = bytearray(10)
    assert store.read_into("r", 95, memoryview(buf)) == 5 and bytes(buf[:5]) == bytes(range(95, 100))
    with pytest.raises(NotFound):
        store.read_into("missing", 0, memoryview(buf))


def test_conditional_writes(store):
    from polyfs.errors import PreconditionFailed

    t1 = store.put_if("meta/x.json", b'{"v": 1}', None)
    with pytest.raises(PreconditionFailed):
        store.put_if("meta/x.json", b'{"v": 9}', None)  # create-only, and it exists
    data, tag = store.get_tagged("meta/x.json")
    assert data == b'{"v": 1}' and tag == t1
    t2 = store.put_if("meta/x.json", b'{"v": 2}', tag)
    with pytest.raises(PreconditionFailed):
        store.put_if("meta/x.json", b'{"v": 3}', tag)  # a stale tag loses
    assert store.get_tagged("meta/x.json") == (b'{"v": 2}', t2)
    with pytest.raises(NotFound):
        store.get_tagged("meta/none.json")
    with pytest.raises(PreconditionFailed):
        store.put_if("meta/none.json", b"{}", t2)  # a tag for an object that is not there
    assert not store.exists("meta/none.json")


def test_concurrent_conditional_increments_lose_nothing(store):
    """Read, change, write-if-unchanged, retry on a lost race: every increment lands."""
    from polyfs.errors import PreconditionFailed

    store.put_if("counter", b"0", None)

    def bump(n: int) -> None:
        for _ in range(n):
            while True:
                data, tag = store.get_tagged("counter")
                try:
                    store.put_if("counter", str(int(data) + 1).encode(), tag)
                    break
                except PreconditionFailed:
                    continue

    threads = [threading.Thread(target=bump, args=(15,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get("counter") == b"60"


def test_bulk_listing_records_of_more_than_a_page(store):
    """A dataset with more chunks than one listing page holds (S3 lists those in parallel
    key ranges): every child once, deeper keys and neighbours left out."""
    names = [f"{i}_{j}" for i in range(0, 130, 3) for j in range(60)] + [".dataset.json", "9", "1", "0_0_0"]
    store.put_many([(f"big/{n}", n.encode()) for n in names])
    store.put("big/sub/deep", b"x")
    store.put("bigger/0", b"y")
    got = store.list_records(["big/", "bigger/"])
    assert sorted(r for r in got["big/"].split(b"\0") if r) == sorted(f"{len(n)}_{n}".encode() for n in names)
    assert got["bigger/"] == b"1_0\0"
