"""A store that lives on S3 (a local moto endpoint) mounts, and its Zarr and N5
views read equal to the source."""
from __future__ import annotations

import uuid

import h5py
import hdf5plugin  # noqa: F401 - registers the HDF5 filters h5py needs
import numpy as np
import pytest

from polyfs.importers import import_source

pytestmark = [pytest.mark.mount, pytest.mark.s3]


def source_file(path):
    with h5py.File(path, "w") as f:
        f.create_dataset("grp/gzip", data=np.arange(50 * 37, dtype="<u2").reshape(50, 37), chunks=(16, 16),
                         compression="gzip")
        f.create_dataset("zstd_be", data=np.linspace(0, 1, 30 * 20 * 10, dtype=">f4").reshape(30, 20, 10),
                         chunks=(8, 8, 8), **hdf5plugin.Zstd(clevel=3))
        f.create_dataset("raw", data=np.arange(100, dtype="<i4"), chunks=(32,))
    return path


def test_s3_store_mounts_and_serves_zarr_and_n5(s3_server, mount_store, tmp_path):
    import tensorstore as ts
    import zarr

    bucket = s3_server.create_bucket(f"mnt-{uuid.uuid4().hex[:10]}")
    url = f"s3://{bucket}/arrays"
    src = source_file(tmp_path / "src.h5")
    import_source(str(src), url, domain="/home/alice/brain.h5", progress=False)
    m = mount_store(url)
    with h5py.File(src) as f:
        expected = {name: f[name][...] for name in ("grp/gzip", "zstd_be", "raw")}
    root = zarr.open_group(str(m.path / "zarr/home/alice/brain.zarr"), mode="r")
    for name, want in expected.items():
        assert np.array_equal(root[name][...], want), name
        n5 = ts.open({"driver": "n5", "kvstore": {"driver": "file",
                                                 "path": str(m.path / "n5/home/alice/brain.n5" / name)}}).result()
        assert np.array_equal(n5.read().result(), want.transpose()), name  # N5 lists dims fastest first
