"""Tier 2: sizes at stat time, transcoding determinism and caching, BigTIFF, metadata end to end."""
from __future__ import annotations

import shutil
import subprocess
import threading
import uuid
import xml.etree.ElementTree as ET

import numcodecs
import numpy as np
import pytest
import tifffile

from polyfs.codecs.registry import BLOSC, DEFLATE, ZSTD, Filter
from polyfs.model import types as T
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.reader import Reader
from polyfs.store import open_store
from polyfs.formats.tiff import image as tiffimage
from polyfs.formats.tiff import view as tiff
from polyfs.formats.tiff import meta as tiffmeta
from polyfs.formats.tiff import tiles as tifftiles
from support import make_ctx, read_node

U16BE = T.IntType(2, False, ">")


class CountingStore:
    """Delegates to a store and records every read of chunk data."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.reads: list[tuple[str, int | None]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._inner, name)

    @staticmethod
    def _is_chunk(key: str) -> bool:
        return "/d/" in key and not key.endswith(".json")

    def get(self, key):
        if self._is_chunk(key):
            with self._lock:
                self.reads.append((key, None))
        return self._inner.get(key)

    def get_range(self, key, start, length):
        if self._is_chunk(key):
            with self._lock:
                self.reads.append((key, length))
        return self._inner.get_range(key, start, length)

    def get_ranges(self, key, ranges):
        return [self.get_range(key, s, n) for s, n in ranges]


def smooth(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    base = np.add.outer(np.arange(shape[-2]), np.arange(shape[-1])) % 300
    return (base + rng.integers(0, 40, shape)).astype(dtype)


def one_dataset(name: str, arr: np.ndarray, dtype: T.DType, chunks, filters, attrs=None, skip_fill=False,
                **options):
    """A store holding /<name> and (ctx, reader, counting store, tiff node of the dataset)."""
    inner = open_store(f"memory://tiff-tc-{name}-{uuid.uuid4().hex}")  # id() is reused once arr is freed
    counting = CountingStore(inner)
    ctx, reader = make_ctx(counting, **options)
    with DomainWriter(ctx.catalog, "/x.h5") as w:
        ds = w.add_dataset(w.root, name, dtype, Shape("simple", arr.shape), chunks, filters)
        for k, (t, v) in (attrs or {}).items():
            w.set_attr_array(ds, k, t, np.asarray(v))
        w.write_array(ds, arr, skip_fill=skip_fill)
    counting.reads.clear()
    ctx.catalog.invalidate()
    model = ctx.catalog.load("/x.h5")
    node = tiff.domain_node(model, ctx, "x").entries()[name + ".tif"]
    return ctx, reader, counting, node


def test_stat_of_zero_copy_file_reads_no_chunk_data(tmp_path):
    arr = smooth((6, 64, 96), ">u2")
    ctx, reader, store, node = one_dataset("img", arr, U16BE, (1, 32, 32), [Filter(DEFLATE, (5,))])
    size = node.size()
    # at most the catalog's one 16-byte sniff of the first chunk (effective pipeline)
    assert all(n is not None and n <= 16 for _, n in store.reads), store.reads
    assert len(store.reads) <= 1
    data = read_node(node, reader)
    assert len(data) == size
    path = tmp_path / "img.tif"
    path.write_bytes(data)
    np.testing.assert_array_equal(tifffile.imread(path), arr)


def test_transcoded_size_is_measured_once_and_reads_are_deterministic(tmp_path):
    arr = smooth((40, 70, 90), ">f8")
    arr[:32, 32:64] = 0  # missing chunks
    blosc = Filter(BLOSC, (2, 2, 8, 0, 5, 1, 0))
    ctx, reader, store, node = one_dataset("vol", arr, T.FloatType(8, ">"), (32, 32, 32), [blosc], skip_fill=True,
                                           tiff_deflate_level=6)
    size = node.size()  # stat: transcodes to measure (deflated tiles only)
    n_chunks = len(ctx.catalog.chunk_index(ctx.catalog.load("/x.h5").resolve("/vol")))
    whole = [k for k, n in store.reads if n is None]
    assert sorted(set(whole)) == sorted(whole), "each chunk decoded once while measuring"
    assert len(whole) == n_chunks
    assert node.size() == size and node.vfile().size == size
    store.reads.clear()
    first = read_node(node, reader)
    assert len(first) == size
    assert store.reads == []  # the first read takes over the groups made while measuring
    store.reads.clear()
    again = read_node(node, reader)
    assert again == first and store.reads == []  # cached
    # after eviction (a fresh reader, empty cache) libdeflate gives identical bytes
    fresh = Reader(reader.ctx)
    assert read_node(node, fresh) == first
    path = tmp_path / "vol.tif"
    path.write_bytes(first)
    with tifffile.TiffFile(path) as tif:
        np.testing.assert_array_equal(tif.series[0].asarray(), arr)
        assert tif.pages[0].compression == 8 and tif.pages[0].tile == (32, 32)


def test_group_producer_checks_its_length():
    arr = smooth((2, 40, 40), "<u2")
    ctx, reader, store, node = one_dataset("g", arr, T.IntType(2, False), (2, 16, 16),
                                           [Filter(ZSTD, (3,))])
    vf = node.vfile()
    run = vf.segments[-1]
    assert isinstance(run, tifftiles.GroupRun)
    p = run.producer(0)
    assert p.produce(ctx) == p.produce(ctx)  # deterministic
    assert len(p.produce(ctx)) == p.length


def test_default_serves_uncompressed_tiles_without_measuring(tmp_path):
    """Level 0 (the default): a stat decodes nothing, a first read only decodes."""
    arr = smooth((3, 50, 60), "<u2")
    blosc = Filter(BLOSC, (2, 2, 2, 0, 5, 1, 0))
    ctx, reader, store, node = one_dataset("raw", arr, T.IntType(2, False), (3, 25, 30), [blosc])
    size = node.size()
    assert [n for _, n in store.reads if n is None] == []  # nothing decoded to size the file
    data = read_node(node, reader)
    assert len(data) == size
    path = tmp_path / "raw.tif"
    path.write_bytes(data)
    with tifffile.TiffFile(path) as tif:
        assert tif.pages[0].compression == 1
        np.testing.assert_array_equal(tif.series[0].asarray(), arr)


def test_tiles_straddling_chunk_edges(tmp_path, monkeypatch):
    monkeypatch.setattr(tifftiles, "MAX_TILE", 64)
    arr = smooth((2, 70, 90), "<i4")
    arr[:, :20, :25] = 0  # one missing chunk inside a straddling tile
    ctx, reader, store, node = one_dataset("odd", arr, T.IntType(4, True), (1, 20, 25),
                                           [Filter(DEFLATE, (3,))], skip_fill=True)
    data = read_node(node, reader)
    path = tmp_path / "odd.tif"
    path.write_bytes(data)
    with tifffile.TiffFile(path) as tif:
        assert tif.pages[0].tile == (32, 32)  # 20 and 25 rounded up to 32
        np.testing.assert_array_equal(tif.series[0].asarray(), arr)
    if shutil.which("tiffinfo"):
        res = subprocess.run(["tiffinfo", "-D", str(path)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and res.stderr == ""


def test_bigtiff_when_offsets_need_it(tmp_path, monkeypatch):
    monkeypatch.setattr(tiffimage, "BIGTIFF_AT", 4096)
    arr = smooth((4, 64, 64), ">u2")
    ctx, reader, store, node = one_dataset("big", arr, U16BE, (1, 32, 32), [Filter(DEFLATE, (1,))])
    data = read_node(node, reader)
    assert data[:4] == b"MM\x00\x2b"
    path = tmp_path / "big.tif"
    path.write_bytes(data)
    with tifffile.TiffFile(path) as tif:
        assert tif.is_bigtiff
        np.testing.assert_array_equal(tif.series[0].asarray(), arr)
    if shutil.which("tiffcp"):
        res = subprocess.run(["tiffinfo", "-D", str(path)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and res.stderr == ""
        out = tmp_path / "copy.tif"
        res = subprocess.run(["tiffcp", "-8", str(path), str(out)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and res.stderr == ""
        with tifffile.TiffFile(out) as tif:
            np.testing.assert_array_equal(np.stack([p.asarray() for p in tif.pages]), arr)


def test_small_file_stays_classic():
    arr = smooth((64, 64), "<u2")
    ctx, reader, store, node = one_dataset("s", arr, T.IntType(2, False), (32, 32), [Filter(DEFLATE, (1,))])
    assert read_node(node, reader)[:4] == b"II\x2a\x00"


def test_hsds_blosc_frames_under_a_deflate_declaration(tmp_path):
    """HSDS writes Blosc frames although the dataset says gzip: the view transcodes them."""
    arr = smooth((64, 48), "<u2")
    store = open_store("memory://tiff-hsds-blosc")
    ctx, reader = make_ctx(store, tiff_deflate_level=1)
    codec = numcodecs.Blosc(cname="zlib", clevel=5, shuffle=1)
    with DomainWriter(ctx.catalog, "/h.h5") as w:
        ds = w.add_dataset(w.root, "img", T.IntType(2, False), Shape("simple", arr.shape), (32, 48),
                           [Filter(DEFLATE, (6,))])
        for i in range(2):
            w.write_chunk(ds, (i, 0), codec.encode(np.ascontiguousarray(arr[i * 32:(i + 1) * 32])), crc32=0)
    ds = ctx.catalog.load("/h.h5").resolve("/img")
    assert ctx.catalog.pipeline(ds).ids == (BLOSC,)
    node = tiff.domain_node(ctx.catalog.load("/h.h5"), ctx, "h").entries()["img.tif"]
    path = tmp_path / "img.tif"
    path.write_bytes(read_node(node, reader))
    with tifffile.TiffFile(path) as tif:
        assert tif.pages[0].compression == 8
        np.testing.assert_array_equal(tif.asarray(), arr)


def test_axes_and_pixel_sizes_reach_the_readers(tmp_path):
    arr = smooth((2, 3, 4, 32, 48), "<u2")  # named (c, t, z, y, x): not the NGFF default order
    labels = T.StringType(None, "utf8")
    attrs = {"DIMENSION_LABELS": (labels, np.array(["c", "t", "z", "y", "x"], dtype=object)),
             "element_size_um": (T.FloatType(8), [1.0, 1.0, 2.5, 0.5, 0.25])}
    ctx, reader, store, node = one_dataset("hyper", arr, T.IntType(2, False), (1, 1, 1, 32, 48),
                                           [Filter(ZSTD, (3,))], attrs=attrs)
    path = tmp_path / "hyper.tif"
    path.write_bytes(read_node(node, reader))
    with tifffile.TiffFile(path) as tif:
        assert tif.is_ome
        s = tif.series[0]
        assert s.axes == "CTZYX" and s.shape == arr.shape
        np.testing.assert_array_equal(s.asarray(), arr)
        px = ET.fromstring(tif.ome_metadata).find(f"{{{tiffmeta.OME_NS}}}Image/{{{tiffmeta.OME_NS}}}Pixels")
        assert float(px.get("PhysicalSizeX")) == 0.25 and float(px.get("PhysicalSizeY")) == 0.5
        assert float(px.get("PhysicalSizeZ")) == 2.5 and px.get("PhysicalSizeXUnit") == "µm"
        page = tif.pages[0]
        assert page.tags["ResolutionUnit"].value == 3  # centimeter
        xr = page.tags["XResolution"].value
        assert xr[0] / xr[1] == pytest.approx(40000.0)  # 0.25 µm pixels
    if shutil.which("gdalinfo"):
        res = subprocess.run(["gdalinfo", str(path)], capture_output=True, text=True, timeout=60)
        assert "TIFFTAG_XRESOLUTION=40000" in res.stdout and "TIFFTAG_RESOLUTIONUNIT=3" in res.stdout


def test_undecodable_filter_leaves_the_image_out(caplog):
    """A dataset under a filter outside the table that no library here decodes is left out
    of the TIFF view with one log line naming the filter; the other images stay."""
    arr = smooth((32, 32), "<u2")
    ctx, reader, store, node = one_dataset("img", arr, T.IntType(2, False), (32, 32), [Filter(DEFLATE, (1,))])
    ds = ctx.catalog.load("/x.h5").resolve("/img")
    ds.filters = [{"class": "H5Z_FILTER_USER", "id": 65000, "name": "mystery", "parameters": [1]}]
    ctx.catalog.invalidate_dataset(ds.id)
    with caplog.at_level("WARNING"):
        entries = tiff.domain_node(ctx.catalog.load("/x.h5"), ctx, "x").entries()
        tiff.domain_node(ctx.catalog.load("/x.h5"), ctx, "x").entries()
    assert "img.tif" not in entries
    lines = [r.getMessage() for r in caplog.records if "65000" in r.getMessage()]
    assert len(lines) == 1 and "/img" in lines[0] and "mystery" in lines[0]
    assert tiff.describe(ds, ctx.catalog.pipeline(ds)).startswith("- (filter mystery (65000)")


@pytest.mark.parametrize("filters,chunks", [([Filter(ZSTD, (3,))], (1, 32, 32)), ([], (4, 16, 32))])
def test_polyglot_style_layout_from_stored_chunks(tmp_path, filters, chunks):
    """The layout-sharing API with stored chunks placed by the caller: TIFF header at 0,
    the rest of a 512-byte block free (HDF5's user block), chunks once, IFDs at the end."""
    arr = smooth((6, 64, 96), "<u2")
    ctx, reader, store, node = one_dataset("p", arr, T.IntType(2, False), chunks, filters)
    ds = ctx.catalog.load("/x.h5").resolve("/p")
    idx = ctx.catalog.chunk_index(ds)
    assert tifftiles.zero_copy(ds, idx, ctx.catalog.pipeline(ds))
    body = bytearray(512)
    at = np.zeros(ds.nchunks, dtype=np.int64)
    for lin in idx.linear:  # chunk bytes once, where the caller wants them
        at[lin] = len(body)
        body += store.get(idx.key(int(lin)))
    linear, plane = tifftiles.tile_sources(ds)
    plane_bytes = chunks[-2] * chunks[-1] * 2
    offsets = at[linear] + plane * plane_bytes
    sizes = idx.sizes[np.searchsorted(idx.linear, linear)]
    counts = np.full(linear.shape, plane_bytes) if not filters else sizes
    image = tiffimage.dataset_image(ds, None, "p", "/x.h5/p", tuple(chunks[-2:]), 50000 if filters else 1)
    big = tiffimage.needs_bigtiff(len(body) + tiffimage.tiff_metadata_size(image, False))
    base = len(body) + (-len(body)) % 8
    body += bytes(base - len(body))
    body += tiffimage.tiff_metadata(image, base, offsets, counts, big)
    head = tiffimage.tiff_header(image, big, first_ifd=base)
    body[:len(head)] = head
    path = tmp_path / "poly.tif"
    path.write_bytes(bytes(body))
    with tifffile.TiffFile(path) as tif:
        assert tif.is_ome
        np.testing.assert_array_equal(tif.series[0].asarray(), arr)
    if shutil.which("tiffinfo"):
        res = subprocess.run(["tiffinfo", "-D", str(path)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and res.stderr == ""
