"""Reading a TIFF written into the view: the file as tifffile sees it, checked first.

A written file is read through :class:`~polyfs.writes.protocol.SourceReader`
(unbuffered: no read-ahead into tiles the writer never touched), its IFD chain
walked before tifffile parses it (a file still being written has an empty IFD
where the next one will be), tifffile's own warnings silenced (the refusal is
the one log line naming the file), and whatever a library raises becomes an
InvalidInput naming the file.
"""
from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...codecs.registry import DEFLATE
from ...errors import CodecError, Incomplete, InvalidInput, PolyfsError, UnsupportedType
from ...model.schema import Dataset
from ...model.writer import ObjectsWriter
from ...writes.protocol import ByteSource, SourceReader
from .dropped import full_resolution
from .image import SOFTWARE
from .mask import is_mask
from .structs import FIELD_TYPES, flavor, read_header


class BaseSource:
    """The view's file a writer opened (``PendingFile.base``) as a ByteSource."""

    def __init__(self, base: Any) -> None:
        self._base = base

    def size(self) -> int:
        return int(self._base.size)

    def read(self, off: int, n: int) -> bytes:
        return self._base.read(off, n)


class _Quiet(logging.Filter):
    """Drops tifffile's warnings in threads reading a written file: the refusal is the one line
    that names the file."""

    local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.local, "on", False)


logging.getLogger("tifffile").addFilter(_Quiet())


def renamed(exc: PolyfsError, text: str) -> PolyfsError:
    """``exc``'s kind (so its errno) with another message."""
    try:
        return type(exc)(text)
    except TypeError:  # kinds whose constructors take more (SourceError, UnknownFilter)
        return (UnsupportedType if isinstance(exc, UnsupportedType) else InvalidInput)(text)


@contextmanager
def reading(where: str) -> Iterator[None]:
    """Whatever tifffile or a codec raises while reading a written file: InvalidInput naming it.
    polyfs's own errors keep their kind (and get the file's name)."""
    was = getattr(_Quiet.local, "on", False)
    _Quiet.local.on = True
    try:
        yield
    except PolyfsError as exc:
        text = " ".join(str(exc).split())
        if where in text:
            raise
        raise renamed(exc, f"{where}: {text}") from None
    except MemoryError:
        raise InvalidInput(f"{where}: not a readable TIFF file (its tags ask for more memory than there is)") \
            from None
    except Exception as exc:  # noqa: BLE001 - tifffile and imagecodecs raise many kinds for broken files
        text = " ".join(str(exc).split())
        raise InvalidInput(f"{where}: not a readable TIFF file ({type(exc).__name__}: {text})") from None
    finally:
        _Quiet.local.on = was


def check_chain(src: ByteSource, where: str, limit: int = 1 << 22) -> None:
    """Every IFD of the chain lies inside the file and has entries. A file still being written
    has an empty one where its next IFD will be (tifffile writes pixels through a duplicated
    descriptor whose close flushes the file before that IFD is written; libtiff writes IFDs
    last): such a file is refused, never taken for a smaller image."""
    size = src.size()
    endian, big, pos = read_header(src.read(0, 16))
    fl = flavor(endian, big)
    seen: set[int] = set()
    while pos:
        if pos in seen or len(seen) >= limit:
            raise InvalidInput(f"{where}: the IFD chain loops at offset {pos}")
        seen.add(pos)
        if pos < fl.header.size or pos + fl.count.size > size:
            raise InvalidInput(f"{where}: IFD {len(seen) - 1} at offset {pos} lies outside the file ({size} bytes): "
                               f"truncated file or bogus offset")
        n = fl.count.unpack(src.read(pos, fl.count.size))["n"]
        if n == 0:
            raise Incomplete(f"{where}: IFD {len(seen) - 1} at offset {pos} is empty: the file is incomplete "
                               f"(still being written) or corrupt")
        at = pos + fl.count.size + n * fl.entry.size
        if at + fl.next.size > size:
            raise InvalidInput(f"{where}: IFD {len(seen) - 1} at offset {pos} runs past the end of the file "
                               f"({size} bytes): truncated file")
        pos = fl.next.unpack(src.read(at, fl.next.size))["next"]


# bytes of one value of each IFD field type (unknown types: 1, as libtiff skips them)
_TYPE_SIZES = np.array([FIELD_TYPES[t].size if t in FIELD_TYPES else 1 for t in range(max(FIELD_TYPES) + 1)],
                       dtype=np.uint64)


def _entry_dtype(endian: str, big: bool) -> np.dtype:
    """An IFD entry as a numpy record: tag, type, count, value (or the offset of the value)."""
    word = endian + ("u8" if big else "u4")
    return np.dtype([("tag", endian + "u2"), ("type", endian + "u2"), ("count", word), ("value", word)])


