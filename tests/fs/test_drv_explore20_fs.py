"""HDF5 file drivers writing into ``hdf5/`` (kernel-free), round 20.

What this module pins:

- h5py ``driver="family"`` (``x%d.h5``: members ``x0.h5``, ``x1.h5``...) and
  ``driver="split"`` (``x-m.h5`` metadata, ``x-r.h5`` raw data) spread one HDF5 file over
  several files; the view takes one file per domain, so they are refused. They were refused
  with HDF5's own words only ("truncated file: eof = 1024 ... stored_eof = 10048", "file
  signature not found", "family driver should be used"), which do not tell the user that the
  driver is the cause or what to do. Now the first member (the ``-m`` file) is refused with
  ``EOPNOTSUPP`` naming the driver and the way out, the other members with ``EINVAL`` saying
  they look like member files; the store is unchanged. ``polyfs import`` says the same.
- A whole family file in its first member (h5py's default 2 GiB member size; also what
  ``h5repart -family_to_sec2`` closes before it marks it plain) is one HDF5 file: it is taken
  (read as h5repart makes it), where it was refused.
- Files the default, ``stdio`` and ``core`` drivers write, with ``libver``, alignment,
  ``meta_block_size``, paged file space and ``userblock_size``, are taken as written.
"""
from __future__ import annotations

import errno
import logging

import h5py
import numpy as np
import pytest

from polyfs.errors import UnsupportedSource
from polyfs.formats.hdf5 import drivers
from polyfs.importers import import_source
from writeharness import FS

DATA = np.arange(1000, dtype="<i8")


def _fs(tmp_path) -> FS:
    (tmp_path / "store").mkdir()
    return FS(f"file://{tmp_path / 'store'}")


def _members(tmp_path, driver: str, libver: str = "earliest") -> dict[str, bytes]:
    """The files h5py's ``driver`` writes for one small dataset, by name."""
    out = tmp_path / f"{driver}-{libver}"
    out.mkdir()
    if driver == "family":
        with h5py.File(out / "x%d.h5", "w", driver="family", memb_size=1024, libver=libver) as f:
            f["d"] = DATA
    else:
        with h5py.File(out / "x", "w", driver="split", libver=libver) as f:
            f["d"] = DATA
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("driver,first,member", [("family", "x0.h5", "x1.h5"), ("split", "x-m.h5", "x-r.h5")])
def test_multi_file_driver_members_are_refused_naming_the_driver(tmp_path, caplog, driver, first, member, libver):
    files = _members(tmp_path, driver, libver)
    assert first in files and member in files
    fs = _fs(tmp_path)
    snap = fs.state()
    caplog.set_level(logging.WARNING)
    assert fs.errno_of(fs.write_file, f"hdf5/{first}", files[first]) == errno.EOPNOTSUPP
    assert fs.errno_of(fs.write_file, f"hdf5/{member}", files[member]) == errno.EINVAL
    assert fs.state() == snap and fs.ls("hdf5") == []
    name = "family" if driver == "family" else "split/multi"
    assert caplog.text.count(f"hdf5/{first}: written by HDF5's {name} driver") == 1
    assert caplog.text.count(f"hdf5/{member}: no HDF5 superblock: a member file") == 1
    assert "write it with the default driver" in caplog.text


def test_a_whole_family_in_its_first_member_is_taken_as_one_file(tmp_path):
    """h5py's default member size (2 GiB) holds the whole file in ``x0.h5``, which names the
    family driver in its superblock; HDF5 opens it only with that driver, so it was refused.
    It is one whole HDF5 file: it is taken, as ``h5repart -family_to_sec2`` would make it
    (the superblock's driver info address undefined). ``polyfs import`` takes it too."""
    with h5py.File(tmp_path / "x%d.h5", "w", driver="family") as f:
        f["d"] = DATA
        f.attrs["a"] = 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x0.h5"]
    data = (tmp_path / "x0.h5").read_bytes()
    fs = _fs(tmp_path)
    fs.write_file("hdf5/x0.h5", data)
    shown = tmp_path / "shown.h5"
    shown.write_bytes(fs.fresh(read_only=True).read_file("hdf5/x0.h5"))
    with h5py.File(shown, "r") as f:  # the default driver opens it
        np.testing.assert_array_equal(f["d"][...], DATA)
        assert f.attrs["a"] == 1
    assert import_source(tmp_path / "x0.h5", str(tmp_path / "s2"), domain="/x.h5", progress=False) == "/x.h5"


