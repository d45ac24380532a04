"""Tier 3: text arrays written through ``zarr/`` by zarr-python and xarray, read back by
zarr-python, xarray, h5py, netCDF4 and ``h5dump`` through the other views.

zarr-python 3 writes ``dtype=str``/object text as ``string`` (vlen-utf8) and numpy
``<U<n>`` as ``fixed_length_utf32``; xarray writes string coordinates and variables with
both. Both are stored as variable-length UTF-8 strings (what HDF5 and netCDF readers
expect) and ``fixed_length_utf32`` is served back as declared.
"""
from __future__ import annotations

import subprocess
import warnings

import numpy as np
import pytest
from support import deep_check

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")
h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")



def test_zarr_python_text_arrays_round_trip(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    root = m.path / "zarr" / "t.zarr"
    words = np.array(["a", "bb", "", "dddd", "é", "x" * 300, "日本語"], dtype=object)
    a = zarr.create_array(str(root / "v"), shape=(7,), chunks=(2,), shards=(4,), dtype=str, fill_value="")
    a[:] = words
    u = zarr.create_array(str(root / "u"), shape=(5,), chunks=(2,), dtype="<U4")
    fixed = np.array(["ab", "c", "dddd", "é", ""], dtype="<U4")
    u[:] = fixed
    a[2:3] = np.array(["NEW"], dtype=object)  # a partial shard: read, merged, written back
    words[2] = "NEW"
    back = zarr.open_array(str(root / "v"), mode="r")
    assert back.dtype.kind in "OT" and list(back[:]) == list(words)
    ub = zarr.open_array(str(root / "u"), mode="r")
    assert ub.dtype == np.dtype("<U4")
    np.testing.assert_array_equal(ub[:], fixed)
    with h5py.File(m.path / "hdf5" / "t.h5", "r") as f:
        assert h5py.check_string_dtype(f["v"].dtype).encoding == "utf-8"
        assert list(f["v"].asstr()[:]) == list(words)
        assert list(f["u"].asstr()[:]) == list(fixed)
    dump = subprocess.run(["h5dump", "-d", "/v", str(m.path / "hdf5" / "t.h5")], capture_output=True, text=True)
    assert dump.returncode == 0 and '"NEW"' in dump.stdout and "H5T_VARIABLE" in dump.stdout
    m.stop()
    deep_check(store)


def test_xarray_string_coordinates_write_and_read_through_every_view(mount_store, tmp_path):
    netCDF4 = pytest.importorskip("netCDF4")
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    ds = xr.Dataset({"v": (("station",), np.arange(3.0)),
                     "label": (("station",), np.array(["alpha", "β", ""], dtype=object))},
                    coords={"station": ["p", "qq", "rrr"]})
    zpath = m.path / "zarr" / "obs.zarr"
    ds.to_zarr(str(zpath), zarr_format=3, consolidated=False)
    back = xr.open_zarr(str(zpath), consolidated=False).load()
    assert list(back.station.values) == ["p", "qq", "rrr"]
    assert list(back.label.values) == ["alpha", "β", ""]
    np.testing.assert_array_equal(back.v.values, ds.v.values)
    with netCDF4.Dataset(m.path / "hdf5" / "obs.h5") as nc:
        assert list(nc["label"][:]) == ["alpha", "β", ""]
        assert list(nc["station"][:]) == ["p", "qq", "rrr"]
    # an append along the dimension grows the text arrays too
    more = xr.Dataset({"v": (("station",), [9.0]), "label": (("station",), np.array(["new"], dtype=object))},
                      coords={"station": np.array(["s"], dtype="<U3")})  # xarray: same <U<n> to append
    more.to_zarr(str(zpath), mode="a", append_dim="station", consolidated=False)
    back = xr.open_zarr(str(zpath), consolidated=False).load()
    assert list(back.station.values) == ["p", "qq", "rrr", "s"]
    assert list(back.label.values) == ["alpha", "β", "", "new"]
    m.stop()
    deep_check(store)
