"""Tier 2 (no kernel): a coordinate variable of an imported netCDF-4 file deleted or made again
through ``zarr/``, exploratory round 14 (real tools over a mount: tests/mount/test_scales_explore14.py).

Deleting a dataset leaves the other datasets' stored ``DIMENSION_LIST`` naming it (nothing
rewrites them: HSDS or another process may delete it as well). ``hdf5/`` served those references
as null (libhdf5's own ``del`` leaves them null too), so ``ncdump``, netCDF4 and h5netcdf failed
on the whole file ("NetCDF: HDF error"), ``zarr/`` showed ``dimension_names`` with ``None``, and
the scales' ``REFERENCE_LIST`` kept naming deleted variables. Now (read time, scales.py and
hdmf.gone_scales) an axis whose scale is gone is shown attached to the dimension it keeps: the
array made again in its place (zarr-python ``create_array(..., overwrite=True,
dimension_names=[name])``), else netCDF's dimension-only dataset, named as the datasets recorded
(``_ARRAY_DIMENSIONS``) or ``phony_dim_<n>``; ``REFERENCE_LIST`` drops what is gone.
"""
from __future__ import annotations

import io
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_write_semantics import fs  # noqa: F401 - fixture
from writeharness import ZarrLayout, read_zarr_array, write_changes, zarr_array_meta

from polyfs.check import check_store
from polyfs.model.catalog import Catalog
from polyfs.store import open_store
from polyfs.importers import import_source

netCDF4 = pytest.importorskip("netCDF4")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _nc_file(path: Path) -> Path:
    """What xarray ``to_netcdf`` writes: dimensions time/y/x, each with a coordinate variable."""
    with netCDF4.Dataset(path, "w") as d:
        for name, n in (("time", 2), ("y", 3), ("x", 4)):
            d.createDimension(name, n)
            d.createVariable(name, "f8", (name,))[:] = np.arange(n) * 10.0
        d.createVariable("t", "f4", ("time", "y", "x"))[:] = np.arange(24, dtype="f4").reshape(2, 3, 4)
        d.createVariable("s", "f8", ("time",))[:] = [1.5, 2.5]
    return path


def _imported(fs, tmp_path: Path) -> None:  # noqa: F811 - the fixture's value
    import_source(str(_nc_file(tmp_path / "f.nc")), fs.url, domain="/f.nc", progress=False)


def _netcdf(fs, tmp_path: Path) -> dict:  # noqa: F811
    """Each variable's dimensions and values, read by netCDF-C from ``hdf5/f.nc``."""
    path = tmp_path / "view.nc"
    path.write_bytes(fs.read_file("hdf5/f.nc"))
    with netCDF4.Dataset(path) as d:
        return {name: (v.dimensions, v[...].filled(np.nan) if np.ma.isMaskedArray(v[...]) else v[...])
                for name, v in d.variables.items()}


def _references_resolve(fs) -> None:  # noqa: F811
    """Every DIMENSION_LIST and REFERENCE_LIST reference of ``hdf5/f.nc`` names an object there."""
    with h5py.File(io.BytesIO(fs.read_file("hdf5/f.nc")), "r") as f:
        for name, obj in f.items():
            for row in obj.attrs.get("DIMENSION_LIST", []):
                assert all(r and f[r] is not None for r in row), name
            for ref, _ in obj.attrs.get("REFERENCE_LIST", []):
                assert ref and f[ref] is not None, name


def test_deleting_a_coordinate_variable_keeps_the_file_readable(fs, tmp_path):  # noqa: F811
    _imported(fs, tmp_path)
    fs.rm_r("zarr/f.nc.zarr/time")  # zarr-python del g["time"]
    snap = fs.snapshot()
    got = _netcdf(fs, tmp_path)  # failed: "NetCDF: HDF error"
    assert "time" not in got
    dim = got["t"][0][0]
    assert dim == "time"  # its name, recorded by the delete (else phony_dim_0)
    assert got["t"][0] == (dim, "y", "x") and got["s"][0] == (dim,)  # one dimension, shared
    np.testing.assert_array_equal(got["t"][1], np.arange(24, dtype="f4").reshape(2, 3, 4))
    _references_resolve(fs)
    t_dims = fs.read_json("zarr/f.nc.zarr/t/zarr.json")["dimension_names"]
    assert t_dims == [dim, "y", "x"]  # was [None, "y", "x"]
    assert fs.read_json("zarr/f.nc.zarr/s/zarr.json")["dimension_names"] == [dim]
    assert fs.snapshot() == snap  # shown, nothing stored
    assert not check_store(fs.url, deep=True).problems


