"""Tier 2: unusual group, dataset and domain names in every view, exploratory round 12
(operations awaited directly).

- a name longer than a path component may be (255 bytes, what ``statfs`` reports) was taken
  by ``mkdir``, a new file and ``rename`` in every writable view (the kernel passes FUSE names
  of up to 1024 bytes): the group or dataset it made could be neither copied out of the mount
  nor made again on a disk. It is now ``ENAMETOOLONG`` with one log line, store unchanged;
- a TIFF image whose dataset name starts with ``.`` is shown as ``tiff/<d>/.name.tif``, but the
  view's writes do not take such names: ``rm`` of it returned success and left the dataset, and
  a rewrite was kept as a scratch file (gone at unmount), the dataset unchanged. ``rm`` and
  opening it for writing now either act on the dataset or are refused with an errno and one
  log line; never a success that changed nothing;
- names with spaces, ``%#:'"``, a leading ``-``, trailing spaces or dots, names differing only
  by case, non-ASCII (``é``, ``日本``, emoji), control characters and view words (``c``,
  ``0``, ``1``) made through one view are listed and read under the same name in every view.
"""
from __future__ import annotations

import errno
import io
import json
import logging

import numpy as np
import pytest
from writeharness import (FS, encode_with, n5_attrs, n5_block, read_n5_array, read_zarr_array, write_changes,
                          zarr_array_meta, zarr_group_meta)

tifffile = pytest.importorskip("tifffile")
h5py = pytest.importorskip("h5py")

IMG = np.arange(32 * 32, dtype="u1").reshape(32, 32)
ODD = ["a b", "é", "日本", "😀", "x%y", "h#", "c:d", "q\"", "s'", "-dash", "trail ", "trail.",
       "Case", "case", "0", "1", "c", "tab\tx", "nl\nx", "L" * 200]


@pytest.fixture
def fs():
    f = FS()
    f.mkdir("zarr/exp.zarr")  # domain /exp.h5
    yield f
    f.close()


def tiff(data: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, tile=(16, 16))
    return buf.getvalue()


def make_zarr_array(fs: FS, path: str, data: np.ndarray = IMG) -> None:
    """An unsharded Zarr array of one chunk, written as zarr-python writes it."""
    meta = zarr_array_meta(data.shape, data.dtype, data.shape, codecs=())
    fs.mkdir(path)
    fs.write_json(f"{path}/zarr.json", meta)
    fs.makedirs(f"{path}/c/0")
    fs.write_file(f"{path}/c/0/0", encode_with(meta["codecs"], data))


def h5_names(fs: FS, domain_file: str, group: str = "/") -> set[str]:
    with h5py.File(io.BytesIO(fs.read_file(domain_file)), "r") as f:
        return set(f[group].keys())


# -- names longer than a path component -------------------------------------------------------
@pytest.mark.parametrize("op", ["mkdir_group", "mkdir_domain", "new_tiff", "new_n5_group", "new_hdf5_domain",
                                "rename_target"])
def test_a_name_over_255_bytes_is_enametoolong(fs, op, caplog):
    long = "é" * 128  # 256 bytes, 128 characters
    fs.mkdir("zarr/exp.zarr/g")
    before = fs.state()
    caplog.set_level(logging.WARNING, logger="polyfs")
    caplog.clear()
    with pytest.raises(OSError) as exc:
        if op == "mkdir_group":
            fs.mkdir(f"zarr/exp.zarr/g/{long}")
        elif op == "mkdir_domain":
            fs.mkdir(f"zarr/{'d' * 252}.zarr")
        elif op == "new_tiff":
            fs.write_file(f"tiff/exp/g/{'t' * 252}.tif", tiff(IMG))
        elif op == "new_n5_group":
            fs.mkdir(f"n5/exp.n5/g/{long}")
        elif op == "new_hdf5_domain":
            fs.write_file(f"hdf5/{'h' * 253}.h5", b"\x89HDF\r\n\x1a\n")
        else:
            h = fs.open_file("zarr/exp.zarr/g/zarr.json.partial")
            h.write(b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')
            h.flush()
            h.release()
            fs.rename("zarr/exp.zarr/g/zarr.json.partial", f"zarr/exp.zarr/g/{'r' * 256}")
    assert exc.value.errno == errno.ENAMETOOLONG
    if op != "rename_target":  # (its temporary is scratch, never in the store)
        assert fs.state() == before
    refusals = [r for r in caplog.records if "ENAMETOOLONG" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in caplog.records]


def test_a_name_of_255_bytes_is_taken_in_every_view(fs):
    name = "é" * 127 + "x"  # 255 bytes
    fs.mkdir("zarr/exp.zarr/g")
    make_zarr_array(fs, f"zarr/exp.zarr/g/{name[:-4]}")  # 251 bytes: 255 as <name>.tif
    fs.mkdir(f"zarr/exp.zarr/g/{name}")
    assert {name, name[:-4]} <= set(fs.ls("n5/exp.n5/g"))
    assert f"{name[:-4]}.tif" in fs.ls("tiff/exp/g")
    assert {name, name[:-4]} <= h5_names(fs, "hdf5/exp.h5", "g")
    assert fs.ops.statfs is not None


# -- a dot-named image in tiff/ ------------------------------------------------------------------
def test_rm_of_a_dot_named_image_never_succeeds_without_removing_it(fs, caplog):
    make_zarr_array(fs, "zarr/exp.zarr/.hidden")
    assert ".hidden.tif" in fs.ls("tiff/exp")
    before = fs.state()
    caplog.set_level(logging.WARNING, logger="polyfs")
    caplog.clear()
    try:
        fs.unlink("tiff/exp/.hidden.tif")
    except OSError as exc:  # refused: said once, nothing changed
        assert exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.EINVAL)
        assert fs.state() == before
        assert ".hidden.tif" in fs.fresh(read_only=True).ls("tiff/exp")
        assert len([r for r in caplog.records if "unlink refused" in r.getMessage()]) == 1
    else:  # taken: the dataset is gone in every view
        again = fs.fresh(read_only=True)
        assert ".hidden" not in again.ls("zarr/exp.zarr")
        assert ".hidden.tif" not in again.ls("tiff/exp")


