"""Tier 1: the HDF5 view's binary pieces, checked against bytes libhdf5 writes
and parsed back with the very declarations that packed them."""
from __future__ import annotations

import struct

import h5py
import numpy as np
import pytest

from polyfs.model import types as T
from polyfs.formats.hdf5 import btree
from polyfs.formats.hdf5 import dtypes
from polyfs.formats.hdf5 import messages
from polyfs.formats.hdf5 import structs
from polyfs.formats.hdf5.layout import Blob, FilePlan, blob_block
from polyfs.formats.hdf5.vlheap import GlobalHeap


def h5_messages(path, obj_path: str) -> list[tuple[int, int, bytes]]:
    """(type, flags, body) of every message of a libhdf5-written v1 object header."""
    with h5py.File(path, "r") as f:
        addr = h5py.h5o.get_info(f[obj_path].id).addr
    buf = open(path, "rb").read()
    hdr = structs.OBJECT_HEADER_V1.unpack(buf, addr)
    assert hdr["version"] == 1
    out, todo = [], [(addr + structs.OBJECT_HEADER_V1.size, hdr["size"])]
    while todo:
        pos, size = todo.pop(0)
        end = pos + size
        while pos < end:
            m = structs.MESSAGE_V1.unpack(buf, pos)
            body = buf[pos + structs.MESSAGE_V1.size: pos + structs.MESSAGE_V1.size + m["size"]]
            if m["type"] == structs.MSG_CONTINUATION:
                c = structs.CONTINUATION.unpack(body)
                todo.append((c["address"], c["length"]))
            out.append((m["type"], m["flags"], body))
            pos += structs.MESSAGE_V1.size + m["size"]
    return out


def first(msgs, mtype):
    return next(body for t, _, body in msgs if t == mtype)


# (model type, numpy/h5py dtype that libhdf5 writes for it)
TYPES = [
    (T.IntType(1, True), np.dtype("i1")),
    (T.IntType(2, False, ">"), np.dtype(">u2")),
    (T.IntType(8, True, "<"), np.dtype("<i8")),
    (T.FloatType(2), np.dtype("<f2")),
    (T.FloatType(4, ">"), np.dtype(">f4")),
    (T.FloatType(8), np.dtype("<f8")),
    (T.StringType(6, "ascii", "nullpad"), np.dtype("S6")),
    (T.StringType(None, "utf8", "nullterm"), h5py.string_dtype()),
    (T.StringType(None, "ascii", "nullterm"), h5py.string_dtype("ascii")),
    (T.BOOL, np.dtype(bool)),
    (T.EnumType(T.IntType(1, False), (("BLUE", 42), ("RED", 0))), h5py.enum_dtype({"RED": 0, "BLUE": 42}, "u1")),
    (T.CompoundType((("x", T.FloatType(4)), ("id", T.IntType(2, False)))), np.dtype([("x", "<f4"), ("id", "<u2")])),
    (T.CompoundType((("p", T.CompoundType((("a", T.IntType(2, True)),))), ("arr", T.ArrayType(T.IntType(2, True), (2,))))),
     np.dtype([("p", [("a", "<i2")]), ("arr", "<i2", (2,))])),
    (T.CompoundType((("n", T.IntType(4, True)), ("s", T.StringType(None, "utf8", "nullterm")))),
     np.dtype([("n", "<i4"), ("s", h5py.string_dtype())])),
    (T.ArrayType(T.IntType(4, True), (2, 3)), np.dtype(("<i4", (2, 3)))),
    (T.ReferenceType(), h5py.ref_dtype),
    (T.VlenType(T.IntType(4, True)), h5py.vlen_dtype("<i4")),
    (T.OpaqueType(4), np.dtype("V4")),
]


@pytest.mark.parametrize("model_type,dt", TYPES, ids=[repr(t)[:40] for t, _ in TYPES])
def test_datatype_messages_match_libhdf5(tmp_path, model_type, dt):
    path = tmp_path / "t.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("d", shape=(2,), dtype=dt)
    body = first(h5_messages(path, "d"), structs.MSG_DATATYPE)
    ours = dtypes.encode_type(model_type)
    assert body[:len(ours)] == ours
    assert not any(body[len(ours):])  # the rest is the message's 8-byte padding


