"""Tier 2: HDF5 types numpy lacks, region references and external storage (issue 12, item 5).

``exotic_corpus.make_hdf5_types_corpus`` files are imported and their views
materialized. The HDF5 view must carry the exact datatype message of every
dataset and attribute (compared with libhdf5's own encoding), ``h5diff -r``
finds no difference (H5T_TIME: exactly what h5diff cannot compare between a
file and a copy of it), h5py/h5dump read the same values, region references
dereference to the same dataset and selection, and the Zarr/N5 views leave
out only what they cannot spell, each with a log line.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess

import h5py
import hdf5plugin
import numpy as np
import pytest
from h5py import h5a, h5r, h5s

import exotic_corpus
from polyfs.formats.hdf5 import view as hdf5
from polyfs.formats.n5 import view as n5view
from polyfs.formats.zarr import view as zarrview
from polyfs.importers import import_source
from polyfs.inspect import info_text
from polyfs.model import keys
from polyfs.model import types as T
from polyfs.store import open_store
from support import make_ctx, materialize

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
# what the view keeps byte for byte (the rest is re-encoded big-endian, as every import does)
EXACT = ["regref", "longdouble", "quad", "u12", "u12_offset_be", "i24", "u40_be", "time", "time_be",
         "spacepad", "nullpad", "nullterm"]
EXACT_ATTRS = {"/": ["regattr", "longdouble_attr", "quad_attr", "i24_attr", "time_attr", "spacepad_attr",
                     "nullpad_attr", "nullterm_attr"], "/data": ["regions"]}
NOT_IN_ZARR = {"regref", "longdouble", "quad", "u12", "u12_offset_be", "i24", "u40_be", "time", "time_be"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("h5types")
    sources = exotic_corpus.make_hdf5_types_corpus(base / "src")
    store_url = str(base / "store")
    out = {}
    for src in sources:
        domain = import_source(src, store_url, progress=False)
        ctx, reader = make_ctx(open_store(store_url))
        model = ctx.catalog.load(domain)
        view = materialize(hdf5.domain_node(model, ctx, src.name), base / "view" / src.name, reader)
        out[src.name] = (src, view, domain)
    return base, store_url, out


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, env=ENV, timeout=300, cwd=cwd)


def _raw(obj_id) -> bytes:
    """Values as the file's bytes (the file type as memory type): for types h5py cannot read."""
    t = obj_id.get_type()
    if isinstance(obj_id, h5a.AttrID):
        buf = np.empty(obj_id.shape, dtype=f"V{t.get_size()}")
        obj_id.read(buf, mtype=t)
    else:
        buf = np.empty(obj_id.shape, dtype=f"V{t.get_size()}")
        obj_id.read(h5s.ALL, h5s.ALL, buf, mtype=t)
    return buf.tobytes()


def test_store_keeps_exact_types(built):
    _, store_url, out = built
    ctx, _ = make_ctx(open_store(store_url))
    model = ctx.catalog.load(out["types.h5"][2])
    types = {p: model.resolve(p).type for p in ["/" + n for n in EXACT]}
    assert types["/regref"].to_json() == {"class": "H5T_REFERENCE", "base": "H5T_STD_REF_DSETREG"}
    assert types["/spacepad"].to_json()["strPad"] == "H5T_STR_SPACEPAD"
    assert types["/u12"].to_json()["polyfs"]["precision"] == 12
    assert types["/u12_offset_be"].to_json()["polyfs"] == {"precision": 12, "offset": 2, "pad": [0, 0]}
    assert types["/i24"].to_json() == {"class": "H5T_INTEGER", "base": "H5T_STD_I24LE"}
    assert types["/u40_be"].to_json() == {"class": "H5T_INTEGER", "base": "H5T_STD_U40BE"}
    assert types["/time_be"].to_json() == {"class": "H5T_TIME", "base": "H5T_UNIX_D64BE"}
    ld = types["/longdouble"].to_json()
    assert ld["base"] == "H5T_IEEE_F128LE" and ld["polyfs"]["precision"] == 80
    assert ld["polyfs"]["normalization"] == "none"
    assert types["/quad"].to_json() == {"class": "H5T_FLOAT", "base": "H5T_IEEE_F128LE"}  # IEEE binary128
    for t in types.values():  # another polyfs reads each back as the same type
        assert T.from_json(json.loads(json.dumps(t.to_json()))) == t
    # chunk bytes are the HDF5 bytes: no numpy type stood in between
    assert types["/i24"].numpy() == np.dtype("V3") and types["/longdouble"].numpy() == np.dtype("V16")


