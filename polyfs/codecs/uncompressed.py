"""Codec streams in their uncompressed modes, whose size follows from the payload's.

A view that must serve a payload it made (a cropped N5 edge block) under a codec
declared for the whole dataset can wrap it this way instead of compressing it:
producing it costs a copy, and its size is known before any chunk is read, so
listing and ``stat`` stay free of chunk I/O. Every decoder of the codec reads these
streams: deflate stored blocks (RFC 1951 3.2.4) in a gzip member or zlib stream,
zstd raw blocks (RFC 8878 3.1.1.2), and blosc's memcpy mode (its ``clevel=0``).
"""
from __future__ import annotations

import zlib

import numcodecs
import numpy as np

from ..binfmt import Layout

STORED_MAX = 0xFFFF  # bytes of one deflate stored block
STORED_HEAD = Layout.of("deflate stored block header", [("final", "B"), ("len", "H"), ("nlen", "H")], "<")
GZIP_HEAD = bytes.fromhex("1f8b08000000000000ff")  # no name, no mtime, OS unknown
GZIP_TAIL = Layout.of("gzip trailer", [("crc32", "I"), ("isize", "I")], "<")
ZLIB_HEAD = b"\x78\x01"  # deflate, 32 KiB window, no dictionary, check bits
ZLIB_TAIL = Layout.of("zlib trailer", [("adler32", "I")], ">")

ZSTD_MAGIC = Layout.of("zstd frame magic", [("magic", "I")], "<")
ZSTD_BLOCK_MAX = 128 * 1024
# Frame_Header_Descriptor with Single_Segment_flag (no window descriptor), no checksum, no
# dictionary; Frame_Content_Size in 1, 2, 4 or 8 bytes (the 2-byte field holds size - 256)
_FCS = ((0xFF, 0x00, "B", 0), (0xFFFF + 256, 0x40, "H", 256), (0xFFFFFFFF, 0x80, "I", 0), (2 ** 64 - 1, 0xC0, "Q", 0))
BLOSC_OVERHEAD = 16  # blosc's header: memcpy mode adds nothing else


def _stored_blocks(n: int) -> int:
    return max(1, -(-n // STORED_MAX))


def deflate_stored(raw: bytes) -> bytes:
    """A raw deflate stream of stored blocks holding ``raw``."""
    out = bytearray()
    view = memoryview(raw)
    nblocks = _stored_blocks(len(raw))
    for i in range(nblocks):
        part = view[i * STORED_MAX:(i + 1) * STORED_MAX]
        out += STORED_HEAD.pack(final=int(i == nblocks - 1), len=len(part), nlen=len(part) ^ 0xFFFF)
        out += part
    return bytes(out)


def gzip_stored(raw: bytes) -> bytes:
    return GZIP_HEAD + deflate_stored(raw) + GZIP_TAIL.pack(crc32=zlib.crc32(raw), isize=len(raw) & 0xFFFFFFFF)


def zlib_stored(raw: bytes) -> bytes:
    return ZLIB_HEAD + deflate_stored(raw) + ZLIB_TAIL.pack(adler32=zlib.adler32(raw))


def gzip_stored_size(n: int) -> int:
    return len(GZIP_HEAD) + STORED_HEAD.size * _stored_blocks(n) + n + GZIP_TAIL.size


def zlib_stored_size(n: int) -> int:
    return len(ZLIB_HEAD) + STORED_HEAD.size * _stored_blocks(n) + n + ZLIB_TAIL.size


def _fcs(n: int) -> tuple[int, str, int]:
    for limit, flag, fmt, bias in _FCS:
        if n <= limit and n >= bias:
            return flag | 0x20, fmt, bias
    raise ValueError(f"{n} bytes do not fit a zstd frame")


def _zstd_blocks(n: int) -> int:
    return max(1, -(-n // ZSTD_BLOCK_MAX))


def zstd_raw(raw: bytes) -> bytes:
    """A zstd frame of raw (uncompressed) blocks holding ``raw``, its size declared."""
    descriptor, fmt, bias = _fcs(len(raw))
    out = bytearray(ZSTD_MAGIC.pack(magic=0xFD2FB528))
    out.append(descriptor)
    out += Layout.of("zstd frame content size", [("size", fmt)], "<").pack(size=len(raw) - bias)
    view = memoryview(raw)
    nblocks = _zstd_blocks(len(raw))
    for i in range(nblocks):
        part = view[i * ZSTD_BLOCK_MAX:(i + 1) * ZSTD_BLOCK_MAX]
        header = int(i == nblocks - 1) | (0 << 1) | (len(part) << 3)  # Last_Block, Raw_Block, Block_Size
        out += header.to_bytes(3, "little")
        out += part
    return bytes(out)


def zstd_raw_size(n: int) -> int:
    _, fmt, _ = _fcs(n)
    return ZSTD_MAGIC.size + 1 + Layout.of("fcs", [("size", fmt)], "<").size + 3 * _zstd_blocks(n) + n


def blosc_memcpy(raw: bytes, itemsize: int, cname: str = "lz4", shuffle: int = 0) -> bytes:
    """A blosc frame in memcpy mode (``clevel=0``): the payload after blosc's 16-byte header."""
    arr = np.frombuffer(raw, dtype=f"u{itemsize}" if itemsize in (1, 2, 4, 8) else "u1")
    out = bytes(numcodecs.Blosc(cname=cname, clevel=0, shuffle=shuffle).encode(arr))
    assert len(out) == len(raw) + BLOSC_OVERHEAD, "blosc memcpy mode adds more than its header"
    return out


def blosc_memcpy_size(n: int) -> int:
    return n + BLOSC_OVERHEAD