def test_a_rewrite_of_a_dot_named_image_is_stored_or_refused(fs, caplog):
    make_zarr_array(fs, "zarr/exp.zarr/.hidden")
    before = fs.state()
    new = (IMG[::-1] + 1).astype("u1")
    caplog.set_level(logging.WARNING, logger="polyfs")
    caplog.clear()
    try:
        fs.write_file("tiff/exp/.hidden.tif", tiff(new))
    except OSError as exc:  # refused at open or close: said once, nothing kept, nothing changed
        assert exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.EINVAL)
        assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 1
        assert fs.state() == before
        np.testing.assert_array_equal(tifffile.imread(io.BytesIO(fs.read_file("tiff/exp/.hidden.tif"))), IMG)
    else:  # stored: every view (and a remount) reads the new image
        again = fs.fresh(read_only=True)
        np.testing.assert_array_equal(read_zarr_array(again, "zarr/exp.zarr/.hidden")[1], new)
        np.testing.assert_array_equal(tifffile.imread(io.BytesIO(again.read_file("tiff/exp/.hidden.tif"))), new)


# -- unusual names made in one view, seen in all ------------------------------------------------
def test_unusual_names_made_in_zarr_are_the_same_names_in_every_view(fs):
    fs.mkdir("zarr/exp.zarr/g")
    fs.write_json("zarr/exp.zarr/g/zarr.json", zarr_group_meta())
    for i, name in enumerate(ODD):
        make_zarr_array(fs, f"zarr/exp.zarr/g/{name}", (IMG + i).astype("u1"))
    again = fs.fresh(read_only=True)
    assert set(again.ls("zarr/exp.zarr/g")) == set(ODD) | {"zarr.json"}
    assert set(again.ls("n5/exp.n5/g")) == set(ODD) | {"attributes.json"}
    assert set(again.ls("tiff/exp/g")) == {f"{n}.tif" for n in ODD}
    assert h5_names(again, "hdf5/exp.h5", "g") == set(ODD)
    with h5py.File(io.BytesIO(again.read_file("hdf5/exp.h5")), "r") as f:
        for i, name in enumerate(ODD):
            expect = (IMG + i).astype("u1")
            np.testing.assert_array_equal(f["g"][name][...], expect)
            np.testing.assert_array_equal(read_n5_array(again, f"n5/exp.n5/g/{name}")[1], expect)
            np.testing.assert_array_equal(tifffile.imread(io.BytesIO(again.read_file(f"tiff/exp/g/{name}.tif"))),
                                          expect)


def test_unusual_names_written_as_tiffs_are_removed_by_name(fs):
    fs.mkdir("tiff/exp/t")
    for name in ODD:
        fs.write_file(f"tiff/exp/t/{name}.tif", tiff(IMG))
    assert set(fs.ls("zarr/exp.zarr/t")) == set(ODD) | {"zarr.json"}
    for name in ODD:
        fs.unlink(f"tiff/exp/t/{name}.tif")
    again = fs.fresh(read_only=True)
    assert again.ls("tiff/exp/t") == []
    assert h5_names(again, "hdf5/exp.h5", "t") == set()


# -- a child named like a view's metadata file ------------------------------------------------
def make_n5_array(fs: FS, path: str, data: np.ndarray = IMG) -> None:
    fs.mkdir(path)
    fs.write_json(f"{path}/attributes.json", n5_attrs(data.shape, data.dtype, data.shape))
    fs.makedirs(f"{path}/0")
    fs.write_file(f"{path}/0/0", n5_block(data))


