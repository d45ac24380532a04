"""Chunk objects being rewritten through this daemon, as the reader must see them.

A view's file is laid out from chunk sizes, so a chunk rewritten with a new version of the
same size is read under the old layout without an error. One read request is made of
several pieces fetched one after another (a gzip member's body from the stored object, its
trailer produced from the stored stream's checksum): a rewrite landing between two pieces
of one chunk gave the body of one version and the trailer of the other, a member failing its
CRC check. The write side brackets each rewrite (``Catalog.rewriting``); a read touching a
chunk being rewritten waits for the rewrite to end, and a read that overlapped one is made
again, so every chunk in a reply comes from one version.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterable

KEYS_HELD = 1 << 16  # rewritten keys remembered by epoch; past that, one floor for all
WAIT = 10.0  # seconds a read waits for a rewrite of its chunks (a commit takes milliseconds)


class Rewrites:
    """Which chunk keys are being rewritten now, and when each was last (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy: dict[str, int] = {}  # key -> rewrites under way (two writers may overlap)
        self._epoch = 0  # counts every begin and end
        self._last: dict[str, int] = {}  # key -> epoch of its last begin or end
        self._floor = 0  # reads started before this epoch count as overlapping a rewrite

    @property
    def epoch(self) -> int:
        return self._epoch

    def begin(self, keys: Iterable[str]) -> int:
        """A rewrite of ``keys`` begins; returns its epoch (files opened before it read the
        versions it replaces, see ``Reader._pins``)."""
        with self._cond:
            self._epoch += 1
            for k in keys:
                self._busy[k] = self._busy.get(k, 0) + 1
                self._last[k] = self._epoch
            return self._epoch

    def end(self, keys: Iterable[str]) -> None:
        with self._cond:
            self._epoch += 1
            for k in keys:
                n = self._busy.get(k, 0) - 1
                if n > 0:
                    self._busy[k] = n
                else:
                    self._busy.pop(k, None)
                self._last[k] = self._epoch
            if len(self._last) > KEYS_HELD:
                self._last.clear()
                self._floor = self._epoch
            self._cond.notify_all()

    def under_way(self) -> bool:
        return bool(self._busy)

    def still(self, since: int) -> bool:
        """Nothing began or ended since epoch ``since``, and nothing is under way."""
        return self._epoch == since and not self._busy

    def busy(self, key: object) -> bool:
        """``key`` is being rewritten now (lock-free read: a stale answer is re-checked by
        :meth:`overlapped` after the read)."""
        return bool(self._busy) and key in self._busy

    def any_busy(self, keys: Iterable[object]) -> bool:
        return bool(self._busy) and any(k in self._busy for k in keys)

    def wait_quiet(self, keys: list[object], timeout: float = WAIT) -> None:
        """Until none of ``keys`` is being rewritten (or ``timeout``: then the read goes on
        and may see either version, as before this gate existed)."""
        if not self._busy:
            return
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(k in self._busy for k in keys):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def overlapped(self, keys: list[object], since: int) -> bool:
        """A rewrite of one of ``keys`` began or ended after epoch ``since`` (or one is
        under way): what was read of them meanwhile may mix two versions."""
        with self._cond:
            if since < self._floor:
                return True
            return any(k in self._busy or self._last.get(k, 0) > since for k in keys)  # type: ignore[arg-type]
