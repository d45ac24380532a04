"""Writes through the TIFF view of a real mount: ``tiff/<stem>/<path>.tif``.

A new ``.tif`` (tifffile, ``tiffcp``, ``gdal_translate``) becomes a dataset at
that path; rewriting an existing dataset's file replaces its data (a resize
within its maximum shape); a tile rewritten in place changes only its chunk.
Every other view (zarr-python, tensorstore on N5, h5py, tifffile on the TIFF
view) and the store's own chunks then hold what the file says. Garbage,
bogus offsets and truncated files are refused and leave the store
byte-identical, with one log line naming the file.
"""
from __future__ import annotations

import errno
import io
import os
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")
tifffile = pytest.importorskip("tifffile")

DOMAIN = "/exp.h5"


def snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def make_source(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    want = {
        "zs": rng.integers(0, 60000, (64, 96)).astype("uint16"),  # zstd, zero-copy (a polyglot file)
        "gz": rng.random((3, 64, 64)).astype("float32"),  # deflate, zero-copy
        "raw": rng.integers(-30000, 30000, (64, 64)).astype("int16"),  # uncompressed, zero-copy
        "deep": rng.integers(0, 255, (4, 48, 48)).astype("uint8"),  # 2-plane chunks: transcoded tiles
        "ext": rng.integers(0, 1000, (40, 50)).astype("uint16"),  # unlimited first axis
    }
    with h5py.File(path, "w") as f:
        f.create_dataset("zs", data=want["zs"], chunks=(32, 32), **hdf5plugin.Zstd())
        f.create_dataset("gz", data=want["gz"], chunks=(1, 32, 32), compression="gzip")
        f.create_dataset("raw", data=want["raw"], chunks=(16, 16))
        f.create_dataset("deep", data=want["deep"], chunks=(2, 16, 16), compression="gzip")
        f.create_dataset("ext", data=want["ext"], chunks=(16, 16), maxshape=(None, 50), compression="gzip")
        f["gz"].attrs["unit"] = "um"
    return want


@pytest.fixture
def imported(tmp_path):
    src = tmp_path / "exp.h5"
    want = make_source(src)
    store = tmp_path / "store"
    assert import_source(src, str(store), codec="none", progress=False) == DOMAIN  # "raw" stays uncompressed
    return store, want


def catalog(store: Path):
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    return Catalog(open_store(str(store), read_only=True))


def model_dataset(store: Path, path: str):
    cat = catalog(store)
    return cat, cat.load(DOMAIN).resolve(path)


def model_array(store: Path, path: str) -> np.ndarray:
    from corpus import read_dataset

    cat, ds = model_dataset(store, path)
    return read_dataset(cat, ds)


def chunk_bytes(store: Path, path: str) -> dict[tuple[int, ...], bytes]:
    cat, ds = model_dataset(store, path)
    idx = cat.chunk_index(ds)
    return {tuple(int(x) for x in idx.coords_of(int(lin))): cat.store.get(idx.key(int(lin))) for lin in idx.linear}


def read_everywhere(m, name: str) -> dict[str, np.ndarray]:
    """The dataset ``name`` as each independent reader sees it."""
    out = {}
    out["zarr"] = zarr.open_array(str(m.path / "zarr" / "exp.zarr" / name), mode="r")[...]
    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "exp.n5" / name)}})
    out["n5"] = np.asarray(t.result().read().result()).T  # N5 lists axes fastest first
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        out["hdf5"] = f[name][()]
    out["tiff"] = tifffile.imread(m.path / "tiff" / "exp" / f"{name}.tif")
    return out


def assert_everywhere(m, store: Path, name: str, want: np.ndarray) -> None:
    got = read_everywhere(m, name)
    got["model"] = model_array(store, name)
    for reader, arr in got.items():
        assert arr.shape == want.shape, (reader, arr.shape, want.shape)
        assert arr.dtype.kind == want.dtype.kind and arr.dtype.itemsize == want.dtype.itemsize, (reader, arr.dtype)
        np.testing.assert_array_equal(arr, want, err_msg=reader)


