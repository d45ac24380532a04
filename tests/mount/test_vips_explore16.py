"""The TIFF view as libvips and ImageMagick users use it (pathology, microscopy, remote sensing),
on a real mount, exploratory round 16: what it found and what now holds.

- ``vips tiffsave stack.tif[n=-1] MNT/tiff/d/x.tif --tile --pyramid --subifd`` of a stack that
  tifffile wrote (libvips copies its shaped description onto every page and level, and tifffile
  then takes each level for an image of its own) was refused with ``EOPNOTSUPP``; libvips ignores
  ``close()``'s error, so ``vips`` exited 0 and the image was lost. The stack is stored now, its
  levels dropped with one log line;
- what already held, pinned: ``vips tiffsave`` in every compression libvips writes (none,
  deflate, lzw, zstd, jpeg, webp, with predictors), BigTIFF, pyramids as pages or SubIFDs,
  8/16-bit, float, RGB(A); ImageMagick ``convert`` tiled or stripped, 16-bit, float, multi-page,
  alpha, CMYK, palette, bilevel; each reads back through the mount as the same file written to a
  disk reads (tifffile, ``hdf5/``, ``zarr/``, ``compare -metric AE``), and libvips and
  ImageMagick read the view's own files (``vips avg``/``crop``, ``identify``);
- every ``convert`` into ``tiff/`` logged "flush refused (EINVAL): not a TIFF file" (its first
  open of the output closes it empty); a new file closed before it is written is refused quietly now.
"""
from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")

needs_vips = pytest.mark.skipif(shutil.which("vips") is None, reason="needs libvips-tools")
# /usr/local/bin/convert may be a stand-in without ImageMagick: identify and compare are not
needs_magick = pytest.mark.skipif(shutil.which("identify") is None or shutil.which("compare") is None
                                  or shutil.which("convert") is None, reason="needs ImageMagick")

RNG = np.random.default_rng(16)
GREY8 = RNG.integers(0, 255, (96, 136)).astype("u1")
GREY16 = RNG.integers(0, 65535, (96, 136)).astype("u2")
FLOAT = RNG.random((96, 136)).astype("f4")
RGB = RNG.integers(0, 255, (96, 136, 3)).astype("u1")
RGBA = RNG.integers(0, 255, (96, 136, 4)).astype("u1")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


@pytest.fixture
def sources(tmp_path) -> Path:
    """The pictures users start from, as files on a disk (no description: a camera's, a scanner's)."""
    d = tmp_path / "src"
    d.mkdir()
    for name, a, kw in (("g8", GREY8, {}), ("g16", GREY16, {}), ("f32", FLOAT, {}),
                        ("rgb", RGB, {"photometric": "rgb"}),
                        ("rgba", RGBA, {"photometric": "rgb", "extrasamples": ["unassalpha"]})):
        tifffile.imwrite(d / f"{name}.tif", a, metadata=None, **kw)
    return d


def run(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{cmd}: {res.stderr}"


def read(path: Path) -> tuple[np.ndarray, dict]:
    with warnings.catch_warnings(), tifffile.TiffFile(path) as t:
        warnings.simplefilter("ignore")
        key = t.series[0].keyframe
        return t.series[0].asarray(), {"photometric": key.photometric.name, "extrasamples": tuple(key.extrasamples),
                                       "dtype": str(key.dtype)}


def same_as_on_disk(m, disk: Path, name: str) -> None:
    """The mount's file reads as the same file written to a disk does, and so does its dataset
    in ``hdf5/`` and ``zarr/``."""
    want, want_meta = read(disk)
    got, got_meta = read(m.path / "tiff" / "exp" / f"{name}.tif")
    assert got_meta == want_meta, name
    np.testing.assert_array_equal(got, want, err_msg=name)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f[name][...], want, err_msg=name)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "exp.zarr" / name), mode="r")[...], want,
                                  err_msg=name)


def levels_said(m, name: str) -> list[str]:
    return [ln for ln in m.log.read_text().splitlines() if "reduced-resolution" in ln and f"/{name}.tif" in ln]


# -- 1. a pyramid of a tifffile stack ----------------------------------------------------------------
@needs_vips
def test_vips_pyramid_of_a_tifffile_stack_keeps_every_page(mount_store, store, tmp_path):
    stack = RNG.integers(0, 65535, (3, 96, 136)).astype("u2")
    tifffile.imwrite(tmp_path / "stack.tif", stack, photometric="minisblack")  # shaped description
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "pyr.tif"
    run(["vips", "tiffsave", f"{tmp_path / 'stack.tif'}[n=-1]", str(view), "--tile", "--tile-width", "32",
         "--tile-height", "32", "--pyramid", "--subifd", "--compression", "deflate", "--predictor", "horizontal"])
    assert view.exists()  # vips exits 0 whatever close() says: the file must be there
    np.testing.assert_array_equal(tifffile.imread(view), stack)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f["pyr"][...], stack)
    said = levels_said(m, "pyr")
    assert said and "3 reduced-resolution" in said[-1]  # 48x68, 24x34, 12x17: down to one 32x32 tile
    m.stop()
    deep_check(store)


