"""Tier 2: padded compound types come back exactly (issue 12, fidelity).

netCDF-C and netCDF4-python write compounds with C-struct alignment: members at
offsets with gaps, the element larger than its members. h5py makes such types
from numpy dtypes with explicit ``offsets``/``itemsize``. The store keeps the
layout under the type JSON's ``"polyfs"`` key (packed compounds' JSON is
unchanged) and the chunks in HSDS's packed element layout (so HSDS reads
them; import re-encodes copied chunks), the HDF5 view carries the very
datatype message of the original and places the members at their offsets
(h5diff compares committed types with H5Tequal), values and fill values come
back, and the Zarr view serves such compounds packed (zarr-python's structured
dtypes have no padding): little-endian ones zero-copy, as stored.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess

import h5py
import hdf5plugin
import numpy as np
import pytest

from polyfs.formats.hdf5 import view as hdf5
from polyfs.codecs.pipeline import Pipeline
from polyfs.formats.hdf5.dtypes import disk_dtype, disk_fill, encode_type
from polyfs.formats.n5 import view as n5view
from polyfs.formats.zarr import view as zarrview
from polyfs.importers import import_source
from polyfs.model import types as T
from polyfs.model import values
from polyfs.store import open_store
from support import make_ctx, materialize

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)

# C-struct alignment: {int8 a; double b; int16 c;} is 24 bytes, members at 0/8/16
OBS = np.dtype({"names": ["a", "b", "c"], "formats": ["i1", "<f8", "<i2"], "offsets": [0, 8, 16], "itemsize": 24})
POS = np.dtype({"names": ["lat", "n"], "formats": ["<f4", "<i2"], "offsets": [0, 4], "itemsize": 8})
# nested: a padded compound inside a padded compound, and an array of them
NESTED = np.dtype({"names": ["p", "q", "ps"], "formats": [POS, "<f4", (POS, (2,))], "offsets": [0, 12, 16],
                   "itemsize": 40})
NESTED2 = np.dtype({"names": ["p", "q"], "formats": [POS, "<f4"], "offsets": [0, 12], "itemsize": 16})
BE = np.dtype({"names": ["a", "b"], "formats": [">i2", ">f8"], "offsets": [0, 8], "itemsize": 16})
VLSTR = np.dtype({"names": ["n", "s"], "formats": ["<i4", h5py.string_dtype()], "offsets": [0, 8], "itemsize": 24})
PACKED = np.dtype([("x", "<i4"), ("y", "<f8")])


def _values(dt: np.dtype, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=dt)
    for i, name in enumerate(dt.names):
        sub = dt.fields[name][0]
        if sub.names or sub.subdtype is not None:
            out[name] = _values(sub.subdtype[0] if sub.subdtype else sub, n * (sub.shape[0] if sub.shape else 1)) \
                .reshape(out[name].shape)
        elif sub.kind == "O":
            out[name] = [f"text {k}" for k in range(n)]
        else:
            out[name] = (np.arange(n) * (i + 1) + 0.5 * (sub.kind == "f")).astype(sub)
    return out


def make_source(path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("obs", data=_values(OBS, 50), chunks=(16,), compression="gzip")  # chunks copied
        f.create_dataset("obs_contig", data=_values(OBS, 7))  # read and encoded again
        f.create_dataset("nested", data=_values(NESTED, 9), chunks=(4,), compression="gzip")
        f.create_dataset("nested_contig", data=_values(NESTED, 5))
        f.create_dataset("nested2", data=_values(NESTED2, 6), chunks=(3,), compression="gzip")
        f.create_dataset("be", data=_values(BE, 6), chunks=(3,), compression="gzip")
        f.create_dataset("be_contig", data=_values(BE, 6))
        f.create_dataset("vlstr", data=_values(VLSTR, 4))
        f.create_dataset("packed", data=_values(PACKED, 4))
        fill = np.zeros((), dtype=OBS)
        fill["a"], fill["b"], fill["c"] = -1, 2.5, -3
        d = f.create_dataset("filled", shape=(40,), dtype=OBS, chunks=(8,), compression="gzip", fillvalue=fill)
        d[:8] = _values(OBS, 8)  # the other chunks are missing: the fill value
        rdt = np.dtype({"names": ["ref", "k"], "formats": [h5py.ref_dtype, "<i2"], "offsets": [0, 8], "itemsize": 16})
        refs = np.zeros(3, dtype=rdt)
        refs["ref"] = [f["obs"].ref, f["be"].ref, h5py.Reference()]
        refs["k"] = [7, 8, 9]
        f.create_dataset("refs", data=refs)
        f["obs_t"] = OBS  # committed types, and datasets and attributes using them
        f["pos_t"] = POS
        f.create_dataset("typed", data=_values(OBS, 5), dtype=f["obs_t"])
        f.create_dataset("typed_chunked", data=_values(POS, 12), dtype=f["pos_t"], chunks=(4,), compression="gzip")
        f.attrs["pad_attr"] = _values(OBS, 3)
        f.attrs.create("scalar_attr", _values(POS, 1)[0], dtype=POS)
        f.attrs["nested_attr"] = _values(NESTED, 2)
        f.attrs["be_attr"] = _values(BE, 2)
        f.attrs["vlstr_attr"] = _values(VLSTR, 2)
        f["obs"].attrs.create("typed_attr", _values(POS, 2), dtype=f["pos_t"])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("padded")
    src = base / "padded.h5"
    make_source(src)
    store_url = str(base / "store")
    domain = import_source(src, store_url, progress=False)
    ctx, reader = make_ctx(open_store(store_url))
    model = ctx.catalog.load(domain)
    view = materialize(hdf5.domain_node(model, ctx, "padded.h5"), base / "view" / "padded.h5", reader)
    return base, store_url, domain, src, view


def _h5objs(f):
    out = []
    f.visititems(lambda name, obj: out.append((name, obj)))
    return out


def _same_type(a, b, exact: bool) -> None:
    """The same layout and members; ``exact``: the very datatype message (byte order too)."""
    if exact:
        assert a.encode() == b.encode()
    assert a.get_size() == b.get_size()
    assert a.get_class() == b.get_class()


def test_store_keeps_the_layout(built):
    _, store_url, domain, _, _ = built
    ctx, _ = make_ctx(open_store(store_url))
    model = ctx.catalog.load(domain)
    obs = model.resolve("/obs").type
    assert obs.to_json()["polyfs"] == {"offsets": [0, 8, 16], "size": 24}
    assert disk_dtype(obs) == OBS and obs.numpy() == np.dtype([("a", "i1"), ("b", "<f8"), ("c", "<i2")])
    assert "polyfs" not in model.resolve("/packed").type.to_json()  # packed: HSDS's JSON, unchanged
    nested = T.resolved(model.resolve("/nested").type)
    assert disk_dtype(nested).itemsize == 40 and disk_dtype(nested.fields[0][1]).itemsize == 8
    assert nested.numpy().itemsize == 6 + 4 + 12 and disk_dtype(nested) == NESTED
    vl = T.resolved(model.resolve("/vlstr").type)
    # the file's disk layout (h5py reads a 24-byte memory layout: the string a pointer there);
    # the chunks are HSDS's vlen encoding
    assert vl.offsets == (0, 8) and vl.size == 32
    for path in ("/obs", "/obs_contig", "/nested", "/be", "/vlstr", "/refs"):  # another polyfs reads the same
        t = model.resolve(path).type
        assert T.from_json(json.loads(json.dumps(t.to_json()))) == t, path
    refs = model.resolve("/refs").type
    assert refs.offsets == (0, 8) and refs.size == 16 and refs.numpy().itemsize == 48 + 2  # S48 in the model


def test_stored_chunks_are_packed(built):
    """Every chunk holds HSDS's packed layout: decoded with the filters the dataset's JSON
    declares (as HSDS reads them, the "polyfs" key ignored), the values are the file's."""
    _, store_url, domain, src, _ = built
    ctx, _ = make_ctx(open_store(store_url))
    model = ctx.catalog.load(domain)
    with h5py.File(src) as a:
        for name in ("obs", "nested", "nested2", "be", "typed_chunked", "filled", "obs_contig", "be_contig"):
            ds = model.resolve("/" + name)
            packed = T.resolved(ds.type).numpy()
            hsds = T.from_json({k: v for k, v in T.resolved(ds.type).to_json().items() if k != "polyfs"})
            assert hsds.numpy() == packed and packed.itemsize < a[name].dtype.itemsize, name
            pipe = Pipeline.from_json(ds.filters, packed.itemsize)
            idx = ctx.catalog.chunk_index(ds)
            assert len(idx), name
            for lin in idx.linear:
                coords = idx.coords_of(int(lin))
                raw = pipe.decode(ctx.store.get(idx.key(int(lin))), int(np.prod(ds.chunks)) * packed.itemsize)
                got = np.frombuffer(raw, dtype=packed).reshape(ds.chunks)
                region = tuple(slice(c * k, min(c * k + k, n)) for c, k, n in zip(coords, ds.chunks, a[name].shape))
                want = a[name][region]
                part = got[tuple(slice(0, r.stop - r.start) for r in region)]
                for field in packed.names:
                    np.testing.assert_array_equal(part[field], want[field], err_msg=f"{name}.{field}")


