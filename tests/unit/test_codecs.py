"""The translation table, pipelines, sniffing, gzip splicing, filter specs."""
from __future__ import annotations

import gzip
import zlib

import numcodecs
import numpy as np
import pytest

from polyfs.codecs import vlen
from polyfs.codecs.filterspec import parse_constant, parse_filter_spec, format_filter_spec
from polyfs.codecs.pipeline import (GZIP_EXTRA, Pipeline, effective, gzip_to_zlib, zlib_to_gzip)
from polyfs.codecs.registry import (BLOSC, BZIP2, DEFLATE, FLETCHER32, SHUFFLE, TABLE, ZSTD, Filter,
                                    filter_from_json, filter_to_json, spec_for)
from polyfs.codecs.sniff import sniff
from polyfs.errors import CodecError, InvalidInput, UnknownFilter
from polyfs.model import types as T

RAW = np.arange(4096, dtype=">u2").tobytes()


@pytest.mark.parametrize("filters", [
    (), (Filter(DEFLATE, (4,)),), (Filter(SHUFFLE, (2,)), Filter(DEFLATE, (6,))), (Filter(ZSTD, (3,)),),
    (Filter(BLOSC, (2, 2, 2, 0, 5, 1, 1)),), (Filter(BZIP2, (9,)),), (Filter(FLETCHER32),),
    (Filter(SHUFFLE, (2,)), Filter(ZSTD, (1,)), Filter(FLETCHER32)),
])
def test_pipeline_roundtrip(filters):
    p = Pipeline(filters, 2)
    enc = p.encode(RAW)
    assert p.decode(enc, len(RAW)) == RAW
    # and the JSON form HSDS stores parses back to the same filters
    back = Pipeline.from_json(p.to_json(), 2)
    assert back.decode(enc, len(RAW)) == RAW


def test_encodings_match_hdf5_filters():
    """Our deflate/zstd/fletcher32 output is what the HDF5 filters read (via numcodecs)."""
    assert Pipeline((Filter(DEFLATE, (4,)),), 2).encode(RAW) == zlib.compress(RAW, 4)
    assert numcodecs.Zstd().decode(Pipeline((Filter(ZSTD, (3,)),), 2).encode(RAW)) == RAW
    # a zstd frame written single-shot carries its content size (DESIGN.md section 2)
    frame = Pipeline((Filter(ZSTD, (3,)),), 2).encode(RAW)
    assert frame[:4] == b"\x28\xb5\x2f\xfd" and frame[4] & 0xC0  # frame content size flag set


def test_decode_checks_size_and_garbage():
    p = Pipeline((Filter(DEFLATE, (4,)),), 2)
    with pytest.raises(CodecError):
        p.decode(b"not zlib at all", len(RAW))
    with pytest.raises(CodecError):
        p.decode(zlib.compress(RAW[:100]), len(RAW))


@pytest.mark.parametrize("filters", [(Filter(ZSTD, (3,)),), (Filter(DEFLATE, (6,)),),
                                     (Filter(SHUFFLE, (2,)), Filter(DEFLATE, (6,)))])
