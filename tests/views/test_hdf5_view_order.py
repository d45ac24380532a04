"""Tier 1-2: creation order of links and attributes, from a source file through
the store to the HDF5 view, as HDF5 (h5py, h5dump), netCDF-C and pyfive see it.

Sources track creation order the two ways writers do it: h5py with
``track_order=True`` (compact and dense storage: 3 and 12 attributes, 4 and 10
links) and netCDF4 (netCDF-C tracks it on every object). Names are made so
that creation order is never name order. The view's object headers are parsed
back with the declarations that packed them (structs.py) and their checksums
checked against libhdf5's own on a file it wrote.
"""
from __future__ import annotations

import os
import re
import struct
import subprocess
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

from polyfs.formats.hdf5 import structs
from polyfs.formats.hdf5 import view as hdf5
from polyfs.importers import import_source
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store
from support import make_ctx, materialize

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
ATTRS = ["zeta", "alpha", "mid", "Beta", "omega", "a2", "a10", "k", "c", "b", "x", "y"]  # 12: dense in HDF5
LINKS = ["q", "b", "z", "a", "m", "c", "y", "d", "x", "e"]  # 10: dense in HDF5


def make_h5(path: Path) -> dict[str, tuple[list[str], list[str]]]:
    """An h5py file tracking creation order; returns {path: (attribute names, link names)} in that order."""
    want: dict[str, tuple[list[str], list[str]]] = {}
    with h5py.File(path, "w", track_order=True) as f:
        for i, n in enumerate(ATTRS[:3]):
            f.attrs[n] = i
        dense = f.create_group("dense", track_order=True)
        for i, n in enumerate(ATTRS):
            dense.attrs[n] = np.arange(i + 1)
        for n in LINKS:
            dense.create_group(n, track_order=True)
        for n in ["zz", "aa", "mm"]:
            d = f.create_dataset(n, data=np.arange(4), track_order=True)
            for a in ("units", "axis", "_b", "A"):
                d.attrs[a] = a
        f["dense"].attrs.create("ref", f["zz"].ref)
        want["/"] = (ATTRS[:3], ["dense", "zz", "aa", "mm"])
        want["/dense"] = (ATTRS + ["ref"], LINKS)
        for n in ["zz", "aa", "mm"]:
            want["/" + n] = (["units", "axis", "_b", "A"], [])
    return want


def make_nc(path: Path) -> None:
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        nc.zz = "first"
        nc.aa = "second"
        nc.createDimension("t", 3)
        for name in ["w", "b", "a"]:
            v = nc.createVariable(name, "f4", ("t",))
            v.units = "m"
            v.long_name = name
            v.axis = "X"
            v[:] = np.arange(3)
        g = nc.createGroup("grp")
        for i, n in enumerate(ATTRS):  # past netCDF-C's 8: dense attribute storage in the source
            setattr(g, n, i)
        g.createVariable("z2", "i4", ())
        g.createVariable("a2", "i4", ())


def view_of(source: Path, dest: Path) -> tuple[Path, object]:
    store_url = str(dest / (source.name + ".store"))
    domain = import_source(source, store_url, progress=False)
    ctx, reader = make_ctx(open_store(store_url))
    model = ctx.catalog.load(domain)
    node = hdf5.domain_node(model, ctx, source.stem + ".h5")
    return materialize(node, dest / (source.stem + "_view" + source.suffix), reader), model


@pytest.fixture(scope="module")
def h5_case(tmp_path_factory):
    base = tmp_path_factory.mktemp("order_h5")
    src = base / "src.h5"
    want = make_h5(src)
    view, model = view_of(src, base)
    return src, view, model, want


@pytest.fixture(scope="module")
def nc_case(tmp_path_factory):
    base = tmp_path_factory.mktemp("order_nc")
    src = base / "src.nc"
    make_nc(src)
    view, model = view_of(src, base)
    return src, view, model


# -- object headers, byte by byte ------------------------------------------------------
def v2_header(buf: bytes, addr: int) -> tuple[int, list[dict], bool]:
    """(flags, messages with their bodies, checksum ok) of a version 2 object header at ``addr``."""
    head = structs.OBJECT_HEADER_V2.unpack(buf, addr)
    assert head["signature"] == b"OHDR" and head["version"] == 2
    flags = head["flags"]
    pos = addr + structs.OBJECT_HEADER_V2.size + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    width = 1 << (flags & 3)
    size = int.from_bytes(buf[pos:pos + width], "little")
    pos += width
    end = pos + size
    assert flags & structs.OHDR_ATTR_ORDER_TRACKED, "tests parse headers tracking attribute order"
    msgs = []
    while pos + structs.MESSAGE_V2.size <= end:
        m = structs.MESSAGE_V2.unpack(buf, pos)
        m["body"] = buf[pos + structs.MESSAGE_V2.size:pos + structs.MESSAGE_V2.size + m["size"]]
        msgs.append(m)
        pos += structs.MESSAGE_V2.size + m["size"]
    ok = struct.unpack_from("<I", buf, end)[0] == structs.lookup3(buf[addr:end])
    return flags, msgs, ok


