"""A small cache of read-only descriptors of stored objects (local stores).

Why: a FUSE read that misses the page cache opens its chunk object twice (once on
the FUSE loop with ``RWF_NOWAIT``, once in the worker thread that waits for the
disk), and a reader of small pieces opens the same objects again and again; an
``open`` walks the whole key path each time.

What it may serve, and for how long:

- a descriptor is reused for at most ``life`` seconds after it was opened
  (``FD_LIFE``, 1 s): another process that replaces an object (a rename over its
  key) is seen within that time even when nothing else tells this one;
- it is never reused once the object it reads was unlinked (``st_nlink == 0``: the
  object was replaced or deleted), checked by the caller's ``fstat``;
- this process's own puts, deletes and renames drop the key at once
  (``LocalStore._replaced``), and a descriptor opened while one of those was under
  way is not kept (an epoch counter), so a read after a write returns never-older bytes;
- at most ``capacity`` descriptors are open (``FD_MAX``, 64, and no more than a
  sixteenth of ``ulimit -n``); idle ones are closed by a sweeper within ``life``
  seconds after their last use, so an idle daemon holds none.

Several threads may read one descriptor at once (``preadv`` has no file position);
one is closed only when no thread is using it.
"""
from __future__ import annotations

import os
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

FD_LIFE = 1.0  # seconds a descriptor may be reused after it was opened
FD_MAX = 64  # descriptors open at most (see default_capacity)


def default_capacity() -> int:
    """``FD_MAX``, but at most 1/16 of the soft ``RLIMIT_NOFILE`` (the daemon needs the rest)."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        return FD_MAX
    return max(0, min(FD_MAX, soft // 16))


class _Slot:
    __slots__ = ("dead", "fd", "opened", "users")

    def __init__(self, fd: int, opened: float) -> None:
        self.fd, self.opened, self.users, self.dead = fd, opened, 0, False


class FdCache:
    """Name (an object's key) -> open ``O_RDONLY`` descriptor of its file, bounded in count
    and age (see the module docstring)."""

    def __init__(self, capacity: int | None = None, life: float = FD_LIFE) -> None:
        self.capacity = default_capacity() if capacity is None else capacity
        self.life = life
        self._slots: OrderedDict[str, _Slot] = OrderedDict()  # oldest opened first
        self._lock = threading.Lock()
        self._epoch = 0  # bumped by every discard: a descriptor opened across one is not kept
        self._sweeper: threading.Thread | None = None
        self._wake = threading.Condition(self._lock)
        self.hits = 0
        self.opens = 0

    def acquire(self, name: str, path: Callable[[], str | os.PathLike]) -> tuple[int, _Slot | None, bool]:
        """``(fd, token, cached)`` for reading object ``name``, whose file ``path()`` names
        (asked only to open it); raises OSError as ``os.open`` does. Hand ``fd, token`` back
        to :meth:`release`. A ``cached`` descriptor may be of an object since replaced: check
        ``st_nlink`` and, if it is 0, release it, :meth:`discard` the name and acquire again."""
        now = time.monotonic()
        with self._lock:
            s = self._slots.get(name)
            if s is not None:
                if now - s.opened < self.life:
                    s.users += 1
                    self.hits += 1
                    return s.fd, s, True
                self._drop(name, s)
            epoch = self._epoch
        fd = os.open(path(), os.O_RDONLY | os.O_CLOEXEC)
        with self._lock:
            self.opens += 1
            if self.capacity <= 0 or epoch != self._epoch or name in self._slots:
                return fd, None, False  # not kept: closed at release
            while len(self._slots) >= self.capacity:
                old_name, old = next(iter(self._slots.items()))
                self._drop(old_name, old)
            slot = _Slot(fd, now)
            slot.users = 1
            if not self._slots:
                self._start_sweeper()  # it sleeps while the table is empty; else it keeps its own time
            self._slots[name] = slot
            return fd, slot, False

    def release(self, fd: int, token: _Slot | None) -> None:
        if token is None:
            os.close(fd)
            return
        with self._lock:
            token.users -= 1
            if token.dead and token.users == 0:
                os.close(token.fd)

    def discard(self, *names: str) -> None:
        """These objects were replaced, renamed or deleted (or found unlinked): never reuse
        their descriptors."""
        with self._lock:
            self._epoch += 1
            for name in names:
                s = self._slots.get(name)
                if s is not None:
                    self._drop(name, s)

    def __len__(self) -> int:
        return len(self._slots)

    # -- under the lock --------------------------------------------------------------
    def _drop(self, name: str, s: _Slot) -> None:
        """Out of the table; closed now if idle, else by its last user."""
        if self._slots.get(name) is s:
            del self._slots[name]
        s.dead = True
        if s.users == 0:
            os.close(s.fd)

    def _start_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = threading.Thread(target=self._sweep, name="polyfs-fdcache", daemon=True)
            self._sweeper.start()
        else:
            self._wake.notify()

    def _sweep(self) -> None:
        """Close descriptors past their life, so an idle daemon holds none."""
        with self._lock:
            while True:
                while not self._slots:
                    self._wake.wait()
                now = time.monotonic()
                for name, s in list(self._slots.items()):
                    if now - s.opened < self.life:
                        break  # ordered by opening time: the rest are younger
                    self._drop(name, s)
                if self._slots:
                    oldest = next(iter(self._slots.values())).opened
                    self._wake.wait(max(0.01, oldest + self.life - time.monotonic()))
