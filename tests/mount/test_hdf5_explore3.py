"""The HDF5 view as users use it, third round (real mount): dense attribute storage
written through ``hdf5/`` and files users copy in.

What this module pins:

- A file holding a virtual dataset whose source file cannot be reached (``cp`` into
  ``hdf5/``: the written file has no directory of its own; ``polyfs import`` of a file
  moved away from its sources) was stored with the dataset's fill values in place of its
  data, without a word. It is refused naming the dataset and the source file, the store
  unchanged; a virtual dataset mapping its own file (``"."``) is stored with its data.
- Dense attributes (an attribute over 64 KiB) edited with h5py ``r+`` and netCDF4 ``"a"``:
  renamed, retyped, deleted (back to compact), on the root, groups and committed types,
  many small ones beside a big one; read back by h5py, h5dump and the zarr/ view.
"""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from polyfs.errors import SourceError
from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")

from test_hdf5_tools_explore import check_deep, seeded_store, snapshot, write_with_h5py  # noqa: F401

BIG = np.arange(20_000.0)


def _vds(path, source: str) -> None:
    write_with_h5py(f"""
        with h5py.File(path, "w") as f:
            f["a"] = np.arange(10.0)
            lay = h5py.VirtualLayout(shape=(10,), dtype="f8")
            lay[:] = h5py.VirtualSource({source!r}, "a", shape=(10,))
            f.create_virtual_dataset("vds", lay, fillvalue=-1)
    """, path)


