"""Producers the views share: transcoded chunks and spliced gzip trailers.

Both run in the reader's worker threads and are cached by it (keyed by
``cache_key``), so a chunk is transcoded once however many reads touch it.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable

from ..codecs.pipeline import Pipeline, gzip_trailer
from ..errors import ChunkChanged, ChunkMissing, CodecError, NotFound
from ..store.recent import kept_version


def fetch_chunk(ctx: Any, key: str, expect_size: int = -1) -> bytes:
    """A whole stored chunk; a vanished object is ChunkMissing (EIO), logged by the caller.
    With ``expect_size`` (the size the file was laid out with), the version of that size:
    the store's, else the one this daemon replaced since (a reader that opened before a
    write through another view), else ChunkChanged (EIO)."""
    try:
        data = ctx.store.get(key)
    except NotFound:
        held = kept_version(ctx, key, expect_size) if expect_size >= 0 else None
        if held is None:  # not deleted here since the file was laid out
            raise ChunkMissing(f"chunk object {key} is missing from the store") from None
        return held
    if expect_size < 0 or len(data) == expect_size:
        return data
    held = kept_version(ctx, key, expect_size)
    if held is None:
        raise ChunkChanged(f"chunk {key} changed size ({expect_size} -> {len(data)})")
    return held


def read_planned(ctx: Any, key: str, size: int, start: int, length: int) -> bytes:
    """``length`` bytes at ``start`` of the version of ``key`` that was ``size`` bytes long
    (what the file was laid out with): never bytes of a newer version under an old layout."""
    buf = bytearray(length)
    try:
        n = ctx.store.read_into(key, start, memoryview(buf), size)
    except (NotFound, ChunkChanged) as exc:  # deleted or replaced here since the layout
        held = kept_version(ctx, key, size)
        if held is None:
            if isinstance(exc, NotFound):
                raise ChunkMissing(f"chunk object {key} is missing from the store") from None
            raise
        return held[start:start + length]
    return bytes(buf[:n])


@dataclass(frozen=True)
class TranscodedChunk:
    """Stored chunk -> decode with ``source`` -> ``transform(raw)`` -> ``encode(raw)``.

    ``tag`` names the target encoding and transform; with ``key`` it makes
    the cache key, so two views asking for the same transcoding share it.
    ``length`` must be the exact size of the result (views pick targets whose
    size is known from the shape, or measure once with :meth:`measure`).
    """

    key: str
    source: Pipeline
    raw_nbytes: int
    tag: Hashable
    encode: Callable[[bytes], bytes] = field(compare=False, hash=False)
    transform: Callable[[bytes], bytes] | None = field(default=None, compare=False, hash=False)
    length: int = -1
    fill: bytes | None = field(default=None, compare=False, hash=False)  # used when the chunk is absent
    # the stored size the file was laid out with (-1: unknown): a reader that opened before a
    # write replaced or deleted the chunk is served the version it opened (fetch_chunk)
    stored_size: int = -1

    @property
    def cache_key(self) -> Hashable:
        return ("transcode", self.key, self.tag, self.stored_size)

    def produce(self, ctx: Any) -> bytes:
        if self.fill is not None:
            try:
                stored = ctx.store.get(self.key)
            except NotFound:
                raw = self.fill
            else:
                raw = self.source.decode(stored, self.raw_nbytes)
        else:
            raw = self.source.decode(fetch_chunk(ctx, self.key, self.stored_size), self.raw_nbytes)
        if self.transform is not None:
            raw = self.transform(raw)
        return self.encode(raw)

    def measure(self, reader: Any) -> "TranscodedChunk":
        """A copy whose ``length`` is the real output size (produced once, then cached)."""
        data = self.produce(reader.ctx)
        sized = replace(self, length=len(data))
        reader.cache.put(sized.cache_key, data)
        return sized


ZLIB_MIN = 8  # the shortest zlib stream: 2-byte header, an empty final block, Adler-32


@dataclass(frozen=True)
class GzipTrailer:
    """CRC32 + ISIZE closing a gzip member spliced from a stored zlib stream.

    The CRC32 comes from polyfs's CRC table when it matches the stream's
    Adler-32 (read from the stream's last 4 bytes), else by inflating once.
    """

    dataset: Any  # model Dataset
    linear: int
    key: str
    stored_size: int
    raw_nbytes: int
    length: int = 8

    @property
    def cache_key(self) -> Hashable:
        return ("gzip-trailer", self.key, self.stored_size)

    def produce(self, ctx: Any) -> bytes:
        catalog = ctx.catalog
        if self.stored_size < ZLIB_MIN:
            raise CodecError(f"chunk {self.key}: {self.stored_size} bytes cannot be a zlib stream")
        tail = read_planned(ctx, self.key, self.stored_size, self.stored_size - 4, 4)
        adler = int.from_bytes(tail, "big")
        crc = catalog.crc_table(self.dataset).lookup(self.linear, adler)
        if crc is None:
            stream = fetch_chunk(ctx, self.key, self.stored_size)
            try:
                crc = catalog.chunk_crc32(self.dataset, self.linear, stream)
            except zlib.error as exc:
                raise CodecError(f"chunk {self.key}: corrupt zlib stream ({exc})") from None
        return gzip_trailer(crc, self.raw_nbytes)


CRC32C_LEN = 4


def crc32c_of(*parts: bytes) -> bytes:
    """Zarr's ``crc32c`` codec trailer (little-endian CRC32C) of ``parts`` read as one."""
    import crc32c

    value = 0
    for part in parts:
        value = crc32c.crc32c(part, value)
    return value.to_bytes(CRC32C_LEN, "little")


def with_crc32c(encode: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """``encode`` followed by Zarr's ``crc32c`` codec."""
    def run(raw: bytes) -> bytes:
        out = encode(raw)
        return out + crc32c_of(out)
    return run


@dataclass(frozen=True)
class Crc32cTrailer:
    """The CRC32C (Zarr ``crc32c`` codec) closing a chunk served as ``head`` + the stored
    bytes without ``skip_head``/``skip_tail`` + ``inner`` (a gzip trailer, or nothing):
    ``inner``'s bytes then the checksum of all of it. The chunk is read once, when the
    trailer is first read (cached by the reader like every producer)."""

    key: str
    stored_size: int
    head: bytes = b""
    skip_head: int = 0
    skip_tail: int = 0
    inner: Any = None  # a Producer whose bytes come first (the gzip trailer), or None

    @property
    def length(self) -> int:
        return CRC32C_LEN + (self.inner.length if self.inner is not None else 0)

    @property
    def cache_key(self) -> Hashable:
        inner = self.inner.cache_key if self.inner is not None else None
        return ("crc32c-trailer", self.key, self.stored_size, self.head, self.skip_head, self.skip_tail, inner)

    def produce(self, ctx: Any) -> bytes:
        stored = fetch_chunk(ctx, self.key, self.stored_size)
        body = memoryview(stored)[self.skip_head:len(stored) - self.skip_tail]
        tail = self.inner.produce(ctx) if self.inner is not None else b""
        return tail + crc32c_of(self.head, body, tail)


def zlib_encoder(level: int) -> Callable[[bytes], bytes]:
    return lambda raw: zlib.compress(raw, level)
