"""Fuzzing the pure parsers of the write side (tier 1, no store, no operations).

The Zarr and N5 metadata parsers, the N5 block header, the Zarr shard index and both
ingesters' ``chunks_in`` are fed mutated input. Property: each returns or raises a
:class:`polyfs.errors.PolyfsError` (which maps to an errno); never another exception.
"""
from __future__ import annotations

import json
import math
import struct

import crc32c
import numpy as np
import pytest
from fuzzkit import INTERESTING_INTS, budget, deep_nesting, edits, json_edits, json_values, mutate, \
    polyfs_errno_only
from hypothesis import example, given
from hypothesis import strategies as st
from writeharness import n5_attrs, zarr_array_meta, zarr_group_meta

from polyfs.errors import errno_of
from polyfs.formats.n5 import ingest as n5_ingest
from polyfs.formats.n5.spec import parse_block_header
from polyfs.formats.zarr import ingest as zarr_ingest
from polyfs.writes.protocol import ArrayWrite
from polyfs.writes.protocol import BytesSource

ZARR_BASES = [
    zarr_array_meta((10, 12), "uint16", (4, 4), shards=(8, 8), codecs=("zstd",)),
    zarr_array_meta((7,), "<f8", (3,), codecs=("gzip", "crc32c"), fill=1.5),
    zarr_array_meta((5, 5, 5), "int8", (5, 5, 5), codecs=("blosc",), dimension_names=["z", "y", "x"]),
    zarr_group_meta({"a": 1, "b": [1, 2]}),
]
N5_BASES = [
    n5_attrs((10, 12), "uint16", (4, 4), "gzip", unit="um"),
    n5_attrs((6,), "float32", (4,), "blosc"),
    n5_attrs((3, 4, 5), "int64", (3, 4, 5), "zstd"),
    {"n5": "4.0.0", "note": "a group"},
]


def _meta_bytes(doc) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


def _check_parse(parse, data: bytes) -> None:
    exc = polyfs_errno_only(lambda: parse(data, "fuzz"))
    if exc is not None:
        assert errno_of(exc) > 0


# -- zarr.json / attributes.json ------------------------------------------------------------
@budget(150)
@given(base=st.sampled_from(ZARR_BASES), changes=json_edits())
@example(base=ZARR_BASES[0], changes=[])
def test_zarr_json_mutated(base, changes) -> None:
    doc = base
    for c in changes:
        doc = c.apply(doc)
    _check_parse(zarr_ingest.parse, _meta_bytes(doc))


@budget(150)
@given(base=st.sampled_from(N5_BASES), changes=json_edits())
def test_n5_attributes_mutated(base, changes) -> None:
    doc = base
    for c in changes:
        doc = c.apply(doc)
    _check_parse(n5_ingest.parse, _meta_bytes(doc))


@budget(60)
@given(base=st.sampled_from(ZARR_BASES + N5_BASES), bad=edits(3))
def test_metadata_bytes_mutated(base, bad) -> None:
    """Byte-level damage: invalid UTF-8, truncated JSON, stray bytes."""
    data = mutate(_meta_bytes(base), bad)
    _check_parse(zarr_ingest.parse, data)
    _check_parse(n5_ingest.parse, data)


@pytest.mark.parametrize("data", [
    deep_nesting(100_000), b"\xff\xfe{}", b'{"zarr_format": 3, "node_type": "group", "attributes": {"a": "\xc3"}}',
    b'{"zarr_format": 3e999}', b"[" * 5000, b'{"dimensions": [1e999], "blockSize": [1], "dataType": "uint8"}',
    b'{"dimensions": [NaN], "blockSize": [1], "dataType": "uint8"}', b"\x00" * 16, b"",
    b'{"dimensions": [4], "blockSize": [2], "dataType": "uint8", "compression": {"type": "gzip", "level": null}}',
    b'{"dimensions": [4], "blockSize": [2], "dataType": "uint8", "compression": {"type": "zstd", "level": 1e999}}',
    b'{"dimensions": [4], "blockSize": [2], "dataType": "uint8", "compression": {"type": ["gzip"]}}',
])
def test_metadata_pinned(data: bytes) -> None:
    _check_parse(zarr_ingest.parse, data)
    _check_parse(n5_ingest.parse, data)


@budget(100)
@given(value=json_values(), key=st.sampled_from(["shape", "data_type", "fill_value", "chunk_grid", "codecs",
                                                  "chunk_key_encoding", "dimension_names", "attributes",
                                                  "storage_transformers", "zarr_format", "node_type"]))
def test_zarr_json_one_field(value, key) -> None:
    doc = dict(ZARR_BASES[0])
    doc[key] = value
    _check_parse(zarr_ingest.parse, _meta_bytes(doc))


