"""Tier 1: HDF5 types numpy lacks, kept exactly (types JSON, element values, datatype
messages, serialized region selections)."""
from __future__ import annotations

import numpy as np
import pytest

from polyfs.errors import InvalidInput, SchemaError
from polyfs.formats.hdf5.dtypes import disk_itemsize, encode_type
from polyfs.formats.hdf5.region import selection_bytes
from polyfs.model import types as T
from polyfs.model import values
from polyfs.model.schema import Shape

X87 = T.FloatBits(80, 0, 79, 64, 15, 0, 64, 16383, "none")


@pytest.mark.parametrize("t", [
    T.IntType(3, True), T.IntType(5, False, ">"), T.IntType(2, False, "<", 12), T.IntType(2, False, ">", 12, 2, (1, 0)),
    T.FloatType(16, "<", X87), T.FloatType(16), T.FloatType(2, ">"), T.TimeType(4), T.TimeType(8, ">"),
    T.TimeType(8, "<", 40), T.StringType(8, "ascii", "spacepad"), T.StringType(None, "utf8", "nullterm", ">"),
    T.ReferenceType("region"), T.EnumType(T.IntType(3, True), (("A", 1), ("B", -2))),
])
def test_types_round_trip_through_json(t):
    assert T.from_json(t.to_json()) == t
    assert T.resolved(T.from_json(t.to_json())).numpy() == t.numpy()


def test_numpy_forms():
    assert T.IntType(3, True).numpy() == np.dtype("V3") and not T.IntType(3, True).is_numeric
    assert T.IntType(2, False, "<", 12).numpy() == np.dtype("V2")
    assert T.FloatType(16, "<", X87).numpy() == np.dtype("V16") and T.FloatType(16).numpy() == np.dtype("V16")
    assert T.FloatType(8).numpy() == np.dtype("<f8") and T.FloatType(8).is_numeric
    assert T.is_raw(T.TimeType(4)) and not T.is_raw(T.IntType(4, True))
    with pytest.raises(SchemaError):
        T.from_json({"class": "H5T_FLOAT", "base": "H5T_IEEE_F80LE"})  # no IEEE layout to assume


def test_integer_values_follow_precision_offset_and_padding():
    t = T.IntType(2, True, ">", 12, 2, (1, 1))
    raw = values.int_to_raw(t, -5)
    word = int.from_bytes(raw, "big")
    assert word & 0b11 == 0b11 and word >> 14 == 0b11  # pad bits are ones
    assert values.raw_to_int(t, raw) == -5
    i24 = T.IntType(3, True)
    arr = values.to_numpy(i24, Shape("simple", (3,)), [-8388608, 0, 8388607])
    assert arr.tobytes() == bytes.fromhex("000080" "000000" "ffff7f")
    assert values.from_numpy(i24, arr) == [-8388608, 0, 8388607]
    ld = T.FloatType(16, "<", X87)
    raw16 = bytes(range(16))
    assert values.element_to_json(ld, np.frombuffer(raw16, "V16")[0]) == "AAECAwQFBgcICQoLDA0ODw=="
    assert values.element_from_json(ld, "AAECAwQFBgcICQoLDA0ODw==") == raw16
    with pytest.raises(InvalidInput):
        values.element_from_json(ld, 1.5)


def test_spacepad_values_keep_their_padding():
    t = T.StringType(6, "ascii", "spacepad")
    assert values.element_from_json(t, "ab") == b"ab    "
    assert values.element_to_json(t, b"ab    ") == "ab"


def test_datatype_messages():
    # the bytes libhdf5 encodes for these types (H5Tencode of h5py's types, 2-byte prefix dropped)
    assert encode_type(T.FloatType(16, "<", X87)).hex() == "11004f001000000000005000400f0040ff3f0000"
    assert encode_type(T.IntType(2, False, "<", 12)).hex() == "100000000200000000000c00"
    assert encode_type(T.IntType(3, True)).hex() == "100800000300000000001800"
    assert encode_type(T.TimeType(4)).hex() == "12000000040000002000"
    assert encode_type(T.StringType(8, "ascii", "spacepad")).hex() == "1302000008000000"
    assert encode_type(T.ReferenceType("region")).hex() == "170100000c000000"
    assert encode_type(T.FloatType(2)).hex() == "11200f0002000000000010000a05000a0f000000"
    assert disk_itemsize(T.ReferenceType("region")) == 12


def test_serialized_selections():
    hyper = {"id": "datasets/d-x", "class": "H5S_SEL_HYPERSLABS", "selection": [{"start": [1, 2], "opposite": [2, 4]}]}
    # as libhdf5 wrote it for ds.regionref[1:3, 2:5] (after the 8-byte header address)
    assert selection_bytes(hyper).hex() == ("02000000010000000000000018000000020000000100000001000000020000000200000004000000")
    assert selection_bytes({"class": "H5S_SEL_ALL"}).hex() == "03000000010000000000000000000000"
    pts = selection_bytes({"class": "H5S_SEL_POINTS", "selection": [[0, 1], [9, 9]]})
    assert np.frombuffer(pts, "<u4").tolist() == [1, 1, 0, 24, 2, 2, 0, 1, 9, 9]
    with pytest.raises(InvalidInput):
        selection_bytes({"class": "H5S_SEL_BOGUS"})
    assert values.region_to_json(values.region_from_json(hyper)) == hyper
