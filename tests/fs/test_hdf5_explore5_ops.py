"""Writes through the HDF5 view found in exploratory round 5 (operations awaited directly).

- A scalar dataset of a variable-length type (h5py ``create_dataset("s", data="hello")``,
  a scalar sequence) is converted data: a session that changed *another* dataset (a
  resize, one value) rewrote the page holding its heap, so it was read back through HDF5
  and encoded again; the element was put into its block as the 0-d array holding it, and
  the stored string became that array's memory (a pointer: garbage, a different one each
  time, in every view). The element is stored. A file holding a scalar of an array type
  or a scalar sequence could not be imported or written at all.
- netCDF-C's ``renameVariable``/``renameDimension`` make the group's later variables' links
  again, after the renamed one: the commit kept their old creation times, so the view (and
  ``ncdump``, which lists variables in creation order) moved the renamed variable last.
"""
from __future__ import annotations

import io

import h5py
import numpy as np
import pytest

from polyfs.importers import import_source
from writeharness import FS, copy_tree, write_changes

netCDF4 = pytest.importorskip("netCDF4")
zarr = pytest.importorskip("zarr")

STR = h5py.string_dtype()


def _source(path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("s", data="hello")
        f.create_dataset("b", data=b"raw bytes", dtype=h5py.string_dtype("ascii"))
        f.create_dataset("seq", shape=(), dtype=h5py.vlen_dtype("i4"))
        f["seq"][()] = np.arange(5, dtype="i4")
        f.create_dataset("fixed", data=np.bytes_(b"fix"))
        f.create_dataset("num", data=2.5)
        f.create_dataset("vec", shape=(), dtype=np.dtype("(3,)i4"))
        f["vec"][()] = [1, 2, 3]
        f.create_dataset("z", data=np.complex64(1 - 2j))
        cmp = np.dtype([("name", STR), ("v", "i4")])
        f.create_dataset("rec", shape=(), dtype=cmp)
        f["rec"][()] = ("rec-name", 7)
        f.create_dataset("strs", data=["ab", "cde"], dtype=STR)
        f.create_dataset("grow", data=np.arange(20.0).reshape(4, 5), chunks=(2, 2), maxshape=(None, None))


def _check(f: h5py.File) -> None:
    assert f["s"][()] == b"hello"
    assert f["b"][()] == b"raw bytes"
    np.testing.assert_array_equal(f["seq"][()], np.arange(5))
    assert f["fixed"][()] == b"fix"
    assert f["num"][()] == 2.5
    np.testing.assert_array_equal(f["vec"][()], [1, 2, 3])
    assert f["z"][()] == np.complex64(1 - 2j)
    rec = f["rec"][()]
    assert (rec["name"], int(rec["v"])) == (b"rec-name", 7)
    assert list(f["strs"][()]) == [b"ab", b"cde"]


@pytest.mark.parametrize("change", ["resize", "value", "attribute"])
def test_scalar_variable_length_data_survives_a_session_that_changed_something_else(tmp_path, change):
    src = tmp_path / "s.h5"
    _source(src)
    import_source(src, str(tmp_path / "store"), progress=False)
    fs = FS(f"file://{tmp_path / 'store'}")
    for _ in range(2):  # twice: a second session re-encodes what the first stored
        before = fs.read_file("hdf5/s.h5")
        buf = io.BytesIO(before)
        with h5py.File(buf, "r+") as f:
            _check(f)
            if change == "resize":
                f["grow"].resize((7, 9))
            elif change == "value":
                f["grow"][0, 0] += 1
            else:
                f.attrs["n"] = f.attrs.get("n", 0) + 1
            f["num"][()] = 2.5
        write_changes(fs, "hdf5/s.h5", before, buf.getvalue())
        with h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/s.h5"))) as f:
            _check(f)
    assert fs.read_json("zarr/s.zarr/s/zarr.json")["data_type"] == "string"
    z = zarr.open_group(str(copy_tree(fs, "zarr/s.zarr", tmp_path / "z.zarr")), mode="r")
    assert z["s"][()] == "hello"


def test_a_scalar_string_written_in_place_is_stored(tmp_path):
    src = tmp_path / "s.h5"
    _source(src)
    import_source(src, str(tmp_path / "store"), progress=False)
    fs = FS(f"file://{tmp_path / 'store'}")
    before = fs.read_file("hdf5/s.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        f["s"][()] = "a longer replacement string"
        f["seq"][()] = np.arange(9, dtype="i4")
        f["rec"][()] = ("other", 8)
    write_changes(fs, "hdf5/s.h5", before, buf.getvalue())
    with h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/s.h5"))) as f:
        assert f["s"][()] == b"a longer replacement string"
        np.testing.assert_array_equal(f["seq"][()], np.arange(9))
        rec = f["rec"][()]
        assert (rec["name"], int(rec["v"])) == (b"other", 8)


# -- link creation order kept from the file ----------------------------------------------------

def _corder(f: h5py.File, path: str = "/") -> list[str]:
    g = f[path]
    return [n for _, n in sorted((g.id.links.get_info(n.encode()).corder, n) for n in g)]


def _rename(path) -> None:
    with netCDF4.Dataset(path, "a") as nc:
        nc.renameVariable("flag", "flag2")
        nc.renameDimension("x", "xx")


def test_links_a_writer_made_again_keep_the_files_creation_order(tmp_path):
    """netCDF-C's renameVariable relinks the variables made after the renamed one: the
    file lists the renamed variable before them, and so must the view after the commit
    (ncdump lists variables in creation order)."""
    src = tmp_path / "r.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("t", None)
        nc.createDimension("x", 4)
        nc.createVariable("a", "f4", ("t", "x"))[0] = np.arange(4)
        nc.createVariable("flag", "i1", ("x",))[:] = [1, 0, 1, 1]
        for name in ("b", "c"):
            nc.createVariable(name, "f8", ("x",))[:] = np.arange(4.0)
    import_source(src, str(tmp_path / "store"), domain="/r.nc", progress=False)
    fs = FS(f"file://{tmp_path / 'store'}")
    before = fs.read_file("hdf5/r.nc")
    local = tmp_path / "local.nc"
    local.write_bytes(before)
    _rename(local)
    after = local.read_bytes()
    write_changes(fs, "hdf5/r.nc", before, after)
    shown = tmp_path / "shown.nc"
    shown.write_bytes(fs.fresh(read_only=True).read_file("hdf5/r.nc"))
    with h5py.File(local) as a, h5py.File(shown) as b:
        assert _corder(b) == _corder(a)
        assert _corder(b).index("flag2") < _corder(b).index("b")
    with netCDF4.Dataset(local) as a, netCDF4.Dataset(shown) as b:
        assert list(b.variables) == list(a.variables)
        np.testing.assert_array_equal(b["flag2"][:], [1, 0, 1, 1])