def test_a_family_over_several_members_is_still_refused_whole(tmp_path, caplog):
    """Member 0 of a family with a small member size lacks the rest of the file."""
    data = _members(tmp_path, "family")["x0.h5"]
    assert drivers.multi_file_driver(len(data), lambda at, n: data[at:at + n]) == "family"
    fs = _fs(tmp_path)
    snap = fs.state()
    assert fs.errno_of(fs.write_file, "hdf5/x0.h5", data) == errno.EOPNOTSUPP
    assert fs.state() == snap and "family driver" in caplog.text


def test_polyfs_import_names_the_driver(tmp_path):
    files = _members(tmp_path, "family")
    src = tmp_path / "family-earliest"
    with pytest.raises(UnsupportedSource, match="written by HDF5's family driver"):
        import_source(src / "x0.h5", str(tmp_path / "s1"), domain="/x.h5", progress=False)
    assert "x0.h5" in files


def test_garbage_named_like_no_member_keeps_hdf5s_words(tmp_path, caplog):
    """Only member-like names get the member hint; other garbage is refused as before."""
    fs = _fs(tmp_path)
    assert fs.errno_of(fs.write_file, "hdf5/notes.h5", b"hello" * 100) == errno.EINVAL
    assert "not a readable HDF5 file" in caplog.text and "member file" not in caplog.text
    assert drivers.refusal("x0.h5", 500, lambda at, n: (b"hello" * 100)[at:at + n]) is None
    ok = (tmp_path / "ok.h5")
    with h5py.File(ok, "w") as f:
        f["d"] = DATA
    data = ok.read_bytes()
    assert drivers.refusal("x1.h5", len(data), lambda at, n: data[at:at + n]) is None


KINDS = {
    "sec2": {},
    "stdio": {"driver": "stdio"},
    "core": {"driver": "core", "backing_store": True},
    "latest": {"libver": "latest"},
    "aligned": {"alignment_threshold": 64, "alignment_interval": 4096, "meta_block_size": 8192},
    "paged": {"fs_strategy": "page", "fs_page_size": 4096, "page_buf_size": 16384},
    "ub1024": {"userblock_size": 1024},
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_single_file_drivers_and_layouts_are_taken(tmp_path, kind):
    path = tmp_path / f"{kind}.h5"
    with h5py.File(path, "w", **KINDS[kind]) as f:
        f.create_dataset("d", data=DATA.reshape(10, 100), chunks=(5, 50), compression="gzip")
        f.attrs["k"] = kind
    fs = _fs(tmp_path)
    fs.write_file(f"hdf5/{kind}.h5", path.read_bytes())
    shown = tmp_path / "shown.h5"
    shown.write_bytes(fs.fresh(read_only=True).read_file(f"hdf5/{kind}.h5"))
    with h5py.File(shown, "r") as f:
        np.testing.assert_array_equal(f["d"][...], DATA.reshape(10, 100))
        assert f.attrs["k"] == kind and f.userblock_size == KINDS[kind].get("userblock_size", 0)


def test_a_member_without_a_superblock_is_no_hdf5_file():
    """A member without a superblock is no HDF5 file (EINVAL), not an unsupported one."""
    why = drivers.refusal("x-r.h5", 64, lambda at, n: bytes(n))
    assert why is not None and why[1] is False
    assert drivers.refusal("x0.h5", 64, lambda at, n: bytes(n)) is None  # member 0 has a superblock
