"""The TIFF view used with real tools and real files on a mount, exploratory round 7: what it found
and what now holds.

- ``cp`` of a view's file (within a domain or into another), or ``gdal_translate`` of it out and
  back in, made a dataset with a ``name`` attribute holding the path the view had named the image
  by (``/exp.h5/x``), and the name an OME-TIFF or tifffile file was written with (``Name="stained
  nuclei"``) was not served at all: a copy replaced it with that path. The view's file now names
  the image by the dataset's ``name`` only (OME-XML or tifffile's shaped JSON), so a copy is the
  dataset again;
- a writer's description (``tiff2bw``'s "B&W version of ...", tifffile ``description=``) was kept
  but not served, so a copy lost it: the view's OME-XML gives it as the image's Description;
- a 300 dpi scan was served at 118.11 pixels per centimetre: ``tiffinfo``/``gdalinfo`` said so, and
  a copy stored it. Inches are served as inches;
- a scanner's Make, Model, Artist, a rotated Orientation (and DocumentName, PageName, DateTime,
  HostComputer, Copyright) vanished without a word: they are attributes named like the tags, served
  back, kept by a copy, changed by ``tiffset``/``gdal_edit.py -mo`` in place; other public tags
  (CPython's ``python.tiff``: WhitePoint, PrimaryChromaticities) are named in one log line;
- GDAL's complex integers (CInt16: SAR scenes) are stored as complex floats, and its packed 12-bit
  samples (``NBITS=12``) as 16-bit ones (the same values), which one log line each now says.
"""
from __future__ import annotations

import glob
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")

needs_gdal = pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")
needs_libtiff = pytest.mark.skipif(shutil.which("tiffcp") is None or shutil.which("tiffset") is None,
                                   reason="needs libtiff tools")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def view(m, name: str, domain: str = "exp") -> Path:
    return m.path / "tiff" / domain / f"{name}.tif"


def attrs(m, name: str, domain: str = "exp") -> dict:
    return dict(zarr.open_array(str(m.path / "zarr" / f"{domain}.zarr" / name), mode="r").attrs)


def same_everywhere(m, name: str, data: np.ndarray, domain: str = "exp") -> None:
    np.testing.assert_array_equal(tifffile.imread(view(m, name, domain)), data)
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / f"{domain}.zarr" / name), mode="r")[...],
                                  data)
    with h5py.File(m.path / "hdf5" / f"{domain}.h5", "r") as f:
        np.testing.assert_array_equal(f[name][...], data)


def dropped_lines(m, where: str) -> list[str]:
    return [ln for ln in m.log_text().splitlines() if where in ln and "tag(s)" in ln]


# -- 1. a copy of a view's file is the dataset ----------------------------------------------------
def test_cp_of_view_files_keeps_their_names_and_adds_none(mount_store, store):
    m = mount_store(str(store))
    (m.path / "zarr" / "other.zarr").mkdir()
    rng = np.random.default_rng(1)
    cases = {
        "nuclei": (rng.integers(0, 4000, (3, 40, 56)).astype("u2"),
                   dict(ome=True, metadata={"axes": "ZYX", "Name": "stained nuclei"}), "stained nuclei"),
        "slide": (rng.integers(0, 255, (40, 56, 3)).astype("u1"),
                  dict(photometric="rgb", metadata={"name": "slide overview"}), "slide overview"),
        "plain": (rng.random((40, 56)).astype("f4"), dict(tile=(16, 16), compression="zlib"), None),
    }
    for name, (data, kw, kept) in cases.items():
        with open(view(m, name), "wb") as f:
            tifffile.imwrite(f, data, **kw)
        assert attrs(m, name).get("name") == kept
        with tifffile.TiffFile(view(m, name)) as t:  # what a reader is told the image is called
            assert (t.series[0].name or None) == kept
        subprocess.run(["cp", str(view(m, name)), str(view(m, name + "_copy"))], check=True, timeout=60)
        subprocess.run(["cp", str(view(m, name)), str(m.path / "tiff" / "other")], check=True, timeout=60)
        for n, domain in ((name + "_copy", "exp"), (name, "other")):
            same_everywhere(m, n, data, domain)
            assert attrs(m, n, domain).get("name") == kept, (n, domain)
    deep_check(store)


