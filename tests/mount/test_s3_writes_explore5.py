"""A store on S3 (moto) written through the views by ordinary tools, as the scale-out
use has it: new domains in folders from zarr-python, tensorstore (partial shards), h5py
and tifffile, read back through the other views and checked deep; removing a domain
costs a request per 1000 objects, not one per chunk; a chunk cache whose disk fills up
says so once and keeps caching the recent chunks; a missing bucket is said at once; two
daemons over one bucket write at once; a daemon killed mid-write keeps what tools were
told was written; bad input leaves the bucket as it was."""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid

import h5py
import numpy as np
import pytest
from conftest import polyfs_cmd
from s3faultproxy import FaultProxy

from polyfs.model.keys import is_chunk_key

pytestmark = [pytest.mark.mount, pytest.mark.s3]


def bucket_url(s3_server, tag: str) -> str:
    return f"s3://{s3_server.create_bucket(f'{tag}-{uuid.uuid4().hex[:10]}')}/store"


def objects(s3_server, url: str) -> dict[str, str]:
    """Every object of the store's bucket and the SHA-256 of its bytes."""
    import boto3

    bucket = url[len("s3://"):].split("/", 1)[0]
    c = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1",
                     aws_access_key_id="polyfs-test", aws_secret_access_key="polyfs-test")
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            out[o["Key"]] = hashlib.sha256(c.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()).hexdigest()
    return out


