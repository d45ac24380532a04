"""Arrays of variable-length bytes written through ``zarr/``.

zarr-python's ``variable_length_bytes`` (``vlen-bytes``) arrays, and the view of an HDF5
dataset of ``vlen_dtype(uint8)`` copied with ``cp -r``, were refused with EOPNOTSUPP at
their ``zarr.json``. They are stored as HSDS stores h5py's sequences of unsigned bytes:
the same framing as text, without the UTF-8 check."""
from __future__ import annotations

import errno
import io
import json

import h5py
import numpy as np
import pytest
from test_write_semantics import fs, refused, zfs  # noqa: F401 - fixtures

zarr = pytest.importorskip("zarr")

VALUES = [b"a", b"\x00\xffzz", b"", b"hello", b"x" * 100]


def _local_array(tmp_path, codecs: str) -> tuple[bytes, dict[str, bytes]]:
    """zarr-python's own files for VALUES: (zarr.json, chunk files by key)."""
    kw = {} if codecs == "default" else {"compressors": None}
    a = zarr.create_array(str(tmp_path / "x"), shape=(5,), chunks=(3,), dtype=zarr.dtype.VariableLengthBytes(),
                          fill_value=b"", **kw)
    a[:] = np.array(VALUES, dtype=object)
    root = tmp_path / "x"
    return (root / "zarr.json").read_bytes(), {k: (root / "c" / k).read_bytes() for k in ("0", "1")}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("codecs", ["default", "plain"])
def test_zarr_python_variable_length_bytes_are_written(zfs, tmp_path, codecs):  # noqa: F811 - fixture
    meta, chunks = _local_array(tmp_path, codecs)
    zfs.makedirs("zarr/b.zarr/x")
    zfs.write_file("zarr/b.zarr/x/zarr.json", meta)
    zfs.makedirs("zarr/b.zarr/x/c")
    for key, data in chunks.items():
        zfs.write_file(f"zarr/b.zarr/x/c/{key}", data)
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/b.h5")), "r") as f:
        assert [bytes(v) for v in f["x"][...]] == VALUES
    shown = json.loads(zfs.read_file("zarr/b.zarr/x/zarr.json"))
    assert shown["data_type"] == "variable_length_bytes"
    if codecs == "plain":  # the stored framing behind the element count: what zarr-python wrote
        assert zfs.read_file("zarr/b.zarr/x/c/0") == chunks["0"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_malformed_bytes_chunk_is_refused_and_the_store_kept(zfs, tmp_path, caplog):  # noqa: F811 - fixture
    meta, chunks = _local_array(tmp_path, "plain")
    zfs.makedirs("zarr/b.zarr/x")
    zfs.write_file("zarr/b.zarr/x/zarr.json", meta)
    zfs.makedirs("zarr/b.zarr/x/c")
    zfs.write_file("zarr/b.zarr/x/c/0", chunks["0"])
    before = zfs.read_file("hdf5/b.h5")
    bad = chunks["1"][:-3]  # an element overruns the chunk
    refused(zfs, errno.EINVAL, zfs.write_file, "zarr/b.zarr/x/c/1", bad)
    wrong_count = (7).to_bytes(4, "little") + chunks["1"][4:]
    refused(zfs, errno.EINVAL, zfs.write_file, "zarr/b.zarr/x/c/1", wrong_count)
    assert zfs.read_file("hdf5/b.h5") == before


def test_cp_of_the_view_of_hdf5_byte_sequences(zfs, tmp_path):  # noqa: F811 - fixture
    """An HDF5 dataset of ``vlen_dtype(uint8)``, shown in ``zarr/`` as variable_length_bytes,
    copied to another domain file by file (what ``cp -r`` does) reads the same in HDF5."""
    src = tmp_path / "s.h5"
    with h5py.File(src, "w") as f:
        d = f.create_dataset("b", (5,), dtype=h5py.vlen_dtype(np.uint8), chunks=(2,))
        for i, v in enumerate(VALUES):
            d[i] = np.frombuffer(v, np.uint8)
    zfs.write_file("hdf5/s.h5", src.read_bytes())
    zfs.makedirs("zarr/copy.zarr/b")
    zfs.write_file("zarr/copy.zarr/b/zarr.json", zfs.read_file("zarr/s.zarr/b/zarr.json"))
    for name in zfs.walk_files("zarr/s.zarr/b"):
        if name == "zarr.json":
            continue
        if "/" in name:
            zfs.makedirs("zarr/copy.zarr/b/" + name.rsplit("/", 1)[0])
        zfs.write_file(f"zarr/copy.zarr/b/{name}", zfs.read_file(f"zarr/s.zarr/b/{name}"))
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/copy.h5")), "r") as f:
        assert [bytes(v) for v in f["b"][...]] == VALUES
