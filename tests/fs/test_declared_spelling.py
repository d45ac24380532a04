"""A writer's declared codec spelling is what the view serves back (tier 2: no kernel).

zarr-python and tensorstore keep the metadata they wrote in their open array handle and read
the files the view serves with it. The view once served its own spelling instead (crc32c
dropped from the inner chain, the shard index moved to the end and given a crc32c, N5
``useZlib`` served as a gzip member), so the writer's own handle failed on its next read.
N5 attributes named ``units``/``resolution``/``axes`` written in another than the per-axis
form vanished from ``attributes.json``. Bytes are decoded here with numpy, numcodecs and
crc32c only (writeharness), never with polyfs.
"""
from __future__ import annotations

import struct
import zlib

import crc32c
import numpy as np
import pytest
from writeharness import (
    FS,
    ZarrLayout,
    decode_with,
    encode_with,
    n5_attrs,
    n5_block,
    n5_parse_block,
    read_n5_array,
    read_zarr_array,
    zarr_array_meta,
)

MISSING = 2 ** 64 - 1


@pytest.fixture
def fs():
    f = FS()
    f.mkdir("zarr/t.zarr")
    yield f
    f.close()


def _write_chunks(fs: FS, path: str, meta: dict, want: np.ndarray) -> dict[str, bytes]:
    lay = ZarrLayout(meta)
    written = {}
    for i in range(lay.file_grid[0]):
        fs.makedirs(f"{path}/c/{i}")
        for j in range(lay.file_grid[1]):
            blob = lay.encode_chunk(want[i * lay.outer[0]:(i + 1) * lay.outer[0], j * lay.outer[1]:(j + 1) * lay.outer[1]])
            fs.write_file(f"{path}/c/{i}/{j}", blob)
            written[f"c/{i}/{j}"] = blob
    return written


@pytest.mark.parametrize("codecs", [("zstd", "crc32c"), ("gzip", "crc32c")])
def test_inner_crc32c_is_served_back_and_the_body_stays_the_stored_bytes(fs, codecs):
    meta = zarr_array_meta((32, 32), "<u2", (16, 16), codecs=codecs)
    fs.mkdir("zarr/t.zarr/a")
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    want = np.arange(32 * 32, dtype="<u2").reshape(32, 32)
    written = _write_chunks(fs, "zarr/t.zarr/a", meta, want)
    got_meta, got = read_zarr_array(fs, "zarr/t.zarr/a")  # decode_with checks every chunk's crc32c
    assert got_meta["codecs"] == meta["codecs"]
    np.testing.assert_array_equal(got, want)
    if codecs[0] == "zstd":  # stored as written: the served file is the written one, trailer and all
        assert fs.read_file("zarr/t.zarr/a/c/1/0") == written["c/1/0"]
    # a partial update by the same writer (its read-modify-write of one chunk file)
    lay = ZarrLayout(got_meta)
    blob = fs.read_file("zarr/t.zarr/a/c/0/1")
    vals = lay.decode_chunk(blob).copy()
    vals[:4, :4] = 9
    fs.write_file("zarr/t.zarr/a/c/0/1", lay.encode_chunk(vals))
    want[:4, 16:20] = 9
    np.testing.assert_array_equal(read_zarr_array(fs, "zarr/t.zarr/a")[1], want)


def test_a_chain_without_crc32c_is_served_without_it(fs):
    meta = zarr_array_meta((32, 32), "<u2", (16, 16), codecs=("zstd",))
    fs.mkdir("zarr/t.zarr/a")
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    _write_chunks(fs, "zarr/t.zarr/a", meta, np.ones((32, 32), "<u2"))
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["codecs"] == meta["codecs"]


def _sharded_meta(index_codecs: list[dict], location: str, inner=("gzip", "crc32c")) -> dict:
    meta = zarr_array_meta((64, 64), "<u2", (16, 16), shards=(32, 32), codecs=inner)
    cfg = meta["codecs"][0]["configuration"]
    cfg["index_codecs"], cfg["index_location"] = index_codecs, location
    return meta


def _encode_shard(meta: dict, block: np.ndarray) -> bytes:
    cfg = meta["codecs"][0]["configuration"]
    crc = any(c["name"] == "crc32c" for c in cfg["index_codecs"])
    n = 4
    index_len = 16 * n + (4 if crc else 0)
    start = cfg["index_location"] == "start"
    body, table = b"", np.full((n, 2), MISSING, dtype="<u8")
    for local in range(n):
        r, c = divmod(local, 2)
        chunk = encode_with(cfg["codecs"], block[r * 16:(r + 1) * 16, c * 16:(c + 1) * 16])
        table[local] = ((index_len if start else 0) + len(body), len(chunk))
        body += chunk
    index = table.tobytes() + (struct.pack("<I", crc32c.crc32c(table.tobytes())) if crc else b"")
    return index + body if start else body + index


