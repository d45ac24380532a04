"""Zarr v3 import: values as zarr-python reads them; chunk bytes copied (gzip
members spliced into zlib streams, shard inner chunks taken from the index)."""
from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pytest

import corpus
from .import_helpers import import_all
from polyfs.codecs.pipeline import gzip_member_bounds
from polyfs.codecs.registry import BLOSC, DEFLATE, ZSTD
from polyfs.model.catalog import Catalog

# array path -> (filter ids, byte order, chunk shape, copied?)
EXPECT = {
    "/images/gzip": ((DEFLATE,), "<", (16, 16), True),
    "/images/zstd_be": ((ZSTD,), ">", (16, 16), True),
    "/images/blosc": ((BLOSC,), "<", (20, 20), True),
    "/images/zstd_crc32c": ((ZSTD,), "<", (16, 16), True),
    "/images/uncompressed": ((DEFLATE,), "<", (16, 16), False),  # decoded: its byte order kept
    "/images/transposed": ((DEFLATE,), "|", (4, 4), False),
    "/sharded/zstd": ((ZSTD,), "<", (8, 8), True),
    "/sharded/gzip_sparse": ((DEFLATE,), "<", (10, 10), True),
    "/missing": ((DEFLATE,), "|", (10, 10), True),
    "/bool": ((DEFLATE,), "|", (4,), True),
    "/complex": ((ZSTD,), "<", (2,), True),
    "/strings": ((DEFLATE,), "|", (3,), False),
    "/scalar": ((), "<", (), False),
}


@pytest.fixture(scope="module")
def imported(zarr_source, tmp_path_factory) -> Catalog:
    return import_all([zarr_source], tmp_path_factory.mktemp("store"))


def test_values_as_zarr_python_reads_them(imported, zarr_source):
    want = corpus.zarr_expected(zarr_source)
    assert set(want) == set(EXPECT)
    snap = corpus.domain_snapshot(imported, "/hier.h5")
    for path, arr in want.items():
        corpus.assert_value_equal(corpus._norm(arr, None), snap["objects"][path]["value"], path)


@pytest.mark.parametrize("path", sorted(EXPECT))
def test_encoding_and_fill(imported, zarr_source, path):
    ds = imported.load("/hier.h5").resolve(path)
    ids, order, chunks, _ = EXPECT[path]
    assert imported.declared_pipeline(ds).ids == ids
    assert ds.type.order == order
    assert ds.chunks == chunks
    meta = json.loads((zarr_source / path.strip("/") / "zarr.json").read_text())
    fill = meta["fill_value"]
    if path == "/sharded/gzip_sparse":
        assert np.isnan(ds.fill_value)
    elif path in ("/images/gzip", "/missing"):
        assert ds.fill_value == fill
    elif path == "/strings":
        assert ds.fill_value is None  # "" is the VL default


def _source_chunks(zarr_source, path) -> dict[tuple[int, ...], bytes]:
    """Inner chunk bytes of the source as stored (shards split with their index)."""
    meta = json.loads((zarr_source / path.strip("/") / "zarr.json").read_text())
    outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
    codec = meta["codecs"][0]
    out = {}
    base = zarr_source / path.strip("/") / "c"
    for f in base.rglob("*"):
        if not f.is_file():
            continue
        coords = tuple(int(p) for p in f.relative_to(base).parts)
        blob = f.read_bytes()
        if codec["name"] != "sharding_indexed":
            out[coords] = blob
            continue
        inner = codec["configuration"]["chunk_shape"]
        per = [o // i for o, i in zip(outer, inner)]
        n = math.prod(per)
        index = np.frombuffer(blob[-(16 * n + 4):-4], "<u8").reshape(n, 2)
        for local, (off, nb) in enumerate(index):
            if off == 2 ** 64 - 1:
                continue
            lc = np.unravel_index(local, per)
            out[tuple(int(c) * p + int(x) for c, p, x in zip(coords, per, lc))] = blob[int(off):int(off + nb)]
    return out


@pytest.mark.parametrize("path", sorted(p for p, e in EXPECT.items() if e[3]))
def test_chunks_copied_without_recompression(imported, zarr_source, path):
    ds = imported.load("/hier.h5").resolve(path)
    idx = imported.chunk_index(ds)
    source = _source_chunks(zarr_source, path)
    stored = {idx.coords_of(int(i)): imported.store.get(idx.key(int(i))) for i in idx.linear}
    grid = ds.grid
    source = {c: b for c, b in source.items() if all(x < g for x, g in zip(c, grid))}
    assert set(stored) == set(source)  # missing chunks (and empty inner chunks) stay missing
    crc_table = imported.crc_table(ds)
    for coords, src in source.items():
        got = stored[coords]
        if EXPECT[path][0] == (DEFLATE,):  # a zlib stream around the member's own deflate bytes
            start, end = gzip_member_bounds(src)
            assert got[2:-4] == src[start:end]
            crc = int.from_bytes(src[end:end + 4], "little")
            assert zlib.crc32(zlib.decompress(got)) == crc
            linear = idx.linear_of(coords)
            assert crc_table.lookup(linear, int.from_bytes(got[-4:], "big")) == crc
        elif path == "/images/zstd_crc32c":
            assert got == src[:-4]  # the crc32c checksum, verified and dropped
        else:
            assert got == src


def test_attributes_become_hdf5_attributes(imported):
    m = imported.load("/hier.h5")
    a = {n: (x.type.to_json(), x.shape.to_json(), x.value) for n, x in m.root.attributes.items()}
    assert a["title"][2] == "zarr corpus" and a["title"][0]["class"] == "H5T_STRING"
    assert a["version"][:2] == ({"class": "H5T_INTEGER", "base": "H5T_STD_I64LE"}, {"class": "H5S_SCALAR"})
    assert a["scale"][0]["base"] == "H5T_IEEE_F64LE"
    assert a["flags"][0]["class"] == "H5T_ENUM" and a["flags"][2] == [True, False]
    assert a["ints"][1] == {"class": "H5S_SIMPLE", "dims": [3]}
    assert a["floats"][2] == [1.0, 2.5] and a["floats"][0]["base"] == "H5T_IEEE_F64LE"
    assert a["big"][0]["base"] == "H5T_STD_U64LE"
    assert json.loads(a["nested"][2]) == {"a": [1, 2]} and json.loads(a["mixed"][2]) == [1, "x"]
    assert a["none"][2] == "null" and a["empty"][2] == "[]"
    assert m.resolve("/images/gzip").attributes["units"].value == "counts"
    assert m.resolve("/images").attributes["kind"].value == "images"


def test_codec_none_copies_uncompressed_chunks(zarr_source, tmp_path):
    cat = import_all([zarr_source], tmp_path / "s", codec="none")
    ds = cat.load("/hier.h5").resolve("/images/uncompressed")
    assert cat.declared_pipeline(ds).is_identity and ds.type.order == "<"
    source = _source_chunks(zarr_source, "/images/uncompressed")
    idx = cat.chunk_index(ds)
    assert {idx.coords_of(int(i)): cat.store.get(idx.key(int(i))) for i in idx.linear} == source
    assert cat.declared_pipeline(cat.load("/hier.h5").resolve("/images/gzip")).ids == (DEFLATE,)
