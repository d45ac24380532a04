"""Tier 2: netCDF readers through the HDF5 view (ncdump, netCDF-C 4.9 on HDF5 1.10).

A netCDF-4 file (netCDF4-python: groups, an unlimited dimension, coordinate
variables, a string variable, compression, fill values) is imported and its
view read by ``ncdump``: the same dimensions, variables, attributes and data.
Dimensions are HDF5 dimension scales: DIMENSION_LIST (sequences of object
references) and REFERENCE_LIST (compounds holding references) must point at
the right object headers for netCDF to see them.

A domain written by HSDS through h5pyd with dimension scales gives the same
``ncdump -h`` through the view as the same calls made with h5py on a local
file (HSDS stores its gzip chunks as Blosc frames: the view declares blosc).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import hdf5plugin
import numpy as np
import pytest

from polyfs.codecs.registry import BLOSC, DEFLATE
from polyfs.importers import import_source
from polyfs.store import open_store
from polyfs.formats.hdf5 import view as hdf5
from support import make_ctx, materialize

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)

# the HSDS server fixture of tests/hsds (socket mode, module scope), reused as it is
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hsds"))
try:
    from test_hsds_interop import hsds  # noqa: E402,F401
finally:
    sys.path.pop(0)


def ncdump(*args) -> str:
    res = subprocess.run(["ncdump", *map(str, args)], capture_output=True, text=True, env=ENV, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def structure(text: str) -> dict:
    """``ncdump`` output as {group: {"dims": set, "vars": {decl: set(attrs)}, "attrs": set, "data": {var: values}}}."""
    out: dict = {}
    path: list[str] = []
    section = None
    var = None
    data_text: list[str] = []

    def grp() -> dict:
        return out.setdefault("/" + "/".join(path), {"dims": set(), "vars": {}, "attrs": set(), "data": {}})

    def flush_data() -> None:
        body = " ".join(data_text)
        for name, values in re.findall(r"(\w+) = (.*?) ;", body):
            grp()["data"][name] = " ".join(values.replace(",", " ").split())
        data_text.clear()

    for raw in text.splitlines()[1:]:
        line = raw.strip()
        if not line:
            continue
        m = re.match(r"group: (\S+) \{", line)
        if m:
            flush_data()
            path.append(m.group(1))
            section = None
            continue
        if line.startswith("} // group") or line == "}":
            flush_data()
            if path:
                path.pop()
            section = None
            continue
        if line in ("dimensions:", "variables:", "data:", "// global attributes:", "// group attributes:"):
            flush_data()
            section = line
            continue
        g = grp()
        if section == "dimensions:":
            g["dims"].add(line)
        elif section == "variables:":
            if re.match(r"^[\w ]+\(.*\) ;$|^\w+ \w+ ;$", line) and ":" not in line:
                var = line
                g["vars"][var] = set()
            else:
                g["vars"][var].add(line)
        elif section in ("// global attributes:", "// group attributes:"):
            g["attrs"].add(line)
        elif section == "data:":
            data_text.append(line)
    flush_data()
    return out


@pytest.fixture(scope="module")
def netcdf_file(tmp_path_factory):
    import netCDF4

    base = tmp_path_factory.mktemp("nc")
    src = base / "climate.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.title = "polyfs test"
        nc.history = "written by netCDF4-python"
        nc.createDimension("time", None)
        nc.createDimension("lat", 4)
        nc.createDimension("lon", 5)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(3)
        la = nc.createVariable("lat", "f4", ("lat",))
        la.units = "degrees_north"
        la[:] = np.linspace(-45, 45, 4)
        lo = nc.createVariable("lon", "f4", ("lon",))
        lo[:] = np.linspace(0, 360, 5, endpoint=False)
        v = nc.createVariable("temp", "f4", ("time", "lat", "lon"), zlib=True, complevel=4, fill_value=-999.0,
                              chunksizes=(1, 4, 5))
        v.units = "K"
        v.long_name = "air temperature"
        v[:] = 250 + np.arange(60).reshape(3, 4, 5) / 10
        p = nc.createVariable("precip", "i2", ("lat", "lon"), fill_value=-1)
        p[1:3, 1:4] = np.arange(6).reshape(2, 3)
        s = nc.createVariable("station", str, ("lat",))
        s[:] = np.array(["alpha", "b", "", "delta δ"], dtype=object)
        g = nc.createGroup("forecast")
        g.createDimension("step", 2)
        x = g.createVariable("lead", "i4", ("step",))
        x[:] = [6, 12]
        y = g.createVariable("field", "f8", ("step", "lat"))  # a dimension of the parent group
        y[:] = np.arange(8).reshape(2, 4)
        g.note = "nested"
    return src


def view_of(source: Path, dest: Path) -> Path:
    store_url = str(dest / "store")
    domain = import_source(source, store_url, progress=False)
    ctx, reader = make_ctx(open_store(store_url))
    node = hdf5.domain_node(ctx.catalog.load(domain), ctx, source.stem + ".h5")
    return materialize(node, dest / (source.stem + "_view.nc"), reader)


def test_ncdump_sees_the_same_dimensions_variables_and_data(netcdf_file, tmp_path):
    view = view_of(netcdf_file, tmp_path)
    want, got = structure(ncdump(netcdf_file)), structure(ncdump(view))
    assert set(got) == set(want) == {"/", "/forecast"}
    for g in want:
        assert got[g]["dims"] == want[g]["dims"], g
        assert got[g]["vars"] == want[g]["vars"], g
        assert got[g]["attrs"] == want[g]["attrs"], g
        assert got[g]["data"] == want[g]["data"], g
    assert "time = UNLIMITED ; // (3 currently)" in want["/"]["dims"]
    assert "float temp(time, lat, lon) ;" in got["/"]["vars"]
    assert "double field(step, lat) ;" in got["/forecast"]["vars"]  # a dimension found in the parent group
    assert len(got["/"]["data"]) == 6


def test_dimension_scale_references_resolve(netcdf_file, tmp_path):
    import h5py

    view = view_of(netcdf_file, tmp_path)
    with h5py.File(view, "r") as f, h5py.File(netcdf_file, "r") as orig:
        for name in ("temp", "precip", "station", "forecast/field"):
            dl = f[name].attrs["DIMENSION_LIST"]
            want = [[orig[r].name for r in row] for row in orig[name].attrs["DIMENSION_LIST"]]
            assert [[f[r].name for r in row] for row in dl] == want, name
            assert h5py.h5ds.is_attached(f[name].id, f[want[0][0]].id, 0)
        refs = f["lat"].attrs["REFERENCE_LIST"]
        assert sorted((f[r].name, int(i)) for r, i in refs) == \
            sorted((orig[r].name, int(i)) for r, i in orig["lat"].attrs["REFERENCE_LIST"])
        assert f["lat"].attrs["CLASS"] == b"DIMENSION_SCALE"


# -- HSDS ---------------------------------------------------------------------------------
def _dimscales(f, module) -> None:  # noqa: ARG001 - h5py or h5pyd, same calls
    """The same netCDF-like structure through h5py or h5pyd."""
    t = f.create_dataset("time", data=np.arange(3.0), maxshape=(None,), chunks=(2,))
    lat = f.create_dataset("lat", data=np.linspace(-45, 45, 4).astype("f4"))
    lon = f.create_dataset("lon", data=np.arange(5, dtype="f4"))
    for d, n in ((t, "time"), (lat, "lat"), (lon, "lon")):
        d.make_scale(n)
    temp = f.create_dataset("temp", data=(np.arange(60) % 17).astype("f4").reshape(3, 4, 5), chunks=(1, 4, 5),
                            compression="gzip")
    temp.attrs["units"] = "K"
    for i, d in enumerate((t, lat, lon)):
        temp.dims[i].attach_scale(d)
    mask = f.create_dataset("mask", data=np.arange(20, dtype="i2").reshape(4, 5), compression="gzip")
    mask.dims[0].attach_scale(lat)
    mask.dims[1].attach_scale(lon)
    f.attrs["title"] = "dimension scales"


@pytest.mark.hsds
def test_hsds_domain_in_ncdump(hsds, tmp_path):
    import h5py
    import h5pyd

    local = tmp_path / "local.h5"
    with h5py.File(local, "w") as f:
        _dimscales(f, h5py)
    with h5pyd.File("/home/admin/dimscales.h5", "w", **hsds.kw) as f:
        _dimscales(f, h5pyd)
        root_id = f.id.id
    hsds.wait_for_chunks(root_id, 2 + 1 + 1 + 3 + 1)
    ctx, reader = make_ctx(open_store(str(hsds.store_dir)))
    model = ctx.catalog.load("/home/admin/dimscales.h5")
    temp = model.resolve("/temp")
    assert ctx.catalog.declared_pipeline(temp).ids == (DEFLATE,) and ctx.catalog.pipeline(temp).ids == (BLOSC,)
    node = hdf5.domain_node(model, ctx, "dimscales.h5")
    view = materialize(node, tmp_path / "dimscales.h5", reader)
    want, got = structure(ncdump("-h", local)), structure(ncdump("-h", view))
    assert got["/"]["dims"] == want["/"]["dims"] and len(want["/"]["dims"]) == 3
    assert got["/"]["vars"] == want["/"]["vars"]
    assert "float temp(time, lat, lon) ;" in got["/"]["vars"]
    assert structure(ncdump(view))["/"]["data"] == structure(ncdump(local))["/"]["data"]