def tiles_of(path: Path | bytes) -> dict[tuple[int, int], bytes]:
    """(page, tile) -> the tile's bytes as the file stores them."""
    data = path if isinstance(path, bytes) else Path(path).read_bytes()
    out = {}
    with tifffile.TiffFile(io.BytesIO(data)) as tif:
        for n, page in enumerate(tif.pages):
            for t, (off, cnt) in enumerate(zip(page.dataoffsets, page.databytecounts)):
                out[(n, t)] = data[off:off + cnt]
    return out


def refusal_lines(m, name: str) -> list[str]:
    return [ln for ln in m.log_text().splitlines() if name in ln]


# -- new files ------------------------------------------------------------------------------
NEW_CASES = {
    # name: (data, tifffile.imwrite keywords, stored as the TIFF's own tiles)
    "tiled_zlib": (np.random.default_rng(1).integers(0, 4000, (100, 90)).astype("uint16"),
                   {"tile": (32, 32), "compression": "zlib"}, True),
    "tiled_zstd": (np.random.default_rng(2).random((70, 64)).astype("float32"),
                   {"tile": (32, 64), "compression": "zstd"}, True),
    "strips": (np.random.default_rng(3).integers(-100, 100, (90, 70)).astype("int16"),
               {"rowsperstrip": 16}, False),
    "pages": (np.random.default_rng(4).integers(0, 255, (5, 48, 40)).astype("uint8"),
              {"tile": (16, 16), "compression": "zlib"}, True),
    "rgb": (np.random.default_rng(5).integers(0, 255, (40, 56, 3)).astype("uint8"),
            {"photometric": "rgb", "tile": (16, 16), "compression": "zlib"}, True),
    "big": (np.random.default_rng(6).integers(0, 1 << 30, (64, 48)).astype("int32"),
            {"bigtiff": True, "tile": (32, 16), "compression": "zlib"}, True),
}


