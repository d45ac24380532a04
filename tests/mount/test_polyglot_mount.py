"""Tier 3: polyglot files through a real FUSE mount (``polyfs mount``): one file read as
TIFF (tifffile, tiffinfo, tiffcp), HDF5 (h5py, h5dump, pyfive) and as the shard of a Zarr
v3 array (zarr-python, tensorstore); the TIFF view serves the same bytes; the chunk bytes
read through the mount at the offsets every format's index names are the stored objects."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile

from conftest import Mount, fuse_available
from polyfs.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "views"))
import polyglot_corpus as corpus  # noqa: E402

pytestmark = pytest.mark.mount
IDS = lambda c: c.path.strip("/").replace("/", "_")  # noqa: E731


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    return corpus.build_store(tmp_path_factory.mktemp("pgstore") / "store")


@pytest.fixture(scope="module")
def mounted(store_dir, tmp_path_factory):
    """One real ``polyfs mount`` of the store for the whole module (conftest's Mount)."""
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    base = tmp_path_factory.mktemp("pgmnt")
    (base / "mnt").mkdir()
    m = Mount(str(store_dir), base / "mnt", base / "polyfs.log", []).start()
    try:
        yield m
    finally:
        m.stop()


def root(mounted) -> Path:
    return mounted.path.joinpath("polyglot", *corpus.STEM)


def at(mounted, case, ext: str) -> Path:
    return root(mounted) / (case.path.lstrip("/") + ext)


def shard(mounted, case) -> Path:
    return at(mounted, case, ".zarr").joinpath("c", *("0" * len(case.shape)))


def test_listing_stat_and_one_file_under_every_name(mounted):
    top = root(mounted)
    names = [c.name for c in corpus.POLYGLOT if "/" not in c.path.strip("/")] + ["alias"]
    want = [n + ext for n in names for ext in (".tif", ".h5", ".zarr")] + ["g"]
    assert sorted(os.listdir(top)) == sorted(want)
    assert sorted(os.listdir(top / "g")) == sorted(n + ext for n in ("i32le_zstd_4d", "again")
                                                  for ext in (".tif", ".h5", ".zarr"))
    for c in corpus.POLYGLOT:
        names = [at(mounted, c, ".tif"), at(mounted, c, ".h5"), shard(mounted, c)]
        if c.filters or c.np_dtype.itemsize * c.chunks[-2] * c.chunks[-1] % 1024 == 0:
            # tiff/ shares it, unless uncompressed planes are not whole KiB (re-tiled there)
            names.append(mounted.path.joinpath("tiff", *corpus.STEM) / (c.path.lstrip("/") + ".tif"))
        sizes = {os.stat(p).st_size for p in names}
        blobs = {p.read_bytes() for p in names}
        assert len(blobs) == 1 and sizes == {len(next(iter(blobs)))}, c.path
        assert sorted(os.listdir(at(mounted, c, ".zarr"))) == ["c", "zarr.json"]


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_tifffile_through_the_mount(mounted, case):
    with tifffile.TiffFile(at(mounted, case, ".tif")) as t:
        assert t.is_ome and not t.is_bigtiff
        np.testing.assert_array_equal(t.series[0].asarray(), corpus.make_array(case))


@pytest.mark.skipif(shutil.which("tiffinfo") is None, reason="libtiff tools not installed")
@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_libtiff_through_the_mount(mounted, case, tmp_path):
    path = at(mounted, case, ".tif")
    res = subprocess.run(["tiffinfo", "-D", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "warning" not in res.stdout.lower() and "error" not in res.stdout.lower()
    out = tmp_path / "copy.tif"
    res = subprocess.run(["tiffcp", str(path), str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    arr = corpus.make_array(case)
    with tifffile.TiffFile(out) as t:
        got = np.stack([p.asarray() for p in t.pages])
    np.testing.assert_array_equal(got, arr.reshape(-1, *arr.shape[-2:]))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_h5py_through_the_mount(mounted, case):
    import h5py
    import hdf5plugin  # noqa: F401

    for ext in (".h5", ".tif"):  # the same file under both names
        with h5py.File(at(mounted, case, ext), "r") as f:
            assert f.userblock_size == 512
            np.testing.assert_array_equal(f[case.name][()], corpus.make_array(case))


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="HDF5 tools not installed")
@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_h5dump_through_the_mount(mounted, case):
    got = corpus.h5dump_values(at(mounted, case, ".h5"), "/" + case.name, case.np_dtype)
    np.testing.assert_array_equal(got, corpus.make_array(case).ravel().astype(np.float64))


@pytest.mark.parametrize("case", [c for c in corpus.POLYGLOT if c.hole is None], ids=IDS)
def test_pyfive_through_the_mount(mounted, case):
    import pyfive

    f = pyfive.File(io.BytesIO(at(mounted, case, ".h5").read_bytes()))  # pyfive 1.3: user blocks from bytes
    np.testing.assert_array_equal(f[case.name][()], corpus.make_array(case))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_zarr_python_through_the_mount(mounted, case):
    import zarr

    z = zarr.open_array(str(at(mounted, case, ".zarr")), mode="r")
    np.testing.assert_array_equal(z[...], corpus.make_array(case))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_tensorstore_through_the_mount(mounted, case):
    import tensorstore as ts

    t = ts.open({"driver": "zarr3", "kvstore": f"file://{at(mounted, case, '.zarr')}/"}, read=True).result()
    np.testing.assert_array_equal(t.read().result(), corpus.make_array(case))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_chunk_bytes_shared_through_the_mount(mounted, store_dir, case):
    """TIFF tiles, HDF5 chunk addresses and shard index entries are the same ranges of the
    mounted file, and those ranges are the chunk objects in the store directory."""
    corpus.check_shared_bytes(at(mounted, case, ".tif"), open_store(str(store_dir)), case)
    chunks = corpus.existing_chunks(open_store(str(store_dir)), case)
    h5 = corpus.hdf5_chunks(at(mounted, case, ".h5"), case.name)
    fd = os.open(shard(mounted, case), os.O_RDONLY)
    try:
        for lin, (off, n) in h5.items():  # pread of just that range through the shard's name
            assert os.pread(fd, n, off) == chunks[lin]
    finally:
        os.close(fd)


def test_non_polyglot_images_stay_plain_tiffs(mounted):
    tdir = mounted.path.joinpath("tiff", *corpus.STEM)
    for path in ("/u16_deflate", "/cube_zstd"):
        assert not (root(mounted) / (path.lstrip("/") + ".tif")).exists()
        f = tdir / (path.lstrip("/") + ".tif")
        assert b"\x89HDF" not in f.read_bytes()[:4096]
        with tifffile.TiffFile(f) as t:
            np.testing.assert_array_equal(t.series[0].asarray(), corpus.make_array(corpus.BY_PATH[path]))
    assert "Traceback" not in mounted.log_text()