def _decode_shard(meta: dict, blob: bytes) -> np.ndarray:
    cfg = meta["codecs"][0]["configuration"]
    crc = any(c["name"] == "crc32c" for c in cfg["index_codecs"])
    index_len = 16 * 4 + (4 if crc else 0)
    index = blob[:index_len] if cfg["index_location"] == "start" else blob[-index_len:]
    if crc:
        assert struct.unpack("<I", index[-4:])[0] == crc32c.crc32c(index[:-4]), "index crc32c"
        index = index[:-4]
    table = np.frombuffer(index, dtype="<u8").reshape(4, 2)
    out = np.zeros((32, 32), dtype="<u2")
    for local in range(4):
        off, nb = (int(x) for x in table[local])
        assert off != MISSING
        r, c = divmod(local, 2)
        out[r * 16:(r + 1) * 16, c * 16:(c + 1) * 16] = decode_with(cfg["codecs"], blob[off:off + nb],
                                                                     np.dtype("<u2"), (16, 16))
    return out


LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}


@pytest.mark.parametrize("index_codecs, location", [
    ([LITTLE, {"name": "crc32c"}], "start"),
    ([LITTLE], "start"),
    ([LITTLE], "end"),
])
def test_shard_index_spelling_is_served_back(fs, index_codecs, location):
    meta = _sharded_meta(index_codecs, location)
    fs.mkdir("zarr/t.zarr/s")
    fs.write_json("zarr/t.zarr/s/zarr.json", meta)
    want = np.arange(64 * 64, dtype="<u2").reshape(64, 64)
    for i in range(2):
        fs.makedirs(f"zarr/t.zarr/s/c/{i}")
        for j in range(2):
            fs.write_file(f"zarr/t.zarr/s/c/{i}/{j}", _encode_shard(meta, want[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32]))
    served = fs.read_json("zarr/t.zarr/s/zarr.json")
    assert served["codecs"] == meta["codecs"]
    for i in range(2):
        for j in range(2):
            blob = fs.read_file(f"zarr/t.zarr/s/c/{i}/{j}")
            np.testing.assert_array_equal(_decode_shard(served, blob), want[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32])
    # the same writer's read-modify-write of one shard
    block = _decode_shard(served, fs.read_file("zarr/t.zarr/s/c/1/1"))
    block[:8, :8] = 7
    fs.write_file("zarr/t.zarr/s/c/1/1", _encode_shard(meta, block))
    np.testing.assert_array_equal(_decode_shard(served, fs.read_file("zarr/t.zarr/s/c/1/1")), block)


def test_n5_use_zlib_is_served_back_as_the_stored_zlib_stream(fs):
    comp = {"type": "gzip", "level": 5, "useZlib": True}
    fs.mkdir("n5/z.n5")
    fs.mkdir("n5/z.n5/d")
    fs.write_json("n5/z.n5/d/attributes.json", n5_attrs((8, 8), ">i4", (4, 4), comp))
    want = np.arange(64, dtype=">i4").reshape(8, 8)
    blocks = {}
    for i in range(2):
        for j in range(2):
            fs.makedirs(f"n5/z.n5/d/{j}")
            blocks[(i, j)] = n5_block(want[i * 4:(i + 1) * 4, j * 4:(j + 1) * 4], comp)
            fs.write_file(f"n5/z.n5/d/{j}/{i}", blocks[(i, j)])
    attrs, got = read_n5_array(fs, "n5/z.n5/d")
    assert attrs["compression"] == comp
    np.testing.assert_array_equal(got, want)
    blob = fs.read_file("n5/z.n5/d/1/0")
    assert blob == blocks[(0, 1)]  # the zlib stream as written: zero-copy
    zlib.decompress(blob[12:])
    # a gzip member writer still gets gzip members
    fs.mkdir("n5/z.n5/g")
    fs.write_json("n5/z.n5/g/attributes.json", n5_attrs((4, 4), ">i4", (4, 4), "gzip"))
    fs.makedirs("n5/z.n5/g/0")
    fs.write_file("n5/z.n5/g/0/0", n5_block(want[:4, :4], "gzip"))
    attrs = fs.read_json("n5/z.n5/g/attributes.json")
    assert "useZlib" not in attrs["compression"]
    assert fs.read_file("n5/z.n5/g/0/0")[12:14] == b"\x1f\x8b"
    np.testing.assert_array_equal(n5_parse_block(fs.read_file("n5/z.n5/g/0/0"), attrs["compression"],
                                                 np.dtype(">i4")), want[:4, :4])


