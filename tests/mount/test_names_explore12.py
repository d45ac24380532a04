"""Real tools over a mount, exploratory round 12: unusual group, dataset and domain names.

- a 256-byte name (``mkdir``, ``touch``, ``tifffile.imwrite``, zarr-python ``create_array``)
  was taken although ``statfs`` says 255 (the kernel passes FUSE names up to 1024 bytes): the
  object could not be copied out to a disk. Now ``ENAMETOOLONG``, one log line, store unchanged;
- ``rm tiff/<d>/.hidden.tif`` (an image whose dataset name starts with ``.``) exited 0 and left
  the image; now it removes it or fails with an errno (tests/fs/test_names_explore12_fs.py);
- pinned (worked unchanged): an HDF5 file whose groups and datasets are named with spaces,
  ``%#:'"\\``, a leading ``-`` or ``.``, trailing spaces and dots, case pairs, ``é``/``日本``/emoji,
  tabs and newlines, 250-byte names and view words (``c``, ``0``, ``1``, ``zarr.json``,
  ``attributes.json``) is listed and read under those names by zarr-python, z5py, tifffile and
  h5py, the same names written through each view by its tool are read back in the others,
  ``cp -r`` out of ``zarr/`` and ``n5/`` copies every name, ``rm -r`` removes them, and
  ``polyfs check --deep`` stays clean.
"""
from __future__ import annotations

import errno
import os
import shutil
import subprocess

import numpy as np
import pytest
from support import deep_check, quiet_local_mount as _mounted

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")

IMG = np.arange(12, dtype="u2").reshape(3, 4)
ODD = ["a b", "é", "日本", "😀", "x%y", "h#", "c:d", "q\"", "s'", "-dash", "trail ", "trail.", "Case", "case",
       "0", "1", "c", "tab\tx", "nl\nx", "L" * 250]
VIEW_WORDS = {"zarr": "zarr.json", "n5": "attributes.json"}  # hidden in that view (one log line), shown elsewhere


def _source(tmp_path) -> str:
    src = tmp_path / "names.h5"
    with h5py.File(src, "w") as f:
        g = f.create_group("g")
        for name in ODD + [".hidden", "back\\slash", "zarr.json", "attributes.json"]:
            g.create_dataset(name, data=IMG, chunks=(2, 2))
        grp = f.create_group("grp")
        for name in ["0", "1", "c", "a b", "é"]:
            grp.create_group(name).create_dataset("d", data=IMG, chunks=(2, 2))
    return str(src)


@pytest.fixture
def mounted(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    assert import_source(_source(tmp_path), str(store), domain="/names.h5", progress=False) == "/names.h5"
    return store, m


def test_imported_unusual_names_are_listed_and_read_by_every_tool(mounted, tmp_path):
    z5py = pytest.importorskip("z5py")
    store, m = mounted
    names = set(ODD) | {".hidden", "back\\slash"}
    zroot, nroot, troot = m.path / "zarr" / "names.zarr", m.path / "n5" / "names.n5", m.path / "tiff" / "names"
    assert set(os.listdir(zroot / "g")) == names | {"attributes.json", "zarr.json"}
    assert set(os.listdir(nroot / "g")) == names | {"zarr.json", "attributes.json"}
    assert set(os.listdir(troot / "g")) == {f"{n}.tif" for n in names | {"zarr.json", "attributes.json"}}
    zg = zarr.open_group(str(zroot), mode="r")["g"]
    n5 = z5py.File(str(nroot), "r")["g"]
    for name in ODD:  # (zarr-python itself takes '\\' for a separator)
        np.testing.assert_array_equal(zg[name][...], IMG)
        np.testing.assert_array_equal(n5[name][...], IMG)
        np.testing.assert_array_equal(tifffile.imread(troot / "g" / f"{name}.tif"), IMG)
    for name in ["0", "1", "c", "a b", "é"]:  # N5 group names that look like block directories
        np.testing.assert_array_equal(z5py.File(str(nroot), "r")["grp"][name]["d"][...], IMG)
    with h5py.File(m.path / "hdf5" / "names.h5", "r") as f:
        assert set(f["g"].keys()) == names | {"zarr.json", "attributes.json"}
    out = tmp_path / "copied"
    shutil.copytree(zroot, out / "z")  # every name also fits a disk
    shutil.copytree(nroot, out / "n")
    assert set(os.listdir(out / "z" / "g")) == set(os.listdir(zroot / "g"))
    deep_check(store)


def test_unusual_names_written_by_each_tool_are_read_in_the_others(mounted):
    z5py = pytest.importorskip("z5py")
    store, m = mounted
    zg = zarr.open_group(str(m.path / "zarr" / "names.zarr"), mode="a").require_group("zw")
    n5 = z5py.File(str(m.path / "n5" / "names.n5"), "a").require_group("nw")
    (m.path / "tiff" / "names" / "tw").mkdir()
    for name in ODD:
        zg.create_array(name, shape=IMG.shape, chunks=(2, 2), dtype="u2")[:] = IMG
        n5.create_dataset(name, shape=IMG.shape, chunks=(2, 2), dtype="u2", compression="gzip")[:] = IMG
        tifffile.imwrite(m.path / "tiff" / "names" / "tw" / f"{name}.tif", IMG, tile=(16, 16))
    with h5py.File(m.path / "hdf5" / "names.h5", "r+") as f:
        for name in ODD:
            f.require_group("hw").create_dataset(name, data=IMG, chunks=(2, 2))
    with h5py.File(m.path / "hdf5" / "names.h5", "r") as f:
        for g in ["zw", "nw", "tw", "hw"]:
            assert set(f[g].keys()) == set(ODD), g
    for g in ["zw", "nw", "tw", "hw"]:
        assert set(os.listdir(m.path / "tiff" / "names" / g)) == {f"{n}.tif" for n in ODD}
        for name in ODD:
            np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "names.zarr" / g / name))[...], IMG)
    for name in ODD:
        shutil.rmtree(m.path / "zarr" / "names.zarr" / "zw" / name)
        shutil.rmtree(m.path / "n5" / "names.n5" / "nw" / name)
        os.unlink(m.path / "tiff" / "names" / "tw" / f"{name}.tif")
    with h5py.File(m.path / "hdf5" / "names.h5", "r") as f:
        assert [len(f[g]) for g in ["zw", "nw", "tw"]] == [0, 0, 0]
    deep_check(store)


