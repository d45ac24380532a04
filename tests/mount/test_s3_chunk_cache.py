"""A mount of an S3 store (moto behind a counting proxy) keeps chunk objects in its local
chunk cache: a second read, through another view, after the kernel dropped its pages or
after a remount, costs no chunk request; a chunk another host rewrites is seen once
``domain_ttl`` has passed."""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

from polyfs.importers import import_source
from polyfs.store import open_store
from s3count import CountingProxy
from support import drop_page_cache

pytestmark = [pytest.mark.mount, pytest.mark.s3]

NAMES = ("gzip", "zstd_be", "raw")


def source_file(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("gzip", data=np.arange(50 * 37, dtype="<u2").reshape(50, 37), chunks=(16, 16),
                         compression="gzip")
        f.create_dataset("zstd_be", data=np.linspace(0, 1, 30 * 20 * 10, dtype=">f4").reshape(30, 20, 10),
                         chunks=(8, 8, 8), **hdf5plugin.Zstd(clevel=3))
        f.create_dataset("raw", data=np.arange(100, dtype="<i4"), chunks=(32,))
    return path


def imported(s3_server, tmp_path: Path, codec: str = "deflate") -> tuple[str, dict[str, np.ndarray]]:
    bucket = s3_server.create_bucket(f"cache-{uuid.uuid4().hex[:10]}")
    url = f"s3://{bucket}/arrays"
    src = source_file(tmp_path / "src.h5")
    import_source(str(src), url, domain="/c.h5", codec=codec, progress=False)
    with h5py.File(src) as f:
        return url, {name: f[name][...] for name in NAMES}


def read_zarr(mnt: Path) -> dict[str, np.ndarray]:
    import zarr

    root = zarr.open_group(str(mnt / "zarr/c.zarr"), mode="r")
    return {name: root[name][...] for name in NAMES}


def read_n5(mnt: Path) -> dict[str, np.ndarray]:
    import tensorstore as ts

    out = {}
    for name in NAMES:
        arr = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(mnt / "n5/c.n5" / name)}}).result()
        out[name] = arr.read().result().transpose()  # N5 lists dims fastest first
    return out


def same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(got[n], want[n]) for n in NAMES)


def test_second_reads_come_from_the_chunk_cache(s3_server, mount_store, tmp_path, monkeypatch):
    url, want = imported(s3_server, tmp_path)
    cache_dir = tmp_path / "cache"
    with CountingProxy(s3_server.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)  # the daemons talk through the proxy
        m = mount_store(url, f"cache_dir={cache_dir}", "domain_ttl=3600")
        assert same(read_zarr(m.path), want)
        first = proxy.total(kind="chunk")
        assert first > 0 and proxy.total(kind="chunk", status=200) == first
        assert any(p.is_file() for p in cache_dir.glob("*/??/*"))
        assert same(read_n5(m.path), want)  # the same chunks through another view
        drop_page_cache(m.path / "zarr")
        assert same(read_zarr(m.path), want)
        assert proxy.total(kind="chunk") == first, proxy.snapshot()
        m.stop()
        m = mount_store(url, f"cache_dir={cache_dir}", "domain_ttl=3600")  # the cache outlives the mount
        assert same(read_zarr(m.path), want)
        assert proxy.total(kind="chunk") == first, proxy.snapshot()
        assert "chunk cache for" in m.log_text()
        m.stop()
        m = mount_store(url, "cache_gb=0")  # control: without the cache every read is a request
        assert same(read_zarr(m.path), want)
        assert proxy.total(kind="chunk") >= 2 * first
        m.stop()


def test_a_chunk_another_host_rewrites_is_seen_within_domain_ttl(s3_server, mount_store, tmp_path):
    url, want = imported(s3_server, tmp_path, codec="none")  # "raw" stored as it is, little-endian
    m = mount_store(url, f"cache_dir={tmp_path / 'cache'}", "domain_ttl=1")
    assert same(read_zarr(m.path), want)
    other = open_store(url)  # another host, writing to the bucket directly
    dataset_key = next(o.key for o in other.list("db/") if o.key.endswith("/.dataset.json")
                       and json.loads(other.get(o.key))["shape"]["dims"] == [100])
    chunk_key = dataset_key.rsplit("/", 1)[0] + "/1"
    changed = np.arange(100, dtype="<i4")
    changed[32:64] = -7
    other.put(chunk_key, changed[32:64].tobytes())  # same size: the layout holds
    time.sleep(1.5)  # > domain_ttl: the cached copy must be checked again
    drop_page_cache(m.path / "zarr")
    import zarr

    got = zarr.open_group(str(m.path / "zarr/c.zarr"), mode="r")["raw"][...]
    assert np.array_equal(got, changed)
