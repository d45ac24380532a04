"""The TIFF view used with tools other than polyfs (tifffile, libtiff, GDAL, h5py, zarr-python) on a
real mount, exploratory round 5: what it found and what now holds.

- a stack written page by page with ``tifffile.TiffWriter`` (its default ``contiguous=True``,
  uncompressed; ImageJ hyperstacks are written so too) into a new name was refused at close
  (EINVAL) and left a one-page dataset: tifffile writes later pages' pixels through a duplicated
  descriptor whose close flushes a file holding only the first page's IFD, which was stored as a
  2-D dataset the finished stack then could not replace. Such a flush is now refused as
  incomplete, and the close stores the stack (a copy of a tiny view file is not taken for one);
- ``tifffile.imwrite(..., description="...")`` kept nothing of the description (tifffile writes
  its shaped JSON as a second ImageDescription, and a shaped file's description was dropped
  whole); it is now the ``image_description`` attribute, set again by a rewrite that has one;
- an OME-TIFF of several channels or time points (``CZYX``, ``TCZYX``) lost its
  ``PhysicalSizeZ``: only the (Y, X) pixel size was kept; Z now is too, and the view's OME-XML
  gives it back;
- tag-only edits in place (``tiffset``, tifffile's ``TiffTag.overwrite``) are not kept, as
  documented, but said nothing: one log line now names the tags (and ``gdalwarp`` updating a
  file in place, which copies its source's Software and description, says nothing);
- sparse files (GDAL ``SPARSE_OK``: blocks never written) read as their GDAL_NODATA value (or 0)
  in GDAL and tifffile; written over a dataset of another fill value, or as a new dataset with a
  nodata value, those blocks read back as the fill value. They now read as the writer meant (a
  new dataset's fill value is its nodata value);
- a GDAL file with an internal transparency mask was refused as "2 images of different shapes"
  (after a line saying its overviews were dropped); round 16 keeps the mask (``<name>_mask``)
  and serves it back in the image's file;
- a boolean dataset written back as 8-bit with values other than 0 and 1 (255 from a viewer)
  stored them all as 1 without a word: refused now.
"""
from __future__ import annotations

import errno
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from polyfs.importers import import_source
from support import deep_check, seeded_store

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")

DOMAIN = "/exp.h5"


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def zarr_array(m, name: str):
    return zarr.open_array(str(m.path / "zarr" / "exp.zarr" / name), mode="r")


def everywhere(m, name: str, want: np.ndarray) -> None:
    """The dataset as tifffile reads the view's file, as zarr-python and h5py read theirs."""
    np.testing.assert_array_equal(tifffile.imread(m.path / "tiff" / "exp" / f"{name}.tif"), want)
    np.testing.assert_array_equal(zarr_array(m, name)[...], want)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f[name][...], want)


def refusals(m, name: str) -> list[str]:
    return [ln for ln in m.log_text().splitlines() if f"tiff/exp/{name}" in ln and "refused" in ln]


# -- 1. stacks written page by page, contiguous -----------------------------------------------------
@pytest.mark.parametrize("how", ["shaped", "imagej", "bigtiff"])
def test_stack_written_page_by_page_contiguously(mount_store, store, how):
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / f"pp_{how}.tif"
    stack = np.random.default_rng(1).integers(0, 60000, (5, 40, 56)).astype("u2")
    opts = {"imagej": True} if how == "imagej" else {"bigtiff": True} if how == "bigtiff" else {}
    for data in (stack, stack[:, :24] + 7):  # a new dataset, then its data replaced the same way (it shrinks)
        with open(view, "wb") as f, tifffile.TiffWriter(f, **opts) as tw:  # our handle: close() reports
            for page in data:
                tw.write(page, contiguous=True)
        everywhere(m, f"pp_{how}", data)
        with tifffile.TiffFile(view) as t:
            assert len(t.pages) == len(data)
    # the flushes between pages are refused as incomplete without a log line each (a stack of
    # 1500 pages made 1500 warnings)
    assert not refusals(m, f"pp_{how}.tif"), refusals(m, f"pp_{how}.tif")
    deep_check(store)


