"""Chunk object versions this daemon replaced a moment ago, for readers that opened before.

A view's file is laid out at open from the chunk sizes listed then. On a local disk a
reader that opened a file before a writer replaced it reads the old bytes to its close;
here a chunk object rewritten through this daemon (a live viewer reading an array that an
acquisition keeps writing) would give it EIO instead: the object no longer has the size
its layout planned. The write side keeps each version it replaces here (a bounded LRU,
counted in bytes), and a read that finds an object changed under its layout is served the
version it planned, when it is still held. Versions are told apart by size, as layouts are.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

RECENT_BYTES = 32 << 20  # replaced versions held, in all (part of the daemon's fixed budget)


class RecentVersions:
    """Versions of chunk objects replaced a moment ago, each dated by the rewrite that ended
    it; thread-safe. One per object and size (the newest replaced), as layouts tell versions
    apart by size: so the bytes held do not grow with the number of rewrites of one chunk.
    Looked up by size (a layout planned with that size) or by the epoch a file was opened
    at (``rewrites.py``: the version current then, while it is the one held)."""

    def __init__(self, budget: int = RECENT_BYTES) -> None:
        self.budget = budget
        self._held: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # (key, size) -> bytes
        self._ended: dict[tuple[str, int], int] = {}  # (key, size) -> epoch of the rewrite that replaced it
        self._sizes: dict[str, set[int]] = {}  # key -> the sizes held for it
        self._bytes = 0
        self._lock = threading.Lock()

    def keep(self, key: str, data: bytes) -> None:
        """``data`` was ``key``'s content until now (a newer version is about to replace it)."""
        if len(data) > self.budget // 8:  # one huge chunk would push out everything else
            return
        at = (key, len(data))
        with self._lock:
            old = self._held.pop(at, None)
            if old is not None:
                self._bytes -= len(old)
            self._ended.pop(at, None)  # a newer version of that size: not dated yet
            self._held[at] = bytes(data)
            self._sizes.setdefault(key, set()).add(len(data))
            self._bytes += len(data)
            while self._bytes > self.budget:
                (k, n), gone = self._held.popitem(last=False)
                self._bytes -= len(gone)
                self._ended.pop((k, n), None)
                sizes = self._sizes.get(k)
                if sizes is not None:
                    sizes.discard(n)
                    if not sizes:
                        del self._sizes[k]

    def ended(self, keys: set[str], epoch: int) -> None:
        """The rewrite of ``keys`` that began at ``epoch`` replaces the versions kept for them
        and not yet dated (kept by ``keep`` just before)."""
        with self._lock:
            for k in keys:
                for n in self._sizes.get(k, ()):
                    self._ended.setdefault((k, n), epoch)

    def get(self, key: str, size: int) -> bytes | None:
        """The replaced version of ``key`` that was ``size`` bytes long, if still held."""
        with self._lock:
            return self._held.get((key, size))

    def as_of(self, key: str, epoch: int) -> bytes | None:
        """``key``'s content at ``epoch``: the held version a rewrite dated later replaced
        first (None: none is held, the store's is the one)."""
        with self._lock:
            best: tuple[int, int] | None = None
            for n in self._sizes.get(key, ()):
                end = self._ended.get((key, n))
                if end is not None and end > epoch and (best is None or end < best[0]):
                    best = (end, n)
            return self._held[(key, best[1])] if best is not None else None


def kept_version(ctx: Any, key: str, size: int) -> bytes | None:
    """The version of ``key`` that was ``size`` bytes long, if the write side of ``ctx``'s
    catalog replaced it a moment ago (a reader laid out before the write), else None."""
    recent = getattr(getattr(ctx, "catalog", None), "recent", None)
    return recent.get(key, size) if recent is not None else None
