"""Tier 2 on a real HSDS-written domain: the Zarr and N5 views of what h5pyd wrote.

HSDS 1.0.2 stores 'gzip' chunks as Blosc frames (zlib inside), uncompressed
chunks little-endian, VL strings as int32-length + bytes, and leaves
never-written chunks missing; the views must serve all of it. The HSDS
server fixture is the interop suite's (tests/hsds/test_hsds_interop.py).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hsds"))
from test_hsds_interop import hsds  # noqa: E402,F401  (the module-scoped HSDS server fixture)

from polyfs.formats.n5 import view as n5
from polyfs.formats.zarr import view as zarr3
from support import make_ctx, materialize  # noqa: E402

pytestmark = [pytest.mark.hsds, pytest.mark.filterwarnings("ignore::UserWarning")]
DOMAIN = "/home/admin/views.h5"


@pytest.fixture(scope="module")
def written(hsds):
    import h5pyd

    img = (np.arange(50 * 37) * 7 % 251).astype("<i2").reshape(50, 37)
    cube = np.random.default_rng(3).random((20, 24, 30)).astype("<f4")
    table = np.array([(1, 2.5, b"ab"), (-3, 4.5, b"xyz")], dtype=[("a", "<i4"), ("b", "<f8"), ("s", "S3")])
    words = np.array(["a", "bé", "", "ccc", "dddd"] * 5, dtype=object)
    sparse = np.full((40, 40), 7, "<u2")
    sparse[0:10, 10:20] = np.arange(100, dtype="<u2").reshape(10, 10)
    with h5pyd.File(DOMAIN, "w", **hsds.kw) as f:
        f.attrs["title"] = "hsds views"
        f.create_dataset("gzip2d", data=img, chunks=(16, 16), compression="gzip")
        f.create_dataset("raw3d", data=cube, chunks=(8, 8, 16))
        f.create_dataset("be", data=np.arange(12, dtype=">f8").reshape(3, 4))
        f.create_dataset("strings", data=words, dtype=h5pyd.special_dtype(vlen=str), chunks=(10,),
                         compression="gzip")
        f.create_dataset("table", data=table)
        s = f.create_dataset("sparse", shape=(40, 40), dtype="<u2", chunks=(10, 10), fillvalue=7,
                             compression="gzip")
        s[0:10, 10:20] = sparse[0:10, 10:20]
        root_id = f.id.id
    keys = hsds.wait_for_chunks(root_id, 12 + 18 + 1 + 3 + 1 + 1)
    assert len(keys) == 36, hsds.log_tail()
    from polyfs.store import open_store

    store = open_store(str(hsds.store_dir))
    return store, {"gzip2d": img, "raw3d": cube, "be": np.arange(12, dtype=">f8").reshape(3, 4),
                   "strings": words, "table": table, "sparse": sparse}


@pytest.fixture(scope="module")
def views(written, tmp_path_factory):
    store, _ = written
    ctx, reader = make_ctx(store)
    model = ctx.catalog.load(DOMAIN)
    base = tmp_path_factory.mktemp("hsdsviews")
    materialize(zarr3.domain_node(model, ctx, "views.zarr"), base / "views.zarr", reader)
    materialize(n5.domain_node(model, ctx, "views.n5"), base / "views.n5", reader)
    return base, ctx, model


def test_zarr_view_of_an_hsds_domain(views, written):
    import tensorstore as ts
    import zarr

    base, ctx, model = views
    _, want = written
    g = zarr.open_group(str(base / "views.zarr"), mode="r")
    assert g.attrs["title"] == "hsds views"
    for name, arr in want.items():
        got = g[name][...]
        if arr.dtype.names:
            for field in arr.dtype.names:
                np.testing.assert_array_equal(got[field], arr[field])
        elif arr.dtype.kind == "O":
            assert list(got) == list(arr)
        else:
            np.testing.assert_array_equal(got, arr, err_msg=name)
            t = ts.open({"driver": "zarr3", "kvstore": f"file://{base}/views.zarr/{name}"}, read=True).result()
            np.testing.assert_array_equal(t.read().result(), arr, err_msg=name)
    # HSDS's Blosc frames are served as they are: Zarr's blosc codec reads them
    assert zarr3.serving(model, ctx, "/gzip2d") == "zero-copy"
    assert zarr3.serving(model, ctx, "/strings").startswith("transcoded")


def test_n5_view_of_an_hsds_domain(views, written):
    import tensorstore as ts
    import z5py
    import zarr
    import zarr_n5

    base, ctx, model = views
    _, want = written
    root = base / "views.n5"
    f = z5py.File(str(root), "r")
    zg = zarr.open_group(zarr_n5.ImplicitGroupWrapperStore(
        zarr_n5.N5WrapperStore(zarr.storage.LocalStore(str(root), read_only=True))), mode="r")
    for name in ("gzip2d", "raw3d", "be", "sparse"):
        arr = want[name]
        np.testing.assert_array_equal(f[name][:], arr, err_msg=name)
        t = ts.open({"driver": "n5", "kvstore": f"file://{root}/{name}"}, read=True).result()
        np.testing.assert_array_equal(t.read().result(), arr.T, err_msg=name)
        np.testing.assert_array_equal(zg[name][...], arr.T, err_msg=name)
    assert not (root / "strings").exists() and not (root / "table").exists()
    assert n5.serving(model, ctx, "/be") == "zero-copy"
    assert n5.serving(model, ctx, "/gzip2d") == "transcoded (little-endian)"
