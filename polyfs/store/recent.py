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
    """Versions of chunk objects replaced a moment ago, each with the rewrite that ended it;
    thread-safe. Looked up by size (a layout planned with that size) or by the epoch a file
    was opened at (``rewrites.py``: the version current then, whatever its size)."""

    def __init__(self, budget: int = RECENT_BYTES) -> None:
        self.budget = budget
        self._held: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # (key, serial) -> bytes
        self._ended: dict[tuple[str, int], int] = {}  # (key, serial) -> epoch of the rewrite that replaced it
        self._serials: dict[str, list[int]] = {}  # key -> its held versions, oldest first
        self._serial = 0
        self._bytes = 0
        self._lock = threading.Lock()

    def keep(self, key: str, data: bytes) -> None:
        """``data`` was ``key``'s content until now (a newer version is about to replace it)."""
        if len(data) > self.budget // 8:  # one huge chunk would push out everything else
            return
        with self._lock:
            self._serial += 1
            self._held[(key, self._serial)] = bytes(data)
            self._serials.setdefault(key, []).append(self._serial)
            self._bytes += len(data)
            while self._bytes > self.budget:
                (k, n), gone = self._held.popitem(last=False)
                self._bytes -= len(gone)
                self._ended.pop((k, n), None)
                left = self._serials.get(k, [])
                if n in left:
                    left.remove(n)
                if not left:
                    self._serials.pop(k, None)

    def ended(self, keys: set[str], epoch: int) -> None:
        """The rewrite of ``keys`` that began at ``epoch`` replaces the versions kept for them
        and not yet dated (kept by ``keep`` just before)."""
        with self._lock:
            for k in keys:
                for n in self._serials.get(k, ()):
                    self._ended.setdefault((k, n), epoch)

    def get(self, key: str, size: int) -> bytes | None:
        """The newest replaced version of ``key`` that was ``size`` bytes long, if still held."""
        with self._lock:
            for n in reversed(self._serials.get(key, ())):
                data = self._held[(key, n)]
                if len(data) == size:
                    return data
        return None

    def as_of(self, key: str, epoch: int) -> bytes | None:
        """``key``'s content at ``epoch``, if a rewrite dated later replaced it and that
        version is still held (else None: the store's is the one, or it is gone)."""
        with self._lock:
            best: tuple[int, int] | None = None
            for n in self._serials.get(key, ()):
                end = self._ended.get((key, n))
                if end is not None and end > epoch and (best is None or end < best[0]):
                    best = (end, n)
            return self._held[(key, best[1])] if best is not None else None


def kept_version(ctx: Any, key: str, size: int) -> bytes | None:
    """The version of ``key`` that was ``size`` bytes long, if the write side of ``ctx``'s
    catalog replaced it a moment ago (a reader laid out before the write), else None."""
    recent = getattr(getattr(ctx, "catalog", None), "recent", None)
    return recent.get(key, size) if recent is not None else None