def test_names_a_zarr_writer_recorded_survive_the_delete(fs, tmp_path):  # noqa: F811
    """xarray ``to_zarr(mode="a")`` writing ``t`` back with its ``dimension_names`` stores them
    (``_ARRAY_DIMENSIONS``): the deleted dimension keeps that name for every variable using it."""
    _imported(fs, tmp_path)
    fs.rm_r("zarr/f.nc.zarr/time")
    meta = fs.read_json("zarr/f.nc.zarr/t/zarr.json")
    fs.write_json("zarr/f.nc.zarr/t/zarr.json", {**meta, "dimension_names": ["time", "y", "x"]})
    got = _netcdf(fs, tmp_path)
    assert got["t"][0] == ("time", "y", "x") and got["s"][0] == ("time",) and "time" not in got
    assert fs.read_json("zarr/f.nc.zarr/s/zarr.json")["dimension_names"] == ["time"]
    with h5py.File(io.BytesIO(fs.read_file("hdf5/f.nc")), "r") as f:
        assert "_ARRAY_DIMENSIONS" not in f["t"].attrs  # said by DIMENSION_LIST, as netCDF-4 says it
        assert f["time"].attrs["NAME"].startswith(b"This is a netCDF dimension but not a netCDF variable")
    _references_resolve(fs)


def test_a_coordinate_variable_made_again_through_zarr_is_the_dimensions_scale(fs, tmp_path):  # noqa: F811
    """zarr-python ``create_array("time", overwrite=True, dimension_names=["time"])`` then values."""
    _imported(fs, tmp_path)
    fs.rm_r("zarr/f.nc.zarr/time")
    meta = zarr_array_meta((2,), "<f8", (2,), codecs=(), fill=0.0, dimension_names=["time"])
    fs.mkdir("zarr/f.nc.zarr/time")
    fs.write_json("zarr/f.nc.zarr/time/zarr.json", meta)
    fs.mkdir("zarr/f.nc.zarr/time/c")
    fs.write_file("zarr/f.nc.zarr/time/c/0", ZarrLayout(meta).encode_chunk(np.array([100.0, 200.0])))
    got = _netcdf(fs, tmp_path)
    assert got["t"][0] == ("time", "y", "x") and got["s"][0] == ("time",)
    np.testing.assert_array_equal(got["time"][1], [100.0, 200.0])
    assert got["time"][0] == ("time",)
    _references_resolve(fs)
    with h5py.File(io.BytesIO(fs.read_file("hdf5/f.nc")), "r") as f:
        assert sorted(f["t"].dims[0].keys()) == ["time"] and f["t"].dims[0][0].name == "/time"
        assert sorted(f[r].name for r, _ in f["time"].attrs["REFERENCE_LIST"]) == ["/s", "/t"]
    assert fs.read_json("zarr/f.nc.zarr/t/zarr.json")["dimension_names"] == ["time", "y", "x"]
    assert read_zarr_array(fs, "zarr/f.nc.zarr/time")[1].tolist() == [100.0, 200.0]
    h5netcdf = pytest.importorskip("h5netcdf")
    with h5netcdf.File(io.BytesIO(fs.read_file("hdf5/f.nc")), "r") as f:
        assert f["t"].dimensions == ("time", "y", "x") and f["time"][...].tolist() == [100.0, 200.0]
    assert not check_store(fs.url, deep=True).problems


def test_deleting_a_variable_drops_it_from_its_scales_reference_lists(fs, tmp_path):  # noqa: F811
    _imported(fs, tmp_path)
    fs.rm_r("zarr/f.nc.zarr/s")
    _references_resolve(fs)  # time's REFERENCE_LIST named s (null)
    with h5py.File(io.BytesIO(fs.read_file("hdf5/f.nc")), "r") as f:
        assert [f[r].name for r, _ in f["time"].attrs["REFERENCE_LIST"]] == ["/t"]
    assert _netcdf(fs, tmp_path)["t"][0] == ("time", "y", "x")


