"""TIFF view fidelity on a real mount: complex pixels, ``.tiff``/``.TIF`` names, pages appended
with ``tiffcp -a``, RGB images served as RGB (libtiff, GDAL, tifffile), datasets made through
the view that grow and shrink freely."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import seeded_store

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")

DOMAIN = "/exp.h5"


def snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*"))
            if p.is_file() and not str(p.relative_to(store)).startswith("polyfs")}


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def tiffinfo(path: Path) -> str:
    return subprocess.run(["tiffinfo", str(path)], capture_output=True, text=True, timeout=60).stdout


def refusals(m) -> list[str]:
    """Refusals in the log, but for tifffile's flush before its IFD exists (SEMANTICS.md)."""
    return [ln for ln in m.log_text().splitlines() if "refused" in ln and "still being written" not in ln]


def write(path: Path, data: np.ndarray, **kw) -> None:
    with open(path, "wb") as f:  # our own handle: close() reports a refusal
        tifffile.imwrite(f, data, **kw)


# -- 1. complex --------------------------------------------------------------------------------
def test_complex_tiff_keeps_its_imaginary_part_in_every_view(mount_store, store, tmp_path):
    data = (np.arange(24 * 20, dtype="f4").reshape(24, 20) + 1j * -np.arange(24 * 20).reshape(24, 20)
            ).astype("complex64")
    m = mount_store(str(store))
    write(m.path / "tiff" / "exp" / "cplx.tif", data)
    assert zarr.open_array(str(m.path / "zarr" / "exp.zarr" / "cplx"), mode="r")[...].tolist() == data.tolist()
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f["cplx"][()], data)
    view = m.path / "tiff" / "exp" / "cplx.tif"
    assert view.exists()
    with tifffile.TiffFile(view) as tif:
        assert int(tif.pages[0].sampleformat) == 6
        np.testing.assert_array_equal(tif.asarray(), data)
    assert "complex IEEE floating point" in tiffinfo(view)
    # the view's file written back as it is: same data, nothing refused
    local = tmp_path / "back.tif"
    shutil.copyfile(view, local)
    shutil.copyfile(local, view)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f["cplx"][()], data)
    assert not refusals(m), refusals(m)


def test_complex_tiff_import(tmp_path):
    data = (np.arange(16 * 8).reshape(16, 8) * (1 - 2j)).astype("complex128")
    src = tmp_path / "c.tif"
    tifffile.imwrite(src, data)
    out = tmp_path / "store"
    dom = import_source(src, str(out), progress=False)
    from corpus import read_dataset

    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    cat = Catalog(open_store(str(out), read_only=True))
    ds = cat.load(dom).resolve("/image")
    got = read_dataset(cat, ds)
    assert got.dtype.names == ("r", "i")
    np.testing.assert_array_equal(got["r"], data.real)
    np.testing.assert_array_equal(got["i"], data.imag)


# -- 2. .tiff / .TIF names ------------------------------------------------------------------------
def test_tiff_and_upper_case_names_are_stored_and_shown_as_tif(mount_store, store, tmp_path):
    data = np.arange(40 * 48, dtype="u2").reshape(40, 48)
    local = tmp_path / "small.tif"
    tifffile.imwrite(local, data)
    m = mount_store(str(store))
    d = m.path / "tiff" / "exp"
    shutil.copyfile(local, d / "a.tiff")
    shutil.copyfile(local, d / "b.TIF")
    shutil.copyfile(local, d / "c.Tiff")
    names = set(os.listdir(d))
    assert {"a.tif", "b.tif", "c.tif"} <= names and not {"a.tiff", "b.TIF", "c.Tiff"} & names
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        for name in "abc":
            np.testing.assert_array_equal(f[name][()], data)
    m.stop()
    m.start()
    assert {"a.tif", "b.tif", "c.tif"} <= set(os.listdir(d))


# -- 3. pages appended -----------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("tiffcp") is None, reason="needs libtiff-tools")
def test_tiffcp_append_grows_a_stack(mount_store, store, tmp_path):
    stack = np.full((3, 32, 32), 1, "u2")
    page = np.full((32, 32), 2, "u2")
    tifffile.imwrite(tmp_path / "s.tif", stack, tile=(16, 16), compression="zlib", photometric="minisblack")
    tifffile.imwrite(tmp_path / "p.tif", page, tile=(16, 16), compression="zlib")
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "stack.tif"
    shutil.copyfile(tmp_path / "s.tif", view)
    subprocess.run(["tiffcp", "-a", str(tmp_path / "p.tif"), str(view)], check=True, timeout=60)
    got = zarr.open_array(str(m.path / "zarr" / "exp.zarr" / "stack"), mode="r")[...]
    np.testing.assert_array_equal(got, np.concatenate([stack, page[None]]))
    assert tiffinfo(view).count("TIFF Directory") == 4