def test_incomplete_contiguous_stack_leaves_the_store_as_it_was(mount_store, store, tmp_path, monkeypatch):
    """A writer killed after the third page's pixels (the file as tifffile leaves it then, caught
    on a local disk): refused, nothing is stored."""
    stack = np.arange(4 * 24 * 32, dtype="u2").reshape(4, 24, 32)
    local = tmp_path / "local.tif"
    states: list[bytes] = []
    write_array = tifffile.FileHandle.write_array

    def caught(self, *args, **kw):
        out = write_array(self, *args, **kw)
        self._fh.flush()
        states.append(local.read_bytes())
        return out

    monkeypatch.setattr(tifffile.FileHandle, "write_array", caught)
    with tifffile.TiffWriter(local) as tw:
        for page in stack:
            tw.write(page, contiguous=True)
    monkeypatch.undo()
    partial = states[2]  # the first page's IFD, three pages' pixels
    with tifffile.TiffFile(io.BytesIO(partial)) as t:
        assert len(t.pages) == 1
    before = snapshot(store)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "killed.tif"
    with pytest.raises(OSError) as exc:
        with open(view, "wb") as f:
            f.write(partial)
    assert exc.value.errno == errno.EINVAL
    assert not view.exists()
    assert snapshot(store) == before
    lines = [ln for ln in m.log_text().splitlines() if "tiff/exp/killed.tif" in ln]
    assert len(lines) == 1 and "incomplete" in lines[0] and "not stored" in lines[0], lines  # at its release


def test_copy_of_a_tiny_uncompressed_view_file_is_not_taken_for_an_incomplete_stack(mount_store, store):
    """The view's uncompressed files are polyglot files ending in a Zarr shard index after the
    tiles; an image of a few bytes has an index of whole pages' size after its IFD's last byte.
    ``cp`` of one to a new name makes a dataset (it is not a stack tifffile is still writing)."""
    m = mount_store(str(store))
    g = zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="r+")
    a = g.create_array("tiny", shape=(2, 2), chunks=(16, 16), dtype="u1", compressors=None, fill_value=0)
    a[...] = np.array([[1, 2], [3, 4]], "u1")
    shutil.copyfile(m.path / "tiff" / "exp" / "tiny.tif", m.path / "tiff" / "exp" / "tiny_copy.tif")
    everywhere(m, "tiny_copy", np.array([[1, 2], [3, 4]], "u1"))


def snapshot(store: Path, derived: bool = True) -> dict[str, bytes]:
    """Every object of the store; ``derived=False``: without the derived data under ``polyfs/``
    (persisted chunk indexes, CRC tables: caches a write through the mount may drop)."""
    out = {}
    for dirpath, _, files in os.walk(store):
        for name in files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(store))
            if derived or not rel.startswith("polyfs/"):
                out[rel] = p.read_bytes()
    return out


# -- 2. tifffile's description= --------------------------------------------------------------------
def test_description_written_by_tifffile_is_kept(mount_store, store):
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "described.tif"
    data = np.arange(20 * 30, dtype="u1").reshape(20, 30)
    with open(view, "wb") as f:
        tifffile.imwrite(f, data, description="sample 12, stained", software="acquire 2.1")
    everywhere(m, "described", data)
    assert zarr_array(m, "described").attrs["image_description"] == "sample 12, stained"
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        text = f["described"].attrs["image_description"]
        assert (text.decode() if isinstance(text, bytes) else text) == "sample 12, stained"
    with open(view, "wb") as f:  # a rewrite with another description sets it
        tifffile.imwrite(f, data + 1, description="sample 12, restained")
    assert zarr_array(m, "described").attrs["image_description"] == "sample 12, restained"
    with open(view, "wb") as f:  # one without (tifffile's JSON only) leaves it
        tifffile.imwrite(f, data + 2)
    everywhere(m, "described", data + 2)
    assert zarr_array(m, "described").attrs["image_description"] == "sample 12, restained"
    with tifffile.TiffFile(view) as t:  # the view's own description stays OME, not taken as the writer's
        assert t.is_ome
    deep_check(store)


