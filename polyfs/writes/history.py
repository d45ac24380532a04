"""What this mount wrote lately, per chunk key: when, by which process, and which stored
versions those writes replaced.

A chunk file merge needs both to keep several writers from undoing each other: a chunk
whose written bytes are a version another process has since replaced is a stale copy from
a read-modify-write (kept out), and a chunk missing from a written file is deleted only if
the writer could have seen it (stored before it read the file, or by itself). Bounded:
the oldest keys are forgotten first.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

HISTORY = 4096  # chunks whose replaced versions are remembered (their write times: 4x as many)
VERSIONS = 8  # replaced versions kept per chunk


def digest(stored: bytes) -> bytes:
    """Of the stored bytes: tools copy the inner chunks they do not change byte for byte.
    SHA-256 (CPU instructions on x86 and ARM: 3x blake2b here), cut to 16 bytes."""
    return hashlib.sha256(stored).digest()[:16]


def zlib_canonical(stored: bytes) -> bytes:
    """A zlib stream with its header's compression-level hint cleared (FLEVEL is advisory,
    RFC 1950 2.2), for comparing chunks stored under deflate: the Zarr and N5 views splice a
    gzip member from the stored stream, and a tool writing it back unchanged gives it zlib's
    default header (78 9c) where h5py's level 4 wrote 78 5e. Both are the same chunk: not a
    change to store, and a stale copy of a replaced version whichever header it carries."""
    if len(stored) >= 6 and stored[0] == 0x78 and not stored[1] & 0x20 and (stored[0] << 8 | stored[1]) % 31 == 0:
        return b"\x78\x01" + stored[2:]  # level bits 0, FCHECK still valid (0x7801 % 31 == 0)
    return stored


class WriteHistory:
    """Chunk key -> when it was last written and by whom, and the versions it replaced."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replaced: OrderedDict[str, list[tuple[bytes, float, int]]] = OrderedDict()  # (digest, when, who)
        self._written_at: OrderedDict[str, tuple[float, int]] = OrderedDict()  # key -> (when, by whom)

    def written(self, key: str) -> tuple[float, int] | None:
        """(when, by which process) ``key`` was last written through this mount, if known."""
        with self._lock:
            return self._written_at.get(key)

    def seen_by(self, key: str, base_time: float, writer: int) -> bool:
        """Whether a writer that read at ``base_time`` could have seen the chunk's current
        version: written before then, by itself, or not through this mount at all."""
        at, who = self.written(key) or (0.0, writer)
        return at <= base_time or who == writer

    def is_stale_copy(self, key: str, data: bytes, base_time: float, writer: int) -> bool:
        """``data`` is a version of ``key`` another process replaced after ``base_time``."""
        with self._lock:
            hist = list(self._replaced.get(key, ()))
        if not hist:
            return False
        mine = digest(data)
        return any(d == mine and at > base_time and who != writer for d, at, who in hist)

    def knows_replaced(self, key: str) -> bool:
        with self._lock:
            return key in self._replaced

    def remember(self, key: str, stamp: float, replaced: bytes | None, writer: int,
                 was: float | None = None) -> None:
        """``key`` was written at ``stamp`` by ``writer``, replacing the version whose digest
        is ``replaced``; ``was``: the time it was remembered with just before the write (that
        entry moves to ``stamp``)."""
        with self._lock:
            self._written_at[key] = (stamp, writer)
            self._written_at.move_to_end(key)
            while len(self._written_at) > HISTORY * 4:
                self._written_at.popitem(last=False)
            if replaced is None:
                return
            hist = self._replaced.setdefault(key, [])
            if was is not None and (replaced, was, writer) in hist:
                hist.remove((replaced, was, writer))
            hist.append((replaced, stamp, writer))
            del hist[:-VERSIONS]
            self._replaced.move_to_end(key)
            while len(self._replaced) > HISTORY:
                self._replaced.popitem(last=False)
