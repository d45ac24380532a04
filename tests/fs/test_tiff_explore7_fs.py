"""Tier 2: the TIFF view's file as a copy of the dataset (explore 7), operations awaited directly.

- a copy of a view's file (``cp tiff/a/x.tif tiff/b/``, ``gdal_translate`` out and back in)
  was not the dataset: the view named an OME image by its path (``/exp.h5/x``) whatever ``name``
  the dataset had (the OME ``Image Name`` or tifffile series name it was written with), and a copy
  stored that path as a new ``name`` attribute. The view now serves the ``name`` (OME or tifffile's
  shaped JSON), and a dataset without one has an image without a name;
- a writer's description (kept as ``image_description``) was not served: the view's OME-XML now
  gives it as the image's ``Description``, which a copy (or an OME-TIFF's own) sets again;
- resolution in inches (a 300 dpi scan) was served per centimetre (118.11): a copy, or any tool
  showing the file's DPI, said 118.11 per cm. Inches are served as inches;
- a time-lapse OME-TIFF's frame interval (``TimeIncrement``) was dropped, written or imported: it
  is the attributes ``time_increment`` and ``time_increment_unit``, and the view's OME-XML gives it
  back (an ImageJ hyperstack's ``finterval`` too);
- a scanner's or camera's descriptive tags (DocumentName, Make, Model, Orientation, PageName,
  DateTime, Artist, HostComputer, Copyright) were dropped without a word: they are attributes named
  like the tags, served back (and edited in place) as the GeoTIFF tags are; other public tags
  (the colorimetry of Python's own test image) are named in one log line, for ``polyfs import``
  too, and so are a Fiji hyperstack's slice labels, Info,
  LUTs and display ranges, and a microscope's OME-XML beyond what is kept (acquisition date,
  plane positions, channel colours and wavelengths); complex integer samples (GDAL's CInt16,
  stored as complex floats) are said.
"""
from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import numpy as np
import pytest
from writeharness import FS, zarr_array_meta

from polyfs.importers import import_source
from polyfs.model.catalog import Catalog
from polyfs.store import open_store

tifffile = pytest.importorskip("tifffile")


@pytest.fixture
def fs():
    f = FS()
    f.mkdir("zarr/exp.zarr")  # domain /exp.h5: tiff/exp
    f.mkdir("zarr/other.zarr")
    yield f
    f.close()


def tiff_bytes(data: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, data, **kw)
    return buf.getvalue()


def attrs(fs: FS, domain: str, name: str) -> dict:
    return fs.read_json(f"zarr/{domain}.zarr/{name}/zarr.json").get("attributes", {})


def series(raw: bytes) -> tuple[str, np.ndarray, dict]:
    with tifffile.TiffFile(io.BytesIO(raw)) as t:
        tags = {tag.name: tag.value for tag in t.pages[0].tags.values()}
        return t.series[0].name, t.asarray(), tags