def _tree(store) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(store):
        for name in files:
            p = os.path.join(dirpath, name)
            if "/polyfs/" not in p:  # (polyfs's own derived data may be refreshed by reads)
                out[p] = open(p, "rb").read()
    return out


def test_a_name_over_255_bytes_is_refused_by_every_tool(mounted):
    store, m = mounted
    before = _tree(store)
    long = "é" * 128  # 256 bytes
    zroot = m.path / "zarr" / "names.zarr"
    attempts = [
        lambda: os.mkdir(zroot / long),
        lambda: os.mkdir(m.path / "n5" / "names.n5" / long),
        lambda: os.mkdir(m.path / "zarr" / f"{'d' * 252}.zarr"),
        lambda: open(m.path / "tiff" / "names" / f"{'t' * 252}.tif", "wb").close(),
        lambda: zarr.open_group(str(zroot), mode="a").create_array(long, shape=(2,), dtype="u1"),
        lambda: tifffile.imwrite(m.path / "tiff" / "names" / "g" / f"{long}.tif", IMG),
    ]
    for i, attempt in enumerate(attempts):
        with pytest.raises(OSError) as exc:
            attempt()
        assert exc.value.errno == errno.ENAMETOOLONG, i
    assert os.statvfs(m.path).f_namemax == 255
    assert _tree(store) == before
    assert m.log_text().count("ENAMETOOLONG") == len(attempts)  # one line each
    ok = "é" * 127  # 254 bytes: taken
    os.mkdir(zroot / ok)
    assert ok in os.listdir(m.path / "n5" / "names.n5")


def test_rm_of_a_dot_named_image_does_not_exit_0_and_leave_it(mounted):
    store, m = mounted
    path = m.path / "tiff" / "names" / "g" / ".hidden.tif"
    res = subprocess.run(["rm", str(path)], capture_output=True, text=True, timeout=60)
    with h5py.File(m.path / "hdf5" / "names.h5", "r") as f:
        still = ".hidden" in f["g"]
    if res.returncode == 0:
        assert not still and not path.exists()
    else:
        assert still and path.exists() and "not permitted" in res.stderr.lower()
    deep_check(store)


def test_zarr_attributes_of_a_group_holding_a_zarr_json_dataset_are_not_lost(mounted):
    """zarr-python's ``attrs`` update (``zarr.<uuid>.partial`` renamed over ``g/zarr.json``) was
    routed to the hidden dataset ``g/zarr.json``, kept as a scratch file and shown back: stored
    nowhere, gone at unmount. Now it is stored, or refused (EPERM) with the store unchanged."""
    store, m = mounted
    zroot = m.path / "zarr" / "names.zarr"
    try:
        zarr.open_group(str(zroot / "g"), mode="a").attrs["added"] = 7
        taken = True
    except PermissionError:
        taken = False
    with h5py.File(m.path / "hdf5" / "names.h5", "r") as f:
        assert ("added" in f["g"].attrs) == taken
        assert "zarr.json" in f["g"]  # the dataset itself is kept
    assert ("added" in zarr.open_group(str(zroot / "g"), mode="r").attrs) == taken
    assert m.log_text().count("/g/zarr.json is named like the view's metadata file") == 1
    deep_check(store)
