"""TIFF and BigTIFF binary structures, declared once as data.

The header, IFD entry and IFD count/next layouts (classic and BigTIFF), the
field-type table and the tag table are data; :func:`ifd_chain` packs a chain
of IFDs from them and :func:`read_ifds` parses one back with the very same
declarations, so the writer and the test/ingest parser cannot drift apart.

Out-of-line values are placed after all IFDs (the IFD chain stays compact at
the front of the file, so a reader walking the pages touches a few KB).
Small values that repeat on every page (resolution rationals, the software
string) are stored once and shared; tile offset/byte-count arrays are never
shared so the chain's size does not depend on the offsets it holds: the size
can be computed first and the offsets filled in afterwards (see tiff.py).
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ...binfmt import Layout
from ...errors import InvalidInput


# -- field types (TIFF 6.0 section 2, BigTIFF adds 16-18) -----------------
@dataclass(frozen=True)
class FieldType:
    code: int
    name: str
    fmt: str  # struct code of one value (RATIONAL: a pair)

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.fmt)


FIELD_TYPES: dict[int, FieldType] = {t.code: t for t in (
    FieldType(1, "BYTE", "B"),
    FieldType(2, "ASCII", "B"),
    FieldType(3, "SHORT", "H"),
    FieldType(4, "LONG", "I"),
    FieldType(5, "RATIONAL", "II"),
    FieldType(6, "SBYTE", "b"),
    FieldType(7, "UNDEFINED", "B"),
    FieldType(8, "SSHORT", "h"),
    FieldType(9, "SLONG", "i"),
    FieldType(10, "SRATIONAL", "ii"),
    FieldType(11, "FLOAT", "f"),
    FieldType(12, "DOUBLE", "d"),
    FieldType(16, "LONG8", "Q"),
    FieldType(17, "SLONG8", "q"),
    FieldType(18, "IFD8", "Q"),
)}
BYTE, ASCII, SHORT, LONG, RATIONAL, DOUBLE, LONG8 = 1, 2, 3, 4, 5, 12, 16


# -- tags polyfs writes (TIFF 6.0 baseline + tiled images, SampleFormat) ---
@dataclass(frozen=True)
class Tag:
    code: int
    name: str
    type: int  # field type in classic TIFF
    big_type: int | None = None  # field type in BigTIFF, if different


TAGS: dict[str, Tag] = {t.name: t for t in (
    Tag(254, "NewSubfileType", LONG),
    Tag(256, "ImageWidth", LONG),
    Tag(257, "ImageLength", LONG),
    Tag(258, "BitsPerSample", SHORT),
    Tag(259, "Compression", SHORT),
    Tag(262, "PhotometricInterpretation", SHORT),
    Tag(269, "DocumentName", ASCII),
    Tag(270, "ImageDescription", ASCII),
    Tag(271, "Make", ASCII),
    Tag(272, "Model", ASCII),
    Tag(274, "Orientation", SHORT),
    Tag(277, "SamplesPerPixel", SHORT),
    Tag(282, "XResolution", RATIONAL),
    Tag(283, "YResolution", RATIONAL),
    Tag(284, "PlanarConfiguration", SHORT),
    Tag(285, "PageName", ASCII),
    Tag(296, "ResolutionUnit", SHORT),
    Tag(305, "Software", ASCII),
    Tag(306, "DateTime", ASCII),
    Tag(315, "Artist", ASCII),
    Tag(316, "HostComputer", ASCII),
    Tag(320, "ColorMap", SHORT),
    Tag(322, "TileWidth", LONG),
    Tag(323, "TileLength", LONG),
    Tag(324, "TileOffsets", LONG, LONG8),
    Tag(325, "TileByteCounts", LONG, LONG8),
    Tag(338, "ExtraSamples", SHORT),
    Tag(339, "SampleFormat", SHORT),
    Tag(530, "YCbCrSubSampling", SHORT),
    Tag(33432, "Copyright", ASCII),  # with the descriptive tags above (described.py)
    # GeoTIFF and GDAL's own (geo.py)
    Tag(33550, "ModelPixelScaleTag", DOUBLE),
    Tag(33922, "ModelTiepointTag", DOUBLE),
    Tag(34264, "ModelTransformationTag", DOUBLE),
    Tag(34735, "GeoKeyDirectoryTag", SHORT),
    Tag(34736, "GeoDoubleParamsTag", DOUBLE),
    Tag(34737, "GeoAsciiParamsTag", ASCII),
    Tag(42112, "GDAL_METADATA", ASCII),
    Tag(42113, "GDAL_NODATA", ASCII),
    Tag(50844, "RPCCoefficientTag", DOUBLE),
)}
TAG_NAMES: dict[int, str] = {t.code: t.name for t in TAGS.values()}

# Compression codes (the codec registry's ``CodecSpec.tiff`` gives the others)
COMPRESSION_NONE, COMPRESSION_DEFLATE, COMPRESSION_ZSTD = 1, 8, 50000
PHOTOMETRIC_MINISBLACK = 1
RESUNIT_NONE, RESUNIT_INCH, RESUNIT_CENTIMETER = 1, 2, 3
SAMPLE_FORMAT = {"u": 1, "b": 1, "i": 2, "f": 3, "c": 6}  # numpy kind -> SampleFormat (6: complex IEEE)


# -- headers and IFD framing, classic and BigTIFF ---------------------------
@dataclass(frozen=True)
class Flavor:
    """Classic TIFF or BigTIFF: the layouts that differ between them."""

    big: bool
    header: Layout
    count: Layout  # number of entries at the start of an IFD
    entry: Layout
    next: Layout  # offset of the next IFD at its end
    align: int  # IFDs and out-of-line values start on this boundary

    @property
    def inline(self) -> int:
        """Bytes of a value that fit in the entry itself."""
        return self.entry.size - self.entry.offset_of("value")

    @property
    def offset_fmt(self) -> str:
        return "Q" if self.big else "I"

    def ifd_size(self, nentries: int) -> int:
        return self.count.size + nentries * self.entry.size + self.next.size

    def with_endian(self, endian: str) -> "Flavor":
        return Flavor(self.big, self.header.with_endian(endian), self.count.with_endian(endian),
                      self.entry.with_endian(endian), self.next.with_endian(endian), self.align)


CLASSIC = Flavor(
    False,
    Layout.of("tiff_header", [("byteorder", "2s"), ("magic", "H", 42), ("ifd0", "I")]),
    Layout.of("ifd_count", [("n", "H")]),
    Layout.of("ifd_entry", [("tag", "H"), ("type", "H"), ("count", "I"), ("value", "4s")]),
    Layout.of("ifd_next", [("next", "I")]),
    2,
)
BIGTIFF = Flavor(
    True,
    Layout.of("bigtiff_header", [("byteorder", "2s"), ("magic", "H", 43), ("offsize", "H", 8),
                                 ("reserved", "H", 0), ("ifd0", "Q")]),
    Layout.of("bigtiff_ifd_count", [("n", "Q")]),
    Layout.of("bigtiff_ifd_entry", [("tag", "H"), ("type", "H"), ("count", "Q"), ("value", "8s")]),
    Layout.of("bigtiff_ifd_next", [("next", "Q")]),
    8,
)
BYTEORDER = {"<": b"II", ">": b"MM"}
ENDIAN_OF = {v: k for k, v in BYTEORDER.items()}


@functools.cache
def flavor(endian: str, big: bool) -> Flavor:
    if endian not in BYTEORDER:
        raise InvalidInput(f"TIFF byte order must be '<' or '>', not {endian!r}")
    return (BIGTIFF if big else CLASSIC).with_endian(endian)


def header(endian: str, big: bool, first_ifd: int) -> bytes:
    """The 8-byte (classic) or 16-byte (BigTIFF) file header."""
    fl = flavor(endian, big)
    return fl.header.pack(byteorder=BYTEORDER[endian], ifd0=first_ifd)


def header_size(big: bool) -> int:
    return (BIGTIFF if big else CLASSIC).header.size


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


_LIMITS = {f: (int(np.iinfo(f).min), int(np.iinfo(f).max)) for f in ("B", "b", "H", "h", "I", "i", "Q", "q")}


# -- entries --------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One IFD entry with its value already packed in the file's byte order."""

    tag: int
    type: int
    count: int
    data: bytes
    shared: bool = True  # an out-of-line value may be stored once for identical entries


