"""HSDS and polyfs on one store, round 13: fill values as the HDF5 REST VOL spells them.

The HDF5 REST VOL connector (HDF5 C programs writing through HSDS) sends every user
fill value as base64 of one stored element with ``"fillValue_encoding": "base64"``,
and HSDS keeps it so in ``.dataset.json``; reading a dataset back, the connector
accepts only that spelling. polyfs must read the value those bytes hold (not the
base64 text: a number parse error made the array's zarr.json and attributes.json
``EIO`` and its HDF5 fill value vanish; a string fill showed the base64 text) and,
rewriting the object (an attribute edit through a view), keep the spelling.
"""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from polyfs.errors import SchemaError
from polyfs.model import keys
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Dataset
from polyfs.store import open_store
from support import deep_check
from test_hsds_interop import hsds  # noqa: F401 - the HSDS 1.0.2 server fixture

DID = "d-b03b24ef-69f244b6-56e5-25125a-89ba79"
CMP = np.dtype([("a", "<i4"), ("b", "<f8")])
# name: (HSDS type JSON, dims, chunk dims or None, one element's stored bytes, the fill h5py reads)
REST_VOL_FILLS = {
    "f32": ("H5T_IEEE_F32LE", [6], [3], np.float32(-9.5).tobytes(), -9.5),
    "i16be": ("H5T_STD_I16BE", [4, 4], [2, 2], np.array(-3, ">i2").tobytes(), -3),
    "cmp": ({"class": "H5T_COMPOUND", "fields": [{"name": "a", "type": "H5T_STD_I32LE"},
                                                {"name": "b", "type": "H5T_IEEE_F64LE"}]},
            [3], None, np.array((7, 1.25), CMP).tobytes(), (7, 1.25)),
    "fixed_str": ({"class": "H5T_STRING", "charSet": "H5T_CSET_ASCII", "strPad": "H5T_STR_NULLPAD",
                   "length": 4}, [2], None, b"ab\0\0", b"ab"),
    "array3": ({"class": "H5T_ARRAY", "dims": [3], "base": "H5T_STD_U16LE"}, [2], [2],
               np.array([1, 2, 3], "<u2").tobytes(), [1, 2, 3]),
}


def _body(type_json, dims, fill: bytes, chunks=None) -> dict:
    cpl = {"fillValue": base64.b64encode(fill).decode(), "fillValue_encoding": "base64"}
    if chunks:
        cpl["layout"] = {"class": "H5D_CHUNKED", "dims": chunks}
    return {"id": DID, "type": type_json, "shape": {"class": "H5S_SIMPLE", "dims": dims},
            "creationProperties": cpl}


@pytest.mark.parametrize("name", sorted(REST_VOL_FILLS))
def test_base64_fill_value_reads_as_its_value_and_writes_back_as_base64(name):
    """Kernel-free: the model's fill value is the element the bytes hold; ``to_json``
    gives back the very bytes, spelled base64 as before."""
    type_json, dims, chunks, raw, want = REST_VOL_FILLS[name]
    ds = Dataset.from_json(_body(type_json, dims, raw, chunks))
    got = ds.fill_value
    if isinstance(want, bytes):
        assert got == want.decode()
    else:
        assert got == (list(want) if isinstance(want, tuple) else want)
    out = ds.to_json()["creationProperties"]
    assert out["fillValue_encoding"] == "base64" and base64.b64decode(out["fillValue"]) == raw
    again = Dataset.from_json({**ds.to_json()})
    assert again.fill_value == got
    ds.fill_value = None  # a fill dropped: no encoding left naming a missing value
    assert "fillValue_encoding" not in ds.to_json()["creationProperties"]


def test_bad_base64_fill_values_are_schema_errors():
    with pytest.raises(SchemaError, match="not base64"):
        Dataset.from_json(_body("H5T_STD_I32LE", [4], b"")
                          | {"creationProperties": {"fillValue": "**", "fillValue_encoding": "base64"}})
    with pytest.raises(SchemaError, match="holds 2 bytes"):
        Dataset.from_json(_body("H5T_STD_I32LE", [4], b"\1\2"))
    with pytest.raises(SchemaError, match="must be a string"):
        Dataset.from_json(_body("H5T_STD_I32LE", [4], b"")
                          | {"creationProperties": {"fillValue": 5, "fillValue_encoding": "base64"}})
    # HSDS's "None" encoding is the plain JSON value
    plain = Dataset.from_json(_body("H5T_STD_I32LE", [4], b"")
                              | {"creationProperties": {"fillValue": 5, "fillValue_encoding": "None"}})
    assert plain.fill_value == 5 and plain.to_json()["creationProperties"]["fillValue"] == 5