def attribute_name(body: bytes) -> str:
    version, = struct.unpack_from("<B", body)
    if version == 1:
        h = structs.ATTRIBUTE_V1.unpack(body)
        at = structs.ATTRIBUTE_V1.size
    else:
        h = structs.ATTRIBUTE_V3.unpack(body)
        at = structs.ATTRIBUTE_V3.size
    return body[at:at + h["name_size"] - 1].decode("utf-8")


def test_lookup3_is_libhdf5s_metadata_checksum(tmp_path):
    """Checksums libhdf5 wrote (its own v2 object headers) and Bob Jenkins' published values."""
    assert structs.lookup3(b"") == 0xDEADBEEF
    assert structs.lookup3(b"Four score and seven years ago") == 0x17770551
    assert structs.lookup3(b"Four score and seven years ago", 1) == 0xCD628161
    path = tmp_path / "lib.h5"
    make_h5(path)
    buf = path.read_bytes()
    with h5py.File(path, "r") as f:
        addrs = [h5py.h5o.get_info(f[p].id).addr for p in ("/", "/zz", "/dense/q")]
    for addr in addrs:
        assert v2_header(buf, addr)[2]


def test_lookup3_many_is_lookup3():
    """The lockstep version (headers checksummed together) against the one-buffer one: every
    tail length, empty buffers, and long ones that finish alone."""
    rng = np.random.default_rng(3)
    sizes = [0, 1, 11, 12, 13, 23, 24, 25, 36, 300, 4001, 40_000] * 5 + list(rng.integers(0, 700, 100))
    buffers = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in sizes]
    assert structs.lookup3_many(buffers) == [structs.lookup3(b) for b in buffers]
    assert structs.lookup3_many(buffers[:3]) == [structs.lookup3(b) for b in buffers[:3]]


def test_object_headers_carry_attribute_creation_orders(h5_case):
    src, view, model, want = h5_case
    buf = view.read_bytes()
    with h5py.File(view, "r") as f:
        for path, (names, _) in want.items():
            obj = f[path]
            flags, msgs, ok = v2_header(buf, h5py.h5o.get_info(obj.id).addr)
            assert ok, path
            assert flags & structs.OHDR_ATTR_ORDER_INDEXED
            attrs = [m for m in msgs if m["type"] == structs.MSG_ATTRIBUTE]
            assert [attribute_name(m["body"]) for m in attrs] == names, path
            assert [m["creation_order"] for m in attrs] == list(range(len(names))), path
            info, = [m for m in msgs if m["type"] == structs.MSG_ATTRIBUTE_INFO]
            ainfo = structs.ATTRIBUTE_INFO_ORDERED.unpack(info["body"])
            assert ainfo["flags"] == 3 and ainfo["max_creation_index"] == len(names)
            assert ainfo["heap_address"] == structs.UNDEF  # compact: in the header, also past 8
            cpl = obj.id.get_create_plist()
            assert cpl.get_attr_creation_order() == h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED


def test_reference_count_message_for_two_links(tmp_path):
    store = open_store(str(tmp_path / "store"), create=True)
    with DomainWriter(Catalog(store), "/rc.h5") as w:
        g = w.add_group(w.root, "g")
        w.link_hard(w.root, "again", g)
        w.link_hard(g, "self", g)
    ctx, reader = make_ctx(store)
    view = materialize(hdf5.domain_node(ctx.catalog.load("/rc.h5"), ctx, "rc.h5"), tmp_path / "rc.h5", reader)
    with h5py.File(view, "r") as f:
        assert h5py.h5o.get_info(f["g"].id).rc == 3 and h5py.h5o.get_info(f.id).rc == 1
        _, msgs, ok = v2_header(view.read_bytes(), h5py.h5o.get_info(f["g"].id).addr)
        assert ok
        rc, = [m for m in msgs if m["type"] == structs.MSG_REFCOUNT]
        assert structs.REFCOUNT.unpack(rc["body"])["refcount"] == 3
        assert list(f) == ["g", "again"] and list(f["g"]) == ["self"]


# -- import keeps the order, the view shows it ---------------------------------------
def test_import_keeps_creation_order(h5_case):
    _, _, model, want = h5_case
    for path, (names, links) in want.items():
        obj = model.resolve(path) if path != "/" else model.root
        assert list(obj.attributes) == names, path
        if links:
            created = [obj.links[n].created for n in links]
            assert created == sorted(created) and len(set(created)) == len(created), path


