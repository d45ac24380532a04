"""Tier 2: the HDF5 view, materialized and read by independent readers.

One domain with every type, link kind, layout and filter the model has is
synthesized, written to a real file and read by h5py (HDF5 2.0), h5py 3.12
(HDF5 1.14, in a small side venv), Debian's h5dump/h5ls (HDF5 1.10) and
pyfive, each compared with the values the domain was built from. Chunk byte
ranges reported by HDF5 itself are compared with the stored chunk objects
(zero-copy), and a vanished chunk object fails only the reads that need it.
"""
from __future__ import annotations

import io
import json
import logging
import math
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import h5py
import hdf5plugin
import numcodecs
import numpy as np
import pytest

from polyfs.codecs.registry import BLOSC, BZIP2, DEFLATE, FLETCHER32, SHUFFLE, ZSTD, Filter
from polyfs.errors import ChunkMissing
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store
from polyfs.formats.hdf5 import render
from polyfs.formats.hdf5 import view as hdf5
from support import fill_time_file, make_ctx, materialize, read_node

PLUGIN_ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
VSTR = T.StringType(None, "utf8", "nullterm")
POINT = T.CompoundType((("x", T.FloatType(4)), ("y", T.FloatType(4)), ("id", T.IntType(2, False))))


def _write_chunks(w, ds, blocks):
    """Chunks of an array type, encoded by hand (write_array takes the folded numpy shape)."""
    for coords, block in blocks:
        w.write_chunk(ds, coords, w.pipeline(ds).encode(np.ascontiguousarray(block).tobytes()))


