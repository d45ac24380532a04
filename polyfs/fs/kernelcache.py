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
handler can deadlock against the request the kernel is waiting for. A request that changed
the tree waits (briefly) until the names it invalidated are sent, so the change is seen in
every view when the syscall returns; names inside the directories the kernel has locked for
a waiting request are held back until it is done (the kernel would block on that lock).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import pyfuse3

from .inodes import InodeEntry, InodeTable

# inode invalidations sent between two looks for names (a change of a domain the kernel knows
# thousands of files of pushes them all; a name pushed meanwhile goes first)
_INODES_PER_TURN = 256


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
        self._named = 0  # pushes that queued names, numbered
        self._named_sent = 0  # the last of those whose names were sent (or held back)
        self._locked: Counter[int] = Counter()  # directories requests waiting here hold locked
        self._held_back: set[tuple[int, bytes]] = set()  # names in those: sent once they are free
        self._t = threading.Thread(target=self._run, name="polyfs-kernel-notify", daemon=True)
        self._t.start()

    def push_entries(self, entries: Iterable[InodeEntry]) -> int:
        """Drop what the kernel may hold of ``entries``: names and attributes handed out with
        a timeout not yet over, pages of files open for reading or opened since the last
        push. Nothing else: attributes handed out with timeout 0 (files of a domain written
        through the mount) are asked for again at each use, and a file whose pages were
        dropped gets them dropped again when it is next opened (``served`` is forgotten here,
        so that open cannot keep the cache, see ``Operations.open``). Invalidating every inode
        of a domain at each change made each of ``rm``'s unlinks in a directory of N files
        cost N notifications; so did every write after a read of all its files."""
        now = time.monotonic()
        inos: set[int] = set()
        names: set[tuple[int, bytes]] = set()
        for e in entries:
            if e.attr_until > now or e.served is not None or e.reading:
                e.attr_until = 0.0
                if not e.reading:
                    e.served = None
                inos.add(e.ino)
            if e.name_until > now:
                e.name_until = 0.0
                parent = self.inodes.peek(e.path.rpartition("/")[0]) if e.path else None
                if parent is not None:
                    names.add((parent.ino, e.path.rpartition("/")[2].encode("utf-8", "surrogateescape")))
        if not inos and not names:
            return 0
        with self._cond:
            self._inos |= inos
            self._names |= names
            if names:
                self._named += 1
            self._cond.notify_all()
            return self._named

    def named(self) -> int:
        """The number of the last push that queued names (what :meth:`wait_named` takes)."""
        return self._named

    def names_sent(self, upto: int) -> bool:
        """Whether the names of pushes up to ``upto`` were sent already: a request that
        changed nothing the kernel holds has nothing to wait for, and no thread to wait in."""
        with self._cond:
            return self._named_sent >= upto

    def wait_named(self, upto: int, timeout: float) -> bool:
        """Wait until the names of pushes up to ``upto`` were sent, at most ``timeout`` s (the
        kernel drops those names by itself soon after: a lock nobody foresaw costs this wait,
        never a hang). False when the time ran out."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._named_sent < upto:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    @contextmanager
    def locked(self, dirs: Iterable[int]) -> Iterator[None]:
        """While a request the kernel holds ``dirs`` locked for runs (and waits on
        :meth:`wait_named`), names inside them are held back: invalidating one takes that
        lock, so it would wait for the request, and the request for it."""
        dirs = [d for d in dirs if d]
        with self._cond:
            self._locked.update(dirs)
        try:
            yield
        finally:
            with self._cond:
                self._locked.subtract(dirs)
                self._locked += Counter()  # drops the zero counts
                free = {n for n in self._held_back if n[0] not in self._locked}
                if free:
                    self._held_back -= free
                    self._names |= free
                    self._cond.notify_all()

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
                upto = self._named
                names = {n for n in self._names if n[0] not in self._locked}
                self._held_back |= self._names - names
                self._names = set()
                inos = set()  # a slice: names pushed meanwhile are not kept waiting behind them all
                while self._inos and len(inos) < _INODES_PER_TURN:
                    inos.add(self._inos.pop())
                self._busy = True
            try:
                for parent, name in names:  # names first: a lookup after this sees the new tree
                    _quietly(pyfuse3.invalidate_entry, parent, name)
                with self._cond:
                    self._named_sent = max(self._named_sent, upto)
                    self._cond.notify_all()
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
