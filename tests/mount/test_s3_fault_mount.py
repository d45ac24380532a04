"""A mount of an S3 store whose endpoint misbehaves (tests/s3faultproxy.py in front of moto).

With a share of requests failing in every way a network and an object store fail, ordinary
tools read every view right and write through the Zarr view durably; with the endpoint down,
a read gets EIO (never a hang, never wrong bytes), the log names the key, the daemon lives
on and serves again once the endpoint is back. ``POLYFS_S3_FAULT_ROUNDS`` (see
``scripts/s3_faults.py``) repeats the read/write round that many times.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import uuid

import h5py
import numpy as np
import pytest

from conftest import polyfs_cmd
from corpus import read_dataset
from polyfs.importers import import_source
from s3faultproxy import KINDS, FaultProxy

pytestmark = [pytest.mark.mount, pytest.mark.s3]

ROUNDS = int(os.environ.get("POLYFS_S3_FAULT_ROUNDS", "1"))
TIMEOUT, DEADLINE = 1.0, 30.0


def source(path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    want = {"vol": rng.integers(0, 60000, (40, 50, 30)).astype("<u2"),
            "grp/img": rng.random((70, 45)).astype("<f4")}
    with h5py.File(path, "w") as f:
        f.create_dataset("vol", data=want["vol"], chunks=(10, 25, 15), compression="gzip")
        f.create_dataset("grp/img", data=want["grp/img"], chunks=(16, 16))
    return want


@pytest.fixture
def s3_domain(s3_server, tmp_path):
    bucket = s3_server.create_bucket(f"flt-{uuid.uuid4().hex[:10]}")
    url = f"s3://{bucket}/store"
    want = source(tmp_path / "src.h5")
    import_source(str(tmp_path / "src.h5"), url, domain="/lab/run.h5", progress=False)
    return url, want


def through_proxy(monkeypatch, proxy: FaultProxy, deadline: float = DEADLINE) -> None:
    """The daemon started next talks to S3 through ``proxy``, with short limits."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("POLYFS_S3_TIMEOUT", str(TIMEOUT))
    monkeypatch.setenv("POLYFS_S3_DEADLINE", str(deadline))
    monkeypatch.setenv("POLYFS_S3_RETRIES", "40")