def test_check_validates_like_decode(filters):
    """``check`` (validation of bytes stored as written) accepts exactly what ``decode`` does,
    and says why not: too few bytes, too many, a cut or corrupt stream."""
    p = Pipeline(filters, 2)
    enc = p.encode(RAW)
    assert bytes(p.check(enc, len(RAW))) == RAW
    other = p.encode(RAW[::-1])
    assert bytes(p.check(other, len(RAW))) == RAW[::-1]  # the scratch buffer is reused, rewritten
    for n in (len(RAW) - 2, len(RAW) + 2):
        with pytest.raises(CodecError, match="expected"):
            p.check(enc, n)
    for bad in (enc[:len(enc) // 2], enc[:8] + bytes(len(enc) - 8), b"garbage"):
        with pytest.raises(CodecError):
            p.check(bad, len(RAW))


def test_check_of_a_chunk_past_the_scratch_size_decodes_it_whole(monkeypatch):
    from polyfs.codecs import pipeline
    monkeypatch.setattr(pipeline, "SCRATCH_MAX", 1024)
    p = Pipeline((Filter(ZSTD, (3,)),), 2)
    enc = p.encode(RAW)
    assert bytes(p.check(enc, len(RAW))) == RAW
    with pytest.raises(CodecError, match="expected"):
        p.check(enc, len(RAW) + 2)


def test_unknown_filter_names_the_id():
    """The table (what polyfs encodes by itself, the --codec check) still refuses other ids."""
    with pytest.raises(UnknownFilter, match="39999"):
        spec_for(39999)
    with pytest.raises(UnknownFilter, match="H5Z_FILTER_MYSTERY"):
        filter_from_json({"class": "H5Z_FILTER_MYSTERY"}, 2)  # no id to carry


def test_filters_outside_the_table_are_carried_exactly():
    """An opaque filter keeps id, parameters, optional flag and name, as HSDS spells a user filter."""
    lzf = Pipeline.from_json([{"class": "H5Z_FILTER_LZF", "id": 32000, "name": "lzf"}], 2, where="dataset d-x")
    assert lzf.ids == (32000,) and lzf.opaque == lzf.filters and not lzf.filters[0].known
    f = Filter(39999, (7, 4294967295), True, "private; see nowhere")
    j = filter_to_json(f)
    assert j == {"class": "H5Z_FILTER_USER", "id": 39999, "name": "private; see nowhere",
                 "parameters": [7, 4294967295], "optional": True}
    back = filter_from_json(j, 4)
    assert (back, back.label, back.optional) == (f, f.label, True)
    assert filter_to_json(Filter(32004, (0,), False, "lz4")) == {"class": "H5Z_FILTER_USER", "id": 32004,
                                                                 "name": "lz4", "parameters": [0]}
    assert filter_from_json({"class": "H5Z_FILTER_SZIP", "parameters": [141, 32]}, 4) == Filter(4, (141, 32))
    assert f.spec.opaque and f.spec.zarr is None and f.spec.n5 is None and f.spec.tiff is None
    assert f.name == "private (39999)"
    # the chunk context opaque filters need survives the pipeline's transformations
    p = Pipeline((Filter(SHUFFLE, (4,)), f), 4).with_chunk(T.IntType(4, True, "<"), (8, 8))
    assert p.with_itemsize(4).chunk == p.chunk and p.opaque == (f,)
    assert effective(p, b"\x28\xb5\x2f\xfd" + bytes(12), 100) is p  # never "corrected" by a sniff


def test_table_rows_are_complete():
    for spec in TABLE:
        f = Filter(spec.id, (2, 2, 2, 0, 5, 1, 1) if spec.id == BLOSC else ((2,) if spec.id == SHUFFLE else (5,)))
        j = filter_to_json(f)
        assert j["id"] == spec.id and j["class"].startswith("H5Z_FILTER")
        assert filter_from_json(j, 2).id == spec.id
        if spec.zarr:
            assert "name" in spec.zarr(f, 2)
        if spec.n5:
            assert "type" in spec.n5(f)


def test_hsds_filter_json():
    # HSDS's spellings: classes without ids, no-op filters, blosc under other compressor names
    assert filter_from_json({"class": "H5Z_FILTER_DEFLATE", "id": 1, "name": "gzip", "level": 4}, 2) == Filter(DEFLATE, (4,))
    assert filter_from_json({"class": "H5Z_FILTER_SHUFFLE"}, 4) == Filter(SHUFFLE, (4,))
    assert filter_from_json({"class": "H5Z_FILTER_SCALEOFFSET", "id": 6}, 4) is None
    lz4 = filter_from_json({"class": "H5Z_FILTER_LZ4", "id": 32004, "name": "lz4"}, 4)
    assert lz4.id == BLOSC and lz4.blosc["cname"] == "lz4"


def test_sniff_kinds():
    assert sniff(zlib.compress(RAW)[:16]) == "zlib"
    assert sniff(gzip.compress(RAW)[:16]) == "gzip"
    assert sniff(numcodecs.Zstd().encode(RAW)[:16]) == "zstd"
    b = numcodecs.Blosc(cname="zlib").encode(RAW)
    assert sniff(b[:16], len(b)) == "blosc"
    assert sniff(numcodecs.BZ2().encode(RAW)[:16]) == "bzip2"
    assert sniff(RAW[:16]) is None


def test_effective_pipeline_recognises_hsds_blosc_frames():
    declared = Pipeline.from_json([{"class": "H5Z_FILTER_SHUFFLE", "id": 2, "name": "shuffle"},
                                   {"class": "H5Z_FILTER_DEFLATE", "id": 1, "name": "gzip", "level": 4}], 2)
    frame = numcodecs.Blosc(cname="zlib", clevel=4, shuffle=1).encode(RAW)
    eff = effective(declared, frame[:16], len(frame))
    assert eff.ids == (BLOSC,)
    assert eff.decode(frame, len(RAW)) == RAW
    # a zlib stream under the same declaration keeps the declaration
    assert effective(declared, zlib.compress(RAW)[:16], 10) is declared


def test_gzip_zlib_splicing_keeps_deflate_bytes():
    stream = zlib.compress(RAW, 6)
    member = zlib_to_gzip(stream, zlib.crc32(RAW), len(RAW))
    assert gzip.decompress(member) == RAW
    assert len(member) == len(stream) + GZIP_EXTRA
    assert member[10:-8] == stream[2:-4]  # the same deflate bytes, no recompression
    back, crc = gzip_to_zlib(gzip.compress(RAW, 9))
    assert zlib.decompress(back) == RAW and crc == zlib.crc32(RAW)
    with pytest.raises(CodecError):
        gzip_to_zlib(b"\x1f\x8b\x08" + b"\0" * 30)


def test_filter_specs():
    assert parse_filter_spec("32015,3") == [Filter(ZSTD, (3,))]
    assert parse_filter_spec("307,9|4,32,32", validate=False) == [Filter(BZIP2, (9,)), Filter(4, (32, 32))]
    with pytest.raises(UnknownFilter, match="4"):
        parse_filter_spec("307,9|4,32,32")
    assert parse_filter_spec("1,4|2") == [Filter(DEFLATE, (4,)), Filter(SHUFFLE, ())]
    assert format_filter_spec([Filter(ZSTD, (3,))]) == "32015,3"
    assert parse_constant("-17b") == [0xEF]
    assert parse_constant("27us") == [27]
    assert parse_constant("-1") == [0xFFFFFFFF]
    assert parse_constant("1.5f") == [0x3FC00000]
    assert parse_constant("18446744073709551615ul") == [0xFFFFFFFF, 0xFFFFFFFF]
    for bad in ("", "x,1", "1,abc", "1,5q"):
        with pytest.raises(InvalidInput):
            parse_filter_spec(bad)


def test_vlen_encoding_matches_hsds():
    t = T.StringType(None, "utf8", "nullterm")
    data = np.array(["a", "bb", "", "é"], dtype=object)
    enc = vlen.encode(t, data)
    assert enc[:5] == b"\x01\x00\x00\x00a"
    assert list(vlen.decode(t, enc, 4)) == list(data)
    with pytest.raises(CodecError):
        vlen.decode(t, enc[:-1], 4)
    comp = T.CompoundType((("i", T.IntType(4, True)), ("s", t)))
    arr = np.array([(1, "x"), (2, "yy")], dtype=[("i", "<i4"), ("s", object)])
    back = vlen.decode(comp, vlen.encode(comp, arr), 2)
    assert back["i"].tolist() == [1, 2] and back["s"].tolist() == ["x", "yy"]
