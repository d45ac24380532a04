"""HDF5 files with library features beyond the defaults, written into ``hdf5/`` (kernel-free).

What this module pins:

- A new file holding a dataset in external raw storage (h5py ``create_dataset(...,
  external=[(name, offset, size)])``): the daemon resolved the raw file's name itself, against
  its own working directory for a relative name (a writer in ``/home/u`` writing
  ``raw.bin`` got EINVAL and HDF5's "unable to open external raw data file", or another
  ``raw.bin`` of the daemon's directory silently stored in its place), and read any absolute
  name the writer gave (``/etc/...``: files the writer may not read, served back through
  ``zarr/``). Such a file is refused with ``EOPNOTSUPP`` and one log line naming the dataset and
  its raw files, as a new external dataset in an ``r+`` session is; the store is unchanged.
  ``polyfs import`` of a local file still reads them, beside that file.
"""
from __future__ import annotations

import errno
import io
import logging

import h5py
import numpy as np
import pytest
from writeharness import FS

from polyfs.importers import import_source


def _external_file(path, raw_name: str) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("inside", data=np.arange(4))
        f.create_dataset("e", shape=(10,), dtype="<i4", external=[(raw_name, 0, 40)])
        f["e"][:] = np.arange(10, dtype="<i4")


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_new_file_with_external_raw_storage_is_refused(tmp_path, monkeypatch, caplog, where):
    monkeypatch.chdir(tmp_path)  # HDF5 writes a relative raw file beside the writer's cwd
    raw = "raw.bin" if where == "relative" else str(tmp_path / "raw.bin")
    _external_file(tmp_path / "e.h5", raw)
    assert (tmp_path / "raw.bin").stat().st_size == 40
    fs = FS()
    before = fs.state()
    with caplog.at_level(logging.WARNING), pytest.raises(OSError) as err:
        fs.write_file("hdf5/e.h5", (tmp_path / "e.h5").read_bytes())
    assert err.value.errno == errno.EOPNOTSUPP  # what the store cannot hold, not a damaged file
    lines = [r.getMessage() for r in caplog.records if "dataset /e" in r.getMessage()]
    assert len(lines) == 1 and "external raw files" in lines[0] and "raw.bin" in lines[0], lines
    assert fs.state() == before  # nothing stored, no domain made
    assert not fs.exists("hdf5/e.h5")


def test_import_of_a_local_file_still_reads_its_external_raw_files(tmp_path, monkeypatch):
    """``polyfs import`` reads them beside the source file (not the cwd), as HDF5 does for a
    file opened from there: the refusal is for files written through the mount only."""
    src = tmp_path / "src"
    src.mkdir()
    monkeypatch.chdir(src)
    _external_file(src / "e.h5", "raw.bin")
    monkeypatch.chdir(tmp_path)  # elsewhere: the raw file is found beside e.h5
    (tmp_path / "store").mkdir()
    import_source(src / "e.h5", str(tmp_path / "store"), domain="/e.h5", progress=False)
    fs = FS(f"file://{tmp_path / 'store'}", read_only=True)
    with h5py.File(io.BytesIO(fs.read_file("hdf5/e.h5")), "r") as f:
        np.testing.assert_array_equal(f["e"][:], np.arange(10))
        assert f["e"].id.get_create_plist().get_external_count() == 0  # stored as chunks


def test_an_r_plus_session_adding_external_raw_storage_is_refused(tmp_path, monkeypatch):
    """The same refusal when an existing file gets such a dataset (h5py ``"a"``)."""
    monkeypatch.chdir(tmp_path)
    fs = FS()
    buf = io.BytesIO()
    with h5py.File(buf, "w", libver="latest") as f:
        f.create_dataset("inside", data=np.arange(4))
    fs.write_file("hdf5/e.h5", buf.getvalue())
    before_bytes = fs.read_file("hdf5/e.h5")
    state = fs.state()
    buf = io.BytesIO(before_bytes)
    with h5py.File(buf, "r+") as f:
        f.create_dataset("e", shape=(10,), dtype="<i4", external=[(str(tmp_path / "raw.bin"), 0, 40)])
        f["e"][:] = np.arange(10, dtype="<i4")
    with pytest.raises(OSError) as err:
        fs.write_file("hdf5/e.h5", buf.getvalue(), truncate=False)
    assert err.value.errno == errno.EOPNOTSUPP
    assert fs.state() == state


def _vds_session(fs: FS, source_file: str) -> bytes:
    """An ``"a"`` session over ``hdf5/v.h5`` adding a virtual dataset mapping ``source_file``."""
    buf = io.BytesIO(fs.read_file("hdf5/v.h5"))
    with h5py.File(buf, "r+") as f:
        lay = h5py.VirtualLayout(shape=(2, 5), dtype="<i8")
        lay[0] = h5py.VirtualSource(source_file, "a", shape=(5,))
        lay[1] = h5py.VirtualSource(source_file, "b", shape=(5,))
        f.create_virtual_dataset("stack", lay, fillvalue=-1)
    return buf.getvalue()


def test_a_virtual_dataset_mapping_another_file_in_an_r_plus_session_is_refused(tmp_path, monkeypatch):
    """Its data would be read from wherever the daemon finds that name: refused with
    EOPNOTSUPP naming the source file, store unchanged."""
    monkeypatch.chdir(tmp_path)
    name = "other.h5"
    with h5py.File(tmp_path / name, "w") as f:
        f["a"] = np.arange(5) + 100
        f["b"] = np.arange(5) + 200
    fs = FS()
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f["a"] = np.arange(5)
    fs.write_file("hdf5/v.h5", buf.getvalue())
    state = fs.state()
    with pytest.raises(OSError) as err:
        fs.write_file("hdf5/v.h5", _vds_session(fs, name), truncate=False)
    assert err.value.errno == errno.EOPNOTSUPP
    assert fs.state() == state
