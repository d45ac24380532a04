"""Encode, decode and transcode chunks through an HDF5 filter pipeline.

A :class:`Pipeline` is the ordered filters a dataset's chunk bytes were
written with (HDF5 order: applied first to last on write, last to first on
read). ``effective`` corrects the declared pipeline with what a chunk's bytes
really are (HSDS Blosc frames under a ``gzip`` declaration).

A pipeline holding an opaque filter (outside the translation table) is coded
as a whole by :mod:`polyfs.codecs.opaque` (HDF5's own filters), which needs
the stored element type and chunk shape: ``chunk`` carries them.
"""
from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Iterable, Mapping

import imagecodecs
import numpy as np

from ..errors import CodecError, UnknownFilter
from .registry import BLOSC, DEFLATE, SHUFFLE, ZSTD, Filter, filter_from_json, filter_to_json
from .sniff import blosc_filter_from_header, sniff


@dataclass(frozen=True)
class ChunkContext:
    """What an opaque filter may depend on: the stored element type and chunk shape."""

    dtype: Any  # model DType of the stored chunks
    chunks: tuple[int, ...]


@dataclass(frozen=True)
class Pipeline:
    filters: tuple[Filter, ...] = ()
    itemsize: int = 1
    chunk: ChunkContext | None = field(default=None, compare=False, hash=False, repr=False)

    # -- construction ------------------------------------------------------
    @classmethod
    def from_json(cls, filters: Iterable[Mapping[str, Any]], itemsize: int, where: str = "",
                  chunk: ChunkContext | None = None) -> "Pipeline":
        out = []
        for obj in filters or ():
            try:
                f = filter_from_json(obj, itemsize)
            except UnknownFilter as exc:
                raise UnknownFilter(exc.filter_id, where) from None
            if f is not None:
                out.append(f)
        p = cls(tuple(out), itemsize, chunk)
        p._check()
        return p

    def _check(self) -> None:
        for f in self.filters:
            f.spec  # every id has a row (opaque ones included)

    def with_chunk(self, dtype: Any, chunks: Iterable[int]) -> "Pipeline":
        """This pipeline, knowing the element type and chunk shape (for opaque filters)."""
        return replace(self, chunk=ChunkContext(dtype, tuple(int(c) for c in chunks)))

    def to_json(self) -> list[dict[str, Any]]:
        return [filter_to_json(f) for f in self.filters]

    # -- properties --------------------------------------------------------
    @property
    def is_identity(self) -> bool:
        return not self.filters

    @property
    def compressor(self) -> Filter | None:
        comps = [f for f in self.filters if f.spec.compressor]
        return comps[-1] if comps else None

    @property
    def opaque(self) -> tuple[Filter, ...]:
        """The filters outside the translation table (coded only by HDF5's own filters)."""
        return tuple(f for f in self.filters if not f.known)

    @property
    def undecodable(self) -> str | None:
        """Why chunks of this pipeline cannot be decoded here, or None when they can."""
        if not self.opaque:
            return None
        from . import opaque

        return opaque.why_not(self)

    @property
    def unencodable(self) -> str | None:
        """Why chunks cannot be encoded here (writes, re-encoding on import), or None."""
        if not self.opaque:
            return None
        from . import opaque

        return opaque.why_not(self, encode=True)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(f.id for f in self.filters)

    def only(self, *ids: int) -> bool:
        """True if the pipeline is exactly these filter ids, in order."""
        return self.ids == tuple(ids)

    @cached_property
    def _codecs(self) -> list[Any]:
        return [f.spec.numcodec(f, self.itemsize) for f in self.filters]

    # -- coding ------------------------------------------------------------
    def decode(self, data: bytes, nbytes: int | None = None) -> bytes:
        """Decoded chunk bytes; ``nbytes`` (the expected size) is checked when given."""
        if self.opaque:
            from . import opaque

            out = opaque.coder(self).decode(bytes(data))
            if nbytes is not None and len(out) != nbytes:
                raise CodecError(f"chunk decodes to {len(out)} bytes, expected {nbytes}")
            return out
        buf: Any = data
        size = nbytes if nbytes is not None and self.ids[:-1] in ((), (SHUFFLE,)) else None
        try:
            for f, codec in zip(reversed(self.filters), reversed(self._codecs)):
                if f.id == DEFLATE:
                    buf = inflate(buf, size)
                else:
                    buf = codec.decode(buf)
        except Exception as exc:
            raise CodecError(f"cannot decode chunk with {'+'.join(f.name for f in self.filters)}: {exc}") from None
        out = bytes(np.asarray(buf).view(np.uint8).ravel()) if not isinstance(buf, (bytes, bytearray)) else bytes(buf)
        if nbytes is not None and len(out) != nbytes:
            raise CodecError(f"chunk decodes to {len(out)} bytes, expected {nbytes}")
        return out

    def check(self, data: Any, nbytes: int) -> Any:
        """That ``data`` decodes to exactly ``nbytes`` (CodecError if not), for a caller that
        keeps ``data`` as it is. The decoded bytes are returned, but a lone zstd or deflate
        decodes them into this thread's scratch buffer (valid until its next ``check``): a
        validated write then allocates, and faults in, no memory per chunk."""
        scratch = _scratch(nbytes + 1) if len(self.filters) == 1 and self.ids[0] in _INTO else None
        if scratch is None:
            return self.decode(data, nbytes)
        try:
            out = _INTO[self.ids[0]](data, out=scratch)
        except Exception:  # noqa: BLE001 - a bad stream, or more than nbytes: decode raises, saying which
            return self.decode(data, nbytes)
        if len(out) != nbytes:
            raise CodecError(f"chunk decodes to {len(out)} bytes, expected {nbytes}")
        return out

    def encode(self, raw: bytes) -> bytes:
        if self.opaque:
            from . import opaque

            return opaque.coder(self).encode(bytes(raw))
        buf: Any = raw
        for f, codec in zip(self.filters, self._codecs):
            if f.id == DEFLATE:
                buf = zlib.compress(bytes(buf), f.level if f.level is not None else 6)
            else:
                buf = codec.encode(buf)
        return bytes(buf) if not isinstance(buf, bytes) else buf

    def with_itemsize(self, itemsize: int) -> "Pipeline":
        return Pipeline(self.filters, itemsize, self.chunk)


