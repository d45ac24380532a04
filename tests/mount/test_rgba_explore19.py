"""Readers on libtiff's RGBA interface (OpenCV, ``tiff2rgba``) over the TIFF view on a real mount,
exploratory round 19.

Files of a domain written through the mount are direct I/O: libtiff cannot map them, rounds its
raw read buffer up to 1 KiB and then refuses, in ``TIFFReadRGBATile``, an uncompressed tile of any
other size ("Invalid tile byte count for tile 0. Expected 256, got 1024"). OpenCV's ``imread`` gave
``None`` and ``tiff2rgba`` failed, on the mount only, for:

- an 8-bit image h5py wrote into ``hdf5/`` with ``shuffle=True, compression="gzip"`` in 16x16
  chunks (transcoded to uncompressed tiles that were exactly the 256-byte chunk plane), and a
  3-page stack of such chunks;
- a Zarr array written into ``zarr/`` with ``compressors=None`` in 16x16 chunks (its stored
  chunks served as they are, 256 bytes a tile for uint8, 512 for uint16);
- a domain imported with ``--codec none`` once anything was written to it through the mount.

The same tool on the same pixels written locally by tifffile read fine; so did a remount (mapped).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from support import deep_check, seeded_store

h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")
zarr = pytest.importorskip("zarr")
cv2 = pytest.importorskip("cv2")

RNG = np.random.default_rng(19019)
G8 = RNG.integers(0, 255, (40, 50), dtype="u1")
G16 = RNG.integers(0, 65535, (40, 50), dtype="u2")
STACK = RNG.integers(0, 255, (3, 40, 50), dtype="u1")


def _chunks(a: np.ndarray) -> tuple[int, ...]:
    return (16, 16) if a.ndim == 2 else (1, 16, 16)


def _tiff2rgba(path, out) -> np.ndarray | None:
    """What ``tiff2rgba`` makes of ``path`` (None if it fails); skipped where it is absent."""
    try:
        res = subprocess.run(["tiff2rgba", str(path), str(out)], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("tiff2rgba (libtiff-tools) not installed")
    return tifffile.imread(out) if res.returncode == 0 else None


def _same_as_local(mounted, data: np.ndarray, tmp_path) -> None:
    """OpenCV (imread, imreadmulti, colour imread) and tiff2rgba read the mounted file as they
    read a local tifffile file of the same pixels."""
    local = tmp_path / f"local_{os.path.basename(mounted)}"
    tifffile.imwrite(local, data, photometric="minisblack", tile=(16, 16))
    # OpenCV's colour read of 16-bit tiles differs with the tile shape in the last partial tile
    # (its own quirk, on local files too): compared for 8 bits only
    for flags in (cv2.IMREAD_UNCHANGED, cv2.IMREAD_COLOR)[:2 if data.dtype == np.uint8 else 1]:
        want = cv2.imread(str(local), flags)
        got = cv2.imread(str(mounted), flags)
        assert got is not None, f"OpenCV could not read {mounted} (it reads the local file)"
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(cv2.imread(str(mounted), cv2.IMREAD_UNCHANGED), data[0] if data.ndim == 3 else data)
    ok, pages = cv2.imreadmulti(str(mounted), flags=cv2.IMREAD_UNCHANGED)
    assert ok and len(pages) == (len(data) if data.ndim == 3 else 1)
    for page, plane in zip(pages, data if data.ndim == 3 else [data]):
        np.testing.assert_array_equal(page, plane)
    want = _tiff2rgba(local, tmp_path / "want.tif")
    got = _tiff2rgba(mounted, tmp_path / "got.tif")
    assert got is not None, f"tiff2rgba could not read {mounted}"
    # libtiff's RGBA reader garbles a 16-bit grey image's last partial tile column, differently
    # for each tile shape (local files too): compared left of it
    cols = data.shape[-1] if data.dtype == np.uint8 else data.shape[-1] // 16 * 16
    np.testing.assert_array_equal(got[:, :cols], want[:, :cols])


def test_opencv_and_tiff2rgba_read_what_h5py_wrote_with_shuffle(mount_store, tmp_path):
    store = seeded_store(tmp_path)
    m = mount_store(str(store))
    with h5py.File(m.path / "hdf5" / "exp.h5", "a") as f:
        for name, data in (("g8", G8), ("g16", G16), ("stack", STACK)):
            f.create_dataset(name, data=data, chunks=_chunks(data), shuffle=True, compression="gzip")
    for name, data in (("g8", G8), ("g16", G16), ("stack", STACK)):
        _same_as_local(m.path / "tiff" / "exp" / f"{name}.tif", data, tmp_path)
    m.stop()
    deep_check(store)


def test_opencv_and_tiff2rgba_read_an_uncompressed_zarr_array(mount_store, tmp_path):
    store = seeded_store(tmp_path)
    m = mount_store(str(store))
    group = zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="a")
    for name, data in (("g8", G8), ("g16", G16), ("stack", STACK)):
        arr = group.create_array(name, shape=data.shape, dtype=data.dtype, chunks=_chunks(data), compressors=None)
        arr[...] = data
    for name, data in (("g8", G8), ("g16", G16), ("stack", STACK)):
        _same_as_local(m.path / "tiff" / "exp" / f"{name}.tif", data, tmp_path)
        np.testing.assert_array_equal(tifffile.imread(m.path / "tiff" / "exp" / f"{name}.tif"), data)
    m.stop()
    deep_check(store)


def test_opencv_reads_an_uncompressed_import_once_the_domain_is_written(mount_store, tmp_path):
    src = tmp_path / "raw.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("g8", data=G8, chunks=(16, 16))
        f.create_dataset("stack", data=STACK, chunks=(1, 16, 16))
    store = tmp_path / "store"
    res = subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(store), "--codec", "none"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    m = mount_store(str(store))
    with h5py.File(m.path / "hdf5" / "raw.h5", "a") as f:
        f.attrs["note"] = "touched"  # the domain is now written through this mount: direct I/O
    _same_as_local(m.path / "tiff" / "raw" / "g8.tif", G8, tmp_path)
    _same_as_local(m.path / "tiff" / "raw" / "stack.tif", STACK, tmp_path)
    with h5py.File(m.path / "hdf5" / "raw.h5", "r") as f:
        np.testing.assert_array_equal(f["g8"][()], G8)
    m.stop()
    deep_check(store)