def test_h5py_deleting_the_scale_through_hdf5_leaves_a_file_netcdf_opens(fs, tmp_path):  # noqa: F811
    """libhdf5 leaves null references where the scale was (a local file so changed fails in
    netCDF4 and h5netcdf); the view shows them attached to a dimension of netCDF's dimension id."""
    _imported(fs, tmp_path)
    before = fs.read_file("hdf5/f.nc")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        del f["time"]
    write_changes(fs, "hdf5/f.nc", before, buf.getvalue())
    got = _netcdf(fs, tmp_path)
    dim = got["t"][0][0]
    assert got["s"][0] == (dim,) and got["t"][0] == (dim, "y", "x") and "time" not in got
    _references_resolve(fs)
    assert None not in fs.read_json("zarr/f.nc.zarr/t/zarr.json")["dimension_names"]
    assert not check_store(fs.url, deep=True).problems


def test_an_unchanged_rewrite_of_the_repaired_file_stores_nothing(fs, tmp_path):  # noqa: F811
    _imported(fs, tmp_path)
    fs.rm_r("zarr/f.nc.zarr/time")
    snap = fs.snapshot()
    before = fs.read_file("hdf5/f.nc")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+"):
        pass
    write_changes(fs, "hdf5/f.nc", before, buf.getvalue())
    assert fs.snapshot() == snap
    meta = fs.read_json("zarr/f.nc.zarr/t/zarr.json")
    fs.write_json("zarr/f.nc.zarr/t/zarr.json", meta)  # zarr-python attrs rewrite: names as shown
    model = Catalog(open_store(fs.url)).load("/f.nc")
    t = model.resolve("/t")
    # the names the delete recorded, kept as they were; the stored DIMENSION_LIST too
    assert t.attributes["_ARRAY_DIMENSIONS"].value == ["time", "y", "x"] and "DIMENSION_LIST" in t.attributes


def test_a_plain_hdf5_scale_deleted_through_zarr_leaves_its_axis_detached(fs, tmp_path):  # noqa: F811
    """Outside netCDF no placeholder dataset is made: the axis shows no scale (an empty row of
    DIMENSION_LIST, as H5DS detaches one); the other axes keep theirs. ``zarr/`` keeps the
    axis's name (recorded when the scale was deleted)."""
    src = tmp_path / "p.h5"
    with h5py.File(src, "w") as f:
        a = f.create_dataset("a", data=np.arange(6.0).reshape(2, 3))
        for i, (name, n) in enumerate((("row", 2), ("col", 3))):
            f.create_dataset(name, data=np.arange(n)).make_scale(name)
            a.dims[i].attach_scale(f[name])
    import_source(str(src), fs.url, domain="/p.h5", progress=False)
    fs.rm_r("zarr/p.zarr/row")
    with h5py.File(io.BytesIO(fs.read_file("hdf5/p.h5")), "r") as f:
        assert sorted(f) == ["a", "col"]
        assert len(f["a"].dims[0]) == 0 and f["a"].dims[1][0].name == "/col"
        np.testing.assert_array_equal(f["a"][...], np.arange(6.0).reshape(2, 3))
    # the name the deleted scale gave the axis, recorded by the delete
    assert fs.read_json("zarr/p.zarr/a/zarr.json")["dimension_names"] == ["row", "col"]


def test_the_names_a_deleted_scale_takes_along_can_be_recorded_first(fs, tmp_path):  # noqa: F811
    """hdmf.dimension_records: what a write deleting a scale would store (as ``_ARRAY_DIMENSIONS``)
    so the dimension keeps its name; stored so, every view shows it."""
    from polyfs.views.hdmf import dimension_records

    _imported(fs, tmp_path)
    model = Catalog(open_store(fs.url)).load("/f.nc")
    time, t, s = (model.resolve(p) for p in ("/time", "/t", "/s"))
    assert dimension_records(model, {time.id}) == {t.id: ["time", "y", "x"], s.id: ["time"]}
    assert dimension_records(model, {t.id}) == {}  # not a scale: nothing names it
