"""Tier 2 (no kernel): tensorstore's hex spelling of a float fill value, exploratory round 21
(tensorstore itself over a mount is in tests/mount/test_ts_explore21.py).

tensorstore spells a NaN fill value with a payload as its bit pattern (``"0x7fc00001"``; only
the canonical NaN is ``"NaN"``). The view served it back as ``"NaN"``: the writer's open
handle then failed its next ``resize`` (tensorstore re-reads ``zarr.json`` and refuses
"Updated zarr metadata ... is incompatible"), and a new reader filled absent chunks with
another NaN than the one written. The hex spelling is now kept as a view hint and served
back while it is still the stored fill.
"""
from __future__ import annotations

import errno

import numpy as np
import pytest
from test_write_semantics import fs  # noqa: F401 - fixture
from writeharness import zarr_array_meta, zarr_group_meta

from polyfs.check import check_store


def _meta(dtype: str, fill, shape=(4, 4)) -> dict:
    complex_ = np.dtype(dtype).kind == "c"  # the harness names real types only: same bytes codec
    meta = zarr_array_meta(shape, "f8" if complex_ else dtype, (2, 2), codecs=())
    meta["fill_value"] = fill
    if complex_:
        meta["data_type"] = "complex64"
    return meta


def _array(fs, meta: dict) -> None:  # noqa: F811 - the fixture's value
    """As zarr-python and tensorstore make one: the domain, its root group, the array's directory."""
    fs.mkdir("zarr/t.zarr")
    fs.write_json("zarr/t.zarr/zarr.json", zarr_group_meta({}))
    fs.mkdir("zarr/t.zarr/a")
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)


@pytest.mark.parametrize("dtype,fill", [("f4", "0x7fc00001"), ("f8", "0x7ff8000000000001"),
                                        ("f4", "0xffc00000"), ("c8", ["0x7fc00001", 1.5])])
def test_a_hex_nan_fill_is_served_as_written(fs, dtype, fill):  # noqa: F811
    _array(fs, _meta(dtype, fill))
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["fill_value"] == fill
    # tensorstore's resize: the same metadata with a new shape, re-read first
    fs.write_json("zarr/t.zarr/a/zarr.json", _meta(dtype, fill, (6, 5)))
    got = fs.read_json("zarr/t.zarr/a/zarr.json")
    assert got["fill_value"] == fill and got["shape"] == [6, 5]
    assert not check_store(fs.url, deep=True).problems


def test_a_plain_nan_rewrite_drops_the_hex_spelling(fs):  # noqa: F811
    """The hint is the last writer's spelling: a rewrite spelling the same NaN as "NaN"
    (zarr-python) is served as "NaN" from then on."""
    _array(fs, _meta("f4", "0x7fc00001"))
    fs.write_json("zarr/t.zarr/a/zarr.json", _meta("f4", "NaN"))
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["fill_value"] == "NaN"


def test_a_hex_fill_that_is_a_number_reads_back_as_that_number(fs):  # noqa: F811
    _array(fs, _meta("f4", "0x3f800000"))
    got = fs.read_json("zarr/t.zarr/a/zarr.json")["fill_value"]
    assert np.float32(np.frombuffer(bytes.fromhex(got[2:]), ">f4")[0] if isinstance(got, str) else got) == 1.0
    meta = _meta("f4", "0x40000000")  # another fill: refused, nothing changes
    before = fs.snapshot()
    assert fs.errno_of(fs.write_json, "zarr/t.zarr/a/zarr.json", meta) == errno.EINVAL
    assert fs.snapshot() == before
