"""Tier 2: BigTIFF polyglot files. Forced on small datasets (every reader checks values), and
chosen by itself for a file past 4 GiB (planned from a chunk index of huge chunk sizes, only
the metadata written into a sparse file: every format's index is checked)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import hdf5plugin  # noqa: F401  (zstd filter for h5py)
import numpy as np
import pytest
import tifffile

from polyfs.model.chunks import ChunkIndex
from polyfs.store import open_store
from polyfs.vfile import Literal
from polyfs.formats.polyglot import file as polyglot
from polyfs.formats.polyglot import view as polyview
from polyfs.views.base import FileNode
from support import make_ctx, read_node

sys.path.insert(0, str(Path(__file__).resolve().parent))
import polyglot_corpus as corpus  # noqa: E402


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("pgbig")
    store = open_store(str(corpus.build_store(base / "store")))
    ctx, reader = make_ctx(store)
    return store, ctx, reader, ctx.catalog.load(corpus.DOMAIN)


@pytest.mark.parametrize("path", ["/u16be_zstd", "/i16be_raw_deep", "/g/i32le_zstd_4d"])
def test_forced_bigtiff_reads_everywhere(env, path, tmp_path):
    import zarr

    store, ctx, reader, model = env
    case = corpus.BY_PATH[path]
    ds = model.resolve(path)
    pf = polyglot.plan_file(ds, None, case.name, f"{corpus.DOMAIN}{path}", ctx.catalog.chunk_index(ds),
                            ctx.catalog.pipeline(ds), bigtiff=True)
    small = polyglot.plan_file(ds, None, case.name, f"{corpus.DOMAIN}{path}", ctx.catalog.chunk_index(ds),
                               ctx.catalog.pipeline(ds))
    assert pf.big and not small.big
    data = read_node(FileNode("x", pf.vfile), reader)
    assert data[:4] in (b"II+\x00", b"MM\x00+")
    f = tmp_path / "big.tif"
    f.write_bytes(data)
    arr = corpus.make_array(case)
    with tifffile.TiffFile(f) as t:
        assert t.is_bigtiff and t.is_ome
        np.testing.assert_array_equal(t.series[0].asarray(), arr)
    if shutil.which("tiffinfo"):
        res = subprocess.run(["tiffinfo", "-D", str(f)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and res.stderr == "", res.stderr
    with h5py.File(f, "r") as h:
        np.testing.assert_array_equal(h[case.name][()], arr)
    zdir = tmp_path / "big.zarr"
    zdir.mkdir()
    (zdir / "zarr.json").write_text(polyglot_json(model, ctx, ds, path))
    shard = zdir / "c" / "/".join("0" * len(case.shape))
    shard.parent.mkdir(parents=True, exist_ok=True)
    shard.write_bytes(data)
    np.testing.assert_array_equal(zarr.open_array(str(zdir), mode="r")[...], arr)
    corpus.check_shared_bytes(f, store, case, bigtiff=True)


def polyglot_json(model, ctx, ds, path) -> str:
    import json

    from polyfs.formats.zarr import view as zarr3

    return json.dumps(polyview.zarr_metadata(zarr3.ZarrDomain(model, ctx), ds, path))


def test_past_4_gib_is_bigtiff(env, tmp_path):
    """Chunks of 700 MiB each (a chunk index as the store would list it): the file passes
    4 GiB, so it is BigTIFF; the TIFF tiles, HDF5 chunk addresses and shard index agree."""
    store, ctx, reader, model = env
    case = corpus.BY_PATH["/u16be_zstd"]
    ds = model.resolve(case.path)
    real = ctx.catalog.chunk_index(ds)
    linear = np.array([0, 1, 2, 3, 5, 6, 7, 8, 9, 11], dtype=np.int64)  # 4 and 10 missing
    sizes = np.full(len(linear), 700 << 20, dtype=np.int64) + linear
    idx = ChunkIndex(real.dataset_id, real.prefix, real.grid, linear, sizes)
    pf = polyglot.plan_file(ds, None, case.name, "/big", idx, ctx.catalog.pipeline(ds))
    assert pf.big and pf.size > 1 << 32 and pf.chunk_offsets[-1] > 1 << 32
    # the metadata (every literal segment) into a sparse file; chunk bytes stay holes
    f = tmp_path / "huge.tif"
    with open(f, "wb") as out:
        for off, seg in zip(pf.vfile.offsets, pf.vfile.segments):
            if isinstance(seg, Literal):
                out.seek(off)
                out.write(seg.data)
        out.truncate(pf.size)
    big, toffs, tcounts = corpus.tiff_tiles(f)
    assert big
    np.testing.assert_array_equal(toffs, pf.tile_offsets)
    np.testing.assert_array_equal(tcounts, pf.tile_counts)
    assert toffs.max() > 1 << 32
    h5 = corpus.hdf5_chunks(f, case.name)
    assert h5 == {int(lin): (int(o), int(n)) for lin, o, n in zip(linear, pf.chunk_offsets, sizes)}
    with open(f, "rb") as fh:
        fh.seek(pf.index_at)
        tail = fh.read()
    index = corpus.shard_index(tail, 12)
    for lin in range(12):
        if lin in (4, 10):
            assert tuple(index[lin]) == (corpus.MISSING, corpus.MISSING)
            assert toffs[0, lin] == pf.fill_at  # TIFF: the one fill tile
        else:
            assert (int(index[lin][0]), int(index[lin][1])) == h5[lin] == (int(toffs[0, lin]), int(tcounts[0, lin]))