def build_domain(store, path: str = "/lab/rich.h5", external: bool = True) -> dict:
    """A domain with every kind of thing the HDF5 view expresses; returns what h5py must read."""
    exp: dict = {"data": {}, "attrs": {}}
    cat = Catalog(store)
    with DomainWriter(cat, path) as w:
        r = w.root
        g = w.add_group(r, "grp")
        sub = w.add_group(g, "sub")
        pt = w.add_datatype(r, "point_t", POINT)
        pts = w.add_dataset(sub, "points", T.Committed(pt.id, POINT), Shape("simple", (3,)), (2,),
                            [Filter(DEFLATE, (4,))])
        points = np.array([(1.5, 2.5, 7), (3, -1, 9), (0, 0, 1)], dtype=POINT.numpy())
        w.write_array(pts, points)
        exp["data"]["/grp/sub/points"] = points
        w.set_attr(pts, "typed", T.Committed(pt.id, POINT), Shape("simple", (1,)), [[0.5, 0.25, 1]])
        w.link_hard(g, "alias_points", pts)
        w.link_soft(r, "soft", "/grp/sub/points")
        w.link_soft(r, "dangling", "/nowhere")

        def add(name, t, shape, chunks, filters, arr=None, parent=None, **kw):
            ds = w.add_dataset(parent or r, name, t, Shape("simple", shape, kw.pop("maxdims", None)), chunks,
                               filters, **kw)
            if arr is not None:
                w.write_array(ds, arr, skip_fill=True)
                exp["data"]["/" + name if parent is None else f"/grp/{name}"] = arr
            return ds

        img = (np.add.outer(np.arange(100), np.arange(130)) % 251).astype(">u2")
        img[:32, :48] = 7  # a missing chunk: HDF5 must give the fill value
        add("deflate_be", T.IntType(2, False, ">"), (100, 130), (32, 48), [Filter(DEFLATE, (4,))], img, fill_value=7)
        add("zstd_edge", T.IntType(2, False), (20, 30), (64, 64), [Filter(ZSTD, (3,))],
            np.arange(600, dtype="<u2").reshape(20, 30))
        add("shuffle_deflate", T.IntType(4, True), (9, 3), (4, 3), [Filter(SHUFFLE, (4,)), Filter(DEFLATE, (6,))],
            np.arange(27, dtype="<i4").reshape(9, 3) - 5, maxdims=(None, 3))
        add("blosc", T.FloatType(8), (40, 30), (16, 16), [Filter(BLOSC, (2, 2, 8, 0, 5, 1, 1))],
            np.linspace(0, 1, 1200).reshape(40, 30))
        add("bzip2", T.IntType(1, True), (33, 47), (16, 16), [Filter(BZIP2, (9,))],
            (np.arange(33 * 47) % 200 - 100).astype("i1").reshape(33, 47))
        add("fletcher_deflate", T.FloatType(4, ">"), (10, 10), (5, 5), [Filter(FLETCHER32), Filter(DEFLATE, (6,))],
            np.arange(100, dtype=">f4").reshape(10, 10) / 3)
        add("bool", T.BOOL, (4,), (3,), [Filter(DEFLATE, (6,))], np.array([True, False, True, True]))
        add("enum", T.EnumType(T.IntType(1, False), (("RED", 0), ("GREEN", 1), ("BLUE", 42))), (4,), (4,), [],
            np.array([0, 42, 1, 1], "u1"))
        add("fixed_str", T.StringType(6, "ascii", "nullpad"), (3,), (2,), [Filter(DEFLATE, (6,))],
            np.array([b"ab", b"hello", b""], "S6"))
        add("opaque", T.OpaqueType(4), (2,), (1,), [], np.array([b"\x01\x02\x03\x04", b"\xff\x00\xff\x00"], "V4"))
        add("f16", T.FloatType(2), (7,), (4,), [Filter(DEFLATE, (6,))], np.linspace(-1, 1, 7).astype("<f2"))
        add("never", T.IntType(1, False), (10, 10), (5, 5), [Filter(DEFLATE, (6,))], fill_value=9)
        exp["data"]["/never"] = np.full((10, 10), 9, "u1")
        add("empty", T.FloatType(4), (0,), (8,), [Filter(DEFLATE, (6,))], maxdims=(None,))
        exp["data"]["/empty"] = np.zeros(0, "<f4")
        cont = w.add_dataset(r, "contig", T.FloatType(4), Shape("simple", (3, 4)), None, [],
                             layout_class="H5D_CONTIGUOUS")
        w.write_array(cont, np.arange(12, dtype="<f4").reshape(3, 4))
        exp["data"]["/contig"] = np.arange(12, dtype="<f4").reshape(3, 4)
        at = w.add_dataset(r, "array_type", T.ArrayType(T.IntType(4, True), (2, 3)), Shape("simple", (4,)), (3,),
                           [Filter(DEFLATE, (6,))])
        full = np.zeros((6, 2, 3), "<i4")
        full[:4] = np.arange(24, dtype="<i4").reshape(4, 2, 3)
        _write_chunks(w, at, [((0,), full[:3]), ((1,), full[3:])])
        exp["data"]["/array_type"] = full[:4]
        for name, t, value, filters in [("scalar", T.FloatType(8, ">"), np.array(2.5, ">f8"), []),
                                        ("scalar_deflate", T.IntType(8, True), np.array(-42, "<i8"),
                                         [Filter(DEFLATE, (6,))]),
                                        ("scalar_str", VSTR, np.array("just one", dtype=object), [])]:
            ds = w.add_dataset(r, name, t, Shape("scalar"), None, filters)
            w.write_array(ds, value)
            exp["data"]["/" + name] = value
        w.add_dataset(r, "null", T.FloatType(4), Shape("null"), None, [])
        vs = add("vlen_str", VSTR, (5,), (2,), [Filter(DEFLATE, (6,))],
                 np.array(["α", "", "long string " * 5, "z", "x"], dtype=object))
        add("vlen_int", T.VlenType(T.IntType(4, True)), (3,), (3,), [])
        vi = np.empty(3, dtype=object)
        vi[:] = [np.arange(3, dtype="<i4"), np.arange(0, dtype="<i4"), np.arange(5, dtype="<i4")]
        w.write_array(w.datasets[r.links["vlen_int"].id], vi)
        exp["data"]["/vlen_int"] = vi
        cv = np.empty(2, dtype=[("n", "<i4"), ("s", object)])
        cv[0], cv[1] = (1, "one"), (2, "two")
        add("compound_vlen", T.CompoundType((("n", T.IntType(4, True)), ("s", VSTR))), (2,), (2,), [], cv)
        refs = add("refs", T.ReferenceType(), (3,), (2,), [Filter(DEFLATE, (1,))])
        w.write_array(refs, np.array([b"groups/" + g.id.encode(), b"datasets/" + pts.id.encode(), b""], "S48"))
        exp["refs"] = {"/refs": ["/grp", "/grp/alias_points", None]}
        cr = np.zeros(2, dtype=[("n", "<i4"), ("r", "S48")])
        cr[0], cr[1] = (1, b"groups/" + g.id.encode()), (2, b"datasets/" + vs.id.encode())
        add("compound_ref", T.CompoundType((("n", T.IntType(4, True)), ("r", T.ReferenceType()))), (2,), (2,), [],
            cr)
        del exp["data"]["/compound_ref"]  # references are checked as paths
        if external:
            w.link_external(r, "ext", "other.h5", "/some/path")
            w.link_external(g, "ext_abs", "/home/bob/other.h5", "/x")
        uni = w.add_group(r, "ünïcode")
        w.set_attr(uni, "ünï", T.IntType(4, True), Shape("scalar"), 5)
        w.add_group(r, "empty_group")
        big = w.add_group(r, "big_group")  # more entries than one symbol table node and one B-tree node hold
        for i in range(300):
            w.link_soft(big, f"s{i:03d}", "/grp")
        a = exp["attrs"]
        for name, t, arr in [
            ("int8", T.IntType(1, True), np.int8(-3)),
            ("uint64_arr", T.IntType(8, False), np.array([1, 2**63, 3], "<u8")),
            ("int32_be", T.IntType(4, True, ">"), np.array([1, -2], ">i4")),
            ("float16", T.FloatType(2), np.float16(0.5)),
            ("float32_2d", T.FloatType(4), np.arange(6, dtype="<f4").reshape(2, 3) / 4),
            ("float64_special", T.FloatType(8), np.array([np.nan, np.inf, -np.inf])),
            ("bool", T.BOOL, np.bool_(True)),
            ("bool_arr", T.BOOL, np.array([True, False])),
            ("fixed_ascii", T.StringType(5, "ascii", "nullpad"), np.bytes_(b"fixed")),
            ("vlen_str", VSTR, np.array("variable ✓", dtype=object)),
            ("vlen_str_arr", VSTR, np.array(["a", "bc", ""], dtype=object)),
        ]:
            w.set_attr_array(r, name, t, arr)
            a[name] = arr
        w.set_attr(r, "compound", T.CompoundType((("n", T.IntType(2, True)), ("v", T.FloatType(8)))),
                   Shape("scalar"), [5, 0.25])
        a["compound"] = np.array((5, 0.25), dtype=[("n", "<i2"), ("v", "<f8")])
        w.set_attr(r, "enum", T.EnumType(T.IntType(2, True), (("OFF", 0), ("ON", 1), ("AUTO", 7))),
                   Shape("simple", (2,)), [0, 7])
        a["enum"] = np.array([0, 7], "<i2")
        w.set_attr(r, "array_type", T.ArrayType(T.IntType(4, True), (2, 3)), Shape("scalar"), [[0, 1, 2], [3, 4, 5]])
        a["array_type"] = np.arange(6, dtype="<i4").reshape(2, 3)
        w.set_attr(r, "opaque", T.OpaqueType(3), Shape("scalar"), "AAEC")
        a["opaque"] = np.void(b"\x00\x01\x02")
        w.set_attr(r, "vlen_int", T.VlenType(T.IntType(4, True)), Shape("simple", (2,)), [[0, 1], [0, 1, 2, 3]])
        a["vlen_int"] = [np.arange(2), np.arange(4)]
        w.set_attr(r, "empty", T.FloatType(4), Shape("null"), None)
        w.set_attr(r, "ref", T.ReferenceType(), Shape("scalar"), "datasets/" + pts.id)
        w.set_attr(r, "ref_arr", T.ReferenceType(), Shape("simple", (3,)), ["datasets/" + pts.id, "groups/" + r.id, ""])
        w.set_attr(r, "dimlist", T.VlenType(T.ReferenceType()), Shape("simple", (2,)),
                   [["datasets/" + pts.id], ["datasets/" + vs.id, "groups/" + g.id]])
        exp["ref_attrs"] = {"ref": "/grp/alias_points", "ref_arr": ["/grp/alias_points", "/", None],
                            "dimlist": [["/grp/alias_points"], ["/vlen_str", "/grp"]]}
    return exp


