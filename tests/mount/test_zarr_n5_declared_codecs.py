"""Tier 3: the handle that wrote an array reads and updates it through a real mount.

zarr-python and tensorstore keep the metadata they wrote in the open handle; the view must
serve that spelling back (an inner ``crc32c``, the shard index's location and codecs, N5
``useZlib``), else the writer's next read fails a checksum or misplaces the index. And N5
attributes named ``units``/``resolution``/``axes`` read back from ``attributes.json`` as written.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def _zarr_python_cases():
    from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, ZstdCodec

    return {
        "zstd_crc": {"chunks": (16, 16), "compressors": [ZstdCodec(level=3), Crc32cCodec()]},
        "shard_gzip_crc": {"chunks": (16, 16), "shards": (32, 32), "compressors": [GzipCodec(), Crc32cCodec()]},
        "idx_start": {"chunks": (32, 32), "compressors": None, "filters": None, "serializer": ShardingCodec(
            chunk_shape=(16, 16), codecs=[BytesCodec(), GzipCodec()], index_codecs=[BytesCodec(), Crc32cCodec()],
            index_location="start")},
        "idx_nocrc": {"chunks": (32, 32), "compressors": None, "filters": None, "serializer": ShardingCodec(
            chunk_shape=(16, 16), codecs=[BytesCodec(), GzipCodec()], index_codecs=[BytesCodec()])},
    }


def test_the_writing_handle_reads_and_updates_what_it_wrote(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    root = m.path / "zarr" / "t.zarr"
    root.mkdir()
    warnings.filterwarnings("ignore")
    for name, kw in _zarr_python_cases().items():
        a = zarr.create_array(str(root / name), shape=(48, 48), dtype="uint16", **kw)
        want = np.arange(48 * 48, dtype="uint16").reshape(48, 48)
        a[:] = want
        np.testing.assert_array_equal(a[:], want, err_msg=name)  # the same handle
        a[0:4, 0:4] = 9  # a partial update: read-modify-write of a chunk or shard
        want[0:4, 0:4] = 9
        np.testing.assert_array_equal(a[:], want, err_msg=name)
        np.testing.assert_array_equal(zarr.open_array(str(root / name), mode="r")[:], want, err_msg=name)

    # tensorstore: a zarr3 shard with its index first and without crc32c
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root / "ts_idx")},
            "metadata": {"shape": [64, 64], "data_type": "int32",
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32, 32]}},
                         "codecs": [{"name": "sharding_indexed", "configuration": {
                             "chunk_shape": [16, 16], "codecs": [{"name": "bytes"}, {"name": "zstd"}],
                             "index_codecs": [{"name": "bytes"}], "index_location": "start"}}]},
            "create": True}
    t = ts.open(spec).result()
    want = np.arange(64 * 64, dtype="int32").reshape(64, 64)
    t.write(want).result()
    np.testing.assert_array_equal(t.read().result(), want)
    t[0:4, 0:4].write(np.full((4, 4), 7, "int32")).result()
    want[0:4, 0:4] = 7
    np.testing.assert_array_equal(t.read().result(), want)
    cfg = json.loads((root / "ts_idx" / "zarr.json").read_text())["codecs"][0]["configuration"]
    assert cfg["index_location"] == "start" and [c["name"] for c in cfg["index_codecs"]] == ["bytes"]

    # tensorstore N5 with gzip useZlib
    n5 = m.path / "n5" / "t.n5" / "zl"
    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(n5)},
                 "metadata": {"dataType": "int32", "dimensions": [64, 64], "blockSize": [32, 32],
                              "compression": {"type": "gzip", "useZlib": True}}, "create": True}).result()
    t.write(want).result()
    np.testing.assert_array_equal(t.read().result(), want)
    t[0:4, 0:4].write(np.full((4, 4), 5, "int32")).result()
    want[0:4, 0:4] = 5
    np.testing.assert_array_equal(t.read().result(), want)
    assert json.loads((n5 / "attributes.json").read_text())["compression"].get("useZlib") is True
    fresh = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(n5)}}).result()
    np.testing.assert_array_equal(fresh.read().result(), want)

    # N5 attributes written as BigDataViewer-style tools write them read back as written
    path = n5 / "attributes.json"
    attrs = json.loads(path.read_text())
    attrs.update({"units": "nm", "resolution": 4.0, "axes": "xy", "note": "kept"})
    path.write_text(json.dumps(attrs))
    back = json.loads(path.read_text())
    assert {k: back.get(k) for k in ("units", "resolution", "axes", "note")} == \
        {"units": "nm", "resolution": 4.0, "axes": "xy", "note": "kept"}
