"""Tier 2 (no kernel): what the Zarr and N5 views take from writers, exploratory round 7
(the tools themselves are in tests/mount/test_zarr_n5_explore7.py).

- A 0-d array (``shape: []``) written through ``zarr/`` was refused (``EINVAL``), though
  the view serves every scalar dataset as one: xarray's ``to_zarr`` of any dataset with a
  scalar variable or coordinate (a CF ``crs`` grid mapping, ``.sel()`` of one time) failed.
  It is now a scalar dataset; its one chunk file (``c``, or ``0`` under the ``v2`` key
  encoding) is its stored chunk.
- An array declared with ``numcodecs.bitround`` or ``numcodecs.quantize`` filters (xarray
  users' lossy compression of floats) was refused as a "transpose". Both decode to their
  input, so the chunks hold the values: they are stored as such and the filters shown back
  as declared (an append through xarray keeps rounding). Other array-to-array codecs are
  refused naming the codec.
- A block written into a scalar dataset through ``n5/`` (where it is a 1-element dataset:
  z5py ``d[0] = v``, tensorstore) was refused ("block of shape [1] does not fit chunk shape
  []"), and z5py, which ignores the error of ``close()``, reported success: it is now the
  scalar's chunk.
- A chunk, shard or block file of a dataset of HDF5 array elements (shown with trailing
  element dimensions) written through ``zarr/`` or ``n5/`` failed with an internal error
  (``EIO``, "chunk coordinates [0, 0] do not match grid [2]" logged as a failure), as did
  its ``unlink``. Writing is refused by name (``EOPNOTSUPP``, the store unchanged: write
  through ``hdf5/``); an ``unlink`` deletes that chunk.
"""
from __future__ import annotations

import errno
import io
import json

import h5py
import numcodecs
import numpy as np
import pytest
from test_write_semantics import fs, refused, zfs  # noqa: F401 - fixtures
from writeharness import ZarrLayout, decode_with, encode_with, n5_block, read_zarr_array, zarr_array_meta

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _scalar_meta(dtype: str, fill, codecs=("zstd",), enc: dict | None = None) -> dict:
    meta = zarr_array_meta((), np.dtype(dtype).newbyteorder("<"), (), codecs=codecs, fill=fill,
                           attributes={"units": "m"})
    if enc is not None:
        meta["chunk_key_encoding"] = enc
    return meta


@pytest.mark.parametrize("enc,name", [(None, "c"), ({"name": "default", "configuration": {"separator": "."}}, "c"),
                                      ({"name": "v2", "configuration": {"separator": "."}}, "0")],
                         ids=["default", "default-dot", "v2"])
def test_a_0d_array_is_a_scalar_dataset(zfs, enc, name):  # noqa: F811 - fixture
    zfs.mkdir("zarr/t.zarr/s")
    meta = _scalar_meta("float32", -1.0, enc=enc)
    zfs.write_json("zarr/t.zarr/s/zarr.json", meta)
    shown = zfs.read_json("zarr/t.zarr/s/zarr.json")
    assert shown["shape"] == [] and shown["data_type"] == "float32" and shown["attributes"] == {"units": "m"}
    assert zfs.ls("zarr/t.zarr/s") == ["zarr.json"]  # nothing written yet: the fill value
    chain = meta["codecs"]
    zfs.as_pid(4242).write_file(f"zarr/t.zarr/s/{name}", encode_with(chain, np.asarray(3.5, "<f4")))
    assert zfs.ls("zarr/t.zarr/s") == sorted([name, "zarr.json"])
    blob = zfs.read_file(f"zarr/t.zarr/s/{name}")
    shown_chain = zfs.read_json("zarr/t.zarr/s/zarr.json")["codecs"]
    endian = shown_chain[0].get("configuration", {}).get("endian", "little")
    assert decode_with(shown_chain, blob, np.dtype(">f4" if endian == "big" else "<f4"), ()).item() == 3.5
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        assert f["s"].shape == () and f["s"][()] == np.float32(3.5) and f["s"].attrs["units"] == "m"
    # rewritten with the fill value, zarr-python deletes the file: the fill value again
    zfs.unlink(f"zarr/t.zarr/s/{name}")
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        assert f["s"][()] == np.float32(-1.0)
    zfs.rm_r("zarr/t.zarr/s")
    assert "s" not in zfs.ls("zarr/t.zarr")


def test_0d_arrays_refused_where_no_view_shows_them(zfs, caplog):  # noqa: F811 - fixture
    """A sharded 0-d array (the view serves a scalar as its one chunk file) and a 0-d
    array's metadata rewritten with a shape are refused, the store unchanged."""
    zfs.mkdir("zarr/t.zarr/sh")
    sharded = zarr_array_meta((), "<i4", (), shards=(), codecs=())
    refused(zfs, (errno.EOPNOTSUPP, errno.EINVAL), zfs.write_json, "zarr/t.zarr/sh/zarr.json", sharded,
            caplog=caplog, names="0-d array cannot be sharded")
    zfs.mkdir("zarr/t.zarr/s")
    zfs.write_json("zarr/t.zarr/s/zarr.json", _scalar_meta("int32", 0))
    grown = _scalar_meta("int32", 0)
    grown["shape"], grown["chunk_grid"]["configuration"]["chunk_shape"] = [3], [3]
    refused(zfs, errno.EINVAL, zfs.write_json, "zarr/t.zarr/s/zarr.json", grown)


ROUNDING = [{"name": "numcodecs.bitround", "configuration": {"keepbits": 5}},
            {"name": "numcodecs.quantize", "configuration": {"digits": 2, "dtype": "<f8"}}]