def test_datatype_messages_are_exact(built):
    """libhdf5's own encoding of every type in the view equals the original's."""
    _, _, out = built
    src, view, _ = out["types.h5"]
    with h5py.File(src) as a, h5py.File(view) as b:
        for name in EXACT:
            assert a[name].id.get_type().encode() == b[name].id.get_type().encode(), name
        for path, names in EXACT_ATTRS.items():
            for name in names:
                ta = a[path].attrs.get_id(name).get_type().encode()
                tb = b[path].attrs.get_id(name).get_type().encode()
                assert ta == tb, f"{path}@{name}"
                assert a[path].attrs.get_id(name).shape == b[path].attrs.get_id(name).shape


def test_values_equal(built):
    _, _, out = built
    src, view, _ = out["types.h5"]
    with h5py.File(src) as a, h5py.File(view) as b:
        for name in ("longdouble", "u12", "u12_offset_be", "spacepad", "nullpad", "nullterm", "f16", "be_f8", "data"):
            x, y = a[name][...], b[name][...]
            assert x.dtype.kind == y.dtype.kind, name
            np.testing.assert_array_equal(x, y, err_msg=name)
        assert b["longdouble"].dtype == np.longdouble
        for name in ("quad", "i24", "u40_be", "time", "time_be", "spacepad", "nullterm"):
            assert _raw(a[name].id) == _raw(b[name].id), name  # byte for byte, padding kept
        for name in ("longdouble_attr", "quad_attr", "i24_attr", "time_attr", "spacepad_attr", "nullpad_attr"):
            assert _raw(a.attrs.get_id(name)) == _raw(b.attrs.get_id(name)), name
        assert b["spacepad"].id.get_type().get_strpad() == h5py.h5t.STR_SPACEPAD


def test_region_references_dereference_to_the_same_selection(built):
    _, _, out = built
    src, view, _ = out["types.h5"]

    def selection(f, ref):
        target = f[ref]
        space = h5r.get_region(ref, target.id)
        kind = space.get_select_type()
        if kind == h5s.SEL_HYPERSLABS:
            sel = np.asarray(space.get_select_hyper_blocklist()).tolist()
        elif kind == h5s.SEL_POINTS:
            sel = np.asarray(space.get_select_elem_pointlist()).tolist()
        else:
            sel = None
        return target.name, kind, sel, target[ref]

    with h5py.File(src) as a, h5py.File(view) as b:
        refs = [(a["regref"][i], b["regref"][i]) for i in range(4)]
        refs.append((a.attrs["regattr"], b.attrs["regattr"]))
        refs += list(zip(a["data"].attrs["regions"], b["data"].attrs["regions"]))
        kinds = set()
        for ra, rb in refs:
            na, ka, sa, va = selection(a, ra)
            nb, kb, sb, vb = selection(b, rb)
            assert (na, ka, sa) == (nb, kb, sb)
            np.testing.assert_array_equal(va, vb)
            kinds.add(ka)
        assert kinds == {h5s.SEL_HYPERSLABS, h5s.SEL_POINTS, h5s.SEL_ALL}


