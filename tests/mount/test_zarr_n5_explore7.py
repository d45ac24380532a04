"""Tier 3 (exploratory round 7): zarr-python, xarray and tensorstore writing the Zarr view
as users do, read back by the other tools and views (kernel-free counterparts in
tests/fs/test_zarr_n5_explore7_fs.py).

- A 0-d array was refused (``EINVAL`` at the rename of its ``zarr.json``): xarray's
  ``to_zarr`` of any dataset holding a scalar (a CF ``crs`` grid-mapping variable, the
  scalar coordinate ``isel(time=0)`` leaves, a scalar label) failed half-way, and
  zarr-python's and tensorstore's ``shape=()`` arrays could not be made. The view served
  imported scalars as 0-d arrays all along; written ones are now scalar datasets, under
  every chunk key encoding (``v2``'s file is ``0``).
- xarray's lossy float compression (``filters=[BitRound(keepbits)]``, or ``Quantize``) was
  refused as a "transpose" codec. The filters decode to their input, so the chunks are the
  values: stored as such, shown back as declared, and an ``append_dim`` write (which reopens
  the array's metadata) rounds as the first write did, as on a local disk.
- A scalar is a 1-element dataset in ``n5/``; z5py's ``d[0] = v`` into it was refused at
  ``close()`` ("block of shape [1] does not fit chunk shape []"), which z5py ignores: it
  reported success and the value was lost. tensorstore's n5 driver failed. The block is
  now the scalar's chunk.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from support import deep_check, quiet_local_mount as _mounted

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")
ts = pytest.importorskip("tensorstore")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")



def _python(code: str, timeout: int = 120) -> str:
    """``code`` in a fresh interpreter (h5py with hdf5plugin's filters registered there)."""
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _ts_zarr(path) -> ts.TensorStore:
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()


def test_scalars_written_by_xarray_zarr_python_and_tensorstore(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    # xarray: one time step of a gridded dataset, with a CF grid mapping and a scalar label
    full = xr.Dataset({"t": (("time", "y", "x"), np.arange(24.0).reshape(2, 3, 4), {"grid_mapping": "crs"})},
                      coords={"time": pd.date_range("2000-01-01", periods=2), "height": 2.0})
    one = full.isel(time=1)
    one["crs"] = ((), np.int32(0), {"grid_mapping_name": "latitude_longitude"})
    one["label"] = ((), "station A")
    zpath = m.path / "zarr" / "s.zarr"
    one.to_zarr(str(zpath), zarr_format=3, mode="w", consolidated=False)
    xr.testing.assert_identical(xr.open_zarr(str(zpath), consolidated=False).load(), one)
    with xr.open_dataset(m.path / "hdf5" / "s.h5", engine="h5netcdf") as h:
        h.load()
        assert h.crs.dims == () and int(h.crs) == 0 and h.crs.attrs["grid_mapping_name"] == "latitude_longitude"
        assert float(h.height) == 2.0 and str(h.label.values) == "station A"
        assert h.time.values == one.time.values
    # zarr-python under each chunk key encoding, and tensorstore, read by the other
    g = zarr.open_group(str(zpath), mode="a")
    encodings = [{"name": "default", "separator": "/"}, {"name": "default", "separator": "."},
                 {"name": "v2", "separator": "."}]
    for i, enc in enumerate(encodings):
        a = g.create_array(f"z{i}", shape=(), dtype="i8", fill_value=-1, chunk_key_encoding=enc)
        a[()] = 40 + i
        assert _ts_zarr(zpath / f"z{i}").read().result() == 40 + i
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(zpath / "tsc")},
                 "metadata": {"shape": [], "data_type": "float32", "fill_value": 0.0}}, create=True).result()
    t.write(np.float32(2.25)).result()
    assert zarr.open_array(str(zpath / "tsc"), mode="r")[()] == np.float32(2.25)
    out = _python(f"""
        import h5py
        with h5py.File({str(m.path / "hdf5" / "s.h5")!r}, "r") as f:
            print([(k, f[k].shape, f[k][()].item()) for k in ("z0", "z1", "z2", "tsc")])
    """)
    assert out.strip() == "[('z0', (), 40), ('z1', (), 41), ('z2', (), 42), ('tsc', (), 2.25)]"
    m.stop()
    m.start()  # stored, not kept by the daemon
    xr.testing.assert_identical(xr.open_zarr(str(zpath), consolidated=False)[list(one.variables)].load(), one)
    for i in range(3):
        assert zarr.open_array(str(zpath / f"z{i}"), mode="r")[()] == 40 + i
    m.stop()
    deep_check(store)


