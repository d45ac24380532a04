"""PyTables' own test files as ``polyfs import`` inputs (round 14, kernel-free).

What this module pins:

- A compound with a variable-length member *and* a fixed-size array member (PyTables'
  ``smpl_unsupptype.h5``: ``{int32, string[4] (variable-length), S6, int16[5][10], float32,
  float64[10], uint8}``) was stored with every fixed-size array member repeated across its own
  shape (numpy's conversion of a ``(5, 10)`` value to the ``(int16, (5, 10))`` subarray dtype
  makes a ``(5, 10, 5, 10)`` array): the chunks could not be decoded, so the dataset was left
  out of the ``hdf5/`` view (one log line) and h5ls/h5diff/h5py no longer saw it; a ``cp`` of
  such a file into ``hdf5/`` came back without it. Fixed in the chunk codec's encoder
  (``polyfs/codecs/vlen.py``: a fixed-size array value is written as its base type's bytes).
"""
from __future__ import annotations

import io

import h5py
import numpy as np
import pytest
from writeharness import FS

from polyfs.importers import import_source

STR = h5py.string_dtype()


def _compound_file(path, chunks) -> np.ndarray:
    """A file with one compound dataset of the smpl_unsupptype.h5 kind; returns its values."""
    dt = np.dtype([("a", ">i4"), ("b", STR, (4,)), ("c", "S6"), ("d", ">i2", (5, 10)), ("e", ">f4"),
                   ("f", ">f8", (3,)), ("g", "u1")])
    data = np.empty(6, dtype=dt)
    for i in range(6):
        data[i] = (i, [f"s{i}{j}" * (j + 1) for j in range(4)], b"Hello!", np.arange(50).reshape(5, 10) + i,
                   i / 2, [i, -i, 0.25], 100 + i)
    with h5py.File(path, "w") as f:
        f.create_dataset("CompoundChunked", data=data, chunks=chunks)
    return data


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype.names == want.dtype.names
    for name in want.dtype.names:
        g, w = got[name], want[name]
        if w.dtype == object:
            assert [x.decode() if isinstance(x, bytes) else x for x in g.reshape(-1)] == \
                [x.decode() if isinstance(x, bytes) else x for x in w.reshape(-1)], name
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("chunks", [(3,), None], ids=["chunked", "contiguous"])
def test_compound_with_vlen_and_array_members_survives_import(tmp_path, chunks):
    src = tmp_path / "c.h5"
    want = _compound_file(src, chunks)
    fs = FS()
    try:
        import_source(str(src), fs.url, domain="/c.h5", progress=False)
        with h5py.File(io.BytesIO(fs.read_file("/hdf5/c.h5")), "r") as f:
            assert list(f) == ["CompoundChunked"]
            got = f["CompoundChunked"][()]
        _same(got, want)
    finally:
        fs.close()


def test_compound_with_vlen_and_array_members_written_into_hdf5_view(tmp_path):
    """The same file copied into ``hdf5/`` (``cp``) is stored as it is and read back the same."""
    src = tmp_path / "c.h5"
    want = _compound_file(src, (3,))
    fs = FS()
    try:
        fs.write_file("/hdf5/w.h5", src.read_bytes())
        with h5py.File(io.BytesIO(fs.read_file("/hdf5/w.h5")), "r") as f:
            assert list(f) == ["CompoundChunked"]
            got = f["CompoundChunked"][()]
        _same(got, want)
    finally:
        fs.close()
