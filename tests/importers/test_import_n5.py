"""N5 import: values as tensorstore and z5py read them; full blocks copied (gzip
members spliced), truncated edge blocks and raw data re-encoded."""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
import z5py

import corpus
from .import_helpers import import_all
from polyfs.codecs.pipeline import gzip_member_bounds
from polyfs.codecs.registry import BLOSC, BZIP2, DEFLATE, ZSTD
from polyfs.model.catalog import Catalog

EXPECT = {  # dataset -> filter ids, copied?
    "gzip": ((DEFLATE,), True), "gzip_zlib": ((DEFLATE,), True), "zstd": ((ZSTD,), True),
    "blosc": ((BLOSC,), True), "bzip2": ((BZIP2,), True), "raw": ((DEFLATE,), False),
    "xz": ((DEFLATE,), False), "sparse": ((DEFLATE,), True),
}


@pytest.fixture(scope="module")
def imported(n5_sources, tmp_path_factory) -> Catalog:
    return import_all(n5_sources, tmp_path_factory.mktemp("store"))


def _payload(block: bytes) -> tuple[tuple[int, ...], bytes]:
    ndim = struct.unpack(">H", block[2:4])[0]
    dims = struct.unpack(f">{ndim}I", block[4:4 + 4 * ndim])
    return dims, block[4 + 4 * ndim:]


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_tensorstore_datasets(imported, n5_sources, name):
    container = n5_sources[0]
    ds = imported.load("/container.h5").resolve(f"/ts/{name}")
    want = corpus.n5_expected(container, f"ts/{name}")
    got = corpus.read_dataset(imported, ds)
    assert got.shape == want.shape and np.array_equal(got, want)
    ids, copied = EXPECT[name]
    assert imported.declared_pipeline(ds).ids == ids
    assert ds.type.order in (">", "|")  # N5 is big-endian
    meta = json.loads((container / "ts" / name / "attributes.json").read_text())
    assert ds.chunks == tuple(reversed(meta["blockSize"])) and ds.shape.dims == tuple(reversed(meta["dimensions"]))
    idx = imported.chunk_index(ds)
    blocks = {}
    for f in (container / "ts" / name).rglob("*"):
        if f.is_file() and f.name != "attributes.json":
            n5 = [int(p) for p in f.relative_to(container / "ts" / name).parts]
            blocks[tuple(reversed(n5))] = _payload(f.read_bytes())[1]
    stored = {idx.coords_of(int(i)): imported.store.get(idx.key(int(i))) for i in idx.linear}
    assert set(stored) == set(blocks)  # missing blocks stay missing
    if not copied:
        return
    for coords, payload in blocks.items():
        got_b = stored[coords]
        if name == "gzip" or name == "sparse":  # gzip member -> zlib stream, same deflate bytes
            start, end = gzip_member_bounds(payload)
            assert got_b[2:-4] == payload[start:end]
            assert imported.crc_table(ds).lookup(idx.linear_of(coords), int.from_bytes(got_b[-4:], "big")) == \
                int.from_bytes(payload[end:end + 4], "little")
        else:
            assert got_b == payload


def test_attributes(imported):
    m = imported.load("/container.h5")
    assert m.root.attributes["title"].value == "n5 corpus"
    assert m.root.attributes["pixel"].value == [0.5, 0.5]
    assert "n5" not in m.root.attributes
    assert m.resolve("/ts").attributes["made_by"].value == "tensorstore"
    sparse = m.resolve("/ts/sparse")
    assert sparse.attributes["resolution"].value == [4.0, 4.0, 40.0]
    assert set(sparse.attributes) == {"resolution", "unit"}  # dimensions, blockSize... are not attributes


@pytest.mark.parametrize("name", ["edges", "edges_raw"])
def test_truncated_edge_blocks(imported, n5_sources, name):
    src = n5_sources[1]
    ds = imported.load("/truncated.h5").resolve(f"/{name}")
    want = z5py.File(str(src), mode="r")[name][:]
    assert np.array_equal(corpus.read_dataset(imported, ds), want)
    idx = imported.chunk_index(ds)
    pipe = imported.pipeline(ds)
    nfull = 0
    for i in idx.linear:
        coords = idx.coords_of(int(i))
        data = imported.store.get(idx.key(int(i)))
        n5 = "/".join(str(c) for c in reversed(coords))
        dims, payload = _payload((src / name / n5).read_bytes())
        # every stored chunk is full size, padded with zeros
        block = np.frombuffer(pipe.decode(data, ds.chunk_nbytes), ds.type.numpy()).reshape(ds.chunks)
        region = tuple(slice(c * n, min((c + 1) * n, d)) for c, n, d in zip(coords, ds.chunks, ds.shape.dims))
        inner = tuple(slice(0, r.stop - r.start) for r in region)
        assert np.array_equal(block[inner], want[region])
        assert not np.any(np.delete(block.ravel(), np.ravel_multi_index(
            np.indices([r.stop - r.start for r in region]).reshape(len(region), -1), ds.chunks)))
        if tuple(reversed(dims)) == ds.chunks and name == "edges":
            start, end = gzip_member_bounds(payload)
            assert data[2:-4] == payload[start:end]  # full blocks are copied
            nfull += 1
        else:
            assert zlib.decompress(data)  # re-encoded as a zlib stream
    if name == "edges":
        assert nfull == 4  # 7x10 in 3x4 blocks: 2x2 full ones
