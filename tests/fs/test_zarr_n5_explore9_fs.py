"""Tier 2 (no kernel): the Zarr view of data that came from HDF5 and netCDF, exploratory
round 9 (real readers over a mount are in tests/mount/test_zarr_n5_explore9.py).

- A dataset of variable-length byte sequences (h5py's ``vlen_dtype(uint8)``; what
  ``polyfs import`` makes of a zarr-python ``variable_length_bytes`` array) had no Zarr
  form: the array vanished from ``zarr/``. HSDS's chunk framing of it is numcodecs'
  ``vlen-bytes`` after the element count, so it is shown as ``variable_length_bytes``
  (the count served before the stored chunk, as for text). Writing such arrays through
  the view is still refused (EOPNOTSUPP at their ``zarr.json``).
- A complex field inside a compound (a ``{r, i}``/``{real, imag}`` compound in a record) was
  shown as a nested ``structured`` field: zarr-python read records of pairs, tensorstore
  refused the ``zarr.json``. It is ``complex64``/``complex128`` (the same bytes; big-endian
  fields served little-endian).
- ``_FillValue`` of a fixed-length bytes array (a netCDF ``char`` variable with a fill
  value, as CF files have) made ``xarray.open_zarr`` of the whole group fail ("Failed to
  decode fill_value. Unsupported dtype |S1": xarray decodes only numbers there). It is left
  out of the view for every type xarray cannot decode, as it was for text (the store keeps it).
"""
from __future__ import annotations

import io
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_write_semantics import fs, zfs  # noqa: F401 - fixtures
from writeharness import FS

from polyfs.importers import import_source

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore:The data type")

BLOBS = [b"abc", b"", b"\x00\xff\x10", b"q" * 300, b"z"]


def _copy_view(view: FS, path: str, dest: Path) -> Path:
    """The files of a view directory copied to local disk (what a reader of the mount sees)."""
    for rel in view.walk_files(path):
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(view.read_file(f"{path}/{rel}"))
    return dest


def _h5_bytes_file(tmp_path: Path, **kw) -> Path:
    src = tmp_path / "vb.h5"
    with h5py.File(src, "w") as f:
        d = f.create_dataset("vb", (5,), dtype=h5py.vlen_dtype(np.uint8), chunks=(2,), **kw)
        for i, b in enumerate(BLOBS):
            d[i] = np.frombuffer(b, np.uint8)
        d.attrs["units"] = "bytes"
    return src


@pytest.mark.parametrize("kw", [{}, {"compression": "gzip"}], ids=["plain", "gzip"])
@pytest.mark.parametrize("sharded", [True, False], ids=["shards", "chunks"])
def test_variable_length_bytes_from_hdf5_are_shown_and_read(fs, tmp_path, kw, sharded):  # noqa: F811 - fixture
    zarr = pytest.importorskip("zarr")
    import_source(str(_h5_bytes_file(tmp_path, **kw)), fs.url, domain="/vb.h5")
    view = fs if sharded else fs.fresh(zarr_sharded=False)
    assert "vb" in view.ls("zarr/vb.zarr")
    meta = view.read_json("zarr/vb.zarr/vb/zarr.json")
    assert meta["data_type"] == "variable_length_bytes"
    local = _copy_view(view, "zarr/vb.zarr", tmp_path / "copy.zarr")
    a = zarr.open_array(str(local / "vb"), mode="r")
    assert [bytes(x) for x in a[...]] == BLOBS
    assert a.attrs["units"] == "bytes"
    assert bytes(a.fill_value) == b""


def test_complex_field_of_a_compound_is_complex(fs, tmp_path):  # noqa: F811 - fixture
    """A record with complex fields (HDF5 ``{real, imag}`` compounds nested in a compound,
    as C and Fortran writers lay out complex numbers) is shown with ``complex128`` /
    ``complex64`` fields, which zarr-python and tensorstore read as complex numbers."""
    zarr = pytest.importorskip("zarr")
    pair = [("real", "<f8"), ("imag", "<f8")]
    stored = np.dtype([("id", "<i4"), ("z", pair), ("w", [("real", ">f4"), ("imag", ">f4")])])
    rows = [(1, (1.0, 2.0), (3.0, -4.0)), (2, (-5.5, 0.25), (0.0, 1.0))]
    src = tmp_path / "rec.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("rec", data=np.array(rows, stored), chunks=(2,))
    import_source(str(src), fs.url, domain="/rec.h5")
    fields = fs.read_json("zarr/rec.zarr/rec/zarr.json")["data_type"]["configuration"]["fields"]
    assert fields == [["id", "int32"], ["z", "complex128"], ["w", "complex64"]]
    want = np.array([(i, complex(*z), complex(*w)) for i, z, w in rows],
                    np.dtype([("id", "<i4"), ("z", "<c16"), ("w", "<c8")]))
    local = _copy_view(fs, "zarr/rec.zarr", tmp_path / "back.zarr")
    got = zarr.open_array(str(local / "rec"), mode="r")[...]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    ts = pytest.importorskip("tensorstore")
    for name in ("z", "w"):
        store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(local / "rec")},
                         "field": name}).result()
        np.testing.assert_array_equal(store.read().result(), want[name])


def test_char_variable_fill_value_does_not_break_open_zarr(fs, tmp_path):  # noqa: F811 - fixture
    """A netCDF ``char`` variable with a ``_FillValue`` (CF files: flags, station codes)."""
    netCDF4 = pytest.importorskip("netCDF4")
    xr = pytest.importorskip("xarray")
    src = tmp_path / "c.nc"
    with netCDF4.Dataset(src, "w") as ds:
        ds.createDimension("n", 3)
        v = ds.createVariable("code", "S1", ("n",), fill_value=b"b")
        v[:] = np.array([b"a", b"c", b"d"], "S1")
        t = ds.createVariable("temp", "f4", ("n",), fill_value=np.float32(-1))
        t[:] = [1.5, -1, 2.5]
    import_source(str(src), fs.url, domain="/c.h5")
    local = _copy_view(fs, "zarr/c.zarr", tmp_path / "c.zarr")
    assert "_FillValue" not in fs.read_json("zarr/c.zarr/code/zarr.json")["attributes"]
    got = xr.open_zarr(str(local), consolidated=False).load()
    assert [bytes(x) for x in got["code"].values] == [b"a", b"c", b"d"]
    np.testing.assert_array_equal(got["temp"].values, np.array([1.5, np.nan, 2.5], "f4"))
    with h5py.File(io.BytesIO(fs.read_file("hdf5/c.h5")), "r") as f:  # the store keeps it
        assert f["code"].attrs["_FillValue"] == b"b"
