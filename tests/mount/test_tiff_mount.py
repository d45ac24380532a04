"""Tier 3: the TIFF view through a real FUSE mount, read by tifffile, libtiff and GDAL."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
import tifffile

from conftest import Mount, fuse_available
from polyfs.codecs.registry import BLOSC, DEFLATE, ZSTD, Filter
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

pytestmark = pytest.mark.mount

# name -> (type, shape, chunks, filters, zero-copy?)
DATASETS = {
    "deflate2d": (T.IntType(2, False, ">"), (100, 130), (32, 48), [Filter(DEFLATE, (4,))], True),
    "zstd3d": (T.FloatType(4, "<"), (6, 64, 80), (1, 32, 16), [Filter(ZSTD, (3,))], True),
    "cube": (T.FloatType(8, ">"), (40, 70, 90), (32, 32, 32), [Filter(BLOSC, (2, 2, 8, 0, 5, 1, 1))], False),
    "bool4d": (T.BOOL, (2, 3, 40, 50), (1, 1, 16, 32), [Filter(DEFLATE, (6,))], True),
    "odd": (T.IntType(2, True, "<"), (3, 300, 260), (1, 100, 60), [Filter(DEFLATE, (1,))], False),
}


def make(name: str) -> np.ndarray:
    dtype, shape = DATASETS[name][0], DATASETS[name][1]
    rng = np.random.default_rng(len(name))
    dt = dtype.numpy()
    if dt.kind == "b":
        return rng.random(shape) > 0.3
    base = np.add.outer(np.arange(shape[-2]), np.arange(shape[-1])) % 250
    arr = (base + rng.integers(0, 30, shape)).astype(dt)
    arr[(0,) * (len(shape) - 2) + (slice(0, 32), slice(0, 48))] = 0  # some missing chunks
    return arr


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiffstore") / "store"
    cat = Catalog(open_store(str(path), create=True))
    with DomainWriter(cat, "/lab/scan.h5") as w:
        grp = w.add_group(w.root, "raw")
        for name, (dtype, shape, chunks, filters, _) in DATASETS.items():
            ds = w.add_dataset(grp if name == "cube" else w.root, name, dtype, Shape("simple", shape), chunks,
                               filters)
            if name == "zstd3d":
                w.set_attr_array(ds, "element_size_um", T.FloatType(8), np.array([2.0, 0.5, 0.5]))
            w.write_array(ds, make(name), skip_fill=True)
    return path


def tif(mount, name: str):
    sub = "raw/" if name == "cube" else ""
    return mount.path / "tiff" / "lab" / "scan" / f"{sub}{name}.tif"


@pytest.fixture(scope="module")
def mounted(store_dir, tmp_path_factory):
    """One real ``polyfs mount`` of the store for the whole module (conftest's Mount)."""
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    base = tmp_path_factory.mktemp("tiffmnt")
    (base / "mnt").mkdir()
    m = Mount(str(store_dir), base / "mnt", base / "polyfs.log", []).start()
    try:
        yield m
    finally:
        m.stop()


def test_listing_and_sizes(mounted):
    root = mounted.path / "tiff" / "lab" / "scan"
    assert sorted(os.listdir(root)) == ["bool4d.tif", "deflate2d.tif", "odd.tif", "raw", "zstd3d.tif"]
    assert os.listdir(root / "raw") == ["cube.tif"]
    for name in DATASETS:
        st = os.stat(tif(mounted, name))
        with open(tif(mounted, name), "rb") as f:
            data = f.read()
        assert st.st_size == len(data) > 0
        assert data[:4] in (b"II*\x00", b"MM\x00*")


@pytest.mark.parametrize("name", list(DATASETS))
def test_tifffile_through_the_mount(mounted, name):
    arr = make(name)
    with tifffile.TiffFile(tif(mounted, name)) as t:
        assert t.is_ome
        s = t.series[0]
        assert s.shape == arr.shape
        np.testing.assert_array_equal(s.asarray(), arr.view("u1") if arr.dtype == bool else arr)
        if name == "zstd3d":
            assert t.pages[0].compression == 50000


@pytest.mark.skipif(shutil.which("tiffinfo") is None, reason="libtiff tools not installed")
@pytest.mark.parametrize("name", list(DATASETS))
def test_libtiff_through_the_mount(mounted, name, tmp_path):
    path = tif(mounted, name)
    res = subprocess.run(["tiffinfo", "-D", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "warning" not in res.stdout.lower() and "error" not in res.stdout.lower()
    out = tmp_path / "copy.tif"
    res = subprocess.run(["tiffcp", str(path), str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    arr = make(name)
    with tifffile.TiffFile(out) as t:
        got = np.stack([p.asarray() for p in t.pages])
    want = arr.reshape(-1, *arr.shape[-2:])
    np.testing.assert_array_equal(got, want.view("u1") if arr.dtype == bool else want)


@pytest.mark.skipif(shutil.which("gdalinfo") is None, reason="GDAL not installed")
@pytest.mark.parametrize("name", ["deflate2d", "cube", "odd"])
def test_gdal_through_the_mount(mounted, name, tmp_path):
    arr = make(name)
    planes = arr.reshape(-1, *arr.shape[-2:])
    ref = tmp_path / "ref.tif"
    with tifffile.TiffWriter(ref) as w:
        for p in planes:
            w.write(p, contiguous=False)
    last = planes.shape[0]

    def sums(path):
        out = []
        for target in (str(path), f"GTIFF_DIR:{last}:{path}"):
            res = subprocess.run(["gdalinfo", "-checksum", target], capture_output=True, text=True, timeout=120)
            assert res.returncode == 0 and "ERROR" not in res.stderr, res.stderr
            out.append([l.strip() for l in res.stdout.splitlines() if "Checksum=" in l])
        return out

    assert sums(tif(mounted, name)) == sums(ref)


def test_zero_copy_tiles_are_the_stored_chunks(mounted, store_dir):
    """Tile ranges read through the mount equal the chunk objects in the store directory."""
    cat = Catalog(open_store(str(store_dir)))
    ds = cat.load("/lab/scan.h5").resolve("/deflate2d")
    idx = cat.chunk_index(ds)
    path = tif(mounted, "deflate2d")
    with tifffile.TiffFile(path) as t, open(path, "rb") as f:
        page = t.pages[0]
        across = -(-ds.shape.dims[1] // ds.chunks[1])
        checked = 0
        for i, (off, n) in enumerate(zip(page.dataoffsets, page.databytecounts)):
            coords = divmod(i, across)
            if idx.size_of(idx.linear_of(coords)) < 0:
                continue
            f.seek(off)
            assert f.read(n) == (store_dir / idx.key_of(coords)).read_bytes()
            checked += 1
    assert checked == len(idx)