def test_datatype_messages_are_exact(built):
    """libhdf5's encoding of each type equals the original's: committed types, attributes and
    chunk-copied datasets exactly, datasets encoded again too but for their byte order."""
    _, _, _, src, view = built
    with h5py.File(src) as a, h5py.File(view) as b:
        for name in ("obs_t", "pos_t"):
            assert a[name].id.equal(b[name].id) and a[name].dtype == b[name].dtype
            assert a[name].id.encode() == b[name].id.encode()
        for name in ("obs", "nested", "be", "typed", "typed_chunked", "filled", "vlstr", "refs"):
            assert a[name].dtype == b[name].dtype, name
            assert a[name].id.get_type().encode() == b[name].id.get_type().encode(), name
        for name in ("obs_contig", "nested_contig", "be_contig"):
            da, db = a[name].dtype, b[name].dtype
            assert da.newbyteorder("<") == db.newbyteorder("<"), name
            assert [da.fields[n][1] for n in da.names] == [db.fields[n][1] for n in db.names], name
            assert da.itemsize == db.itemsize
        for obj, name in [(a, n) for n in a.attrs] + [(a["obs"], "typed_attr")]:
            ta, tb = obj.attrs.get_id(name).get_type(), b[obj.name].attrs.get_id(name).get_type()
            assert ta.encode() == tb.encode(), name
            assert obj.attrs[name].dtype == b[obj.name].attrs[name].dtype, name
        assert b["typed"].id.get_type().committed() and b["typed_chunked"].id.get_type().committed()


