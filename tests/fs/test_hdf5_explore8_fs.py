"""The HDF5 view, exploratory round 8 (operations awaited directly, no kernel).

- Sequences of a byte-swapped base type (``H5T_VLEN {H5T_STD_U64BE}`` on this little-endian
  machine; pyfive's ``attr_datatypes.hdf5`` has such an attribute) came back byte-swapped:
  ``h5dump`` of the original printed ``(1, 2), (3, 4, 5), (42)``, of the view
  ``(72057594037927936, 144115188075855872), ...``, and ``h5diff`` found differences. h5py
  reads such sequences as native-labelled arrays holding the file's bytes, and import (and
  every write through ``hdf5/``) stored those values. They are read as the file holds them.
"""
from __future__ import annotations

import io
import shutil
import subprocess

import h5py
import numpy as np
import pytest
from writeharness import FS, write_changes

from polyfs.importers import import_source


def _fs(tmp_path) -> FS:
    (tmp_path / "store").mkdir(exist_ok=True)
    return FS(f"file://{tmp_path / 'store'}")


def _h5dump(path) -> str:
    """``h5dump`` of a file without its first line (the file's name)."""
    if shutil.which("h5dump") is None:
        pytest.skip("h5dump is not installed")
    res = subprocess.run(["h5dump", str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.split("\n", 1)[1]


# -- sequences of a byte-swapped base type -----------------------------------------------------------

def _swapped_sequences(path) -> None:
    """Sequences of big-endian integers and floats: an attribute, a dataset, a scalar dataset and
    a compound member (as pyfive's attr_datatypes.hdf5 and files written on s390x hold them)."""
    u8 = np.empty(3, dtype=object)
    for i, seq in enumerate(([1, 2], [3, 4, 5], [42])):
        u8[i] = np.array(seq, dtype=">u8")
    cdt = np.dtype([("n", "<i4"), ("seq", h5py.vlen_dtype(np.dtype(">i2")))])
    comp = np.empty(2, dtype=cdt)
    comp["n"] = [1, 2]
    comp[0]["seq"] = np.array([1, 2], dtype=">i2")
    comp[1]["seq"] = np.array([300], dtype=">i2")
    with h5py.File(path, "w") as f:
        f.attrs.create("vlen_uint64", u8, dtype=h5py.vlen_dtype(np.dtype(">u8")))
        f.attrs.create("compound", comp)
        d = f.create_dataset("seqs", shape=(2,), dtype=h5py.vlen_dtype(np.dtype(">i4")))
        d[0] = np.array([1, 2], dtype=">i4")
        d[1] = np.array([-3], dtype=">i4")
        f.create_dataset("scalar", shape=(), dtype=h5py.vlen_dtype(np.dtype(">f8")))
        f["scalar"][()] = np.array([1.5, 2.5], dtype=">f8")
        f.create_dataset("native", shape=(1,), dtype=h5py.vlen_dtype(np.dtype("<i4")))
        f["native"][0] = np.array([7, 8], dtype="<i4")


def _assert_same_sequences(original, view: bytes, tmp_path) -> None:
    copy = tmp_path / "view.h5"
    copy.write_bytes(view)
    dumped = _h5dump(copy)
    assert "(1, 2), (3, 4, 5), (42)" in dumped
    assert dumped == _h5dump(original)
    # h5py reads both the same way (its own reading of such sequences is the same for both)
    with h5py.File(original, "r") as a, h5py.File(io.BytesIO(view), "r") as b:
        for x, y in zip(a.attrs["vlen_uint64"], b.attrs["vlen_uint64"]):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(a["seqs"][()], b["seqs"][()]):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(a["scalar"][()], b["scalar"][()])
        np.testing.assert_array_equal(a["native"][0], b["native"][0])


def test_sequences_of_a_byte_swapped_type_keep_their_values_through_cp(tmp_path):
    src = tmp_path / "src.h5"
    _swapped_sequences(src)
    fs = _fs(tmp_path)
    fs.write_file("hdf5/v.h5", src.read_bytes())
    _assert_same_sequences(src, fs.fresh(read_only=True).read_file("hdf5/v.h5"), tmp_path)


def test_sequences_of_a_byte_swapped_type_keep_their_values_through_import(tmp_path):
    src = tmp_path / "src.h5"
    _swapped_sequences(src)
    import_source(src, str(tmp_path / "store"), domain="/v.h5", progress=False)
    _assert_same_sequences(src, FS(f"file://{tmp_path / 'store'}").read_file("hdf5/v.h5"), tmp_path)


def test_an_r_plus_session_rewriting_swapped_sequences_keeps_them(tmp_path):
    """A session that writes one element of such a dataset (its chunk is read back through
    HDF5) and adds an attribute leaves every other value as the file holds it."""
    src = tmp_path / "src.h5"
    _swapped_sequences(src)
    fs = _fs(tmp_path)
    fs.write_file("hdf5/v.h5", src.read_bytes())
    before = fs.read_file("hdf5/v.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        f["seqs"][1] = np.array([9, 10, 11], dtype=">i4")
        f.attrs["other"] = 1
    write_changes(fs, "hdf5/v.h5", before, buf.getvalue())
    with h5py.File(src, "r+") as f:  # the same session on a local copy
        f["seqs"][1] = np.array([9, 10, 11], dtype=">i4")
        f.attrs["other"] = 1
    _assert_same_sequences(src, fs.fresh(read_only=True).read_file("hdf5/v.h5"), tmp_path)


# -- an attribute written again: last in creation order ------------------------------------------------

def _tracked_attributes(path, names) -> None:
    """A file whose root tracks attribute creation order (netCDF-4's, CMOR's global attributes)."""
    with h5py.File(path, "w", track_order=True) as f:
        for name in names:
            f.attrs[name] = f"{name} value"
        f.create_dataset("noy", data=np.arange(6.0), chunks=(3,), compression="gzip")


def _append_history(f, move: bool) -> None:
    """``d.history += ...`` (netCDF-C and h5py delete the attribute and make it again, last in
    creation order now), with netCDF-C's ``renameVariable`` (a moved link) in the same session."""
    if move:
        f.move("noy", "noy2")
    old = f.attrs["history"]
    del f.attrs["history"]
    f.attrs["history"] = old + "\nedited"


@pytest.mark.parametrize("names, move", [
    (("title", "history", "Conventions"), True),  # the session also changed the group's links
    (("Conventions", "history", "institution", "title"), False),  # made in name order (CMOR's)
    (("Conventions", "history", "institution", "title"), True),
])
def test_an_attribute_written_again_moves_last_as_in_a_local_file(tmp_path, names, move):
    """``ncdump -h`` of the view kept ``:history`` where it was after ``d.history += ...``, a
    local file lists it last: (1) the group's new attribute order was dropped when the same
    session also changed its links (a variable renamed or added: one change for the group, its
    order lost in the merge); (2) attributes that happened to be made in name order (CMOR
    writes global attributes so) were taken for a file that tracks no order and kept theirs."""
    src = tmp_path / "src.h5"
    _tracked_attributes(src, names)
    fs = _fs(tmp_path)
    fs.write_file("hdf5/c.nc", src.read_bytes())
    before = fs.read_file("hdf5/c.nc")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        _append_history(f, move)
    write_changes(fs, "hdf5/c.nc", before, buf.getvalue())
    with h5py.File(src, "r+") as f:
        _append_history(f, move)
    with h5py.File(src, "r") as a, h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/c.nc")), "r") as b:
        assert list(a.attrs)[-1] == "history"
        assert list(b.attrs) == list(a.attrs)
        assert b.attrs["history"] == "history value\nedited"
        assert list(b) == ["noy2" if move else "noy"]
        np.testing.assert_array_equal(b[list(b)[0]][()], np.arange(6.0))


# -- enums keep their byte order ------------------------------------------------------------------

def _enums(path) -> None:
    """Enum data holding values no member names (0, 7: netCDF's unwritten elements, flag
    combinations), contiguous and uncompressed as h5py and netCDF-C write them by default."""
    e4 = h5py.enum_dtype({"a": 1, "b": 2}, basetype=np.dtype("<i4"))
    e1 = h5py.enum_dtype({"stratus": 1, "missing": 255}, basetype=np.dtype("u1"))
    with h5py.File(path, "w") as f:
        f.create_dataset("contig", data=np.array([1, 2, 0, 7], "<i4"), dtype=e4)
        f.create_dataset("chunked_raw", data=np.array([1, 2, 0, 7], "<i4"), dtype=e4, chunks=(2,))
        f.create_dataset("cloud", data=np.array([1, 255, 0, 3], "u1"), dtype=e1)


def test_enum_data_keeps_its_byte_order_so_unnamed_values_read_the_same(tmp_path):
    """Enum data the view re-encodes (contiguous, uncompressed) was stored big-endian. HDF5
    converts enums between orders by member name, so ``h5dump`` of the view printed a value no
    member names as ``ff:ff:ff:ff`` (the original ``00:00:00:00``) and ``h5diff`` found
    differences in a plain ``cp``; h5py read the type as ``>i4``, not the ``<i4`` written."""
    src = tmp_path / "src.h5"
    _enums(src)
    fs = _fs(tmp_path)
    fs.write_file("hdf5/e.h5", src.read_bytes())
    view = tmp_path / "view.h5"
    view.write_bytes(fs.fresh(read_only=True).read_file("hdf5/e.h5"))
    with h5py.File(src, "r") as a, h5py.File(view, "r") as b:
        for name in a:
            assert b[name].dtype == a[name].dtype, name  # the same byte order
            np.testing.assert_array_equal(b[name][()], a[name][()])
    assert _h5dump(view) == _h5dump(src)
    z = fs.fresh(read_only=True)
    assert z.read_json("zarr/e.zarr/contig/zarr.json")["data_type"] == "int32"


def test_an_r_plus_session_writing_unnamed_enum_values_stores_them(tmp_path):
    src = tmp_path / "src.h5"
    _enums(src)
    fs = _fs(tmp_path)
    fs.write_file("hdf5/e.h5", src.read_bytes())
    before = fs.read_file("hdf5/e.h5")
    buf = io.BytesIO(before)
    for f in (h5py.File(buf, "r+"), h5py.File(src, "r+")):
        with f:
            f["cloud"][0] = 0
            f["contig"][1] = 9
    write_changes(fs, "hdf5/e.h5", before, buf.getvalue())
    view = tmp_path / "view.h5"
    view.write_bytes(fs.fresh(read_only=True).read_file("hdf5/e.h5"))
    with h5py.File(view, "r") as b:
        np.testing.assert_array_equal(b["cloud"][()], [0, 255, 0, 3])
        np.testing.assert_array_equal(b["contig"][()], [1, 9, 0, 7])
    assert _h5dump(view) == _h5dump(src)


# -- data that is all fill values, but written -------------------------------------------------------

def test_written_data_equal_to_the_fill_value_keeps_storage(tmp_path):
    """A contiguous dataset written with zeros (h5py ``create_dataset(data=np.zeros(...))``,
    netCDF-C's fill mode writing ``_FillValue`` into every variable it creates) was stored with
    no chunk, so the view's dataset had no storage: ``h5diff`` said "Some objects are not
    comparable" (" ... is an empty dataset") of a plain ``cp``. One chunk is stored for it.
    A dataset the file never wrote stays without storage, as in the file."""
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("zeros", data=np.zeros((3, 4), "f4"))
        f.create_dataset("filled", data=np.full(5, -9, "i2"), fillvalue=-9)
        f.create_dataset("unwritten", shape=(6,), dtype="f8")
        f.create_dataset("some", data=np.array([0, 0, 1.5]))
    fs = _fs(tmp_path)
    fs.write_file("hdf5/z.h5", src.read_bytes())
    with h5py.File(src, "r") as a, h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/z.h5")), "r") as b:
        for name in a:
            np.testing.assert_array_equal(b[name][()], a[name][()])
            assert bool(b[name].id.get_storage_size()) == bool(a[name].id.get_storage_size()), name
    if shutil.which("h5diff"):
        view = tmp_path / "view.h5"
        view.write_bytes(fs.fresh(read_only=True).read_file("hdf5/z.h5"))
        res = subprocess.run(["h5diff", "-c", str(src), str(view)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and "not comparable" not in res.stdout, res.stdout


# -- AnnData and loompy files ----------------------------------------------------------------------

@pytest.mark.parametrize("ending", [".h5ad", ".loom"])
def test_new_anndata_and_loom_files_are_domains_that_keep_their_names(tmp_path, ending):
    """anndata's ``write_h5ad`` and loompy write HDF5 files named ``.h5ad`` and ``.loom``:
    creating one in ``hdf5/`` was refused (EPERM, "a new domain here as <name>.h5 or ...").
    It is a domain ``/<name><ending>``, shown under its own name, as ``.nc`` and ``.nwb`` are,
    and ``polyfs import`` of such a file names its domain ``/<stem>.h5``."""
    local = tmp_path / f"local{ending}"
    with h5py.File(local, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.create_dataset("X", data=np.arange(12.0).reshape(3, 4))
        f.create_dataset("obs/_index", data=np.array([b"c1", b"c2", b"c3"]))
    fs = _fs(tmp_path)
    fs.write_file(f"hdf5/cells{ending}", local.read_bytes())
    view = fs.fresh(read_only=True)
    assert f"cells{ending}" in view.ls("hdf5")
    with h5py.File(io.BytesIO(view.read_file(f"hdf5/cells{ending}")), "r") as f:
        assert f.attrs["encoding-type"] == "anndata"
        np.testing.assert_array_equal(f["X"][()], np.arange(12.0).reshape(3, 4))
        assert list(f["obs/_index"][()]) == [b"c1", b"c2", b"c3"]
    assert import_source(local, f"file://{tmp_path / 'store'}", progress=False) == "/local.h5"