# -- 3. OME pixel sizes of images with channels / time points ------------------------------------------
@pytest.mark.parametrize("axes", ["CZYX", "TCZYX", "ZCYX"])
def test_ome_z_spacing_of_multichannel_stack(mount_store, store, axes):
    m = mount_store(str(store))
    shape = {"T": 2, "C": 3, "Z": 4, "Y": 32, "X": 48}
    data = np.random.default_rng(2).integers(0, 255, [shape[a] for a in axes]).astype("u1")
    view = m.path / "tiff" / "exp" / "cells.ome.tif"
    with open(view, "wb") as f:
        tifffile.imwrite(f, data, ome=True, metadata={"axes": axes, "PhysicalSizeX": 0.25, "PhysicalSizeY": 0.5,
                                                      "PhysicalSizeZ": 2.0})
    everywhere(m, "cells.ome", data)
    with tifffile.TiffFile(view) as t:
        assert t.series[0].axes == axes
        sizes = dict(re.findall(r'PhysicalSize([XYZ])="([^"]+)"', t.ome_metadata))
    assert {k: float(v) for k, v in sizes.items()} == {"X": 0.25, "Y": 0.5, "Z": 2.0}
    a = zarr_array(m, "cells.ome").attrs
    assert a["pixel_size"] == [2.0, 0.5, 0.25] and a["unit"] == "µm"
    deep_check(store)


def test_ome_z_spacing_survives_import(tmp_path):
    """``polyfs import`` of such a file keeps it the same way (the same code, no mount)."""
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    src = tmp_path / "cz.ome.tif"
    tifffile.imwrite(src, np.zeros((2, 3, 16, 16), "u2"), ome=True,
                     metadata={"axes": "CZYX", "PhysicalSizeX": 0.1, "PhysicalSizeY": 0.1, "PhysicalSizeZ": 0.7})
    out = tmp_path / "store"
    dom = import_source(src, str(out), progress=False)
    ds = Catalog(open_store(str(out), read_only=True)).load(dom).resolve("/image")
    assert ds.attributes["pixel_size"].value == [0.7, 0.1, 0.1]


# -- 4. tag-only edits in place are not kept: the log says so ----------------------------------------
@pytest.mark.skipif(shutil.which("tiffset") is None, reason="needs libtiff-tools")
def test_tag_edits_in_place_are_logged_not_silently_dropped(mount_store, store):
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "seed.tif"
    before = snapshot(store, derived=False)
    subprocess.run(["tiffset", "-s", "270", "my description", str(view)], check=True, timeout=60)
    with tifffile.TiffFile(view, mode="r+b") as t:  # tifffile's own in-place tag edit
        t.pages[0].tags["XResolution"].overwrite((300, 1))
    assert snapshot(store, derived=False) == before
    lines = [ln for ln in m.log_text().splitlines() if "tiff/exp/seed.tif" in ln and "not kept" in ln]
    assert len(lines) == 2, m.log_text()
    assert "ImageDescription changed in place is not kept" in lines[0]
    assert "XResolution" in lines[1]
    everywhere(m, "seed", np.arange(32 * 32, dtype="u2").reshape(32, 32))


@pytest.mark.skipif(shutil.which("gdal_edit.py") is None, reason="needs GDAL")
def test_geo_and_pixel_edits_in_place_log_no_dropped_tags(mount_store, store):
    """What is kept (GeoTIFF tags by gdal_edit.py) says nothing about tags dropped."""
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "seed.tif"
    subprocess.run(["gdal_edit.py", "-a_srs", "EPSG:4326", "-a_ullr", "0", "10", "10", "0", "-mo", "A=b", str(view)],
                   check=True, timeout=60)
    assert "GeoKeyDirectoryTag" in zarr_array(m, "seed").attrs
    assert "not kept" not in m.log_text()


# -- 5. sparse files (GDAL SPARSE_OK: tiles and strips never written) ----------------------------------
needs_gdal = pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")


