"""The TIFF view's ingester on its own (no FUSE): a tile rewritten in the view's file is read,
the tiles the writer never touched are not (neither from the written file nor from the view's
file it was opened over), and only the chunks the changed tile overlaps are stored anew."""
from __future__ import annotations

import io
import zlib
from pathlib import Path

import numpy as np
import pytest
from support import make_ctx, read_node

from polyfs.formats.tiff import FORMAT
from polyfs.formats.tiff.ingest import make_ingester
from polyfs.formats.tiff.view import domain_node
from polyfs.importers import import_source
from polyfs.store import open_store
from polyfs.writes.router import Target

h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")


class _Recording:
    """Reads of some bytes, recorded as (offset, size)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self, off: int, n: int) -> bytes:
        self.reads.append((off, n))
        return self.data[off:off + n]


class _Written:
    """A file written over the view's file ``base``: its bytes now are ``data``."""

    based = True

    def __init__(self, base: bytes, data: bytes) -> None:
        self.base = _Recording(base)
        self.now = _Recording(data)
        diff = np.zeros(max(len(base), len(data)) + 1, dtype=bool)
        common = min(len(base), len(data))
        diff[:common] = np.frombuffer(base[:common], np.uint8) != np.frombuffer(data[:common], np.uint8)
        diff[common:] = True
        self._touched = np.concatenate([[0], np.cumsum(diff)])

    def size(self) -> int:
        return len(self.now.data)

    def read(self, off: int, n: int) -> bytes:
        return self.now.read(off, n)

    def untouched(self, off: int, n: int) -> bool:
        end = off + n
        if off < 0 or end > len(self.base.data):
            return False
        return int(self._touched[end] - self._touched[off]) == 0


@pytest.fixture
def domain(tmp_path: Path):
    src = tmp_path / "exp.h5"
    rng = np.random.default_rng(3)
    want = {"gz": rng.random((3, 64, 64)).astype("float32"),
            "deep": rng.integers(0, 255, (4, 48, 48)).astype("uint8"),
            "odd": rng.integers(-999, 999, (2, 40, 40)).astype("int16")}
    with h5py.File(src, "w") as f:
        f.create_dataset("gz", data=want["gz"], chunks=(1, 32, 32), compression="gzip")
        f.create_dataset("deep", data=want["deep"], chunks=(2, 16, 16), compression="gzip")
        f.create_dataset("odd", data=want["odd"], chunks=(1, 20, 20), compression="gzip")
        sparse = f.create_dataset("sparse", shape=(64, 64), dtype="uint16", chunks=(32, 32), compression="gzip",
                                  fillvalue=5)
        sparse[0:32, 0:32] = 9  # three of four chunks never written
    want["sparse"] = np.full((64, 64), 5, "uint16")
    want["sparse"][0:32, 0:32] = 9
    store = tmp_path / "store"
    import_source(src, str(store), progress=False)
    ctx, reader = make_ctx(open_store(str(store)))
    return ctx, reader, want


def _tiles(data: bytes) -> dict[tuple[int, int], tuple[int, int]]:
    with tifffile.TiffFile(io.BytesIO(data)) as tif:
        return {(n, t): (int(o), int(c)) for n, p in enumerate(tif.pages)
                for t, (o, c) in enumerate(zip(p.dataoffsets, p.databytecounts))}


def _rewrite_tile(view: bytes, page: int, tile: int, raw: bytes) -> bytes:
    """libtiff's way: the new tile appended (in the page's compression), its offset and
    byte count entries rewritten."""
    buf = io.BytesIO(view)
    with tifffile.TiffFile(buf) as tif:
        p = tif.pages[page]
        offsets, counts = list(p.dataoffsets), list(p.databytecounts)
        data = zlib.compress(raw) if p.compression == 8 else raw
        at = len(view)
        buf.seek(at)
        buf.write(data)
        offsets[tile], counts[tile] = at, len(data)
        p.tags["TileOffsets"].overwrite(offsets)
        p.tags["TileByteCounts"].overwrite(counts)
    return buf.getvalue()


