"""Review of round 15's changes (numcodecs chains, CF nodata in tiff/, NCO scratch names):
each test pins a bug a user would hit, kernel-free through the write harness."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fs"))
from writeharness import FS, zarr_group_meta  # noqa: E402

numcodecs = pytest.importorskip("numcodecs")
tifffile = pytest.importorskip("tifffile")
h5py = pytest.importorskip("h5py")

BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


@pytest.fixture
def fs():
    f = FS()
    f.mkdir("zarr/t.zarr")
    f.write_json("zarr/t.zarr/zarr.json", zarr_group_meta({}))
    yield f
    f.close()


def _meta(codecs: list[dict], dtype: str = "int32", shape=(8,), chunks=(4,)) -> dict:
    return {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": codecs, "attributes": {}, "dimension_names": ["x"]}


def test_numcodecs_chain_with_a_crc32c_trailer_is_taken(fs):
    """``compressors=[numcodecs.zarr3.LZ4(), Crc32cCodec()]``: ingest.py strips the crc32c and
    builds an Incoming with the trailer, but ``needs_numcodecs`` is asked about the chain *with*
    the crc32c (not ``numcodecs.*``), says no, and the array's zarr.json is refused ENOTSUP."""
    import struct

    crc32c = pytest.importorskip("crc32c")  # what polyfs codes it with

    codecs = [BYTES, {"name": "numcodecs.lz4", "configuration": {}}, {"name": "crc32c"}]
    fs.mkdir("zarr/t.zarr/a")
    fs.write_json("zarr/t.zarr/a/zarr.json", _meta(codecs))  # was: OSError ENOTSUP
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["codecs"] == codecs
    data = np.arange(8, dtype="<i4") * 5
    fs.makedirs("zarr/t.zarr/a/c")
    for i in range(2):
        body = bytes(numcodecs.LZ4().encode(data[4 * i:4 * i + 4].tobytes()))
        fs.write_file(f"zarr/t.zarr/a/c/{i}", body + struct.pack("<I", crc32c.crc32c(body)))
    got = fs.read_file("zarr/t.zarr/a/c/1")  # the writer's handle reads its own chain back
    assert struct.unpack("<I", got[-4:])[0] == crc32c.crc32c(got[:-4])
    np.testing.assert_array_equal(np.frombuffer(numcodecs.LZ4().decode(got[:-4]), "<i4"), data[4:])
    with h5py.File(io.BytesIO(fs.read_file("hdf5/t.h5")), "r") as f:
        np.testing.assert_array_equal(f["a"][...], data)


def _h5_with_fill(dtype: str, fill: int) -> bytes:
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        d = f.create_dataset("v", data=np.arange(12, dtype=dtype).reshape(3, 4))
        d.attrs["_FillValue"] = np.array([fill], dtype=dtype)
    return buf.getvalue()


@pytest.mark.parametrize("dtype, fill", [("i8", -9223372036854775806),   # NC_FILL_INT64
                                         ("u8", 18446744073709551614)])  # NC_FILL_UINT64
def test_64_bit_integer_fill_value_is_served_exactly_as_gdal_nodata(fs, dtype, fill):
    """``_nodata_text`` goes through ``float()``: netCDF's default 64-bit fills lose their last
    digits (int64's became -9223372036854775808, a different value: GDAL masks the wrong pixels;
    uint64's rounds past the type's range and no nodata is served at all)."""
    fs.write_file("hdf5/big.h5", _h5_with_fill(dtype, fill))
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/big/v.tif"))) as t:
        tag = t.pages[0].tags.get("GDAL_NODATA")
        assert tag is not None, "no GDAL_NODATA served"
        assert int(tag.value.strip("\0")) == fill
