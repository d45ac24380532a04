"""Tier 2 (no kernel): what the Zarr and N5 views take from writers, exploratory round 8
(the tools themselves are in tests/mount/test_zarr_n5_explore8.py).

- A text chunk under ``gzip`` is served as two gzip members (its element count, then the
  stored stream spliced as it is), which every gzip reader takes as one stream. Written
  back, it was refused ("gzip chunk holds more than one member"): ``cp -r`` of such an
  array lost every chunk (``cp`` copies ``c/`` before ``zarr.json``, so the refusal was only
  logged), and zarr-python rewriting one string of a sharded array (it sends the shard's
  other inner chunks back as it read them) failed with ``EINVAL``. Text chunks are now
  gunzipped member by member (each checked) before they are stored.
- zarr-python's ``structured`` data type (numpy records; what the view itself shows for
  an HDF5 compound) and ``raw_bytes`` (numpy ``V<n>``, HDF5 opaque) were refused
  (``EOPNOTSUPP``): ``cp -r`` of the Zarr view of any HDF5 file with a compound dataset
  failed there, and so did zarr-python's record arrays. They are stored as HDF5 compounds
  (packed, little-endian, as zarr-python writes them) and opaque types, with their
  base64 fill values.
  ``polyfs import`` of such a Zarr array dropped its fill value (unwritten records read as
  zeros).
- A ``transpose`` codec (zarr-python's ``filters=[TransposeCodec(order)]``, tensorstore's
  ``"order": "F"``) was refused (``EOPNOTSUPP``), and so was ``cp -r`` of such an array.
  Its chunks are now stored in C order (every other view reads them so) and served back
  transposed, compressed as stored, under the chain its writer declared: its open handle
  reads and updates them, tensorstore and fresh readers read the same values.
- Nested sharding was refused as ``EINVAL`` ("the codec chain has no bytes codec"): it is
  valid Zarr the view cannot hold, so ``EOPNOTSUPP`` naming it.
- An N5 group whose ``attributes.json`` carries a ``dataType`` of its own (BigDataViewer's
  ``setupN`` groups: ``dataType`` and ``downsamplingFactors``) was taken for a dataset and
  refused for lacking ``dimensions``/``blockSize`` (z5py ignores the error: the attribute
  was silently lost; a ``cp -r`` of a BDV container failed). As n5-java reads it, a node is
  a dataset only with both ``dimensions`` and ``dataType``.
"""
from __future__ import annotations

import base64
import errno
import gzip
import io

import h5py
import numcodecs
import numpy as np
import pytest
from test_write_semantics import fs, refused, zfs  # noqa: F401 - fixtures
from writeharness import encode_shard, n5_attrs, n5_block, zarr_array_meta

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore:The data type")

TEXTS = ["alpha", "béta", "", "γ" * 40, "e", "ff", "g", "hhh"]


