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
    """(key, size) -> the bytes of a version of ``key`` that was replaced; thread-safe."""

    def __init__(self, budget: int = RECENT_BYTES) -> None:
        self.budget = budget
        self._held: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def keep(self, key: str, data: bytes) -> None:
        """``data`` was ``key``'s content until now (a newer version is about to replace it)."""
        if len(data) > self.budget // 8:  # one huge chunk would push out everything else
            return
        with self._lock:
            old = self._held.pop((key, len(data)), None)
            if old is not None:
                self._bytes -= len(old)
            self._held[(key, len(data))] = bytes(data)
            self._bytes += len(data)
            while self._bytes > self.budget:
                _, gone = self._held.popitem(last=False)
                self._bytes -= len(gone)

    def get(self, key: str, size: int) -> bytes | None:
        """The replaced version of ``key`` that was ``size`` bytes long, if still held."""
        with self._lock:
            return self._held.get((key, size))


def kept_version(ctx: Any, key: str, size: int) -> bytes | None:
    """The version of ``key`` that was ``size`` bytes long, if the write side of ``ctx``'s
    catalog replaced it a moment ago (a reader laid out before the write), else None."""
    recent = getattr(getattr(ctx, "catalog", None), "recent", None)
    return recent.get(key, size) if recent is not None else None