CASES = {  # name -> (data, tifffile options, the name the dataset keeps)
    "ome_named": (np.arange(2 * 24 * 40, dtype="u2").reshape(2, 24, 40), dict(ome=True, metadata={
        "axes": "ZYX", "Name": "stained nuclei"}), "stained nuclei"),
    "rgb_named": (np.arange(24 * 40 * 3, dtype="u1").reshape(24, 40, 3), dict(photometric="rgb", metadata={
        "name": "overview"}), "overview"),
    "plain": (np.arange(24 * 40, dtype="f4").reshape(24, 40), {}, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_copy_of_a_view_file_keeps_the_name_and_adds_none(fs, case):
    data, kw, kept = CASES[case]
    fs.write_file(f"tiff/exp/{case}.tif", tiff_bytes(data, **kw))
    assert attrs(fs, "exp", case).get("name") == kept
    served = fs.read_file(f"tiff/exp/{case}.tif")
    name, pixels, _ = series(served)
    np.testing.assert_array_equal(pixels, data)
    if kept is not None:
        assert name == kept  # the view serves the dataset's name, not its path
    for where in ("tiff/exp/copy.tif", "tiff/other/copy.tif"):  # cp, within and across domains
        fs.write_file(where, served)
        domain = where.split("/")[1]
        assert attrs(fs, domain, "copy").get("name") == kept, where
        np.testing.assert_array_equal(series(fs.read_file(where))[1], data)


def test_a_users_name_that_looks_like_a_path_is_kept_across_a_copy(fs):
    """The view names no image by its path, so no name is taken for one."""
    data = np.zeros((2, 16, 16), "u1")
    fs.write_file("tiff/exp/p.tif", tiff_bytes(data, ome=True, metadata={"axes": "ZYX", "Name": "/scans/p"}))
    assert attrs(fs, "exp", "p")["name"] == "/scans/p"
    fs.write_file("tiff/other/p.tif", fs.read_file("tiff/exp/p.tif"))
    assert attrs(fs, "other", "p")["name"] == "/scans/p"


@pytest.mark.parametrize("how", ["ome", "tag"])
def test_description_is_served_and_survives_a_copy(fs, how):
    """A writer's description (``tiff2bw``'s "B&W version of x.tif", tifffile ``description=``, an
    OME image's ``Description``) was kept as ``image_description`` but not served: a copy of the
    view's file lost it. The view's OME-XML now has it as the image's Description."""
    text = "sample 12 <stained> & fixed"
    data = np.arange(2 * 16 * 16, dtype="u2").reshape(2, 16, 16)
    kw = {"ome": True, "metadata": {"axes": "ZYX", "Description": text}} if how == "ome" else {"description": text}
    fs.write_file("tiff/exp/d.tif", tiff_bytes(data, **kw))
    assert attrs(fs, "exp", "d")["image_description"] == text
    raw = fs.read_file("tiff/exp/d.tif")
    with tifffile.TiffFile(io.BytesIO(raw)) as t:
        assert tifffile.xml2dict(t.ome_metadata)["OME"]["Image"]["Description"] == text
    fs.write_file("tiff/other/d.tif", raw)
    assert attrs(fs, "other", "d")["image_description"] == text
    np.testing.assert_array_equal(series(fs.read_file("tiff/other/d.tif"))[1], data)


@pytest.mark.parametrize("name, served", [("cells, run 4", "cells, run 4"), ("bad\x00name", None)])
def test_name_given_in_another_view_names_the_image(fs, name, served):
    """A ``name`` set through ``zarr/`` names the OME image; one no XML text can hold does not."""
    fs.mkdir("zarr/exp.zarr/a")
    fs.write_json("zarr/exp.zarr/a/zarr.json", zarr_array_meta((2, 16, 16), "<u2", (1, 16, 16),
                                                               attributes={"name": name}))
    raw = fs.read_file("tiff/exp/a.tif")
    got, pixels, _ = series(raw)
    assert (got or None) == served and pixels.shape == (2, 16, 16)
    with tifffile.TiffFile(io.BytesIO(raw)) as t:  # the OME-XML whole (a NUL would end the tag's text)
        assert t.is_ome and t.ome_metadata.rstrip().endswith("</OME>")
        tifffile.xml2dict(t.ome_metadata)


def test_resolution_in_inches_is_served_in_inches(fs):
    data = np.zeros((20, 30, 3), "u1")
    fs.write_file("tiff/exp/scan.tif", tiff_bytes(data, photometric="rgb", resolution=(300, 300),
                                                  resolutionunit="INCH"))
    a = attrs(fs, "exp", "scan")
    assert a["resolution"] == [300.0, 300.0] and a["resolution_unit"] == "inch"
    _, _, tags = series(fs.read_file("tiff/exp/scan.tif"))
    assert tags["XResolution"] == (300, 1) and tags["YResolution"] == (300, 1) and int(tags["ResolutionUnit"]) == 2
    fs.write_file("tiff/other/scan.tif", fs.read_file("tiff/exp/scan.tif"))
    b = attrs(fs, "other", "scan")
    assert b["resolution"] == [300.0, 300.0] and b["resolution_unit"] == "inch"
    # per centimetre stays per centimetre
    fs.write_file("tiff/exp/cm.tif", tiff_bytes(data[..., 0], resolution=(40, 40), resolutionunit="CENTIMETER"))
    _, _, tags = series(fs.read_file("tiff/exp/cm.tif"))
    assert tags["XResolution"] == (40, 1) and int(tags["ResolutionUnit"]) == 3


@pytest.mark.parametrize("step, unit", [(2.5, "s"), (250.0, "ms")])
def test_time_lapse_frame_interval_is_kept_and_served(fs, tmp_path, step, unit):
    """An OME-TIFF's ``TimeIncrement`` (the frame interval of a time lapse) was dropped: a copy of
    the view's file, or ``polyfs import``, lost it."""
    data = np.arange(3 * 2 * 16 * 16, dtype="u2").reshape(3, 2, 16, 16)
    raw = tiff_bytes(data, ome=True, metadata={"axes": "TCYX", "TimeIncrement": step, "TimeIncrementUnit": unit,
                                               "PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5})
    fs.write_file("tiff/exp/lapse.tif", raw)
    a = attrs(fs, "exp", "lapse")
    assert a["time_increment"] == step and a["time_increment_unit"] == unit, a

    def served(where: str) -> dict:
        with tifffile.TiffFile(io.BytesIO(fs.read_file(where))) as t:
            return tifffile.xml2dict(t.ome_metadata)["OME"]["Image"]["Pixels"]

    px = served("tiff/exp/lapse.tif")
    assert px["TimeIncrement"] == step and px["TimeIncrementUnit"] == unit and px["PhysicalSizeX"] == 0.5, px
    fs.write_file("tiff/other/lapse.tif", fs.read_file("tiff/exp/lapse.tif"))
    assert served("tiff/other/lapse.tif")["TimeIncrement"] == step
    src = tmp_path / "lapse.ome.tif"
    src.write_bytes(raw)
    domain = import_source(src, str(tmp_path / "store"), progress=False)
    got = Catalog(open_store(str(tmp_path / "store"))).load(domain).resolve("/image").attributes
    assert got["time_increment"].value == step and got["time_increment_unit"].value == unit


def test_imagej_frame_interval_is_served(fs):
    """An ImageJ hyperstack's ``finterval`` (kept as ``imagej_finterval``) is the view's OME
    ``TimeIncrement``, as its ``spacing`` is ``PhysicalSizeZ``."""
    data = np.zeros((4, 3, 16, 16), "u1")
    fs.write_file("tiff/exp/ij.tif", tiff_bytes(data, imagej=True, resolution=(4, 4), metadata={
        "axes": "TZYX", "finterval": 0.5, "spacing": 2.0, "unit": "um"}))
    with tifffile.TiffFile(io.BytesIO(fs.read_file("tiff/exp/ij.tif"))) as t:
        px = tifffile.xml2dict(t.ome_metadata)["OME"]["Image"]["Pixels"]
    assert px["TimeIncrement"] == 0.5 and px["TimeIncrementUnit"] == "s" and px["PhysicalSizeZ"] == 2.0, px


SCANNER_TAGS = [(269, "s", 0, "invoice-2031.pdf", True), (271, "s", 0, "Acme", True), (272, "s", 0, "Scan 9", True),
                (274, "H", 1, 6, True), (285, "s", 0, "page 3", True), (306, "s", 0, "2026:01:02 03:04:05", True),
                (315, "s", 0, "J. Doe", True), (316, "s", 0, "scanhost", True), (33432, "s", 0, "(c) Acme", True)]
SCANNER_ATTRS = {"DocumentName": "invoice-2031.pdf", "Make": "Acme", "Model": "Scan 9", "Orientation": 6,
                 "PageName": "page 3", "DateTime": "2026:01:02 03:04:05", "Artist": "J. Doe",
                 "HostComputer": "scanhost", "Copyright": "(c) Acme"}
COLORIMETRY = [(318, "2I", 2, (3127, 10000, 3290, 10000), True),
               (319, "2I", 6, (64, 100, 33, 100, 30, 100, 60, 100, 15, 100, 6, 100), True)]


def _dropped_lines(caplog, where: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if where in r.getMessage() and "tag(s)" in r.getMessage()]


def test_descriptive_tags_are_kept_served_and_copied(fs, caplog):
    """A scanner's DocumentName, Make, Model, Orientation, PageName, DateTime, Artist, HostComputer
    and Copyright were dropped without a word: they are attributes named like the tags, served back
    on the view's file (a copy keeps them, a viewer honouring Orientation turns the image)."""
    data = np.arange(16 * 24, dtype="u1").reshape(16, 24)
    with caplog.at_level(logging.WARNING):
        fs.write_file("tiff/exp/scan.tif", tiff_bytes(data, extratags=SCANNER_TAGS))
    assert not _dropped_lines(caplog, "tiff/exp/scan.tif")
    a = attrs(fs, "exp", "scan")
    assert {k: a.get(k) for k in SCANNER_ATTRS} == SCANNER_ATTRS
    _, pixels, tags = series(fs.read_file("tiff/exp/scan.tif"))
    np.testing.assert_array_equal(pixels, data)
    assert {k: (int(tags[k]) if k == "Orientation" else tags[k]) for k in SCANNER_ATTRS} == SCANNER_ATTRS
    fs.write_file("tiff/other/scan.tif", fs.read_file("tiff/exp/scan.tif"))
    b = attrs(fs, "other", "scan")
    assert {k: b.get(k) for k in SCANNER_ATTRS} == SCANNER_ATTRS


def test_descriptive_tags_of_a_rewrite_replace_the_datasets(fs):
    """Like the GeoTIFF tags: a rewrite carrying any of them says all of them (those it lacks go); a
    plain picture written back (none of them) leaves the dataset's."""
    data = np.zeros((16, 24), "u1")
    fs.write_file("tiff/exp/scan.tif", tiff_bytes(data, extratags=SCANNER_TAGS))
    fs.write_file("tiff/exp/scan.tif", tiff_bytes(data + 1))
    assert attrs(fs, "exp", "scan")["Artist"] == "J. Doe"
    fs.write_file("tiff/exp/scan.tif", tiff_bytes(data + 2, extratags=[(315, "s", 0, "R. Roe", True)]))
    a = attrs(fs, "exp", "scan")
    assert a["Artist"] == "R. Roe" and not any(k in a for k in SCANNER_ATTRS if k != "Artist"), a
    _, pixels, tags = series(fs.read_file("tiff/exp/scan.tif"))
    assert tags["Artist"] == "R. Roe" and "Orientation" not in tags and (pixels == 2).all()


def test_descriptive_tag_edited_in_place_is_stored(fs, caplog):
    """``tiffset -s 315 ...`` on the view's file (the tag rewritten in place): stored, not said dropped."""
    data = np.zeros((16, 24), "u1")
    fs.write_file("tiff/exp/scan.tif", tiff_bytes(data, extratags=SCANNER_TAGS))
    raw = fs.read_file("tiff/exp/scan.tif")
    with tifffile.TiffFile(io.BytesIO(raw)) as t:
        tag = t.pages[0].tags["Artist"]
        at, n = tag.valueoffset, tag.count
    assert raw[at:at + n] == b"J. Doe\0"
    with caplog.at_level(logging.WARNING):
        h = fs.open_file("tiff/exp/scan.tif", os.O_RDWR)
        h.write(b"M. Poe", at)
        h.close()
    assert attrs(fs, "exp", "scan")["Artist"] == "M. Poe"
    assert not [r for r in caplog.records if "not kept" in r.getMessage()], caplog.text
    assert series(fs.read_file("tiff/exp/scan.tif"))[2]["Artist"] == "M. Poe"


def test_public_tags_not_kept_are_named(fs, caplog):
    """Tags no attribute keeps (colorimetry: WhitePoint, PrimaryChromaticities) are named."""
    data = np.zeros((16, 24, 3), "u1")
    with caplog.at_level(logging.WARNING):
        fs.write_file("tiff/exp/photo.tif", tiff_bytes(data, photometric="rgb", extratags=COLORIMETRY))
        lines = _dropped_lines(caplog, "tiff/exp/photo.tif")
        assert len(lines) == 1 and "WhitePoint (318)" in lines[0] and "PrimaryChromaticities (319)" in lines[0], lines
        caplog.clear()  # a plain file says nothing
        fs.write_file("tiff/exp/plain.tif", tiff_bytes(data[..., 0], compression="zlib", tile=(16, 16)))
        assert not _dropped_lines(caplog, "tiff/exp/plain.tif")
        assert not [r for r in caplog.records if "complex" in r.getMessage() or "-bit" in r.getMessage()]


def test_import_keeps_descriptive_tags_and_names_the_others(tmp_path, caplog):
    src = tmp_path / "scan.tif"
    tifffile.imwrite(src, np.zeros((16, 24), "u1"), extratags=SCANNER_TAGS + COLORIMETRY)
    with caplog.at_level(logging.WARNING):
        domain = import_source(src, str(tmp_path / "store"), progress=False)
    lines = _dropped_lines(caplog, str(src))
    assert len(lines) == 1 and "WhitePoint (318)" in lines[0] and "Artist" not in lines[0], lines
    got = Catalog(open_store(str(tmp_path / "store"))).load(domain).resolve("/image").attributes
    assert {k: got[k].value for k in SCANNER_ATTRS} == SCANNER_ATTRS


def test_fiji_metadata_not_kept_is_named(fs, caplog):
    """Slice labels, the Info text, display ranges and channel LUTs of a Fiji hyperstack vanished
    without a word (only its dimensions, spacing and units are attributes)."""
    data = np.zeros((2, 3, 16, 16), "u1")
    lut = np.zeros((3, 256), "u1")
    with caplog.at_level(logging.WARNING):
        fs.write_file("tiff/exp/fiji.tif", tiff_bytes(data, imagej=True, metadata={
            "axes": "ZCYX", "spacing": 1.5, "Labels": [f"z{i}" for i in range(6)], "Info": "objective 60x",
            "Ranges": (0, 255) * 3, "LUTs": [lut, lut, lut]}))
        fs.write_file("tiff/exp/plain_ij.tif", tiff_bytes(data, imagej=True, metadata={"axes": "ZCYX"}))
    lines = [r.getMessage() for r in caplog.records if "ImageJ metadata" in r.getMessage()]
    assert len(lines) == 1 and "tiff/exp/fiji.tif" in lines[0], lines
    assert all(k in lines[0] for k in ("LUTs", "Ranges", "Labels", "Info")), lines
    assert attrs(fs, "exp", "fiji")["imagej_spacing"] == 1.5


def test_ome_metadata_not_kept_is_named(fs, caplog):
    """A microscope's OME-XML beyond its name, description, pixel sizes, frame interval and channel
    names (acquisition date, per-plane positions and times, channel colours and wavelengths)
    vanished without a word; what is kept, and the view's own OME-XML copied back, say nothing."""
    data = np.zeros((2, 3, 16, 16), "u2")
    rich = {"axes": "CZYX", "PhysicalSizeX": 0.1, "PhysicalSizeY": 0.1, "Description": "fixed cells",
            "AcquisitionDate": "2026-01-02T03:04:05", "Plane": {"PositionX": [1.0] * 6, "DeltaT": [0.5] * 6},
            "Channel": {"Name": ["DAPI", "GFP"], "Color": [-16776961, 16711935], "EmissionWavelength": [461, 509]}}
    kept = {"axes": "TCZYX", "PhysicalSizeX": 0.1, "PhysicalSizeY": 0.1, "PhysicalSizeZ": 1.0, "TimeIncrement": 2.0,
            "Channel": {"Name": ["DAPI"]}}

    def ome_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "OME metadata" in r.getMessage()]

    with caplog.at_level(logging.WARNING):
        fs.write_file("tiff/exp/rich.tif", tiff_bytes(data, ome=True, metadata=rich))
        lines = ome_lines()
        assert len(lines) == 1 and "tiff/exp/rich.tif" in lines[0], lines
        assert all(k in lines[0] for k in ("Image/AcquisitionDate", "Pixels/Plane", "Channel/Color",
                                           "Channel/EmissionWavelength")), lines
        assert all(k not in lines[0] for k in ("Channel/Name", "PhysicalSize", "Description")), lines
        caplog.clear()
        fs.write_file("tiff/exp/kept.tif", tiff_bytes(data[None, :1], ome=True, metadata=kept))
        fs.write_file("tiff/exp/rich_copy.tif", fs.read_file("tiff/exp/rich.tif"))
        assert not ome_lines(), ome_lines()
    copied = attrs(fs, "exp", "rich_copy")
    assert copied["channel_names"] == ["DAPI", "GFP"] and copied["image_description"] == "fixed cells"


def test_python_test_image_says_its_colorimetry_is_dropped(fs, caplog):
    """CPython's own test TIFF (``test_email/data/python.tiff``: RGBA, DocumentName, WhitePoint,
    PrimaryChromaticities), when installed."""
    import glob
    import sys

    found = sorted(glob.glob(str(Path(sys.base_prefix) / "lib" / "python3*" / "test" / "**" / "python.tiff"),
                             recursive=True)) or sorted(glob.glob("/root/.pyenv/versions/*/lib/python3*/test/**/"
                                                                  "python.tiff", recursive=True))
    if not found:
        pytest.skip("no CPython test image installed")
    raw = Path(found[0]).read_bytes()
    with caplog.at_level(logging.WARNING):
        fs.write_file("tiff/exp/python.tif", raw)
    np.testing.assert_array_equal(series(fs.read_file("tiff/exp/python.tif"))[1], tifffile.imread(found[0]))
    lines = _dropped_lines(caplog, "tiff/exp/python.tif")
    assert len(lines) == 1 and "WhitePoint (318)" in lines[0] and "PrimaryChromaticities (319)" in lines[0], lines
    assert "DocumentName" not in lines[0] and attrs(fs, "exp", "python")["DocumentName"] == "python.tiff"


def test_complex_integer_samples_are_said_to_be_stored_as_floats(fs, caplog):
    """GDAL's CInt16 (a SAR scene's samples): SampleFormat 5, which tifffile decodes as complex64."""
    data = (np.arange(16 * 24).reshape(16, 24) % 300 - 150).astype("i2")
    pairs = np.stack([data, -data], axis=-1)  # (re, im) int16 pairs: 32 bits per sample
    raw = bytearray(tiff_bytes(pairs.view("<i4")[..., 0]))
    with tifffile.TiffFile(io.BytesIO(bytes(raw))) as t:  # SampleFormat 2 (int) -> 5 (complex int)
        tag = t.pages[0].tags["SampleFormat"]
        at = tag.valueoffset
    assert raw[at:at + 2] == b"\x02\x00"
    raw[at:at + 2] = b"\x05\x00"
    with caplog.at_level(logging.WARNING):
        fs.write_file("tiff/exp/slc.tif", bytes(raw))
    got = series(fs.read_file("tiff/exp/slc.tif"))[1]
    np.testing.assert_array_equal(got, data + (-data) * 1j)
    assert [r for r in caplog.records if "tiff/exp/slc.tif" in r.getMessage() and "complex integer" in r.getMessage()]