def entry(name: str, values: Any, endian: str, big: bool = False, shared: bool = True) -> Entry:
    """Pack ``values`` for tag ``name`` (a str for ASCII, (num, den) pairs for RATIONAL)."""
    tag = TAGS[name]
    ftype = tag.big_type if big and tag.big_type else tag.type
    ft = FIELD_TYPES[ftype]
    if ftype == ASCII:
        data = (values.encode("utf-8") if isinstance(values, str) else bytes(values)) + b"\0"
        return Entry(tag.code, ftype, len(data), data, shared)
    if ftype in (RATIONAL, 10):
        pairs = [values] if isinstance(values, tuple) else list(values)
        flat = [int(x) for pair in pairs for x in pair]
        return Entry(tag.code, ftype, len(pairs), struct.pack(endian + ft.fmt * len(pairs), *flat), shared)
    arr = np.atleast_1d(np.asarray(values))
    dt = np.dtype(endian + ft.fmt)
    if dt.kind in "iu" and arr.size:
        lo, hi = _LIMITS[ft.fmt]
        if arr.min() < lo or arr.max() > hi:
            raise InvalidInput(f"TIFF tag {name}: value out of range for {ft.name}")
    return Entry(tag.code, ftype, int(arr.size), arr.astype(dt, copy=False).tobytes(), shared)


