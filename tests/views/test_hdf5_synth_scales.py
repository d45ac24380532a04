"""Tier 2: dimension scales the HDF5 view shows for xarray's ``_ARRAY_DIMENSIONS``.

A domain like one xarray writes through ``zarr/`` (each dataset's dimension names in
``_ARRAY_DIMENSIONS``, no HDF5 dimension scale) is built in a store and its HDF5
view materialized: h5py's H5DS calls, netCDF4-python, ``ncdump``, and xarray with the
``netcdf4`` and ``h5netcdf`` engines must see the named dimensions and coordinates,
with attributes in the very form ``polyfs import`` stores for a netCDF-4 file, and
netCDF's dimension-only datasets for dimensions without a coordinate.
Writes through the view (operations awaited directly, no kernel) store none of them
unless the writer changes the scales, and then store the file's scales.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

from polyfs.importers import import_source
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.jsonattrs import json_attribute_record
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store
from polyfs.formats.hdf5 import view as hdf5
from polyfs.formats.hdf5.scales import SCALE_ATTRS, synthesize
from support import make_ctx, materialize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fs"))
try:
    from writeharness import FS, write_changes
finally:
    sys.path.pop(0)

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
F8 = T.FloatType(8)

# name -> (dimension names, shape); "" is an unnamed dimension (xarray's None)
LAYOUT = {
    "time": (["time"], (2,)),
    "lat": (["lat"], (3,)),
    "lon": (["lon"], (4,)),
    "temp": (["time", "lat", "lon"], (2, 3, 4)),
    "mask": (["lat", "lon"], (3, 4)),
    "noco": (["y"], (5,)),  # a dimension without a coordinate: a dimension-only dataset
    "part": (["lat", "y"], (3, 5)),
    "blank": (["lat", ""], (3, 2)),  # an unnamed axis
    "k": (["k"], (3,)),  # "k" has conflicting lengths: no scale
    "ka": (["k"], (3,)),
    "kb": (["k"], (4,)),
    "step": (["lon"], (4,)),  # named like a dimension, but along another one: no scale (attached to lon)
    "s2": (["step", "lon"], (4, 4)),  # "step" has no scale (nor a dimension-only dataset: the name is taken)
}


def _dims_attr(w: DomainWriter, ds, names: list[str]) -> None:
    rec = json_attribute_record("_ARRAY_DIMENSIONS", names, 0.0)  # as the Zarr view stores dimension_names
    w.set_attr(ds, "_ARRAY_DIMENSIONS", rec.type, rec.shape, rec.value)


def build(store, path: str = "/x.h5", real_scale: bool = False) -> dict[str, np.ndarray]:
    data: dict[str, np.ndarray] = {}
    with DomainWriter(Catalog(store), path) as w:
        for name, (dims, shape) in LAYOUT.items():
            ds = w.add_dataset(w.root, name, F8, Shape("simple", shape), shape, [])
            data[name] = np.arange(np.prod(shape), dtype="<f8").reshape(shape) + len(name)
            w.write_array(ds, data[name])
            _dims_attr(w, ds, dims)
            if name == "temp":
                w.set_attr(ds, "units", T.StringType(None, "utf8", "nullterm"), Shape("scalar"), "K")
            if real_scale and name == "lon":
                w.set_attr(ds, "CLASS", T.StringType(16, "ascii", "nullterm"), Shape("scalar"), "DIMENSION_SCALE")
        g = w.add_group(w.root, "g")
        for name, dims, n in (("x", ["x"], 2), ("v", ["x"], 2), ("w", ["lat"], 3)):
            ds = w.add_dataset(g, name, F8, Shape("simple", (n,)), (n,), [])
            w.write_array(ds, np.arange(n, dtype="<f8"))
            _dims_attr(w, ds, dims)
    return data


def view(store, dest: Path, path: str = "/x.h5") -> Path:
    ctx, reader = make_ctx(store)
    node = hdf5.domain_node(ctx.catalog.load(path), ctx, Path(path).name)
    return materialize(node, dest, reader)


@pytest.fixture
def domain(tmp_path):
    url = str(tmp_path / "store")
    store = open_store(url, create=True)
    data = build(store)
    return url, store, data


def test_coordinates_become_dimension_scales(domain, tmp_path):
    _, store, data = domain
    with h5py.File(view(store, tmp_path / "x.h5"), "r") as f:
        for name in ("time", "lat", "lon", "g/x"):
            d = f[name]
            assert d.attrs["CLASS"] == b"DIMENSION_SCALE" and h5py.h5ds.is_scale(d.id), name
            assert d.attrs["NAME"] == name.split("/")[-1].encode(), name
            assert "_ARRAY_DIMENSIONS" not in d.attrs and "DIMENSION_LIST" not in d.attrs, name
        assert [(f[r].name, int(i)) for r, i in f["time"].attrs["REFERENCE_LIST"]] == [("/temp", 0)]
        refs = f["lat"].attrs["REFERENCE_LIST"]
        assert refs.dtype["dimension"] == np.dtype("<u4") and refs.dtype.itemsize == 16
        assert sorted((f[r].name, int(i)) for r, i in refs) == [("/mask", 0), ("/part", 0), ("/temp", 1)]
        # netCDF's dimension-only datasets, for "y" and for "lat" in group g (which has no "lat")
        for name, n, users in (("y", 5, [("/noco", 0), ("/part", 1)]), ("g/lat", 3, [("/g/w", 0)])):
            d = f[name]
            assert d.shape == (n,) and d.dtype == np.dtype(">f4") and d.id.get_storage_size() == 0, name
            assert d.attrs["CLASS"] == b"DIMENSION_SCALE" and h5py.h5ds.is_scale(d.id), name
            assert d.attrs["NAME"] == b"This is a netCDF dimension but not a netCDF variable." + b"%10d" % n
            assert sorted((f[r].name, int(i)) for r, i in d.attrs["REFERENCE_LIST"]) == users, name
        for name, scales in (("temp", ["/time", "/lat", "/lon"]), ("mask", ["/lat", "/lon"]), ("g/v", ["/g/x"]),
                             ("step", ["/lon"]), ("noco", ["/y"]), ("part", ["/lat", "/y"]), ("g/w", ["/g/lat"])):
            d = f[name]
            assert [[f[r].name for r in row] for row in d.attrs["DIMENSION_LIST"]] == [[s] for s in scales], name
            for i, s in enumerate(scales):
                assert h5py.h5ds.is_attached(d.id, f[s].id, i), (name, s)
            assert "_ARRAY_DIMENSIONS" not in d.attrs, name
            if "/" not in name:
                np.testing.assert_array_equal(d[()], data[name])
        assert f["temp"].attrs["units"] == "K"
        assert sorted((f[r].name, int(i)) for r, i in f["lon"].attrs["REFERENCE_LIST"]) == \
            [("/mask", 1), ("/step", 0), ("/temp", 2)]
        # no scale: conflicting lengths ("k"), a 1-D array along another dimension ("step")
        for name in ("k", "step"):
            assert not any(a in f[name].attrs for a in ("CLASS", "NAME", "REFERENCE_LIST")), name
        # an axis without a scale: no DIMENSION_LIST at all (readers refuse a partial one); names kept
        for name in ("blank", "k", "ka", "kb", "s2"):
            assert "DIMENSION_LIST" not in f[name].attrs, name
            assert "_ARRAY_DIMENSIONS" in f[name].attrs, name
        assert [x.decode() if isinstance(x, bytes) else x for x in f["s2"].attrs["_ARRAY_DIMENSIONS"]] == \
            ["step", "lon"]
        assert "k" not in f["g"] and sorted(f) == sorted([*LAYOUT, "g", "y"])


def test_netcdf_readers_see_the_dimensions(domain, tmp_path):
    netCDF4 = pytest.importorskip("netCDF4")
    xr = pytest.importorskip("xarray")
    _, store, data = domain
    path = view(store, tmp_path / "x.nc")
    with netCDF4.Dataset(path) as nc:
        assert nc["temp"].dimensions == ("time", "lat", "lon")
        assert nc["mask"].dimensions == ("lat", "lon")
        assert nc.groups["g"]["v"].dimensions == ("x",) and nc.groups["g"]["w"].dimensions == ("lat",)
        assert nc["noco"].dimensions == ("y",) and nc["part"].dimensions == ("lat", "y")
        assert {n: len(d) for n, d in nc.dimensions.items() if not n.startswith("phony_dim")} == \
            {"time": 2, "lat": 3, "lon": 4, "y": 5}
        assert "y" not in nc.variables
        np.testing.assert_array_equal(nc["temp"][:], data["temp"])
    head = subprocess.run(["ncdump", "-h", str(path)], capture_output=True, text=True, env=ENV, timeout=60)
    assert head.returncode == 0, head.stderr
    assert "double temp(time, lat, lon) ;" in head.stdout and "double mask(lat, lon) ;" in head.stdout
    assert "double lat(lat) ;" in head.stdout and "double v(x) ;" in head.stdout
    assert "double part(lat, y) ;" in head.stdout and "\ty = 5 ;" in head.stdout
    for engine, kw in (("netcdf4", {}), ("h5netcdf", {"phony_dims": "sort"})):
        with xr.open_dataset(path, engine=engine, **kw) as ds:
            assert ds["temp"].dims == ("time", "lat", "lon"), engine
            assert ds["part"].dims == ("lat", "y") and "y" not in ds.variables, engine
            assert {"time", "lat", "lon"} <= set(ds.coords), engine
            assert "_ARRAY_DIMENSIONS" not in ds["temp"].attrs, engine
            np.testing.assert_array_equal(ds["lat"].values, data["lat"])
            np.testing.assert_array_equal(ds["temp"].values, data["temp"])
    # a file whose every dimension is named (with a coordinate or not): h5netcdf needs no phony_dims
    url = str(tmp_path / "store2")
    store2 = open_store(url, create=True)
    with DomainWriter(Catalog(store2), "/c.h5") as w:
        for name in ("time", "lat", "temp", "noco"):
            dims, shape = LAYOUT[name] if name != "temp" else (["time", "lat"], (2, 3))
            ds = w.add_dataset(w.root, name, F8, Shape("simple", shape), shape, [])
            w.write_array(ds, np.ones(shape))
            _dims_attr(w, ds, dims)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # h5netcdf warns when it makes phony dimensions
        with xr.open_dataset(view(store2, tmp_path / "c.h5", "/c.h5"), engine="h5netcdf") as ds:
            assert ds["temp"].dims == ("time", "lat") and set(ds.coords) == {"time", "lat"}
            assert ds["noco"].dims == ("y",) and ds.sizes["y"] == 5


def test_same_form_as_an_imported_netcdf_file(domain, tmp_path):
    """The shown attributes are the ones ``polyfs import`` stores for netCDF-C's scales:
    same types, shapes and values (references by path)."""
    netCDF4 = pytest.importorskip("netCDF4")
    _, store, _ = domain
    src = tmp_path / "ref.nc"
    with netCDF4.Dataset(src, "w") as nc:
        for name, n in (("time", 2), ("lat", 3), ("lon", 4)):
            nc.createDimension(name, n)
            nc.createVariable(name, "f8", (name,))[:] = np.arange(n)
        nc.createVariable("temp", "f8", ("time", "lat", "lon"))[:] = 0
        nc.createVariable("mask", "f8", ("lat", "lon"))[:] = 0
        nc.createVariable("step", "f8", ("lon",))[:] = 0
        nc.createDimension("y", 5)
        nc.createVariable("noco", "f8", ("y",))[:] = 0
        nc.createVariable("part", "f8", ("lat", "y"))[:] = 0
    url = str(tmp_path / "ref_store")
    dom = import_source(src, url, progress=False)
    ref = Catalog(open_store(url)).load(dom)
    mine = Catalog(store).load("/x.h5")
    synth = synthesize(mine)

    def form(model, paths, attrs_of) -> dict:
        out = {}
        for name in ("time", "lat", "lon", "temp", "mask", "step", "noco", "part", "y"):
            for a, attr in attrs_of(name).items():
                if a not in SCALE_ATTRS:
                    continue
                text = json.dumps(attr.value)
                for oid, p in paths.items():
                    text = text.replace(oid, p)
                if a == "REFERENCE_LIST":
                    text = json.dumps(sorted(json.loads(text)))
                out[(name, a)] = (attr.type.to_json(), attr.shape.to_json(), text)
        return out

    ref_paths = {e.obj.id: e.path for e in ref.walk()}
    want = form(ref, ref_paths, lambda name: ref.resolve("/" + name).attributes)
    mine_paths = {e.obj.id: e.path for e in mine.walk()}
    mine_paths.update({oid: p for p, oid in synth.paths().items()})
    by_path = {p: oid for oid, p in mine_paths.items()}
    got = form(mine, mine_paths, lambda name: synth.extra.get(by_path["/" + name], {}))
    assert got == want
    assert len(got) == 5 + 4 * 2 + 4  # DIMENSION_LIST x5, CLASS+NAME x4, REFERENCE_LIST x4
    y = synth.dim_only[by_path["/y"]][2]  # the dimension-only dataset: netCDF-C's type and shape
    assert (y.type.to_json(), y.shape.dims) == (ref.resolve("/y").type.to_json(), ref.resolve("/y").shape.dims)


def test_real_scales_are_never_mixed_with_shown_ones(tmp_path):
    store = open_store(str(tmp_path / "store"), create=True)
    build(store, real_scale=True)
    assert not synthesize(Catalog(store).load("/x.h5"))
    with h5py.File(view(store, tmp_path / "x.h5"), "r") as f:
        assert "DIMENSION_LIST" not in f["temp"].attrs and "REFERENCE_LIST" not in f["lat"].attrs
        assert "_ARRAY_DIMENSIONS" in f["temp"].attrs and "CLASS" not in f["lat"].attrs


def _model_attrs(url: str, name: str) -> set[str]:
    return set(Catalog(open_store(url)).load("/x.h5").resolve(name).attributes)


def test_writes_through_the_view_store_no_shown_attribute(domain):
    url, _, _ = domain
    fs = FS(f"file://{url}")
    before = fs.read_file("hdf5/x.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        f["temp"].attrs["note"] = "hi"
        f["temp"][0, 0, 0] = 99
        f["lat"].attrs["units"] = "degrees_north"
    write_changes(fs, "hdf5/x.h5", before, buf.getvalue())
    assert _model_attrs(url, "/temp") == {"_ARRAY_DIMENSIONS", "units", "note"}
    assert _model_attrs(url, "/lat") == {"_ARRAY_DIMENSIONS", "units"}
    assert _model_attrs(url, "/mask") == {"_ARRAY_DIMENSIONS"}
    model = Catalog(open_store(url)).load("/x.h5")
    assert "y" not in model.root.links and "lat" not in model.resolve("/g").links  # dimension-only: shown only
    assert len(model.datasets) == len(LAYOUT) + 3
    after = FS(f"file://{url}", read_only=True)
    with h5py.File(io.BytesIO(after.read_file("hdf5/x.h5")), "r") as f:
        assert f["temp"][0, 0, 0] == 99 and f["temp"].attrs["note"] == "hi"
        assert h5py.h5ds.is_attached(f["temp"].id, f["lat"].id, 1)
    assert after.read_json("zarr/x.zarr/temp/zarr.json")["dimension_names"] == ["time", "lat", "lon"]


def test_a_writer_changing_the_scales_stores_the_files_scales(domain):
    url, _, _ = domain
    fs = FS(f"file://{url}")
    before = fs.read_file("hdf5/x.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        f["temp"].dims[0].detach_scale(f["time"])
    written = buf.getvalue()
    write_changes(fs, "hdf5/x.h5", before, written)
    model = Catalog(open_store(url)).load("/x.h5")
    for name, want in (("temp", {"DIMENSION_LIST"}), ("mask", {"DIMENSION_LIST"}), ("time", {"CLASS", "NAME"}),
                       ("lat", {"CLASS", "NAME", "REFERENCE_LIST"}), ("g/x", {"CLASS", "NAME", "REFERENCE_LIST"}),
                       ("g/v", {"DIMENSION_LIST"}), ("noco", {"DIMENSION_LIST"})):
        attrs = model.resolve("/" + name).attributes
        assert {a for a in attrs if a in SCALE_ATTRS} == want, name
        assert "_ARRAY_DIMENSIONS" in attrs, name  # kept for the Zarr view
    for name in ("y", "g/lat"):  # the dimension-only datasets are stored now, as netCDF-C made them
        attrs = model.resolve("/" + name).attributes
        assert set(attrs) == {"CLASS", "NAME", "REFERENCE_LIST"}, name
    after = FS(f"file://{url}", read_only=True)
    with h5py.File(io.BytesIO(after.read_file("hdf5/x.h5")), "r") as f, h5py.File(io.BytesIO(written), "r") as w:
        for name in ("temp", "mask", "g/v", "noco", "part", "g/w"):
            assert [[f[r].name for r in row] for row in f[name].attrs["DIMENSION_LIST"]] == \
                [[w[r].name for r in row] for row in w[name].attrs["DIMENSION_LIST"]], name
        assert len(f["temp"].attrs["DIMENSION_LIST"][0]) == 0
        assert not h5py.h5ds.is_attached(f["temp"].id, f["time"].id, 0)
        assert h5py.h5ds.is_attached(f["temp"].id, f["lat"].id, 1)
    # the axis no scale names any more keeps xarray's name in the Zarr view
    assert after.read_json("zarr/x.zarr/temp/zarr.json")["dimension_names"] == ["time", "lat", "lon"]


def test_data_written_to_a_dimension_only_dataset_is_stored(domain):
    url, _, _ = domain
    fs = FS(f"file://{url}")
    before = fs.read_file("hdf5/x.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        f["y"][:] = np.arange(5, dtype=">f4")
    write_changes(fs, "hdf5/x.h5", before, buf.getvalue())
    model = Catalog(open_store(url)).load("/x.h5")
    assert "y" in model.root.links and "DIMENSION_LIST" in model.resolve("/noco").attributes
    after = FS(f"file://{url}", read_only=True)
    with h5py.File(io.BytesIO(after.read_file("hdf5/x.h5")), "r") as f:
        np.testing.assert_array_equal(f["y"][()], np.arange(5.0))
        assert h5py.h5ds.is_attached(f["part"].id, f["y"].id, 1)
        assert [[f[r].name for r in row] for row in f["temp"].attrs["DIMENSION_LIST"]] == [["/time"], ["/lat"],
                                                                                            ["/lon"]]
    assert after.read_json("zarr/x.zarr/y/zarr.json")["shape"] == [5]
    assert after.read_json("zarr/x.zarr/noco/zarr.json")["dimension_names"] == ["y"]


def test_deleting_variables_stores_no_scales(domain):
    """HDF5 leaves a deleted dataset in the REFERENCE_LIST of its scales: the view drops it
    too, so nothing is stored, and a dimension nothing uses any more is gone."""
    url, _, _ = domain
    fs = FS(f"file://{url}")
    before = fs.read_file("hdf5/x.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        for name in ("mask", "noco", "part"):
            del f[name]
    write_changes(fs, "hdf5/x.h5", before, buf.getvalue())
    model = Catalog(open_store(url)).load("/x.h5")
    assert not any(a in SCALE_ATTRS for ds in model.datasets.values() for a in ds.attributes)
    assert "mask" not in model.root.links and "y" not in model.root.links
    after = FS(f"file://{url}", read_only=True)
    with h5py.File(io.BytesIO(after.read_file("hdf5/x.h5")), "r") as f:
        assert "y" not in f and "mask" not in f
        assert [(f[r].name, int(i)) for r, i in f["lat"].attrs["REFERENCE_LIST"]] == [("/temp", 1)]
        assert h5py.h5ds.is_attached(f["temp"].id, f["lat"].id, 1)