@pytest.mark.parametrize("case", sorted(NEW_CASES))
def test_new_tiff_by_tifffile_is_a_dataset_in_every_view(mount_store, imported, case, tmp_path):
    if case == "tiled_zstd":
        pytest.importorskip("imagecodecs")
    store, _ = imported
    data, kw, as_tiles = NEW_CASES[case]
    m = mount_store(str(store))
    os.mkdir(m.path / "tiff" / "exp" / "grp")  # a new group, then a new image in it
    target = m.path / "tiff" / "exp" / "grp" / f"{case}.tif"
    tifffile.imwrite(target, data, **kw)
    assert_everywhere(m, store, f"grp/{case}", data)
    if kw.get("bigtiff"):
        local = tmp_path / "local.tif"
        tifffile.imwrite(local, data, **kw)
        assert local.read_bytes()[:4] == b"II+\x00"  # the file the tool wrote was a BigTIFF
    if as_tiles:
        # the tiles of a table codec are the chunks, byte for byte (the same write, to a local file)
        local = tmp_path / "local.tif"
        tifffile.imwrite(local, data, **kw)
        tiles = tiles_of(local)
        stored = chunk_bytes(store, f"grp/{case}")
        assert len(stored) == len(tiles)
        with tifffile.TiffFile(local) as tif:
            across = -(-tif.pages[0].imagewidth // tif.pages[0].tilewidth)
        for (n, t), raw in tiles.items():
            coords = ((n,) if data.ndim == 3 and case != "rgb" else ()) + divmod(t, across)
            if case == "rgb":
                coords += (0,)
            assert stored[coords] == raw, (n, t)
    _, ds = model_dataset(store, f"grp/{case}")
    assert ds.shape.array_shape == data.shape
    assert "resolution" in ds.attributes
    assert "not stored" not in m.log_text()


def test_imagej_hyperstack_keeps_its_metadata(mount_store, imported):
    store, _ = imported
    data = np.random.default_rng(8).integers(0, 4000, (2, 3, 2, 32, 24)).astype("uint16")  # TZCYX
    m = mount_store(str(store))
    os.makedirs(m.path / "tiff" / "exp" / "a" / "b")  # new groups, two levels deep
    tifffile.imwrite(m.path / "tiff" / "exp" / "a" / "b" / "hyper.tif", data, imagej=True, resolution=(2.0, 4.0),
                     metadata={"axes": "TZCYX", "spacing": 1.5, "unit": "um", "finterval": 0.25})
    assert_everywhere(m, store, "a/b/hyper", data)
    _, ds = model_dataset(store, "a/b/hyper")
    a = {k: v.value for k, v in ds.attributes.items()}
    assert a["axes"] == "TZCYX"
    assert a["imagej_channels"] == 2 and a["imagej_slices"] == 3 and a["imagej_frames"] == 2
    assert a["imagej_hyperstack"] is True
    assert a["imagej_spacing"] == 1.5 and a["imagej_unit"] == "um" and a["imagej_finterval"] == 0.25
    assert a["resolution"] == [2.0, 4.0]
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:  # attributes show in the other views
        assert f["a/b/hyper"].attrs["imagej_unit"] == "um"
    z = zarr.open_array(str(m.path / "zarr" / "exp.zarr" / "a" / "b" / "hyper"), mode="r")
    assert z.attrs["imagej_spacing"] == 1.5


@pytest.mark.parametrize("tool", ["tiffcp", "gdal_translate", "tiffcp-strips"])
def test_new_tiff_by_libtiff_tools(mount_store, imported, tmp_path, tool):
    strips = tool.endswith("-strips")
    tool = tool.removesuffix("-strips")
    exe = shutil.which(tool)
    if exe is None:
        pytest.skip(f"{tool} is not installed")
    store, _ = imported
    data = np.random.default_rng(9).integers(0, 60000, (300, 200)).astype("uint16")
    src = tmp_path / "src.tif"
    tifffile.imwrite(src, data)  # strips, uncompressed
    m = mount_store(str(store))

    def run(dst: Path) -> None:
        if tool == "tiffcp":
            layout = ["-r", "16"] if strips else ["-t", "-w", "64", "-l", "64"]
            cmd = [exe, "-c", "zip", *layout, str(src), str(dst)]
        else:
            cmd = [exe, "-q", "-of", "GTiff", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", "-co", "BLOCKXSIZE=128",
                   "-co", "BLOCKYSIZE=64", str(src), str(dst)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 0, res.stderr

    run(m.path / "tiff" / "exp" / "copied.tif")
    assert_everywhere(m, store, "copied", data)
    if strips:  # small deflate strips: decoded and stored in the default encoding and chunk rule
        from polyfs.importers.common import auto_chunks

        cat, ds = model_dataset(store, "copied")
        assert tuple(ds.chunks) == auto_chunks(data.shape, 2)
        assert cat.pipeline(ds).ids == (1,) and ds.type.numpy().byteorder in "<="  # tifffile's order kept
        return
    local = tmp_path / "local.tif"
    run(local)  # the same tool's output, locally: its tiles are the stored chunks
    tiles = tiles_of(local)
    stored = chunk_bytes(store, "copied")
    with tifffile.TiffFile(local) as tif:
        page = tif.pages[0]
        across = -(-page.imagewidth // page.tilewidth)
        assert page.compression == 8
    assert len(stored) == len(tiles)
    for (_, t), raw in tiles.items():
        assert stored[divmod(t, across)] == raw
    # the same tool over an existing dataset's file: its data replaced (a smaller extent)
    _, zs = model_dataset(store, "zs")
    smaller = np.random.default_rng(10).integers(0, 60000, (60, 90)).astype("uint16")
    tifffile.imwrite(src, smaller)
    run(m.path / "tiff" / "exp" / "zs.tif")
    assert_everywhere(m, store, "zs", smaller)
    _, after = model_dataset(store, "zs")
    if tool == "tiffcp":  # opened with O_TRUNC: the same dataset, its data replaced
        assert after.id == zs.id and after.chunks == zs.chunks and after.filters == zs.filters
    else:  # GDAL deletes an existing file before it creates one: rm, then a new dataset
        assert after.id != zs.id
    assert "not stored" not in m.log_text() and "refused" not in m.log_text()


def test_pages_written_one_by_one(mount_store, imported):
    """tifffile writes uncompressed pixels through a duplicated descriptor whose close flushes the
    file before that page's IFD exists: such flushes are refused (the file is incomplete; nothing is
    stored) without a log line each, the close of the finished file stores it. Each page its own
    series: one stack."""
    store, _ = imported
    m = mount_store(str(store))
    stack = np.random.default_rng(15).integers(0, 60000, (3, 40, 30)).astype("uint16")
    with tifffile.TiffWriter(m.path / "tiff" / "exp" / "stack.tif") as tw:
        for page in stack:
            tw.write(page, photometric="minisblack", contiguous=False)
    assert_everywhere(m, store, "stack", stack)
    smaller = stack[:, :20] + 1  # the same way over the existing dataset: it shrinks
    with tifffile.TiffWriter(m.path / "tiff" / "exp" / "stack.tif") as tw:
        for page in smaller:
            tw.write(page, photometric="minisblack", contiguous=False)
    assert_everywhere(m, store, "stack", smaller)
    assert refusal_lines(m, "tiff/exp/stack.tif") == []


# -- existing datasets ------------------------------------------------------------------------
def test_rewriting_an_existing_file_replaces_the_data(mount_store, imported):
    store, want = imported
    m = mount_store(str(store))
    _, before = model_dataset(store, "ext")
    grown = np.random.default_rng(12).integers(0, 9000, (70, 50)).astype(">u2")  # other byte order too
    tifffile.imwrite(m.path / "tiff" / "exp" / "ext.tif", grown, tile=(16, 16), compression="zlib")
    assert_everywhere(m, store, "ext", grown.astype("uint16"))
    _, after = model_dataset(store, "ext")
    assert after.id == before.id and after.chunks == before.chunks and after.filters == before.filters
    assert after.shape.maxdims == before.shape.maxdims
    # a smaller image (within any maximum shape) shrinks the dataset; strips are re-chunked as stored
    small = np.random.default_rng(13).integers(0, 60000, (40, 70)).astype("uint16")
    tifffile.imwrite(m.path / "tiff" / "exp" / "zs.tif", small, rowsperstrip=8)
    assert_everywhere(m, store, "zs", small)
    _, zs = model_dataset(store, "zs")
    assert tuple(zs.chunks) == (32, 32)
    assert sorted(chunk_bytes(store, "zs")) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    # a stack of pages over a stack
    deep = np.random.default_rng(14).integers(0, 255, (4, 48, 48)).astype("uint8")
    tifffile.imwrite(m.path / "tiff" / "exp" / "deep.tif", deep, compression="zlib", photometric="minisblack")
    assert_everywhere(m, store, "deep", deep)
    np.testing.assert_array_equal(model_array(store, "raw"), want["raw"])  # the others as they were


def test_rewrite_that_does_not_fit_is_refused(mount_store, imported):
    store, want = imported
    m = mount_store(str(store))
    before = snapshot(store)
    cases = {
        "beyond the maximum shape": np.zeros((40, 60), "uint16"),  # ext: (None, 50)
        "another data type": np.zeros((40, 50), "float32"),
        "another rank": np.zeros((2, 40, 50), "uint16"),
    }
    for why, data in cases.items():
        buf = io.BytesIO()
        tifffile.imwrite(buf, data, tile=(16, 16), compression="zlib")
        with pytest.raises(OSError) as ei, open(m.path / "tiff" / "exp" / "ext.tif", "wb") as f:
            f.write(buf.getvalue())
        assert ei.value.errno == errno.EINVAL, why
        assert snapshot(store) == before, why
    assert len(refusal_lines(m, "tiff/exp/ext.tif")) == len(cases), m.log_text()[-3000:]
    time.sleep(1)  # RELEASE is asynchronous: the refused file leaves the overlay
    assert_everywhere(m, store, "ext", want["ext"])


def _append_tile(f, page, t: int, data: bytes) -> None:
    """What libtiff does for a tile that grew: the new bytes at the end, the offset and count
    entries rewritten (tifffile's tag overwrite)."""
    fh = f.filehandle
    fh.seek(0, os.SEEK_END)
    at = fh.tell()
    fh.write(data)
    offsets, counts = list(page.dataoffsets), list(page.databytecounts)
    offsets[t], counts[t] = at, len(data)
    page.tags["TileOffsets"].overwrite(offsets)
    page.tags["TileByteCounts"].overwrite(counts)


def test_tile_rewritten_in_place_changes_only_its_chunk(mount_store, imported):
    store, want = imported
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp"
    # deflate, zero-copy: tile 2 of page 1 (chunk (1, 1, 0)) appended, its entries rewritten
    before = chunk_bytes(store, "gz")
    new = np.full((32, 32), 0.5, "<f4")
    with tifffile.TiffFile(view / "gz.tif", mode="r+b") as tif:
        assert tif.pages[1].compression == 8 and tif.pages[1].tile == (32, 32)
        _append_tile(tif, tif.pages[1], 2, zlib.compress(new.tobytes()))
    want["gz"][1, 32:64, 0:32] = 0.5
    after = chunk_bytes(store, "gz")
    assert sorted(after) == sorted(before)
    assert [c for c in after if after[c] != before[c]] == [(1, 1, 0)]
    assert zlib.decompress(after[(1, 1, 0)]) == new.tobytes()  # stored as written
    assert_everywhere(m, store, "gz", want["gz"])

    # uncompressed 16x16 int16 chunks (512 bytes) are served in whole-KiB 32x16 tiles (libtiff's
    # RGBA reader needs them): bytes written straight into one chunk's rows of a tile
    before = chunk_bytes(store, "raw")
    with tifffile.TiffFile(view / "raw.tif") as tif:
        page = tif.pages[0]
        th, tw = page.tile
        assert page.compression == 1 and (th, tw) == (32, 16)
        k = (16 // th) * -(-page.imagewidth // tw) + 1  # the tile holding rows 16:32, column 1
        off, cnt = page.dataoffsets[k] + (16 % th) * tw * 2, page.databytecounts[k]
        order = tif.byteorder
    patch = np.arange(256, dtype=f"{order}i2").reshape(16, 16)
    with open(view / "raw.tif", "r+b") as f:
        f.seek(off)
        f.write(patch.tobytes())
    assert cnt == th * tw * 2
    want["raw"][16:32, 16:32] = patch
    after = chunk_bytes(store, "raw")
    assert [c for c in after if after[c] != before[c]] == [(1, 1)]
    assert_everywhere(m, store, "raw", want["raw"])

    # transcoded tiles (chunks two planes deep, served uncompressed by default, whole-KiB
    # 64x16 tiles): the chunk is read, the plane laid over it; rows the tile rewrites unchanged
    # leave their chunks alone
    before = chunk_bytes(store, "deep")
    with tifffile.TiffFile(view / "deep.tif", mode="r+b") as tif:
        page = tif.pages[3]
        assert page.tile == (64, 16) and page.compression == 1
        tile = np.zeros((64, 16), "u1")
        tile[:48] = page.asarray()[:, 16:32]
        tile[16:32] = 7
        _append_tile(tif, page, 1, tile.tobytes())  # tile row 0, column 1
    want["deep"][3, 16:32, 16:32] = 7
    after = chunk_bytes(store, "deep")
    assert [c for c in after if after[c] != before[c]] == [(1, 1, 1)]
    assert_everywhere(m, store, "deep", want["deep"])
    assert "not stored" not in m.log_text()


def _libtiff():
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("tiff")
    if name is None:
        pytest.skip("libtiff is not installed")
    lib = ctypes.CDLL(name)
    lib.TIFFOpen.restype = ctypes.c_void_p
    lib.TIFFOpen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.TIFFSetDirectory.argtypes = [ctypes.c_void_p, ctypes.c_uint16]
    lib.TIFFWriteEncodedTile.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_ssize_t]
    lib.TIFFWriteEncodedTile.restype = ctypes.c_ssize_t
    lib.TIFFClose.argtypes = [ctypes.c_void_p]
    return lib


def test_libtiff_r_plus_rewrites_one_tile(mount_store, imported):
    """libtiff itself (TIFFOpen "r+", TIFFWriteEncodedTile, TIFFClose: the tile compressed by
    libtiff, the directory rewritten) changes exactly the chunk of that tile."""
    lib = _libtiff()
    store, want = imported
    m = mount_store(str(store))
    before = chunk_bytes(store, "gz")
    tif = lib.TIFFOpen(str(m.path / "tiff" / "exp" / "gz.tif").encode(), b"r+")
    assert tif
    assert lib.TIFFSetDirectory(tif, 2) == 1
    tile = np.full((32, 32), -2.5, "<f4")
    assert lib.TIFFWriteEncodedTile(tif, 3, tile.ctypes.data, tile.nbytes) == tile.nbytes
    lib.TIFFClose(tif)
    want["gz"][2, 32:64, 32:64] = -2.5
    after = chunk_bytes(store, "gz")
    assert [c for c in after if after[c] != before[c]] == [(2, 1, 1)]
    assert zlib.decompress(after[(2, 1, 1)]) == tile.tobytes()  # libtiff's deflate stream, stored as it is
    assert_everywhere(m, store, "gz", want["gz"])
    assert "refused" not in m.log_text()


def test_unchanged_rewrite_in_place_stores_nothing(mount_store, imported):
    store, _ = imported
    m = mount_store(str(store))
    before = snapshot(store)
    path = m.path / "tiff" / "exp" / "zs.tif"
    with tifffile.TiffFile(path, mode="r+b") as tif:  # a tag rewritten with its own value
        tif.pages[0].tags["ImageWidth"].overwrite(tif.pages[0].imagewidth)
    with open(path, "r+b") as f:  # a tile's bytes written back unchanged
        with tifffile.TiffFile(path) as tif:
            off, cnt = tif.pages[0].dataoffsets[1], tif.pages[0].databytecounts[1]
        f.seek(off)
        f.write(Path(path).read_bytes()[off:off + cnt])
    after = snapshot(store)
    changed = [k for k in after if before.get(k) != after[k]]
    assert not [k for k in changed if "/d/" in k and not k.endswith(".json")], changed
    # a whole file written back as it was read (tiles in the stored encoding): no chunk is rewritten
    raw = m.path / "tiff" / "exp" / "raw.tif"
    data = tifffile.imread(raw)
    with tifffile.TiffFile(raw) as tif:
        assert tif.pages[0].compression == 1
        order = tif.byteorder
    stamps = {p: p.stat().st_mtime_ns for p in store.rglob("*") if p.is_file() and "/d/" in str(p)}
    tifffile.imwrite(raw, data, tile=(16, 16), byteorder=order)
    assert {p: p.stat().st_mtime_ns for p in stamps if p.exists()} == stamps
    assert_everywhere(m, store, "raw", data)


# -- bad input ------------------------------------------------------------------------------
def _tiled_bytes(data: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, tile=(16, 16), compression="zlib")
    return buf.getvalue()


def _bogus_offsets(data: bytes) -> bytes:
    with tifffile.TiffFile(io.BytesIO(data)) as tif:
        tag = tif.pages[0].tags["TileOffsets"]
        at, count = tag.valueoffset, tag.count
    out = bytearray(data)
    struct.pack_into(f"<{count}I", out, at, *([0x7FFF0000] * count))
    return bytes(out)


def test_bad_files_are_refused_and_leave_the_store_as_it_was(mount_store, imported):
    store, want = imported
    m = mount_store(str(store))
    before = snapshot(store)
    good = _tiled_bytes(np.arange(48 * 48, dtype="uint16").reshape(48, 48))
    cases = {
        "garbage": os.urandom(4096),
        "bogus": _bogus_offsets(good),
        "truncated": good[: len(good) // 2],
        "empty-ifd": good[:8] + b"\0" * 64,
        "badtile": good[:-300] + os.urandom(300),  # the last tile's deflate stream broken
    }
    for i, (why, data) in enumerate(cases.items()):
        for name in (f"new{i}.tif", "ext.tif"):  # a new dataset, and over an existing one
            rel = f"tiff/exp/{name}"
            seen = len(refusal_lines(m, rel))
            with pytest.raises(OSError) as ei, open(m.path / rel, "wb") as f:
                f.write(data)
            assert ei.value.errno in (errno.EINVAL, errno.EIO, errno.EOPNOTSUPP), (why, name)
            assert snapshot(store) == before, (why, name)
            deadline = time.monotonic() + 30  # an incomplete file is logged at its release, after close()
            while len(refusal_lines(m, rel)) == seen and time.monotonic() < deadline:
                time.sleep(0.05)
            lines = refusal_lines(m, rel)
            assert len(lines) == seen + 1, (why, name, lines)
            time.sleep(0.3)
    # fsync reports the refusal too (and the close after it has nothing left to refuse)
    rel = "tiff/exp/synced.tif"
    fd = os.open(m.path / rel, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, cases["bogus"])
        with pytest.raises(OSError) as ei:
            os.fsync(fd)
        assert ei.value.errno == errno.EINVAL
    finally:
        os.close(fd)
    assert snapshot(store) == before
    assert len(refusal_lines(m, rel)) == 1, refusal_lines(m, rel)
    time.sleep(0.3)
    # a broken tile written in place over the view's file
    path = m.path / "tiff" / "exp" / "gz.tif"
    with tifffile.TiffFile(path) as tif:
        off, cnt = tif.pages[0].dataoffsets[0], tif.pages[0].databytecounts[0]
    with pytest.raises(OSError) as ei, open(path, "r+b") as f:
        f.seek(off + 2)
        f.write(os.urandom(cnt - 2))
    assert ei.value.errno in (errno.EINVAL, errno.EIO)
    assert snapshot(store) == before
    time.sleep(1)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "exp.zarr" / "gz"), mode="r")[...],
                                  want["gz"])
    assert sorted(os.listdir(m.path / "tiff" / "exp")) == ["deep.tif", "ext.tif", "gz.tif", "raw.tif", "zs.tif"]


# -- memory ---------------------------------------------------------------------------------
def _peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def test_a_big_single_strip_image_streams(mount_store, imported, tmp_path):
    """256 MiB of one uncompressed strip (tifffile's default layout) becomes a dataset while the
    daemon's peak memory grows by far less than the image (it is read a band of rows at a time)."""
    store, _ = imported
    h, w = 8192, 16384
    src = tmp_path / "big.tif"
    arr = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype="uint16", shape=(h, w))
    cols = np.arange(w, dtype=np.uint32)
    for y in range(0, h, 512):
        arr[y:y + 512] = ((np.arange(y, y + 512, dtype=np.uint32)[:, None] * 7 + cols[None, :]) % 65521)
    tifffile.imwrite(src, arr, rowsperstrip=h)  # one strip
    del arr
    os.unlink(tmp_path / "big.npy")
    with tifffile.TiffFile(src) as tif:
        assert len(tif.pages[0].dataoffsets) == 1
    m = mount_store(str(store), "write_buffer_mb=16")
    pid = m.daemon_pid()
    before = _peak_mib(pid)
    subprocess.run(["cp", str(src), str(m.path / "tiff" / "exp" / "big.tif")], check=True, timeout=600)
    grown = _peak_mib(pid) - before
    assert grown < 160, f"the daemon's peak memory grew by {grown:.0f} MiB for a 256 MiB image"
    z = zarr.open_array(str(m.path / "zarr" / "exp.zarr" / "big"), mode="r")
    assert z.shape == (h, w)
    for ys, xs in ((slice(0, 3), slice(0, 50)), (slice(4000, 4100), slice(9000, 9300)),
                   (slice(h - 2, h), slice(w - 70, w))):
        rows = np.arange(ys.start, ys.stop, dtype=np.uint32)[:, None]
        want = ((rows * 7 + np.arange(xs.start, xs.stop, dtype=np.uint32)[None, :]) % 65521).astype("uint16")
        np.testing.assert_array_equal(z[ys, xs], want)
    assert "not stored" not in m.log_text() and "refused" not in m.log_text()


def test_rm_of_a_tiff_deletes_its_dataset(mount_store, imported):
    """``rm tiff/<stem>/x.tif`` deletes dataset ``x`` (with its chunks) in every view; a name
    that shows no dataset is ENOENT."""
    store, _ = imported
    m = mount_store(str(store))
    from polyfs.model import keys

    prefix = keys.dataset_prefix(model_dataset(store, "gz")[1].id)
    assert any(k.startswith(prefix) for k in snapshot(store))
    os.unlink(m.path / "tiff" / "exp" / "gz.tif")
    assert "gz.tif" not in os.listdir(m.path / "tiff" / "exp")
    assert "gz" not in zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="r")
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        assert "gz" not in f and "zs" in f
    assert not any(k.startswith(prefix) for k in snapshot(store)), "its chunks are deleted"
    with pytest.raises(FileNotFoundError):
        os.unlink(m.path / "tiff" / "exp" / "nothing.tif")
