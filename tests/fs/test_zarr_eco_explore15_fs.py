"""Tier 2 (no kernel): arrays zarr-python writes under ``numcodecs.zarr3`` codecs the store has
no filter for, exploratory round 15 (real tools over a mount are in
tests/mount/test_zarr_eco_explore15.py).

``compressors=numcodecs.zarr3.LZ4()`` (or ``LZMA``, ``CRC32``, ``Adler32``) and filters
``Delta``, ``FixedScaleOffset``, ``PackBits`` were refused with ``ENOTSUP`` at the array's
``zarr.json``. Their chunks are now decoded with numcodecs when written, stored as values
(under the chain's table compressors, else deflate) and served back by ``zarr/`` under the
declared chain; a chunk that does not decode is refused with ``EINVAL``, the store unchanged.
"""
from __future__ import annotations

import errno
import io

import h5py
import numpy as np
import pytest
from test_write_semantics import fs, refused, zfs  # noqa: F401 - fixtures

from polyfs.check import check_store

numcodecs = pytest.importorskip("numcodecs")
pytest.importorskip("hdf5plugin")  # h5py reads the zstd chunks of hdf5/ through it


def _meta(codecs: list[dict], dtype: str = "int32", shape=(8,), chunks=(4,)) -> dict:
    return {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": codecs, "attributes": {}, "dimension_names": ["x"]}


BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
CASES = {
    "lz4": ([BYTES, {"name": "numcodecs.lz4", "configuration": {}}],
            lambda a: numcodecs.LZ4().encode(a.tobytes())),
    "lzma_crc32": ([BYTES, {"name": "numcodecs.lzma", "configuration": {}}, {"name": "numcodecs.crc32", "configuration": {}}],
                   lambda a: numcodecs.CRC32().encode(numcodecs.LZMA().encode(a.tobytes()))),
    "delta_zstd": ([{"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}, BYTES,
                    {"name": "zstd", "configuration": {"level": 0, "checksum": False}}],
                   lambda a: numcodecs.Zstd(level=0).encode(numcodecs.Delta("<i4").encode(a).tobytes())),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_numcodecs_chains_are_stored_as_values_and_served_as_declared(zfs, case):  # noqa: F811
    codecs, encode = CASES[case]
    zfs.mkdir("zarr/t.zarr/a")
    zfs.write_json("zarr/t.zarr/a/zarr.json", _meta(codecs))
    data = np.arange(8, dtype="<i4") * 7 - 3
    zfs.makedirs("zarr/t.zarr/a/c")
    for i in range(2):
        zfs.write_file(f"zarr/t.zarr/a/c/{i}", bytes(encode(data[4 * i:4 * i + 4])))
    shown = zfs.read_json("zarr/t.zarr/a/zarr.json")
    assert shown["codecs"] == codecs and shown["dimension_names"] == ["x"]
    for i in range(2):  # what the writer wrote decodes from what it reads back
        assert zfs.read_file(f"zarr/t.zarr/a/c/{i}") == bytes(encode(data[4 * i:4 * i + 4]))
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        np.testing.assert_array_equal(f["a"][...], data)
    assert not check_store(zfs.url, deep=True).problems


def test_packbits_and_fixedscaleoffset_round_trip(zfs):  # noqa: F811
    zfs.mkdir("zarr/t.zarr/b")
    pb = [{"name": "numcodecs.packbits", "configuration": {}}, {"name": "bytes"},
          {"name": "numcodecs.adler32", "configuration": {}}]
    zfs.write_json("zarr/t.zarr/b/zarr.json", _meta(pb, "bool", (10,), (10,)) | {"fill_value": False})
    flags = np.arange(10) % 3 == 0
    zfs.makedirs("zarr/t.zarr/b/c")
    zfs.write_file("zarr/t.zarr/b/c/0", bytes(numcodecs.Adler32().encode(numcodecs.PackBits().encode(flags))))
    fso = numcodecs.FixedScaleOffset(offset=1, scale=100, dtype="<f8", astype="<i2")
    zfs.mkdir("zarr/t.zarr/f")
    zfs.write_json("zarr/t.zarr/f/zarr.json", _meta([{"name": "numcodecs.fixedscaleoffset", "configuration":
                                                      {k: v for k, v in fso.get_config().items() if k != "id"}},
                                                     BYTES], "float64"))
    vals = np.linspace(0, 2, 8)
    zfs.makedirs("zarr/t.zarr/f/c")
    for i in range(2):
        zfs.write_file(f"zarr/t.zarr/f/c/{i}", fso.encode(vals[4 * i:4 * i + 4]).tobytes())
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        np.testing.assert_array_equal(f["b"][...], flags)
        np.testing.assert_allclose(f["f"][...], np.round(vals, 2))
    assert np.array_equal(numcodecs.PackBits().decode(numcodecs.Adler32().decode(zfs.read_file("zarr/t.zarr/b/c/0"))),
                          flags)
    assert not check_store(zfs.url, deep=True).problems


def test_a_chunk_that_does_not_decode_is_refused(zfs, caplog):  # noqa: F811
    zfs.mkdir("zarr/t.zarr/a")
    zfs.write_json("zarr/t.zarr/a/zarr.json", _meta(CASES["lz4"][0]))
    zfs.makedirs("zarr/t.zarr/a/c")
    refused(zfs, errno.EINVAL, zfs.write_file, "zarr/t.zarr/a/c/0", b"\x10\x00\x00\x00garbage", caplog=caplog,
            names="numcodecs.lz4")
    short = numcodecs.LZ4().encode(np.arange(3, dtype="<i4").tobytes())  # decodes, but to 3 elements of 4
    refused(zfs, errno.EINVAL, zfs.write_file, "zarr/t.zarr/a/c/1", short)


def test_an_unknown_numcodecs_codec_is_still_refused(zfs, caplog):  # noqa: F811
    zfs.mkdir("zarr/t.zarr/a")
    meta = _meta([BYTES, {"name": "numcodecs.nonesuch", "configuration": {}}])
    refused(zfs, (errno.ENOTSUP, errno.EOPNOTSUPP), zfs.write_json, "zarr/t.zarr/a/zarr.json", meta,
            caplog=caplog, names="numcodecs.nonesuch")


def test_a_chain_that_cannot_code_the_elements_is_refused_at_its_metadata(zfs, caplog):  # noqa: F811
    """bitround of integers: numcodecs refuses to encode them; refused by name at zarr.json."""
    zfs.mkdir("zarr/t.zarr/a")
    meta = _meta([{"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}, BYTES,
                  {"name": "numcodecs.lz4", "configuration": {}}])
    refused(zfs, (errno.ENOTSUP, errno.EOPNOTSUPP), zfs.write_json, "zarr/t.zarr/a/zarr.json", meta,
            caplog=caplog, names="numcodecs.bitround")