def effective(declared: Pipeline, head: bytes | None, size: int | None = None) -> Pipeline:
    """The pipeline a stored chunk really needs, from its first bytes.

    A Blosc frame where the declaration says something else is HSDS's doing:
    Blosc shuffles internally and HSDS applies neither shuffle nor fletcher32
    outside it, so the frame alone is the whole pipeline.
    """
    if head is None or declared.opaque:
        return declared
    kind = sniff(head, size)
    comp = declared.compressor
    if kind == "blosc" and (comp is None or comp.id != BLOSC):
        level = comp.level if comp is not None and comp.level is not None else 5
        f = blosc_filter_from_header(head, size, clevel=level)
        if f is not None:
            return Pipeline((f,), declared.itemsize)
    if kind == "zstd" and comp is not None and comp.id == BLOSC:
        return Pipeline(tuple(Filter(ZSTD, (3,)) if x.id == BLOSC else x for x in declared.filters), declared.itemsize)
    return declared


_INTO = {ZSTD: imagecodecs.zstd_decode, DEFLATE: imagecodecs.deflate_decode}  # decode into a given buffer
SCRATCH_MAX = 2 << 20  # per thread; larger chunks are decoded into memory of their own
_local = threading.local()


def _scratch(n: int) -> memoryview | None:
    """``n`` bytes of this thread's reusable buffer, or None past SCRATCH_MAX."""
    if n > SCRATCH_MAX:
        return None
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < n:
        buf = _local.buf = bytearray(max(n, 1 << 20))
    return memoryview(buf)[:n]


def inflate(stream: Any, size: int | None = None) -> bytes:
    """A zlib stream inflated: with libdeflate (about twice zlib's speed here) when the
    decoded size is known, else with zlib (which also words the errors of a bad stream)."""
    if size is not None:
        try:
            return imagecodecs.deflate_decode(stream, out=size)
        except Exception:  # noqa: BLE001 - a wrong size or a bad stream: zlib says which
            pass
    return zlib.decompress(bytes(stream))