def test_rest_vol_fill_values_through_hsds_and_every_view(hsds, mount_store):  # noqa: F811
    """Datasets made as the REST VOL makes them (POST /datasets with a base64 fill value)
    read with that fill in hdf5/ (h5py), zarr/ (zarr-python) and n5/ (z5py); an attribute
    written through zarr/ rewrites the dataset object with the base64 spelling kept, which
    HSDS still serves as the same fill."""
    import h5py
    import h5pyd
    import z5py
    import zarr
    from h5pyd.httpconn import HttpConn

    domain = "/home/admin/restvol.h5"
    with h5pyd.File(domain, "w", **hsds.kw):
        pass
    conn = HttpConn(domain, mode="a", **hsds.kw)
    conn.open()
    root = conn.GET("/").json()["root"]
    ids = {}
    for name, (type_json, dims, chunks, raw, _) in REST_VOL_FILLS.items():
        body = _body(type_json, dims, raw, chunks)
        body = {"type": type_json, "shape": dims, "creationProperties": body["creationProperties"],
                "link": {"id": root, "name": name}}
        rsp = conn.POST("/datasets", body=body)
        assert rsp.status_code == 201, (name, rsp.status_code, hsds.log_tail()[-500:])
        ids[name] = rsp.json()["id"]
    rsp = conn.PUT(f"/datasets/{ids['f32']}/value", body={"start": [0], "stop": [2], "value": [1.0, 2.0]})
    assert rsp.status_code == 200, rsp.text
    store_dir = str(hsds.store_dir)
    deadline_keys = hsds.wait_for_chunks(root, 1)
    assert deadline_keys, hsds.log_tail()

    cat = Catalog(open_store(store_dir))
    model = cat.load(domain)
    assert model.resolve("/f32").fill_value == -9.5 and model.resolve("/cmp").fill_value == [7, 1.25]

    m = mount_store(store_dir)
    with h5py.File(m.path / "hdf5/home/admin/restvol.h5", "r") as f:
        for name, (_, dims, _, _, want) in REST_VOL_FILLS.items():
            if name == "array3":  # h5py cannot convert an array-type fill value (any file's)
                assert f[name][()].tolist() == [[1, 2, 3], [1, 2, 3]]
                continue
            fill = f[name].fillvalue
            if name == "cmp":
                assert tuple(fill.tolist()) == want, name
            else:
                assert np.array_equal(np.asarray(fill), np.asarray(want)), (name, fill)
        assert f["f32"][()].tolist() == [1.0, 2.0, -9.5, -9.5, -9.5, -9.5]
        assert f["i16be"][()].tolist() == [[-3] * 4] * 4
        assert f["fixed_str"][()].tolist() == [b"ab", b"ab"]
    z = zarr.open_group(str(m.path / "zarr/home/admin/restvol.zarr"), mode="r")
    assert z["f32"][:].tolist() == [1.0, 2.0, -9.5, -9.5, -9.5, -9.5]
    assert z["i16be"].fill_value == -3
    n5 = z5py.File(str(m.path / "n5/home/admin/restvol.n5"), "r")
    assert n5["i16be"][:].tolist() == [[-3] * 4] * 4

    zarr.open_array(str(m.path / "zarr/home/admin/restvol.zarr/f32"), mode="r+").attrs["units"] = "K"
    stored = json.loads((hsds.store_dir / keys.dataset_key(ids["f32"])).read_text())
    assert stored["attributes"]["units"]["value"] == "K"
    cpl = stored["creationProperties"]
    assert cpl["fillValue_encoding"] == "base64" and base64.b64decode(cpl["fillValue"]) == REST_VOL_FILLS["f32"][3]
    rsp = conn.GET(f"/datasets/{ids['f32']}/value")
    assert rsp.status_code == 200 and rsp.json()["value"] == [1.0, 2.0, -9.5, -9.5, -9.5, -9.5]
    conn.close()
    deep_check(store_dir)


def test_array_type_fill_value_keeps_its_element_order_in_the_hdf5_view():
    """An array-type fill value [1, 2, 3] (HSDS's JSON list) was laid out as 1,1,1,2,2,2,3,3,3:
    each value repeated across a whole element, so unwritten chunks read as [1, 1, 1]."""
    from polyfs.formats.hdf5.dtypes import disk_fill
    from polyfs.model import values

    ds = Dataset.from_json({"id": DID, "type": {"class": "H5T_ARRAY", "dims": [3], "base": "H5T_STD_U16LE"},
                            "shape": {"class": "H5S_SIMPLE", "dims": [2]},
                            "creationProperties": {"fillValue": [1, 2, 3]}})
    assert disk_fill(ds.type, ds.fill_value) == np.array([1, 2, 3], "<u2").tobytes()
    sub = np.dtype(("<u2", (2, 2)))
    got = values.as_layout(np.arange(8, dtype="<u2").reshape(2, 2, 2), sub)
    assert got.tobytes() == np.arange(8, dtype="<u2").tobytes()