def test_dataspace_and_layout_match_libhdf5(tmp_path):
    path = tmp_path / "t.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("d", shape=(5, 3), maxshape=(None, 3), dtype="<i4", chunks=(4, 3), fillvalue=7)
    msgs = h5_messages(path, "d")
    from polyfs.model.schema import Shape

    ours = messages.dataspace_bytes(Shape("simple", (5, 3), (None, 3)))
    theirs = first(msgs, structs.MSG_DATASPACE)
    # libhdf5 writes dataspace version 1; the dims and max dims are the same numbers
    v1 = struct.unpack_from("<4Q", theirs, 8)
    assert struct.unpack_from("<4Q", ours, structs.DATASPACE_V2.size) == v1
    fill = first(msgs, structs.MSG_FILL)
    assert bytes(messages.fill_value(np.int32(7).tobytes(), chunked=True).body.buf) == fill[:12]
    lay = first(msgs, structs.MSG_LAYOUT)
    mine = bytes(messages.layout_chunked("bt", (4, 3), 4).body.buf)
    assert mine[:3] == lay[:3] and mine[11:23] == lay[11:23]  # all but the B-tree address


def test_numpy_dtypes_follow_the_declarations():
    for layout in (structs.SUPERBLOCK_V0, structs.SYMBOL_TABLE_ENTRY, structs.BTREE_V1, structs.LOCAL_HEAP,
                   structs.GLOBAL_HEAP_OBJECT, structs.VL_HEAP_ID, structs.OBJECT_HEADER_V1):
        dt = structs.numpy_dtype(layout)
        assert dt.itemsize == layout.size
        packed = layout.pack({f.name: (i + 1 if not f.code.endswith("s") else b"x") for i, f in enumerate(layout.fields)})
        arr = np.frombuffer(packed, dtype=dt)[0]
        for i, f in enumerate(layout.fields):
            want = b"x" if f.code.endswith("s") else i + 1
            assert arr[f.name] == want, (layout.name, f.name)


def _parse_chunk_tree(data: bytes, base: int, rank: int, at: int) -> list[tuple[tuple, int, int]]:
    """Walk a packed chunk B-tree (parsed with structs' declarations): [(offsets, size, child)]."""
    node_dt = structs.chunk_node_dtype(rank)
    node = np.frombuffer(data, dtype=node_dt, count=1, offset=at - base)[0]
    hdr = structs.BTREE_V1.unpack(node["header"].tobytes())
    assert hdr["signature"] == b"TREE" and hdr["node_type"] == structs.BTREE_CHUNK
    n = hdr["entries_used"]
    assert 0 < n <= 2 * structs.CHUNK_K
    keys = [node["pairs"]["key"][i] for i in range(n)] + [node["pairs"]["key"][n] if n < 64 else node["last"]]
    out = []
    for i in range(n):
        child = int(node["pairs"]["child"][i])
        if hdr["level"] == 0:
            out.append((tuple(int(x) for x in keys[i]["offsets"]), int(keys[i]["size"]), child))
        else:
            sub = _parse_chunk_tree(data, base, rank, child)
            assert sub[0][0] == tuple(int(x) for x in keys[i]["offsets"])
            out.extend(sub)
    # the right key bounds everything below it
    last = tuple(int(x) for x in keys[n]["offsets"])
    assert all(o < last for o, _, _ in out)
    return out


@pytest.mark.parametrize("n", [1, 63, 64, 65, 64 * 64, 64 * 64 + 1, 10_000])
def test_chunk_btree_levels_and_keys(n):
    grid = (200, 70)
    rng = np.random.default_rng(n)
    linear = np.sort(rng.choice(np.prod(grid), size=n, replace=False)).astype(np.int64)
    sizes = rng.integers(1, 5000, size=n).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) + (5 << 32)  # past 4 GiB
    tree = btree.ChunkBTree("bt", grid, (16, 8), linear, sizes, None, offsets)
    base = 4096
    data = tree.nodes(base, 0)  # what render returns, eagerly or from its lazy producer
    assert len(data) == tree.size == sum(tree.levels) * structs.chunk_node_dtype(2).itemsize
    assert tree.levels[-1] == 1 and len(tree.levels) == max(1, int(np.ceil(np.log(n) / np.log(64) - 1e-9)))
    entries = _parse_chunk_tree(data, base, 2, base)
    coords = np.stack(np.unravel_index(linear, grid), axis=-1) * (16, 8)
    assert [e[0] for e in entries] == [tuple(c) + (0,) for c in coords.tolist()]
    assert [e[1] for e in entries] == sizes.tolist()
    assert [e[2] for e in entries] == offsets.tolist()