@needs_gdal
def test_gdal_translate_out_and_back_in_adds_no_name(mount_store, store, tmp_path):
    m = mount_store(str(store))
    data = np.random.default_rng(2).integers(0, 60000, (60, 80)).astype("u2")
    src = tmp_path / "dem.tif"
    tifffile.imwrite(src, data)
    subprocess.run(["gdal_translate", "-q", "-a_srs", "EPSG:32633", "-a_ullr", "500000", "4000000", "502400",
                    "3998200", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", str(src), str(view(m, "dem"))],
                   check=True, timeout=60)
    out = tmp_path / "out.tif"
    subprocess.run(["gdal_translate", "-q", str(view(m, "dem")), str(out)], check=True, timeout=60)
    view(m, "dem").unlink()  # and back, as a new dataset (GDAL deletes the file it overwrites)
    subprocess.run(["gdal_translate", "-q", "-co", "TILED=YES", "-co", "COMPRESS=LZW", str(out),
                    str(view(m, "dem"))], check=True, timeout=60)
    same_everywhere(m, "dem", data)
    a = attrs(m, "dem")
    assert "name" not in a, a
    assert "GeoKeyDirectoryTag" in a
    deep_check(store)


# -- 2. resolution in inches ---------------------------------------------------------------------
@needs_libtiff
def test_300_dpi_scan_is_served_at_300_dpi(mount_store, store, tmp_path):
    m = mount_store(str(store))
    data = np.random.default_rng(3).integers(0, 255, (50, 70, 3)).astype("u1")
    src = tmp_path / "scan.tif"
    tifffile.imwrite(src, data, photometric="rgb", resolution=(300, 300), resolutionunit="INCH")
    subprocess.run(["tiffcp", "-c", "lzw", str(src), str(view(m, "scan"))], check=True, timeout=60)
    same_everywhere(m, "scan", data)
    info = subprocess.run(["tiffinfo", str(view(m, "scan"))], capture_output=True, text=True, timeout=60,
                          check=True).stdout
    assert "Resolution: 300, 300 pixels/inch" in info, info
    if shutil.which("gdalinfo"):
        md = json.loads(subprocess.run(["gdalinfo", "-json", str(view(m, "scan"))], capture_output=True, text=True,
                                       timeout=60, check=True).stdout)["metadata"][""]
        assert md["TIFFTAG_XRESOLUTION"] == "300" and md["TIFFTAG_RESOLUTIONUNIT"].startswith("2"), md
    subprocess.run(["cp", str(view(m, "scan")), str(view(m, "scan_copy"))], check=True, timeout=60)
    a = attrs(m, "scan_copy")
    assert a["resolution"] == [300.0, 300.0] and a["resolution_unit"] == "inch", a
    deep_check(store)


# -- 3. tags not kept are named ----------------------------------------------------------------
def _python_tiff() -> str | None:
    found = sorted(glob.glob("/usr/lib/python3*/test/**/python.tiff", recursive=True)
                   + glob.glob("/root/.pyenv/versions/*/lib/python3*/test/**/python.tiff", recursive=True))
    return found[0] if found else None


def test_cpython_test_image_copied_in_names_what_it_drops(mount_store, store):
    """A real file: CPython's ``python.tiff`` (16x16 RGBA strips, DocumentName, WhitePoint,
    PrimaryChromaticities, PageNumber)."""
    src = _python_tiff()
    if src is None:
        pytest.skip("no CPython test image installed")
    m = mount_store(str(store))
    subprocess.run(["cp", src, str(m.path / "tiff" / "exp" / "python.tiff")], check=True, timeout=60)
    same_everywhere(m, "python", tifffile.imread(src))
    assert attrs(m, "python")["extrasamples"] == ["UNASSALPHA"]
    lines = dropped_lines(m, "tiff/exp/python.tiff")
    assert len(lines) == 1, m.log_text()[-2000:]
    assert all(x in lines[0] for x in ("WhitePoint (318)", "PrimaryChromaticities (319)"))
    assert "PageNumber" not in lines[0] and "DocumentName" not in lines[0]  # the layout; kept
    assert attrs(m, "python")["DocumentName"] == "python.tiff"
    deep_check(store)


@needs_libtiff
def test_scanner_tags_are_kept_served_copied_and_edited_in_place(mount_store, store, tmp_path):
    """A page whose Make, Model, Artist and Orientation ``tiffset`` set, copied in by ``tiffcp``: the
    tags were dropped without a word. They are attributes now, ``tiffinfo`` of the view's file shows
    them, a ``cp`` keeps them, ``tiffset`` on the view's file and ``gdal_edit.py -mo`` change them."""
    m = mount_store(str(store))
    (m.path / "zarr" / "other.zarr").mkdir()
    data = np.random.default_rng(4).integers(0, 255, (40, 60)).astype("u1")
    src = tmp_path / "page.tif"
    tifffile.imwrite(src, data)
    for tag, value in (("271", "Acme"), ("272", "Scan 9"), ("315", "J. Doe"), ("274", "6")):
        subprocess.run(["tiffset", "-s", tag, value, str(src)], check=True, timeout=60)
    subprocess.run(["tiffcp", "-c", "zip", str(src), str(view(m, "page"))], check=True, timeout=60)
    same_everywhere(m, "page", data)
    assert not dropped_lines(m, "tiff/exp/page.tif"), m.log_text()[-2000:]
    a = attrs(m, "page")
    assert (a["Make"], a["Model"], a["Artist"], a["Orientation"]) == ("Acme", "Scan 9", "J. Doe", 6), a
    info = subprocess.run(["tiffinfo", str(view(m, "page"))], capture_output=True, text=True, timeout=60,
                          check=True).stdout
    assert all(x in info for x in ("Make: Acme", "Model: Scan 9", "Artist: J. Doe",
                                   "Orientation: row 0 rhs, col 0 top")), info
    subprocess.run(["cp", str(view(m, "page")), str(m.path / "tiff" / "other")], check=True, timeout=60)
    assert attrs(m, "page", "other")["Artist"] == "J. Doe"
    subprocess.run(["tiffset", "-s", "315", "someone else", str(view(m, "page"))], check=True, timeout=60)
    assert attrs(m, "page")["Artist"] == "someone else"
    if shutil.which("gdal_edit.py"):
        subprocess.run(["gdal_edit.py", "-mo", "TIFFTAG_DOCUMENTNAME=invoice 7", str(view(m, "page"))], check=True,
                       timeout=60)
        assert attrs(m, "page")["DocumentName"] == "invoice 7"
    same_everywhere(m, "page", data)
    assert "not kept" not in m.log_text()
    deep_check(store)


@needs_gdal
def test_gdal_complex_integers_are_said_to_be_stored_as_floats(mount_store, store, tmp_path):
    m = mount_store(str(store))
    data = np.random.default_rng(5).integers(-3000, 3000, (30, 40)).astype("i2")
    src = tmp_path / "amp.tif"
    tifffile.imwrite(src, data)
    local = tmp_path / "slc.tif"
    subprocess.run(["gdal_translate", "-q", "-ot", "CInt16", str(src), str(local)], check=True, timeout=60)
    subprocess.run(["gdal_translate", "-q", "-ot", "CInt16", str(src), str(view(m, "slc"))], check=True, timeout=60)
    np.testing.assert_array_equal(tifffile.imread(view(m, "slc")), tifffile.imread(local))
    np.testing.assert_array_equal(tifffile.imread(view(m, "slc")).real, data)
    lines = [ln for ln in m.log_text().splitlines() if "tiff/exp/slc.tif" in ln and "complex integer" in ln]
    assert len(lines) == 1, m.log_text()[-2000:]
    out = subprocess.run(["gdalinfo", "-json", "-mm", str(view(m, "slc"))], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    band = json.loads(out)["bands"][0]
    assert band["computedMin"] == float(data.min()) and band["computedMax"] == float(data.max()), band
    deep_check(store)


@needs_gdal
def test_gdal_12_bit_samples_are_said_to_be_widened(mount_store, store, tmp_path):
    """GDAL ``NBITS=12`` (a camera's 12-bit data packed): the values are kept in 16-bit samples,
    and one log line says the file's 12 bits are not (GDAL's NBITS=12 metadata is gone)."""
    m = mount_store(str(store))
    data = np.random.default_rng(6).integers(0, 4096, (50, 70)).astype("u2")
    src = tmp_path / "cam.tif"
    tifffile.imwrite(src, data)
    subprocess.run(["gdal_translate", "-q", "-co", "NBITS=12", "-co", "COMPRESS=DEFLATE", str(src),
                    str(view(m, "cam"))], check=True, timeout=60)
    same_everywhere(m, "cam", data)
    lines = [ln for ln in m.log_text().splitlines() if "tiff/exp/cam.tif" in ln and "12-bit samples" in ln]
    assert len(lines) == 1, m.log_text()[-2000:]
    tifffile.imwrite(view(m, "plain"), data, compression="zlib")
    assert "-bit samples" not in "\n".join(ln for ln in m.log_text().splitlines() if "plain.tif" in ln)


@needs_libtiff
@pytest.mark.skipif(shutil.which("tiff2bw") is None, reason="needs tiff2bw")
def test_description_of_a_libtiff_tool_survives_a_copy(mount_store, store, tmp_path):
    """``tiff2bw`` describes what it made ("B&W version of rgb.tif"): kept as ``image_description``,
    but the view's file did not have it, so a ``cp`` of it lost it. It is the OME Description now."""
    m = mount_store(str(store))
    (m.path / "zarr" / "other.zarr").mkdir()
    rgb = tmp_path / "rgb.tif"
    tifffile.imwrite(rgb, np.random.default_rng(7).integers(0, 255, (40, 60, 3)).astype("u1"), photometric="rgb")
    subprocess.run(["tiff2bw", str(rgb), str(view(m, "grey"))], check=True, timeout=60)
    text = attrs(m, "grey")["image_description"]
    assert text.startswith("B&W version of"), text
    info = subprocess.run(["tiffinfo", str(view(m, "grey"))], capture_output=True, text=True, timeout=60,
                          check=True).stdout
    assert "<Description>B&amp;W version of" in info, info
    subprocess.run(["cp", str(view(m, "grey")), str(m.path / "tiff" / "other")], check=True, timeout=60)
    assert attrs(m, "grey", "other")["image_description"] == text
    np.testing.assert_array_equal(tifffile.imread(view(m, "grey", "other")), tifffile.imread(view(m, "grey")))
    deep_check(store)