@budget(100)
@given(value=json_values(), key=st.sampled_from(["dimensions", "blockSize", "dataType", "compression",
                                                  "compressionType", "n5"]))
def test_n5_attributes_one_field(value, key) -> None:
    doc = dict(N5_BASES[0])
    doc[key] = value
    _check_parse(n5_ingest.parse, _meta_bytes(doc))


# -- N5 block headers ------------------------------------------------------------------------
@budget(150)
@given(mode=st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 65535)),
       ndim=st.one_of(st.integers(0, 4), st.sampled_from([255, 65535])),
       dims=st.lists(st.sampled_from(INTERESTING_INTS).map(lambda v: v & 0xFFFFFFFF), max_size=4),
       tail=st.binary(max_size=24), cut=st.integers(0, 64))
@example(mode=1, ndim=2, dims=[4, 4], tail=b"", cut=12)  # varlength header without its count
def test_n5_block_header(mode, ndim, dims, tail, cut) -> None:
    blob = struct.pack(">HH", mode, ndim) + b"".join(struct.pack(">I", d) for d in dims) + tail
    blob = blob[:max(cut, len(blob) - cut)]
    try:
        head = parse_block_header(blob)
    except ValueError:
        return
    assert head.size <= len(blob) + 4


@pytest.fixture(scope="module")
def n5_decl() -> ArrayWrite:
    decl = n5_ingest.parse(_meta_bytes(N5_BASES[0]), "fuzz")
    assert isinstance(decl, ArrayWrite)
    return decl


@budget(150)
@given(mode=st.integers(0, 3), ndim=st.sampled_from([0, 1, 2, 3, 64]),
       dims=st.lists(st.sampled_from(INTERESTING_INTS).map(lambda v: v & 0xFFFFFFFF), max_size=3),
       payload=st.binary(max_size=40), bad=st.one_of(st.none(), edits(2)))
def test_n5_chunks_in(n5_decl, mode, ndim, dims, payload, bad) -> None:
    blob = struct.pack(">HH", mode, ndim) + b"".join(struct.pack(">I", d) for d in dims[:ndim]) + payload
    if bad:
        blob = mutate(blob, bad)
    ing = n5_ingest.N5Ingester(None)
    exc = polyfs_errno_only(lambda: list(ing.chunks_in(BytesSource(blob), n5_decl, {0: (0, 0)}, "fuzz")))
    assert exc is None or errno_of(exc) > 0


# -- Zarr shard indexes ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def shard_decl() -> ArrayWrite:
    decl = zarr_ingest.parse(_meta_bytes(ZARR_BASES[0]), "fuzz")
    assert isinstance(decl, ArrayWrite)
    return decl


def _shard(entries: list[tuple[int, int]], body: bytes, good_crc: bool, location: str = "end") -> bytes:
    raw = np.array(entries, dtype="<u8").tobytes()
    crc = crc32c.crc32c(raw) if good_crc else (crc32c.crc32c(raw) ^ 1)
    index = raw + struct.pack("<I", crc)
    return index + body if location == "start" else body + index


@budget(200)
@given(entries=st.lists(st.tuples(st.sampled_from(INTERESTING_INTS + (10, 20, 30)),
                                  st.sampled_from(INTERESTING_INTS + (10, 20, 30))), min_size=4, max_size=4),
       body=st.binary(max_size=80), good_crc=st.booleans(), cut=st.integers(0, 8))
@example(entries=[(2 ** 64 - 1, 2 ** 64 - 1)] * 3 + [(2 ** 64 - 1, 0)], body=b"", good_crc=True, cut=0)
@example(entries=[(2 ** 63, 2 ** 63)] * 4, body=b"x", good_crc=True, cut=0)
def test_shard_index_entries(shard_decl, entries, body, good_crc, cut) -> None:
    """Index entries out of range, overlapping, half-missing; wrong crc32c; truncated shards."""
    blob = _shard(entries, body, good_crc)
    blob = blob[:len(blob) - cut] if cut else blob
    members = {i: divmod(i, 2) for i in range(math.prod(shard_decl.per_file))}
    ing = zarr_ingest.ZarrIngester(None)
    got: list = []
    exc = polyfs_errno_only(lambda: got.extend(ing.chunks_in(BytesSource(blob), shard_decl, members, "fuzz")))
    if exc is None:
        assert all(len(c.data) <= len(blob) for c in got)
    else:
        assert errno_of(exc) > 0


def test_gzip_member_without_name_terminator() -> None:
    from polyfs.codecs.pipeline import gzip_member_bounds

    member = b"\x1f\x8b\x08\x08" + b"\x00" * 6 + b"name-without-a-terminator" + b"\x01" * 8
    exc = polyfs_errno_only(lambda: gzip_member_bounds(member))
    assert exc is not None and errno_of(exc) > 0
