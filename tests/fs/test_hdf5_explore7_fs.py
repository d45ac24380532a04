"""The HDF5 view, exploratory round 7 (operations awaited directly, no kernel).

- The view's file always had superblock version 0. A file written with ``libver="latest"``
  (superblock 3), the usual start of an SWMR workflow, came back as version 0, so reopening
  it to append with SWMR (``h5py.File(p, "r+", libver="latest"); f.swmr_mode = True``) failed:
  "Unable to start swmr writing (file superblock version - should be at least 3)". The
  superblock version of a written or imported file (netCDF-C writes 2) is kept with the
  domain and the view renders it (a file of superblock 0 and files made otherwise keep 0).
- A new ``hdf5/<name>.nwb`` (pynwb) was refused with EPERM: it is a domain keeping its name.
- Objects that track no attribute creation order (h5py's default, netCDF-C's objects made in
  an ``"a"`` session) had their attributes stored by name and shown tracked in that order:
  netCDF-C and pyfive, which list such an object's attributes in header order, saw another
  order than in the file. The header order is kept and the view's header tracks none.
- Names and link targets that are not UTF-8: a TypeError (import, ``cp``), a soft link
  stored as ``"b'/\\xe9t\\xe9'"``, an external link that made the domain's file vanish;
  refused by name (EOPNOTSUPP). A latin-1 group name made through ``zarr/`` no longer makes
  the HDF5 file vanish.
"""
from __future__ import annotations

import errno
import io
import os

import h5py
import numpy as np
import pytest
from writeharness import FS, write_changes

from polyfs.importers import import_source


def _superblock_version(data: bytes) -> int:
    assert data[:8] == b"\x89HDF\r\n\x1a\n"
    return data[8]


def _swmr_source(path, libver) -> None:
    with h5py.File(path, "w", libver=libver) as f:
        d = f.create_dataset("d", shape=(0, 4), maxshape=(None, 4), chunks=(2, 4), dtype="f8")
        f.attrs["title"] = "swmr"
        d.resize((2, 4))
        d[:] = 1.0


def _fs(tmp_path) -> FS:
    (tmp_path / "store").mkdir(exist_ok=True)
    return FS(f"file://{tmp_path / 'store'}")


def _file_superblock(path) -> int:
    with h5py.File(path, "r") as f:
        return f.id.get_create_plist().get_version()[0]


@pytest.mark.parametrize("libver, version", [("latest", 3), ("v108", 2), ("earliest", 0)])
def test_written_files_keep_their_superblock_version(tmp_path, libver, version):
    local = tmp_path / "local.h5"
    _swmr_source(local, libver)
    assert _file_superblock(local) == version
    fs = _fs(tmp_path)
    fs.write_file("hdf5/sw.h5", local.read_bytes())
    data = fs.fresh(read_only=True).read_file("hdf5/sw.h5")
    assert _superblock_version(data) == version
    with h5py.File(io.BytesIO(data), "r") as f:
        np.testing.assert_array_equal(f["d"][()], np.ones((2, 4)))
        assert f.attrs["title"] == "swmr"


def test_an_swmr_writer_appends_to_a_file_written_with_libver_latest(tmp_path):
    local = tmp_path / "local.h5"
    _swmr_source(local, "latest")
    fs = _fs(tmp_path)
    fs.write_file("hdf5/sw.h5", local.read_bytes())
    for step in range(2):  # twice: the session's own commit keeps the version
        before = fs.read_file("hdf5/sw.h5")
        buf = io.BytesIO(before)
        with h5py.File(buf, "r+", libver="latest") as f:
            f.swmr_mode = True
            d = f["d"]
            d.resize((d.shape[0] + 2, 4))
            d[-2:] = step + 2
            d.flush()
        write_changes(fs, "hdf5/sw.h5", before, buf.getvalue())
    data = fs.fresh(read_only=True).read_file("hdf5/sw.h5")
    assert _superblock_version(data) == 3
    with h5py.File(io.BytesIO(data), "r") as f:
        np.testing.assert_array_equal(f["d"][:, 0], [1, 1, 2, 2, 3, 3])
    z = fs.fresh(read_only=True).read_json("zarr/sw.zarr/d/zarr.json")
    assert z["shape"] == [6, 4]


