"""NCO and CDO over a mount, exploratory round 15 (kernel-free tests of the fix are in
tests/fs/test_nco_explore15_fs.py).

NCO writes every output (``ncks``, ``ncks -A``, ``ncrcat``, ``ncecat``, ``ncap2``, ``ncpdq``,
``ncwa``) to ``<out>.pid<N>.<tool>.tmp`` beside ``<out>`` and renames it over ``<out>``.
``hdf5/`` refused to make that name (EPERM), so all of them failed ("nco__create() unable to
create file"); only in-place ``ncatted``/``ncrename`` and ``--no_tmp_fl`` worked. The
temporary is now kept in memory and stored at the rename. CDO writes its output directly.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from support import quiet_local_mount as _mounted

from polyfs.check import check_store
from polyfs.importers import import_source

xr = pytest.importorskip("xarray")
netCDF4 = pytest.importorskip("netCDF4")
zarr = pytest.importorskip("zarr")

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                         "ignore::FutureWarning", "ignore::DeprecationWarning"),
              pytest.mark.skipif(not (shutil.which("ncks") and shutil.which("ncdump")), reason="no NCO/ncdump")]


def _run(*cmd: str) -> str:
    got = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, f"{cmd}: {got.stderr}"
    return got.stdout


def _record_file(path, start: float, fill: float = -999.0) -> xr.Dataset:
    ds = xr.Dataset({"temp": (("time", "lat", "lon"), np.arange(24, dtype="f4").reshape(2, 3, 4) + start,
                              {"units": "C"}),
                     "p": (("time",), np.array([1.5, 2.5]) + start)},
                    coords={"time": ("time", [start, start + 1], {"units": "days since 2000-01-01"}),
                            "lat": np.arange(3.0), "lon": np.arange(4.0)},
                    attrs={"title": "t"})
    ds["temp"].encoding["_FillValue"] = np.float32(fill)
    ds.to_netcdf(path, engine="netcdf4", unlimited_dims=["time"])
    return ds


def _no_temporaries(m) -> None:
    left = [p.name for p in (m.path / "hdf5").iterdir() if ".tmp" in p.name or p.name.startswith(".")]
    assert not left, left


def test_nco_operators_write_through_their_temporary_files(mount_store, tmp_path):
    a = _record_file(tmp_path / "a.nc", 0.0)
    b = _record_file(tmp_path / "b.nc", 2.0)
    _run("ncrename", "-O", "-v", "temp,t2", str(tmp_path / "b.nc"), str(tmp_path / "t2.nc"))
    store, m = _mounted(mount_store, tmp_path)
    import_source(str(tmp_path / "a.nc"), str(store), domain="/a.nc", progress=False)
    h5 = m.path / "hdf5"
    # in place (no temporary) and through a temporary, on the imported file
    _run("ncatted", "-O", "-a", "units,temp,o,c,K", str(h5 / "a.nc"))
    _run("ncks", "-A", "-v", "t2", str(tmp_path / "t2.nc"), str(h5 / "a.nc"))
    _run("ncap2", "-A", "-s", "y=temp*2", str(h5 / "a.nc"))
    # new files
    _run("ncks", "-O", "-4", "-L", "1", "--cnk_dmn", "lat,1", "--cnk_dmn", "lon,4", str(tmp_path / "a.nc"),
         str(h5 / "c.nc"))
    _run("ncrcat", "-O", str(tmp_path / "a.nc"), str(tmp_path / "b.nc"), str(h5 / "r.nc"))
    _run("ncwa", "-O", "-a", "time", str(h5 / "r.nc"), str(h5 / "w.nc"))
    _run("ncpdq", "-O", "-a", "lon,lat", str(h5 / "c.nc"), str(h5 / "c.nc"))  # over its own input
    _no_temporaries(m)
    assert sorted(p.name for p in h5.iterdir()) == ["a.nc", "c.nc", "r.nc", "w.nc"]
    with netCDF4.Dataset(h5 / "a.nc") as d:
        assert d["temp"].units == "K" and d["temp"]._FillValue == np.float32(-999)
        np.testing.assert_array_equal(d["t2"][:], b["temp"].values)
        np.testing.assert_array_equal(d["y"][:], a["temp"].values * 2)
        assert d["y"].dimensions == ("time", "lat", "lon") and d.dimensions["time"].isunlimited()
    with netCDF4.Dataset(h5 / "c.nc") as d:
        t = d["temp"]
        assert t.dimensions == ("time", "lon", "lat") and t.filters()["zlib"] and t.chunking() == [1, 4, 1]
        np.testing.assert_array_equal(t[:], a["temp"].values.transpose(0, 2, 1))
    r = xr.load_dataset(h5 / "r.nc", decode_times=False)
    np.testing.assert_array_equal(r["time"].values, [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(r["temp"].values, np.concatenate([a["temp"].values, b["temp"].values]))
    w = xr.load_dataset(h5 / "w.nc", decode_times=False)
    np.testing.assert_allclose(w["temp"].values, r["temp"].values.mean(axis=0))
    for name in ("a.nc", "r.nc", "w.nc", "c.nc"):  # the other views agree
        xr.testing.assert_equal(xr.open_zarr(m.path / "zarr" / f"{name}.zarr", consolidated=False).load(),
                                xr.load_dataset(h5 / name))
    assert "double time(time)" in _run("ncdump", "-h", str(h5 / "r.nc"))
    m.stop()
    assert not check_store(str(store), deep=True).problems


def test_a_failing_nco_operator_leaves_the_domain_as_it_was(mount_store, tmp_path):
    _record_file(tmp_path / "a.nc", 0.0)
    store, m = _mounted(mount_store, tmp_path)
    import_source(str(tmp_path / "a.nc"), str(store), domain="/a.nc", progress=False)
    h5 = m.path / "hdf5" / "a.nc"
    before = h5.read_bytes()
    got = subprocess.run(["ncap2", "-A", "-s", "y=no_such_var*2", str(h5)], capture_output=True, timeout=120)
    assert got.returncode != 0
    for p in (m.path / "hdf5").iterdir():  # NCO leaves its temporary when ncap2 fails (as on a disk)
        if p.name != "a.nc":
            p.unlink()
    assert [p.name for p in (m.path / "hdf5").iterdir()] == ["a.nc"] and h5.read_bytes() == before
    m.stop()
    assert not check_store(str(store), deep=True).problems


@pytest.mark.skipif(not shutil.which("cdo"), reason="no CDO")
def test_cdo_reads_and_writes_netcdf4_in_the_view(mount_store, tmp_path):
    a = _record_file(tmp_path / "a.nc", 0.0)
    _record_file(tmp_path / "b.nc", 2.0)
    store, m = _mounted(mount_store, tmp_path)
    import_source(str(tmp_path / "a.nc"), str(store), domain="/a.nc", progress=False)
    h5 = m.path / "hdf5"
    _run("ncrcat", "-O", str(h5 / "a.nc"), str(tmp_path / "b.nc"), str(h5 / "r.nc"))
    _run("cdo", "-s", "-f", "nc4", "-z", "zip_1", "timmean", str(h5 / "r.nc"), str(h5 / "tm.nc"))
    _run("cdo", "-s", "-f", "nc4", "selvar,temp", str(h5 / "a.nc"), str(h5 / "sv.nc"))
    tm = xr.load_dataset(h5 / "tm.nc")
    np.testing.assert_allclose(tm["temp"].values[0], np.arange(24, dtype="f4").reshape(2, 3, 4).mean(0) + 1.0)
    sv = xr.load_dataset(h5 / "sv.nc")
    assert list(sv.data_vars) == ["temp"] and sv["temp"].attrs["units"] == "C"
    np.testing.assert_array_equal(sv["temp"].values, a["temp"].values)
    z = zarr.open_group(str(m.path / "zarr" / "sv.nc.zarr"), mode="r")
    np.testing.assert_array_equal(z["temp"][:], a["temp"].values)
    m.stop()
    assert not check_store(str(store), deep=True).problems
