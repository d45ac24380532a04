"""MATLAB 7.3 MAT-files and HDF5 user blocks through ``hdf5/`` (kernel-free), round 14.

What this module pins:

- A MAT-file (v7.3: HDF5 after a 512-byte user block whose first 128 bytes are the
  ``MATLAB 7.3 MAT-file, ...`` header MATLAB, Octave, ``scipy.io`` and ``hdf5storage``
  check) copied into ``hdf5/`` was refused (``EOPNOTSUPP``: the user block holds data), and
  ``polyfs import`` dropped the header: ``hdf5/<stem>`` was no MAT-file any more, and its
  ``.mat`` name became ``.h5``. The block is kept with the domain now and served before the
  superblock (at 512, as HDF5 requires), under the ``.mat`` name.
- ``hdf5storage.savemat`` into the mount: h5py ``"w"`` with ``userblock_size=512`` (zeros),
  then the header written with ``r+b`` into the block, then h5py ``"a"`` for the variables.
  The zeros were dropped, so the header overwrote the superblock. The block's size is
  kept, and a write into it changes the kept header.
- h5py ``r+`` sessions over the view file keep the block.
- A user block holding data over 64 KiB is refused (``EOPNOTSUPP``, store unchanged); one of
  zeros that large is dropped, as before.
"""
from __future__ import annotations

import errno
import os

import h5py
import numpy as np
import pytest

from polyfs.importers import import_source
from writeharness import FS, write_changes

hdf5storage = pytest.importorskip("hdf5storage")
mat73 = pytest.importorskip("mat73")
scipy_matlab = pytest.importorskip("scipy.io.matlab")

VARS = {"a": np.arange(12.0).reshape(3, 4), "s": "hello", "n": np.int32(7),
        "st": {"f": np.array([1.5, 2.5]), "g": np.uint8(3)}, "c": np.array([[1.0, "x"]], dtype=object)}


def _matfile(path) -> bytes:
    hdf5storage.savemat(str(path), VARS, format="7.3", matlab_compatible=True)
    return path.read_bytes()


def _fs(tmp_path) -> FS:
    (tmp_path / "store").mkdir()
    return FS(f"file://{tmp_path / 'store'}")


def _check_mat(data: bytes, tmp_path, header: bytes) -> None:
    """``data`` is a MAT-file holding VARS: its header, and what MAT readers load."""
    assert data[:512] == header[:512] and data[:10] == b"MATLAB 7.3" and data[126:128] == b"IM"
    local = tmp_path / "shown.mat"
    local.write_bytes(data)
    assert scipy_matlab.matfile_version(str(local)) == (2, 0)  # scipy.io's check of the header: v7.3
    with h5py.File(local, "r") as f:
        assert f.userblock_size == 512 and f["a"].attrs["MATLAB_class"] == b"double"
    got = hdf5storage.loadmat(str(local))
    np.testing.assert_array_equal(got["a"], VARS["a"])
    assert got["s"] == "hello" and int(got["n"]) == 7
    np.testing.assert_array_equal(np.ravel(got["st"]["f"]), VARS["st"]["f"])
    m = mat73.loadmat(str(local))
    np.testing.assert_array_equal(m["a"], VARS["a"])
    assert m["s"] == "hello" and m["c"][1] == "x" and int(m["st"]["g"]) == 3


def test_polyfs_import_keeps_the_header_and_the_mat_name(tmp_path):
    src = tmp_path / "data.mat"
    raw = _matfile(src)
    store = str(tmp_path / "store")
    assert import_source(src, store, domain="/data.mat", progress=False) == "/data.mat"
    fs = FS(f"file://{store}", read_only=True)
    assert "data.mat" in fs.ls("hdf5")
    _check_mat(fs.read_file("hdf5/data.mat"), tmp_path, raw)


