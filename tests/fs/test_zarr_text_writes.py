"""Text arrays written through the Zarr view: ``string`` (vlen-utf8) and
``fixed_length_utf32`` (numpy ``<U<n>``), as zarr-python and xarray write them.

Tier 2 (no kernel). Chunks are built with numcodecs and numpy here; what the views
serve is decoded with numcodecs and read by h5py from the HDF5 view's bytes. A bad
chunk must be refused with its errno and leave the store byte-identical.
"""
from __future__ import annotations

import errno
import io

import h5py
import numcodecs
import numpy as np
import pytest
from test_write_semantics import changed_keys, refused, zfs  # noqa: F401 - fixtures
from test_write_semantics import fs  # noqa: F401
from writeharness import decode_shard, encode_shard

ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
VLEN = numcodecs.VLenUTF8()


def text_meta(shape, chunks, *, shards=None, utf32: int | None = None, codecs=(ZSTD,)) -> dict:
    """A zarr.json as zarr-python 3.1 writes ``dtype=str`` (vlen) or ``"<U<n>"`` arrays."""
    if utf32 is None:
        head, data_type = {"name": "vlen-utf8", "configuration": {}}, "string"
    else:
        head = {"name": "bytes", "configuration": {"endian": "little"}}
        data_type = {"name": "fixed_length_utf32", "configuration": {"length_bytes": 4 * utf32}}
    chain = [head, *codecs]
    outer = list(chunks)
    if shards is not None:
        outer = list(shards)
        chain = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(chunks), "codecs": chain,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}]
    return {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": outer}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": "", "codecs": chain, "attributes": {}, "dimension_names": ["x"]}


def put(fs, path: str, data: bytes) -> None:
    """A chunk file written as tools write one: its directories made first."""
    parent = path.rsplit("/", 1)[0]
    if not fs.exists(parent):
        fs.makedirs(parent)
    fs.write_file(path, data)


def zstd(b: bytes) -> bytes:
    return numcodecs.Zstd(level=3).encode(b)


def vlen_chunk(texts) -> bytes:
    return zstd(VLEN.encode(np.array(texts, dtype=object)))


def served_texts(fs, path: str, n_inner: int, chunk: int) -> dict[int, list[str]]:
    """Inner chunk -> its texts, decoded from the served shard with numcodecs."""
    out = {}
    for local, blob in decode_shard(fs.read_file(path), n_inner).items():
        out[local] = list(VLEN.decode(numcodecs.Zstd().decode(blob)))
        assert len(out[local]) == chunk
    return out


def hdf5_texts(fs, name: str) -> list[str]:
    with h5py.File(io.BytesIO(fs.read_file("hdf5/t.h5")), "r") as f:
        return [s for s in f[name].asstr()[()]]


def test_vlen_strings_round_trip_and_show_in_hdf5(zfs):
    fs = zfs
    fs.mkdir("zarr/t.zarr/s")
    fs.write_json("zarr/t.zarr/s/zarr.json", text_meta((6,), (2,), shards=(4,)))
    words = ["a", "", "é日本", "x" * 500, "z", "last"]
    put(fs, "zarr/t.zarr/s/c/0", encode_shard({0: vlen_chunk(words[0:2]), 1: vlen_chunk(words[2:4])}, 2))
    put(fs, "zarr/t.zarr/s/c/1", encode_shard({0: vlen_chunk(words[4:6])}, 2))
    meta = fs.read_json("zarr/t.zarr/s/zarr.json")
    assert meta["data_type"] == "string" and meta["fill_value"] == ""
    got = served_texts(fs, "zarr/t.zarr/s/c/0", 2, 2)
    assert got == {0: words[0:2], 1: words[2:4]}
    assert served_texts(fs, "zarr/t.zarr/s/c/1", 2, 2) == {0: words[4:6]}
    assert hdf5_texts(fs, "s") == words


def test_rewriting_one_inner_chunk_stores_only_it(zfs):
    fs = zfs
    fs.mkdir("zarr/t.zarr/s")
    fs.write_json("zarr/t.zarr/s/zarr.json", text_meta((4,), (2,), shards=(4,)))
    first = {0: vlen_chunk(["a", "b"]), 1: vlen_chunk(["c", "d"])}
    put(fs, "zarr/t.zarr/s/c/0", encode_shard(first, 2))
    before, _ = fs.state()
    served = decode_shard(fs.read_file("zarr/t.zarr/s/c/0"), 2)
    put(fs, "zarr/t.zarr/s/c/0", encode_shard({0: served[0], 1: vlen_chunk(["c", "NEW"])}, 2))
    after, _ = fs.state()
    changed = [k for k in changed_keys(before, after) if not k.endswith(".json")]
    assert len(changed) == 1, changed  # the unchanged chunk, served re-framed, is not stored again
    assert hdf5_texts(fs, "s") == ["a", "b", "c", "NEW"]


