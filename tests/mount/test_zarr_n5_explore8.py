"""Tier 3 (exploratory round 8): copies of the Zarr and N5 views and the writers users run
on them, read back by independent tools (kernel-free counterparts in
tests/fs/test_zarr_n5_explore8_fs.py).

- ``cp -r`` of the Zarr view of an HDF5 file holding gzip-compressed variable-length
  strings (h5py's ``compression="gzip"`` on a ``string_dtype``) reported success and lost
  every string: the view serves such a chunk as two gzip members, which the write path
  refused ("more than one member"), logged only since ``cp`` writes ``c/`` before
  ``zarr.json``. zarr-python setting one string of a sharded gzip text array failed
  (``EINVAL``: it sends the shard's other inner chunks back as read).
- zarr-python record arrays (``structured``) and ``V<n>`` (``raw_bytes``) were refused
  (``EOPNOTSUPP``), and so was ``cp -r`` of the view of any HDF5 file with a compound
  dataset (the view shows compounds as ``structured``).
- zarr-python's ``filters=[TransposeCodec(order)]`` and tensorstore's ``transpose`` codec
  were refused (``EOPNOTSUPP``), as was ``cp -r`` of a local array using one.
- z5py writing BigDataViewer's N5 layout (``setup0`` has ``dataType`` and
  ``downsamplingFactors`` attributes) silently lost ``dataType`` (taken for a dataset
  lacking ``dimensions``, refused, the error ignored by z5py); ``cp -r`` of such a
  container failed.
"""
from __future__ import annotations

import shutil
import subprocess

import h5py
import numpy as np
import pytest
from support import deep_check, quiet_local_mount as _mounted

zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")



