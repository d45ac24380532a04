"""Writes through the HDF5 view of padded compounds (C-struct alignment): the view serves
them in their HDF5 layout, the store keeps HSDS's packed layout, and a chunk written
through the view is stored packed again (operations awaited directly)."""
from __future__ import annotations

import io
import subprocess

import h5py
import numpy as np

from polyfs.codecs.pipeline import Pipeline
from polyfs.importers import import_source
from polyfs.model import types as T
from polyfs.store import open_store
from support import make_ctx
from writeharness import FS, write_changes

OBS = np.dtype({"names": ["a", "b", "c"], "formats": ["i1", "<f8", "<i2"], "offsets": [0, 8, 16], "itemsize": 24})
POS = np.dtype({"names": ["lat", "n"], "formats": ["<f4", "<i2"], "offsets": [0, 4], "itemsize": 8})
NESTED2 = np.dtype({"names": ["p", "q"], "formats": [POS, "<f4"], "offsets": [0, 12], "itemsize": 16})


def _obs(n: int) -> np.ndarray:
    out = np.zeros(n, dtype=OBS)
    out["a"], out["b"], out["c"] = np.arange(n), np.arange(n) + 0.5, -np.arange(n)
    return out


def _dataset_id(store_url: str, path: str) -> str:
    ctx, _ = make_ctx(open_store(store_url))
    return ctx.catalog.load("/padded.h5").resolve(path).id


def _stored_values(store_url: str, path: str) -> np.ndarray:
    """A dataset's values as HSDS reads its chunks: the declared filters, the packed type
    of the JSON without polyfs's key."""
    ctx, _ = make_ctx(open_store(store_url))
    model = ctx.catalog.load("/padded.h5")
    ds = model.resolve(path)
    packed = T.from_json({k: v for k, v in T.resolved(ds.type).to_json().items() if k != "polyfs"}).numpy()
    pipe = Pipeline.from_json(ds.filters, packed.itemsize)
    idx = ctx.catalog.chunk_index(ds)
    out = np.zeros(ds.shape.dims, dtype=packed)
    for lin in idx.linear:
        coords = idx.coords_of(int(lin))
        raw = pipe.decode(ctx.store.get(idx.key(int(lin))), int(np.prod(ds.chunks)) * packed.itemsize)
        block = np.frombuffer(raw, dtype=packed).reshape(ds.chunks)
        region = tuple(slice(c * k, min(c * k + k, n)) for c, k, n in zip(coords, ds.chunks, ds.shape.dims))
        out[region] = block[tuple(slice(0, r.stop - r.start) for r in region)]
    return out


def test_r_plus_write_of_padded_compounds(tmp_path):
    src = tmp_path / "padded.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("obs", data=_obs(40), chunks=(16,), compression="gzip", shuffle=True)
        f.create_dataset("contig", data=_obs(7))
        n2 = np.zeros(6, dtype=NESTED2)
        n2["p"]["lat"], n2["p"]["n"], n2["q"] = np.arange(6), np.arange(6) * 2, np.arange(6) * 3
        f.create_dataset("nested2", data=n2, chunks=(4,), compression="gzip")
        f.create_dataset("other", data=_obs(5), chunks=(5,), compression="gzip")
    store = str(tmp_path / "store")
    import_source(src, store, progress=False)
    fs = FS(f"file://{store}")
    before = fs.read_file("hdf5/padded.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+") as f:
        assert f["obs"].dtype == OBS and f["nested2"].dtype == NESTED2
        f["obs"][17] = (99, 99.5, -99)
        f["contig"][3] = (55, 5.5, 5)
        f["nested2"][5] = ((7.5, 8), 9.5)
    ids = {n: _dataset_id(store, n) for n in ("/obs", "/contig", "/nested2", "/other")}
    write_changes(fs, "hdf5/padded.h5", before, buf.getvalue())
    assert {n: _dataset_id(store, n) for n in ids} == ids  # the same datasets, changed (not a new import)
    after = tmp_path / "after.h5"
    after.write_bytes(fs.fresh(read_only=True).read_file("hdf5/padded.h5"))
    want = _obs(40)
    want[17] = (99, 99.5, -99)
    with h5py.File(after) as b:
        assert b["obs"].dtype == OBS
        np.testing.assert_array_equal(b["obs"][...], want)
        assert tuple(b["contig"][3]) == (55, 5.5, 5)
        assert b["nested2"][5]["q"] == 9.5 and b["nested2"][5]["p"]["n"] == 8
    res = subprocess.run(["h5diff", str(src), str(after), "/other", "/other"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:]
    stored = _stored_values(store, "/obs")  # packed again in the store, as HSDS reads it
    assert stored.dtype.itemsize == 11
    for name in OBS.names:
        np.testing.assert_array_equal(stored[name], want[name])
    assert tuple(_stored_values(store, "/contig")[3]) == (55, 5.5, 5)
    assert _stored_values(store, "/nested2")[5]["q"] == 9.5