def _values_end(raw: bytes, entries: np.dtype, inline: int) -> int:
    """The end of the last value an IFD's entries hold out of line (0 when none)."""
    e = np.frombuffer(raw, dtype=entries)
    types = e["type"].astype(np.intp)
    sizes = _TYPE_SIZES[np.where(types < len(_TYPE_SIZES), types, 0)]
    nbytes = e["count"].astype(np.uint64) * sizes
    outside = nbytes > inline
    if not outside.any():
        return 0
    return int((e["value"].astype(np.uint64)[outside] + nbytes[outside]).max())


def _first_ifd_end(src: ByteSource) -> int:
    """Where the first IFD's bytes end: its entries and every value it holds out of line."""
    endian, big, pos = read_header(src.read(0, 16))
    fl = flavor(endian, big)
    n = fl.count.unpack(src.read(pos, fl.count.size))["n"]
    at = pos + fl.count.size + n * fl.entry.size
    return max(at + fl.next.size, _values_end(src.read(pos + fl.count.size, n * fl.entry.size),
                                              _entry_dtype(endian, big), fl.inline))


def check_complete(tif: Any, src: ByteSource, where: str) -> None:
    """Refuse a stack tifffile is still writing page by page: with ``contiguous=True`` (its
    default) it writes one IFD for the first page and the pixels of every later page after it,
    the IFDs of those only when the writer is closed; uncompressed pixels go through a duplicated
    descriptor whose close flushes the file. Such a flush shows a one-page image followed by whole
    pages' bytes nothing references: taken, it would make a dataset of one page that the finished
    stack can no longer replace (another rank). A file written from scratch, described as
    tifffile, ImageJ or OME write it, of one uncompressed page, whose bytes after everything its
    IFD references are whole pages, is such a file; its final close stores it. A file this view
    made (Software ``polyfs``) is never one."""
    if getattr(src, "based", False) or len(tif.pages) != 1 or not any(getattr(tif, f, False) for f in DESCRIBED):
        return
    key = tif.pages.first
    page = int(getattr(key, "nbytes", 0) or 0)
    if int(getattr(key, "compression", 0)) != 1 or page <= 0 or getattr(key, "software", "") == SOFTWARE:
        return  # a copy of a view's file: bytes past its IFD are the polyglot file's (a Zarr shard index)
    offsets, counts = np.asarray(key.dataoffsets, np.int64), np.asarray(key.databytecounts, np.int64)
    end = max(_first_ifd_end(src), int((offsets + counts).max()) if offsets.size else 0)
    tail = src.size() - end
    if tail >= page and tail % page == 0:
        raise Incomplete(f"{where}: {tail // page} page(s) of pixels after everything the IFD references: the file "
                           f"is incomplete (a stack still being written page by page)")


# tifffile's metadata flags that make a series of the pages a description lists
DESCRIBED = ("is_ome", "is_shaped", "is_imagej")


def open_tiff(src: ByteSource, generic: bool = False):
    """tifffile over a written file; ``generic``: its pages as they are, whatever a description
    says (pages of one shape are one stack)."""
    import tifffile

    flags = dict.fromkeys(DESCRIBED, False) if generic else {}
    # unbuffered: a buffer would read ahead into tile data the writer never touched
    return tifffile.TiffFile(SourceReader(src), **flags)  # type: ignore[arg-type]


def pages_beyond(tif: Any, where: str = "", several: bool = False) -> int:
    """Full-resolution pages of the key page's shape and type after those the file's described
    series lists: pages appended to a file whose description predates them (``tiffcp -a``,
    ``tifffile.imwrite(..., append=True)`` onto the view's file), in any tiling, strips or
    compression. Reduced-resolution pages and masks (pyramid levels, NewSubfileType bits 0
    and 2) are not counted; a full-resolution page of another shape or type is refused
    (UnsupportedType): it would be dropped unseen, and ``tiffcp -a`` cannot report a refusal
    at close. ``several``: the file is the view's own written over, so pages appended with their
    own description (tifffile's ``append="force"`` onto a shaped RGB file: a series each) count
    too."""
    series = [s for s in tif.series if s is not None and len(s.pages)]
    if not series or (len(series) != 1 and not several) or not any(getattr(tif, f, False) for f in DESCRIBED):
        return 0
    listed = len(series[0].pages)
    total = len(tif.pages)
    if total <= listed:
        return 0
    key = series[0].keyframe
    extra = 0
    for i in range(listed, total):
        p = tif.pages[i]
        p = p.aspage() if p is not None else None  # a frame: its own tags
        if p is None or int(getattr(p, "subfiletype", 0)) & 0b101:  # reduced resolution, transparency mask
            continue
        if tuple(p.shaped) == tuple(key.shaped) and np.dtype(p.dtype) == np.dtype(key.dtype):
            extra += 1
            continue
        raise UnsupportedType(f"{where}: page {i}, after the {listed} the file's description lists, is "
                              f"{tuple(p.shape)} {np.dtype(p.dtype)}, not {tuple(key.shape)} "
                              f"{np.dtype(key.dtype)} like them; a file of this view is one dataset")
    return extra


