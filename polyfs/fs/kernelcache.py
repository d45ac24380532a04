"""What the kernel caches of the mount (names, attributes, pages), and telling it to drop them.

Names and attributes of domains nobody writes through this mount are handed to the kernel
for ``entry_timeout`` seconds (60 by default): a walk over a million N5 blocks then asks the
daemon once per minute, not once per second. Every change the daemon learns of is pushed
to the kernel instead of waiting for that time to pass:

- writes through this mount (``WriteSide`` pushes the inodes of the changed domain; their
  names go too, here);
- changes the domain watcher finds (another daemon, another host, HSDS; ``daemon.py``):
  every name and inode of the domain in every view;
- a chunk found rewritten behind polyfs's back at read time (its domain's files are
  re-planned, so their sizes may change).

The kernel only keeps what was handed out, so :class:`KernelHeld` notes which domains it
holds unexpired names or attributes of: the watcher keeps re-reading those (the kernel
stops asking the daemon about them, so the daemon's own notion of "in use" would lapse).
Notifications are sent from one thread of their own: one sent from inside a request
handler can deadlock against the request the kernel is waiting for.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

import pyfuse3

from .inodes import InodeEntry, InodeTable


class KernelHeld:
    """Domains the kernel may answer for from its caches, and until when (monotonic)."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def note(self, domain: str | None, until: float) -> None:
        """``domain``: a domain path; None or "" (above every domain) are not noted."""
        if domain and self._until.get(domain, 0.0) < until:
            with self._lock:  # against domains() forgetting it between its look and its pop
                if self._until.get(domain, 0.0) < until:
                    self._until[domain] = until

    def domains(self) -> list[str]:
        """The domains still held now (expired ones are forgotten)."""
        now = time.monotonic()
        with self._lock:
            for d in [d for d, t in self._until.items() if t <= now]:
                del self._until[d]
            return list(self._until)


class KernelNotifier:
    """Inode and name invalidations, coalesced and sent from one thread.

    Besides an inode's attributes and pages, its name is dropped when the kernel may still
    hold it with a long timeout (a name the view no longer has would otherwise stay for
    that long)."""

    def __init__(self, inodes: InodeTable) -> None:
        self.inodes = inodes
        self._inos: set[int] = set()
        self._names: set[tuple[int, bytes]] = set()
        self._cond = threading.Condition()
        self.sent = 0  # notifications sent (tests, diagnostics)
        self._busy = False  # a batch is being sent
        self._t = threading.Thread(target=self._run, name="polyfs-kernel-notify", daemon=True)
        self._t.start()

    def push_entries(self, entries: Iterable[InodeEntry], every_inode: bool = False) -> None:
        """Drop what the kernel may hold of ``entries``: names and attributes handed out with
        a timeout not yet over, pages of files opened (``every_inode``: every inode's
        attributes and pages, whatever was handed out)."""
        now = time.monotonic()
        inos: set[int] = set()
        names: set[tuple[int, bytes]] = set()
        for e in entries:
            if every_inode or e.attr_until > now or e.served is not None:
                e.attr_until = 0.0
                inos.add(e.ino)
            if e.name_until > now:
                e.name_until = 0.0
                parent = self.inodes.peek(e.path.rpartition("/")[0]) if e.path else None
                if parent is not None:
                    names.add((parent.ino, e.path.rpartition("/")[2].encode("utf-8", "surrogateescape")))
        if not inos and not names:
            return
        with self._cond:
            self._inos |= inos
            self._names |= names
            self._cond.notify()

    def idle(self, timeout: float = 5.0) -> bool:
        """Wait until everything pushed so far was sent (tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cond:
                if not self._inos and not self._names and not self._busy:
                    return True
            time.sleep(0.01)
        return False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._inos and not self._names:
                    self._cond.wait()
                inos, self._inos = self._inos, set()
                names, self._names = self._names, set()
                self._busy = True
            try:
                for parent, name in names:  # names first: a lookup after this sees the new tree
                    _quietly(pyfuse3.invalidate_entry, parent, name)
                for ino in inos:
                    _quietly(pyfuse3.invalidate_inode, ino, False)
                self.sent += len(names) + len(inos)
            finally:
                self._busy = False


def entries_below(inodes: InodeTable, prefixes: Iterable[str]) -> list[InodeEntry]:
    """The known entries at or below any of the view paths ``prefixes`` (an index walk: the
    time of what is there, not of every inode the mount knows)."""
    return inodes.below(prefixes)


def _quietly(fn: Callable, *args: object) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001, S110 - the kernel may have forgotten it already (ENOENT)
        pass