def check_deep(url: str) -> None:
    res = subprocess.run(polyfs_cmd("check", "--deep", url), capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0 and "consistent" in res.stdout, res.stdout + res.stderr


def sharded_spec(path, shape, shard, inner) -> dict:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)},
            "metadata": {"shape": list(shape), "data_type": "uint16",
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard)}},
                         "codecs": [{"name": "sharding_indexed", "configuration": {
                             "chunk_shape": list(inner),
                             "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                        {"name": "zstd", "configuration": {"level": 1}}],
                             "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                              {"name": "crc32c"}]}}]}}


def test_new_domains_in_folders_written_by_tools_read_back_in_every_view(s3_server, mount_store, tmp_path):
    import tensorstore as ts
    import tifffile
    import zarr

    url = bucket_url(s3_server, "w5")
    m = mount_store(url)
    rng = np.random.default_rng(0)
    os.makedirs(m.path / "zarr/proj/run1")  # HSDS folders above the domains
    g = zarr.open_group(str(m.path / "zarr/proj/run1/d.zarr"), mode="a")
    zp = rng.integers(0, 1000, (50, 45)).astype("<i4")
    g.create_array("zp", shape=zp.shape, chunks=(10, 10), shards=(20, 30), dtype="<i4")[:] = zp
    vol = rng.integers(0, 4000, (32, 32, 16)).astype("<u2")
    t = ts.open(sharded_spec(m.path / "zarr/proj/run1/d.zarr/ts", vol.shape, (16, 16, 16), (8, 8, 8)),
                create=True).result()
    for i in range(0, 32, 4):  # slabs that are partial shards, then an aligned shard
        t[i:i + 4].write(vol[i:i + 4]).result()
    vol[16:, 16:] += 1
    t[16:, 16:].write(vol[16:, 16:]).result()
    with h5py.File(m.path / "hdf5/proj/run1/h.h5", "w") as f:
        f.create_dataset("x", data=np.arange(200, dtype="i2").reshape(10, 20), chunks=(5, 10), maxshape=(None, 20))
    with h5py.File(m.path / "hdf5/proj/run1/h.h5", "r+") as f:
        f["x"].resize((12, 20))
        f["x"][10:] = 7
        f.attrs["title"] = "edited"
        f.create_dataset("z", data=np.ones((3, 3), "u1"))
    os.mkdir(m.path / "tiff/proj/imgs")
    img = np.arange(40 * 24, dtype="u2").reshape(40, 24)
    tifffile.imwrite(m.path / "tiff/proj/imgs/img.tif", img, tile=(16, 16), compression="zlib")

    with h5py.File(m.path / "hdf5/proj/run1/d.h5") as f:
        assert np.array_equal(f["zp"][...], zp) and np.array_equal(f["ts"][...], vol)
    n5 = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5/proj/run1/d.n5/ts")}}
                 ).result()
    assert np.array_equal(n5.read().result(), vol.transpose())
    assert np.array_equal(tifffile.imread(m.path / "tiff/proj/run1/d/zp.tif"), zp)
    x = zarr.open_group(str(m.path / "zarr/proj/run1/h.zarr"), mode="r")
    assert x.attrs["title"] == "edited" and x["x"].shape == (12, 20) and (x["x"][10:] == 7).all()
    assert np.array_equal(zarr.open_array(str(m.path / "zarr/proj/imgs.zarr/img"), mode="r")[...], img)
    m.stop()
    check_deep(url)


def test_removing_a_domain_on_s3_costs_a_request_per_thousand_objects(s3_server, mount_store, monkeypatch):
    """Before: one DeleteObject round trip per chunk (a domain of 100,000 chunks was
    100,000 requests); now one listing and a DeleteObjects per 1000."""
    import zarr

    url = bucket_url(s3_server, "rm5")
    with FaultProxy(s3_server.endpoint) as proxy:  # no faults: it counts requests
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        m = mount_store(url)
        g = zarr.open_group(str(m.path / "zarr/gone.zarr"), mode="a")
        g.create_array("a", shape=(200, 200), chunks=(10, 10), dtype="u1", compressors=None)[:] = 1  # 400 chunks
        zarr.open_group(str(m.path / "zarr/kept.zarr"), mode="a").create_array(
            "b", shape=(4,), chunks=(2,), dtype="u1")[:] = 2
        before = proxy.requests
        os.unlink(m.path / "hdf5/gone.h5")  # the whole domain, at once
        spent = proxy.requests - before
        assert not (m.path / "zarr/gone.zarr").exists()
        assert spent < 100, f"removing a domain of 400 chunks took {spent} requests"
        m.stop()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    left = objects(s3_server, url)
    check_deep(url)
    chunks = [k for k in left if is_chunk_key(k.split("/", 1)[1])]
    assert len(chunks) == 2, sorted(left)  # kept.zarr's two chunks, nothing of gone.zarr


def test_s3_delete_prefix_is_bulk(s3_server, monkeypatch):
    from polyfs.store import s3 as s3mod
    from polyfs.store.s3 import S3Store

    url = bucket_url(s3_server, "bulk5")
    s = S3Store(url)
    s.put_many([(f"p/{i:04d}", b"x") for i in range(1100)] + [("q/kept", b"y")])
    real = s3mod._obstore()
    calls = []

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def delete(self, store, paths):
            calls.append(paths)
            return real.delete(store, paths)

    monkeypatch.setattr(s3mod, "_obstore", lambda: Counting())
    assert s.delete_prefix("p/") == 1100
    assert len(calls) == 2, len(calls)
    assert [o.key for o in s.list("")] == ["q/kept"]
    s.delete_many(["q/kept", "q/absent"])  # an absent key is no error
    assert list(s.list("")) == []


def test_bulk_deletes_through_the_chunk_cache_drop_its_entries(s3_server, tmp_path):
    from polyfs.errors import NotFound
    from polyfs.model import ids, keys
    from polyfs.store.chunkcache import ChunkCacheStore
    from polyfs.store.s3 import S3Store

    c = ChunkCacheStore(S3Store(bucket_url(s3_server, "cdel5")), tmp_path / "cache", ttl=3600)
    key = keys.chunk_key(ids.new_id("d", ids.new_root_id()), (0, 0))
    c.put(key, b"chunk")
    assert c.get(key) == b"chunk" and c.entry_count == 1
    c.delete_many([key])
    assert c.entry_count == 0
    with pytest.raises(NotFound):
        c.get(key)


def test_a_full_cache_disk_is_said_once_and_recent_chunks_stay_cached(tmp_path, caplog, monkeypatch):
    """Before: each chunk the full disk refused logged a warning (thousands a minute), and
    the oldest chunks stayed cached while no new one was. Now the cache keeps what the
    disk holds, evicting the least recently used, with one line."""
    from polyfs.model import ids, keys
    from polyfs.store import chunkcache
    from polyfs.store.chunkcache import ChunkCacheStore
    from polyfs.store.memory import MemoryStore

    disk_limit = 64 << 10  # the disk under the cache holds 64 KiB of files

    real_write = chunkcache._write_all

    def small_disk(fd, data):
        held = sum(f.stat().st_size for f in (tmp_path / "cache").rglob("*") if f.is_file())
        if held + len(data) > disk_limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(fd, data)

    monkeypatch.setattr(chunkcache, "_write_all", small_disk)
    ds = ids.new_id("d", ids.new_root_id())
    inner = MemoryStore(name=uuid.uuid4().hex)
    blobs = {keys.chunk_key(ds, (i,)): os.urandom(8000) for i in range(40)}
    for k, v in blobs.items():
        inner.put(k, v)
    c = ChunkCacheStore(inner, tmp_path / "cache", cache_bytes=1 << 30, ttl=3600)
    caplog.set_level(logging.DEBUG, logger="polyfs.store.chunkcache")
    for k, v in blobs.items():
        assert c.get(k) == v
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "full" in warnings[0].getMessage()
    assert c.capacity <= disk_limit
    hits = c.stats.hits
    last = list(blobs)[-4:]
    for k in last:  # the most recent chunks are the cached ones
        assert c.get(k) == blobs[k]
    assert c.stats.hits == hits + len(last)


def test_bad_input_on_s3_leaves_every_object_as_it_was(s3_server, mount_store):
    import zarr

    url = bucket_url(s3_server, "bad5")
    m = mount_store(url)
    d = m.path / "zarr/d.zarr"
    g = zarr.open_group(str(d), mode="a")
    g.create_array("sh", shape=(32, 32), chunks=(8, 8), shards=(16, 16), dtype="i2")[:] = 5
    g.create_array("pl", shape=(16, 16), chunks=(8, 8), dtype="i2")[:] = 1
    os.mkdir(d / "new")  # a group: not part of the bad input below
    before = objects(s3_server, url)
    log_at = len(m.log_text().splitlines())
    shard = (d / "sh/c/0/1").read_bytes()
    bad = {"sh/c/0/0": os.urandom(3000),  # garbage shard
           "sh/c/0/1": shard[:10] + os.urandom(30) + shard[40:],  # an inner chunk that does not decode
           "sh/zarr.json": b"not json {",
           "zarr.json": b"{bad",
           "new/zarr.json": b"nope",
           "pl/c/0/0": os.urandom(50),
           "pl/zarr.json": b'{"zarr_format": 3, "node_type": "array", "shape": "x"}'}
    for name, data in bad.items():
        with pytest.raises(OSError) as err, open(d / name, "wb") as f:
            f.write(data)
        assert err.value.errno == errno.EINVAL, name
    lines = m.log_text().splitlines()[log_at:]
    for name in bad:
        said = [ln for ln in lines if f"zarr/d.zarr/{name}:" in ln]
        assert len(said) == 1, (name, said)
    assert (zarr.open_array(str(d / "sh"), mode="r")[...] == 5).all()
    assert (d / "sh/c/0/1").read_bytes() == shard
    m.stop()
    assert objects(s3_server, url) == before
    check_deep(url)


def test_a_missing_bucket_is_said_at_once_by_name(s3_server, tmp_path):
    """Before: NoSuchBucket (HTTP 404) was retried for the whole deadline (14 s here, minutes
    on AWS) and reported as the first line of an XML body; a GET or PUT there said
    "no object". A 4xx reply is an answer, not a network fault."""
    url = f"s3://missing-{uuid.uuid4().hex[:10]}/store"
    mp = tmp_path / "mnt"
    mp.mkdir()
    # 40 retries: retrying the 404 would take about 90 s (backoff up to 5 s each), so the bound
    # below tells "at once" from "retried" even when a loaded machine starts Python slowly
    env = {**os.environ, "POLYFS_S3_RETRIES": "40"}
    for args in (("check", url), ("mount", url, str(mp), "--log-file", str(tmp_path / "log"))):
        t0 = time.monotonic()
        res = subprocess.run(polyfs_cmd(*args), capture_output=True, text=True, timeout=120, check=False, env=env)
        took = time.monotonic() - t0
        assert res.returncode != 0
        assert f"bucket {url[5:].split('/')[0]!r} does not exist" in res.stderr, res.stderr
        assert "<?xml" not in res.stderr and took < 45, (took, res.stderr)

    from polyfs.errors import NotFound, StoreError
    from polyfs.store.s3 import S3Store

    s = S3Store(url)
    for op in (lambda: s.get("a/b"), lambda: s.put("a/b", b"1")):
        with pytest.raises(StoreError, match="does not exist"):
            op()
    with pytest.raises(NotFound):  # an absent object in a bucket that is there stays ENOENT
        S3Store(bucket_url(s3_server, "nf5")).get("a/b")


def test_two_daemons_over_one_bucket_write_at_once_and_see_both(s3_server, mount_store):
    import zarr

    url = bucket_url(s3_server, "two5")
    hosts = [mount_store(url, "domain_ttl=1"), mount_store(url, "domain_ttl=1")]
    script = ("import sys, numpy as np, zarr\n"
              "g = zarr.open_group(sys.argv[1], mode='a')\n"
              "g.create_array('v', shape=(60, 40), chunks=(20, 20), shards=(40, 40), dtype='i4')[:] = "
              "np.full((60, 40), int(sys.argv[2]), 'i4')\n"
              "g.attrs['who'] = sys.argv[2]\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(h.path / f"zarr/{n}.zarr"), str(i + 1)])
             for i, (h, n) in enumerate(zip(hosts, "AB"))]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    time.sleep(2.5)  # domain_ttl: each host sees the other's new domain
    for h in hosts:
        for i, n in enumerate("AB"):
            g = zarr.open_group(str(h.path / f"zarr/{n}.zarr"), mode="r")
            assert g.attrs["who"] == str(i + 1) and (g["v"][...] == i + 1).all(), (h.path, n)
            with h5py.File(h.path / f"hdf5/{n}.h5") as f:
                assert (f["v"][...] == i + 1).all()
    for h in hosts:
        h.stop()
    check_deep(url)


def test_sigkill_in_a_tensorstore_write_keeps_what_was_acknowledged(s3_server, mount_store, tmp_path):
    import tensorstore as ts
    import zarr

    url = bucket_url(s3_server, "kill5")
    m = mount_store(url)
    zarr.open_group(str(m.path / "zarr/k.zarr"), mode="a")
    first = np.random.default_rng(1).integers(0, 4000, (16, 64, 64)).astype("<u2")
    t = ts.open(sharded_spec(m.path / "zarr/k.zarr/first", first.shape, (16, 64, 64), (8, 32, 32)),
                create=True).result()
    t.write(first).result()
    acked = tmp_path / "acked"
    script = ("import sys, json, numpy as np, tensorstore as ts\n"
              "t = ts.open(json.loads(sys.argv[1]), create=True).result()\n"
              "for i in range(0, 4096, 4):\n"
              "    t[i:i + 4].write(np.full((4, 64, 64), i // 4 + 1, '<u2')).result()\n"
              "    open(sys.argv[2], 'a').write(f'{i}\\n')\n")
    spec = sharded_spec(m.path / "zarr/k.zarr/second", (4096, 64, 64), (16, 64, 64), (4, 32, 32))
    child = subprocess.Popen([sys.executable, "-c", script, json.dumps(spec), str(acked)],
                             stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while (not acked.exists() or len(acked.read_text().split()) < 12) and time.time() < deadline:
        time.sleep(0.05)
    os.kill(m.daemon_pid(), signal.SIGKILL)
    child.wait(timeout=60)
    subprocess.run(["fusermount3", "-u", "-z", str(m.path)], capture_output=True, timeout=30, check=False)
    done = [int(x) for x in acked.read_text().split()]
    assert len(done) >= 12
    m2 = mount_store(url)
    g = zarr.open_group(str(m2.path / "zarr/k.zarr"), mode="r")
    assert np.array_equal(g["first"][...], first)
    second = g["second"]
    for i in done:
        assert (second[i:i + 4] == i // 4 + 1).all(), i
    m2.stop()
    check_deep(url)


@pytest.mark.parametrize(("status", "code", "again"), [
    (404, "NoSuchBucket", False), (403, "AccessDenied", False), (400, "InvalidRequest", False),
    (400, "IncompleteBody", True), (400, "RequestTimeout", True), (429, "SlowDown", True), (503, "SlowDown", True),
    (500, "InternalError", True)])
def test_which_s3_replies_are_tried_again(s3_server, status, code, again):
    from polyfs.store.s3 import S3Store

    s = S3Store(bucket_url(s3_server, "cls5"))
    exc = RuntimeError(f"Generic S3 error: Error performing PUT in 3ms - Server returned non-2xx status code: "
                       f"{status} X: <?xml version=\"1.0\"?>\n<Error><Code>{code}</Code></Error>")
    assert s._transient(exc) is again
    if not again:
        assert code in str(s._err("k/x", exc)) and "<?xml" not in str(s._err("k/x", exc))


def test_s3_delete_prefix_deletes_page_by_page(s3_server, monkeypatch):
    """A dataset of a million chunks is not held as a million keys before the first delete."""
    from polyfs.store import s3 as s3mod
    from polyfs.store.s3 import S3Store

    s = S3Store(bucket_url(s3_server, "page5"))
    s.put_many([(f"p/{i:04d}", b"x") for i in range(1500)] + [("pq", b"y")])
    real = s3mod._obstore()
    events = []

    class Recording:
        def __getattr__(self, name):
            return getattr(real, name)

        def list(self, store, prefix=None, **kw):
            for batch in real.list(store, prefix, **kw):
                events.append(("page", len(batch)))
                yield batch

        def delete(self, store, paths):
            events.append(("delete", len(paths)))
            return real.delete(store, paths)

    monkeypatch.setattr(s3mod, "_obstore", lambda: Recording())
    assert s.delete_prefix("p/") == 1500
    assert events == [("page", 1000), ("delete", 1000), ("page", 500), ("delete", 500)], events
    assert [o.key for o in s.list("")] == ["pq"]


def test_s3_delete_prefix_under_faults_deletes_and_counts_every_object_once(s3_server, monkeypatch):
    from polyfs.store.s3 import S3Store

    url = bucket_url(s3_server, "fdel5")
    S3Store(url).put_many([(f"p/{i:04d}", b"x") for i in range(1200)])
    monkeypatch.setenv("POLYFS_S3_TIMEOUT", "2")
    monkeypatch.setenv("POLYFS_S3_RETRIES", "40")
    with FaultProxy(s3_server.endpoint, seed=3, rate=0.5, kinds=("reset_after", "500")) as proxy:
        proxy.configure(methods=["POST"])  # DeleteObjects: applied, then the reply lost (or refused)
        assert S3Store(url, endpoint=proxy.endpoint).delete_prefix("p/") == 1200
        assert proxy.injected > 0
    assert list(S3Store(url).list("")) == []