def test_n5_units_resolution_axes_read_back_as_written(fs):
    fs.mkdir("n5/u.n5")
    fs.mkdir("n5/u.n5/d")
    attrs = n5_attrs((8, 8), "u1", (4, 4), "raw")
    fs.write_json("n5/u.n5/d/attributes.json", attrs)
    attrs.update({"units": "nm", "resolution": 4.0, "axes": "xy", "note": "kept"})
    fs.write_json("n5/u.n5/d/attributes.json", attrs)
    back = fs.read_json("n5/u.n5/d/attributes.json")
    assert {k: back[k] for k in ("units", "resolution", "axes", "note")} == \
        {"units": "nm", "resolution": 4.0, "axes": "xy", "note": "kept"}
    # rewritten unchanged, they stay; removed, they go
    fs.write_json("n5/u.n5/d/attributes.json", back)
    assert fs.read_json("n5/u.n5/d/attributes.json") == back
    del back["units"]
    fs.write_json("n5/u.n5/d/attributes.json", back)
    assert "units" not in fs.read_json("n5/u.n5/d/attributes.json")
    assert fs.read_json("zarr/u.zarr/d/zarr.json")["attributes"]["axes"] == "xy"


def test_a_scalar_units_not_written_through_n5_stays_out_of_attributes_json(fs):
    # netCDF-style units="K" (written here through the Zarr view) is no N5 per-axis units:
    # tensorstore refuses such an attributes.json, so the N5 view leaves it out as before
    meta = zarr_array_meta((8, 8), ">i4", (4, 4), codecs=("gzip",), attributes={"units": "K"})
    fs.mkdir("zarr/t.zarr/k")
    fs.write_json("zarr/t.zarr/k/zarr.json", meta)
    assert "units" not in fs.read_json("n5/t.n5/k/attributes.json")
    assert fs.read_json("zarr/t.zarr/k/zarr.json")["attributes"] == {"units": "K"}


def test_a_rewrite_through_one_view_keeps_what_the_other_view_was_told(fs):
    """View hints are per view: an N5 attributes.json rewrite (useZlib) keeps the Zarr writer's
    crc32c and unsharded layout, a zarr.json rewrite keeps N5's zlib, and a plain-gzip N5
    rewrite clears N5's own."""
    meta = zarr_array_meta((8, 8), ">i4", (4, 4), codecs=("gzip", "crc32c"))
    fs.mkdir("zarr/t.zarr/a")
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    zlib_comp = {"type": "gzip", "level": 5, "useZlib": True}
    n5 = fs.read_json("n5/t.n5/a/attributes.json")
    fs.write_json("n5/t.n5/a/attributes.json", {**n5, "compression": zlib_comp})
    assert fs.read_json("n5/t.n5/a/attributes.json")["compression"] == zlib_comp
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["codecs"] == meta["codecs"]
    fs.write_json("zarr/t.zarr/a/zarr.json", {**meta, "attributes": {"x": 1}})
    assert fs.read_json("n5/t.n5/a/attributes.json")["compression"] == zlib_comp
    fs.write_json("n5/t.n5/a/attributes.json", {**n5, "compression": {"type": "gzip", "level": 5}})
    assert "useZlib" not in fs.read_json("n5/t.n5/a/attributes.json")["compression"]
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["codecs"] == meta["codecs"]  # unsharded, crc32c


# -- the hints a written metadata file leaves (pure) ---------------------------------------------
def test_only_spellings_other_than_the_views_own_are_kept():
    from polyfs.formats.n5 import ingest as n5ingest
    from polyfs.formats.zarr import ingest as zingest
    from polyfs.views.chunkserve import stored

    def zhints(meta: dict) -> dict:
        import json

        return zingest.parse(json.dumps(meta).encode(), "x").hints

    # besides the spelling, every written zarr.json records the shape it declared (cf.unlimited_shapes)
    assert zhints(zarr_array_meta((8, 8), "<u2", (4, 4), shards=(8, 8), codecs=("gzip",))) == \
        {"zarr_chunks_per_shard": [2, 2], "zarr_shape": [8, 8]}  # the view's own spelling: served as before
    assert zhints(zarr_array_meta((8, 8), "<u2", (4, 4), codecs=("zstd", "crc32c"))) == \
        {"zarr_sharded": False, "zarr_crc32c": True, "zarr_shape": [8, 8]}
    got = zhints(_sharded_meta([{"name": "bytes", "configuration": {"endian": "big"}}], "start"))
    assert got["zarr_shard_index"] == {"index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
                                       "index_location": "start"} and got["zarr_crc32c"] is True

    def nhints(attrs: dict) -> dict:
        import json

        return n5ingest.parse(json.dumps(attrs).encode(), "x").hints

    assert nhints(n5_attrs((8, 8), "u1", (4, 4), "gzip", units=["nm", "nm"], resolution=[1, 2])) == {}
    assert nhints(n5_attrs((8, 8), "u1", (4, 4), "zlib", units="nm")) == \
        {"n5_use_zlib": True, "n5_axis_attributes": ["units"]}
    # a checksummed recipe: 4 more bytes per chunk, known from the stored sizes alone
    assert list(stored().checksummed().item_lengths(np.array([10, 20]))) == [14, 24]