def _overlaps(reads: list[tuple[int, int]], span: tuple[int, int]) -> bool:
    lo, hi = span[0], span[0] + span[1]
    return any(o < hi and lo < o + n for o, n in reads)


@pytest.mark.parametrize("name,page,tile,tshape,chunks", [
    ("gz", 1, 2, (32, 32), [(1, 1, 0)]),  # deflate, zero-copy: the tile is the chunk
    ("deep", 3, 1, (64, 16), [(1, 0, 1), (1, 1, 1), (1, 2, 1)]),  # transcoded, whole-KiB tile: 3 chunks tall
    ("odd", 1, 0, (64, 48), [(1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]),  # one tile over 4 chunks, padded (whole KiB)
    ("sparse", 0, 3, (32, 32), [(1, 1)]),  # a missing chunk (its tile was the shared fill tile) written
])
def test_untouched_tiles_are_never_read(domain, name, page, tile, tshape, chunks):
    ctx, reader, want = domain
    model = ctx.catalog.load("/exp.h5")
    ds = model.resolve(f"/{name}")
    view = read_node(domain_node(model, ctx, "exp").entries()[f"{name}.tif"], reader)
    ty, tx = tshape
    with tifffile.TiffFile(io.BytesIO(view)) as tif:
        assert tif.pages[page].tile == tshape
        if name == "sparse":  # the missing chunks' tiles all point at one fill tile
            assert len(set(tif.pages[0].dataoffsets)) == 2
    dtype = want[name].dtype
    new = (np.arange(ty * tx) % 200).astype(dtype).reshape(ty, tx)
    written = _Written(view, _rewrite_tile(view, page, tile, new.tobytes()))
    t = Target(FORMAT, ["exp", f"{name}.tif"], "/exp.h5", model, model.root, "/", [f"{name}.tif"])
    changes = make_ingester(ctx).document_changes(t, written, f"tiff/exp/{name}.tif")
    assert not changes.objects and not changes.deletes and changes.created is None
    puts = changes.puts[ds.id]
    assert [c for c, _ in puts] == chunks
    stored = {c: fetch() for c, fetch in puts}  # what the commit would store
    old = _tiles(view)
    now = _tiles(written.now.data)
    for key, span in old.items():
        if key == (page, tile):
            continue
        assert now[key] == span
        assert not _overlaps(written.now.reads, span), key  # never read from the written file
        assert not _overlaps(written.base.reads, span), key  # nor from the view's file
    assert _overlaps(written.now.reads, now[(page, tile)])  # the changed tile was read
    pipe = ctx.catalog.pipeline(ds)
    expect = want[name].copy()
    r, c = divmod(tile, -(-want[name].shape[-1] // tx))
    plane = (expect[page] if expect.ndim == 3 else expect)[r * ty:(r + 1) * ty, c * tx:(c + 1) * tx]
    plane[...] = new[:plane.shape[0], :plane.shape[1]]
    for coords, data in stored.items():
        block = np.frombuffer(pipe.decode(data, ds.chunk_nbytes), dtype=ds.type.numpy()).reshape(ds.chunks)
        region = tuple(slice(i * k, (i + 1) * k) for i, k in zip(coords, ds.chunks))
        np.testing.assert_array_equal(block, expect[region])


def test_a_file_rewritten_unchanged_changes_nothing(domain):
    ctx, reader, _ = domain
    model = ctx.catalog.load("/exp.h5")
    view = read_node(domain_node(model, ctx, "exp").entries()["gz.tif"], reader)
    written = _Written(view, view)
    t = Target(FORMAT, ["exp", "gz.tif"], "/exp.h5", model, model.root, "/", ["gz.tif"])
    changes = make_ingester(ctx).document_changes(t, written, "tiff/exp/gz.tif")
    assert changes.is_empty()
    for span in _tiles(view).values():
        assert not _overlaps(written.now.reads + written.base.reads, span)


SEGMENT_CASES = [
    ("u2", (50, 37), {"rowsperstrip": 7}),
    ("i4", (3, 50, 37), {"rowsperstrip": 16, "byteorder": ">", "photometric": "minisblack"}),
    ("u1", (40, 30, 3), {"photometric": "rgb", "rowsperstrip": 9}),
    ("u1", (3, 40, 30), {"photometric": "rgb", "planarconfig": "separate", "rowsperstrip": 9}),
    ("u1", (3, 40, 30), {"photometric": "rgb", "planarconfig": "separate", "tile": (16, 16), "compression": "zlib"}),
    ("f4", (2, 45, 33), {"tile": (16, 16), "compression": "zlib", "predictor": True}),
    ("f8", (45, 33), {"rowsperstrip": 5, "compression": "lzw"}),
    ("u2", (50, 37), {}),
    ("u2", (4, 50, 37), {"photometric": "minisblack", "planarconfig": "separate", "rowsperstrip": 8}),
]


@pytest.mark.parametrize("dtype,shape,kw", SEGMENT_CASES)
def test_segment_regions_read_what_tifffile_reads(dtype, shape, kw):
    """Any region of a series, read segment by segment (uncompressed strips by row ranges), is
    what tifffile's whole-image read has there."""
    from polyfs.formats.tiff.segments import Segments
    from polyfs.formats.tiff.source import series_layout
    from polyfs.writes.protocol import BytesSource

    rng = np.random.default_rng(5)
    data = (rng.random(shape) * 200).astype(dtype)
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, **kw)
    src = _Recording(buf.getvalue())
    with tifffile.TiffFile(io.BytesIO(buf.getvalue())) as tif:
        lay = series_layout(tif, tif.series[0])
        segs = Segments.of(lay.pages, lay.key, lay.geo, lay.lead, lay.np_dtype, "x.tif")
        full = tif.asarray()
    assert lay.dims == full.shape
    for _ in range(25):
        region = []
        for d in lay.dims:
            a = int(rng.integers(0, d))
            region.append(slice(a, int(rng.integers(a + 1, d + 1))))
        np.testing.assert_array_equal(segs.read(BytesSource(src.data), tuple(region), "x.tif"), full[tuple(region)])
    if "compression" not in kw:  # uncompressed strips: a row range reads only those rows
        src.reads.clear()
        y = len(lay.lead) + sum(lay.geo.keep[:2])  # one row of the first page: every column (and sample)
        region = tuple(slice(0, 1) if i <= y else slice(0, d) for i, d in enumerate(lay.dims))
        np.testing.assert_array_equal(segs.read(src, region, "x.tif"), full[region])
        assert sum(n for _, n in src.reads) == segs.row_bytes > 0


def test_short_uncompressed_strips_are_refused(tmp_path):
    """An uncompressed strip whose byte count is short of its rows is an error (rows are read by
    range, never padded): the importer names the file."""
    import struct

    from polyfs.errors import SourceError

    buf = io.BytesIO()
    tifffile.imwrite(buf, np.arange(40 * 30, dtype="uint16").reshape(40, 30), rowsperstrip=10)
    data = bytearray(buf.getvalue())
    with tifffile.TiffFile(io.BytesIO(bytes(data))) as tif:
        tag = tif.pages[0].tags["StripByteCounts"]
        at, count, fmt = tag.valueoffset, tag.count, "H" if tag.dtype == 3 else "I"
        counts = list(tag.value)
    counts[2] -= 60  # strip 2 loses its last row
    struct.pack_into(f"<{count}{fmt}", data, at, *counts)
    src = tmp_path / "short.tif"
    src.write_bytes(bytes(data))
    with pytest.raises(SourceError, match="strip 2 is 540 bytes"):
        import_source(src, str(tmp_path / "store"), progress=False)