def one_series(tif, where: str, flat: bool = False):
    """The file's one image; ``flat``: several series of one page shape are one stack of all their
    pages even when they are alike (pages appended to a stack in another layout than its own)."""
    series = [s for s in tif.series if s is not None and len(s.pages) and not is_mask(s)]  # masks: mask.py
    if not series:
        raise InvalidInput(f"{where}: the file holds no image")
    series = full_resolution(series)  # levels tifffile made series of (a description libvips copied)
    if len(series) > 1:
        first = series[0]
        # series a description defines (OME images, tifffile's shaped series) stay apart unless
        # they are alike; tifffile's generic series (pages grouped by layout) are one stack
        described = any(getattr(tif, f, False) for f in DESCRIBED)
        if any(np.dtype(x.dtype) != np.dtype(first.dtype) or tuple(x.keyframe.shaped) != tuple(first.keyframe.shaped)
               or (described and tuple(x.shape) != tuple(first.shape)) for x in series[1:]):
            raise UnsupportedType(f"{where}: the file holds {len(series)} images of different shapes or types; "
                                  f"a file of this view is one dataset")
        # pages written one by one (tifffile.TiffWriter.write per page), or appended in another
        # tiling, strips or compression than the pages before them (tifffile's series split there)
        series = [_Stack(series, flat)]
    s = series[0]
    if any(int(d) <= 0 for d in s.shape) or any(int(d) <= 0 for d in s.keyframe.shaped):
        raise InvalidInput(f"{where}: the image has no pixels (no ImageWidth/ImageLength, or an empty IFD)")
    return s


class _Stack:
    """Several series of one shape and type (each page written as its own image) as one series
    stacked along a new first dimension (what tifffile shows of the view's own stacks); series
    of one page shape but different lengths (a stack and pages appended to it) as one stack of
    all their pages (``flat``: also when they are alike)."""

    def __init__(self, series: list, flat: bool = False) -> None:
        first = series[0]
        self.pages = [p for x in series for p in x.pages]
        self.keyframe = first.keyframe
        axes = str(first.axes or "")
        if not flat and all(tuple(x.shape) == tuple(first.shape) for x in series[1:]):
            self.shape = (len(series), *first.shape)
        else:  # stacks and pages of one page shape: one stack of every page
            self.shape = (len(self.pages), *first.keyframe.shape)
            axes = str(first.keyframe.axes or "")
        self.axes = "I" + axes if axes and "I" not in axes else ""
        self.dtype = first.dtype
        self.name = first.name
        self.levels: list = []


class VerifyingWriter(ObjectsWriter):
    """New objects whose chunks are proved to decode to a whole chunk before they are stored
    (the importer copies table-codec tiles without decoding them)."""

    def write_chunk(self, ds: Dataset, coords, stored: bytes, crc32: int | None = None) -> None:
        p = self.pipeline(ds)
        if p.ids == (DEFLATE,):
            stored = exact_deflate(stored)
        try:
            raw = p.decode(stored, ds.chunk_nbytes) if not p.is_identity else stored
        except CodecError:
            raise
        except Exception as exc:  # noqa: BLE001 - zlib.error, zstd errors
            raise CodecError(f"chunk {list(coords)} does not decode: {exc}") from None
        if len(raw) != ds.chunk_nbytes:
            raise CodecError(f"chunk {list(coords)} decodes to {len(raw)} bytes, not {ds.chunk_nbytes}")
        super().write_chunk(ds, coords, stored, crc32)


def exact_deflate(data: bytes) -> bytes:
    """A zlib stream without the bytes a tile's byte count holds after it (a tile rewritten in
    place by a shorter stream, writers' padding): inflate ignores them, but views that serve the
    stream as it is in another container (a gzip member) would end it there. Streams that do
    not decode are returned as they are (their check refuses them)."""
    d = zlib.decompressobj()
    try:
        d.decompress(data)  # a chunk's bytes: what the check decodes anyway
    except zlib.error:
        return data
    return data[:len(data) - len(d.unused_data)] if d.eof and d.unused_data else data


def frames(tif: Any) -> list:
    """Every page, the first in full and the others as frames (their segments' offsets and byte
    counts; their tags are the first page's): memory per page stays small."""
    pages = tif.pages
    pages.cache = False
    pages.useframes = True
    if not len(pages):
        return []
    pages.set_keyframe(0)
    return list(pages)