def _text_meta(codecs: list[dict], shards: int | None = None) -> dict:
    chain = [{"name": "vlen-utf8", "configuration": {}}] + codecs
    meta = {"zarr_format": 3, "node_type": "array", "shape": [8], "data_type": "string",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [shards or 4]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": "", "codecs": chain, "attributes": {}}
    if shards:
        meta["codecs"] = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": chain,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}]
    return meta


def _vlen_gzip(texts: list[str]) -> bytes:
    return gzip.compress(bytes(numcodecs.VLenUTF8().encode(np.array(texts, dtype=object))), mtime=0)


def _texts(fs, domain: str, name: str) -> list[str]:  # noqa: F811 - the fixture's value
    with h5py.File(io.BytesIO(fs.read_file(f"hdf5/{domain}.h5")), "r") as f:
        return [x.decode() if isinstance(x, bytes) else x for x in f[name][...]]


@pytest.mark.parametrize("shards", [None, 4], ids=["chunks", "shards"])
def test_text_chunks_the_view_serves_under_gzip_are_taken_back(zfs, shards):  # noqa: F811 - fixture
    gz = [{"name": "gzip", "configuration": {"level": 5}}]
    meta = _text_meta(gz, shards)
    zfs.mkdir("zarr/t.zarr/s")
    zfs.write_json("zarr/t.zarr/s/zarr.json", meta)
    zfs.makedirs("zarr/t.zarr/s/c")
    for f in range(2):
        part = TEXTS[4 * f:4 * f + 4]
        blob = _vlen_gzip(part) if not shards else encode_shard({0: _vlen_gzip(part[:2]), 1: _vlen_gzip(part[2:])}, 2)
        zfs.write_file(f"zarr/t.zarr/s/c/{f}", blob)
    assert _texts(zfs, "t", "s") == TEXTS
    served = {f: zfs.read_file(f"zarr/t.zarr/s/c/{f}") for f in range(2)}
    # the view's chunk: more than one gzip member (each reader takes them as one stream)
    probe = served[0] if not shards else served[0][:len(served[0]) - 16 - 4]
    assert probe.count(b"\x1f\x8b\x08") >= 2
    # cp -r: every directory, the chunk files (listed first), then the metadata
    zfs.mkdir("zarr/copy.zarr")
    zfs.makedirs("zarr/copy.zarr/s/c")
    for f, blob in served.items():
        zfs.as_pid(5151).write_file(f"zarr/copy.zarr/s/c/{f}", blob)
    zfs.as_pid(5151).write_json("zarr/copy.zarr/s/zarr.json", zfs.read_json("zarr/t.zarr/s/zarr.json"))
    assert _texts(zfs, "copy", "s") == TEXTS
    # rewritten in place as read (zarr-python sends back the inner chunks it did not change)
    zfs.as_pid(5252).write_file("zarr/t.zarr/s/c/1", served[1])
    assert _texts(zfs, "t", "s") == TEXTS


def test_text_chunk_with_a_corrupt_second_member_is_refused(zfs, caplog):  # noqa: F811 - fixture
    zfs.mkdir("zarr/t.zarr/s")
    zfs.write_json("zarr/t.zarr/s/zarr.json", _text_meta([{"name": "gzip", "configuration": {"level": 5}}]))
    zfs.makedirs("zarr/t.zarr/s/c")
    zfs.write_file("zarr/t.zarr/s/c/0", _vlen_gzip(TEXTS[:4]))
    blob = bytearray(zfs.read_file("zarr/t.zarr/s/c/0"))
    blob[-6] ^= 0xFF  # the second member's CRC32
    refused(zfs, errno.EINVAL, zfs.as_pid(5353).write_file, "zarr/t.zarr/s/c/0", bytes(blob), caplog=caplog,
            names="zarr/t.zarr/s/c/0")
    refused(zfs, errno.EINVAL, zfs.as_pid(5353).write_file, "zarr/t.zarr/s/c/0", bytes(blob[:-3]))
    assert _texts(zfs, "t", "s")[:4] == TEXTS[:4]


RECORD = np.dtype([("i", "<i4"), ("f", "<f8"), ("s", "S3"), ("b", "|b1")])
STRUCTURED = {"name": "structured", "configuration": {"fields": [
    ["i", "int32"], ["f", "float64"], ["s", {"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}],
    ["b", "bool"]]}}


def _meta(data_type, fill, codecs: list[dict]) -> dict:
    return {"zarr_format": 3, "node_type": "array", "shape": [6], "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": [{"name": "bytes"}] + codecs, "attributes": {"k": 1}}


@pytest.mark.parametrize("codecs", [[], [{"name": "zstd", "configuration": {"level": 0, "checksum": False}}]],
                         ids=["raw", "zstd"])
def test_structured_and_raw_bytes_arrays_are_written(zfs, codecs):  # noqa: F811 - fixture
    rec_fill = np.array((-1, 0.5, b"zz", True), RECORD)
    zfs.mkdir("zarr/t.zarr/r")
    zfs.write_json("zarr/t.zarr/r/zarr.json",
                   _meta(STRUCTURED, base64.b64encode(rec_fill.tobytes()).decode(), codecs))
    zfs.mkdir("zarr/t.zarr/v")
    zfs.write_json("zarr/t.zarr/v/zarr.json", _meta({"name": "raw_bytes", "configuration": {"length_bytes": 2}},
                                                    base64.b64encode(b"\x01\x02").decode(), codecs))
    rec = np.zeros(3, RECORD)
    rec["i"], rec["f"], rec["s"], rec["b"] = [1, 2, 3], [1.5, 2.5, 3.5], [b"a", b"bc", b"def"], [True, False, True]
    raw = np.array([b"\xaa\xbb", b"\x00\x01", b"\xff\x00"], "V2")
    zfs.makedirs("zarr/t.zarr/r/c")
    zfs.makedirs("zarr/t.zarr/v/c")
    enc = (lambda b: bytes(numcodecs.Zstd(level=0).encode(b))) if codecs else (lambda b: b)
    zfs.write_file("zarr/t.zarr/r/c/0", enc(rec.tobytes()))
    zfs.write_file("zarr/t.zarr/v/c/1", enc(raw.tobytes()))
    shown = zfs.read_json("zarr/t.zarr/r/zarr.json")
    assert shown["data_type"] == STRUCTURED and shown["attributes"] == {"k": 1}
    assert base64.b64decode(shown["fill_value"]) == rec_fill.tobytes()
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        r, v = f["r"], f["v"]
        assert r.dtype.names == ("i", "f", "s", "b") and v.dtype.kind == "V" and v.dtype.itemsize == 2
        got = r[...]
        np.testing.assert_array_equal(got["i"], [1, 2, 3, -1, -1, -1])
        np.testing.assert_array_equal(got["f"], [1.5, 2.5, 3.5, 0.5, 0.5, 0.5])
        assert list(got["s"]) == [b"a", b"bc", b"def", b"zz", b"zz", b"zz"]
        assert [bytes(x) for x in v[...]] == [b"\x01\x02"] * 3 + [b"\xaa\xbb", b"\x00\x01", b"\xff\x00"]
    # the view's own metadata, written back unchanged (a cp -r), is the same array
    zfs.write_json("zarr/t.zarr/r/zarr.json", shown)
    assert zfs.read_json("zarr/t.zarr/r/zarr.json") == shown


def test_structured_fields_numpy_has_no_stored_form_are_refused(zfs, caplog):  # noqa: F811 - fixture
    bad = {"name": "structured", "configuration": {"fields": [["t", {"name": "numpy.datetime64", "configuration": {
        "unit": "s", "scale_factor": 1}}]]}}
    zfs.mkdir("zarr/t.zarr/x")
    refused(zfs, errno.EOPNOTSUPP, zfs.write_json, "zarr/t.zarr/x/zarr.json", _meta(bad, "AAAAAAAAAAA=", []),
            caplog=caplog, names="cannot be written through the view")
    wrong_fill = _meta(STRUCTURED, base64.b64encode(b"\x01" * 5).decode(), [])
    refused(zfs, errno.EINVAL, zfs.write_json, "zarr/t.zarr/x/zarr.json", wrong_fill)


def test_nested_sharding_is_refused_by_name(zfs, caplog):  # noqa: F811 - fixture
    inner = zarr_array_meta((8, 8), "<u2", (2, 2), shards=(4, 4), codecs=())["codecs"]
    meta = zarr_array_meta((8, 8), "<u2", (4, 4), shards=(8, 8), codecs=())
    meta["codecs"][0]["configuration"]["codecs"] = inner
    zfs.mkdir("zarr/t.zarr/n")
    refused(zfs, errno.EOPNOTSUPP, zfs.write_json, "zarr/t.zarr/n/zarr.json", meta, caplog=caplog,
            names="nested sharding")


def test_an_n5_group_with_a_datatype_of_its_own_is_a_group(fs):  # noqa: F811 - fixture
    """BigDataViewer's N5 layout: ``setup0/attributes.json`` holds ``dataType`` and
    ``downsamplingFactors``; its datasets are ``setup0/timepoint0/s<level>``."""
    fs.mkdir("n5/bdv.n5")
    fs.makedirs("n5/bdv.n5/setup0/timepoint0/s0")
    setup = {"downsamplingFactors": [[1, 1, 1], [2, 2, 1]], "dataType": "uint16"}
    fs.write_json("n5/bdv.n5/setup0/attributes.json", setup)
    fs.write_json("n5/bdv.n5/setup0/timepoint0/s0/attributes.json",
                  n5_attrs((4, 6), "uint16", (4, 6), "gzip", downsamplingFactors=[1, 1]))
    fs.makedirs("n5/bdv.n5/setup0/timepoint0/s0/0")
    fs.write_file("n5/bdv.n5/setup0/timepoint0/s0/0/0", n5_block(np.arange(24, dtype="u2").reshape(4, 6), "gzip"))
    assert fs.read_json("n5/bdv.n5/setup0/attributes.json") == setup
    assert fs.read_json("zarr/bdv.zarr/setup0/zarr.json")["attributes"] == setup
    setup["multiScale"] = True  # z5py's attrs[...] = ...: a rewrite of the whole file
    fs.write_json("n5/bdv.n5/setup0/attributes.json", setup)
    assert fs.read_json("n5/bdv.n5/setup0/attributes.json") == setup
    with h5py.File(io.BytesIO(fs.read_file("hdf5/bdv.h5")), "r") as f:
        assert f["setup0"].attrs["dataType"] == "uint16"
        np.testing.assert_array_equal(f["setup0/timepoint0/s0"][...], np.arange(24).reshape(4, 6))
    # a group's dimensions alone are an attribute too; both together are a dataset's (and
    # one lacking blockSize is refused, the store unchanged)
    fs.mkdir("n5/bdv.n5/g")
    fs.write_json("n5/bdv.n5/g/attributes.json", {"dimensions": ["x", "y"]})
    assert fs.read_json("n5/bdv.n5/g/attributes.json") == {"dimensions": ["x", "y"]}
    fs.mkdir("n5/bdv.n5/h")
    refused(fs, errno.EINVAL, fs.write_json, "n5/bdv.n5/h/attributes.json", {"dimensions": [4], "dataType": "int8"})


def test_an_imported_group_attribute_named_datatype_shows_in_n5(fs, tmp_path):  # noqa: F811 - fixture
    local = tmp_path / "g.h5"
    with h5py.File(local, "w") as f:
        f.create_group("a").attrs["dataType"] = "uint8"
        both = f.create_group("b")
        both.attrs["dataType"], both.attrs["dimensions"], both.attrs["other"] = "uint8", [3], 1
    fs.write_file("hdf5/g.h5", local.read_bytes())
    assert fs.read_json("n5/g.n5/a/attributes.json") == {"dataType": "uint8"}
    assert fs.read_json("n5/g.n5/b/attributes.json") == {"other": 1}  # would read as a dataset: hidden
    fs.write_json("n5/g.n5/b/attributes.json", {"other": 2})  # the hidden ones are kept
    with h5py.File(io.BytesIO(fs.read_file("hdf5/g.h5")), "r") as f:
        assert f["b"].attrs["other"] == 2 and f["b"].attrs["dataType"] == "uint8"


def test_import_keeps_the_fill_value_of_structured_and_raw_bytes_arrays(fs, tmp_path):  # noqa: F811
    """``polyfs import`` of a Zarr hierarchy: a record array's fill value (base64 of the
    element) was dropped, so its unwritten elements read as zeros."""
    zarr = pytest.importorskip("zarr")
    from polyfs.importers import import_source

    src = tmp_path / "rec.zarr"
    g = zarr.open_group(str(src), mode="w")
    t = np.dtype([("x", "<i2"), ("y", "S3"), ("z", "<f4")])
    fill = np.array((9, b"q", 1.5), t)
    a = g.create_array("r", shape=(5,), chunks=(2,), dtype=t, fill_value=fill[()])
    a[0] = (1, b"abc", 2.0)
    b = g.create_array("v", shape=(3,), chunks=(3,), dtype="V2", fill_value=np.void(b"\x05\x06"))
    b[1] = np.void(b"\x01\x02")
    import_source(str(src), fs.url, domain="/rec.h5")
    with h5py.File(io.BytesIO(fs.read_file("hdf5/rec.h5")), "r") as f:
        np.testing.assert_array_equal(f["r"][...], np.array([(1, b"abc", 2.0)] + [fill[()]] * 4, t))
        assert [bytes(x) for x in f["v"][...]] == [b"\x05\x06", b"\x01\x02", b"\x05\x06"]
    assert _served_fill(fs, "zarr/rec.zarr/r") == fill.tobytes()


def _served_fill(view, path: str) -> bytes:
    """The element bytes of an array's ``fill_value`` as the Zarr view shows it."""
    return base64.b64decode(view.read_json(f"{path}/zarr.json")["fill_value"])


def _transposed_meta(order, codecs: list[dict], shards=None) -> dict:
    meta = zarr_array_meta((8, 6, 4), "<i4", (4, 3, 2), shards=shards, codecs=(), fill=-1)
    chain = meta["codecs"][0]["configuration"]["codecs"] if shards else meta["codecs"]
    chain[:0] = [{"name": "transpose", "configuration": {"order": order}}]
    chain.extend(codecs)
    return meta


def _encode_transposed(block: np.ndarray, order, gz: bool) -> bytes:
    raw = np.ascontiguousarray(block.transpose(order), dtype="<i4").tobytes()
    return gzip.compress(raw, mtime=0) if gz else raw


@pytest.mark.parametrize("order,gz,shards", [([2, 0, 1], False, None), ([1, 2, 0], True, None),
                                             ("F", True, (8, 6, 4))], ids=["plain", "gzip", "F-sharded"])
def test_transposed_chunks_are_stored_in_c_order_and_served_transposed(zfs, order, gz, shards):  # noqa: F811
    perm = (2, 1, 0) if order == "F" else tuple(order)
    codecs = [{"name": "gzip", "configuration": {"level": 5}}] if gz else []
    zfs.mkdir("zarr/t.zarr/a")
    zfs.write_json("zarr/t.zarr/a/zarr.json", _transposed_meta(order, codecs, shards))
    data = np.arange(8 * 6 * 4, dtype="<i4").reshape(8, 6, 4)
    zfs.makedirs("zarr/t.zarr/a/c")
    blocks = {}
    for pos in np.ndindex(2, 2, 2):
        sl = tuple(slice(p * c, (p + 1) * c) for p, c in zip(pos, (4, 3, 2)))
        blocks[pos] = _encode_transposed(data[sl], perm, gz)
    if shards:
        local = {int(np.ravel_multi_index(pos, (2, 2, 2))): b for pos, b in blocks.items()}
        zfs.makedirs("zarr/t.zarr/a/c/0/0")
        zfs.write_file("zarr/t.zarr/a/c/0/0/0", encode_shard(local, 8))
    else:
        for pos, b in blocks.items():
            zfs.makedirs(f"zarr/t.zarr/a/c/{pos[0]}/{pos[1]}")
            zfs.write_file(f"zarr/t.zarr/a/c/{pos[0]}/{pos[1]}/{pos[2]}", b)
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        np.testing.assert_array_equal(f["a"][...], data)  # C order: what every other view reads
    shown = zfs.read_json("zarr/t.zarr/a/zarr.json")
    chain = shown["codecs"][0]["configuration"]["codecs"] if shards else shown["codecs"]
    assert chain[0] == {"name": "transpose", "configuration": {"order": list(perm)}}
    assert [c["name"] for c in chain[1:]] == ["bytes"] + (["gzip"] if gz else [])
    if not shards:  # each file is the chunk as its writer encoded it (the same values)
        for pos, b in blocks.items():
            served = zfs.read_file(f"zarr/t.zarr/a/c/{pos[0]}/{pos[1]}/{pos[2]}")
            assert (gzip.decompress(served) if gz else served) == (gzip.decompress(b) if gz else b)
    else:
        served = zfs.read_file("zarr/t.zarr/a/c/0/0/0")
        zfs.as_pid(6161).write_file("zarr/t.zarr/a/c/0/0/0", served)  # written back as read: the same values
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        np.testing.assert_array_equal(f["a"][...], data)


@pytest.mark.parametrize("case", ["bad order", "with bitround", "text"])
def test_transposes_the_view_cannot_hold_are_refused(zfs, caplog, case):  # noqa: F811 - fixture
    meta = _transposed_meta([0, 0, 1], [])
    codes = errno.EINVAL
    if case == "with bitround":
        meta = zarr_array_meta((8, 2), "<f4", (4, 2), codecs=())
        meta["codecs"][:0] = [{"name": "numcodecs.bitround", "configuration": {"keepbits": 3}},
                              {"name": "transpose", "configuration": {"order": [1, 0]}}]
        codes = errno.EOPNOTSUPP
    elif case == "text":
        meta = _text_meta([])
        meta["shape"], meta["chunk_grid"]["configuration"]["chunk_shape"] = [8, 2], [4, 2]
        meta["codecs"][:0] = [{"name": "transpose", "configuration": {"order": [1, 0]}}]
        codes = errno.EOPNOTSUPP
    zfs.mkdir("zarr/t.zarr/x")
    refused(zfs, codes, zfs.write_json, "zarr/t.zarr/x/zarr.json", meta, caplog=caplog, names="zarr/t.zarr/x/zarr.json")


def test_a_transposed_chunk_that_does_not_decode_is_refused(zfs):  # noqa: F811 - fixture
    zfs.mkdir("zarr/t.zarr/a")
    zfs.write_json("zarr/t.zarr/a/zarr.json", _transposed_meta([2, 1, 0], [{"name": "gzip", "configuration": {}}]))
    zfs.makedirs("zarr/t.zarr/a/c/0/0")
    refused(zfs, errno.EINVAL, zfs.write_file, "zarr/t.zarr/a/c/0/0/0", gzip.compress(b"\0" * 10))
    refused(zfs, errno.EINVAL, zfs.write_file, "zarr/t.zarr/a/c/0/0/0", b"not gzip at all")