@pytest.mark.skipif(shutil.which("tiffcp") is None, reason="needs libtiff-tools")
def test_page_appended_to_a_single_image_is_refused(mount_store, store, tmp_path):
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "seed.tif"
    local = tmp_path / "seed.tif"
    shutil.copyfile(view, local)
    tifffile.imwrite(tmp_path / "p.tif", np.full((32, 32), 7, "u2"), tile=(16, 16), compression="zlib")
    subprocess.run(["tiffcp", "-a", str(tmp_path / "p.tif"), str(local)], check=True, timeout=60)
    before = snapshot(store)
    with pytest.raises(OSError) as exc:  # what tiffcp -a writes into the view's file, over it
        with open(view, "r+b") as f:
            f.write(local.read_bytes())
    assert exc.value.errno == errno.EINVAL
    assert snapshot(store) == before
    lines = [ln for ln in m.log_text().splitlines() if "seed.tif" in ln and "appended" in ln]
    assert len(lines) == 1, m.log_text()


# -- 4. RGB ------------------------------------------------------------------------------------------
RGB_CASES = {
    # name: (shape, imwrite keywords)
    "tiled": ((64, 80, 3), {"photometric": "rgb", "tile": (16, 16), "compression": "zlib"}),  # zero-copy
    "strips": ((50, 70, 3), {"photometric": "rgb", "rowsperstrip": 8}),  # re-chunked: transcoded tiles
    "rgba": ((32, 48, 4), {"photometric": "rgb", "extrasamples": "unassalpha", "tile": (16, 16),
                           "compression": "zlib"}),
    "stack": ((2, 32, 48, 3), {"photometric": "rgb", "tile": (16, 16), "compression": "zstd"}),
}


def _check_rgb(path: Path, data: np.ndarray) -> None:
    h, w, s = data.shape[-3:]
    info = tiffinfo(path)
    pages = int(np.prod(data.shape[:-3]))
    assert info.count("TIFF Directory") == pages, info
    assert f"Image Width: {w} Image Length: {h}" in info
    assert f"Samples/Pixel: {s}" in info
    assert "RGB color" in info
    assert "single image plane" in info  # PlanarConfiguration 1: contig samples
    with tifffile.TiffFile(path) as tif:
        assert tif.pages[0].photometric.name == "RGB"
        np.testing.assert_array_equal(tif.asarray(), data)
    if shutil.which("gdalinfo") and pages == 1:
        g = subprocess.run(["gdalinfo", str(path)], capture_output=True, text=True, timeout=60).stdout
        assert f"Size is {w}, {h}" in g
        assert "ColorInterp=Red" in g and "ColorInterp=Blue" in g


@pytest.mark.parametrize("case", sorted(RGB_CASES))
def test_rgb_tiff_is_served_back_as_rgb(mount_store, store, case):
    if case == "stack":
        pytest.importorskip("imagecodecs")
    shape, kw = RGB_CASES[case]
    data = np.random.default_rng(3).integers(0, 255, shape).astype("uint8")
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / f"{case}.tif"
    write(view, data, **kw)
    _check_rgb(view, data)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f[case][()], data)
        assert f[case].attrs["photometric"] == "RGB"
    # the view's RGB file written back (from scratch, then in place): same data, nothing refused
    raw = view.read_bytes()
    with open(view, "wb") as f:
        f.write(raw)
    with open(view, "r+b") as f:
        f.write(raw[:8])
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f[case][()], data)
    assert not refusals(m), refusals(m)


def test_imported_rgb_tiff_is_served_as_rgb(mount_store, tmp_path):
    data = np.random.default_rng(4).integers(0, 255, (48, 64, 3)).astype("uint8")
    src = tmp_path / "rgb.tif"
    tifffile.imwrite(src, data, photometric="rgb", tile=(16, 16), compression="zlib")
    out = tmp_path / "store"
    dom = import_source(src, str(out), progress=False)
    m = mount_store(str(out))
    _check_rgb(m.path / "tiff" / dom.strip("/").removesuffix(".h5") / "image.tif", data)


def test_jpeg_ycbcr_is_stored_as_rgb(tmp_path):
    pytest.importorskip("imagecodecs")
    data = np.random.default_rng(5).integers(0, 255, (32, 32, 3)).astype("uint8")
    src = tmp_path / "j.tif"
    tifffile.imwrite(src, data, photometric="rgb", compression="jpeg", tile=(16, 16))
    with tifffile.TiffFile(src) as tif:
        assert tif.pages[0].photometric.name == "YCBCR"
    out = tmp_path / "store"
    dom = import_source(src, str(out), progress=False)
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    ds = Catalog(open_store(str(out), read_only=True)).load(dom).resolve("/image")
    assert ds.attributes["photometric"].value == "RGB"


# -- 5. maximum shape ------------------------------------------------------------------------------
def test_dataset_made_through_the_view_grows_and_shrinks(mount_store, store):
    m = mount_store(str(store))
    os.mkdir(m.path / "tiff" / "exp" / "ms")
    view = m.path / "tiff" / "exp" / "ms" / "img.tif"
    for shape in ((100, 130), (40, 50), (100, 130), (140, 150)):
        data = np.random.default_rng(sum(shape)).integers(0, 60000, shape).astype("u2")
        write(view, data, tile=(32, 32), compression="zlib")
        with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
            assert f["ms/img"].shape == shape
            assert f["ms/img"].maxshape == (None, None)
            np.testing.assert_array_equal(f["ms/img"][()], data)