def test_values_equal(built):
    _, _, _, src, view = built
    with h5py.File(src) as a, h5py.File(view) as b:
        for name, obj in _h5objs(a):
            if isinstance(obj, h5py.Dataset):
                x, y = obj[...], b[name][...]
                assert x.dtype.names == y.dtype.names
                for field in x.dtype.names:
                    if h5py.check_dtype(ref=x.dtype[field]) is None:  # references: addresses differ
                        np.testing.assert_array_equal(x[field], y[field], err_msg=f"{name}.{field}")
        assert [b[r].name if r else None for r in b["refs"]["ref"]] == ["/obs", "/be", None]
        for obj in (a, a["obs"]):
            for name in obj.attrs:
                x, y = obj.attrs[name], b[obj.name].attrs[name]
                assert x.tobytes() == y.tobytes() or x.dtype.hasobject, name  # padding: zeros both
                for field in x.dtype.names:
                    np.testing.assert_array_equal(x[field], y[field], err_msg=f"{name}.{field}")
        for field in OBS.names:  # the file's fill value has uninitialized padding; the view's is zero
            assert b["filled"].fillvalue[field] == a["filled"].fillvalue[field]
        np.testing.assert_array_equal(b["filled"][39:], a["filled"][39:])


def test_h5diff_reports_no_difference(built):
    _, _, _, src, view = built
    res = subprocess.run(["h5diff", "-r", str(src), str(view)], capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


def test_hdf5_message_offsets():
    """The datatype message has the member offsets and size, as libhdf5 encodes them."""
    t = T.from_numpy(OBS)
    assert t.offsets == (0, 8, 16) and t.size == 24
    assert encode_type(t) == h5py.h5t.py_create(OBS).encode()[2:]
    packed = T.from_numpy(PACKED)
    assert packed.offsets is None and encode_type(packed) == h5py.h5t.py_create(PACKED).encode()[2:]
    nested = T.from_numpy(NESTED)
    assert encode_type(nested) == h5py.h5t.py_create(NESTED).encode()[2:]
    assert disk_dtype(nested) == NESTED


def test_attribute_json_padding_is_zero():
    t = T.from_numpy(OBS)
    arr = values.to_numpy(t, values.Shape("simple", (2,)), [[1, 2.0, 3], [4, 5.0, 6]])
    assert arr.dtype.itemsize == 11  # the model's (stored) layout is packed
    raw = values.as_layout(arr, disk_dtype(t)).tobytes()  # the HDF5 view's
    assert len(raw) == 48 and raw[1:8] == bytes(7) and raw[18:24] == bytes(6)
    assert disk_fill(t, [1, 2.0, 3])[1:8] == bytes(7) and len(disk_fill(t, [1, 2.0, 3])) == 24


def test_zarr_view_serves_packed(built, caplog):
    base, store_url, domain, src, _ = built
    caplog.set_level(logging.INFO)
    ctx, reader = make_ctx(open_store(store_url))
    model = ctx.catalog.load(domain)
    zpath = materialize(zarrview.domain_node(model, ctx, "p.zarr"), base / "zv" / "p.zarr", reader)
    npath = materialize(n5view.domain_node(model, ctx, "p.n5"), base / "nv" / "p.n5", reader)
    import zarr

    g = zarr.open_group(str(zpath), mode="r")
    with h5py.File(src) as a:
        for name in ("obs", "obs_contig", "nested2", "be", "be_contig", "typed", "typed_chunked", "filled"):
            z = g[name][...]
            x = a[name][...]
            assert z.dtype.itemsize < x.dtype.itemsize, name  # packed
            assert z.dtype.names == x.dtype.names
            for field in x.dtype.names:
                np.testing.assert_array_equal(z[field], x[field], err_msg=f"{name}.{field}")
        assert g["filled"].fill_value["c"] == -3
        attrs = dict(g.attrs)
        assert attrs["pad_attr"][1] == {"a": 1, "b": 2.5, "c": 3}
    ts = pytest.importorskip("tensorstore")  # tensorstore reads the packed form field by field
    with h5py.File(src) as a:
        for field in OBS.names:
            spec = {"driver": "zarr3", "field": field, "kvstore": {"driver": "file", "path": str(zpath / "obs")}}
            np.testing.assert_array_equal(ts.open(spec).result().read().result(), a["obs"][field])
    # arrays inside a compound have no Zarr structured form (padded or not): left out, one log line
    assert "nested" not in g and "vlstr" not in g
    assert re.search(r"zarr: .*nested\b.* not shown", caplog.text)
    assert not (npath / "obs").exists()  # N5 has no compound types
    for name in ("obs", "nested2", "typed_chunked", "filled"):  # little-endian, stored packed: served as stored
        ds = model.resolve("/" + name)
        assert zarrview.describe(ds, ctx.catalog.pipeline(ds)).startswith("zero-copy"), name