def sparse_source(tmp_path: Path, nodata: int | None, tiled: bool = True) -> tuple[Path, np.ndarray]:
    """A GDAL sparse file: only the top-left 32x32 block holds other values than nodata (or 0)."""
    data = np.full((64, 96), 0 if nodata is None else nodata, np.uint8)
    data[:32, :32] = 9
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, data)
    out = tmp_path / f"sparse_{nodata}_{tiled}.tif"
    opts = ["-co", "TILED=YES", "-co", "BLOCKXSIZE=32", "-co", "BLOCKYSIZE=32"] if tiled else ["-co", "BLOCKYSIZE=16"]
    nd = ["-a_nodata", str(nodata)] if nodata is not None else []
    subprocess.run(["gdal_translate", "-q", *nd, *opts, "-co", "SPARSE_OK=TRUE", str(plain), str(out)], check=True,
                   timeout=60)
    with tifffile.TiffFile(out) as t:  # GDAL left the blocks of nodata (or zeros) unwritten
        assert (np.asarray(t.pages[0].databytecounts) == 0).any()
        np.testing.assert_array_equal(t.asarray(), data)
    return out, data


def gdal_checksum(path: Path) -> str:
    out = subprocess.run(["gdalinfo", "-checksum", str(path)], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return [ln.strip() for ln in out.splitlines() if "Checksum=" in ln][0]


@needs_gdal
def test_sparse_file_over_a_dataset_whose_fill_is_not_zero(mount_store, store, tmp_path):
    """Unwritten tiles are zeros to GDAL and tifffile: over a dataset of fill value 3 they were
    dropped as chunks and read back as 3."""
    src, data = sparse_source(tmp_path, None)
    m = mount_store(str(store))
    a = zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="r+").create_array(
        "filled", shape=(64, 96), chunks=(32, 32), dtype="u1", fill_value=3)
    a[...] = 50
    shutil.copyfile(src, m.path / "tiff" / "exp" / "filled.tif")
    everywhere(m, "filled", data)
    deep_check(store)


@needs_gdal
@pytest.mark.parametrize("tiled", [True, False], ids=["tiles", "strips"])
def test_sparse_geotiff_with_nodata_keeps_its_nodata_blocks(mount_store, store, tmp_path, tiled):
    """Unwritten blocks of a file with GDAL_NODATA are that value to GDAL and tifffile: a new
    dataset (its fill value the nodata value) and an existing one (fill 0) read them so."""
    src, data = sparse_source(tmp_path, 255, tiled)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "sparse.tif"
    shutil.copyfile(src, view)
    everywhere(m, "sparse", data)
    assert gdal_checksum(view) == gdal_checksum(src)
    assert zarr_array(m, "sparse").fill_value == 255
    zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="r+").create_array(
        "zero", shape=(64, 96), chunks=(32, 32), dtype="u1", fill_value=0)[...] = 1
    shutil.copyfile(src, m.path / "tiff" / "exp" / "zero.tif")
    everywhere(m, "zero", data)
    deep_check(store)


