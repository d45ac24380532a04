"""tensorstore power use over a mount, exploratory round 21: every spec is run on the mount and
on a local directory and the two must agree (values, the metadata tensorstore reads back,
errors); hdf5/ shows the same values (kernel-free tests of the fix are in
tests/fs/test_ts_explore21_fs.py).

- a float fill value tensorstore spells in hex (a NaN with a payload, ``"0x7fc00001"``) was
  served back as ``"NaN"``: the open handle's ``resize`` then failed with "Updated zarr
  metadata ... is incompatible" and absent chunks read as another NaN.
- pinned (worked unchanged): ``transpose`` before ``bytes``, ``crc32c`` after ``zstd`` and
  alone, sharding with ``index_location`` start/end and index codecs with and without
  ``crc32c`` (big-endian too, under ``blosc``), ``dimension_names`` with null, fills NaN,
  ±Infinity, -0.0, bool, complex, int64/uint64 extremes, chunk key encodings ``default``
  with ``.`` and ``v2``; ``create=True, delete_existing=True`` over an existing array;
  ``resize`` with ``expand_only``/``shrink_only``; transactions (committed over several
  shards, aborted); ``KvStore`` chunk writes, ``list`` and ``delete_range``; the
  ``downsample`` driver over zarr3 and n5; n5 ``raw``/``gzip`` (``useZlib``)/``zstd``/
  ``blosc``/``bzip2`` with ``axes``/``units``/``resolution``; nested sharding, n5 ``xz`` and
  ``bfloat16`` refused (``EOPNOTSUPP``, one log line) with the store unchanged.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import quiet_local_mount as _mounted

from polyfs.check import check_store

ts = pytest.importorskip("tensorstore")
h5py = pytest.importorskip("h5py")


def _spec(path: Path, driver: str = "zarr3", **kw) -> dict:
    return {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}, **kw}


def _grid(chunks) -> dict:
    return {"name": "regular", "configuration": {"chunk_shape": list(chunks)}}


def _meta(path: Path, driver: str = "zarr3") -> dict:
    """The metadata tensorstore reads back (its own normalised spelling)."""
    return ts.open(_spec(path, driver)).result().spec().to_json()["metadata"]


def _tree(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def _both(m, tmp_path: Path, name: str):
    return [m.path / "zarr" / "d.zarr" / name, tmp_path / "local" / name]


def _domain(m) -> None:
    (m.path / "zarr" / "d.zarr").mkdir()
    (m.path / "n5" / "e.n5").mkdir()


def test_tensorstore_resizes_an_array_with_a_nan_payload_fill(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    _domain(m)
    got = []
    for fill, dt, bits in (("0x7fc00001", "float32", "<u4"), ("0x7ff8000000000001", "float64", "<u8")):
        for path in _both(m, tmp_path, dt):
            md = {"shape": [4, 4], "data_type": dt, "fill_value": fill, "chunk_grid": _grid((2, 2))}
            a = ts.open(_spec(path, metadata=md), create=True, delete_existing=True).result()
            a[0:2, 0:2].write(np.ones((2, 2), dt)).result()
            a = a.resize(exclusive_max=[6, 5]).result()  # re-reads zarr.json, compares it
            r = ts.open(_spec(path)).result().read().result()
            got.append((a.shape, r.view(bits).tolist(), _meta(path)["fill_value"]))
        assert got[-2] == got[-1]
        assert got[-1][1][5][4] == int(fill, 16)
    with h5py.File(m.path / "hdf5" / "d.h5") as f:
        assert f["float32"].shape == (6, 5) and f["float32"][5, 4].view("<u4") in (0x7fc00001, 0x7fc00000)
    m.stop()
    assert not check_store(str(store), deep=True).problems


BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
VARIANTS = {
    "transpose": [{"name": "transpose", "configuration": {"order": [1, 0]}}, BYTES],
    "zstd_crc": [BYTES, {"name": "zstd", "configuration": {"level": 3}}, {"name": "crc32c"}],
    "crc": [BYTES, {"name": "crc32c"}],
}
for loc in ("start", "end"):
    for idx in ([BYTES, {"name": "crc32c"}], [BYTES], [{"name": "bytes", "configuration": {"endian": "big"}}]):
        VARIANTS[f"shard_{loc}_{len(idx)}_{idx[0]['configuration']['endian']}"] = [{
            "name": "sharding_indexed", "configuration": {
                "chunk_shape": [3, 4], "index_codecs": idx, "index_location": loc,
                "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                           {"name": "bytes", "configuration": {"endian": "big"}},
                           {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "shuffle",
                                                               "typesize": 4, "blocksize": 0}}, {"name": "crc32c"}]}}]


def test_tensorstore_zarr3_specs_read_alike_on_the_mount_and_on_disk(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    _domain(m)
    data = np.arange(6 * 8, dtype="f4").reshape(6, 8) - 7
    extra = [("dims", {"dimension_names": ["y", None]}),
             ("dot", {"chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}}),
             ("v2", {"chunk_key_encoding": {"name": "v2"}})]
    cases = [(n, {"codecs": c}) for n, c in VARIANTS.items()] + extra
    for name, more in cases:
        sharded = name.startswith("shard")
        md = {"shape": [6, 8], "data_type": "float32", "chunk_grid": _grid((6, 8) if sharded else (3, 4)), **more}
        seen = []
        for path in _both(m, tmp_path, name):
            for _ in range(2):  # the second time over an existing array
                a = ts.open(_spec(path, metadata=md), create=True, delete_existing=True).result()
                a.write(data).result()
            seen.append((ts.open(_spec(path)).result().read().result().tolist(), _meta(path)))
        assert seen[0] == seen[1], name
    for name, dt, fill in (("nan", "float32", "NaN"), ("inf", "float64", "-Infinity"), ("negz", "float64", -0.0),
                           ("bool", "bool", True), ("cplx", "complex64", [1.5, "NaN"]),
                           ("i64", "int64", -(1 << 63)), ("u64", "uint64", (1 << 64) - 1)):
        seen = []
        for path in _both(m, tmp_path, name):
            md = {"shape": [4, 3], "data_type": dt, "fill_value": fill, "chunk_grid": _grid((2, 2))}
            a = ts.open(_spec(path, metadata=md), create=True, delete_existing=True).result()
            a[0:2, 0:2].write(np.zeros((2, 2), dt)).result()
            a = a.resize(exclusive_max=[5, 3], expand_only=True).result()
            r = ts.open(_spec(path)).result().read().result()
            seen.append((r.tobytes(), json.dumps(_meta(path))))
        assert seen[0] == seen[1], name
    with h5py.File(m.path / "hdf5" / "d.h5") as f:
        for name in VARIANTS:
            np.testing.assert_array_equal(f[name][()], data)
        assert np.signbit(f["negz"].fillvalue) and f["u64"].fillvalue == (1 << 64) - 1
    m.stop()
    assert not check_store(str(store), deep=True).problems


def test_transactions_kvstore_and_downsample_alike(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    _domain(m)
    md = {"shape": [12, 16], "data_type": "int16", "chunk_grid": _grid((6, 8)),
          "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [3, 4], "codecs": [
              BYTES, {"name": "zstd", "configuration": {"level": 1}}]}}]}
    seen = []
    for path in _both(m, tmp_path, "tx"):
        a = ts.open(_spec(path, metadata=md), create=True, delete_existing=True).result()
        t = ts.Transaction()
        a.with_transaction(t).write(np.arange(192, dtype="i2").reshape(12, 16)).result()
        t.commit_async().result()  # four shards at once
        t = ts.Transaction()
        a.with_transaction(t)[0:7, 0:9].write(np.full((7, 9), -1, "i2")).result()
        t.abort()
        k = ts.KvStore.open({"driver": "file", "path": str(path) + "/"}).result()
        keys = sorted(k.list().result())
        k.delete_range(ts.KvStore.KeyRange("c/1/", "c/1/~")).result()
        down = ts.open({"driver": "downsample", "downsample_factors": [3, 4], "downsample_method": "mean",
                        "base": _spec(path)}).result().read().result()
        seen.append((keys, sorted(k.list().result()), ts.open(_spec(path)).result().read().result().tolist(),
                     down.tolist()))
    assert seen[0] == seen[1]
    assert seen[0][0] == [b"c/0/0", b"c/0/1", b"c/1/0", b"c/1/1", b"zarr.json"]
    with h5py.File(m.path / "hdf5" / "d.h5") as f:
        np.testing.assert_array_equal(f["tx"][()], seen[0][2])
    m.stop()
    assert not check_store(str(store), deep=True).problems


N5_COMPRESSIONS = [{"type": "raw"}, {"type": "gzip"}, {"type": "gzip", "useZlib": True},
                   {"type": "gzip", "level": 9, "useZlib": False}, {"type": "zstd", "level": 5},
                   {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
                   {"type": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
                   {"type": "bzip2"}]


def test_tensorstore_n5_compressions_and_axes_alike(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    _domain(m)
    data = (np.arange(35).reshape(5, 7) * 3).astype("u2")
    for i, comp in enumerate(N5_COMPRESSIONS):
        seen = []
        for path in (m.path / "n5" / "e.n5" / f"c{i}", tmp_path / "local" / f"c{i}"):
            md = {"dimensions": [5, 7], "blockSize": [2, 3], "dataType": "uint16", "compression": comp,
                  "axes": ["y", "x"], "units": ["um", "nm"], "resolution": [0.5, 2.0]}
            a = ts.open(_spec(path, "n5", metadata=md), create=True, delete_existing=True).result()
            a.write(data).result()
            b = ts.open(_spec(path, "n5")).result()
            down = ts.open({"driver": "downsample", "downsample_factors": [2, 2], "downsample_method": "max",
                            "base": _spec(path, "n5")}).result().read().result()
            attrs = json.loads((path / "attributes.json").read_text())
            seen.append((b.read().result().tolist(), str(b.dimension_units), b.domain.labels, down.tolist(),
                         {k: attrs[k] for k in ("axes", "units", "resolution", "compression")}))
        assert seen[0] == seen[1], comp
    with h5py.File(m.path / "hdf5" / "e.h5") as f:
        np.testing.assert_array_equal(f["c7"][()], data.T)  # N5's axes are reversed
    m.stop()
    assert not check_store(str(store), deep=True).problems


def test_specs_the_mount_cannot_hold_are_refused_and_change_nothing(mount_store, tmp_path):
    store, m = _mounted(mount_store, tmp_path)
    _domain(m)
    for d in ("zarr/d.zarr/nested", "zarr/d.zarr/bf", "n5/e.n5/xz"):  # a mkdir makes a group: not under test
        (m.path / d).mkdir()
    before = _tree(store)
    nested = {"shape": [8, 8], "data_type": "float32", "chunk_grid": _grid((8, 8)), "codecs": [
        {"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 4], "codecs": [
            {"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2], "codecs": [BYTES]}}]}}]}
    bf16 = {"shape": [4], "data_type": "bfloat16", "chunk_grid": _grid((2,))}
    xz = {"dimensions": [5, 7], "blockSize": [2, 3], "dataType": "uint16", "compression": {"type": "xz"}}
    for path, spec in ((m.path / "zarr" / "d.zarr" / "nested", _spec(m.path / "zarr" / "d.zarr" / "nested",
                                                                      metadata=nested)),
                       (m.path / "zarr" / "d.zarr" / "bf", _spec(m.path / "zarr" / "d.zarr" / "bf", metadata=bf16)),
                       (m.path / "n5" / "e.n5" / "xz", _spec(m.path / "n5" / "e.n5" / "xz", "n5", metadata=xz))):
        with pytest.raises(Exception, match="Operation not supported"):
            ts.open(spec, create=True).result()
        assert not (path / "zarr.json").exists() and not (path / "attributes.json").exists()
    assert _tree(store) == before
    refusals = [line for line in Path(m.log).read_text().splitlines() if "refused (ENOTSUP)" in line]
    assert len(refusals) >= 3 and any("'xz'" in line for line in refusals)
    m.stop()
    assert not check_store(str(store), deep=True).problems


def test_an_imported_tensorstore_array_keeps_its_nan_payload_fill(mount_store, tmp_path):
    from polyfs.importers import import_source

    src = tmp_path / "src"
    md = {"shape": [4, 4], "data_type": "float32", "fill_value": "0x7fc00001", "chunk_grid": _grid((2, 2))}
    ts.open(_spec(src / "a", metadata=md), create=True).result()[0:2, 0:2].write(np.ones((2, 2), "f4")).result()
    store = tmp_path / "store"
    import_source(str(src), str(store), domain="/t.h5", progress=False)
    m = mount_store(str(store))
    path = m.path / "zarr" / "t.zarr" / "a"
    a = ts.open(_spec(path)).result()
    assert a.resize(exclusive_max=[6, 4]).result().shape == (6, 4)
    r = ts.open(_spec(path)).result().read().result()
    assert r.view("<u4")[5, 3] == 0x7fc00001 and r[0, 0] == 1
    m.stop()
    assert not check_store(str(store), deep=True).problems


def test_imported_zarr_and_n5_arrays_grow_through_the_mount(mount_store, tmp_path):
    """A Zarr or N5 array has no maximum shape; imported, it was stored with its shape as the
    maximum, so zarr-python's ``append`` and tensorstore's ``resize`` through the mount failed
    (``EINVAL``: "shape [6] exceeds the maximum shape [4]")."""
    zarr = pytest.importorskip("zarr")
    from polyfs.importers import import_source

    src = tmp_path / "src"
    zarr.create_array(str(src), name="z", shape=(4,), chunks=(2,), dtype="i4")[:] = [1, 2, 3, 4]
    ts.open(_spec(src / "t", metadata={"shape": [2, 3], "data_type": "uint8", "chunk_grid": _grid((2, 2))}),
            create=True).result().write(np.ones((2, 3), "u1")).result()
    n5 = {"dimensions": [3, 2], "blockSize": [2, 2], "dataType": "int16", "compression": {"type": "gzip"}}
    ts.open(_spec(tmp_path / "n5src" / "v", "n5", metadata=n5), create=True).result().write(
        np.full((3, 2), 7, "i2")).result()
    store = tmp_path / "store"
    import_source(str(src), str(store), domain="/z.h5", progress=False)
    import_source(str(tmp_path / "n5src"), str(store), domain="/n.h5", progress=False)
    m = mount_store(str(store))
    a = zarr.open_array(str(m.path / "zarr" / "z.zarr" / "z"), mode="a")
    a.append(np.array([5, 6], "i4"))
    t = ts.open(_spec(m.path / "zarr" / "z.zarr" / "t")).result().resize(exclusive_max=[5, 3]).result()
    t[4, :].write(np.full(3, 9, "u1")).result()
    v = ts.open(_spec(m.path / "n5" / "n.n5" / "v", "n5")).result().resize(exclusive_max=[3, 4]).result()
    v[:, 3].write(np.full(3, -2, "i2")).result()
    m = _remounted_(mount_store, m, store)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "z.zarr" / "z"))[:], [1, 2, 3, 4, 5, 6])
    with h5py.File(m.path / "hdf5" / "z.h5") as f:
        assert f["t"][()].tolist() == [[1] * 3, [1] * 3, [0] * 3, [0] * 3, [9] * 3]
    with h5py.File(m.path / "hdf5" / "n.h5") as f:  # N5 axes reversed
        assert f["v"][()].tolist() == [[7, 7, 7], [7, 7, 7], [0, 0, 0], [-2, -2, -2]]
    m.stop()


def _remounted_(mount_store, m, store):
    m.stop()
    assert not check_store(str(store), deep=True).problems
    return mount_store(str(store))