# -- gzip members spliced from zlib streams (Zarr ``gzip``, N5 ``gzip``) ----
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, no mtime, OS unknown
ZLIB_HEADER_LEN = 2
ZLIB_TRAILER_LEN = 4  # Adler-32
GZIP_EXTRA = len(GZIP_HEADER) + 8 - ZLIB_HEADER_LEN - ZLIB_TRAILER_LEN  # member size - zlib size


def zlib_has_dict(head: bytes) -> bool:
    """A preset dictionary (FDICT) cannot be spliced into a gzip member."""
    return len(head) >= 2 and bool(head[1] & 0x20)


def gzip_trailer(crc32: int, nbytes: int) -> bytes:
    return int(crc32 & 0xFFFFFFFF).to_bytes(4, "little") + int(nbytes & 0xFFFFFFFF).to_bytes(4, "little")


def zlib_to_gzip(stream: bytes, crc32: int, nbytes: int) -> bytes:
    """Splice a gzip member out of a zlib stream without inflating it."""
    return GZIP_HEADER + stream[ZLIB_HEADER_LEN:-ZLIB_TRAILER_LEN] + gzip_trailer(crc32, nbytes)


def gzip_member_bounds(member: bytes) -> tuple[int, int]:
    """(start, end) of the raw deflate data inside a single gzip member."""
    if len(member) < 18 or member[:3] != b"\x1f\x8b\x08":
        raise CodecError("not a gzip member")
    flg = member[3]
    pos = 10
    if flg & 0x04:  # FEXTRA
        pos += 2 + int.from_bytes(member[pos:pos + 2], "little")
    for bit in (0x08, 0x10):  # FNAME, FCOMMENT: zero-terminated
        if flg & bit:
            end = member.find(b"\x00", pos)
            if end < 0:
                raise CodecError("gzip member name or comment has no terminating NUL")
            pos = end + 1
    if flg & 0x02:  # FHCRC
        pos += 2
    if pos > len(member) - 8:
        raise CodecError("truncated gzip member")
    return pos, len(member) - 8


def gzip_to_zlib(member: bytes) -> tuple[bytes, int]:
    """Splice a zlib stream out of a gzip member; returns (stream, crc32).

    The deflate bytes are kept as they are (no recompression). Only the
    Adler-32 trailer needs the decoded bytes, so this inflates once; the CRC32
    comes from the member's own trailer. Used on import and writes, never on reads.
    """
    start, end = gzip_member_bounds(member)
    d = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        raw = d.decompress(member[start:end]) + d.flush()
    except zlib.error as exc:
        raise CodecError(f"corrupt gzip member: {exc}") from None
    if not d.eof or d.unused_data:
        raise CodecError("gzip chunk holds more than one member or trailing bytes")
    crc, isize = int.from_bytes(member[end:end + 4], "little"), int.from_bytes(member[end + 4:end + 8], "little")
    if zlib.crc32(raw) != crc or len(raw) & 0xFFFFFFFF != isize:
        raise CodecError("gzip member fails its CRC32/size check")
    header = b"\x78\x9c"  # deflate, 32K window, default level, no dictionary
    return header + member[start:end] + zlib.adler32(raw).to_bytes(4, "big"), crc


def crc32_of_zlib(stream: bytes) -> tuple[int, int]:
    """(crc32 of the decoded bytes, decoded size) of a zlib stream."""
    raw = zlib.decompress(stream)
    return zlib.crc32(raw), len(raw)


def adler32_of_zlib(stream: bytes) -> int:
    """The Adler-32 a zlib stream carries (its last 4 bytes, big-endian)."""
    return int.from_bytes(stream[-4:], "big")


def strip_crc32c(data: bytes) -> bytes:
    """The body of data followed by its crc32c (Zarr's ``crc32c`` codec), checked."""
    import crc32c

    if len(data) < 4:
        raise CodecError("too short for its crc32c checksum")
    body, want = data[:-4], int.from_bytes(data[-4:], "little")
    if crc32c.crc32c(body) != want:
        raise CodecError("crc32c checksum mismatch")
    return body
