"""Recognise a chunk's real encoding from its first bytes.

HSDS 1.0.2 stores the chunks of a dataset declared ``H5Z_FILTER_DEFLATE`` as
Blosc frames with zlib inside, and every other compressor as a Blosc frame
too; polyfs stores zlib streams and bare zstd frames. The declared filters
therefore do not always say what the bytes are; these few header checks do.
"""
from __future__ import annotations

import struct

from .registry import BLOSC, Filter

HEAD_BYTES = 16  # enough for every check below


# a frame's compressor *format* (flags >> 5: blosclz, lz4/lz4hc, snappy, zlib, zstd) -> its compressor
# code (blosc_compname, HDF5 cd_values[6]: blosclz 0, lz4 1, lz4hc 2, snappy 3, zlib 4, zstd 5)
_FORMAT_TO_COMPCODE = {0: 0, 1: 1, 2: 3, 3: 4, 4: 5}


def blosc_header(head: bytes, size: int | None = None) -> dict | None:
    """Parse a Blosc 1.x frame header, or None if ``head`` is not one."""
    if len(head) < 16 or head[0] not in (1, 2) or head[1] == 0:
        return None
    flags, typesize = head[2], head[3]
    nbytes, blocksize, cbytes = struct.unpack_from("<III", head, 4)
    if typesize == 0 or cbytes < 16 or (size is not None and cbytes != size):
        return None
    if nbytes and blocksize > max(nbytes, 1) * 2:
        return None
    return {"flags": flags, "typesize": typesize, "nbytes": nbytes, "cbytes": cbytes,
            "shuffle": 2 if flags & 0x04 else (1 if flags & 0x01 else 0),
            "compcode": _FORMAT_TO_COMPCODE.get(flags >> 5, 0)}


def sniff(head: bytes, size: int | None = None) -> str | None:
    """``zlib``, ``gzip``, ``zstd``, ``bzip2``, ``blosc`` or None (raw or unknown)."""
    if len(head) >= 4 and head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if len(head) >= 3 and head[:3] == b"\x1f\x8b\x08":
        return "gzip"
    if len(head) >= 4 and head[:3] == b"BZh" and 0x31 <= head[3] <= 0x39:
        return "bzip2"
    if blosc_header(head, size) is not None:
        return "blosc"
    if len(head) >= 2 and (head[0] & 0x0F) == 8 and (head[0] >> 4) <= 7 and (head[0] * 256 + head[1]) % 31 == 0:
        return "zlib"
    return None


def blosc_filter_from_header(head: bytes, size: int | None = None, clevel: int = 5) -> Filter | None:
    """The HDF5 blosc filter (32001) that decodes this frame."""
    h = blosc_header(head, size)
    if h is None:
        return None
    return Filter(BLOSC, (2, 2, h["typesize"], h["nbytes"], clevel, h["shuffle"], h["compcode"]))


def zstd_has_content_size(frame: bytes) -> bool:
    """True if a zstd frame header carries the decoded size (numcodecs and the
    HDF5 zstd filter need it; streamed frames lack it and must be re-encoded)."""
    if len(frame) < 5 or frame[:4] != b"\x28\xb5\x2f\xfd":
        return False
    desc = frame[4]
    return (desc >> 6) != 0 or bool(desc & 0x20)
