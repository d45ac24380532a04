"""Tier 2: uncompressed TIFF tiles are a whole number of KiB whatever the stored chunks, exploratory
round 19 (operations awaited directly).

libtiff's RGBA reader (OpenCV's ``cv2.imread``/``imreadmulti``, ``tiff2rgba``) refuses an
uncompressed tile whose size is not its raw read buffer's, which it rounds up to 1 KiB when it
cannot map the file, as in a domain written through the mount ("Invalid tile byte count for tile 0.
Expected 256, got 1024"). Round 18 re-tiled 1-bit pages and tiles that were not a chunk's plane,
but not:

- chunks stored uncompressed (``polyfs import --codec none``, a Zarr array written with
  ``compressors=None``) in 16x16 uint8 or uint16 planes, served as they are (through the polyglot
  file);
- transcoded chunks (shuffle+gzip, as h5py writes with ``shuffle=True``, or planes of 3-deep
  chunks) whose tile is exactly the chunk plane: 256-byte tiles.

Both are now re-tiled (taller tiles, whole KiB); compressed chunks are still served as stored.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from writeharness import FS

from polyfs.importers import import_source

tifffile = pytest.importorskip("tifffile")
h5py = pytest.importorskip("h5py")

RNG = np.random.default_rng(1919)
DATA = {
    "g8": RNG.integers(0, 255, (40, 50), dtype="u1"),
    "g16": RNG.integers(0, 65535, (40, 50), dtype="u2"),
    "stack": RNG.integers(0, 255, (3, 40, 50), dtype="u1"),
    "big": RNG.integers(0, 255, (64, 64), dtype="u1"),  # 32x32 planes: 1 KiB, stay as stored
}
CHUNKS = {"g8": (16, 16), "g16": (16, 16), "stack": (1, 16, 16), "big": (32, 32)}


def _source(path: Path, **filters) -> Path:
    with h5py.File(path, "w") as f:
        for name, data in DATA.items():
            f.create_dataset(name, data=data, chunks=CHUNKS[name], **filters)
    return path


def _pages(fs: FS, path: str) -> tuple[list[tuple[int, bool, list[int]]], np.ndarray]:
    """(compression, tiled, tile byte counts) per page, and the pixels."""
    with tifffile.TiffFile(io.BytesIO(fs.read_file(path))) as t:
        info = [(p.compression, p.is_tiled, [int(n) for n in p.databytecounts]) for p in t.pages]
        return info, t.asarray()


@pytest.mark.parametrize("codec", ["none", "deflate"])
def test_uncompressed_stored_chunks_are_served_in_whole_kib_tiles(tmp_path, codec):
    """``--codec none``: 16x16 uint8 planes were served as stored 256-byte tiles; now re-tiled.
    Deflated chunks stay the stored bytes (compressed tiles have no such rule)."""
    fs = FS()
    try:
        src = _source(tmp_path / "raw.h5")
        assert import_source(src, fs.url, codec=codec, progress=False) == "/raw.h5"
        for name, data in DATA.items():
            info, got = _pages(fs, f"tiff/raw/{name}.tif")
            np.testing.assert_array_equal(got, data)
            for compression, tiled, counts in info:
                assert tiled
                if codec == "none":
                    assert compression == 1
                    assert all(n % 1024 == 0 for n in counts), (name, counts)
                else:
                    assert compression == 8  # the stored deflate chunks, not re-tiled
        big = fs.read_file("tiff/raw/big.tif")
        if codec == "none":  # a whole-KiB plane is still the shared polyglot file
            assert big == fs.read_file("polyglot/raw/big.tif")
    finally:
        fs.close()


def test_transcoded_tiles_that_are_a_chunk_plane_are_whole_kib(tmp_path):
    """shuffle+gzip (h5py's ``shuffle=True``) has no TIFF code: transcoded to uncompressed tiles,
    which were the 16x16 chunk plane (256 bytes) when the tile equalled the chunk."""
    fs = FS()
    try:
        src = _source(tmp_path / "sh.h5", shuffle=True, compression="gzip")
        assert import_source(src, fs.url, progress=False) == "/sh.h5"
        for name, data in DATA.items():
            info, got = _pages(fs, f"tiff/sh/{name}.tif")
            np.testing.assert_array_equal(got, data)
            assert len(info) == (data.shape[0] if data.ndim == 3 else 1)
            for compression, _, counts in info:
                assert compression == 1 and all(n % 1024 == 0 for n in counts), (name, counts)
    finally:
        fs.close()


def test_info_says_why_uncompressed_planes_are_re_tiled(tmp_path):
    """``polyfs info`` no longer says "tiff zero-copy" for planes it re-tiles, and says why."""
    import subprocess
    import sys

    store = tmp_path / "store"
    assert import_source(_source(tmp_path / "raw.h5"), str(store), codec="none", progress=False) == "/raw.h5"
    out = subprocess.run([sys.executable, "-m", "polyfs", "info", str(store), "/raw.h5"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    views = {}
    name = None
    for line in out.stdout.splitlines():
        if line.startswith("/") and "dataset" in line:
            name = line.split()[0].lstrip("/")
        elif line.strip().startswith("views") and name:
            views[name] = line
    assert "tiff transcoded (uncompressed chunk plane of 256 bytes is not a whole number of KiB)" in views["g8"]
    assert "tiff transcoded (uncompressed chunk plane of 512 bytes" in views["g16"]
    assert "tiff zero-copy" in views["big"]
