"""Persisted chunk indexes: derived data that spares a stat per chunk object.

Laying out a domain of a million chunks needs every chunk's size, and a
listing with sizes costs a ``stat`` per object (seconds for a million). Where
the backend has a cheap change detector for a directory (local stores: the
directory's mtime, which every create, delete and rename changes), polyfs
keeps the last listing of each dataset under ``polyfs/chunks/`` together with
that token.

A persisted index is *in force* when it is intact, made for the dataset's
current grid and its token is the directory's token now: the loader then uses
it without listing. One that is not in force (*outdated*: the directory changed
since) is ignored, listed afresh and replaced; that is no fault. A *stale*
index is one in force that a listing contradicts: the fault ``polyfs check``
reports. Two rules keep indexes from going stale:

- The token must be read after the last write into the directory, and a
  listing is saved only if the directory held still while it ran and had not
  changed within the token's ``window`` before (a later change in the same
  timestamp tick would leave the token as it is): :func:`stable`. A writer
  that knows a new dataset's chunks saves their index after the dataset's
  ``.dataset.json``, while no other writer can know the directory:
  :func:`writer_may_save`.
- Every write of polyfs into a dataset's directory drops its persisted index
  first (chunk puts and deletes) or right after (a rewritten ``.dataset.json``).

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

from ..store.base import FINE_TOKEN_WINDOW, DirToken
from .chunks import ChunkIndex

MAGIC = b"POLYFS-CHUNK-INDEX-1\n"
_LEN = struct.Struct("<I")


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


def stable(before: DirToken | None, after: DirToken | None, started: float) -> bool:
    """A listing started at ``started`` may be saved only if its directory did not change
    while it ran (``before`` and ``after`` its tokens), and not so recently before that a
    change after ``before`` could share its timestamp."""
    return (before is not None and after is not None and before.token == after.token
            and before.mtime < started - before.window)


def writer_may_save(token: DirToken | None, at: float) -> bool:
    """Whether a writer that made a directory nobody else knows yet (a new dataset, before a
    link reaches it) may save its index with ``token``, read at ``at`` after its last write
    there. Its own later writes drop the index; another writer's can come only once the
    dataset is linked, later still, and fall in the token's tick only where ticks are long
    (whole-second timestamps): there the directory must have held still for ``window``."""
    return token is not None and (token.window <= FINE_TOKEN_WINDOW or token.mtime < at - token.window)


def now() -> float:
    return time.time()
