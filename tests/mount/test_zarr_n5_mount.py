"""Tier 3: the Zarr v3 and N5 views through a real ``polyfs mount``.

zarr-python and tensorstore read the Zarr view (sharded, and with
``-o unsharded``); tensorstore, z5py and zarr-n5 read the N5 view; ``ls -l``
sizes come from chunk sizes alone; shard index entries and N5 block payloads
read through the mount are the stored chunk objects byte for byte.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import Mount, fuse_available
from polyfs.model.catalog import Catalog
from polyfs.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "views"))
import zarr_n5_corpus as corpus  # noqa: E402

pytestmark = [pytest.mark.mount, pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("zn5store") / "store"
    datasets = corpus.build(Catalog(open_store(str(path), create=True)))
    return path, datasets


def _mount(store_dir, tmp_path_factory, *options):
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    base = tmp_path_factory.mktemp("zn5mnt")
    (base / "mnt").mkdir()
    return Mount(str(store_dir), base / "mnt", base / "polyfs.log", list(options)).start()


@pytest.fixture(scope="module")
def mounted(store_dir, tmp_path_factory):
    m = _mount(store_dir[0], tmp_path_factory)
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture(scope="module")
def mounted_unsharded(store_dir, tmp_path_factory):
    m = _mount(store_dir[0], tmp_path_factory, "unsharded")
    try:
        yield m
    finally:
        m.stop()


def zarr_root(m: Mount) -> Path:
    return m.path / "zarr" / "lab" / "run1.zarr"


def n5_root(m: Mount) -> Path:
    return m.path / "n5" / "lab" / "run1.n5"


def _same(case, got, want):
    if want.dtype.names:
        for name in want.dtype.names:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{case.name}.{name}")
    elif want.dtype.kind == "O":
        assert [str(x) for x in np.asarray(got).reshape(-1)] == [str(x) for x in want.reshape(-1)], case.name
    else:
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=case.name)


@pytest.mark.parametrize("which", ["mounted", "mounted_unsharded"])
def test_zarr_python_and_tensorstore(request, which, store_dir):
    import tensorstore as ts
    import zarr

    m = request.getfixturevalue(which)
    root = zarr_root(m)
    g = zarr.open_group(str(root), mode="r")
    for case in corpus.CASES:
        want = corpus.expected_array(case, store_dir[1][case.name])
        arr = g[case.path.lstrip("/")]
        _same(case, arr[...] if case.shape else arr[()], want)
        if case.tensorstore:
            t = ts.open({"driver": "zarr3", "kvstore": f"file://{root}{case.path}"}, read=True).result()
            np.testing.assert_array_equal(t.read().result(), want, err_msg=case.name)
    assert g.attrs["target"]["value"]["path"] == "/deep/f64_3d_zstd_be"


def _n5_want(case, datasets):
    want = corpus.expected_array(case, datasets[case.name])
    want = want.astype(np.uint8) if want.dtype.kind == "b" else want
    return want.reshape(want.shape or (1,))


def test_n5_readers(mounted, store_dir):
    import tensorstore as ts
    import z5py
    import zarr
    import zarr_n5

    root = n5_root(mounted)
    f = z5py.File(str(root), "r")
    zg = zarr.open_group(zarr_n5.ImplicitGroupWrapperStore(
        zarr_n5.N5WrapperStore(zarr.storage.LocalStore(str(root), read_only=True))), mode="r")
    cases = [c for c in corpus.CASES if c.n5_mode is not None]
    assert len(cases) >= 12
    for case in cases:
        want = _n5_want(case, store_dir[1])
        np.testing.assert_array_equal(f[case.path.lstrip("/")][:], want, err_msg=f"z5py {case.name}")
        t = ts.open({"driver": "n5", "kvstore": f"file://{root}{case.path}"}, read=True).result()
        np.testing.assert_array_equal(t.read().result(), want.T, err_msg=f"tensorstore {case.name}")
        if case.zarr_n5:
            np.testing.assert_array_equal(zg[case.path.lstrip("/")][...], want.T, err_msg=f"zarr-n5 {case.name}")


def test_listing_sizes_and_zero_copy_ranges(mounted, store_dir):
    """Shard indexes and N5 blocks read through the mount point at the stored chunk objects."""
    path, datasets = store_dir
    store = open_store(str(path))
    cat = Catalog(store)
    case = corpus.BY_NAME["f64_3d_zstd_be"]
    ds = datasets[case.name]
    index = cat.chunk_index(ds)
    zdir = zarr_root(mounted) / "deep" / case.name
    meta = json.loads((zdir / "zarr.json").read_bytes())
    k = tuple(o // i for o, i in zip(meta["chunk_grid"]["configuration"]["chunk_shape"], case.chunks))
    n = math.prod(k)
    checked = 0
    for shard in sorted(p for p in (zdir / "c").rglob("*") if p.is_file()):
        scoords = tuple(int(x) for x in shard.relative_to(zdir / "c").parts)
        size = os.stat(shard).st_size
        with open(shard, "rb") as fh:
            table = np.frombuffer(os.pread(fh.fileno(), 16 * n, size - 16 * n - 4), "<u8").reshape(n, 2)
            for pos, (off, nbytes) in enumerate(table):
                if off == 2 ** 64 - 1:
                    continue
                icoords = np.unravel_index(pos, k)
                coords = tuple(int(s * kk + i) for s, kk, i in zip(scoords, k, icoords))
                assert os.pread(fh.fileno(), int(nbytes), int(off)) == store.get(index.key_of(coords))
                checked += 1
    assert checked == len(index)
    ndir = n5_root(mounted) / "deep" / case.name
    inner = 0
    for lin in index.linear:
        coords = index.coords_of(int(lin))
        block = ndir.joinpath(*(str(c) for c in reversed(coords)))
        header = 4 + 4 * len(coords)
        if any((c + 1) * b > s for c, b, s in zip(coords, case.chunks, case.shape)):
            continue  # an edge block, served cropped (tests/views/test_n5_view.py)
        stored = store.get(index.key(int(lin)))
        assert os.stat(block).st_size == header + len(stored)
        assert block.read_bytes()[header:] == stored
        inner += 1
    assert inner
    # absent chunks are absent files
    for coords in case.skip:
        assert not ndir.joinpath(*(str(c) for c in reversed(coords))).exists()