# -- 2. vips tiffsave as users run it ---------------------------------------------------------------
VIPS_CASES = [
    ("g8", ["--tile", "--tile-width", "64", "--tile-height", "64", "--compression", "deflate"]),
    ("g16", ["--tile", "--tile-width", "32", "--tile-height", "32", "--compression", "lzw", "--predictor",
             "horizontal"]),
    ("g16", ["--tile", "--compression", "zstd", "--bigtiff"]),
    ("f32", ["--tile", "--tile-width", "64", "--tile-height", "64", "--compression", "deflate", "--predictor",
             "float"]),
    ("rgb", ["--tile", "--tile-width", "64", "--tile-height", "64", "--compression", "jpeg", "--Q", "90"]),
    ("rgba", ["--tile", "--compression", "webp", "--lossless"]),
    ("rgb", ["--compression", "lzw", "--predictor", "horizontal"]),  # strips
    ("g8", ["--tile", "--tile-width", "32", "--tile-height", "32", "--pyramid", "--compression", "jpeg"]),
    ("rgb", ["--tile", "--tile-width", "32", "--tile-height", "32", "--pyramid", "--subifd", "--bigtiff",
             "--compression", "deflate"]),
]


@needs_vips
def test_vips_tiffsave_reads_back_as_on_a_disk(mount_store, store, sources, tmp_path):
    m = mount_store(str(store))
    for i, (src, opts) in enumerate(VIPS_CASES):
        name = f"v{i}_{src}"
        disk = tmp_path / f"{name}.tif"
        run(["vips", "tiffsave", str(sources / f"{src}.tif"), str(disk), *opts])
        run(["vips", "tiffsave", str(sources / f"{src}.tif"), str(m.path / "tiff" / "exp" / f"{name}.tif"), *opts])
        same_as_on_disk(m, disk, name)
        if "--pyramid" in opts:
            assert levels_said(m, name), name
    m.stop()
    deep_check(store)


# -- 3. ImageMagick as users run it -----------------------------------------------------------------
MAGICK_CASES = [
    ("g8", ["-define", "tiff:tile-geometry=64x64", "-compress", "zip"]),
    ("g8", ["-define", "tiff:tile-geometry=32x32", "-compress", "lzw"]),
    ("g16", ["-depth", "16", "-define", "tiff:tile-geometry=64x64", "-compress", "none"]),
    ("f32", ["-define", "quantum:format=floating-point", "-depth", "32", "-compress", "zip"]),
    ("rgb", ["-compress", "lzw"]),
    ("rgba", ["-define", "tiff:tile-geometry=64x64", "-compress", "zip"]),
    ("rgb", ["-colorspace", "CMYK", "-define", "tiff:tile-geometry=32x32", "-compress", "zip"]),
    ("rgb", ["-colors", "16", "-type", "Palette"]),
    ("g8", ["-threshold", "50%", "-type", "Bilevel", "-compress", "group4"]),
]


@needs_magick
def test_imagemagick_convert_reads_back_as_on_a_disk(mount_store, store, sources, tmp_path):
    m = mount_store(str(store))
    for i, (src, opts) in enumerate(MAGICK_CASES):
        name = f"c{i}_{src}"
        disk = tmp_path / f"{name}.tif"
        view = m.path / "tiff" / "exp" / f"{name}.tif"
        run(["convert", str(sources / f"{src}.tif"), *opts, str(disk)])
        run(["convert", str(sources / f"{src}.tif"), *opts, str(view)])
        same_as_on_disk(m, disk, name)
        res = subprocess.run(["compare", "-metric", "AE", str(disk), str(view), "null:"], capture_output=True,
                             text=True, timeout=60)
        assert res.stderr.strip() == "0", (name, res.stderr)
    # a multi-page file: one stack of its pages
    run(["convert", str(sources / "g8.tif"), str(sources / "g8.tif"), "-compress", "zip",
         str(m.path / "tiff" / "exp" / "pages.tif")])
    np.testing.assert_array_equal(tifffile.imread(m.path / "tiff" / "exp" / "pages.tif"), np.stack([GREY8, GREY8]))
    # convert creates its output and closes it empty before writing it: no refusal for that
    assert not [ln for ln in m.log.read_text().splitlines() if "refused" in ln]
    m.stop()
    deep_check(store)


# -- 4. the view's files read by libvips and ImageMagick ---------------------------------------------
@needs_vips
def test_vips_reads_view_files(mount_store, tmp_path):
    src = tmp_path / "arrays.h5"
    with h5py.File(src, "w") as f:
        for name, a in (("g8", GREY8), ("g16", GREY16), ("f32", FLOAT)):
            f.create_dataset(name, data=a, chunks=(32, 32))
    from polyfs.importers import import_source

    out = tmp_path / "store"
    assert import_source(src, str(out), progress=False) == "/arrays.h5"
    m = mount_store(str(out))
    for name, a in (("g8", GREY8), ("g16", GREY16), ("f32", FLOAT)):
        view = m.path / "tiff" / "arrays" / f"{name}.tif"
        avg = subprocess.run(["vips", "avg", str(view)], capture_output=True, text=True, timeout=60, check=True)
        assert float(avg.stdout) == pytest.approx(float(a.astype("f8").mean()), rel=1e-6), name
        crop = tmp_path / f"{name}_crop.tif"
        run(["vips", "crop", str(view), str(crop), "10", "20", "50", "40"])
        np.testing.assert_array_equal(tifffile.imread(crop), a[20:60, 10:60])
    if shutil.which("identify"):
        out16 = subprocess.run(["identify", "-format", "%w %h %z", str(m.path / "tiff" / "arrays" / "g16.tif")],
                               capture_output=True, text=True, timeout=60, check=True)
        assert out16.stdout.split() == ["136", "96", "16"]