def test_group_blocks_parse_back():
    names = [f"n{i:04d}".encode() for i in range(100)] + ["ü".encode()]
    syms = [btree.Symbol(n, target=("oh", i)) for i, n in enumerate(names)] + [btree.Symbol(b"soft", value=b"/x/y")]
    tree_key, heap_key, blocks = btree.group_blocks("g", syms)
    plan = FilePlan()
    for i in range(101):
        plan.add(blob_block(("oh", i), Blob(bytes(8))))
    plan.extend(blocks)
    addr = plan.assign()
    file = b"".join(seg.data for seg in plan.render())
    heap = structs.LOCAL_HEAP.unpack(file, addr[heap_key])
    data = file[heap["data_address"]:heap["data_address"] + heap["data_size"]]
    assert heap["free_list"] == structs.LOCAL_HEAP_FREE_NULL

    def name_at(off):
        return data[off:data.index(b"\0", off)]

    seen = []

    def walk(at):
        hdr = structs.BTREE_V1.unpack(file, at)
        assert hdr["signature"] == b"TREE" and hdr["node_type"] == structs.BTREE_GROUP
        pos = at + structs.BTREE_V1.size
        children = []
        for i in range(hdr["entries_used"]):
            children.append(struct.unpack_from("<QQ", file, pos + 16 * i))
        for key, child in children:
            if hdr["level"]:
                walk(child)
            else:
                snod = structs.SNOD.unpack(file, child)
                assert snod["signature"] == b"SNOD" and snod["symbols"] <= 2 * structs.GROUP_LEAF_K
                for j in range(snod["symbols"]):
                    e = structs.SYMBOL_TABLE_ENTRY.unpack(file, child + structs.SNOD.size + j * 40)
                    seen.append((name_at(e["name_offset"]), e))

    walk(addr[tree_key])
    assert [n for n, _ in seen] == sorted(names + [b"soft"])
    for n, e in seen:
        if n == b"soft":
            assert e["cache_type"] == structs.CACHE_SLINK and e["header_address"] == structs.UNDEF
            assert name_at(structs.SCRATCH_SLINK.unpack(e["scratch"])["value_offset"]) == b"/x/y"
        else:
            assert e["header_address"] == addr[("oh", names.index(n))]


def test_global_heap_collections():
    heap = GlobalHeap("h", collection_bytes=8192)
    ids = [heap.add(Blob(bytes([i % 251]) * (i % 300))) for i in range(200)]
    assert heap.add(Blob(bytes([5]) * 5)) == ids[5]  # identical payloads are stored once
    plan = FilePlan()
    plan.extend(heap.blocks())
    addr = plan.assign()
    file = b"".join(seg.data for seg in plan.render())
    for i, (key, index) in enumerate(ids):
        at = addr[key]
        col = structs.GLOBAL_HEAP.unpack(file, at)
        assert col["signature"] == b"GCOL" and col["collection_size"] >= structs.GLOBAL_HEAP_MIN
        pos, found = at + structs.GLOBAL_HEAP.size, None
        while pos < at + col["collection_size"]:
            o = structs.GLOBAL_HEAP_OBJECT.unpack(file, pos)
            if o["index"] == 0:
                assert pos + o["size"] == at + col["collection_size"]
                break
            if o["index"] == index:
                found = file[pos + 16:pos + 16 + o["size"]]
            pos += 16 + structs.pad8(o["size"])
        assert found == bytes([i % 251]) * (i % 300)
    assert len(heap) > 1


def test_object_header_rejects_oversized_messages():
    big = messages.Message(structs.MSG_ATTRIBUTE, Blob(bytes(70_000)))
    with pytest.raises(messages.MessageTooLarge):
        messages.object_header([big], 1)
