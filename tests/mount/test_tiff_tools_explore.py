"""The TIFF view used as users do, with independent tools (tifffile, libtiff's tiffcp/tiffinfo,
GDAL), on a real mount: what a first round of such use found and what now holds.

- pages appended in another layout than the view's tiles (``tiffcp -a`` of a stripped file,
  ``tifffile`` ``append="force"``) grow the stack instead of being refused as "images of
  different shapes"; an appended page of another shape is refused, not dropped unseen; a file
  of pages tiled and stripped unlike each other replaces a dataset's data;
- a tiled file rewritten over a dataset, its tiles decoded (LZW, a predictor), stores whole
  chunks at the image's edges (they were stored short: every view failed to read them);
- a tile rewritten in place by a shorter deflate stream is stored without the stale bytes after
  it (the Zarr view's gzip members ended there and failed their CRC);
- a written image's PhotometricInterpretation is served back as written (MinIsWhite, a
  palette with its ColorMap, CMYK, YCbCr), so viewers show it as the writer meant;
- band-interleaved multi-band files (GDAL ``INTERLEAVE=BAND``, tifffile ``planarconfig=
  "separate"``) are served as one image of that many samples (PlanarConfiguration 2), so
  GDAL sees every band with its checksum;
- an ImageJ hyperstack's pixel size (ImageJ's unit and spacing) is the view file's.
"""
from __future__ import annotations

import errno
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import seeded_store
from conftest import polyfs_cmd


h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")

DOMAIN = "/exp.h5"
needs_tiffcp = pytest.mark.skipif(shutil.which("tiffcp") is None, reason="needs libtiff-tools")
needs_gdal = pytest.mark.skipif(shutil.which("gdalinfo") is None, reason="needs GDAL")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def tiffinfo(path: Path) -> str:
    return subprocess.run(["tiffinfo", str(path)], capture_output=True, text=True, timeout=60, check=False).stdout


def checksums(path: Path) -> list[str]:
    out = subprocess.run(["gdalinfo", "-checksum", str(path)], capture_output=True, text=True, timeout=60, check=False).stdout
    return [ln.strip() for ln in out.splitlines() if "Checksum=" in ln]


def write(path: Path, data: np.ndarray, **kw) -> None:
    with open(path, "wb") as f:  # our own handle: close() reports a refusal
        tifffile.imwrite(f, data, **kw)


def zarr_of(m, name: str) -> np.ndarray:
    return zarr.open_array(str(m.path / "zarr" / "exp.zarr" / name), mode="r")[...]


# -- 1. pages appended in their own layout ---------------------------------------------------------
@needs_tiffcp
def test_tiffcp_append_of_a_stripped_page_grows_a_tiled_stack(mount_store, store, tmp_path):
    stack = np.arange(3 * 40 * 36, dtype="u2").reshape(3, 40, 36)
    page = np.full((40, 36), 9, "u2")
    tifffile.imwrite(tmp_path / "s.tif", stack, tile=(16, 16), compression="zlib", photometric="minisblack")
    tifffile.imwrite(tmp_path / "p.tif", page)  # strips, uncompressed: libtiff's and tifffile's default
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "stack.tif"
    shutil.copyfile(tmp_path / "s.tif", view)
    subprocess.run(["tiffcp", "-a", str(tmp_path / "p.tif"), str(view)], check=True, timeout=60)
    want = np.concatenate([stack, page[None]])
    np.testing.assert_array_equal(zarr_of(m, "stack"), want)
    # tifffile's own append (the view's file carries OME metadata, so tifffile wants "force")
    tifffile.imwrite(view, np.full((40, 36), 5, "u2"), append="force", compression="lzw")
    want = np.concatenate([want, np.full((1, 40, 36), 5, "u2")])
    np.testing.assert_array_equal(zarr_of(m, "stack"), want)
    np.testing.assert_array_equal(tifffile.imread(view), want)
    assert not [ln for ln in m.log_text().splitlines() if "refused" in ln and "still being written" not in ln]


