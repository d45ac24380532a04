"""Tier 1: TIFF structures, the layout-sharing synthesizer API, tile geometry, metadata."""
from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
import zlib

import numpy as np
import pytest
import tifffile

from polyfs.errors import InvalidInput
from polyfs.model import types as T
from polyfs.model.schema import Attribute, Dataset, Group, Shape
from polyfs.formats.tiff import meta as tiffmeta
from polyfs.formats.tiff.image import TiffImage, needs_bigtiff, tiff_header, tiff_metadata, tiff_metadata_size
from polyfs.formats.tiff.structs import (BIGTIFF, CLASSIC, TAGS, entry, flavor, header, header_size, ifd_chain, read_header, read_ifds)
from polyfs.formats.tiff.tiles import MAX_TILE, tile_axis


# -- binary layouts ---------------------------------------------------------------
@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("big", [False, True])
def test_header_round_trip(endian, big):
    h = header(endian, big, 1234)
    assert len(h) == header_size(big) == (16 if big else 8)
    assert h[:2] == (b"II" if endian == "<" else b"MM")
    assert read_header(h) == (endian, big, 1234)


def test_layout_sizes_follow_the_spec():
    assert CLASSIC.entry.size == 12 and BIGTIFF.entry.size == 20
    assert CLASSIC.inline == 4 and BIGTIFF.inline == 8
    assert CLASSIC.ifd_size(3) == 2 + 36 + 4 and BIGTIFF.ifd_size(3) == 8 + 60 + 8


def test_bad_headers_are_invalid_input():
    with pytest.raises(InvalidInput):
        read_header(b"XX\x2a\x00\x08\x00\x00\x00")
    with pytest.raises(InvalidInput):
        read_header(b"II\x2b\x00\x04\x00\x00\x00" + bytes(8))


@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("big", [False, True])
def test_ifd_chain_packs_and_parses_with_the_same_declarations(endian, big):
    offsets = np.arange(6, dtype=np.int64) * 1000 + 77
    pages = []
    for p in range(3):
        items = [entry("ImageWidth", 100, endian, big), entry("ImageLength", 50, endian, big),
                 entry("BitsPerSample", 16, endian, big), entry("XResolution", (300, 1), endian, big),
                 entry("TileOffsets", offsets + p, endian, big, shared=False),
                 entry("TileByteCounts", np.full(6, 10 + p), endian, big, shared=False)]
        if p == 0:
            items.insert(3, entry("ImageDescription", "hello µm", endian, big))
        pages.append(sorted(items, key=lambda e: e.tag))
    base = header_size(big)
    blob = ifd_chain(pages, base, endian, big)
    assert ifd_chain(pages, base, endian, big, size_only=True) == len(blob)
    data = header(endian, big, base) + blob
    got_endian, got_big, ifds = read_ifds(data)
    assert (got_endian, got_big, len(ifds)) == (endian, big, 3)
    assert ifds[0].get("ImageDescription") == "hello µm"
    assert ifds[1].get("ImageDescription") is None
    for p, ifd in enumerate(ifds):
        assert ifd.get("ImageWidth") == 100 and ifd.get("XResolution") == (300, 1)
        assert list(ifd.get("TileOffsets")) == list(offsets + p)
        assert ifd.get("TileByteCounts") == (10 + p,) * 6
    # a repeated small value (the resolution rational) is stored once, tile arrays never shared
    xres = TAGS["XResolution"].code
    if big:
        assert xres not in ifds[0].value_offsets  # 8 bytes fit in a BigTIFF entry
    else:
        assert len({ifd.value_offsets[xres] for ifd in ifds}) == 1
    toff = TAGS["TileOffsets"].code
    assert len({ifd.value_offsets[toff] for ifd in ifds}) == 3
    # the size does not depend on the offsets' values
    zeros = [[e if e.tag != toff else entry("TileOffsets", np.zeros(6), endian, big, shared=False) for e in pg]
             for pg in pages]
    assert ifd_chain(zeros, base, endian, big, size_only=True) == len(blob)


def test_ifd_chain_refuses_bad_input():
    e = [entry("ImageLength", 5, "<"), entry("ImageWidth", 5, "<")]
    with pytest.raises(InvalidInput):
        ifd_chain([e], 8, "<", False)  # tags not ascending
    with pytest.raises(InvalidInput):
        ifd_chain([sorted(e, key=lambda x: x.tag)], 9, "<", False)  # misaligned
    with pytest.raises(InvalidInput):
        entry("TileOffsets", [1 << 33], "<", big=False)  # needs BigTIFF
    with pytest.raises(InvalidInput):
        flavor("|", False)


