"""Tier 3: directories above domains used as on a disk, with the shell and ordinary tools.

``mkdir -p`` then ``cp`` of an HDF5 file into ``hdf5/``; ``cp -r`` of a local directory
holding Zarr hierarchies into ``zarr/``; ``rm -rf`` of a directory of domains (it used to
remove the domains and then fail with ``EPERM`` on the directories); read back by h5py,
zarr-python and tensorstore through other views, and ``polyfs check --deep`` clean.
"""
from __future__ import annotations

import shutil
import subprocess

import h5py
import numpy as np
import pytest
from support import deep_check

pytestmark = pytest.mark.mount


def test_mkdir_p_then_cp_of_an_hdf5_file(mount_store, tmp_path):
    import zarr

    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    src = tmp_path / "a.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.arange(120, dtype="<i4").reshape(10, 12), chunks=(5, 6), compression="gzip")
        f.attrs["who"] = "h5py"
    subprocess.run(["mkdir", "-p", str(m.path / "hdf5/proj/run1")], check=True)
    subprocess.run(["cp", str(src), str(m.path / "hdf5/proj/run1/")], check=True)
    for view in ("zarr", "n5", "tiff", "polyglot"):
        assert (m.path / view / "proj/run1").is_dir(), view
    with h5py.File(m.path / "hdf5/proj/run1/a.h5", "r") as f:
        assert np.array_equal(f["x"][()], np.arange(120, dtype="<i4").reshape(10, 12))
        assert f.attrs["who"] == "h5py"
    z = zarr.open_group(str(m.path / "zarr/proj/run1/a.zarr"), mode="r")
    assert np.array_equal(z["x"][...], np.arange(120, dtype="<i4").reshape(10, 12))
    deep_check(store)


def test_cp_r_of_a_directory_of_zarr_hierarchies_then_rm_rf(mount_store, tmp_path):
    import tensorstore as ts
    import zarr

    local = tmp_path / "campaign"
    want = {}
    for name in ("a", "b"):
        g = zarr.open_group(str(local / f"{name}.zarr"), mode="w")
        arr = g.create_array("v", shape=(20, 30), chunks=(8, 8), shards=(16, 16), dtype="<u2")
        want[name] = (np.arange(600, dtype="<u2").reshape(20, 30) * (2 if name == "b" else 1))
        arr[:] = want[name]
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    subprocess.run(["cp", "-r", str(local), str(m.path / "zarr/")], check=True)
    assert sorted(p.name for p in (m.path / "zarr/campaign").iterdir()) == ["a.zarr", "b.zarr"]
    assert sorted(p.name for p in (m.path / "hdf5/campaign").iterdir()) == ["a.h5", "b.h5"]
    for name, data in want.items():
        got = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                                       "path": str(m.path / f"zarr/campaign/{name}.zarr/v")}}).result()
        assert np.array_equal(got.read().result(), data), name
        with h5py.File(m.path / f"hdf5/campaign/{name}.h5", "r") as f:
            assert np.array_equal(f["v"][()], data), name
    deep_check(store)
    r = subprocess.run(["rm", "-rf", str(m.path / "zarr/campaign")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for view in ("zarr", "n5", "hdf5", "tiff"):
        assert not (m.path / view / "campaign").exists(), view
    # an empty folder made with mkdir goes with rmdir
    (m.path / "n5/empty").mkdir()
    assert (m.path / "zarr/empty").is_dir()
    (m.path / "zarr/empty").rmdir()
    assert not (m.path / "hdf5/empty").exists()
    m.stop()
    assert not [p for p in store.rglob(".domain.json")]  # nothing left of either
    shutil.rmtree(store)