@pytest.mark.parametrize("shards", [None, (4,)], ids=["chunks", "shards"])
def test_self_decoding_numcodecs_filters_are_stored_and_shown(zfs, shards):  # noqa: F811 - fixture
    plain = zarr_array_meta((8,), "<f8", (2,), shards=shards, codecs=("zstd",), fill=0.0)
    meta = json.loads(json.dumps(plain))
    chain = meta["codecs"][0]["configuration"]["codecs"] if shards else meta["codecs"]
    chain[:0] = ROUNDING
    zfs.mkdir("zarr/t.zarr/r")
    zfs.write_json("zarr/t.zarr/r/zarr.json", meta)
    shown = zfs.read_json("zarr/t.zarr/r/zarr.json")
    shown_chain = shown["codecs"][0]["configuration"]["codecs"] if shards else shown["codecs"]
    assert shown_chain[:2] == ROUNDING
    x = np.linspace(0, 1, 8)
    rounded = numcodecs.Quantize(2, "<f8").encode(np.asarray(numcodecs.BitRound(5).encode(x)).view("<f8"))
    assert not np.array_equal(rounded, x)
    lay = ZarrLayout(plain)  # the same files: the filters' decode is the identity (the harness encodes none)
    zfs.makedirs("zarr/t.zarr/r/c")
    for pos in range(lay.file_grid[0]):
        block = rounded[pos * lay.outer[0]:(pos + 1) * lay.outer[0]]
        zfs.write_file(f"zarr/t.zarr/r/{lay.key((pos,))}", lay.encode_file(block))
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        np.testing.assert_array_equal(f["r"][...], rounded)  # the values, as every reader decodes them
    _, back = read_zarr_array(zfs, "zarr/t.zarr/r")
    np.testing.assert_array_equal(back, rounded)


@pytest.mark.parametrize("codec,data_type", [
    ({"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}, "int32"),
    ({"name": "numcodecs.no_such_filter", "configuration": {}}, "float64"),
], ids=["bitround-int", "unknown"])  # delta, fixedscaleoffset, quantize+astype: test_zarr_eco_explore15*
def test_other_array_to_array_codecs_are_refused_by_name(zfs, caplog, codec, data_type):  # noqa: F811
    meta = zarr_array_meta((8,), np.dtype(data_type).newbyteorder("<"), (4,), codecs=())
    meta["codecs"].insert(0, codec)
    zfs.mkdir("zarr/t.zarr/x")
    refused(zfs, errno.EOPNOTSUPP, zfs.write_json, "zarr/t.zarr/x/zarr.json", meta, caplog=caplog,
            names=codec["name"])


def test_a_block_written_into_a_scalar_through_n5_is_its_chunk(zfs, tmp_path):  # noqa: F811 - fixture
    zfs.mkdir("zarr/t.zarr/s")
    zfs.write_json("zarr/t.zarr/s/zarr.json", _scalar_meta("float64", -1.0, codecs=()))
    local = tmp_path / "sc.h5"
    with h5py.File(local, "w") as f:
        f["x"] = np.int32(5)
    zfs.write_file("hdf5/sc.h5", local.read_bytes())
    attrs = zfs.read_json("n5/t.n5/s/attributes.json")
    assert attrs["dimensions"] == [1] and attrs["blockSize"] == [1]
    for path, value, dt in (("n5/t.n5/s/0", 2.5, ">f8"), ("n5/sc.n5/x/0", 9, ">i4")):
        zfs.as_pid(4343).write_file(path, n5_block(np.asarray([value], dt)))
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        assert f["s"].shape == () and f["s"][()] == 2.5
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/sc.h5")), "r") as f:
        assert f["x"][()] == 9


def _array_elements(fs, tmp_path) -> None:  # noqa: F811 - the fixture's value
    local = tmp_path / "ae.h5"
    with h5py.File(local, "w") as f:
        d = f.create_dataset("v", shape=(8,), dtype=np.dtype("(3,)i4"), chunks=(4,))
        d[...] = np.arange(24).reshape(8, 3)
    fs.write_file("hdf5/ae.h5", local.read_bytes())


def _values(fs) -> np.ndarray:  # noqa: F811 - the fixture's value
    with h5py.File(io.BytesIO(fs.read_file("hdf5/ae.h5")), "r") as f:
        return f["v"][...]


@pytest.mark.parametrize("view", ["zarr", "n5"])
def test_chunks_of_array_element_datasets_are_refused_and_unlinked(fs, tmp_path, caplog, view):  # noqa: F811
    _array_elements(fs, tmp_path)
    if view == "zarr":
        meta = fs.read_json("zarr/ae.zarr/v/zarr.json")
        assert meta["shape"] == [8, 3]
        files = sorted(f for f in fs.walk_files("zarr/ae.zarr/v") if not f.endswith("zarr.json"))
        assert files == ["c/0/0"]  # one shard of both chunks
        target = "zarr/ae.zarr/v/c/0/0"
        data = fs.read_file(target)
    else:
        assert fs.read_json("n5/ae.n5/v/attributes.json")["dimensions"] == [3, 8]
        target = "n5/ae.n5/v/0/1"  # element dimension first: the dataset's chunk 1
        data = n5_block(np.full((4, 3), 7, "i4"), fs.read_json("n5/ae.n5/v/attributes.json")["compression"])
    refused(fs, errno.EOPNOTSUPP, fs.as_pid(4444).write_file, target, data, caplog=caplog,
            names="array elements cannot be written")
    np.testing.assert_array_equal(_values(fs), np.arange(24).reshape(8, 3))
    fs.unlink(target)
    want = np.arange(24).reshape(8, 3)
    if view == "zarr":
        want[:] = 0  # the fill value
    else:
        want[4:] = 0
    np.testing.assert_array_equal(_values(fs), want)
