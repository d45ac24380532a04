"""The polyglot view of an array written unsharded through zarr/ (tier 2).

Found by the soak (tests/soakkit.py): tensorstore and zarr-python write unsharded arrays, and
polyfs keeps that layout choice with the dataset for the Zarr view (``zarr_sharded: false``).
The polyglot view's array took the hint too, so ``polyglot/<stem>/<path>.zarr`` (whose one
shard *is* the polyglot file) was listed but every lookup in it failed with EOPNOTSUPP."""
from __future__ import annotations

import numpy as np
import pytest
from writeharness import FS, ZarrLayout, read_zarr_array, zarr_array_meta


@pytest.fixture
def fs():
    f = FS()
    yield f
    f.close()


def test_an_array_written_unsharded_has_its_polyglot_zarr_array(fs):
    fs.mkdir("zarr/t.zarr")
    fs.mkdir("zarr/t.zarr/a")
    meta = zarr_array_meta((64, 48), "<u2", (32, 16), codecs=("zstd",))  # unsharded, as tensorstore writes
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    lay = ZarrLayout(meta)
    want = np.arange(64 * 48, dtype="<u2").reshape(64, 48)
    for i in range(2):
        fs.makedirs(f"zarr/t.zarr/a/c/{i}")
        for j in range(3):
            fs.write_file(f"zarr/t.zarr/a/c/{i}/{j}", lay.encode_chunk(want[i * 32:(i + 1) * 32, j * 16:(j + 1) * 16]))
    assert sorted(fs.ls("zarr/t.zarr/a/c/0")) == ["0", "1", "2"]  # the Zarr view stays unsharded
    assert sorted(fs.ls("polyglot/t")) == ["a.h5", "a.tif", "a.zarr"]
    got_meta, got = read_zarr_array(fs, "polyglot/t/a.zarr")
    assert got_meta["codecs"][0]["name"] == "sharding_indexed"  # one shard: the polyglot file itself
    np.testing.assert_array_equal(got[:64, :48], want)
    assert fs.read_file("polyglot/t/a.zarr/c/0/0") == fs.read_file("polyglot/t/a.tif")