def test_cp_of_a_mat_file_into_hdf5_is_a_mat_file_again(tmp_path):
    raw = _matfile(tmp_path / "data.mat")
    fs = _fs(tmp_path)
    fs.write_file("hdf5/data.mat", raw)
    assert "/data.mat" in fs.domains() and "data.mat" in fs.ls("hdf5")
    _check_mat(fs.fresh(read_only=True).read_file("hdf5/data.mat"), tmp_path, raw)


def test_hdf5storage_savemat_steps_through_the_view(tmp_path):
    """hdf5storage's own steps: an empty file with a zero user block, the header written into
    it with ``r+b``, then the variables with h5py ``"a"``."""
    raw = _matfile(tmp_path / "ref.mat")
    empty = tmp_path / "empty.mat"
    with h5py.File(empty, "w", userblock_size=512):
        pass
    fs = _fs(tmp_path)
    fs.write_file("hdf5/x.mat", empty.read_bytes())
    before = fs.read_file("hdf5/x.mat")
    assert len(before) > 512 and not any(before[:512]) and before[512:520] == b"\x89HDF\r\n\x1a\n"
    h = fs.open_file("hdf5/x.mat", os.O_RDWR)
    h.write(raw[:128], 0)  # hdf5storage: open(filename, "r+b").write(header)
    h.flush()
    h.release()
    shown = fs.read_file("hdf5/x.mat")
    assert shown[:128] == raw[:128]
    work = tmp_path / "work.mat"
    work.write_bytes(shown)
    hdf5storage.savemat(str(work), VARS, format="7.3", matlab_compatible=True, truncate_existing=False)
    after = work.read_bytes()
    after = raw[:128] + after[128:]  # hdf5storage wrote its header again (a new time): keep the first
    write_changes(fs, "hdf5/x.mat", shown, after)
    _check_mat(fs.fresh(read_only=True).read_file("hdf5/x.mat"), tmp_path, raw)


def test_h5py_r_plus_keeps_the_header(tmp_path):
    raw = _matfile(tmp_path / "data.mat")
    fs = _fs(tmp_path)
    fs.write_file("hdf5/data.mat", raw)
    before = fs.read_file("hdf5/data.mat")
    work = tmp_path / "work.mat"
    work.write_bytes(before)
    with h5py.File(work, "r+") as f:
        d = f.create_dataset("b", data=np.arange(4.0).reshape(4, 1))
        d.attrs["MATLAB_class"] = np.bytes_("double")
        f["a"].attrs["note"] = 1
    write_changes(fs, "hdf5/data.mat", before, work.read_bytes())
    shown = fs.fresh(read_only=True).read_file("hdf5/data.mat")
    _check_mat(shown, tmp_path, raw)
    (tmp_path / "again.mat").write_bytes(shown)
    np.testing.assert_array_equal(mat73.loadmat(str(tmp_path / "again.mat"))["b"], np.arange(4.0))


def test_a_changed_header_is_kept(tmp_path):
    raw = _matfile(tmp_path / "data.mat")
    fs = _fs(tmp_path)
    fs.write_file("hdf5/data.mat", raw)
    before = fs.read_file("hdf5/data.mat")
    new = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan 01 00:00:00 2024 HDF5 schema 1.00 ."
    head = new.ljust(116, b" ") + raw[116:128]
    write_changes(fs, "hdf5/data.mat", before, head + before[128:])
    assert fs.fresh(read_only=True).read_file("hdf5/data.mat")[:128] == head


def _jammed(path, block: int, data: bytes) -> bytes:
    with h5py.File(path, "w", userblock_size=block) as f:
        f["a"] = np.arange(5)
    out = bytearray(path.read_bytes())
    out[:len(data)] = data
    return bytes(out)


