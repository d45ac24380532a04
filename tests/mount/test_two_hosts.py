"""Two daemons (two processes, as on two hosts) mounting one S3 bucket (moto).

Both change the same groups at once through their Zarr views: attribute edits and array
creations, 200 in all. Metadata writes are conditional on the version each daemon read,
so none is lost; and what one daemon writes reads back through every view of the other
within ``domain_ttl``.
"""
from __future__ import annotations

import errno
import threading
import time
import traceback
import uuid

import numpy as np
import pytest

from polyfs.model.catalog import Catalog
from polyfs.store import open_store

pytestmark = [pytest.mark.mount, pytest.mark.s3]

PER_HOST = 50  # attribute edits and array creations each: 4 x 50 = 200 changes
TTL = 1.0


def test_two_daemons_on_one_bucket_lose_no_change_and_see_each_other(s3_server, mount_store, tmp_path):
    import tensorstore as ts
    import tifffile
    import h5py
    import zarr

    bucket = s3_server.create_bucket(f"hosts-{uuid.uuid4().hex[:10]}")
    url = f"s3://{bucket}/store"
    a = mount_store(url, f"domain_ttl={TTL}", f"cache_dir={tmp_path / 'cache-a'}")
    b = mount_store(url, f"domain_ttl={TTL}", f"cache_dir={tmp_path / 'cache-b'}")
    (a.path / "zarr/lab.zarr").mkdir()
    root = zarr.open_group(str(a.path / "zarr/lab.zarr"), mode="a")
    root.create_group("ga")
    root.create_group("gb")
    deadline = time.monotonic() + 30
    while not (b.path / "zarr/lab.zarr/gb/zarr.json").exists():  # B sees A's domain within its ttl
        assert time.monotonic() < deadline, "B never saw the domain A made"
        time.sleep(0.2)
    errors: list[BaseException] = []

    def host(mnt, me: str) -> None:
        """Attribute edits on this host's own group; arrays created in both groups, so
        each group's JSON is changed by both daemons at once."""
        try:
            for k in range(PER_HOST):
                g = zarr.open_group(str(mnt.path / f"zarr/lab.zarr/g{me}"), mode="a")
                g.attrs[f"{me}_{k}"] = k
                other = "b" if me == "a" else "a"
                parent = zarr.open_group(str(mnt.path / f"zarr/lab.zarr/g{other if k % 2 else me}"), mode="a")
                parent.create_array(f"{me}{k}", shape=(4, 4), dtype="u1", chunks=(4, 4))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=host, args=(a, "a")), threading.Thread(target=host, args=(b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    assert not errors, "".join(traceback.format_exception(errors[0]))
    assert not any(t.is_alive() for t in threads), "a host hung"

    cat = Catalog(open_store(url, read_only=True))
    model = cat.load("/lab.h5")
    ga, gb = model.resolve("ga"), model.resolve("gb")
    assert sorted(ga.attributes) == sorted(f"a_{k}" for k in range(PER_HOST))
    assert sorted(gb.attributes) == sorted(f"b_{k}" for k in range(PER_HOST))
    made = set(ga.links) | set(gb.links)
    assert made == {f"{me}{k}" for me in "ab" for k in range(PER_HOST)}
    assert "Traceback" not in a.log_text() + b.log_text()

    # Data written through A reads back through every view of B within domain_ttl.
    data = np.arange(40 * 30, dtype="<u2").reshape(40, 30)
    arr = root.create_array("shared", shape=data.shape, dtype=data.dtype, chunks=(16, 16))
    arr[:] = data
    deadline = time.monotonic() + 30
    while True:
        try:
            got = zarr.open_array(str(b.path / "zarr/lab.zarr/shared"), mode="r")[...]
            if np.array_equal(got, data):
                break
        except (FileNotFoundError, KeyError, ValueError, zarr.errors.BaseZarrError):
            pass
        assert time.monotonic() < deadline, "B never saw what A wrote"
        time.sleep(0.2)
    n5 = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(b.path / "n5/lab.n5/shared")}}).result()
    assert np.array_equal(n5.read().result(), data.T)
    with h5py.File(b.path / "hdf5/lab.h5", "r") as f:
        assert np.array_equal(f["shared"][()], data)
        assert f["ga"].attrs["a_3"] == 3
    assert np.array_equal(tifffile.imread(b.path / "tiff/lab/shared.tif"), data)

    # ... and a rewrite of existing chunks through B shows through A.
    zarr.open_array(str(b.path / "zarr/lab.zarr/shared"), mode="r+")[:16, :16] = 7
    data[:16, :16] = 7
    deadline = time.monotonic() + 30
    while True:
        try:
            if np.array_equal(zarr.open_array(str(a.path / "zarr/lab.zarr/shared"), mode="r")[...], data):
                break
        except OSError as exc:  # a file laid out before the rewrite: EIO, never a mix (re-open)
            assert exc.errno == errno.EIO, exc
        assert time.monotonic() < deadline, "A never saw B's rewrite"
        time.sleep(0.2)
