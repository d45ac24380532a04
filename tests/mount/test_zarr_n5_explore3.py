"""Tier 3: xarray, zarr-python and tensorstore writing the Zarr and N5 views, read back
through the other views (found as a demanding user would find them).

- xarray spells ``_FillValue`` of a float variable as base64 text in ``zarr.json``; the store
  must keep the number it stands for, or ``hdf5/`` (netCDF4, xarray) sees a string
  ``_FillValue`` that cannot mask the variable.
- zarr-python writes numpy ``S<n>`` arrays as ``null_terminated_bytes`` (the type the view
  shows for HDF5 fixed-length strings); they must be writable, fill value included.
"""
from __future__ import annotations

import errno
import json
import warnings

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")
h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def test_xarray_fill_value_reaches_hdf5_as_a_number(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    ds = xr.Dataset({"t": (("x",), np.array([1, np.nan, 3, 4], "f4")),
                     "c": (("x",), np.array([1 + 1j, np.nan, 2, 3], "c16")),
                     "n": (("x",), np.array([1.0, 2.0, np.nan, 4.0]))},
                    coords={"x": np.arange(4)})
    enc = {"t": {"_FillValue": -9.0, "chunks": (2,)}, "c": {"_FillValue": -1 + 0j}}
    zpath = m.path / "zarr" / "f.zarr"
    ds.to_zarr(str(zpath), zarr_format=3, mode="w", consolidated=False, encoding=enc)
    with h5py.File(m.path / "hdf5" / "f.h5", "r") as f:
        assert float(f["t"].attrs["_FillValue"]) == -9.0
        np.testing.assert_array_equal(f["t"][:], [1, -9, 3, 4])
        assert np.isnan(float(f["n"].attrs["_FillValue"]))
        np.testing.assert_array_equal(f["c"].attrs["_FillValue"], [-1.0, 0.0])
    h = xr.open_dataset(m.path / "hdf5" / "f.h5").load()
    np.testing.assert_array_equal(h.t.values, ds.t.values)  # masked by the number
    np.testing.assert_array_equal(h.n.values, ds.n.values)
    # the Zarr view spells it as xarray does; xarray reads its own store back, masked
    back = xr.open_zarr(str(zpath), consolidated=False).load()
    for v in ("t", "n", "c"):
        np.testing.assert_array_equal(back[v].values, ds[v].values, err_msg=v)
    assert json.loads((zpath / "t" / "zarr.json").read_text())["attributes"]["_FillValue"] == "AAAAAAAAIsA="
    # an append (every zarr.json rewritten) keeps the values and the number
    more = xr.Dataset({"t": (("x",), np.array([5, np.nan], "f4")), "c": (("x",), np.array([4, 5], "c16")),
                       "n": (("x",), np.array([np.nan, 6.0]))}, coords={"x": [4, 5]})
    more.to_zarr(str(zpath), mode="a", append_dim="x", consolidated=False)
    full = xr.concat([ds, more], dim="x")
    back = xr.open_zarr(str(zpath), consolidated=False).load()
    for v in ("t", "n", "c", "x"):
        np.testing.assert_array_equal(back[v].values, full[v].values, err_msg=v)
    with h5py.File(m.path / "hdf5" / "f.h5", "r") as f:
        assert float(f["t"].attrs["_FillValue"]) == -9.0 and f["t"].shape == (6,)


def test_fixed_length_byte_strings_are_writable(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    root = m.path / "zarr" / "s.zarr"
    root.mkdir()
    a = zarr.create_array(str(root / "s"), shape=(5,), chunks=(2,), dtype="S5", fill_value=b"ab")
    a[:3] = np.array([b"x", b"yyyyy", b""])
    want = np.array([b"x", b"yyyyy", b"", b"ab", b"ab"], "S5")
    np.testing.assert_array_equal(a[:], want)  # the writing handle
    np.testing.assert_array_equal(zarr.open_array(str(root / "s"), mode="r")[:], want)
    with h5py.File(m.path / "hdf5" / "s.h5", "r") as f:
        assert f["s"].dtype == np.dtype("S5") and f["s"].fillvalue == b"ab"
        np.testing.assert_array_equal(f["s"][:], want)
    # a fill value longer than the strings is refused (EINVAL), and nothing is made
    meta = json.loads((root / "s" / "zarr.json").read_text())
    meta["data_type"]["configuration"]["length_bytes"] = 2
    meta["fill_value"] = "YWJj"  # b"abc"
    (root / "bad").mkdir()
    with pytest.raises(OSError) as exc:
        (root / "bad" / "zarr.json").write_text(json.dumps(meta))
    assert exc.value.errno == errno.EINVAL
    assert not (root / "bad" / "zarr.json").exists()
    with h5py.File(m.path / "hdf5" / "s.h5", "r") as f:
        assert "bad" not in f or isinstance(f["bad"], h5py.Group)


def test_xarray_appends_to_a_netcdf_domain_without_gaps(mount_store, tmp_path):
    """xarray's ``append_dim`` resizes one array at a time; the others must not then be shown
    as long as the unlimited dimension it just lengthened, or their records land after a gap."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("netCDF4")
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    ds = xr.Dataset({"temp": (("time", "y"), np.arange(12, dtype="f4").reshape(4, 3)),
                     "cnt": (("time",), np.arange(4, dtype="i4"))},
                    coords={"time": pd.date_range("2000-01-01", periods=4, freq="D"), "y": [10.0, 20.0, 30.0]})
    nc = tmp_path / "a.nc"
    ds.to_netcdf(nc, unlimited_dims=["time"], encoding={"temp": {"zlib": True, "chunksizes": (2, 3)},
                                                        "cnt": {"chunksizes": (2,)}, "time": {"chunksizes": (2,)}})
    (m.path / "hdf5" / "a.h5").write_bytes(nc.read_bytes())
    z = str(m.path / "zarr" / "a.zarr")
    more = xr.Dataset({"temp": (("time", "y"), np.full((2, 3), 99, "f4")), "cnt": (("time",), np.array([7, 8], "i4"))},
                      coords={"time": pd.date_range("2000-01-05", periods=2, freq="D"), "y": [10.0, 20.0, 30.0]})
    more.to_zarr(z, mode="a", append_dim="time", consolidated=False)
    full = xr.concat([ds, more], dim="time")
    back = xr.open_zarr(z, consolidated=False).load()
    for v in full.variables:
        np.testing.assert_array_equal(back[v].values, full[v].values, err_msg=v)
    with xr.open_dataset(m.path / "hdf5" / "a.h5", cache=False) as h:
        for v in full.variables:
            np.testing.assert_array_equal(h[v].values, full[v].values, err_msg=v)


def test_numpy_datetime64_and_timedelta64_arrays_are_writable(mount_store, tmp_path):
    """zarr-python writes numpy datetime64/timedelta64 arrays under its ``numpy.datetime64``
    data types: stored as int64 (what HDF5 shows), served back with the declared type."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    root = m.path / "zarr" / "t.zarr"
    root.mkdir()
    cases = {"dt": np.array(["2000-01-01T00:00:10", "NaT", "1969-12-31T23:59:50", "2038-01-19"], "M8[s]"),
             "td": np.array([1, -2, 3000, 4], "m8[ms]")}
    for name, data in cases.items():
        a = zarr.create_array(str(root / name), shape=(6,), chunks=(2,), dtype=data.dtype)
        a[:4] = data
        want = np.concatenate([data, np.array(["NaT", "NaT"], data.dtype)])
        back = zarr.open_array(str(root / name), mode="r")
        assert back.dtype == data.dtype
        np.testing.assert_array_equal(back[:].view("i8"), want.view("i8"), err_msg=name)
        meta = json.loads((root / name / "zarr.json").read_text())
        assert meta["data_type"]["name"] == "numpy." + data.dtype.name.split("[")[0]
        with h5py.File(m.path / "hdf5" / "t.h5", "r") as f:
            assert f[name].dtype == np.dtype("<i8")
            np.testing.assert_array_equal(f[name][:], want.view("i8"))
    # a fill value that is no time is refused (EINVAL) and nothing is made
    meta = json.loads((root / "dt" / "zarr.json").read_text())
    meta["fill_value"] = "yesterday"
    (root / "bad").mkdir()
    with pytest.raises(OSError) as exc:
        (root / "bad" / "zarr.json").write_text(json.dumps(meta))
    assert exc.value.errno == errno.EINVAL and not (root / "bad" / "zarr.json").exists()


def test_zarr_v2_writes_are_refused_not_kept_in_memory(mount_store, tmp_path):
    """zarr-python ``zarr_format=2`` into zarr/: its ``.zarray``/``.zgroup`` were kept as
    scratch files in daemon memory, read back fine, and were gone at unmount with no word.
    They are refused when made (EOPNOTSUPP, one log line); the store is unchanged."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    dom = m.path / "zarr" / "d.zarr"
    dom.mkdir()
    with pytest.raises(Exception):  # its mkdir makes a (v3) group, as any mkdir here does
        zarr.create_array(str(dom / "v2arr"), shape=(4,), chunks=(2,), dtype="i4", zarr_format=2)[:] = 1
    # zarr-python writes ``.zattrs.<uuid>.partial`` and renames it: the rename is refused, its
    # temporary stays a scratch file (never stored)
    assert not [p for p in (dom / "v2arr").iterdir() if not p.name.endswith(".partial")]
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    with pytest.raises(OSError) as exc:
        (dom / ".zgroup").write_text('{"zarr_format": 2}')
    assert exc.value.errno == errno.EOPNOTSUPP
    tmp = dom / "meta.tmp"
    tmp.write_text("{}")
    with pytest.raises(OSError) as exc:  # nor published under a v2 name by rename
        tmp.rename(dom / ".zattrs")
    assert exc.value.errno == errno.EOPNOTSUPP
    tmp.unlink()
    assert not [p for p in dom.rglob(".z*") if not p.name.endswith(".partial")]
    assert "Zarr v2 metadata (.zgroup) cannot be written" in m.log_text()
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before
    # a v3 array beside it is written as ever
    a = zarr.create_array(str(dom / "v3arr"), shape=(4,), chunks=(2,), dtype="i4", zarr_format=3)
    a[:] = 7
    np.testing.assert_array_equal(zarr.open_array(str(dom / "v3arr"), mode="r")[:], 7)