def _cp_r(src, dst) -> None:
    res = subprocess.run(["cp", "-r", str(src), str(dst)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


TEXTS = ["alpha", "béta", "", "γ" * 50, "e", "ff", "g"]


def test_cp_r_and_updates_of_gzip_text_arrays(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    local = tmp_path / "s.h5"
    with h5py.File(local, "w") as f:
        f.create_dataset("names", data=np.array(TEXTS, dtype=object), dtype=h5py.string_dtype(), chunks=(3,),
                         compression="gzip")
        f["n"] = np.arange(4)
    shutil.copy(local, m.path / "hdf5" / "s.h5")
    zv = m.path / "zarr"
    _cp_r(zv / "s.zarr", zv / "copy.zarr")
    assert list(zarr.open_array(str(zv / "copy.zarr" / "names"), mode="r")[:]) == TEXTS
    with h5py.File(m.path / "hdf5" / "copy.h5", "r") as f:
        assert [x.decode() for x in f["names"][...]] == TEXTS
    # zarr-python: one string of a sharded gzip text array
    g = zarr.open_group(str(zv / "s.zarr"), mode="a")
    a = g.create_array("sh", shape=(7,), chunks=(2,), shards=(4,), dtype=str,
                       compressors=[zarr.codecs.GzipCodec(level=5)])
    a[:] = np.array(TEXTS, dtype=object)
    a[0] = "new"
    b = zarr.open_array(str(zv / "s.zarr" / "names"), mode="a")
    b[4] = "changed"
    want = ["new"] + TEXTS[1:]
    m.stop()
    m.start()
    assert list(zarr.open_array(str(zv / "s.zarr" / "sh"), mode="r")[:]) == want
    with h5py.File(m.path / "hdf5" / "s.h5", "r") as f:
        assert [x.decode() for x in f["names"][...]] == TEXTS[:4] + ["changed"] + TEXTS[5:]
        assert [x.decode() for x in f["sh"][...]] == want
    m.stop()
    deep_check(store)


def test_zarr_python_records_and_copies_of_compound_views(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    rec_t = np.dtype([("x", "<i2"), ("name", "S4"), ("v", "<f8")])
    fill = np.array((-1, b"none", 0.25), rec_t)
    g = zarr.open_group(str(m.path / "zarr" / "r.zarr"), mode="w")
    r = g.create_array("rec", shape=(5,), chunks=(2,), dtype=rec_t, fill_value=fill[()])
    r[1:3] = np.array([(1, b"ab", 1.5), (2, b"cdef", 2.5)], rec_t)
    v = g.create_array("raw", shape=(4,), chunks=(4,), dtype="V3")
    v[:] = np.array([b"abc", b"\x00\x01\x02", b"xyz", b"\xff\xfe\xfd"], "V3")
    want = np.array([fill[()], (1, b"ab", 1.5), (2, b"cdef", 2.5), fill[()], fill[()]], rec_t)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "r.zarr" / "rec"), mode="r")[:], want)
    with h5py.File(m.path / "hdf5" / "r.h5", "r") as f:
        np.testing.assert_array_equal(f["rec"][...], want)
        assert [bytes(x) for x in f["raw"][...]] == [b"abc", b"\x00\x01\x02", b"xyz", b"\xff\xfe\xfd"]
    # the view of an HDF5 file's compound (padded, big-endian: served packed little-endian), copied
    padded = np.dtype({"names": ["a", "b"], "formats": [">i2", ">f8"], "offsets": [0, 8], "itemsize": 16})
    local = tmp_path / "c.h5"
    with h5py.File(local, "w") as f:
        d = f.create_dataset("p", shape=(6,), chunks=(3,), dtype=padded, compression="gzip")
        x = np.zeros(6, padded)
        x["a"], x["b"] = np.arange(6), np.arange(6) / 4
        d[...] = x
    shutil.copy(local, m.path / "hdf5" / "c.h5")
    _cp_r(m.path / "zarr" / "c.zarr", m.path / "zarr" / "c2.zarr")
    got = zarr.open_array(str(m.path / "zarr" / "c2.zarr" / "p"), mode="r")[:]
    np.testing.assert_array_equal(got["a"], np.arange(6))
    with h5py.File(m.path / "hdf5" / "c2.h5", "r") as f:
        np.testing.assert_array_equal(f["p"]["b"], np.arange(6) / 4)
    m.stop()
    deep_check(store)


def test_z5py_bigdataviewer_layout_and_its_copy(mount_store, tmp_path):
    z5py = pytest.importorskip("z5py")
    store, m = _mounted(mount_store, tmp_path)

    def bdv(root) -> None:
        f = z5py.File(str(root), "a")
        tp = f.create_group("setup0/timepoint0")
        f["setup0"].attrs["downsamplingFactors"] = [[1, 1, 1], [2, 2, 1]]
        f["setup0"].attrs["dataType"] = "uint16"
        for level, shape in enumerate([(8, 32, 40), (8, 16, 20)]):
            d = tp.create_dataset(f"s{level}", shape=shape, chunks=(8, 16, 16), dtype="uint16", compression="gzip")
            d[:] = level + 1
            d.attrs["downsamplingFactors"] = [2 ** level, 2 ** level, 1]

    local = tmp_path / "local.n5"
    bdv(local)
    (m.path / "n5" / "b.n5").mkdir()
    bdv(m.path / "n5" / "b.n5")
    (m.path / "n5" / "c.n5").mkdir()
    _cp_r(f"{local}/.", m.path / "n5" / "c.n5")
    m.stop()
    m.start()
    for name in ("b", "c"):
        f = z5py.File(str(m.path / "n5" / f"{name}.n5"), "r")
        assert dict(f["setup0"].attrs) == {"downsamplingFactors": [[1, 1, 1], [2, 2, 1]], "dataType": "uint16"}
        assert int(f["setup0/timepoint0/s1"][:].sum()) == 2 * 8 * 16 * 20
        with h5py.File(m.path / "hdf5" / f"{name}.h5", "r") as h:
            assert h["setup0"].attrs["dataType"] == "uint16"
            assert h["setup0/timepoint0/s0"].shape == (8, 32, 40)
    m.stop()
    deep_check(store)


def test_transposed_arrays_from_zarr_python_tensorstore_and_cp(mount_store, tmp_path):
    ts = pytest.importorskip("tensorstore")
    from zarr.codecs import GzipCodec, TransposeCodec, ZstdCodec

    store, m = _mounted(mount_store, tmp_path)
    data = np.arange(24 * 20 * 3, dtype="f4").reshape(24, 20, 3)
    want = data.copy()
    want[3:9, 2:7, 1] = -1
    local = tmp_path / "local.zarr"
    for root in (local, m.path / "zarr" / "t.zarr"):
        g = zarr.open_group(str(root), mode="w")
        for name, kw in {"gz": {"compressors": [GzipCodec()]}, "zs": {"compressors": [ZstdCodec(checksum=True)]},
                         "sh": {"shards": (12, 20, 3), "compressors": None}}.items():
            a = g.create_array(name, shape=data.shape, chunks=(6, 5, 3), dtype="f4",
                               filters=[TransposeCodec(order=(2, 0, 1))], **kw)
            a[:] = data
            a[3:9, 2:7, 1] = -1  # read-modify-write through the writer's own handle
            np.testing.assert_array_equal(a[:], want)
    _cp_r(local, m.path / "zarr" / "copy.zarr")
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(m.path / "zarr" / "t.zarr" / "tsf")},
            "metadata": {"shape": [30, 40], "data_type": "int16",
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 16]}},
                         "codecs": [{"name": "transpose", "configuration": {"order": "F"}},
                                    {"name": "bytes", "configuration": {"endian": "big"}},
                                    {"name": "gzip", "configuration": {"level": 3}}]}}
    t = ts.open(spec, create=True).result()
    t.write(np.arange(1200, dtype="i2").reshape(30, 40)).result()
    t[5:20, 5:20].write(-3).result()
    tsf = np.arange(1200, dtype="i2").reshape(30, 40)
    tsf[5:20, 5:20] = -3
    m.stop()
    m.start()
    for dom in ("t", "copy"):
        for name in ("gz", "zs", "sh"):
            path = m.path / "zarr" / f"{dom}.zarr" / name
            np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], want)
            got = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()
            np.testing.assert_array_equal(got.read().result(), want)
        with h5py.File(m.path / "hdf5" / f"{dom}.h5", "r") as f:
            np.testing.assert_array_equal(f["gz"][...], want)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "t.zarr" / "tsf"), mode="r")[:], tsf)
    m.stop()
    deep_check(store)
