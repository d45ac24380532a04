"""Tier 1-2: transcoded TIFF groups made without copies, kept from measuring, cached across opens.

A group that is one chunk's planes is served as the decoded chunk itself; these
tests hold it byte for byte to the general region assembly (edges, short leading
dims, missing chunks, uncompressed sources) and to tifffile. Groups deflated to
measure a file (tiff_level > 0) serve the first read; a second open of an
unchanged file transcodes nothing (Operations awaited directly).
"""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from support import make_ctx, read_node

from polyfs.codecs.registry import BLOSC, DEFLATE, Filter
from polyfs.formats.tiff import tiles as tifftiles
from polyfs.formats.tiff import view as tiff
from polyfs.model import types as T
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fs"))
from writeharness import FS

U16 = T.IntType(2, False, "<")
U16BE = T.IntType(2, False, ">")
LZ4 = Filter(BLOSC, (2, 2, 2, 0, 5, 1, 0))


def volume(shape, dtype, seed=3):
    rng = np.random.default_rng(seed)
    return (np.add.outer(np.arange(shape[-2]), np.arange(shape[-1])) % 500 + rng.integers(0, 60, shape)).astype(dtype)


def write(ctx, name, arr, dtype, chunks, filters, skip_fill=False):
    with DomainWriter(ctx.catalog, "/t.h5") as w:
        ds = w.add_dataset(w.root, name, dtype, Shape("simple", arr.shape), chunks, filters)
        w.write_array(ds, arr, skip_fill=skip_fill)
    ctx.catalog.invalidate()


def plan_of(ctx, name, level=0):
    ds = ctx.catalog.load("/t.h5").resolve("/" + name)
    return tifftiles.TranscodePlan(ds, ctx.catalog.chunk_index(ds), ctx.catalog.pipeline(ds), level)


CASES = [
    # (shape, chunks, filters, zero-out region): edges along every axis, missing chunks
    ((40, 100, 72), (16, 32, 48), [Filter(DEFLATE, (4,))], (slice(0, 16), slice(32, 64), slice(0, 48))),
    ((5, 7, 64, 48), (2, 3, 32, 16), [LZ4], (slice(0, 2), slice(0, 3), slice(0, 32), slice(16, 32))),
    ((3, 6, 64, 64), (3, 4, 32, 32), [Filter(DEFLATE, (1,))], None),  # inner leading dim short at its edge
    ((9, 64, 80), (4, 32, 16), [], (slice(4, 8), slice(0, 32), slice(0, 16))),  # uncompressed: pages by range
    ((64, 48), (32, 16), [Filter(DEFLATE, (6,))], (slice(0, 32), slice(0, 16))),  # 2-D
]


@pytest.mark.parametrize("shape,chunks,filters,hole", CASES)
def test_whole_chunk_groups_are_the_region_bytes(shape, chunks, filters, hole):
    arr = volume(shape, "<u2")
    if hole is not None:
        arr[hole] = 0
    ctx, _ = make_ctx(open_store(f"memory://tiff-cache-eq-{len(shape)}-{chunks}-{len(filters)}"))
    write(ctx, "a", arr, U16, chunks, filters, skip_fill=True)
    plan = plan_of(ctx, "a")
    fast = 0
    for gid in range(plan.ngroups):
        if not plan.sources(gid):
            continue
        fast += plan._single_chunk(gid) is not None
        assert plan.produce_raw(ctx, gid) == plan.produce_region(ctx, gid).tobytes(), gid
    assert fast > 0  # the copy-free path was taken (and agreed with the region path)


def test_copy_free_groups_read_back_with_tifffile(tmp_path):
    arr = volume((2, 37, 64, 48), ">u2")
    arr[0, :16, :32, :16] = 0
    ctx, reader = make_ctx(open_store("memory://tiff-cache-tifffile"))
    write(ctx, "v", arr, U16BE, (1, 16, 32, 16), [Filter(DEFLATE, (3,))], skip_fill=True)
    node = tiff.domain_node(ctx.catalog.load("/t.h5"), ctx, "t").entries()["v.tif"]
    path = tmp_path / "v.tif"
    path.write_bytes(read_node(node, reader))
    with tifffile.TiffFile(path) as t:
        assert t.pages[0].compression == 1 and t.pages[0].tile == (32, 16)
        np.testing.assert_array_equal(t.series[0].asarray().reshape(arr.shape), arr)


def count_productions(monkeypatch) -> list[int]:
    """The groups ``TranscodePlan.produce_group`` makes from now on, in order."""
    made: list[int] = []
    real = tifftiles.TranscodePlan.produce_group

    def counted(self, ctx, gid):
        made.append(gid)
        return real(self, ctx, gid)

    monkeypatch.setattr(tifftiles.TranscodePlan, "produce_group", counted)
    return made