def test_xarray_bitround_filters_write_append_and_read_everywhere(mount_store, tmp_path):
    numcodecs = pytest.importorskip("numcodecs")
    from zarr.codecs import numcodecs as znc

    store, m = _mounted(mount_store, tmp_path)
    rng = np.random.default_rng(7)

    def part(t0: str, n: int) -> xr.Dataset:
        return xr.Dataset({"tas": (("time", "y"), (rng.random((n, 6)) * 40 + 250).astype("f4"), {"units": "K"}),
                           "q": (("time", "y"), rng.random((n, 6)))},
                          coords={"time": pd.date_range(t0, periods=n)})

    first, more = part("2000-01-01", 4), part("2000-01-05", 4)
    enc = {"tas": {"filters": [znc.BitRound(keepbits=6)], "chunks": (2, 6)},
           "q": {"filters": [znc.Quantize(digits=3, dtype="f8")], "chunks": (4, 3), "shards": (4, 6)}}
    results = {}
    for where in (tmp_path / "local.zarr", m.path / "zarr" / "r.zarr"):  # the same tool on a local disk
        first.to_zarr(str(where), zarr_format=3, mode="w", encoding=enc, consolidated=False)
        more.to_zarr(str(where), append_dim="time", consolidated=False)
        results[where.name] = xr.open_zarr(str(where), consolidated=False).load()
    local, mounted = results["local.zarr"], results["r.zarr"]
    xr.testing.assert_identical(mounted, local)
    full = xr.concat([first, more], "time")
    want = np.asarray(numcodecs.BitRound(6).encode(full.tas.values)).view("f4").reshape(full.tas.shape)
    np.testing.assert_array_equal(mounted.tas.values, want)  # the appended steps rounded too
    assert not np.array_equal(mounted.tas.values, full.tas.values)
    with xr.open_dataset(m.path / "hdf5" / "r.h5", engine="h5netcdf") as h:
        np.testing.assert_array_equal(h.tas.values, want)
        np.testing.assert_array_equal(h.q.values, local.q.values)
    m.stop()
    deep_check(store)


def test_n5_writers_set_a_scalar(mount_store, tmp_path):
    z5py = pytest.importorskip("z5py")
    store, m = _mounted(mount_store, tmp_path)
    root = m.path / "zarr" / "sc.zarr"
    g = zarr.open_group(str(root), mode="w")
    g.create_array("a", shape=(), dtype="f8", fill_value=0.0)[()] = 1.5
    g.create_array("b", shape=(), dtype="i4", fill_value=-1)[()] = 3
    d = z5py.File(str(m.path / "n5" / "sc.n5"), "a")["a"]
    assert d.shape == (1,) and d[0] == 1.5
    d[0] = 2.75  # z5py ignores an error at close(): the value must be stored, not lost
    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "sc.n5" / "b")}}).result()
    t[0] = 42
    assert zarr.open_array(str(root / "a"), mode="r")[()] == 2.75
    assert zarr.open_array(str(root / "b"), mode="r")[()] == 42
    m.stop()
    m.start()
    assert z5py.File(str(m.path / "n5" / "sc.n5"), "r")["a"][0] == 2.75
    assert _ts_zarr(root / "b").read().result() == 42
    m.stop()
    deep_check(store)
