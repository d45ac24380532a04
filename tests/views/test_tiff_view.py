"""Tier 2: the TIFF view, materialized and read by independent readers.

tifffile (series, pages, every tile decoded by hand from its offsets),
libtiff's ``tiffinfo -D`` and ``tiffcp``, and GDAL's checksums against a
tifffile-written reference of the same array.
"""
from __future__ import annotations

import shutil
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import tifffile

from polyfs.codecs.registry import BLOSC, DEFLATE, SHUFFLE, ZSTD, Filter
from polyfs.model import types as T
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store
from polyfs.formats import by_name
from polyfs.formats.tiff import view as tiff
from polyfs.formats.tiff import tiles as tifftiles
from support import make_ctx, materialize, read_node

BLOSC_LZ4 = Filter(BLOSC, (2, 2, 0, 0, 5, 1, 1))


@dataclass
class Case:
    name: str
    dtype: T.DType
    shape: tuple
    chunks: tuple
    filters: list
    zero_copy: bool
    fill: object = None
    hole: tuple | None = None  # a region left at the fill value (-> missing chunks)
    attrs: dict = field(default_factory=dict)
    group: str = ""


BOOL = T.BOOL
CASES = [
    Case("u16be_deflate_2d", T.IntType(2, False, ">"), (100, 130), (32, 48), [Filter(DEFLATE, (4,))], True,
         hole=(slice(0, 64), slice(0, 48))),
    Case("u8_zstd_3d", T.IntType(1, False), (5, 64, 80), (1, 32, 16), [Filter(ZSTD, (3,))], True,
         hole=(slice(1, 3), slice(0, 32), slice(0, 80))),
    Case("f32le_raw_deep", T.FloatType(4, "<"), (20, 48, 40), (8, 16, 32), [], True,
         hole=(slice(8, 16), slice(0, 48), slice(0, 40))),
    Case("f64be_blosc_cube", T.FloatType(8, ">"), (40, 70, 90), (32, 32, 32), [BLOSC_LZ4], False,
         hole=(slice(0, 32), slice(32, 64), slice(0, 90))),
    Case("i16be_deflate_4d", T.IntType(2, True, ">"), (3, 5, 64, 48), (1, 2, 16, 16), [Filter(DEFLATE, (6,))], False,
         hole=(slice(0, 1), slice(0, 5), slice(0, 64), slice(0, 48)), group="g/h"),
    Case("bool_deflate_2d", BOOL, (50, 70), (16, 32), [Filter(DEFLATE, (6,))], True),
    Case("u16le_odd_chunks", T.IntType(2, False, "<"), (300, 260), (100, 60), [Filter(DEFLATE, (1,))], False,
         fill=7, hole=(slice(0, 300), slice(0, 240))),
    Case("u16le_shuffle_deflate", T.IntType(2, False, "<"), (64, 64), (32, 32),
         [Filter(SHUFFLE, (2,)), Filter(DEFLATE, (4,))], False),
    Case("i8_raw_2d", T.IntType(1, True), (33, 47), (16, 16), [], True),
    Case("u32be_zstd_3d", T.IntType(4, False, ">"), (2, 32, 32), (1, 16, 32), [Filter(ZSTD, (1,))], True),
    Case("i32le_deflate_2d", T.IntType(4, True, "<"), (40, 40), (40, 40), [Filter(DEFLATE, (6,))], False),
    Case("i64be_deflate_3d", T.IntType(8, True, ">"), (3, 32, 32), (1, 16, 16), [Filter(DEFLATE, (6,))], True),
    Case("u64le_blosc_2d", T.IntType(8, False, "<"), (20, 30), (16, 16), [BLOSC_LZ4], False),
    Case("f16le_raw_2d", T.FloatType(2, "<"), (32, 48), (16, 16), [], True),
    Case("u16le_zstd_tile_bigger_than_image", T.IntType(2, False, "<"), (20, 30), (64, 64),
         [Filter(ZSTD, (3,))], True),
    Case("u8_deflate_6d", T.IntType(1, False), (2, 1, 2, 3, 16, 32), (1, 1, 1, 1, 16, 16),
         [Filter(DEFLATE, (6,))], True),
]
BY_NAME = {c.name: c for c in CASES}
OME_TYPES = {"b1", "u1", "u2", "u4", "i1", "i2", "i4", "f4", "f8"}