# -- the layout-sharing API (what the polyglot view uses) ------------------------------
@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("big", [False, True])
def test_caller_placed_tiles_and_metadata(tmp_path, endian, big):
    """Header at 0, a 512-byte "user block" the caller owns, tiles where the caller put
    them, a fill tile shared by missing tiles, and the IFD chain at the end of the file."""
    rng = np.random.default_rng(3)
    dt = np.dtype(endian + "u2")
    arr = rng.integers(0, 4000, (2, 40, 50)).astype(dt)
    tile = (32, 32)
    image = TiffImage(40, 50, 2, dt, tile, 8, description='{"shape": [2, 40, 50]}')
    body = bytearray(b"U" * 512)  # user block (HDF5 superblock would follow)
    body[:header_size(big)] = bytes(header_size(big))
    fill_at = len(body)
    body += zlib.compress(bytes(32 * 32 * 2))
    fill_len = len(body) - fill_at
    offsets = np.zeros((2, image.tiles_per_page), dtype=np.int64)
    counts = np.zeros_like(offsets)
    for p in range(2):
        for t in range(image.tiles_per_page):
            if p == 1 and t == 0:  # a missing tile
                offsets[p, t], counts[p, t] = fill_at, fill_len
                continue
            r, c = divmod(t, image.tiles_across)
            block = np.zeros(tile, dtype=dt)
            part = arr[p, r * 32:(r + 1) * 32, c * 32:(c + 1) * 32]
            block[:part.shape[0], :part.shape[1]] = part
            body += b"junk"  # gaps between tiles are fine
            offsets[p, t] = len(body)
            data = zlib.compress(block.tobytes())
            counts[p, t] = len(data)
            body += data
    base = len(body) + (-len(body)) % flavor(endian, big).align
    body += bytes(base - len(body))
    meta = tiff_metadata(image, base, offsets, counts, big)
    assert len(meta) == tiff_metadata_size(image, big)
    body += meta
    body[:header_size(big)] = tiff_header(image, big, first_ifd=base)
    assert body[header_size(big):512] == b"U" * (512 - header_size(big))
    path = tmp_path / "shared.tif"
    path.write_bytes(bytes(body))
    want = arr.copy()
    want[1, :32, :32] = 0
    with tifffile.TiffFile(path) as tif:
        assert tif.is_bigtiff == big
        np.testing.assert_array_equal(tif.asarray(), want)
    if shutil.which("tiffinfo"):
        res = subprocess.run(["tiffinfo", "-D", str(path)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and res.stderr == ""


def test_bigtiff_threshold():
    assert not needs_bigtiff((1 << 32) - 1)
    assert needs_bigtiff(1 << 32)


# -- tile geometry --------------------------------------------------------------------
@pytest.mark.parametrize("n,c,want", [
    (1000, 64, 64),      # multiple of 16: the chunk
    (100, 100, 112),     # one chunk along the axis: one tile across, rounded up
    (300, 100, 304),     # short axis: one tile made of all its chunks
    (5000, 100, 400),    # k * c: 4 whole chunks
    (5000, 125, 2000),   # 16 whole chunks
    (9000, 1001, 1008),  # k * c too large: tiles straddle chunk edges
])
def test_tile_axis(n, c, want):
    got = tile_axis(n, c)
    assert got == want and got % 16 == 0
    assert got <= max(MAX_TILE, -(-n // 16) * 16, -(-c // 16) * 16)


# -- metadata -------------------------------------------------------------------------
def _ds(shape, attrs=None, dtype=None) -> Dataset:
    ds = Dataset("d-00000000-00000000-0000-000000-000001", "g-x", dtype or T.IntType(2, False),
                 Shape("simple", tuple(shape)), tuple(shape))
    for k, v in (attrs or {}).items():
        ds.attributes[k] = Attribute(k, T.FloatType(8), Shape("simple", (1,)), v)
    return ds


def test_assign_letters_defaults_and_names():
    assert tiffmeta.assign_letters([None] * 3) == ["Z", "Y", "X"]
    assert tiffmeta.assign_letters([None] * 4) == ["C", "Z", "Y", "X"]
    assert tiffmeta.assign_letters([None] * 5) == ["T", "C", "Z", "Y", "X"]
    assert tiffmeta.assign_letters(["z", "time", "y", "x"]) == ["Z", "T", "Y", "X"]
    assert tiffmeta.assign_letters(["Channel", None, "y", "x"]) == ["C", "Z", "Y", "X"]
    assert tiffmeta.assign_letters(["z", "z", "y", "x"]) == ["C", "Z", "Y", "X"]  # a name claimed twice
    assert tiffmeta.assign_letters([None] * 6) is None


def test_axis_names_from_attributes():
    ds = _ds((2, 3, 4, 5))
    ds.attributes["axes"] = Attribute("axes", T.StringType(None), Shape("scalar"), "tzyx")
    assert tiffmeta.axis_names(ds, None, "d") == ["t", "z", "y", "x"]
    ds.attributes["DIMENSION_LABELS"] = Attribute("DIMENSION_LABELS", T.StringType(None), Shape("simple", (4,)),
                                                  ["c", "z", "", ""])
    assert tiffmeta.axis_names(ds, None, "d") == ["c", "z", "", ""]
    parent = Group("g-x", "g-x")
    ngff = [{"axes": [{"name": "c", "type": "channel"}, {"name": "t", "type": "time", "unit": "second"},
                      {"name": "y", "type": "space", "unit": "nanometer"},
                      {"name": "x", "type": "space", "unit": "nanometer"}],
             "datasets": [{"path": "s0", "coordinateTransformations": [{"type": "scale", "scale": [1, 2.5, 40, 30]}]}]}]
    parent.attributes["multiscales"] = Attribute("multiscales", T.StringType(None), Shape("scalar"), ngff)
    plain = _ds((2, 3, 4, 5))
    assert tiffmeta.axis_names(plain, parent, "s0") == ["c", "t", "y", "x"]
    letters = tiffmeta.assign_letters(tiffmeta.axis_names(plain, parent, "s0"))
    assert letters == ["C", "T", "Y", "X"]
    sizes = tiffmeta.physical_sizes(plain, parent, "s0", letters)
    assert sizes == [None, (2.5, "s"), (40.0, "nm"), (30.0, "nm")]


def test_physical_sizes_sources():
    letters = ["Z", "Y", "X"]
    assert tiffmeta.physical_sizes(_ds((4, 5, 6), {"element_size_um": [2.0, 0.5, 0.25]}), None, "d", letters) == \
        [(2.0, "µm"), (0.5, "µm"), (0.25, "µm")]
    ds = _ds((4, 5, 6), {"pixel_size": [0.1, 0.2]})
    ds.attributes["unit"] = Attribute("unit", T.StringType(None), Shape("scalar"), "nanometer")
    assert tiffmeta.physical_sizes(ds, None, "d", letters) == [None, (0.1, "nm"), (0.2, "nm")]
    assert tiffmeta.physical_sizes(_ds((4, 5, 6), {"resolution": 3.0}), None, "d", letters) == [(3.0, "µm")] * 3
    assert tiffmeta.physical_sizes(_ds((4, 5, 6), {"resolution": [1.0, -1.0, 2.0]}), None, "d", letters) == \
        [(1.0, "µm"), None, (2.0, "µm")]
    assert tiffmeta.physical_sizes(_ds((4, 5, 6), {"scale": [1, 2, 3, 4]}), None, "d", letters) == [None] * 3
    assert tiffmeta.physical_sizes(_ds((4, 5, 6)), None, "d", letters) == [None] * 3


def test_ome_xml_and_resolution():
    axes = (tiffmeta.Axis("T", 2, 1.5, "s"), tiffmeta.Axis("Z", 3, 2.0, "µm"), tiffmeta.Axis("C", 4),
            tiffmeta.Axis("Y", 5, 0.5, "µm"), tiffmeta.Axis("X", 6, 0.25, "µm"))
    xml = tiffmeta.ome_xml("/a/b <img>", axes, np.dtype(">u2"))
    assert xml.isascii()
    root = ET.fromstring(xml)
    ns = {"ome": tiffmeta.OME_NS}
    image = root.find("ome:Image", ns)
    assert image.get("Name") == "/a/b <img>"
    px = image.find("ome:Pixels", ns)
    assert px.get("DimensionOrder") == "XYCZT"  # C fastest, then Z, then T (C order of T, Z, C)
    assert (px.get("SizeT"), px.get("SizeZ"), px.get("SizeC"), px.get("SizeY"), px.get("SizeX")) == \
        ("2", "3", "4", "5", "6")
    assert px.get("Type") == "uint16" and px.get("BigEndian") == "true"
    assert px.get("PhysicalSizeX") == "0.25" and px.get("PhysicalSizeXUnit") == "µm"
    assert px.get("PhysicalSizeZ") == "2.0" and px.get("TimeIncrement") == "1.5"
    assert len(px.findall("ome:Channel", ns)) == 4
    assert px.find("ome:TiffData", ns).get("PlaneCount") == "24"
    xres, yres, unit = tiffmeta.resolution_tags(axes)
    assert unit == 3 and xres[0] / xres[1] == pytest.approx(40000) and yres[0] / yres[1] == pytest.approx(20000)
    assert tiffmeta.resolution_tags(axes[:3] + (tiffmeta.Axis("Y", 5), tiffmeta.Axis("X", 6))) == \
        ((1, 1), (1, 1), 1)


def test_describe_falls_back_to_shaped_json():
    assert tiffmeta.describe(_ds((2, 3, 4)), None, "d", "t", np.dtype("<u8")).kind == "shaped"
    meta = tiffmeta.describe(_ds((2,) * 6), None, "d", "t", np.dtype("<u2"))
    assert meta.kind == "shaped" and '"shape": [2, 2, 2, 2, 2, 2]' in meta.description
    assert tiffmeta.describe(_ds((2, 3, 4)), None, "d", "t", np.dtype("<i4")).kind == "ome"
