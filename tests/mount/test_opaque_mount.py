"""Tier 3: datasets under filters outside the table, through a real mount (issue 12, item 4).

An LZ4, a Bitshuffle and a lossy Zfp dataset (hdf5plugin) and one under
filter 39999 (no plugin anywhere) are imported and mounted. The HDF5 view
serves their chunks unchanged (h5py's ``read_direct_chunk``, h5dump); the Zarr
and N5 views decode them through HDF5 and leave the 39999 dataset out with one
log line. Writes: h5py ``r+`` into the LZ4 dataset stores the chunk HDF5 wrote
as it is; zarr-python into the LZ4 and Bitshuffle datasets is encoded with the
dataset's own filter and parameters; zarr-python into the lossy Zfp dataset
(whose encoding does not give the written values back) is refused with
EOPNOTSUPP and the store unchanged.
"""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import corpus
from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)


def make_source(path: Path) -> dict[str, np.ndarray]:
    plugins = corpus.h5plugins()
    want = {"lz4": (np.arange(64 * 96, dtype="<i4").reshape(64, 96) % 701),
            "bs": (np.arange(48 * 40, dtype="<u2").reshape(48, 40) * 7 % 3001),
            "zfp": np.sin(np.arange(32 * 32, dtype="<f4").reshape(32, 32) / 30)}
    with h5py.File(path, "w") as f:
        f.create_dataset("lz4", data=want["lz4"], chunks=(16, 32), **plugins.LZ4())
        f.create_dataset("bs", data=want["bs"], chunks=(16, 16), **plugins.Bitshuffle(cname="lz4"))
        f.create_dataset("zfp", data=want["zfp"], chunks=(16, 16), **plugins.Zfp(rate=8))
        want["zfp"] = f["zfp"][...]  # lossy: what HDF5 gives back
    return want


def direct_chunks(d) -> dict[tuple, bytes]:
    offs: list[tuple] = []
    d.id.chunk_iter(lambda info: offs.append(tuple(info.chunk_offset)))
    out = {}
    for off in offs:
        mask, data = d.id.read_direct_chunk(off)
        assert mask == 0
        out[off] = bytes(data)
    return out


def chunk_objects(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*"))
            if p.is_file() and p.parent.parent.name == "d" and p.name[0].isdigit()}


def test_opaque_filters_through_a_mount(tmp_path, mount_store):
    src = tmp_path / "op.h5"
    want = make_source(src)
    unknown = corpus.make_unknown_filter_hdf5(tmp_path)
    store = tmp_path / "store"
    assert import_source(src, str(store), progress=False) == "/op.h5"
    assert import_source(unknown, str(store), progress=False) == "/unknown_filter.h5"
    m = mount_store(str(store))
    view = m.path / "hdf5" / "op.h5"

    # reads: the HDF5 view serves the stored chunks unchanged, the others decode them
    with h5py.File(src, "r") as a, h5py.File(view, "r") as b:
        for name in want:
            assert direct_chunks(b[name]) == direct_chunks(a[name])
            np.testing.assert_array_equal(b[name][...], want[name])
    root = zarr.open_group(str(m.path / "zarr" / "op.zarr"), mode="r")
    for name in want:
        np.testing.assert_array_equal(root[name][...], want[name])
        t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "op.n5" / name)}})
        np.testing.assert_array_equal(np.asarray(t.result().read().result()).T, want[name])
    with h5py.File(unknown, "r") as a, h5py.File(m.path / "hdf5" / "unknown_filter.h5", "r") as b:
        assert direct_chunks(b["data/odd"]) == direct_chunks(a["data/odd"])
    dump = subprocess.run(["h5dump", "-H", "-p", "-d", "/data/odd", str(m.path / "hdf5" / "unknown_filter.h5")],
                          capture_output=True, text=True, env=ENV, timeout=60).stdout
    assert "FILTER_ID 39999" in dump and "PARAMS { 0 }" in dump, dump
    uz = m.path / "zarr" / "unknown_filter.zarr"
    assert sorted(os.listdir(uz / "data")) == ["zarr.json"] and (uz / "fine" / "zarr.json").exists()
    assert not (m.path / "n5" / "unknown_filter.n5" / "data" / "odd").exists()
    np.testing.assert_array_equal(zarr.open_array(str(uz / "fine"), mode="r")[...], np.arange(10))
    os.listdir(uz / "data")  # listed again: still one log line
    assert sum("39999" in line and "zarr" in line for line in m.log_text().splitlines()) == 1

    # h5py r+ into the LZ4 dataset: the chunk HDF5 wrote (with the dataset's own filter) is stored as is
    with h5py.File(view, "r+") as f:
        f["lz4"][0:16, 32:64] = -5
    want["lz4"][0:16, 32:64] = -5
    with h5py.File(view, "r") as f:
        np.testing.assert_array_equal(f["lz4"][...], want["lz4"])
        written = direct_chunks(f["lz4"])[(0, 32)]
        plist = f["lz4"].id.get_create_plist()
        assert plist.get_filter(0)[0] == 32004
    assert written in chunk_objects(store).values()
    np.testing.assert_array_equal(zarr.open_group(str(m.path / "zarr" / "op.zarr"), mode="r")["lz4"][...],
                                  want["lz4"])

    # zarr-python into the LZ4 dataset: encoded with LZ4 by HDF5, seen by the HDF5 view
    z = zarr.open_array(str(m.path / "zarr" / "op.zarr" / "lz4"), mode="r+")
    z[16:32, 0:32] = 9
    want["lz4"][16:32, 0:32] = 9
    with h5py.File(view, "r") as f:
        np.testing.assert_array_equal(f["lz4"][...], want["lz4"])
        assert [f["lz4"].id.get_create_plist().get_filter(0)[0]] == [32004]

    # zarr-python into the Bitshuffle dataset: encoded by HDF5 with the stored parameters
    bs = zarr.open_array(str(m.path / "zarr" / "op.zarr" / "bs"), mode="r+")
    bs[0:16, 0:16] = 1
    want["bs"][0:16, 0:16] = 1
    with h5py.File(view, "r") as f:
        np.testing.assert_array_equal(f["bs"][...], want["bs"])
        with h5py.File(src, "r") as a:
            assert f["bs"].id.get_create_plist().get_filter(0) == a["bs"].id.get_create_plist().get_filter(0)

    # zarr-python into the lossy Zfp dataset: what it stores would not read back as written: refused
    before = chunk_objects(store)
    z = zarr.open_array(str(m.path / "zarr" / "op.zarr" / "zfp"), mode="r+")
    with pytest.raises(OSError) as exc:
        z[0:16, 0:16] = np.random.default_rng(1).random((16, 16), dtype="float32")
    assert exc.value.errno == errno.EOPNOTSUPP, exc.value
    assert chunk_objects(store) == before
    with h5py.File(view, "r") as f:
        np.testing.assert_array_equal(f["zfp"][...], want["zfp"])
    assert sum("refused" in line and "32013" in line for line in m.log_text().splitlines()) == 1