def make_array(case: Case, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = case.dtype.numpy()
    if dt.kind == "b":
        arr = rng.random(case.shape) > 0.5
    elif dt.kind == "f":
        arr = (rng.standard_normal(case.shape) * 100).astype(dt)
    else:
        info = np.iinfo(dt)
        lo, hi = max(int(info.min), -30000), min(int(info.max), 60000)
        # smooth + noise so deflate has something to do
        base = np.add.outer(np.arange(case.shape[-2]), np.arange(case.shape[-1])) % 200
        arr = (base + rng.integers(0, 50, case.shape)).clip(lo, hi).astype(dt)
    if case.hole is not None:
        arr[case.hole] = case.fill if case.fill is not None else 0
    return arr


def write_domain(cat, path: str, cases: list[Case]) -> dict[str, np.ndarray]:
    arrays = {}
    with DomainWriter(cat, path) as w:
        groups = {"": w.root}
        for case in cases:
            parent = w.root
            prefix = ""
            for part in [p for p in case.group.split("/") if p]:
                prefix += "/" + part
                if prefix not in groups:
                    groups[prefix] = w.add_group(parent, part)
                parent = groups[prefix]
            ds = w.add_dataset(parent, case.name, case.dtype, Shape("simple", case.shape), case.chunks,
                               case.filters, fill_value=case.fill)
            for k, (t, v) in case.attrs.items():
                w.set_attr_array(ds, k, t, np.asarray(v))
            arr = make_array(case)
            w.write_array(ds, arr, skip_fill=True)
            arrays[case.name] = arr
    return arrays


def tif_path(root: Path, case: Case) -> Path:
    return root.joinpath(*[p for p in case.group.split("/") if p], case.name + ".tif")


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """One store with every case, its TIFF view node and the view materialized on disk."""
    store = open_store("memory://tiff-view-tests")
    ctx, reader = make_ctx(store)
    arrays = write_domain(ctx.catalog, "/cases.h5", CASES)
    model = ctx.catalog.load("/cases.h5")
    node = tiff.domain_node(model, ctx, "cases")
    out = materialize(node, tmp_path_factory.mktemp("tiffview") / "cases", reader)
    return {"store": store, "ctx": ctx, "reader": reader, "arrays": arrays, "node": node, "root": out,
            "model": model}


def node_at(view, case: Case):
    node = view["node"]
    for part in [p for p in case.group.split("/") if p]:
        node = node.entries()[part]
    return node.entries()[case.name + ".tif"]


def decode_tile(data: bytes, compression: int) -> bytes:
    if compression == 1:
        return data
    if compression == 8:
        return zlib.decompress(data)
    if compression == 50000:
        return numcodecs.Zstd().decode(data)
    raise AssertionError(f"unexpected compression {compression}")


# -- tifffile ---------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_tifffile_reads_pages_and_tiles(view, case):
    arr = view["arrays"][case.name]
    path = tif_path(view["root"], case)
    raw = path.read_bytes()
    expect_dt = arr.dtype if arr.dtype != bool else np.dtype("u1")
    planes = arr.reshape(-1, *arr.shape[-2:]).view(expect_dt) if arr.dtype == bool else arr.reshape(-1, *arr.shape[-2:])
    with tifffile.TiffFile(path) as tif:
        assert tif.byteorder == (">" if arr.dtype.byteorder == ">" else "<")
        assert len(tif.pages) == planes.shape[0]
        series = tif.series[0]
        data = series.asarray()
        assert data.size == arr.size
        np.testing.assert_array_equal(data.reshape(arr.shape), arr.astype(expect_dt) if arr.dtype == bool else arr)
        ome = arr.ndim <= 5 and f"{arr.dtype.kind}{arr.dtype.itemsize}" in OME_TYPES
        assert tif.is_ome == ome
        assert tif.is_shaped == (not tif.is_ome)
        assert series.shape == arr.shape or not tif.is_ome
    with tifffile.TiffFile(path) as tif:  # fresh: series parsing turns pages into frames
        for i, page in enumerate(tif.pages):
            np.testing.assert_array_equal(page.asarray(), planes[i])
            assert page.is_tiled
            th, tw = page.tilelength, page.tilewidth
            assert th % 16 == 0 and tw % 16 == 0
            across = -(-arr.shape[-1] // tw)
            for t, (off, n) in enumerate(zip(page.dataoffsets, page.databytecounts)):
                tile = np.frombuffer(decode_tile(raw[off:off + n], page.compression), dtype=page.dtype.newbyteorder(tif.byteorder))
                assert tile.size == th * tw, "tiles are stored full size"
                tile = tile.reshape(th, tw)
                y, x = (t // across) * th, (t % across) * tw
                want = planes[i][y:y + th, x:x + tw]
                np.testing.assert_array_equal(tile[:want.shape[0], :want.shape[1]], want)


def test_zero_copy_cases_serve_stored_chunks(view):
    """TileOffsets/TileByteCounts ranges of zero-copy views equal the stored chunk objects."""
    cat = view["ctx"].catalog
    for case in CASES:
        ds = view["model"].resolve(f"{case.group}/{case.name}")
        idx = cat.chunk_index(ds)
        assert tifftiles.zero_copy(ds, idx, cat.pipeline(ds)) == case.zero_copy, case.name
        if not case.zero_copy or not tifftiles.served_as_stored(ds, cat.pipeline(ds)):
            continue
        raw = tif_path(view["root"], case).read_bytes()
        with tifffile.TiffFile(tif_path(view["root"], case)) as tif:
            seen = set()
            lead_chunks = ds.chunks[:-2]
            plane_bytes = ds.chunks[-2] * ds.chunks[-1] * ds.type.itemsize
            for p, page in enumerate(tif.pages):
                lead = np.unravel_index(p, ds.shape.dims[:-2]) if lead_chunks else ()
                for t, (off, n) in enumerate(zip(page.dataoffsets, page.databytecounts)):
                    r, c = divmod(t, -(-ds.shape.dims[-1] // ds.chunks[-1]))
                    coords = tuple(int(l) // lc for l, lc in zip(lead, lead_chunks)) + (r, c)
                    key = idx.key_of(coords)
                    if idx.size_of(idx.linear_of(coords)) < 0:
                        continue  # a fill tile
                    stored = view["store"].get(key)
                    if lead_chunks and any(lc > 1 for lc in lead_chunks):
                        k = int(np.ravel_multi_index([int(l) % lc for l, lc in zip(lead, lead_chunks)], lead_chunks))
                        stored = stored[k * plane_bytes:(k + 1) * plane_bytes]
                    assert raw[off:off + n] == stored, (case.name, p, t)
                    seen.add(key)
            assert seen == {idx.key(int(lin)) for lin in idx.linear}, case.name


def expected_fill_tiles(ds, idx, th: int, tw: int) -> set[tuple[int, int]]:
    """(page, tile) whose plane region overlaps no stored chunk, computed from the chunk grid."""
    dims, chunks = ds.shape.dims, ds.chunks
    across, down = -(-dims[-1] // tw), -(-dims[-2] // th)
    out = set()
    for p in range(int(np.prod(dims[:-2]))):
        lead = np.unravel_index(p, dims[:-2]) if len(dims) > 2 else ()
        lc = tuple(int(l) // c for l, c in zip(lead, chunks[:-2]))
        for t in range(across * down):
            r, c = divmod(t, across)
            rows = range(r * th // chunks[-2], min(-(-((r + 1) * th) // chunks[-2]), ds.grid[-2]))
            cols = range(c * tw // chunks[-1], min(-(-((c + 1) * tw) // chunks[-1]), ds.grid[-1]))
            if all(idx.size_of(idx.linear_of(lc + (i, j))) < 0 for i in rows for j in cols):
                out.add((p, t))
    return out


@pytest.mark.parametrize("case", [c for c in CASES if c.hole is not None], ids=lambda c: c.name)
def test_missing_chunks_share_one_fill_tile(view, case):
    ds = view["model"].resolve(f"{case.group}/{case.name}")
    idx = view["ctx"].catalog.chunk_index(ds)
    path = tif_path(view["root"], case)
    raw = path.read_bytes()
    with tifffile.TiffFile(path) as tif:
        first = tif.pages[0]
        th, tw, dt = first.tilelength, first.tilewidth, first.dtype.newbyteorder(tif.byteorder)
        where = {(p, t): (int(o), int(n)) for p, page in enumerate(tif.pages)
                 for t, (o, n) in enumerate(zip(page.dataoffsets, page.databytecounts))}
        compression = first.compression
    fills = expected_fill_tiles(ds, idx, th, tw)
    assert fills, "the hole must leave whole tiles without chunks"
    shared = {where[k] for k in fills}
    assert len(shared) == 1, "every missing tile points at one fill tile"
    (off, n), = shared
    assert sum(1 for v in where.values() if v == (off, n)) == len(fills), "only missing tiles use it"
    fill = np.frombuffer(decode_tile(raw[off:off + n], compression), dtype=dt)
    assert fill.size == th * tw and np.all(fill == (case.fill or 0))


# -- libtiff ----------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("tiffinfo") is None, reason="libtiff tools not installed")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_libtiff_tiffinfo_and_tiffcp(view, case, tmp_path):
    path = tif_path(view["root"], case)
    res = subprocess.run(["tiffinfo", "-D", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    assert res.stderr == "", res.stderr
    assert "warning" not in res.stdout.lower() and "error" not in res.stdout.lower()
    assert res.stdout.count("TIFF Directory at offset") == int(np.prod(case.shape[:-2]))
    out = tmp_path / "copy.tif"
    res = subprocess.run(["tiffcp", str(path), str(out)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    arr = view["arrays"][case.name]
    with tifffile.TiffFile(out) as tif:
        got = np.stack([p.asarray() for p in tif.pages])
    want = arr.reshape(-1, *arr.shape[-2:])
    np.testing.assert_array_equal(got, want.view("u1") if arr.dtype == bool else want)


# -- GDAL -------------------------------------------------------------------------
def gdal_checksums(path: Path, npages: int) -> list[str]:
    out = []
    for i in sorted({0, npages // 2, npages - 1}):
        target = str(path) if i == 0 else f"GTIFF_DIR:{i + 1}:{path}"
        res = subprocess.run(["gdalinfo", "-checksum", target], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "ERROR" not in res.stderr, res.stderr
        sums = [line.strip() for line in res.stdout.splitlines() if "Checksum=" in line]
        assert sums, res.stdout
        out.append(sums[0])
    return out


@pytest.mark.skipif(shutil.which("gdalinfo") is None, reason="GDAL not installed")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gdal_checksums_equal_reference(view, case, tmp_path):
    arr = view["arrays"][case.name]
    planes = arr.reshape(-1, *arr.shape[-2:])
    if arr.dtype == bool:
        planes = planes.view("u1")
    ref = tmp_path / "ref.tif"
    with tifffile.TiffWriter(ref) as w:
        for p in planes:
            w.write(p, contiguous=False, metadata=None)
    n = planes.shape[0]
    got = gdal_checksums(tif_path(view["root"], case), n)
    assert got == gdal_checksums(ref, n)
    assert any(s != "Checksum=0" for s in got), "pick pages with data"


# -- the view's shape -----------------------------------------------------------
def test_listing_has_only_image_datasets(tmp_path):
    store = open_store("memory://tiff-listing")
    ctx, reader = make_ctx(store)
    with DomainWriter(ctx.catalog, "/l.h5") as w:
        g = w.add_group(w.root, "grp")
        sub = w.add_group(g, "empty")
        w.add_dataset(sub, "vec", T.IntType(2, False), Shape("simple", (10,)))
        w.add_dataset(w.root, "text", T.StringType(8), Shape("simple", (4, 4)))
        w.add_dataset(w.root, "cmpd", T.CompoundType((("a", T.IntType(4, True)), ("b", T.FloatType(8)))),
                      Shape("simple", (4, 4)))
        w.add_dataset(w.root, "scalar", T.FloatType(4), Shape("scalar"))
        w.add_dataset(w.root, "zero", T.FloatType(4), Shape("simple", (0, 4)))
        img = w.add_dataset(g, "img", T.IntType(2, False), Shape("simple", (20, 20)), (16, 16))
        w.write_array(img, np.arange(400, dtype="<u2").reshape(20, 20))
        w.link_hard(w.root, "alias", img)
        w.link_soft(w.root, "soft", "/grp/img")
        w.link_soft(w.root, "dangling", "/nowhere")
    node = tiff.domain_node(ctx.catalog.load("/l.h5"), ctx, "l")
    fmt = by_name("tiff")
    assert fmt is not None and fmt.suffix == "" and fmt.kind == "dir"
    assert sorted(node.entries()) == ["alias.tif", "grp", "soft.tif"]
    assert sorted(node.entries()["grp"].entries()) == ["img.tif"]
    a = read_node(node.entries()["soft.tif"], reader)
    b = read_node(node.entries()["grp"].entries()["img.tif"], reader)
    assert a == b
    path = tmp_path / "img.tif"
    path.write_bytes(b)
    np.testing.assert_array_equal(tifffile.imread(path), np.arange(400, dtype="<u2").reshape(20, 20))


def test_describe_for_polyfs_info(view):
    cat = view["ctx"].catalog
    for case in CASES:
        ds = view["model"].resolve(f"{case.group}/{case.name}")
        text = tiff.describe(ds, cat.pipeline(ds))
        served = case.zero_copy and tifftiles.served_as_stored(ds, cat.pipeline(ds))
        assert (text == "zero-copy") == served, (case.name, text)
        if case.name == "i8_raw_2d":
            assert "uncompressed chunk plane of 256 bytes is not a whole number of KiB" in text
        assert tiff.serving(view["model"], view["ctx"], f"{case.group}/{case.name}") == text
    ds = view["model"].resolve("/f64be_blosc_cube")
    assert tiff.describe(ds, cat.pipeline(ds), level=6) == \
        "transcoded (blosc has no TIFF compression code; chunks are 32 planes deep) to deflate level 6"
    assert tiff.describe(ds, cat.pipeline(ds)).endswith("to uncompressed tiles")  # the default