def test_import_keeps_the_superblock_version_of_a_netcdf4_file(tmp_path):
    netCDF4 = pytest.importorskip("netCDF4")
    src = tmp_path / "n.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("t", None)
        nc.createVariable("t", "f8", ("t",))[:] = np.arange(3.0)
    assert _file_superblock(src) == 2
    import_source(src, str(tmp_path / "store"), domain="/n.nc", progress=False)
    fs = FS(f"file://{tmp_path / 'store'}")
    data = fs.read_file("hdf5/n.nc")
    assert _superblock_version(data) == 2
    with netCDF4.Dataset("mem", memory=data) as nc:
        np.testing.assert_array_equal(nc["t"][:], np.arange(3.0))


def test_a_domain_made_through_zarr_keeps_superblock_zero(tmp_path):
    fs = _fs(tmp_path)
    fs.mkdir("zarr/z.zarr")
    fs.write_json("zarr/z.zarr/zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {"a": 1}})
    data = fs.fresh(read_only=True).read_file("hdf5/z.h5")
    assert _superblock_version(data) == 0
    with h5py.File(io.BytesIO(data), "r") as f:
        assert f.attrs["a"] == 1


# -- .nwb files ----------------------------------------------------------------------------------

def test_a_new_nwb_file_is_a_domain_that_keeps_its_name(tmp_path):
    """NWB files are HDF5 files named ``.nwb`` (pynwb's ``NWBHDF5IO(path, "w")``): creating one
    in ``hdf5/`` was refused (EPERM, "a new domain here as <name>.h5 or ..."); it is a domain
    ``/<name>.nwb``, shown as ``hdf5/<name>.nwb``, as ``.nc`` files are."""
    local = tmp_path / "local.nwb"
    with h5py.File(local, "w") as f:
        f.attrs["neurodata_type"] = "NWBFile"
        f.create_dataset("acquisition/ts/data", data=np.arange(6.0))
    fs = _fs(tmp_path)
    fs.write_file("hdf5/session.nwb", local.read_bytes())
    view = fs.fresh(read_only=True)
    assert "session.nwb" in view.ls("hdf5")
    assert "session.nwb.zarr" in view.ls("zarr")
    with h5py.File(io.BytesIO(view.read_file("hdf5/session.nwb")), "r") as f:
        assert f.attrs["neurodata_type"] == "NWBFile"
        np.testing.assert_array_equal(f["acquisition/ts/data"][()], np.arange(6.0))


# -- attribute order of objects that track none ----------------------------------------------------

def _ncattrs(data: bytes) -> dict[str, list[str]]:
    """netCDF-C's attribute order of every variable and group (its native iteration)."""
    netCDF4 = pytest.importorskip("netCDF4")
    out: dict[str, list[str]] = {}
    with netCDF4.Dataset("mem", memory=data) as nc:
        def walk(g, path):
            out[path or "/"] = g.ncattrs()
            for name, v in g.variables.items():
                out[f"{path}/{name}"] = v.ncattrs()
            for name, sub in g.groups.items():
                walk(sub, f"{path}/{name}")
        walk(nc, "")
    return out


def _append_session(nc) -> None:
    v = nc.createVariable("b", "f4", ("x",))
    v.zeta, v.alpha, v.mid = 1, 2, 3  # made in an "a" session: no creation order tracked
    g = nc.createGroup("g")
    g.zz, g.aa = 1, 2
    nc["a"].late = 4


def test_netcdf_a_session_objects_keep_their_attribute_order(tmp_path):
    """netCDF-C makes objects in an ``"a"`` session without attribute creation order; it lists
    their attributes in header order (``zeta, alpha``), h5py by name. The view stored them by
    name and tracked that order: ``ncdump`` of the view listed ``alpha, zeta``."""
    netCDF4 = pytest.importorskip("netCDF4")
    local = tmp_path / "local.nc"
    with netCDF4.Dataset(local, "w") as nc:
        nc.createDimension("x", 3)
        v = nc.createVariable("a", "f4", ("x",))
        v.zeta, v.alpha = 1, 2
    fs = _fs(tmp_path)
    fs.write_file("hdf5/o.nc", local.read_bytes())
    before = fs.read_file("hdf5/o.nc")
    path = tmp_path / "view.nc"
    path.write_bytes(before)
    for p in (local, path):
        with netCDF4.Dataset(p, "a") as nc:
            _append_session(nc)
    write_changes(fs, "hdf5/o.nc", before, path.read_bytes())
    data = fs.fresh(read_only=True).read_file("hdf5/o.nc")
    want = _ncattrs(local.read_bytes())
    assert want["/b"] == ["zeta", "alpha", "mid"] and want["/g"] == ["zz", "aa"]
    assert _ncattrs(data) == want
    with h5py.File(local, "r") as a, h5py.File(io.BytesIO(data), "r") as b:
        for name in ("a", "b", "g"):
            assert list(b[name].attrs) == list(a[name].attrs)  # h5py: by name where untracked


def test_h5py_files_keep_header_order_for_native_readers(tmp_path):
    """An h5py file (no creation order tracked): h5py lists attributes by name, netCDF-C and
    pyfive in the header's order; the view shows each reader what the file showed it, also
    after an ``r+`` session adds some."""
    pyfive = pytest.importorskip("pyfive")
    src = tmp_path / "p.h5"
    with h5py.File(src, "w") as f:
        f.attrs.update({"zz": 1, "aa": 2, "mm": 3})
        d = f.create_dataset("d", data=np.arange(3))
        d.attrs.update({"units": "m", "axis": "X", "calendar": "c"})
        f.create_group("empty")
    import_source(src, str(tmp_path / "store"), domain="/p.h5", progress=False)
    fs = FS(f"file://{tmp_path / 'store'}")
    before = fs.read_file("hdf5/p.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        f["empty"].attrs["z2"], f["empty"].attrs["a2"] = 1, 2
        f.attrs["new"] = 4
    with h5py.File(src, "r+") as f:
        f["empty"].attrs["z2"], f["empty"].attrs["a2"] = 1, 2
        f.attrs["new"] = 4
    write_changes(fs, "hdf5/p.h5", before, buf.getvalue())
    data = fs.fresh(read_only=True).read_file("hdf5/p.h5")
    view = tmp_path / "view.h5"
    view.write_bytes(data)
    with h5py.File(src, "r") as a, h5py.File(view, "r") as b:
        for name in ("/", "d", "empty"):
            assert list(b[name].attrs) == list(a[name].attrs) == sorted(a[name].attrs)
    for name in ("/", "d", "empty"):
        got = list(pyfive.File(str(view))[name].attrs)
        assert got == list(pyfive.File(str(src))[name].attrs)
    assert list(pyfive.File(str(view))["d"].attrs) == ["units", "axis", "calendar"]
    assert list(pyfive.File(str(view))["empty"].attrs) == ["z2", "a2"]


# -- names that are not UTF-8 ----------------------------------------------------------------------

def _latin1_names(path, what: str) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("ok", data=np.arange(3))
        if what == "link":
            f.create_dataset(b"\xe9t\xe9", data=np.arange(3))  # latin-1 "été"
        elif what == "attribute":
            f["ok"].attrs.create(b"\xe9t\xe9", 1)


@pytest.mark.parametrize("what", ["link", "attribute"])
def test_a_name_that_is_not_utf8_is_refused_by_name(tmp_path, what):
    """A link or attribute name that is not UTF-8 (an old latin-1 file) failed the import and
    a copy into ``hdf5/`` with "TypeError: can only concatenate str (not "bytes") to str"; it
    is refused naming it and why (the store keeps names as text), the store unchanged."""
    from polyfs.errors import UnsupportedSource

    src = tmp_path / "latin.h5"
    _latin1_names(src, what)
    (tmp_path / "store").mkdir()
    with pytest.raises(UnsupportedSource, match=r"b'\\xe9t\\xe9'.*not UTF-8"):
        import_source(src, str(tmp_path / "store"), domain="/latin.h5", progress=False)
    fs = _fs(tmp_path)
    h = fs.open_file("hdf5/latin.h5")
    h.write(src.read_bytes(), 0)
    with pytest.raises(OSError) as err:
        h.flush()
    h.release()
    assert err.value.errno == errno.EOPNOTSUPP
    assert "latin.h5" not in fs.fresh(read_only=True).ls("hdf5")


def test_an_r_plus_session_adding_a_name_that_is_not_utf8_is_refused(tmp_path):
    src = tmp_path / "s.h5"
    _latin1_names(src, "none")
    import_source(src, str(tmp_path / "store"), domain="/s.h5", progress=False)
    fs = FS(f"file://{tmp_path / 'store'}")
    before = fs.read_file("hdf5/s.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        f.create_dataset(b"\xe9", data=np.arange(2))
        f["ok"][0] = 7
    with pytest.raises(OSError) as err:
        write_changes(fs, "hdf5/s.h5", before, buf.getvalue())
    assert err.value.errno == errno.EOPNOTSUPP  # what the store cannot hold, not a damaged file
    with h5py.File(io.BytesIO(fs.fresh(read_only=True).read_file("hdf5/s.h5")), "r") as f:
        assert list(f) == ["ok"] and f["ok"][0] == 0


@pytest.mark.parametrize("kind", ["soft", "external"])
def test_a_link_target_that_is_not_utf8_is_refused(tmp_path, kind):
    """h5py gives a soft link's target that is not UTF-8 as ``str()`` of its bytes, which the
    import stored as the target (``"b'/\\xe9t\\xe9'"``: silently another link), and an external
    link's file with surrogates, which made the domain's view fail (``cannot stat``). Both are
    refused naming the link; targets that are text are kept exactly."""
    from polyfs.errors import UnsupportedSource

    src = tmp_path / "t.h5"
    with h5py.File(src, "w") as f:
        f["ok"] = 1
        f["soft_ok"] = h5py.SoftLink("/ok")
        f["ext_ok"] = h5py.ExternalLink("other ü.h5", "/x")
        if kind == "soft":
            f.id.links.create_soft(b"bad", b"/\xe9t\xe9")
        else:
            f.id.links.create_external(b"bad", b"\xe9.h5", b"/x")
    (tmp_path / "store").mkdir()
    with pytest.raises(UnsupportedSource, match="link /bad: its target is not UTF-8"):
        import_source(src, str(tmp_path / "store"), domain="/t.h5", progress=False)
    with h5py.File(src, "r+") as f:
        del f["bad"]
    import_source(src, str(tmp_path / "store"), domain="/t.h5", progress=False)
    fs = FS(f"file://{tmp_path / 'store'}")
    with h5py.File(io.BytesIO(fs.read_file("hdf5/t.h5")), "r") as f:
        assert f.get("soft_ok", getlink=True).path == "/ok"
        ext = f.get("ext_ok", getlink=True)
        assert (ext.filename, ext.path) == ("other ü.h5", "/x")


def test_a_group_named_with_latin1_bytes_through_zarr_keeps_the_domain_in_hdf5(tmp_path):
    """A group with a latin-1 name (``caf\\xe9``; ``mkdir`` in ``zarr/`` stored one before such
    names were refused there, tests/fs/test_write_explore7_fs.py): the HDF5 view failed to
    render the whole domain ("cannot stat hdf5/x.h5: 'utf-8' codec can't encode character
    '\\udce9'"): the file vanished from ``hdf5/``. It is there, the group named by those bytes,
    as on a disk."""
    fs = _fs(tmp_path)
    fs.mkdir("zarr/lat.zarr")
    fs.write_json("zarr/lat.zarr/zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {"t": 1}})
    name = os.fsdecode(b"caf\xe9")
    fs.ops.writes.service.editor.create_group("/lat.h5", f"/{name}")  # as an older polyfs stored it
    fs.mkdir("zarr/lat.zarr/ok")
    fs.write_json("zarr/lat.zarr/ok/zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {"a": 2}})
    view = fs.fresh(read_only=True)
    assert "lat.h5" in view.ls("hdf5")
    with h5py.File(io.BytesIO(view.read_file("hdf5/lat.h5")), "r") as f:
        assert sorted(f, key=str) == sorted(["ok", b"caf\xe9"], key=str)  # h5py: bytes when not UTF-8
        assert f.attrs["t"] == 1 and f["ok"].attrs["a"] == 2
        assert isinstance(f[b"caf\xe9"], h5py.Group)
