"""``polyfs check --deep`` is clean after ordinary writes through a real mount.

Exploratory testers found it exiting 1 (the data right in every view, polyfs's derived data
stale): a dataset made through ``tiff/`` or in an h5py ``r+`` session had a persisted chunk
index out of date at once, and shrinking gzip data left CRC32 entries of deleted chunks, or
(shrink then grow in 2-D) entries keyed to the wrong chunks. The unit tests are in
tests/unit/test_derived_after_writes.py; this runs the same writes through the kernel with
h5py, zarr-python and tifffile.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from conftest import polyfs_cmd

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)


def polyfs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(polyfs_cmd(*args), capture_output=True, text=True, env=ENV, timeout=300)


def test_check_deep_is_clean_after_writes_through_hdf5_zarr_and_tiff(mount_store, tmp_path):
    store = tmp_path / "store"
    assert polyfs("create", str(store), "/a.h5").returncode == 0
    m = mount_store(str(store))
    a, b = m.path / "hdf5" / "a.h5", m.path / "hdf5" / "b.h5"
    grid = np.arange(100, dtype="i4").reshape(10, 10) + 1
    with h5py.File(b, "w") as f:  # a new domain
        f.create_dataset("d", data=grid, maxshape=(None, None), chunks=(4, 4), compression="gzip", fillvalue=-1)
    with h5py.File(a, "r+") as f:  # a dataset added to an existing domain
        f.create_dataset("r", data=np.arange(23), maxshape=(None,), chunks=(4,), compression="gzip")
    with h5py.File(b, "r+") as f:
        f["d"].resize((5, 6))  # HDF5 rewrites the edge chunks
    with h5py.File(b, "r+") as f:
        f["d"].resize((12, 12))  # and every chunk is renumbered
        f["d"][10:12, 10:12] = 7
    with h5py.File(a, "r+") as f:
        f["r"].resize((6,))
    z = zarr.create_array(str(m.path / "zarr" / "a.zarr" / "z"), shape=(64, 64), chunks=(16, 16), dtype="u2",
                          compressors=zarr.codecs.GzipCodec())
    z[:] = 1
    z.resize((16, 40))  # deletes the chunks outside
    with open(m.path / "tiff" / "a" / "t.tif", "wb") as f:  # a new dataset through tiff/
        tifffile.imwrite(f, np.ones((64, 64), "u2"), tile=(32, 32), compression="zlib")

    with h5py.File(b, "r") as f:  # the data is right (what the testers saw too)
        want = np.full((12, 12), -1, "i4")
        want[:5, :6] = grid[:5, :6]
        want[10:12, 10:12] = 7
        np.testing.assert_array_equal(f["d"][...], want)
    m.stop()

    res = polyfs("check", "--deep", str(store))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "problem" not in res.stdout and "chunk index" not in res.stdout, res.stdout