def row_entries(name: str, rows: np.ndarray, endian: str, big: bool = False) -> list[Entry]:
    """One unshared entry per row of a 2-D array (tile offsets/byte counts of every page)."""
    tag = TAGS[name]
    ftype = tag.big_type if big and tag.big_type else tag.type
    ft = FIELD_TYPES[ftype]
    rows = np.asarray(rows)
    lo, hi = _LIMITS[ft.fmt]
    if rows.size and (rows.min() < lo or rows.max() > hi):
        raise InvalidInput(f"TIFF tag {name}: value out of range for {ft.name}")
    packed = np.ascontiguousarray(rows.astype(np.dtype(endian + ft.fmt)))
    n = packed.shape[1]
    return [Entry(tag.code, ftype, n, packed[i].tobytes(), False) for i in range(packed.shape[0])]


# -- the IFD chain ----------------------------------------------------------
def ifd_chain(pages: Sequence[Sequence[Entry]], base: int, endian: str, big: bool,
              size_only: bool = False) -> bytes | int:
    """Pack one IFD per page, chained, starting at file offset ``base``.

    ``base`` must be aligned (2 classic, 8 BigTIFF). All IFDs come first,
    then the out-of-line values. Returns the bytes, or only their size with
    ``size_only`` (the size never depends on the values of unshared entries).
    """
    fl = flavor(endian, big)
    align, inline = fl.align, fl.inline
    if base % align:
        raise InvalidInput(f"IFD chain offset {base} is not {align}-byte aligned")
    ifd_offsets = []
    pos = base
    for i, entries in enumerate(pages):
        ifd_offsets.append(pos)
        pos = _align(pos + fl.ifd_size(len(entries)), align)
    # out-of-line values after all IFDs; identical shared values stored once
    pool: dict[bytes, int] = {}
    placed: list[list[int]] = []
    blobs: list[tuple[int, bytes]] = []
    for entries in pages:
        offs = []
        for e in entries:
            if len(e.data) <= inline:
                offs.append(-1)
            elif e.shared and e.data in pool:
                offs.append(pool[e.data])
            else:
                offs.append(pos)
                if e.shared:
                    pool[e.data] = pos
                blobs.append((pos, e.data))
                pos = _align(pos + len(e.data), align)
        placed.append(offs)
    total = pos - base
    if size_only:
        return total
    out = bytearray(total)
    offset_struct = struct.Struct(fl.entry.endian + fl.offset_fmt)
    memo: dict[tuple, bytes] = {}  # packed entries repeated on every page

    def packed(e: Entry, off: int) -> bytes:
        value = e.data.ljust(inline, b"\0") if off < 0 else offset_struct.pack(off)
        return fl.entry.pack(tag=e.tag, type=e.type, count=e.count, value=value)

    for i, (entries, offs) in enumerate(zip(pages, placed)):
        at = ifd_offsets[i] - base
        last = -1
        parts = [fl.count.pack(n=len(entries))]
        for e, off in zip(entries, offs):
            if e.tag <= last:
                raise InvalidInput(f"IFD {i}: tags must be unique and ascending")
            last = e.tag
            if e.shared:
                key = (e.tag, e.type, e.count, off, e.data if off < 0 else b"")
                b = memo.get(key)
                if b is None:
                    b = memo[key] = packed(e, off)
            else:
                b = packed(e, off)
            parts.append(b)
        parts.append(fl.next.pack(next=ifd_offsets[i + 1] if i + 1 < len(pages) else 0))
        block = b"".join(parts)
        out[at:at + len(block)] = block
    for off, data in blobs:
        out[off - base:off - base + len(data)] = data
    return bytes(out)