def test_h5diff_reports_no_difference(built, tmp_path):
    _, _, out = built
    for name, (src, view, _) in out.items():
        res = run("h5diff", "-r", "-c", str(src), str(view), cwd=src.parent)
        counts = [int(n) for n in re.findall(r"^(\d+) differences? found", res.stdout, re.M)]
        assert counts and not any(counts), f"{name}: {res.stdout[-3000:]}"
        # H5T_TIME: h5diff compares no two files holding it; exactly as for a copy of the original
        copy = tmp_path / name
        shutil.copy(src, copy)
        same = run("h5diff", "-r", "-c", str(src), str(copy), cwd=src.parent)
        assert res.returncode == same.returncode, f"{name}: {res.stdout[-3000:]}{res.stderr[-2000:]}"
        assert sorted(re.findall(r"^Not comparable.*$", res.stdout, re.M)) == \
            sorted(re.findall(r"^Not comparable.*$", same.stdout, re.M))
    src, view, _ = out["types.h5"]
    excluded = ["--exclude-path", "/time", "--exclude-path", "/time_be", "--exclude-attribute", "/"]
    res = run("h5diff", "-r", *excluded, str(src), str(view))
    assert res.returncode == 0, res.stdout[-3000:]


def test_h5dump_prints_the_same(built):
    _, _, out = built
    src, view, _ = out["types.h5"]
    for name in ("regref", "quad", "longdouble", "u12_offset_be", "i24", "u40_be", "spacepad"):
        a = run("h5dump", "-d", f"/{name}", str(src))
        b = run("h5dump", "-d", f"/{name}", str(view))
        assert a.returncode == b.returncode == 0, name
        strip = lambda s: s.split("\n", 1)[1].replace("H5T_STD_I32LE", "H5T_STD_I32BE")  # noqa: E731
        assert strip(a.stdout) == strip(b.stdout), name
    assert "REGION_TYPE POINT" in run("h5dump", "-d", "/regref", str(view)).stdout


def test_external_storage_becomes_ordinary_data(built):
    _, _, out = built
    src, view, _ = out["external.h5"]
    with h5py.File(view) as b:
        assert b["ext"].id.get_create_plist().get_external_count() == 0
        expected = np.arange(50, dtype="<i4").reshape(5, 10)
        np.testing.assert_array_equal(b["ext"][...], expected)
        np.testing.assert_array_equal(b["plain"][...], np.arange(6, dtype="u1"))
        assert b["ext"].attrs["note"] == "external raw storage, relative to this file"
    assert run("h5diff", "-r", str(src), str(view), cwd=src.parent).returncode == 0


def test_import_from_another_directory_resolves_against_the_file(built, tmp_path, monkeypatch):
    _, _, out = built
    src = out["external.h5"][0]
    monkeypatch.chdir(tmp_path)  # HDF5's default would look for ext.bin here
    domain = import_source(src, str(tmp_path / "store"), progress=False)
    ctx, reader = make_ctx(open_store(str(tmp_path / "store")))
    view = materialize(hdf5.domain_node(ctx.catalog.load(domain), ctx, "e.h5"), tmp_path / "e.h5", reader)
    with h5py.File(view) as b:
        np.testing.assert_array_equal(b["ext"][...], np.arange(50, dtype="<i4").reshape(5, 10))


def test_zarr_and_n5_views_leave_out_only_what_they_cannot_spell(built, caplog):
    base, store_url, out = built
    caplog.set_level(logging.INFO)
    ctx, reader = make_ctx(open_store(store_url))
    model = ctx.catalog.load(out["types.h5"][2])
    zpath = materialize(zarrview.domain_node(model, ctx, "types.zarr"), base / "zv" / "types.zarr", reader)
    npath = materialize(n5view.domain_node(model, ctx, "types.n5"), base / "nv" / "types.n5", reader)
    import zarr

    g = zarr.open_group(str(zpath), mode="r")
    shown = set(g.array_keys())
    assert shown == set(model.root.links) - NOT_IN_ZARR
    for name in NOT_IN_ZARR:
        assert re.search(rf"zarr: .*{name}\b.* not shown", caplog.text), name
    with h5py.File(out["types.h5"][0]) as a:
        for name in shown:  # space-padded strings too: Zarr pads with NULs, the text is the same
            np.testing.assert_array_equal(g[name][...], a[name][...], err_msg=name)
        assert g["spacepad"][0] == b"ab"
    assert (npath / "data" / "attributes.json").exists()
    assert not (npath / "i24").exists() and not (npath / "longdouble").exists()
    text = info_text(store_url, out["types.h5"][2])
    block = text.split("/i24  dataset", 1)[1].split("\n/", 1)[0]
    assert "zarr -" in block and "n5 -" in block and "hdf5 zero-copy" in block