# -- fixtures --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rich(tmp_path_factory):
    """(store, ctx, reader, expected, materialized path, node) of the rich domain."""
    base = tmp_path_factory.mktemp("h5view")
    store = open_store(str(base / "store"), create=True)
    exp = build_domain(store)
    ctx, reader = make_ctx(store)
    node = hdf5.domain_node(ctx.catalog.load("/lab/rich.h5"), ctx, "rich.h5")
    path = materialize(node, base / "rich.h5", reader)
    return store, ctx, reader, exp, path, node


def h5py114() -> Path:
    """A side venv with h5py 3.12 (HDF5 1.14) and hdf5plugin, made once and kept.

    ``POLYFS_H5PY114_VENV`` overrides the location (default ~/.cache/polyfs/venv-h5py-1.14)."""
    venv = Path(os.environ.get("POLYFS_H5PY114_VENV", Path.home() / ".cache" / "polyfs" / "venv-h5py-1.14"))
    py = venv / "bin" / "python"
    if not py.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
            subprocess.run([str(py), "-m", "pip", "install", "-q", "h5py==3.12.1", "numpy<2.3", "hdf5plugin<6"],
                           check=True, capture_output=True, timeout=600)
        except (subprocess.SubprocessError, OSError) as exc:
            pytest.skip(f"cannot create the HDF5 1.14 venv: {exc}")
    out = subprocess.run([str(py), "-c", "import h5py; print(h5py.version.hdf5_version)"], capture_output=True,
                         text=True)
    if not out.stdout.startswith("1.14"):
        pytest.skip(f"side venv at {venv} does not hold HDF5 1.14 ({out.stdout or out.stderr})")
    return py