def read_hdf5_elsewhere(path, names: list[str], out) -> dict[str, np.ndarray]:
    """The datasets ``names`` of ``path`` read by h5py in a child process.

    The fault proxy runs in this process, and h5py holds the GIL through ``H5Fopen``
    and most HDF5 calls: read here, a FUSE read that needs the endpoint would stall the
    proxy's threads until the daemon's deadline passes. A user's h5py never shares a GIL
    with the object store.
    """
    script = ("import sys, h5py, numpy as np\n"
              "with h5py.File(sys.argv[1], 'r') as f:\n"
              "    np.savez(sys.argv[2], **{str(i): f[n][()] for i, n in enumerate(sys.argv[3:])})\n")
    res = subprocess.run([sys.executable, "-c", script, str(path), str(out), *names],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    with np.load(out) as z:
        return {n: z[str(i)] for i, n in enumerate(names)}


def test_every_view_reads_and_zarr_writes_right_under_s3_faults(s3_server, s3_domain, mount_store, monkeypatch,
                                                                 tmp_path):
    import tensorstore as ts
    import zarr

    url, want = s3_domain
    with FaultProxy(s3_server.endpoint, seed=11, hang=60) as proxy:
        through_proxy(monkeypatch, proxy)
        proxy.configure(rate=0.15, kinds=KINDS)
        m = mount_store(url, "cache_gb=0")  # every round's reads reach the endpoint
        written = {}
        for rnd in range(ROUNDS):
            zroot = zarr.open_group(str(m.path / "zarr/lab/run.zarr"), mode="a")
            for name, data in want.items():
                assert np.array_equal(zroot[name][...], data), name
                n5 = ts.open({"driver": "n5", "kvstore": {"driver": "file",
                                                         "path": str(m.path / "n5/lab/run.n5" / name)}}).result()
                assert np.array_equal(n5.read().result(), data.transpose()), name
            got = read_hdf5_elsewhere(m.path / "hdf5/lab/run.h5", list(want), tmp_path / f"h5-{rnd}.npz")
            for name, data in want.items():
                assert np.array_equal(got[name], data), name
            data = np.random.default_rng(rnd).integers(0, 1000, (48, 40)).astype("<i4")
            arr = zroot.create_array(f"written{rnd}", shape=data.shape, dtype=data.dtype, chunks=(16, 8),
                                     shards=(32, 16))
            arr[:] = data
            written[f"written{rnd}"] = data
        print(f"\nS3 faults injected: {proxy.injected} of {proxy.requests} requests, {dict(proxy.counts)}")
        assert proxy.injected > 0
        proxy.up()
    # Straight to the endpoint: what the tools were told was written is in the store.
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    cat = Catalog(open_store(url, read_only=True))
    dom = cat.load("/lab/run.h5")
    for name, data in written.items():
        assert np.array_equal(read_dataset(cat, dom.resolve(name)), data), name
    res = subprocess.run(polyfs_cmd("check", "--deep", url), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("kind", ["503", "timeout"])
def test_a_down_endpoint_gives_eio_and_the_daemon_serves_again_when_it_is_back(
        s3_server, s3_domain, mount_store, monkeypatch, kind):
    url, want = s3_domain
    with FaultProxy(s3_server.endpoint, seed=5, hang=120) as proxy:
        through_proxy(monkeypatch, proxy, deadline=3.0)
        m = mount_store(url)
        block = m.path / "n5/lab/run.n5/vol/1/1/1"
        os.stat(block)  # laid out while the endpoint is up: what fails next is the chunk's GET
        proxy.down(kind)
        t0 = time.monotonic()
        with pytest.raises(OSError) as err:
            with open(block, "rb") as f:
                f.read()
        assert err.value.errno == errno.EIO
        assert time.monotonic() - t0 < 60, "a read outlived every deadline"
        log = m.log_text()
        assert any("S3 GET" in line and "/d/" in line and "failed" in line for line in log.splitlines()), log[-2000:]
        os.kill(m.daemon_pid(), 0)  # still alive
        proxy.up()
        with open(block, "rb") as f:
            got = f.read()
        assert len(got) > 16
        assert "Traceback" not in m.log_text()


def test_a_write_the_endpoint_refuses_is_refused_and_the_store_keeps_its_old_data(
        s3_server, s3_domain, mount_store, monkeypatch):
    import zarr

    url, want = s3_domain
    with FaultProxy(s3_server.endpoint, seed=9, hang=120) as proxy:
        through_proxy(monkeypatch, proxy, deadline=3.0)
        m = mount_store(url)
        arr = zarr.open_array(str(m.path / "zarr/lab/run.zarr/vol"), mode="r+")
        proxy.configure(rate=1.0, kinds=["503", "reset_after"], methods=["PUT"])
        with pytest.raises(OSError) as err:
            arr[:20] = 7
        assert err.value.errno == errno.EIO
        os.kill(m.daemon_pid(), 0)
        proxy.up()
        # The refused write is not half there: each chunk old or new, the metadata the old.
        fresh = zarr.open_array(str(m.path / "zarr/lab/run.zarr/vol"), mode="r")[...]
        for z, y, x in np.ndindex(4, 2, 2):
            sl = np.s_[z * 10:(z + 1) * 10, y * 25:(y + 1) * 25, x * 15:(x + 1) * 15]
            assert np.array_equal(fresh[sl], want["vol"][sl]) or (z < 2 and np.all(fresh[sl] == 7)), (z, y, x)
        arr[:20] = 7  # and the same write succeeds once the endpoint is back
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    res = subprocess.run(polyfs_cmd("check", "--deep", url), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
