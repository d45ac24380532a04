"""``_FillValue`` written as JSON through the Zarr view, as the HDF5 view shows it (tier 2, no kernel).

netCDF-C requires a ``_FillValue`` of its variable's type; JSON types every number int64 or
float64. The HDF5 view shows a one-element numeric ``_FillValue`` of a numeric array with the
array's type when the value is one of it, and anything else as stored (ncfill.py).
"""
from __future__ import annotations

import io

import h5py
import numpy as np
import pytest
from test_write_semantics import fs, zfs  # noqa: F401 - fixtures


def _array(data_type: str, fill: object, attrs: dict) -> dict:
    return {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": attrs, "dimension_names": ["x"]}


CASES = {  # name: (data type, fill_value, _FillValue as written, the attribute's numpy type and value shown)
    "f4_b64": ("float32", -9.0, "AAAAAAAAIsA=", np.dtype("<f4"), -9.0),  # xarray's base64 float64
    "f4_nan": ("float32", "NaN", "AAAAAAAA+H8=", np.dtype("<f4"), np.nan),
    "f8": ("float64", 1.5, "AAAAAAAA+D8=", np.dtype("<f8"), 1.5),
    "i2": ("int16", -9999, -9999, np.dtype("<i2"), -9999),
    "u1": ("uint8", 255, 255, np.dtype("u1"), 255),
    "u1_out": ("uint8", 0, 300, np.dtype("<i8"), 300),  # not a uint8: shown as written
    "i4_frac": ("int32", 0, 1.5, np.dtype("<f8"), 1.5),  # not an int32 either
    "f4_list": ("float32", 0.0, [2.5], np.dtype("<f4"), [2.5]),  # a one-element list: its type, one element
    "f4_two": ("float32", 0.0, [1.0, 2.0], np.dtype("<f8"), [1.0, 2.0]),  # not one value: as written
    "f4_big": ("float32", 0.0, 1e300, np.dtype("<f8"), 1e300),  # beyond float32: as written
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fill_value_is_shown_with_its_arrays_type_when_it_is_one(zfs, name):  # noqa: F811 - fixture
    data_type, fill, written, want_type, want = CASES[name]
    zfs.mkdir(f"zarr/t.zarr/{name}")
    zfs.write_json(f"zarr/t.zarr/{name}/zarr.json", _array(data_type, fill, {"_FillValue": written}))
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        got = f[name].attrs["_FillValue"]
        assert np.asarray(got).dtype == want_type, (name, got)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want, want_type))
        np.testing.assert_array_equal(f[name].fillvalue, np.asarray(np.nan if fill == "NaN" else fill, f[name].dtype))