# -- digests: the same function runs under HDF5 2.0 (here) and 1.14 (side venv) ---------------
DIGEST = r'''
import hashlib, json, sys
import numpy as np, h5py
try:
    import hdf5plugin
except ImportError:
    pass

def norm(f, v):
    if isinstance(v, h5py.Reference):  # one object, two hard links: named by the link HDF5 meets first
        name = f[v].name if v else None
        return {"/grp/sub/points": "/grp/alias_points"}.get(name, name)
    if isinstance(v, h5py.Empty):
        return "<empty>"
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, str):
        return v
    a = np.asarray(v)
    if a.dtype.names:
        return [[norm(f, e[n]) for n in a.dtype.names] for e in a.reshape(-1)]
    if a.dtype.kind in "OSV":
        return [norm(f, e) if not isinstance(e, (bytes, np.bytes_)) or a.dtype.kind != "V" else e.hex()
                for e in a.reshape(-1).tolist()] if a.ndim else norm(f, a[()] if a.dtype.kind != "V" else a.tobytes().hex())
    return [a.shape, hashlib.sha1(np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))).tobytes()).hexdigest()]

def digest(path):
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            entry = {"attrs": {k: norm(f, obj.attrs[k]) for k in sorted(obj.attrs)}}
            if isinstance(obj, h5py.Dataset):
                entry["value"] = norm(f, obj[()]) if obj.shape is not None else None
                entry["dtype"] = str(obj.dtype)
            out[name] = entry
        visit("/", f)
        f.visititems(visit)
    return out

print(json.dumps(digest(sys.argv[1]), sort_keys=True, default=str))
'''