def test_a_virtual_dataset_whose_sources_are_out_of_reach_is_refused(mount_store, seeded_store, tmp_path):
    (tmp_path / "src").mkdir()
    write_with_h5py('with h5py.File(path, "w") as f:\n    f["a"] = np.arange(10.0) * 2\n', tmp_path / "src" / "s.h5")
    _vds(tmp_path / "src" / "v.h5", "s.h5")
    with h5py.File(tmp_path / "src" / "v.h5") as f:  # the premise: HDF5 reads it next to its source
        np.testing.assert_array_equal(f["vds"][()], np.arange(10.0) * 2)
    _vds(tmp_path / "self.h5", ".")
    before = snapshot(seeded_store)
    m = mount_store(str(seeded_store))
    res = subprocess.run(["cp", str(tmp_path / "src" / "v.h5"), str(m.path / "hdf5" / "v.h5")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "not supported" in res.stderr, res.stderr
    assert "v.h5" not in os.listdir(m.path / "hdf5")
    assert "dataset /vds" in m.log_text() and "'s.h5'" in m.log_text()
    # a virtual dataset of its own file's data is stored with that data
    subprocess.run(["cp", str(tmp_path / "self.h5"), str(m.path / "hdf5" / "self.h5")], check=True, timeout=60)
    with h5py.File(m.path / "hdf5" / "self.h5") as f:
        np.testing.assert_array_equal(f["vds"][()], np.arange(10.0))
    m.stop()
    after = snapshot(seeded_store)
    assert {k: v for k, v in after.items() if k in before} == before
    check_deep(seeded_store)

    # polyfs import: next to its source it imports the data; moved away it is refused
    import_source(tmp_path / "src" / "v.h5", str(tmp_path / "s2"), progress=False)
    moved = tmp_path / "moved.h5"
    moved.write_bytes((tmp_path / "src" / "v.h5").read_bytes())
    with pytest.raises(SourceError, match="source file 's.h5' not found"):
        import_source(moved, str(tmp_path / "s3"), progress=False)


def _zattrs(m, stem: str, path: str = "") -> dict:
    return json.loads((m.path / "zarr" / f"{stem}.zarr" / path / "zarr.json").read_text())["attributes"]


def _h5dump_ok(path) -> str:
    res = subprocess.run(["h5dump", "-A", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and not res.stderr, res.stderr
    return res.stdout


def test_dense_attributes_edited_with_h5py_r_plus(mount_store, seeded_store, tmp_path):
    write_with_h5py("""
        with h5py.File(path, "w") as f:
            f["x"] = np.arange(10.0)
            f.create_group("g")
            f["T"] = np.dtype("i4")
    """, tmp_path / "d.h5")
    m = mount_store(str(seeded_store))
    path = m.path / "hdf5" / "d.h5"
    subprocess.run(["cp", str(tmp_path / "d.h5"), str(path)], check=True, timeout=60)
    cmp = np.dtype([("a", "i4"), ("b", "f8")])
    with h5py.File(path, "r+") as f:
        x = f["x"]
        x.attrs["big"] = BIG
        x.attrs["a"] = 1
        for i in range(1100):
            x.attrs[f"s{i:04d}"] = i
        x.attrs["vlen"] = np.array(["a", "ü" * 40_000], dtype=h5py.string_dtype())
        x.attrs.create("cmp", np.array([(i, i / 2) for i in range(10_000)], dtype=cmp))
        x.attrs["refs"] = np.array([f["g"].ref, f.ref] * 5000, dtype=h5py.ref_dtype)
        x.attrs["ñamé_✓"] = BIG + 1
        f.attrs["rootbig"] = BIG
        f["g"].attrs["gbig"] = np.arange(40_000, dtype="u2")
        f["T"].attrs["tbig"] = BIG
    with h5py.File(path, "r+") as f:
        x = f["x"]
        h5py.h5a.rename(x.id, b"a", b"renamed")
        h5py.h5a.rename(x.id, b"big", b"huge")
        x.attrs["s0001"] = "now text"
        for i in range(0, 1100, 2):
            del x.attrs[f"s{i:04d}"]
        del f["g"].attrs["gbig"]
    with h5py.File(path) as f:
        a = f["x"].attrs
        assert len(a) == 550 + 6 and a["renamed"] == 1 and a["s0001"] == "now text" and "s0000" not in a
        np.testing.assert_array_equal(a["huge"], BIG)
        assert list(a["vlen"]) == ["a", "ü" * 40_000] and a["cmp"]["a"][-1] == 9999
        assert f[a["refs"][0]] == f["g"] and f[a["refs"][-1]] == f["/"]
        np.testing.assert_array_equal(a["ñamé_✓"], BIG + 1)
        np.testing.assert_array_equal(f.attrs["rootbig"], BIG)
        np.testing.assert_array_equal(f["T"].attrs["tbig"], BIG)
        assert len(f["g"].attrs) == 0
    _h5dump_ok(path)
    z = _zattrs(m, "d", "x")
    assert z["s0001"] == "now text" and len(z["huge"]) == 20_000 and "big" not in z and "s0000" not in z
    assert _zattrs(m, "d", "g") == {}
    m.stop()
    check_deep(seeded_store)


def test_dense_attributes_edited_with_netcdf4(mount_store, seeded_store):
    netCDF4 = pytest.importorskip("netCDF4")
    m = mount_store(str(seeded_store))
    path = m.path / "hdf5" / "n.nc"
    d = netCDF4.Dataset(path, "w")
    d.createDimension("n", 5)
    v = d.createVariable("v", "f4", ("n",))
    v[:] = np.arange(5)
    v.bigatt = BIG
    v.units = "m"
    d.gbig = "x" * 100_000
    d.close()
    d = netCDF4.Dataset(path, "a")
    d["v"].renameAttribute("units", "unit2")
    d.renameAttribute("gbig", "gbig2")
    d["v"].delncattr("bigatt")
    d.close()
    d = netCDF4.Dataset(path)
    assert d.ncattrs() == ["gbig2"] and d["v"].ncattrs() == ["unit2"] and len(d.gbig2) == 100_000
    d.close()
    _h5dump_ok(path)
    assert set(_zattrs(m, "n.nc", "v")) == {"unit2"}
    m.stop()
    check_deep(seeded_store)
