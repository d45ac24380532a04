"""The write path's pure parts: written metadata, shards, N5 blocks, chunk conversion."""
from __future__ import annotations

import gzip
import json
import math
import zlib

import crc32c
import numpy as np
import pytest

from polyfs.codecs.pipeline import Pipeline
from polyfs.codecs.registry import DEFLATE, ZSTD, Filter
from polyfs.errors import CodecError, InvalidInput, UnsupportedType
from polyfs.model import types as T
from polyfs.model.schema import Dataset, Shape
from polyfs.formats.n5 import ingest as n5meta
from polyfs.formats.zarr import ingest as zarrmeta
from polyfs.formats.zarr.spec import KeyEncoding, ShardIndex
from polyfs.writes.chunkin import Incoming, to_stored
from polyfs.writes.protocol import ArrayWrite, file_members
from polyfs.writes.protocol import BytesSource


def _chunks(ing, blob: bytes, m: ArrayWrite, pos=(0, 0), grid=(3, 2)) -> dict:
    """Chunks of a written chunk file keyed by grid coordinates."""
    members = file_members(pos, m.per_file, grid)
    return {w.coords: (w.data, w.dims) for w in ing.chunks_in(BytesSource(blob), m, members, "x")}


def _array_meta(**over) -> bytes:
    meta = {"zarr_format": 3, "node_type": "array", "shape": [10, 6], "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 6]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "attributes": {"a": 1},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [4, 3], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                                  {"name": "gzip", "configuration": {"level": 1}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end"}}]}
    meta.update(over)
    return json.dumps(meta).encode()


def test_parse_sharded_array():
    m = zarrmeta.parse(_array_meta(), "x/zarr.json")
    assert isinstance(m, ArrayWrite)
    assert m.chunks == (4, 3) and m.per_file == (2, 2) and m.hints == {"zarr_chunks_per_shard": [2, 2], "zarr_shape": [10, 6]}
    assert m.layout == (KeyEncoding("default", "/"), ShardIndex(False, True, False), 0, None)  # no element dims, no transpose
    assert [f.id for f in m.filters] == [DEFLATE] and m.incoming.gzip_member
    ing = zarrmeta.ZarrIngester(None)  # type: ignore[arg-type]
    assert ing.file_position(["c", "1", "0"], m) == (1, 0) and ing.file_position(["c", "1"], m) is None


@pytest.mark.parametrize("bad, cls", [
    (b"{", InvalidInput), (json.dumps({"zarr_format": 2}).encode(), InvalidInput),
    (_array_meta(data_type="string"), UnsupportedType),
    (_array_meta(chunk_grid={"name": "rectilinear"}), InvalidInput),
    (_array_meta(shape=[10]), InvalidInput),
])
def test_bad_metadata_is_refused(bad, cls):
    with pytest.raises(cls):
        zarrmeta.parse(bad, "x/zarr.json")


def _shard(chunks: dict[int, bytes], n: int) -> bytes:
    body, index = b"", np.full((n, 2), 2 ** 64 - 1, dtype="<u8")
    for i, c in chunks.items():
        index[i] = (len(body), len(c))
        body += c
    raw = index.tobytes()
    return body + raw + crc32c.crc32c(raw).to_bytes(4, "little")


def test_split_shard_and_its_checksum():
    m = zarrmeta.parse(_array_meta(), "x")
    ing = zarrmeta.ZarrIngester(None)  # type: ignore[arg-type]
    blob = _shard({0: b"abc", 3: b"defg"}, 4)
    assert _chunks(ing, blob, m) == {(0, 0): (b"abc", None), (1, 1): (b"defg", None)}
    # a shard at the edge: inner chunks outside the grid are not the array's
    assert _chunks(ing, blob, m, pos=(1, 0)) == {(2, 0): (b"abc", None)}
    with pytest.raises(CodecError):
        _chunks(ing, blob[:-1] + bytes([blob[-1] ^ 1]), m)
    with pytest.raises(InvalidInput):
        _chunks(ing, blob[-20:], m)


def _dataset(filters) -> Dataset:
    t = T.from_numpy(np.dtype(">u2"))
    return Dataset("d-00000000-00000000-0000-000000-000000", "g-00000000-00000000-0000-000000-000000", t,
                   Shape("simple", (10, 6)), (4, 3), "H5D_CHUNKED", Pipeline(tuple(filters), 2).to_json())


def test_same_encoding_is_stored_as_written_and_others_transcoded():
    raw = np.arange(12, dtype=">u2").reshape(4, 3)
    stream = zlib.compress(raw.tobytes())
    ds = _dataset([Filter(DEFLATE, (6,))])
    stored = Pipeline((Filter(DEFLATE, (6,)),), 2)
    same = Incoming(np.dtype(">u2"), (Filter(DEFLATE, (1,)),))
    assert to_stored(ds, stored, same, stream) == stream
    member = gzip.compress(raw.tobytes())
    spliced = to_stored(ds, stored, Incoming(np.dtype(">u2"), (Filter(DEFLATE, (1,)),), gzip_member=True), member)
    assert zlib.decompress(spliced) == raw.tobytes()
    little = Incoming(np.dtype("<u2"), (Filter(ZSTD, (1,)),))
    import numcodecs

    out = to_stored(ds, stored, little, numcodecs.Zstd(1).encode(raw.astype("<u2").tobytes()))
    assert np.array_equal(np.frombuffer(zlib.decompress(out), ">u2").reshape(4, 3), raw)
    with pytest.raises(InvalidInput):
        to_stored(ds, stored, same, zlib.compress(b"\0" * 10))


def test_n5_block_header_checks_and_edge_padding():
    attrs = {"dimensions": [6, 10], "blockSize": [3, 4], "dataType": "uint16", "compression": {"type": "raw"}}
    spec = n5meta.parse(json.dumps(attrs).encode(), "a.json")
    assert isinstance(spec, ArrayWrite) and spec.shape == (10, 6) and spec.chunks == (4, 3)
    ing = n5meta.N5Ingester(None)  # type: ignore[arg-type]

    def block(dims_n5, payload, ndim=None):
        return (0).to_bytes(2, "big") + (ndim or len(dims_n5)).to_bytes(2, "big") + \
            b"".join(int(d).to_bytes(4, "big") for d in dims_n5) + payload

    ((payload, dims),) = _chunks(ing, block([2, 4], b"\1" * 16), spec).values()
    assert dims == (4, 2)
    ds = _dataset([])
    out = to_stored(ds, Pipeline((), 2), spec.incoming, payload, dims)
    arr = np.frombuffer(out, ">u2").reshape(4, 3)
    assert (arr[:, :2] == 0x0101).all() and (arr[:, 2] == 0).all()
    with pytest.raises(InvalidInput):
        _chunks(ing, block([4, 4], b""), spec)
    with pytest.raises(InvalidInput):
        _chunks(ing, block([3, 4, 1], b""), spec)
    with pytest.raises(InvalidInput):
        _chunks(ing, b"\0\0", spec)
    with pytest.raises(UnsupportedType):
        n5meta.parse(json.dumps({**attrs, "dataType": "object"}).encode(), "a.json")
    assert math.prod(spec.chunks) == 12
