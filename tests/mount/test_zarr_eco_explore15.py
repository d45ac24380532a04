"""Real tools over a mount, exploratory round 15: zarr-python arrays under ``numcodecs.zarr3``
codecs the store has no filter for, read back through ``zarr/``, ``n5/`` and ``hdf5/`` and
after a remount, with ``polyfs check --deep`` clean (kernel-free tests are in
tests/fs/test_zarr_eco_explore15_fs.py).

- ``compressors=numcodecs.zarr3.LZ4()``/``LZMA()``/``CRC32()``/``Adler32()`` and filters
  ``Delta``, ``FixedScaleOffset``, ``PackBits`` were refused with ``ENOTSUP`` (the array's
  ``zarr.json`` rename failed). Now stored as values, served back under the declared chain.
- pinned (worked unchanged): ``Zlib``, ``BZ2``, ``Fletcher32``, ``Quantize``, ``BitRound``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from support import quiet_local_mount as _mounted

from polyfs.check import check_store

zarr = pytest.importorskip("zarr")
nz = pytest.importorskip("numcodecs.zarr3")
h5py = pytest.importorskip("h5py")
pytest.importorskip("hdf5plugin")  # zstd and bzip2 chunks of hdf5/

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")

INT = np.arange(80, dtype="i4").reshape(8, 10) * 3 - 40
FLOAT = np.linspace(-1, 1, 80).reshape(8, 10)
BOOL = np.arange(80).reshape(8, 10) % 3 == 0


def _cases() -> dict:
    return {
        "lz4": (INT, dict(compressors=[nz.LZ4()])),
        "lzma": (INT, dict(compressors=[nz.LZMA()])),
        "crc32": (INT, dict(compressors=[nz.CRC32()])),
        "adler32": (INT, dict(compressors=[nz.Adler32()])),
        "delta": (INT, dict(filters=[nz.Delta(dtype="i4")])),
        "delta_zlib": (INT, dict(filters=[nz.Delta(dtype="i4")], compressors=[nz.Zlib()])),
        "fso": (FLOAT, dict(filters=[nz.FixedScaleOffset(offset=0, scale=100, dtype="f8", astype="i4")])),
        "packbits": (BOOL, dict(filters=[nz.PackBits()], compressors=[nz.LZ4()])),
        "sharded_lz4": (INT, dict(shards=(8, 10), compressors=[nz.LZ4()])),
        "zlib": (INT, dict(compressors=[nz.Zlib(level=3)])),
        "bz2": (INT, dict(compressors=[nz.BZ2()])),
        "bitround": (FLOAT, dict(filters=[nz.BitRound(keepbits=6)])),
    }


def _expected(name: str, data: np.ndarray) -> np.ndarray:
    if name == "fso":
        return np.round(data, 2)
    if name == "bitround":
        import numcodecs

        out = numcodecs.BitRound(keepbits=6).encode(np.ascontiguousarray(data))  # lossy at the encode
        return np.frombuffer(bytes(out), dtype=data.dtype).reshape(data.shape).copy()
    return data


def test_numcodecs_zarr3_codecs_written_through_zarr_read_everywhere(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    root = str(m.path / "zarr" / "e.zarr")
    g = zarr.open_group(root, mode="w", zarr_format=3)
    handles, declared = {}, {}
    for name, (data, kw) in _cases().items():
        a = g.create_array(name, shape=data.shape, chunks=(4, 5), dtype=data.dtype, dimension_names=["y", "x"], **kw)
        a[:] = data
        a[1:3, 2:7] = data[1:3, 2:7][::-1]  # a partial update: zarr-python reads the chunks back first
        handles[name] = a
        declared[name] = [c["name"] for c in a.metadata.to_dict()["codecs"]]
    want = {}
    for name, (data, _) in _cases().items():
        w = _expected(name, data.copy())
        w[1:3, 2:7] = _expected(name, data[1:3, 2:7][::-1].copy())
        want[name] = w
        np.testing.assert_array_equal(handles[name][:], w, err_msg=name)  # the writer's open handle
        again = zarr.open_array(f"{root}/{name}", mode="r")
        np.testing.assert_array_equal(again[:], w, err_msg=name)
        assert [c["name"] for c in json.loads((m.path / "zarr" / "e.zarr" / name / "zarr.json").read_text())
                ["codecs"]] == declared[name], name
        assert again.metadata.dimension_names == ("y", "x")
    m.stop()
    assert not check_store(str(store), deep=True).problems
    m = mount_store(str(store))
    with h5py.File(m.path / "hdf5" / "e.h5", "r") as f:
        for name, w in want.items():
            np.testing.assert_array_equal(f[name][...], w, err_msg=name)
    z5py = pytest.importorskip("z5py")
    n5 = z5py.File(str(m.path / "n5" / "e.n5"), "r")
    for name, w in want.items():
        np.testing.assert_array_equal(n5[name][:], w, err_msg=name)
    for name, w in want.items():  # a fresh zarr-python after the remount
        got = zarr.open_array(str(m.path / "zarr" / "e.zarr" / name), mode="r")[:]
        np.testing.assert_array_equal(got, w, err_msg=name)


def test_dask_and_resize_under_numcodecs_lz4(mount_store, tmp_path):
    da = pytest.importorskip("dask.array")
    store, m = _mounted(mount_store, tmp_path)
    root = str(m.path / "zarr" / "d.zarr")
    zarr.open_group(root, mode="w", zarr_format=3)
    x = da.arange(120, chunks=30, dtype="i4").reshape(10, 12).rechunk((5, 6))
    z = zarr.create_array(root + "/v", shape=(10, 12), chunks=(5, 6), dtype="i4", fill_value=-1,
                          compressors=[nz.LZ4()], filters=[nz.Delta(dtype="i4")])
    da.to_zarr(x[5:, :6] * 2, z, region=(slice(5, 10), slice(0, 6)))
    a = zarr.open_array(root + "/v", mode="a")
    a.resize((12, 12))
    a[10:, :] = 7
    got = zarr.open_array(root + "/v", mode="r")[:]
    want = np.full((12, 12), -1, dtype="i4")
    want[5:10, :6] = x[5:, :6].compute() * 2
    want[10:] = 7
    np.testing.assert_array_equal(got, want)
    m.stop()
    assert not check_store(str(store), deep=True).problems
    m = mount_store(str(store))
    with h5py.File(m.path / "hdf5" / "d.h5", "r") as f:
        np.testing.assert_array_equal(f["v"][...], want)