@pytest.mark.skipif(shutil.which("gdalwarp") is None, reason="needs GDAL")
def test_gdalwarp_into_an_existing_view_file_updates_it_in_place(mount_store, store, tmp_path):
    """``gdalwarp src dst`` onto an existing GeoTIFF updates dst in place (and copies the source's
    Software and tifffile description into it: no edit of the user's, nothing said about it)."""
    base = np.random.default_rng(3).integers(0, 60000, (200, 300)).astype("u2")
    tifffile.imwrite(tmp_path / "base.tif", base)
    tifffile.imwrite(tmp_path / "small.tif", np.full((100, 150), 7, "u2"))
    geo = tmp_path / "geo.tif"
    subprocess.run(["gdal_translate", "-q", "-a_srs", "EPSG:32633", "-a_ullr", "500000", "4200000", "503000",
                    "4198000", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", str(tmp_path / "base.tif"), str(geo)],
                   check=True, timeout=60)
    patch = tmp_path / "patch.tif"
    subprocess.run(["gdal_translate", "-q", "-a_srs", "EPSG:32633", "-a_ullr", "500600", "4199600", "501500",
                    "4199000", str(tmp_path / "small.tif"), str(patch)], check=True, timeout=60)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "geo.tif"
    shutil.copyfile(geo, view)
    local = tmp_path / "local.tif"
    shutil.copyfile(geo, local)
    for dst in (local, view):
        subprocess.run(["gdalwarp", "-q", str(patch), str(dst)], check=True, timeout=60)
    want = tifffile.imread(local)
    assert (want == 7).sum() > 0 and not np.array_equal(want, base)
    everywhere(m, "geo", want)
    assert gdal_checksum(view) == gdal_checksum(local)
    assert "not kept" not in m.log_text()
    deep_check(store)


@needs_gdal
@pytest.mark.parametrize("fmt", ["GTiff", "COG"])
def test_internal_mask_is_kept_and_served_back(mount_store, store, tmp_path, fmt):
    """A GDAL file with an internal transparency mask (``-mask``) was refused as "2 images of
    different shapes or types", then (round 5) refused naming the mask: GDAL ignores close's
    error, so the file vanished. Round 16: the mask is kept as the dataset ``masked_mask``
    (uint8 0/255) and the view's file carries it again: GDAL reads the same mask back."""
    rgb = np.random.default_rng(4).integers(0, 255, (120, 200, 3)).astype("u1")
    tifffile.imwrite(tmp_path / "rgb.tif", rgb, photometric="rgb")
    src = tmp_path / "masked.tif"
    opts = ["-co", "TILED=YES"] if fmt == "GTiff" else ["-co", "BLOCKSIZE=64"]
    subprocess.run(["gdal_translate", "-q", "-of", fmt, *opts, "-b", "1", "-b", "2", "-b", "3", "-mask", "1",
                    "--config", "GDAL_TIFF_INTERNAL_MASK", "YES", str(tmp_path / "rgb.tif"), str(src)],
                   check=True, timeout=60)
    with tifffile.TiffFile(src) as t:
        want = next(p for p in t.pages if int(p.subfiletype) == 4).asarray().astype("u1") * 255
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "masked.tif"
    shutil.copyfile(src, view)
    np.testing.assert_array_equal(tifffile.imread(view), rgb)
    np.testing.assert_array_equal(zarr_array(m, "masked_mask")[...], want)
    with tifffile.TiffFile(view) as t:
        masks = [p for p in t.pages if int(p.subfiletype) == 4]
        assert len(masks) == 1 and int(masks[0].photometric) == 4
        np.testing.assert_array_equal(masks[0].asarray(), want)
    info = subprocess.run(["gdalinfo", str(view)], capture_output=True, text=True, timeout=60).stdout
    assert info.count("Mask Flags: PER_DATASET") == 3, info
    assert not refusals(m, "masked.tif")
    deep_check(store)


# -- 6. boolean datasets take 0 and 1 only --------------------------------------------------------------
@pytest.mark.parametrize("layout", [{"tile": (16, 16), "compression": "zlib"}, {}], ids=["tiles", "strips"])
def test_boolean_dataset_refuses_other_values_than_0_and_1(mount_store, store, layout):
    """A bilevel image (tifffile writes bool as 1-bit) is a boolean dataset, shown as 8-bit 0 and 1.
    Written back as 8-bit, 0 and 1 are taken; 255 (what viewers paint for "on") was stored as 1
    without a word: now the file is refused and the dataset stays as it was."""
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "mask.tif"
    bits = np.random.default_rng(5).integers(0, 2, (32, 48)).astype(bool)
    with open(view, "wb") as f:
        tifffile.imwrite(f, bits, tile=(16, 16))
    assert zarr_array(m, "mask").dtype == bool
    flipped = ~bits
    with open(view, "wb") as f:
        tifffile.imwrite(f, flipped.astype("u1"), **layout)
    np.testing.assert_array_equal(zarr_array(m, "mask")[...], flipped)
    before = snapshot(store)
    with pytest.raises(OSError) as exc:
        with open(view, "wb") as f:
            tifffile.imwrite(f, bits.astype("u1") * 255, **layout)
    assert exc.value.errno == errno.EINVAL
    assert snapshot(store) == before
    np.testing.assert_array_equal(zarr_array(m, "mask")[...], flipped)
    assert any("other than 0 and 1" in ln for ln in refusals(m, "mask.tif"))
    deep_check(store)
