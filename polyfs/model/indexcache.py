"""Persisted chunk indexes: derived data that spares a stat per chunk object.

Laying out a domain of a million chunks needs every chunk's size, and a
listing with sizes costs a ``stat`` per object (seconds for a million). Where
the backend has a cheap change detector for a directory (local stores: the
directory's mtime, which every create, delete and rename changes), polyfs
keeps the last listing of each dataset under ``polyfs/chunks/`` together with
that token, and trusts it only while the token is unchanged.

What the token cannot see, an in-place rewrite by another writer (HSDS writes
chunks in place), is caught when the chunk is read: the reader checks the
object's size against the planned one and raises ChunkChanged, which drops
this cache for the dataset (so it is listed again) and re-plans the file.
Like the CRC tables, these files are never the truth: ``polyfs check
--repair`` rebuilds them, and deleting them only costs time.
"""
from __future__ import annotations

import json
import struct
import time

import numpy as np

from .chunks import ChunkIndex

MAGIC = b"POLYFS-CHUNK-INDEX-1\n"
_LEN = struct.Struct("<I")
RACY_SECONDS = 0.05  # a directory changed this close to the listing may hide a change in the same clock tick


def encode(idx: ChunkIndex, token: str) -> bytes:
    header = json.dumps({"token": token, "grid": list(idx.grid), "n": len(idx)}).encode()
    return (MAGIC + _LEN.pack(len(header)) + header + idx.linear.astype("<i8").tobytes()
            + idx.sizes.astype("<i8").tobytes())


def decode(data: bytes, dataset_id: str, prefix: str, grid: tuple[int, ...], token: str) -> ChunkIndex | None:
    """The cached index if it is intact and still valid for ``token`` and ``grid``."""
    if not data.startswith(MAGIC):
        return None
    try:
        pos = len(MAGIC)
        (hlen,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        header = json.loads(data[pos:pos + hlen])
        pos += hlen
        n = int(header["n"])
        if header["token"] != token or tuple(header["grid"]) != tuple(grid) or len(data) != pos + 16 * n:
            return None
        linear = np.frombuffer(data, "<i8", n, pos).astype(np.int64)
        sizes = np.frombuffer(data, "<i8", n, pos + 8 * n).astype(np.int64)
    except (ValueError, KeyError, TypeError, struct.error):
        return None
    return ChunkIndex(dataset_id, prefix, tuple(grid), linear, sizes)


def stable(before: tuple[str, float] | None, after: tuple[str, float] | None, started: float) -> bool:
    """A listing may be cached only if its directory did not change while it ran,
    and not so recently before that a change could share its timestamp."""
    return (before is not None and after is not None and before[0] == after[0]
            and before[1] < started - RACY_SECONDS)


def now() -> float:
    return time.time()
