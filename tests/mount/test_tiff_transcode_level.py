"""Tier 3: transcoded TIFFs through a real mount, deflated (tiff_level=1) and uncompressed.

At a deflate level the stat deflates every group to size the file and keeps the first
ones (a quarter of ``cache_mb``) for the first read; the cache here is small, so a
first read takes some groups over and makes the rest again, while later reads come
back from a cache that cannot hold the file. Every pass must give the same bytes,
which tifffile and libtiff read as the stored array. At level 0, a 16-plane-deep
chunk's tiles are served as the decoded chunk.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
import tifffile

from polyfs.codecs.registry import BLOSC, DEFLATE, Filter
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

pytestmark = pytest.mark.mount

SHAPE = (40, 256, 192)


def volume() -> np.ndarray:
    rng = np.random.default_rng(14)
    base = np.add.outer(np.arange(SHAPE[1]), np.arange(SHAPE[2])) % 700
    arr = (base + rng.integers(0, 90, SHAPE)).astype(">u2")
    arr[:16, :64, 64:128] = 0  # a missing chunk: the shared fill tile
    return arr


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tifflevel") / "store"
    cat = Catalog(open_store(str(path), create=True))
    u16 = T.IntType(2, False, ">")
    with DomainWriter(cat, "/lvl.h5") as w:
        for name, filters in (("deep", [Filter(DEFLATE, (6,))]), ("lz4", [Filter(BLOSC, (2, 2, 2, 0, 5, 1, 1))])):
            ds = w.add_dataset(w.root, name, u16, Shape("simple", SHAPE), (16, 64, 64), filters)
            w.write_array(ds, volume(), skip_fill=True)
    return path


def read_all(path, drop: bool = False) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        if drop:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        out = bytearray()
        while True:
            piece = os.read(fd, 1 << 20)
            if not piece:
                return bytes(out)
            out += piece
    finally:
        os.close(fd)


@pytest.mark.parametrize("level", [0, 1])
def test_transcoded_reads_repeat_and_decode(mount_store, store_dir, tmp_path, level):
    m = mount_store(str(store_dir), f"tiff_level={level},cache_mb=4")
    arr = volume()
    for name in ("deep", "lz4"):
        path = m.path / "tiff" / "lvl" / f"{name}.tif"
        size = os.stat(path).st_size
        first = read_all(path)
        again = read_all(path, drop=True)
        assert len(first) == size and again == first
        with tifffile.TiffFile(path) as t:
            page = t.pages[0]
            assert page.compression == (8 if level else 1) and page.tile == (64, 64)
            np.testing.assert_array_equal(t.series[0].asarray(), arr)
        if shutil.which("tiffinfo"):
            copy = tmp_path / f"{name}-{level}.tif"
            copy.write_bytes(first)
            res = subprocess.run(["tiffinfo", "-D", str(copy)], capture_output=True, text=True, timeout=120, check=False)
            assert res.returncode == 0 and "Error" not in res.stderr, res.stderr[-2000:]