def digest_with(python: str, path: Path) -> dict:
    res = subprocess.run([python, "-c", DIGEST, str(path)], capture_output=True, text=True, env=PLUGIN_ENV,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


# one object, two hard links: HDF5 names a referenced object by whichever link it meets first
SAME_OBJECT = {"/grp/sub/points": "/grp/alias_points"}


def h5path_of(f, ref):
    name = f[ref].name if ref else None
    return SAME_OBJECT.get(name, name)


def assert_equal(a, b, where):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, where
    if a.dtype.kind == "f":
        assert np.array_equal(a, b, equal_nan=True), where
    elif a.dtype.names:
        assert a.tobytes() == np.asarray(b, dtype=a.dtype).tobytes(), where
    else:
        assert (a == b).all(), where


# -- tests -----------------------------------------------------------------------------------
def test_h5py_reads_every_value_and_attribute(rich):
    _, _, _, exp, path, node = rich
    with h5py.File(path, "r") as f:
        for name, want in exp["data"].items():
            d = f[name]
            got = d[()]
            if d.dtype.kind == "O" and d.dtype.names is None and h5py.check_string_dtype(d.dtype):
                got = d.asstr()[()]
            if isinstance(want, np.ndarray) and want.dtype.kind == "O" and want.dtype.names is None:
                if want.ndim == 0:
                    assert got == want[()], name
                else:
                    for x, y in zip(got.tolist(), want.tolist()):
                        assert np.array_equal(x, y), name
            elif isinstance(want, np.ndarray) and want.dtype.names and any(
                    want.dtype[n].kind == "O" for n in want.dtype.names):
                assert [(int(n), s.decode()) for n, s in got.tolist()] == [(int(n), s) for n, s in want.tolist()]
            else:
                assert_equal(got, want, name)
        assert f["deflate_be"].fillvalue == 7 and f["never"].fillvalue == 9
        assert f["deflate_be"].dtype == np.dtype(">u2")
        assert f["shuffle_deflate"].maxshape == (None, 3) and f["empty"].maxshape == (None,)
        assert f["null"].shape is None and f["scalar"].shape == ()
        assert [f["blosc"].id.get_create_plist().get_filter(i)[0] for i in range(1)] == [BLOSC]
        assert f["bzip2"].id.get_create_plist().get_filter(0)[0] == BZIP2
        assert f["deflate_be"].compression == "gzip" and f["shuffle_deflate"].shuffle
        assert f["fletcher_deflate"].fletcher32
        # links
        assert f.get("soft", getlink=True).path == "/grp/sub/points"
        assert f.get("dangling", getlink=True).path == "/nowhere" and "dangling" in f.keys()
        ext = f.get("ext", getlink=True)
        assert (ext.filename, ext.path) == ("other.h5", "/some/path")
        assert f["grp"].get("ext_abs", getlink=True).filename == "../home/bob/other.h5"  # view file to view file
        assert f["grp/alias_points"] == f["grp/sub/points"]  # one object, two hard links
        assert h5py.h5o.get_info(f["grp/sub/points"].id).rc == 2
        assert isinstance(f["point_t"], h5py.Datatype) and f["grp/sub/points"].dtype == POINT.numpy()
        assert f["grp/sub/points"].id.get_type().committed()
        assert_equal(f["grp/sub/points"].attrs["typed"], np.array([(0.5, 0.25, 1)], POINT.numpy()), "typed")
        assert f["ünïcode"].attrs["ünï"] == 5
        assert sorted(f["big_group"]) == [f"s{i:03d}" for i in range(300)]
        assert len(f["empty_group"]) == 0
        # references
        assert [h5path_of(f, r) for r in f["refs"][()]] == exp["refs"]["/refs"]
        cr = f["compound_ref"][()]
        assert [h5path_of(f, r) for r in cr["r"]] == ["/grp", "/vlen_str"] and cr["n"].tolist() == [1, 2]
        # attributes
        attrs = f.attrs
        for name, want in exp["attrs"].items():
            got = attrs[name]
            if name == "vlen_int":
                assert all(np.array_equal(x, y) for x, y in zip(got, want))
            elif isinstance(want, np.ndarray) and want.dtype.kind == "O":
                assert np.asarray(got).tolist() == want.tolist(), name
            else:
                assert_equal(got, want, name)
        assert attrs["vlen_str"] == "variable ✓"
        assert isinstance(attrs["empty"], h5py.Empty)
        assert h5path_of(f, attrs["ref"]) == exp["ref_attrs"]["ref"]
        assert [h5path_of(f, r) for r in attrs["ref_arr"]] == exp["ref_attrs"]["ref_arr"]
        assert [[h5path_of(f, r) for r in row] for row in attrs["dimlist"]] == exp["ref_attrs"]["dimlist"]
    assert node.size() == path.stat().st_size


def test_hdf5_114_reads_what_hdf5_20_reads(rich):
    path = rich[4]
    mine = digest_with(sys.executable, path)
    assert len(mine) > 30 and mine["deflate_be"]["value"][0] == [100, 130]
    assert digest_with(str(h5py114()), path) == mine


def test_h5dump_and_h5ls_110(rich):
    _, _, _, exp, path, _ = rich
    ls = subprocess.run(["h5ls", "-r", str(path)], capture_output=True, text=True, env=PLUGIN_ENV).stdout
    lines = [" ".join(line.split()) for line in ls.splitlines()]
    for line in ["/deflate_be Dataset {100, 130}", "/shuffle_deflate Dataset {9/Inf, 3}",
                 "/grp/sub/points Dataset, same as /grp/alias_points", "/point_t Type",
                 "/ext External Link {other.h5//some/path}", "/null Dataset {NULL}",
                 "/soft Soft Link {/grp/sub/points}", "/scalar Dataset {SCALAR}"]:
        assert line in lines, line
    assert sum(1 for line in ls.splitlines() if line.startswith("/big_group/")) == 300

    def values(name: str) -> list[str]:
        out = subprocess.run(["h5dump", "-m", "%.17g", "-d", name, "-y", "-w", "0", str(path)],
                             capture_output=True, text=True, env=PLUGIN_ENV)
        assert out.returncode == 0, out.stderr
        body = out.stdout.split("DATA {", 1)[1].split("}", 1)[0]
        return [v.strip() for v in body.replace("\n", ",").split(",") if v.strip()]

    for name in ["/deflate_be", "/zstd_edge", "/blosc", "/bzip2", "/fletcher_deflate", "/shuffle_deflate", "/contig",
                 "/never", "/scalar_deflate"]:
        want = exp["data"][name].reshape(-1)
        got = np.asarray([float(v) for v in values(name)])
        assert got.size == want.size and np.array_equal(got, want.astype(float)), name
    strings = values("/vlen_str")
    assert len(strings) == 5 and len(strings[0]) > 2  # "α": h5dump 1.10 prints its bytes in octal
    assert strings[1:] == ['""', '"' + "long string " * 5 + '"', '"z"', '"x"']
    assert values("/bool") == ["TRUE", "FALSE", "TRUE", "TRUE"]
    refs = subprocess.run(["h5dump", "-d", "/refs", str(path)], capture_output=True, text=True).stdout
    assert 'GROUP ' in refs and '"/grp"' in refs and '"/grp/alias_points"' in refs


@pytest.mark.parametrize("how", ["path", "bytes"])
def test_pyfive_reads_the_datasets_it_supports(tmp_path, how):
    """pyfive 1.3 reads no external links, zstd/blosc/bzip2, missing chunks,
    array or committed types. It opens the file by path (it would lose a user
    block's base address: the view's superblock is at 0) and as bytes (as a
    remote reader would); attributes come in creation order."""
    import pyfive

    store = open_store(str(tmp_path / "store"), create=True)
    exp = build_domain(store, "/nolinks.h5", external=False)
    ctx, reader = make_ctx(store)
    node = hdf5.domain_node(ctx.catalog.load("/nolinks.h5"), ctx, "nolinks.h5")
    data = read_node(node, reader)
    assert data[:8] == b"\x89HDF\r\n\x1a\n"
    path = tmp_path / "nolinks.h5"
    path.write_bytes(data)
    f = pyfive.File(str(path)) if how == "path" else pyfive.File(io.BytesIO(data))
    read = []
    for name in ["/shuffle_deflate", "/fletcher_deflate", "/bool", "/enum", "/f16", "/contig",
                 "/scalar", "/scalar_deflate", "/opaque", "/empty"]:
        got = f[name][()]
        want = exp["data"][name]
        if want.dtype == bool:
            got = got.astype(bool)
        assert_equal(got, want, name)
        read.append(name)
    assert [x.decode() for x in f["vlen_str"][()]] == exp["data"]["/vlen_str"].tolist()
    assert f["scalar_str"][()] == b"just one"
    assert sorted(f["big_group"]) == [f"s{i:03d}" for i in range(300)]
    assert f.attrs["float64_special"][1] == np.inf and f.attrs["vlen_str"] == "variable ✓".encode()
    assert list(f.attrs["vlen_str_arr"]) == [b"a", b"bc", b""]
    assert list(f.attrs) == list(ctx.catalog.load("/nolinks.h5").root.attributes)
    assert f["ünïcode"].attrs["ünï"] == 5
    assert len(read) == 10


def test_chunk_byte_ranges_are_the_stored_objects(rich):
    """Zero-copy: every chunk HDF5 reports is byte for byte a stored chunk object."""
    store, ctx, _, _, path, node = rich
    data = path.read_bytes()
    plan = node.hdf5()
    paths = ctx.catalog.load("/lab/rich.h5").canonical_paths()
    checked = 0
    with h5py.File(path, "r") as f:
        for did, dp in plan.datasets.items():
            ds, idx = dp.ds, dp.index
            d = f[paths[did]]
            if dp.storage == "chunked-stored":
                assert d.chunks == ds.chunks
                assert d.id.get_num_chunks() == len(idx)
                for i in range(d.id.get_num_chunks()):
                    info = d.id.get_chunk_info(i)
                    coords = tuple(o // c for o, c in zip(info.chunk_offset, ds.chunks))
                    stored = store.get(idx.key_of(coords))
                    assert data[info.byte_offset:info.byte_offset + info.size] == stored, paths[did]
                    checked += 1
            elif dp.storage == "contiguous" and dp.data and ds.shape.kind == "simple":
                stored = store.get(idx.key(int(idx.linear[0])))
                off = d.id.get_offset()
                assert data[off:off + len(stored)] == stored
                checked += 1
    assert checked >= 25
    # metadata first: every data block lies after the last metadata byte
    starts = [plan.address(b.key) for dp in plan.datasets.values() for b in dp.data]
    assert min(starts) >= plan.plan.base + plan.plan.metadata_end()


def test_hsds_blosc_frames_under_a_gzip_declaration(tmp_path):
    """HSDS stores Blosc frames for datasets it declares deflate: the view declares
    the filter the bytes need (blosc 32001) and serves them unchanged."""
    store = open_store(str(tmp_path / "store"), create=True)
    arr = (np.arange(50 * 37) * 7 % 251).astype("<i2").reshape(50, 37)
    codec = numcodecs.Blosc(cname="zlib", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    with DomainWriter(Catalog(store), "/hsds.h5") as w:
        ds = w.add_dataset(w.root, "img", T.IntType(2, True), Shape("simple", (50, 37)), (25, 20),
                           [Filter(DEFLATE, (5,))])
        for i in range(2):
            for j in range(2):
                block = np.zeros((25, 20), "<i2")
                part = arr[25 * i:25 * i + 25, 20 * j:20 * j + 20]
                block[:part.shape[0], :part.shape[1]] = part
                w.write_chunk(ds, (i, j), codec.encode(block.tobytes()), crc32=0)
    ctx, reader = make_ctx(store)
    node = hdf5.domain_node(ctx.catalog.load("/hsds.h5"), ctx, "hsds.h5")
    path = materialize(node, tmp_path / "hsds.h5", reader)
    data = path.read_bytes()
    with h5py.File(path, "r") as f:
        d = f["img"]
        dcpl = d.id.get_create_plist()
        assert dcpl.get_nfilters() == 1 and dcpl.get_filter(0)[0] == BLOSC
        assert np.array_equal(d[()], arr)
        idx = node.hdf5().datasets[ds.id].index
        for i in range(4):
            info = d.id.get_chunk_info(i)
            key = idx.key_of(tuple(o // c for o, c in zip(info.chunk_offset, (25, 20))))
            assert data[info.byte_offset:info.byte_offset + info.size] == store.get(key)
    out = subprocess.run(["h5dump", "-d", "/img", "-y", "-w", "0", str(path)], capture_output=True, text=True,
                         env=PLUGIN_ENV).stdout
    assert [int(v) for v in re.findall(r"-?\d+", out.split("DATA {", 1)[1])[:37]] == arr[0].tolist()


def test_planning_reads_no_chunk_data_except_vlen(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "store"), create=True)
    build_domain(store, "/x.h5")
    ctx, reader = make_ctx(store)
    model = ctx.catalog.load("/x.h5")
    vlen_ids = {d.id for d in model.datasets.values() if d.type.is_vlen}
    gets, ranges = [], []
    real_get, real_range = store.get, store.get_range
    monkeypatch.setattr(store, "get", lambda key: gets.append(key) or real_get(key))
    monkeypatch.setattr(store, "get_range", lambda key, s, n: ranges.append((key, n)) or real_range(key, s, n))
    node = hdf5.domain_node(model, ctx, "x.h5")
    assert node.size() > 0
    chunk_gets = [k for k in gets if "/d/" in k and not k.endswith(".json")]
    assert chunk_gets and all(_owner(k, vlen_ids) for k in chunk_gets)  # variable-length datasets only
    assert ranges and all(n <= 16 for _, n in ranges)  # the pipeline sniff only


def _owner(key: str, ids: set[str]) -> bool:
    from polyfs.model import keys

    return any(key.startswith(keys.dataset_prefix(i)) for i in ids)


def test_vanished_chunk_fails_only_its_reads(tmp_path, caplog):
    store = open_store(str(tmp_path / "store"), create=True)
    build_domain(store, "/gone.h5")
    ctx, reader = make_ctx(store)
    node = hdf5.domain_node(ctx.catalog.load("/gone.h5"), ctx, "gone.h5")
    vf = node.vfile()
    plan = node.hdf5()
    dp = next(dp for dp in plan.datasets.values() if dp.storage == "chunked-stored" and len(dp.index) > 2)
    victim = dp.index.key(int(dp.index.linear[1]))
    start = plan.address(("data", dp.ds.id)) + int(dp.index.sizes[0])
    store.delete(victim)
    caplog.set_level(logging.ERROR)
    with pytest.raises(ChunkMissing):
        reader.read(vf, start, 64)
    assert victim in caplog.text
    # everything else still reads: the metadata and the other chunks
    assert reader.read(vf, 0, 4096)[:8] == b"\x89HDF\r\n\x1a\n"  # the superblock at 0: no user block
    assert len(reader.read(vf, plan.address(("data", dp.ds.id)), int(dp.index.sizes[0]))) == int(dp.index.sizes[0])


def test_big_attribute_is_left_out_with_a_log_line(tmp_path, caplog):
    """Over 64 KiB an attribute goes to dense storage (test_hdf5_dense_attributes.py); over
    the 8 MiB that holds, it is left out, with a log line."""
    store = open_store(str(tmp_path / "store"), create=True)
    with DomainWriter(Catalog(store), "/attrs.h5") as w:
        w.set_attr_array(w.root, "huge", T.FloatType(8), np.arange(1_100_000.0))
        w.set_attr_array(w.root, "small", T.FloatType(8), np.arange(3.0))
    ctx, reader = make_ctx(store)
    caplog.set_level(logging.ERROR)
    node = hdf5.domain_node(ctx.catalog.load("/attrs.h5"), ctx, "attrs.h5")
    path = materialize(node, tmp_path / "attrs.h5", reader)
    assert "huge" in caplog.text and "/attrs.h5" in caplog.text
    with h5py.File(path, "r") as f:
        assert list(f.attrs) == ["small"] and f.attrs["small"].tolist() == [0.0, 1.0, 2.0]


def test_many_chunks_and_a_deep_chunk_btree(tmp_path):
    """Reduced scale (the 1,000,000-chunk run is scripts/bench_hdf5.py): 3 B-tree levels."""
    store = open_store(f"memory://many-{tmp_path.name}")  # 7,800 chunk objects: no fsync per object
    arr = (np.arange(130 * 70, dtype="<u4") * 2654435761 % 1000).astype("<u2").reshape(130, 70)
    with DomainWriter(Catalog(store), "/many.h5") as w:
        ds = w.add_dataset(w.root, "tiny_chunks", T.IntType(2, False), Shape("simple", arr.shape), (1, 1), [])
        for (i, j), v in np.ndenumerate(arr):
            if (i * 70 + j) % 7:  # some missing chunks (fill value 0)
                w.write_chunk(ds, (i, j), v.tobytes())
    want = np.where((np.arange(arr.size) % 7).reshape(arr.shape) != 0, arr, 0)
    ctx, reader = make_ctx(store)
    node = hdf5.domain_node(ctx.catalog.load("/many.h5"), ctx, "many.h5")
    dp = next(iter(node.hdf5().datasets.values()))
    assert len(dp.btree.levels) == 3 and len(dp.index) == 7800
    path = materialize(node, tmp_path / "many.h5", reader)
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["tiny_chunks"][()], want)
        assert f["tiny_chunks"][77, 33] == want[77, 33]
    out = subprocess.run(["h5dump", "-y", "-w", "0", "-d", "/tiny_chunks", "-s", "120,0", "-c", "10,70", str(path)],
                         capture_output=True, text=True).stdout
    assert [int(v) for v in re.findall(r"\d+", out.split("DATA {", 1)[1])] == want[120:].reshape(-1).tolist()


def test_external_link_file_names():
    assert render.external_file("other.h5", "/lab/x.h5") == "other.h5"
    assert render.external_file("/lab/y.h5", "/lab/x.h5") == "y.h5"
    assert render.external_file("/home/bob/z", "/lab/sub/x.h5") == "../../home/bob/z.h5"


def test_root_listing_places_the_file(tmp_path):
    from polyfs.views.root import build_root

    store = open_store(str(tmp_path / "store"), create=True)
    with DomainWriter(Catalog(store), "/lab/a/scan.h5") as w:
        ds = w.add_dataset(w.root, "x", T.IntType(4, True), Shape("simple", (4,)), (2,), [Filter(DEFLATE, (1,))])
        w.write_array(ds, np.arange(4, dtype="<i4"))
    ctx, reader = make_ctx(store)
    root = build_root(ctx, ["hdf5"])
    leaf = root.entries()["hdf5"].entries()["lab"].entries()["a"].entries()["scan.h5"]
    data = read_node(leaf, reader)
    with h5py.File(io.BytesIO(data), "r") as f:
        assert f["x"][()].tolist() == [0, 1, 2, 3]
    assert math.isclose(leaf.mtime, ctx.catalog.load("/lab/a/scan.h5").domain.last_modified, abs_tol=1)
    assert zlib.crc32(data) == zlib.crc32(read_node(leaf, reader))  # deterministic


def test_gdal_reads_the_view(rich, tmp_path):
    """GDAL 3.6 (HDF5 1.10): subdatasets listed; checksums equal those of an h5py-written reference."""
    import shutil

    if not shutil.which("gdalinfo"):
        pytest.skip("gdalinfo is not installed")
    _, _, _, exp, path, _ = rich
    ref = tmp_path / "reference.h5"
    names = ["/deflate_be", "/blosc", "/zstd_edge", "/contig"]
    with h5py.File(ref, "w") as f:
        for name in names:
            f.create_dataset(name, data=exp["data"][name])

    def checksum(file: Path, name: str) -> int:
        out = subprocess.run(["gdalinfo", "-checksum", f'HDF5:"{file}":/{name}'], capture_output=True, text=True,
                             env=PLUGIN_ENV)
        assert out.returncode == 0, out.stderr
        return int(re.search(r"Checksum=(\d+)", out.stdout).group(1))

    info = subprocess.run(["gdalinfo", str(path)], capture_output=True, text=True, env=PLUGIN_ENV).stdout
    assert all(f'HDF5:"{path}"://{n[1:]}' in info for n in names)
    sums = [checksum(path, name) for name in names]
    assert sums == [checksum(ref, name) for name in names] and all(sums)


def test_fill_time_is_kept_and_served(tmp_path):
    """A dataset's fill time (netCDF-C's NC_NOFILL is H5D_FILL_TIME_NEVER) is kept as HSDS's
    ``fillTime`` and served in the fill value message: HDF5 then reads unwritten chunks of a
    "never" dataset as the original file gives them, not as the fill value."""
    from polyfs.importers import import_source

    src = tmp_path / "ft.h5"
    fill_time_file(src)
    url = str(tmp_path / "store")
    import_source(src, url, progress=False)
    store = open_store(url)
    model = Catalog(store).load("/ft.h5")
    kept = {name: model.resolve(name).creation_properties.get("fillTime") for name in ("never", "alloc", "ifset")}
    assert kept == {"never": "H5D_FILL_TIME_NEVER", "alloc": "H5D_FILL_TIME_ALLOC", "ifset": None}
    ctx, reader = make_ctx(store)
    path = materialize(hdf5.domain_node(model, ctx, "ft.h5"), tmp_path / "view.h5", reader)
    with h5py.File(src, "r") as orig, h5py.File(path, "r") as view:
        for name in ("never", "alloc", "ifset"):
            assert view[name].id.get_create_plist().get_fill_time() == \
                orig[name].id.get_create_plist().get_fill_time(), name
            assert view[name][()].tolist() == orig[name][()].tolist(), name
            assert view[name].fillvalue == 7