def test_h5py_reads_attributes_and_links_in_creation_order(h5_case):
    src, view, _, want = h5_case
    with h5py.File(src, "r") as a, h5py.File(view, "r") as b:
        for path, (names, links) in want.items():
            assert list(a[path].attrs) == names  # the source, as h5py sees it
            assert list(b[path].attrs) == names, path
            if links:
                assert list(a[path]) == links and list(b[path]) == links, path
                assert b[path].id.get_create_plist().get_link_creation_order() & h5py.h5p.CRT_ORDER_TRACKED
        # the values came along with their order
        assert np.array_equal(b["dense"].attrs["y"], np.arange(12))
        assert b[b["dense"].attrs["ref"]] == b["zz"]


def test_pyfive_reads_creation_order(h5_case):
    import pyfive

    _, view, _, want = h5_case
    f = pyfive.File(str(view))
    for path, (names, links) in want.items():
        obj = f[path] if path != "/" else f
        assert list(obj.attrs) == names, path
        if links:
            assert list(obj) == links, path


def test_h5dump_sorts_by_creation_order(h5_case):
    _, view, _, want = h5_case

    def attributes(*args: str) -> list[str]:
        res = subprocess.run(["h5dump", "-A", *args, "-g", "/dense", str(view)], capture_output=True, text=True,
                             env=ENV, timeout=120)
        assert res.returncode == 0, res.stderr
        return re.findall(r'^   ATTRIBUTE "([^"]+)"', res.stdout, re.M)  # the group's own, not its members'

    assert attributes("--sort_by=creation_order") == want["/dense"][0]
    assert attributes() == sorted(want["/dense"][0])  # h5dump's default stays name order


def test_netcdf_sees_the_original_order(nc_case):
    import netCDF4

    src, view, _ = nc_case
    with netCDF4.Dataset(src) as a, netCDF4.Dataset(view) as b:
        assert list(b.variables) == list(a.variables) == ["w", "b", "a"]
        assert b.ncattrs() == a.ncattrs() == ["zz", "aa"]
        for name in a.variables:
            assert b[name].ncattrs() == a[name].ncattrs() == ["units", "long_name", "axis"]
        assert b["grp"].ncattrs() == a["grp"].ncattrs() == ATTRS
        assert list(b["grp"].variables) == list(a["grp"].variables) == ["z2", "a2"]
    orig = subprocess.run(["ncdump", "-h", str(src)], capture_output=True, text=True, env=ENV, timeout=120)
    got = subprocess.run(["ncdump", "-h", str(view)], capture_output=True, text=True, env=ENV, timeout=120)
    assert orig.returncode == got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[1:] == orig.stdout.splitlines()[1:]  # all but "netcdf <name> {"


def test_links_made_within_one_clock_step_keep_their_order(tmp_path):
    """Links made faster than the clock moves (one float step of time.time() is ~0.2 us)
    still come out in the order they were made, never in name order."""
    store = open_store(str(tmp_path / "store"), create=True)
    names = [f"n{i:03d}" for i in range(200)][::-1]
    with DomainWriter(Catalog(store), "/fast.h5") as w:
        g = w.add_group(w.root, "g")
        for n in names:
            w.link_soft(g, n, "/nowhere")
        for n in names[:20]:
            w.set_attr(g, n, T.IntType(1, True), Shape("scalar"), 1)
    ctx, reader = make_ctx(store)
    model = ctx.catalog.load("/fast.h5")
    created = [model.resolve("/g").links[n].created for n in names]
    assert all(a < b for a, b in zip(created, created[1:]))
    view = materialize(hdf5.domain_node(model, ctx, "fast.h5"), tmp_path / "fast.h5", reader)
    with h5py.File(view, "r") as f:
        assert list(f["g"]) == names and list(f["g"].attrs) == names[:20]


def test_more_attributes_than_a_creation_order_can_number(tmp_path):
    """An object with 65536 attributes (HDF5's creation order is 16 bits): all are shown,
    without order (HDF5 lists them by name); its neighbours keep theirs."""
    store = open_store(str(tmp_path / "store"), create=True)
    n = structs.MAX_CREATION_INDEX + 1
    with DomainWriter(Catalog(store), "/many.h5") as w:
        g = w.add_group(w.root, "g")
        for i in range(n):
            w.set_attr(g, f"a{n - i:06d}", T.IntType(1, True), Shape("scalar"), i % 100)
        w.set_attr(w.root, "z", T.IntType(1, True), Shape("scalar"), 1)
        w.set_attr(w.root, "a", T.IntType(1, True), Shape("scalar"), 2)
    ctx, reader = make_ctx(store)
    view = materialize(hdf5.domain_node(ctx.catalog.load("/many.h5"), ctx, "many.h5"), tmp_path / "many.h5", reader)
    with h5py.File(view, "r") as f:
        names = list(f["g"].attrs)
        assert len(names) == n and names == sorted(names) and f["g"].attrs["a000001"] == (n - 1) % 100
        assert f["g"].id.get_create_plist().get_attr_creation_order() == 0
        assert list(f.attrs) == ["z", "a"]