def test_fixed_length_utf32_is_stored_as_text_and_served_as_declared(zfs):
    fs = zfs
    fs.mkdir("zarr/t.zarr/u")
    meta = text_meta((5,), (2,), utf32=3)
    fs.write_json("zarr/t.zarr/u/zarr.json", meta)
    vals = np.array(["ab", "c", "déf", "", "日"], dtype="<U3")
    for i in range(3):
        put(fs, f"zarr/t.zarr/u/c/{i}", zstd(np.resize(vals[2 * i:2 * i + 2], 2).tobytes()))
    shown = fs.read_json("zarr/t.zarr/u/zarr.json")
    assert shown["data_type"] == meta["data_type"]
    assert shown["codecs"][0] == {"name": "bytes", "configuration": {"endian": "little"}}
    codecs = shown["codecs"][1:]
    got = []
    for i in range(3):
        raw = fs.read_file(f"zarr/t.zarr/u/c/{i}")
        for c in reversed(codecs):
            raw = numcodecs.Zstd().decode(raw) if c["name"] == "zstd" else raw
        got += list(np.frombuffer(raw, dtype="<U3"))
    assert got[:5] == list(vals)
    assert hdf5_texts(fs, "u") == list(vals)  # variable-length UTF-8 text, as netCDF/h5py expect


def _bad_vlen(kind: str) -> bytes:
    good = VLEN.encode(np.array(["ab", "c"], dtype=object))
    if kind == "not utf-8":
        return zstd(good[:-1] + b"\xff")
    if kind == "wrong count":
        return zstd(VLEN.encode(np.array(["ab", "c", "d"], dtype=object)))
    if kind == "trailing bytes":
        return zstd(good + b"xx")
    if kind == "truncated":
        return zstd(good[:-3])
    if kind == "not zstd":
        return b"garbage!" * 3
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["not utf-8", "wrong count", "trailing bytes", "truncated", "not zstd"])
def test_bad_vlen_chunk_is_refused_store_unchanged(zfs, caplog, kind):
    fs = zfs
    fs.mkdir("zarr/t.zarr/s")
    fs.write_json("zarr/t.zarr/s/zarr.json", text_meta((4,), (2,)))
    put(fs, "zarr/t.zarr/s/c/0", vlen_chunk(["keep", "me"]))
    refused(fs, errno.EINVAL, put, fs, "zarr/t.zarr/s/c/1", _bad_vlen(kind), caplog=caplog,
            names="zarr/t.zarr/s/c/1")
    assert hdf5_texts(fs, "s")[:2] == ["keep", "me"]


@pytest.mark.parametrize("kind", ["short", "no such code point", "surrogate"])
def test_bad_utf32_chunk_is_refused_store_unchanged(zfs, caplog, kind):
    fs = zfs
    fs.mkdir("zarr/t.zarr/u")
    fs.write_json("zarr/t.zarr/u/zarr.json", text_meta((4,), (2,), utf32=2))
    raw = np.array(["ab", "c"], dtype="<U2").tobytes()
    unit = {"no such code point": 0x110000, "surrogate": 0xD800}.get(kind, 0)
    bad = raw[:-4] if kind == "short" else raw[:4] + np.uint32(unit).tobytes() + raw[8:]
    fs.makedirs("zarr/t.zarr/u/c")
    refused(fs, errno.EINVAL, fs.write_file, "zarr/t.zarr/u/c/0", zstd(bad), caplog=caplog,
            names="zarr/t.zarr/u/c/0")


def test_text_metadata_over_a_numeric_array_is_refused(zfs):
    from writeharness import zarr_array_meta

    fs = zfs
    fs.mkdir("zarr/t.zarr/a")
    fs.write_json("zarr/t.zarr/a/zarr.json", zarr_array_meta((4,), "<i4", (2,)))
    refused(fs, errno.EINVAL, fs.write_json, "zarr/t.zarr/a/zarr.json", text_meta((4,), (2,)))


@pytest.mark.parametrize("bad", [
    {"data_type": "int32"},  # vlen-utf8 holds only text
    {"data_type": {"name": "fixed_length_utf32", "configuration": {"length_bytes": 6}}},  # not a multiple of 4
    {"data_type": "int32", "codecs": [{"name": "vlen-bytes", "configuration": {}}]},  # vlen-bytes holds bytes
])
def test_malformed_text_arrays_are_refused(zfs, bad):
    fs = zfs
    fs.mkdir("zarr/t.zarr/x")
    meta = {**text_meta((4,), (2,)), **bad}
    if bad.get("data_type", {}) and isinstance(bad["data_type"], dict):
        meta["codecs"] = [{"name": "bytes", "configuration": {"endian": "little"}}, ZSTD]
    refused(fs, {errno.EINVAL, errno.EOPNOTSUPP}, fs.write_json, "zarr/t.zarr/x/zarr.json", meta)