def test_hdf5_view_leaves_out_one_dataset_not_the_file(built, tmp_path, caplog):
    """A dataset the HDF5 view cannot spell (a zero-length string here; a region
    selection it cannot serialize) is left out with a log line; the file opens."""
    _, store_url, out = built
    store_dir = tmp_path / "store"
    shutil.copytree(store_url, store_dir)
    ctx, reader = make_ctx(open_store(str(store_dir)))
    model = ctx.catalog.load(out["types.h5"][2])
    victim = model.resolve("/nullterm")
    regref = model.resolve("/regref")
    key = store_dir / keys.dataset_key(victim.id)
    body = json.loads(key.read_text())
    body["type"]["length"] = 0
    key.write_text(json.dumps(body))
    # a region value with a selection class HDF5 has no serialization for
    chunk = store_dir / keys.chunk_key(regref.id, (0,))
    from polyfs.codecs import vlen as vlen_codec

    ctx2, _ = make_ctx(open_store(str(store_dir)))
    model2 = ctx2.catalog.load(out["types.h5"][2])
    ds = model2.resolve("/regref")
    pipe = ctx2.catalog.pipeline(ds)
    values_ = vlen_codec.decode(ds.type, pipe.decode(chunk.read_bytes()), 4)
    values_[1] = values_[1].replace(b"H5S_SEL_ALL", b"H5S_SEL_BOGUS")
    chunk.write_bytes(pipe.encode(vlen_codec.encode(ds.type, values_)))
    caplog.set_level(logging.ERROR)
    ctx3, reader3 = make_ctx(open_store(str(store_dir)))
    model3 = ctx3.catalog.load(out["types.h5"][2])
    view = materialize(hdf5.domain_node(model3, ctx3, "t.h5"), tmp_path / "t.h5", reader3)
    with h5py.File(view) as b:
        assert "nullterm" not in b and "regref" not in b
        assert {"data", "spacepad", "longdouble", "time"} <= set(b)
        np.testing.assert_array_equal(b["data"][...], np.arange(100).reshape(10, 10))
        assert b["data"][b.attrs["regattr"]].shape == (2, 2)
    assert re.search(r"dataset /nullterm left out", caplog.text)
    assert re.search(r"dataset /regref left out", caplog.text)
    assert "hdf5 -" in info_text(str(store_dir), out["types.h5"][2]).split("/nullterm  dataset", 1)[1].split("\n/")[0]


def test_big_endian_vlen_strings_keep_their_type(tmp_path):
    """h5py's own test file written on s390x: variable-length strings whose characters
    HDF5 records as big-endian; the view keeps that type and stays h5diff-clean."""
    src = tmp_path / "s390x.h5"
    shutil.copy(os.path.join(os.path.dirname(h5py.__file__), "tests", "data_files", "vlen_string_s390x.h5"), src)
    domain = import_source(src, str(tmp_path / "store"), progress=False)
    ctx, reader = make_ctx(open_store(str(tmp_path / "store")))
    model = ctx.catalog.load(domain)
    assert model.resolve("/DSvariable").type.to_json()["polyfs"] == {"charOrder": "BE"}
    view = materialize(hdf5.domain_node(model, ctx, "s.h5"), tmp_path / "s.h5", reader)
    with h5py.File(src) as a, h5py.File(view) as b:
        assert a["DSvariable"].id.get_type().encode() == b["DSvariable"].id.get_type().encode()
        for name in a.attrs:
            assert a.attrs.get_id(name).get_type().encode() == b.attrs.get_id(name).get_type().encode(), name
            assert a.attrs[name] == b.attrs[name]
        np.testing.assert_array_equal(a["DSvariable"][...], b["DSvariable"][...])
    assert run("h5diff", "-r", str(src), str(view)).returncode == 0
