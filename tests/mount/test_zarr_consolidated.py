"""Tier 3: consolidated metadata written through ``zarr/`` (xarray's ``to_zarr`` default,
``zarr.consolidate_metadata``) is served, built from the hierarchy as it is at each read:
``zarr.open_consolidated`` and ``xr.open_zarr(consolidated=True)`` work, never stale."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from support import deep_check

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def climate() -> "xr.Dataset":
    return xr.Dataset({"t": (("x", "y"), np.arange(20.0).reshape(4, 5))},
                      coords={"x": np.arange(4), "y": list("abcde")})


def test_xarray_default_to_zarr_reads_back_consolidated(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    path = m.path / "zarr" / "c.zarr"
    ds = climate()
    ds.to_zarr(str(path))  # xarray's default: consolidated metadata
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "failed to open ... consolidated" fallback
        back = xr.open_zarr(str(path), consolidated=True).load()
    assert back.identical(ds)
    assert sorted(zarr.open_consolidated(str(path)).array_keys()) == ["t", "x", "y"]
    # an append in the same process (xarray re-reads what the view serves, then writes with it)
    more = xr.Dataset({"t": (("x", "y"), np.full((2, 5), 7.0))}, coords={"x": [4, 5], "y": list("abcde")})
    more.to_zarr(str(path), append_dim="x")
    back = xr.open_zarr(str(path), consolidated=True).load()
    np.testing.assert_array_equal(back.t.values, np.concatenate([ds.t.values, more.t.values]))
    assert list(back.y.values) == list("abcde")
    # never stale: a change made without consolidating again shows in the consolidated metadata
    g = zarr.open_group(str(path), mode="a", use_consolidated=False)
    g.create_array("late", shape=(3,), dtype="i2")
    meta = json.loads((path / "zarr.json").read_text())["consolidated_metadata"]["metadata"]
    assert meta["late"]["shape"] == [3] and meta["t"]["shape"] == [6, 5]
    m.stop()
    m.start()  # the request is kept with the group
    assert sorted(zarr.open_consolidated(str(path)).array_keys()) == ["late", "t", "x", "y"]
    m.stop()
    deep_check(store)


def test_nested_groups_and_a_rewrite_without_consolidation(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    path = m.path / "zarr" / "n.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    sub = root.create_group("sub", attributes={"b": 2})
    sub.create_array("y", shape=(3,), dtype="i4")[:] = [1, 2, 3]
    root.create_array("x", shape=(4,), chunks=(2,), dtype="f8")[:] = np.arange(4.0)
    zarr.consolidate_metadata(str(path))
    meta = json.loads((path / "zarr.json").read_text())
    assert set(meta["consolidated_metadata"]["metadata"]) == {"sub", "sub/y", "x"}
    assert meta["consolidated_metadata"]["metadata"]["sub"]["attributes"] == {"b": 2}
    assert "consolidated_metadata" not in json.loads((path / "sub" / "zarr.json").read_text())
    g = zarr.open_consolidated(str(path))
    np.testing.assert_array_equal(g["sub/y"][:], [1, 2, 3])
    # the root's zarr.json written again without consolidated metadata: no longer served
    plain = {k: v for k, v in meta.items() if k != "consolidated_metadata"}
    (path / "zarr.json").write_text(json.dumps(plain))
    assert "consolidated_metadata" not in json.loads((path / "zarr.json").read_text())
    with pytest.raises(ValueError):
        zarr.open_consolidated(str(path))
    # malformed consolidated metadata is refused, the group left as it was
    bad = dict(plain, consolidated_metadata={"kind": "inline", "metadata": 5})
    with pytest.raises(OSError):
        (path / "zarr.json").write_text(json.dumps(bad))
    assert json.loads((path / "zarr.json").read_text()) == plain