def test_a_large_user_block_with_data_is_refused_and_one_of_zeros_dropped(tmp_path, caplog):
    fs = _fs(tmp_path)
    snap = fs.state()
    big = _jammed(tmp_path / "big.h5", 128 * 1024, b"MY HEADER")
    assert fs.errno_of(fs.write_file, "hdf5/big.h5", big) == errno.EOPNOTSUPP
    assert fs.state() == snap and "user block holds data" in caplog.text
    fs.write_file("hdf5/zeros.h5", _jammed(tmp_path / "zeros.h5", 128 * 1024, b""))
    shown = fs.fresh(read_only=True).read_file("hdf5/zeros.h5")
    assert shown[:8] == b"\x89HDF\r\n\x1a\n"  # superblock at 0: nothing kept


def test_a_small_jammed_block_is_kept(tmp_path):
    """``h5jam -u`` of a text header (1024-byte block): served back as written."""
    fs = _fs(tmp_path)
    text = b"MY HEADER v1\n" * 50
    raw = _jammed(tmp_path / "j.h5", 1024, text)
    fs.write_file("hdf5/j.h5", raw)
    shown = fs.fresh(read_only=True).read_file("hdf5/j.h5")
    assert shown[:1024] == raw[:1024]
    local = tmp_path / "shown.h5"
    local.write_bytes(shown)
    with h5py.File(local, "r") as f:
        assert f.userblock_size == 1024
        np.testing.assert_array_equal(f["a"][()], np.arange(5))


def test_a_bad_kept_record_is_served_without_a_user_block(tmp_path, caplog):
    """A hand-edited ``hdf5_user_block`` record (a size HDF5 cannot have) does not break the
    view: the file is served with its superblock at 0, one log line says why."""
    import json

    from polyfs.model import keys

    raw = _matfile(tmp_path / "data.mat")
    store = tmp_path / "store"
    import_source(tmp_path / "data.mat", str(store), domain="/data.mat", progress=False)
    root = json.loads((store / keys.domain_key("/data.mat")).read_text())["root"]
    gpath = store / keys.group_key(root)
    group = json.loads(gpath.read_text())
    assert group["polyfs"]["hdf5_user_block"]["size"] == 512
    group["polyfs"]["hdf5_user_block"]["size"] = 700
    gpath.write_text(json.dumps(group))
    shown = FS(f"file://{store}", read_only=True).read_file("hdf5/data.mat")
    assert shown[:8] == b"\x89HDF\r\n\x1a\n" and raw[:8] != shown[:8]
    assert caplog.text.count("not a user block HDF5 can have") == 1
    local = tmp_path / "shown.h5"
    local.write_bytes(shown)
    with h5py.File(local, "r") as f:
        np.testing.assert_array_equal(f["a"][()], VARS["a"].T)


def test_a_v5_mat_file_is_refused_at_its_first_write(tmp_path, caplog):
    """``scipy.io.savemat`` (MATLAB's -v6/-v7 format) is not HDF5: refused at the write of its
    header (EINVAL, naming the format and the way out), before ``close()`` whose error many
    writers ignore; nothing is stored."""
    scipy_io = pytest.importorskip("scipy.io")
    src = tmp_path / "v5.mat"
    scipy_io.savemat(str(src), {"a": np.arange(3)})
    fs = _fs(tmp_path)
    snap = fs.state()
    assert fs.errno_of(fs.write_file, "hdf5/v5.mat", src.read_bytes()) == errno.EINVAL
    assert fs.state() == snap and caplog.text.count("MATLAB 5.0 (v6/v7) MAT-file") == 1


def test_polyfs_import_refuses_a_large_user_block_with_data(tmp_path):
    """Silently dropped before; refused now, as the view refuses it, nothing stored."""
    from polyfs.errors import UnsupportedSource

    src = tmp_path / "big.h5"
    src.write_bytes(_jammed(src, 128 * 1024, b"MY HEADER"))
    store = tmp_path / "store"
    with pytest.raises(UnsupportedSource, match="131072-byte user block holds data"):
        import_source(src, str(store), progress=False)
    assert not list(store.rglob("*.json")) if store.exists() else True