def test_measured_groups_serve_the_first_read_within_their_budget(monkeypatch):
    """tiff_level > 0: the stat deflates every group to size the file; the first groups
    (up to cache / KEEP_SHARE bytes) are handed to the first read, the rest made again."""
    arr = volume((32, 64, 64), "<u2")
    made = count_productions(monkeypatch)
    monkeypatch.setattr(tifftiles, "KEPT", tifftiles.KeptGroups())
    ctx, reader = make_ctx(open_store("memory://tiff-cache-kept"), tiff_deflate_level=1, transcode_cache_bytes=0)
    write(ctx, "k", arr, U16, (16, 32, 32), [LZ4])
    plan = plan_of(ctx, "k", level=1)
    tiles = plan.tiles(ctx)  # no budget: nothing kept
    assert tifftiles.KEPT.used == 0
    run = tiles.segments[0]
    lengths = [int(n) for n in run.lengths]
    budget = sum(lengths[:3])  # room for the first three groups only
    ctx.options.transcode_cache_bytes = budget * tifftiles.KEEP_SHARE
    tiles = plan.tiles(ctx)  # measured again, now keeping groups
    assert tifftiles.KEPT.used == budget
    run = tiles.segments[0]
    made.clear()
    first = [reader.produced(run.producer(i)) for i in range(len(run.gids))]
    assert made == [int(g) for g in run.gids[3:]]  # the kept three were not made again
    assert tifftiles.KEPT.used == 0
    fresh = [plan.produce_group(ctx, int(g)) for g in run.gids]
    assert first == fresh  # kept bytes are the bytes a production makes (libdeflate is deterministic)


def test_kept_groups_are_bounded_oldest_first():
    kept = tifftiles.KeptGroups()
    kept.resize(10)
    kept.put("a", b"1234")
    kept.put("b", b"5678")
    kept.put("c", b"90ab")  # over 10: "a" goes
    assert kept.take("a") is None and kept.used == 8
    kept.put("huge", b"x" * 11)  # larger than the whole budget: not kept
    assert kept.take("huge") is None
    assert kept.take("b") == b"5678" and kept.take("b") is None and kept.used == 4
    kept.resize(0)
    assert kept.used == 0 and kept.take("c") is None


def test_transcoded_tiles_are_cached_across_opens(monkeypatch):
    """A second open of an unchanged transcoded TIFF is served from the reader's cache
    (same layout, same keys): nothing is decoded again, even after another domain changed."""
    made = count_productions(monkeypatch)
    url = "memory://tiff-cache-opens"
    ctx, _ = make_ctx(open_store(url))
    arr = volume((32, 96, 64), "<u2")
    write(ctx, "cube", arr, U16, (16, 32, 32), [Filter(DEFLATE, (5,))])
    fs = FS(url, read_only=True, cache_mb=64, domain_ttl=0)
    try:
        path = "tiff/t/cube.tif"
        first = fs.read_file(path)
        groups = len(made)
        assert groups == len(set(made)) == 2 * 3 * 2, "the first open transcodes each group once"
        with DomainWriter(ctx.catalog, "/more.h5") as w:  # a new domain beside it (another writer)
            w.add_dataset(w.root, "p", U16, Shape("simple", (4, 32, 32)), (1, 32, 32), [])
        fs.ops.bump()  # the views may have re-rendered: the file's node is resolved again
        made.clear()
        assert fs.read_file(path) == first
        assert made == []
        with tifffile.TiffFile(io.BytesIO(first)) as tif:
            np.testing.assert_array_equal(tif.series[0].asarray(), arr)
    finally:
        fs.close()


def test_kept_groups_are_bounded_and_forgotten_when_unread():
    """Groups deflated while sizing wait for the first read only so long: a stat-only walk
    or a re-planned dataset leaves nothing pinned."""
    import time

    from polyfs.formats.tiff.tiles import KeptGroups

    kept = KeptGroups(life=0.2)
    kept.resize(100)
    kept.put(("tiff-tiles", "d-1", 1, 0, 40), b"a" * 40)
    kept.put(("tiff-tiles", "d-1", 1, 1, 40), b"b" * 40)
    kept.put(("tiff-tiles", "d-2", 7, 0, 40), b"c" * 40)  # over capacity: the oldest goes
    assert kept.used == 80 and kept.take(("tiff-tiles", "d-1", 1, 0, 40)) is None
    kept.drop_dataset("d-1")  # a new plan of d-1: its old groups can never be read
    assert kept.used == 40 and kept.take(("tiff-tiles", "d-1", 1, 1, 40)) is None
    time.sleep(0.3)
    assert kept.take(("tiff-tiles", "d-2", 7, 0, 40)) is None and kept.used == 0  # expired unread
    kept.put(("tiff-tiles", "d-2", 8, 0, 40), b"d" * 40)
    assert kept.take(("tiff-tiles", "d-2", 8, 0, 40)) == b"d" * 40 and kept.used == 0