# -- parsing (tests, and ingest of files written through the view) ----------
@dataclass
class ParsedIFD:
    offset: int
    tags: dict[int, tuple]  # tag code -> values (ASCII: a 1-tuple of str)
    value_offsets: dict[int, int]  # tag code -> offset of out-of-line values

    def get(self, name: str, default: Any = None) -> Any:
        v = self.tags.get(TAGS[name].code)
        if v is None:
            return default
        return v[0] if len(v) == 1 else v


def read_header(buf: bytes | memoryview) -> tuple[str, bool, int]:
    """(endian, bigtiff, first IFD offset) of a TIFF file's first bytes."""
    order = bytes(buf[:2])
    if order not in ENDIAN_OF:
        raise InvalidInput("not a TIFF file (bad byte-order mark)")
    endian = ENDIAN_OF[order]
    magic = struct.unpack_from(endian + "H", buf, 2)[0]
    if magic not in (42, 43):
        raise InvalidInput(f"not a TIFF file (magic {magic})")
    fl = flavor(endian, magic == 43)
    h = fl.header.unpack(buf)
    if fl.big and (h["offsize"] != 8 or h["reserved"] != 0):
        raise InvalidInput("BigTIFF header with an unsupported offset size")
    return endian, fl.big, h["ifd0"]


def read_ifds(buf: bytes | memoryview, limit: int = 1 << 20) -> tuple[str, bool, list[ParsedIFD]]:
    """Every IFD of a whole TIFF file held in memory."""
    endian, big, pos = read_header(buf)
    fl = flavor(endian, big)
    out: list[ParsedIFD] = []
    seen: set[int] = set()
    while pos:
        if pos in seen or len(out) >= limit:
            raise InvalidInput(f"IFD chain loops at offset {pos}")
        seen.add(pos)
        n = fl.count.unpack(buf, pos)["n"]
        at = pos + fl.count.size
        tags: dict[int, tuple] = {}
        voffs: dict[int, int] = {}
        for _ in range(n):
            e = fl.entry.unpack(buf, at)
            at += fl.entry.size
            ft = FIELD_TYPES.get(e["type"])
            if ft is None:
                continue  # unknown field types are skipped, as TIFF 6.0 asks
            nbytes = ft.size * e["count"]
            if nbytes <= fl.inline:
                raw = e["value"][:nbytes]
            else:
                off = struct.unpack(endian + fl.offset_fmt, e["value"])[0]
                voffs[e["tag"]] = off
                raw = bytes(buf[off:off + nbytes])
                if len(raw) != nbytes:
                    raise InvalidInput(f"tag {e['tag']}: values run past the end of the file")
            if ft.code == ASCII:
                tags[e["tag"]] = (raw.split(b"\0", 1)[0].decode("utf-8", "replace"),)
            else:
                vals = struct.unpack(endian + ft.fmt * e["count"], raw)
                if ft.code in (RATIONAL, 10):
                    vals = tuple(zip(vals[0::2], vals[1::2]))
                tags[e["tag"]] = vals
        out.append(ParsedIFD(pos, tags, voffs))
        pos = fl.next.unpack(buf, at)["next"]
    return endian, big, out