def metadata_child(fs: FS, view: str) -> tuple[str, str]:
    """Group ``g`` (with attribute ``keep``) holding a dataset named like ``view``'s metadata
    file, made through the other view; returns (the group's directory, its metadata file)."""
    fs.mkdir("zarr/exp.zarr/g")
    fs.write_json("zarr/exp.zarr/g/zarr.json", zarr_group_meta({"keep": 1}))
    if view == "zarr":
        make_n5_array(fs, "n5/exp.n5/g/zarr.json")
        return "zarr/exp.zarr/g", "zarr.json"
    make_zarr_array(fs, "zarr/exp.zarr/g/attributes.json")
    return "n5/exp.n5/g", "attributes.json"


def group_attrs(fs: FS) -> dict:
    with h5py.File(io.BytesIO(fs.read_file("hdf5/exp.h5")), "r") as f:
        return {k: (v.item() if hasattr(v, "item") else v) for k, v in f["g"].attrs.items()}


@pytest.mark.parametrize("view", ["zarr", "n5"])
@pytest.mark.parametrize("how", ["in_place", "renamed_over"])
def test_group_metadata_beside_a_child_of_its_name_is_stored_or_refused(fs, view, how):
    """zarr-python writes ``zarr.json`` as ``zarr.<uuid>.partial`` renamed over it; the write was
    routed to the hidden child of that name, kept as a scratch file and shown back, stored nowhere."""
    gdir, meta = metadata_child(fs, view)
    assert meta in fs.ls(gdir)  # the group's own metadata file
    shown = fs.read_json(f"{gdir}/{meta}")
    shown.setdefault("attributes", shown).update({"added": 2}) if view == "zarr" else shown.update({"added": 2})
    before = fs.state()
    try:
        if how == "in_place":
            fs.write_json(f"{gdir}/{meta}", shown)
        else:
            fs.write_json(f"{gdir}/tmp.partial", shown)
            fs.rename(f"{gdir}/tmp.partial", f"{gdir}/{meta}")
    except OSError as exc:  # refused: nothing stored, and the view shows the stored group again
        assert exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.EINVAL)
        assert fs.state() == before
        assert "added" not in json.dumps(fs.read_json(f"{gdir}/{meta}"))
    else:  # taken: the group has the attribute in every view, after a remount too
        assert group_attrs(fs.fresh(read_only=True)).get("added") == 2
    assert group_attrs(fs.fresh(read_only=True)).get("keep") == 1
    assert meta in h5_names(fs.fresh(read_only=True), "hdf5/exp.h5", "g")  # the child is kept


def test_a_child_named_like_the_metadata_file_is_logged_once(fs, caplog):
    caplog.set_level(logging.WARNING, logger="polyfs")
    gdir, meta = metadata_child(fs, "zarr")
    caplog.clear()
    for i in range(3):
        make_zarr_array(fs, f"zarr/exp.zarr/g/x{i}")  # a change: the group is rendered again
        assert fs.ls(gdir).count(meta) == 1
    said = [r for r in caplog.records if "named like the view's metadata file" in r.getMessage()]
    assert len(said) <= 1


# -- HDF5 names no file system can list ---------------------------------------------------------
def test_a_dataset_named_dot_dot_is_not_listed_as_a_directory_entry(fs, caplog):
    """HDF5 takes ``..`` as a link name; ``polyfs import`` and a new file written into ``hdf5/``
    refuse it, but h5py ``"r+"`` on a domain's file stored it: ``zarr/`` and ``n5/`` then listed
    an entry ``..`` (the parent directory to every tool: ``find`` and ``rm -r`` walk up, the
    dataset unreachable). Such a name is refused, or left out of those views (one log line)."""
    make_zarr_array(fs, "zarr/exp.zarr/x")
    before = fs.read_file("hdf5/exp.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        for name in ["..", "...", " "]:
            f.create_dataset(name, data=IMG)
    caplog.set_level(logging.WARNING, logger="polyfs")
    try:
        write_changes(fs, "hdf5/exp.h5", before, buf.getvalue())
    except OSError as exc:  # refused as the import refuses it
        assert exc.errno == errno.EINVAL
        assert h5_names(fs.fresh(read_only=True), "hdf5/exp.h5") == {"x"}
        return
    again = fs.fresh(read_only=True)
    assert h5_names(again, "hdf5/exp.h5") == {"..", "...", " ", "x"}
    for view in ["zarr/exp.zarr", "n5/exp.n5"]:
        for _ in range(2):
            listed = again.ls(view)
            assert ".." not in listed and "." not in listed
            assert {"...", " ", "x"} <= set(listed)
    assert {"...tif", " .tif", "x.tif"} <= set(again.ls("tiff/exp"))
    said = [r for r in caplog.records if "'..'" in r.getMessage()]
    assert 1 <= len(said) <= 2  # once per view that leaves it out
