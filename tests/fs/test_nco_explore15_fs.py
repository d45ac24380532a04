"""NCO's temporary output files in ``hdf5/``, exploratory round 15 (kernel-free; the real
tools over a mount are in tests/mount/test_nco_explore15.py).

Every NCO operator but in-place ``ncatted``/``ncrename`` (``ncks``, ``ncks -A``, ``ncrcat``,
``ncecat``, ``ncap2``, ``ncpdq``, ``ncwa``) writes its output to ``<out>.pid<N>.<tool>.tmp``
beside ``<out>`` and renames it over ``<out>``; rsync writes ``.<out>.XXXXXX``. In ``hdf5/``
making that name was refused (``EPERM``: "files can only be made inside a domain's
directory"), so every one of them failed through the mount. Such a name beside a name the
view takes is now a scratch file (in the daemon's memory, nothing stored); renaming it over
``<out>`` stores it as ``<out>``'s whole domain, new or replaced; unlinking it stores nothing.
Other names above the domains stay refused.
"""
from __future__ import annotations

import errno
import io

import h5py
import numpy as np
import pytest

from polyfs.importers import import_source
from writeharness import FS

netCDF4 = pytest.importorskip("netCDF4")


def _nc_bytes(tmp_path, name: str, extra: str | None = None) -> bytes:
    """A netCDF-4 file as netCDF-C writes it (``extra``: one more variable, as ``ncks -A`` adds)."""
    path = tmp_path / name
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", None)
        d.createDimension("x", 3)
        t = d.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = [0.0, 1.0]
        v = d.createVariable("temp", "f4", ("time", "x"), fill_value=np.float32(-999))
        v.units = "K"
        v[:] = np.arange(6, dtype="f4").reshape(2, 3)
        if extra:
            d.createVariable(extra, "f4", ("time", "x"))[:] = np.ones((2, 3), "f4")
    return path.read_bytes()


def _vars(data: bytes) -> set[str]:
    with h5py.File(io.BytesIO(data), "r") as f:
        return set(f.keys())


@pytest.fixture
def fs(tmp_path):
    store = tmp_path / "store"
    (tmp_path / "src").mkdir()
    _nc_bytes(tmp_path / "src", "a.nc")
    import_source(str(tmp_path / "src" / "a.nc"), str(store), domain="/a.nc", progress=False)
    return FS(f"file://{store}")


def test_ncks_append_temporary_renamed_over_the_domain_file(fs, tmp_path):
    """``ncks -A -v v2 in.nc hdf5/a.nc``: cp a.nc a.nc.pid<N>.ncks.tmp, append, rename over."""
    tmp = "hdf5/a.nc.pid4242.ncks.tmp"
    before = fs.snapshot()
    fs.write_file(tmp, fs.read_file("hdf5/a.nc"))
    assert "a.nc.pid4242.ncks.tmp" in fs.ls("hdf5") and fs.snapshot() == before  # scratch: nothing stored
    fs.write_file(tmp, _nc_bytes(tmp_path, "w.nc", extra="v2"))
    assert _vars(fs.read_file(tmp)) >= {"temp", "v2"}
    fs.rename(tmp, "hdf5/a.nc")
    assert fs.ls("hdf5") == ["a.nc"]
    assert _vars(fs.read_file("hdf5/a.nc")) >= {"time", "temp", "v2"}
    again = fs.fresh(read_only=True)  # stored: another mount sees it
    with netCDF4.Dataset("x", memory=again.read_file("hdf5/a.nc")) as d:
        assert d["temp"].units == "K" and d["temp"]._FillValue == np.float32(-999)
        assert d.dimensions["time"].isunlimited() and d["v2"].dimensions == ("time", "x")
        np.testing.assert_array_equal(d["temp"][:], np.arange(6, dtype="f4").reshape(2, 3))
    assert "v2" in again.ls("zarr/a.nc.zarr")


def test_ncrcat_temporary_makes_a_new_domain_at_rename(fs, tmp_path):
    tmp = "hdf5/r.nc.pid7.ncrcat.tmp"
    fs.write_file(tmp, _nc_bytes(tmp_path, "r.nc"))
    assert fs.domains() == ["/a.nc"]
    fs.rename(tmp, "hdf5/r.nc")
    assert fs.domains() == ["/a.nc", "/r.nc"]
    assert sorted(fs.ls("hdf5")) == ["a.nc", "r.nc"]
    assert _vars(fs.read_file("hdf5/r.nc")) >= {"time", "temp"}


def test_rsync_temporary_renamed_over_the_domain_file(fs, tmp_path):
    tmp = "hdf5/.a.nc.Xy12Zq"
    fs.write_file(tmp, _nc_bytes(tmp_path, "w.nc", extra="v3"))
    fs.rename(tmp, "hdf5/a.nc")
    assert fs.ls("hdf5") == ["a.nc"] and "v3" in _vars(fs.read_file("hdf5/a.nc"))


def test_temporary_unlinked_stores_nothing(fs, tmp_path):
    """NCO removes its temporary when the operator fails: the store stays byte-identical."""
    before = fs.state()
    tmp = "hdf5/a.nc.pid99.ncap2.tmp"
    fs.write_file(tmp, _nc_bytes(tmp_path, "w.nc", extra="z"))
    fs.unlink(tmp)
    assert fs.ls("hdf5") == ["a.nc"] and fs.state() == before


@pytest.mark.parametrize("name", ["a.nc.bak", "a.nc.pid12.tmp", "notes.txt.pid1.ncks.tmp", "a.nc.pid1.ncks.tmp.x",
                                  ".a.nc.toolong7"])
def test_other_names_above_the_domains_stay_refused(fs, name):
    before = fs.state()
    assert fs.errno_of(fs.write_file, f"hdf5/{name}", b"\x89HDF\r\n\x1a\n") == errno.EPERM
    assert fs.state() == before and fs.ls("hdf5") == ["a.nc"]
