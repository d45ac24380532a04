"""Ids, keys, types, values, chunk indexes, the tree, the catalog and the writer."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from polyfs.codecs.registry import DEFLATE, ZSTD, Filter
from polyfs.errors import AlreadyExists, InvalidInput, NotFound, SchemaError
from polyfs.model import ids, keys, types as T, values
from polyfs.model.catalog import Catalog
from polyfs.model.chunks import ChunkIndex, CrcTable
from polyfs.model.schema import Dataset, Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store


def test_root_id_rotation_rule():
    # the example of the schema document
    assert ids.root_of("g-b03b24ef-69f244b6-acd9-4df97b-37122a") == "g-b03b24ef-69f244b6-38b3-ac67e1-7acc3e"
    root = ids.new_root_id()
    assert ids.is_root(root)
    child = ids.new_id("d", root)
    assert not ids.is_root(child) and ids.root_of(child) == root and child[2:19] == root[2:19]
    with pytest.raises(SchemaError):
        ids.parse("g-0568d8c5-a77e-11e4-9f7a-3c15c2da029e")  # schema v1


def test_keys_follow_the_schema():
    root = "g-b03b24ef-69f244b6-38b3-ac67e1-7acc3e"
    d = "d-b03b24ef-69f244b6-56e5-25125a-89ba79"
    assert keys.group_key(root) == "db/b03b24ef-69f244b6/.group.json"
    assert keys.group_key("g-b03b24ef-69f244b6-acd9-4df97b-37122a") == "db/b03b24ef-69f244b6/g/acd9-4df97b-37122a/.group.json"
    assert keys.dataset_key(d) == "db/b03b24ef-69f244b6/d/56e5-25125a-89ba79/.dataset.json"
    assert keys.chunk_key(d, (1, 3)) == "db/b03b24ef-69f244b6/d/56e5-25125a-89ba79/1_3"
    assert keys.domain_key("/home/alice/brain.h5") == "home/alice/brain.h5/.domain.json"
    assert keys.domain_from_key("home/alice/brain.h5/.domain.json") == "/home/alice/brain.h5"
    assert keys.parse_chunk_name("2_0_11") == (2, 0, 11) and keys.parse_chunk_name(".dataset.json") is None
    for bad in ("", "/", "db/x", "a/../b", "polyfs/x"):
        with pytest.raises(InvalidInput):
            keys.domain_key(bad)


TYPE_JSON = [
    {"class": "H5T_INTEGER", "base": "H5T_STD_I16BE"},
    {"class": "H5T_FLOAT", "base": "H5T_IEEE_F64LE"},
    {"class": "H5T_STRING", "charSet": "H5T_CSET_UTF8", "strPad": "H5T_STR_NULLTERM", "length": "H5T_VARIABLE"},
    {"class": "H5T_STRING", "charSet": "H5T_CSET_ASCII", "strPad": "H5T_STR_NULLPAD", "length": 7},
    {"class": "H5T_COMPOUND", "fields": [{"name": "a", "type": {"class": "H5T_INTEGER", "base": "H5T_STD_U8LE"}},
                                          {"name": "b", "type": {"class": "H5T_FLOAT", "base": "H5T_IEEE_F32BE"}}]},
    {"class": "H5T_ENUM", "base": {"class": "H5T_INTEGER", "base": "H5T_STD_I8LE"},
     "members": [{"name": "FALSE", "value": 0}, {"name": "TRUE", "value": 1}]},
    {"class": "H5T_ARRAY", "base": {"class": "H5T_INTEGER", "base": "H5T_STD_I32LE"}, "dims": [2, 3]},
    {"class": "H5T_REFERENCE", "base": "H5T_STD_REF_OBJ", "length": 48},
    {"class": "H5T_OPAQUE", "size": 5, "tag": "blob"},
    {"class": "H5T_VLEN", "base": {"class": "H5T_INTEGER", "base": "H5T_STD_I32LE"}, "size": "H5T_VARIABLE"},
]


@pytest.mark.parametrize("tj", TYPE_JSON, ids=lambda t: t["class"])
def test_type_json_roundtrip(tj):
    t = T.from_json(tj)
    assert T.from_json(t.to_json()) == t
    t.numpy()  # every type has a storage dtype


def test_type_details():
    assert T.from_json("H5T_STD_U64LE").numpy() == np.dtype("<u8")
    assert T.from_json(TYPE_JSON[5]).numpy() == np.dtype(bool)
    assert T.from_json(TYPE_JSON[4]).numpy().itemsize == 5  # packed, as HSDS stores compounds
    enum_map = {"class": "H5T_ENUM", "base": "H5T_STD_U8LE", "mapping": {"A": 0, "B": 7}}
    assert dict(T.from_json(enum_map).members) == {"A": 0, "B": 7}
    with pytest.raises(SchemaError):
        T.from_json({"class": "H5T_INTEGER"})
    with pytest.raises(SchemaError):
        T.from_json("t-b03b24ef-69f244b6-56e5-25125a-89ba79")  # committed type without a resolver


def test_attribute_values_roundtrip():
    cases = [
        (T.IntType(4, True), Shape("scalar"), 5),
        (T.FloatType(8), Shape("simple", (3,)), [0.5, float("nan"), -1.0]),
        (T.BOOL, Shape("scalar"), True),
        (T.StringType(None, "utf8", "nullterm"), Shape("simple", (2,)), ["é", ""]),
        (T.StringType(4, "ascii", "nullpad"), Shape("scalar"), "ab"),
        (T.from_json(TYPE_JSON[4]), Shape("simple", (2,)), [[1, 2.5], [3, 4.0]]),
        (T.from_json(TYPE_JSON[6]), Shape("scalar"), [[1, 2, 3], [4, 5, 6]]),
        (T.ReferenceType(), Shape("simple", (1,)), ["datasets/d-b03b24ef-69f244b6-56e5-25125a-89ba79"]),
        (T.OpaqueType(3), Shape("scalar"), "AQID"),
        (T.IntType(2, False), Shape("simple", (2, 2)), [[1, 2], [3, 4]]),
    ]
    for t, s, v in cases:
        arr = values.to_numpy(t, s, v)
        assert arr.shape == s.array_shape + (t.dims if isinstance(t, T.ArrayType) else ())
        back = values.from_numpy(t, arr)
        assert json.dumps(back) == json.dumps(v), (t, v, back)
    with pytest.raises(InvalidInput):
        values.to_numpy(T.IntType(4, True), Shape("simple", (3,)), [1, 2])


def test_fill_values():
    t = T.IntType(2, True, ">")
    assert values.fill_bytes(t, 7) == b"\x00\x07"
    assert values.fill_array(t, None, (2,)).tolist() == [0, 0]
    assert values.fill_array(T.StringType(None, "utf8"), None, (1,))[0] == ""


def test_chunk_index_from_one_listing():
    idx = ChunkIndex.from_listing("d-x", "p/", (3, 4), [("0_0", 10), ("2_3", 30), ("1_1", 20), (".dataset.json", 99),
                                                          ("9_9", 1), ("1", 5), ("junk", 1)])
    assert idx.linear.tolist() == [0, 5, 11] and idx.sizes.tolist() == [10, 20, 30]
    assert idx.sizes_for(np.array([0, 1, 5, 11, 12])).tolist() == [10, -1, 20, 30, -1]
    assert idx.key(11) == "p/2_3" and idx.coords_of(5) == (1, 1)
    scalar = ChunkIndex.from_listing("d-s", "q/", (), [("0", 4)])
    assert len(scalar) == 1 and scalar.key(0) == "q/0"


def test_crc_table_detects_rewritten_chunks():
    t = CrcTable.empty().merged([(3, 111, 222), (1, 5, 6)])
    assert t.lookup(3, 111) == 222 and t.lookup(3, 112) is None and t.lookup(2, 5) is None
    assert CrcTable.from_bytes(t.to_bytes()).lookup(1, 5) == 6
    assert len(CrcTable.from_bytes(b"garbage")) == 0


@pytest.fixture
def catalog():
    return Catalog(open_store("memory://model-tests-" + ids.new_root_id()[2:10]))


def test_writer_commit_and_load(catalog):
    with DomainWriter(catalog, "/home/u/a.h5") as w:
        g = w.add_group(w.root, "g")
        d = w.add_dataset(g, "d", T.IntType(2, False, ">"), Shape("simple", (5, 7), (None, 7)), (2, 4),
                          [Filter(DEFLATE, (4,))], fill_value=3)
        w.write_array(d, np.arange(35, dtype=">u2").reshape(5, 7))
        w.link_soft(w.root, "s", "/g/d")
        w.link_external(w.root, "e", "/other.h5", "/x")
        w.link_hard(w.root, "again", d)
        w.set_attr_array(d, "units", T.StringType(None, "utf8", "nullterm"), np.array("mm", dtype=object))
        with pytest.raises(AlreadyExists):
            w.add_group(w.root, "g")
    assert catalog.list_domains() == ["/home/u/a.h5"]
    m = catalog.load("/home/u/a.h5")
    assert [e.path for e in m.walk()] == ["/", "/again", "/g"]
    ds = m.resolve("/g/d")
    assert m.resolve("/s") is ds and m.resolve("/again") is ds
    assert ds.shape.maxdims == (None, 7) and ds.fill_value == 3
    assert {(p, l.name) for p, l in m.aliases()} == {("/", "s"), ("/", "e"), ("/g", "d")}
    idx = catalog.chunk_index(ds)
    assert len(idx) == math.prod(ds.grid) == 6
    assert len(catalog.crc_table(ds)) == 6
    raw = catalog.pipeline(ds).decode(catalog.store.get(idx.key(idx.linear_of((2, 1)))), ds.chunk_nbytes)
    block = np.frombuffer(raw, ">u2").reshape(2, 4)
    assert block[0].tolist() == [32, 33, 34, 3] and block[1].tolist() == [3, 3, 3, 3]  # padded edge chunk


def test_writer_rolls_back(catalog):
    before = {o.key for o in catalog.store.list("")}
    with pytest.raises(RuntimeError):
        with DomainWriter(catalog, "/broken.h5") as w:
            d = w.add_dataset(w.root, "d", T.FloatType(4), Shape("simple", (10,)), (5,), [Filter(ZSTD, (3,))])
            w.write_array(d, np.zeros(10, "f4"))
            raise RuntimeError("boom")
    assert {o.key for o in catalog.store.list("")} == before
    with pytest.raises(NotFound):
        catalog.load("/broken.h5")


def test_catalog_reports_bad_json(catalog):
    catalog.store.put("bad.h5/.domain.json", b"{not json")
    with pytest.raises(SchemaError, match="bad.h5/.domain.json"):
        catalog.load("/bad.h5")
    root = ids.new_root_id()
    catalog.store.put("x.h5/.domain.json", json.dumps({"root": root, "owner": "a", "acls": {}}).encode())
    with pytest.raises(NotFound, match="missing"):
        catalog.load("/x.h5")


def test_dataset_layout_variants():
    base = {"id": "d-b03b24ef-69f244b6-56e5-25125a-89ba79", "type": "H5T_STD_U8LE",
            "shape": {"class": "H5S_SIMPLE", "dims": [10, 20]}}
    contiguous = Dataset.from_json({**base, "creationProperties": {"layout": {"class": "H5D_CONTIGUOUS"}}})
    assert contiguous.chunks == (10, 20) and contiguous.grid == (1, 1)
    old = Dataset.from_json({**base, "layout": {"class": "H5D_CHUNKED", "dims": [5, 5]}})
    assert old.chunks == (5, 5) and old.grid == (2, 4)
    assert "layout" in old.to_json()  # the older writer's key is kept
    with pytest.raises(SchemaError):
        Dataset.from_json({**base, "creationProperties": {"layout": {"class": "H5D_CHUNKED", "dims": [5]}}})


def test_a_shrink_keeps_the_limit_a_fixed_size_dataset_had(catalog):
    """HDF5 fixes maxdims at creation (none given: the creation shape): shrinking a dataset
    must not make its smaller size the new limit."""
    from polyfs.model.editor import DomainEditor

    with DomainWriter(catalog, "/f.h5") as w:
        d = w.add_dataset(w.root, "d", T.IntType(2, False, "<"), Shape("simple", (10, 12)), (4, 4),
                          [Filter(DEFLATE, (4,))])
        w.write_array(d, np.ones((10, 12), "<u2"))
    ed = DomainEditor(catalog)
    ed.resize("/f.h5", d.id, (4, 5))
    ed.resize("/f.h5", d.id, (10, 12))  # back to where it was created: allowed
    ds = catalog.load("/f.h5").datasets[d.id]
    assert ds.shape.dims == (10, 12) and ds.shape.maxdims == (10, 12)
    with pytest.raises(InvalidInput):
        ed.resize("/f.h5", d.id, (11, 12))