@needs_tiffcp
def test_appended_page_of_another_shape_is_refused_naming_it(mount_store, store, tmp_path):
    tifffile.imwrite(tmp_path / "s.tif", np.ones((2, 32, 32), "u2"), tile=(16, 16), photometric="minisblack")
    tifffile.imwrite(tmp_path / "p.tif", np.ones((30, 32), "u2"))
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "stack.tif"
    shutil.copyfile(tmp_path / "s.tif", view)
    local = tmp_path / "local.tif"
    shutil.copyfile(view, local)
    subprocess.run(["tiffcp", "-a", str(tmp_path / "p.tif"), str(local)], check=True, timeout=60)
    with pytest.raises(OSError) as exc, open(view, "r+b") as f:
        f.write(local.read_bytes())
    assert exc.value.errno in (errno.EINVAL, errno.EOPNOTSUPP)
    assert zarr_of(m, "stack").shape == (2, 32, 32)


# -- 2. a tiled file rewritten over a dataset, tiles in a codec the store does not keep -----------
@pytest.mark.parametrize("kw", [{"compression": "lzw"}, {"compression": "zlib", "predictor": True}],
                         ids=["lzw", "deflate-predictor"])
def test_rewrite_with_edge_tiles_stores_whole_chunks(mount_store, store, kw):
    """Tiles that are the dataset's chunks but must be decoded (LZW, a predictor): the edge
    tiles of an image that is no multiple of the tile make whole (padded) chunks."""
    a = np.arange(40 * 50, dtype="u2").reshape(40, 50)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "edges.tif"
    write(view, a, tile=(16, 16), **kw)
    write(view, a + 1, tile=(16, 16), **kw)
    np.testing.assert_array_equal(zarr_of(m, "edges"), a + 1)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f["edges"][()], a + 1)
    np.testing.assert_array_equal(tifffile.imread(view), a + 1)
    m.stop()
    res = subprocess.run(polyfs_cmd("check", str(store), "--deep"), capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr


# -- 3. photometric interpretations as written ---------------------------------------------------
def test_miniswhite_and_palette_are_served_as_written(mount_store, store, tmp_path):
    rng = np.random.default_rng(3)
    gray = rng.integers(0, 255, (40, 48)).astype("u1")
    cmap = (np.arange(3 * 256, dtype="u4").reshape(3, 256) * 85 % 65536).astype("u2")
    m = mount_store(str(store))
    d = m.path / "tiff" / "exp"
    write(d / "white.tif", gray, photometric="miniswhite")
    write(d / "pal.tif", gray, photometric="palette", colormap=cmap)
    with tifffile.TiffFile(d / "white.tif") as t:
        assert t.pages[0].photometric == tifffile.PHOTOMETRIC.MINISWHITE
        np.testing.assert_array_equal(t.asarray(), gray)
    with tifffile.TiffFile(d / "pal.tif") as t:
        assert t.pages[0].photometric == tifffile.PHOTOMETRIC.PALETTE
        np.testing.assert_array_equal(t.pages[0].colormap, cmap)
        np.testing.assert_array_equal(t.asarray(), gray)
    assert "min-is-white" in tiffinfo(d / "white.tif")
    cmyk = rng.integers(0, 255, (20, 24, 4)).astype("u1")
    ycc = rng.integers(0, 255, (20, 24, 3)).astype("u1")
    write(d / "cmyk.tif", cmyk, photometric="separated")
    write(d / "ycc.tif", ycc, photometric="ycbcr", subsampling=(1, 1))
    for name, data, want in (("cmyk", cmyk, "SEPARATED"), ("ycc", ycc, "YCBCR")):
        with tifffile.TiffFile(d / f"{name}.tif") as t:
            assert t.pages[0].photometric.name == want
            np.testing.assert_array_equal(t.asarray(), data)
    assert "YCbCr Subsampling: 1, 1" in tiffinfo(d / "ycc.tif")
    if shutil.which("gdalinfo"):
        write(tmp_path / "pal.tif", gray, photometric="palette", colormap=cmap)
        assert checksums(d / "pal.tif") == checksums(tmp_path / "pal.tif")
        info = subprocess.run(["gdalinfo", str(d / "pal.tif")], capture_output=True, text=True, timeout=60,
                              check=False).stdout
        assert "ColorInterp=Palette" in info


# -- 4. samples in separate planes ---------------------------------------------------------------
@needs_gdal
def test_band_interleaved_file_keeps_its_bands_for_gdal(mount_store, store, tmp_path):
    rng = np.random.default_rng(4)
    src = tmp_path / "bands.tif"
    tifffile.imwrite(src, rng.integers(0, 60000, (4, 50, 70)).astype("u2"), photometric="minisblack",
                     planarconfig="separate")
    local = tmp_path / "gdal.tif"
    subprocess.run(["gdal_translate", "-q", "-of", "GTiff", "-co", "TILED=YES", "-co", "COMPRESS=LZW",
                    "-co", "INTERLEAVE=BAND", str(src), str(local)], check=True, timeout=60)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "bands.tif"
    shutil.copyfile(local, view)
    want = checksums(local)
    assert len(want) == 4 and checksums(view) == want
    with tifffile.TiffFile(view) as t:
        assert len(t.pages) == 1 and t.pages[0].planarconfig == 2 and t.pages[0].samplesperpixel == 4
        np.testing.assert_array_equal(t.asarray(), tifffile.imread(local))
    # a stack of planar RGB pages: each page's three planes are one IFD
    rgb = rng.integers(0, 255, (2, 3, 32, 48)).astype("u1")
    write(view.with_name("zs.tif"), rgb, photometric="rgb", planarconfig="separate", tile=(16, 16),
          compression="zlib")
    with tifffile.TiffFile(view.with_name("zs.tif")) as t:
        assert len(t.pages) == 2 and t.pages[0].photometric == tifffile.PHOTOMETRIC.RGB
        np.testing.assert_array_equal(t.asarray(), rgb)
    np.testing.assert_array_equal(zarr_of(m, "zs"), rgb)


# -- 5. a tile rewritten in place by a shorter stream --------------------------------------------
def test_tile_rewritten_in_place_by_a_shorter_deflate_stream(mount_store, store):
    """The tile's byte count still holds the old length: the bytes after the new stream are not
    part of the chunk (the Zarr view serves deflate chunks as gzip members, which end at the
    stream's end)."""
    import zlib

    rng = np.random.default_rng(2)
    a = rng.integers(0, 255, (64, 64)).astype("u1")
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "noise.tif"
    write(view, a, tile=(32, 32), compression="zlib")
    with tifffile.TiffFile(view) as t:
        p = t.pages[0]
        assert (p.tilelength, p.tilewidth, int(p.compression)) == (32, 32, 8)
        off, cnt = p.dataoffsets[1], p.databytecounts[1]
    new = zlib.compress(np.full((32, 32), 200, "u1").tobytes())
    assert len(new) < cnt
    with open(view, "r+b") as f:
        f.seek(off)
        f.write(new)
    a[:32, 32:] = 200
    np.testing.assert_array_equal(zarr_of(m, "noise"), a)
    np.testing.assert_array_equal(tifffile.imread(view), a)


def test_new_stack_of_pages_tiled_and_stripped(mount_store, store):
    """A file whose pages were written one by one in different layouts is one stack."""
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "mixed.tif"
    for base in (0, 10):  # a new dataset, then its data replaced by such a file
        pages = [np.full((30, 40), base + i, "u2") for i in range(4)]
        with open(view, "wb") as f, tifffile.TiffWriter(f) as w:
            for i, p in enumerate(pages):
                w.write(p, tile=(16, 16) if i % 2 else None, compression="zlib" if i < 2 else "lzw",
                        photometric="minisblack", contiguous=False)
        np.testing.assert_array_equal(zarr_of(m, "mixed"), np.stack(pages))
        np.testing.assert_array_equal(tifffile.imread(view), np.stack(pages))


# -- 6. ImageJ pixel sizes -------------------------------------------------------------------------
def test_imagej_hyperstack_keeps_its_pixel_size(mount_store, store):
    """ImageJ writes ResolutionUnit "none" and its unit in the description: the view's file
    gives the pixel size in the unit ImageJ named (OME PhysicalSize, XResolution per cm)."""
    data = np.arange(2 * 3 * 24 * 32, dtype="u2").reshape(2, 3, 24, 32)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "hyper.tif"
    write(view, data, imagej=True, resolution=(1 / 0.25, 1 / 0.25),
          metadata={"axes": "TZYX", "spacing": 1.5, "unit": "um"})
    with tifffile.TiffFile(view) as t:
        np.testing.assert_array_equal(t.asarray(), data)
        assert t.series[0].axes == "TZYX"
        p = t.pages[0]
        assert int(p.resolutionunit) == 3 and p.resolution == pytest.approx((40000.0, 40000.0))
        pixels = tifffile.xml2dict(t.ome_metadata)["OME"]["Image"]["Pixels"]
        assert pixels["PhysicalSizeX"] == pytest.approx(0.25) and pixels["PhysicalSizeZ"] == pytest.approx(1.5)
