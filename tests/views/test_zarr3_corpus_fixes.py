"""Tier 2: fixes found by the fidelity corpus (tests/mount/test_fidelity_corpus.py), each on a
small source shown through a materialized view.

- a netCDF string variable with a ``_FillValue``: xarray reads the Zarr view as the file
  (its Zarr v3 reader refuses any ``_FillValue`` on a string array, so the view leaves the
  attribute out; the store keeps it).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from polyfs.formats.zarr import view as zarr3
from polyfs.importers import import_source
from polyfs.store import open_store
from support import make_ctx, materialize

netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def _zarr_view(src: Path, base: Path):
    """(the materialized Zarr view of ``src``, its domain model)."""
    store_url = str(base / "store")
    domain = import_source(src, store_url, domain="/" + src.name, progress=False)
    ctx, reader = make_ctx(open_store(store_url))
    model = ctx.catalog.load(domain)
    return materialize(zarr3.domain_node(model, ctx, src.stem + ".zarr"), base / (src.stem + ".zarr"), reader), model


def test_string_variable_with_fill_value_reads_in_xarray(tmp_path):
    src = tmp_path / "strings.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("x", 3)
        s = nc.createVariable("names", str, ("x",), fill_value="none")
        s.long_name = "station names"
        s[0], s[1], s[2] = "alpha", "", "gamma"
        v = nc.createVariable("v", "f4", ("x",), fill_value=np.float32(-1))
        v[:] = [1.0, 2.0, 3.0]
    root, model = _zarr_view(src, tmp_path)
    attrs = json.loads((root / "names" / "zarr.json").read_bytes())["attributes"]
    assert attrs == {"long_name": "station names"}
    assert "_FillValue" in json.loads((root / "v" / "zarr.json").read_bytes())["attributes"]
    xr.testing.assert_identical(xr.open_zarr(root, consolidated=False).load(), xr.open_dataset(src).load())
    # the store keeps the attribute (the HDF5 view still shows it)
    names = next(ds for ds in model.datasets.values() if "long_name" in ds.attributes)
    assert "_FillValue" in names.attributes


def test_variable_shorter_than_its_unlimited_dimension_is_shown_as_long(tmp_path):
    """netCDF reads an unlimited dimension as long as its longest variable and a shorter
    variable's missing records as its fill value; the Zarr view shows the same shape, so
    xarray opens the group (else: "conflicting sizes for dimension")."""
    src = tmp_path / "records.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("x", 3)
        t = nc.createVariable("time", "f8", ("time",))
        t[:] = [0.0, 1.0, 2.0, 3.0]
        full = nc.createVariable("full", "i2", ("time", "x"), chunksizes=(2, 3))
        full[:] = np.arange(12).reshape(4, 3)
        short = nc.createVariable("short", "f4", ("time", "x"), fill_value=np.float32(-5), chunksizes=(2, 3))
        short[0:1] = [[1.0, 2.0, 3.0]]
        nc.createVariable("never", "u1", ("time",), fill_value=7)
        nc.createVariable("fixed", "i4", ("x",))[:] = [1, 2, 3]
    root, model = _zarr_view(src, tmp_path)
    shapes = {name: json.loads((root / name / "zarr.json").read_bytes())["shape"]
              for name in ("time", "full", "short", "never", "fixed")}
    assert shapes == {"time": [4], "full": [4, 3], "short": [4, 3], "never": [4], "fixed": [3]}
    stored = {ds.shape.dims for ds in model.datasets.values()}
    assert {(1, 3), (0,)} <= stored  # the store keeps the datasets' own extents
    got = xr.open_zarr(root, consolidated=False).load()
    want = xr.open_dataset(src).load()
    xr.testing.assert_identical(got, want)
    assert int(got["short"].isnull().sum()) == 9 and bool(got["never"].isnull().all())


def test_rewriting_the_shown_zarr_json_of_a_short_variable_does_not_resize_it(tmp_path):
    """The view shows a netCDF variable as long as its unlimited dimension; a tool that
    writes that zarr.json back with a new attribute changes the attribute only (the
    store keeps the variable's own extent), while a real new shape still resizes."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fs"))
    from writeharness import FS

    src = tmp_path / "records.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("time", None)
        nc.createVariable("time", "f8", ("time",))[:] = [0.0, 1.0, 2.0, 3.0]
        nc.createVariable("short", "f4", ("time",), fill_value=np.float32(-5), chunksizes=(2,))[0:1] = [1.0]
    store = tmp_path / "store"
    import_source(src, str(store), domain="/records.nc", progress=False)
    fs = FS(str(store), read_only=False)
    try:
        path = f"zarr/{fs.ls('zarr')[0]}/short/zarr.json"
        meta = fs.read_json(path)
        assert meta["shape"] == [4]
        meta["attributes"]["note"] = "edited"
        fs.write_json(path, meta)
        model = fs.ops.reader.ctx.catalog.load("/records.nc")
        ds = model.resolve("/short")
        assert ds.shape.dims == (1,) and "note" in ds.attributes
        meta["shape"] = [6]
        fs.write_json(path, meta)
        assert fs.ops.reader.ctx.catalog.load("/records.nc").resolve("/short").shape.dims == (6,)
    finally:
        fs.close()
