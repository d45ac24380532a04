"""Tier 3: the N5 view as tools use it, pinned where it once failed them.

- ``attributes.json`` whose ``dimensions``/``blockSize`` are no lists of
  integers (a string, floats, booleans) were read as extents anyway (``"44"``
  became ``[4, 4]``), and extents beyond int64 were half-committed (the dataset
  then answered ``EIO`` and ``polyfs check`` crashed), and blocks of 4 GiB or
  more made a dataset the HDF5 view cannot open: all are ``EINVAL`` now, one
  log line, the store as it was.
- Object-mode blocks (mode 2) were ``EINVAL`` ("header is truncated") while
  varlength ones were ``EOPNOTSUPP``: both are valid N5 polyfs cannot hold,
  both ``EOPNOTSUPP``.
- ``polyfs import`` of a z5py container with ``lz4`` blocks (n5-java's LZ4
  stream, which tensorstore cannot read) failed whole; z5py decodes them now.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from conftest import polyfs_cmd
from polyfs.store import open_store

pytestmark = [pytest.mark.mount, pytest.mark.filterwarnings("ignore::UserWarning")]


def _snapshot(store: Path) -> dict[str, str]:
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file()}


def _ts_n5(path: Path):
    return ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(path)}}).result()


def _block(mode: int, dims_n5: list[int], payload: bytes, extra: bytes = b"") -> bytes:
    return struct.pack(">HH", mode, len(dims_n5)) + b"".join(struct.pack(">I", d) for d in dims_n5) + extra + payload


META = {"dimensions": [6, 4], "blockSize": [3, 4], "dataType": "uint16", "compression": {"type": "gzip", "useZlib": True}}
DATA = np.arange(24, dtype="uint16").reshape(4, 6)  # C order: the reversed dimensions


@pytest.fixture
def n5ds(mount_store, tmp_path):
    """A mounted store holding ``n5/t.n5/d``, written through the view with tensorstore."""
    store = tmp_path / "store"
    open_store(str(store), create=True)
    m = mount_store(str(store))
    os.mkdir(m.path / "n5" / "t.n5")
    d = m.path / "n5" / "t.n5" / "d"
    arr = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(d)}, "metadata": META},
                  create=True).result()
    arr.write(DATA.T).result()
    return m, store, d


def _refused(m, store: Path, path: Path, content: bytes, want: int, check) -> None:
    before, lines = _snapshot(store), len(m.log_text().splitlines())
    with pytest.raises(OSError) as exc:
        with open(path, "wb") as f:
            f.write(content)
    assert exc.value.errno == want, (path.name, exc.value)
    assert _snapshot(store) == before
    new = [ln for ln in m.log_text().splitlines()[lines:] if "refused" in ln]
    assert len(new) == 1 and check in new[0], new
    np.testing.assert_array_equal(np.asarray(_ts_n5(path.parent if path.name == "attributes.json" else
                                                    path.parent.parent).read().result()).T, DATA)


@pytest.mark.parametrize("field,value,check", [
    ("dimensions", "64", "list of integers"),
    ("blockSize", [3.5, 4], "list of integers"),
    ("dimensions", [True, 4], "list of integers"),
    ("dimensions", [2**70, 4], "2**63-1"),
    ("dimensions", [2**62, 2**62], "more chunks than can be counted"),
    ("blockSize", [3, 2**33], "does not fit"),
    ("blockSize", [2**16, 2**15], "below 4 GiB"),
])
def test_bad_extents_are_refused(n5ds, field, value, check):
    m, store, d = n5ds
    _refused(m, store, d / "attributes.json", json.dumps({**META, field: value}).encode(), errno.EINVAL, check)
    assert json.loads((d / "attributes.json").read_text())["dimensions"] == META["dimensions"]
    # a new dataset so declared is refused too, and leaves nothing behind
    os.mkdir(d.parent / "new")
    before = _snapshot(store)
    with pytest.raises(OSError) as exc:
        (d.parent / "new" / "attributes.json").write_text(json.dumps({**META, field: value}))
    assert exc.value.errno == errno.EINVAL
    assert _snapshot(store) == before


@pytest.mark.parametrize("name,content", [
    ("varlength", _block(1, [3, 4], zlib.compress(DATA[:, :3].astype(">u2").tobytes()), struct.pack(">I", 12))),
    ("object", struct.pack(">H", 2) + zlib.compress(b"a serialized object")),
    ("object, long", struct.pack(">H", 2) + zlib.compress(bytes(range(256)) * 4)),
], ids=["varlength", "object", "object-long"])
def test_non_default_block_modes_are_unsupported(n5ds, name, content):
    m, store, d = n5ds
    _refused(m, store, d / "0" / "0", content, errno.EOPNOTSUPP, "-mode block")


def test_import_lz4_container_written_by_z5py(tmp_path, mount_store):
    z5py = pytest.importorskip("z5py")
    src = tmp_path / "src.n5"
    f = z5py.File(str(src), mode="w", use_zarr_format=False)
    want = {}
    for comp in ("lz4", "xz", "gzip"):
        data = (np.random.default_rng(7).random((9, 10)) * 1000).astype("int16")
        f.create_dataset(f"g/{comp}", data=data, chunks=(4, 3), compression=comp)
        want[f"g/{comp}"] = data
    store = tmp_path / "store"
    res = subprocess.run(polyfs_cmd("import", str(src), str(store), "--domain", "/lz.h5"),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    m = mount_store(str(store))
    for name, data in want.items():
        got = np.asarray(_ts_n5(m.path / "n5" / "lz.n5" / name).read().result()).T
        np.testing.assert_array_equal(got, data, err_msg=name)
        zarr_got = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                                            "path": str(m.path / "zarr" / "lz.zarr" / name)}}
                           ).result().read().result()
        np.testing.assert_array_equal(np.asarray(zarr_got), data, err_msg=name)
