"""Files and directories being written, before (or instead of) the store.

A file open for writing is a set of **dirty pages over its base file** (the view's
own file, if any), never a copy of it (DESIGN.md section 4):

- Pages are ``WriteBudget.page_size`` (256 KiB). A page is absent (base bytes below
  ``base_limit``, zeros above), in memory (a ``bytearray`` only as long as needed: a
  300-byte JSON costs ~300 bytes; or a read-only ``memoryview`` of the immutable
  buffer a write brought when it covered the whole page, copied on its first change:
  a stream of large writes is kept without copying it on the FUSE loop) or spilled (an ``int``, its length in the file's
  scratch file at ``page_no * page_size``, sparse). Past its length a page reads zeros.
- A write into an absent page inside the base first copies the base bytes of that
  page it does not cover (one ``base.read`` of at most a page), so a present page is
  the whole truth for its range. Shrinking lowers ``base_limit``: growing again
  reads zeros, never old base bytes.
- Unless that copy finds a stored chunk under the page changed or gone since the file
  was opened (another process rewrote another dataset of the same HDF5 or TIFF file):
  those bytes were never this writer's, so the write is kept and the page stays
  *partial* (``_parts``: the ranges written into it); the rest still reads the base,
  failing (EIO, close-to-open) only if someone reads it, and counts as untouched, so
  the flush never reads it either. Before, the write itself failed with EIO (h5py
  ``r+`` could not even open a file of a domain another view was writing).
- One :class:`WriteBudget` per daemon counts in-memory page bytes of all files. Past
  ``limit`` after a write it spills the least recently written pages (any file) to
  their owners' scratch files, down to 90% of the limit. Writes into spilled pages
  go straight to scratch (``os.pwrite``): memory does not grow back. Scratch files
  are ``TemporaryFile`` s made at the first spill, already unlinked (a crash leaks
  nothing). ``budget.peak`` <= limit + one write + two pages of base fill per writer.

Locks: a file's ``lock`` guards its pages; the budget's lock is innermost and covers
no I/O. Spilling holds one file lock at a time (victims are claimed under the
budget lock, then spilled each under its own file lock), so callers of ``relieve``
hold none. Reads copy present pages under the file lock and read the base outside
it (the base is immutable), so a slow store read never blocks the FUSE loop's
writes; a read racing a write may see either side of it. A write that must fill a
page from the base reads it under the file lock on the caller's thread
(``needs_base`` says so beforehand, to move such writes off the event loop).

Scratch I/O can fail (``scratch_dir`` full, ``ENOSPC``/``EDQUOT``/``EIO``). Such a
failure is the failing write's error (:class:`ScratchFailed`, EIO) and, so that nothing
half-written is ever stored, it **fails the file**: its pages and scratch space are
freed at once, and every later write, read or flush of it gets EIO until it is truncated
to nothing (``O_TRUNC``). A spill that fails keeps its victim pages in memory (their
files are intact); the files written while the budget was over it, whose writes
waited on that spill, are the ones failed.

Flush hands the file to the write service (``open_reader()`` streams it); files it
does not recognise (lock files, temporaries) stay here as scratch files until
renamed onto a real name or unlinked. Directories made inside an array (``c/0/``)
exist here until the view shows them. Nothing here survives the daemon (SEMANTICS.md).
"""
from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import IO, Callable, Protocol

from ..errors import ChunkMissing, InvalidInput, PolyfsError, StoreError
from ..writes.protocol import SourceReader
from ..vfile import LiteralPiece, Segment, VFile
from ..views.base import DirNode, FileNode, Node

log = logging.getLogger(__name__)

PAGE = 256 << 10


class BaseFile(Protocol):
    """The file a writer opened without O_TRUNC (the view's file); immutable."""

    size: int

    def read(self, off: int, n: int) -> bytes:  # may do store I/O; called from worker threads
        ...


class Discarded(PolyfsError):
    """A pending file used after :meth:`PendingFile.discard` (maps to EIO)."""


class ScratchFailed(StoreError):
    """The scratch file of a file being written could not be written or read (EIO)."""


class StillLost(ScratchFailed):
    """A file whose write was lost, used again after its writer was told once (EIO, logged
    at debug only: a tool writing a big file keeps writing after the first EIO, and each of
    its hundreds of later writes logged the same warning)."""


def _scratch_error(path: str, where: str | None, exc: OSError) -> ScratchFailed:
    return ScratchFailed(f"{path}: scratch file in {where or tempfile.gettempdir()}: {exc.strerror or exc}")


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, at: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n


class WriteBudget:
    """Daemon-wide budget for the bytes of files being written that are held in memory."""

    def __init__(self, limit_bytes: int = 256 << 20, scratch_dir: str | None = None,
                 page_size: int = PAGE) -> None:
        if scratch_dir is not None:
            try:
                os.makedirs(scratch_dir, exist_ok=True)  # else the first spill fails with a puzzling ENOENT
                tempfile.TemporaryFile(dir=scratch_dir).close()  # noqa: SIM115 - and it can hold files
            except OSError as exc:  # a read-only or unusable directory: every spill would be EIO
                why = "not a directory" if os.path.exists(scratch_dir) and not os.path.isdir(scratch_dir) \
                    else exc.strerror or str(exc)
                raise InvalidInput(f"scratch_dir {scratch_dir}: {why} (files being written "
                                   f"spill there past write_buffer_mb; choose another with -o scratch_dir=)") from None
        self.limit = limit_bytes
        self.scratch_dir = scratch_dir
        self.page_size = page_size
        self.peak = 0
        self._lock = threading.Lock()
        self._lru: OrderedDict[tuple[PendingFile, int], int] = OrderedDict()  # in-memory pages, oldest first
        self._claimed: set[tuple[PendingFile, int]] = set()  # being spilled by some thread
        self._used = 0
        self._spilled = 0
        self._told = False  # the first spill is logged once (an operator sizing write_buffer_mb)
        self._pressing: set[PendingFile] = set()  # written while over the limit: waiting on a spill

    @property
    def used(self) -> int:
        """Bytes of dirty pages currently in memory."""
        return self._used

    @property
    def spilled(self) -> int:
        """Bytes of dirty pages currently in scratch files."""
        return self._spilled

    def _account(self, f: PendingFile, p: int, nbytes: int) -> None:
        """Page ``p`` of ``f`` is in memory with ``nbytes`` and was just written (caller holds f.lock)."""
        with self._lock:
            old = self._lru.pop((f, p), 0)
            self._lru[(f, p)] = nbytes
            self._used += nbytes - old
            self.peak = max(self.peak, self._used)
            if self._used > self.limit:
                self._pressing.add(f)

    def _forget(self, f: PendingFile, p: int, spilled: int = 0) -> None:
        """Page ``p`` of ``f`` left memory; ``spilled`` bytes went to (or, < 0, left) scratch."""
        with self._lock:
            self._used -= self._lru.pop((f, p), 0)
            self._spilled += spilled

    def over(self) -> bool:
        """Whether pages in memory exceed the limit (someone should :meth:`relieve`)."""
        return self._used > self.limit

    def _room(self, n: int) -> bool:
        return self._used + n <= self.limit

    def relieve(self, mine: PendingFile | None = None) -> None:
        """Spill least recently written pages until ``used`` <= 90% of the limit.
        The caller must hold no file lock. If scratch space fails, the files written
        while over the limit are failed (see the module docstring) and ScratchFailed raised,
        to the writer of ``mine`` only if that file is one of them: a write whose bytes were
        kept must not be told it failed (its writer would give the file up, and its close
        would store what it had)."""
        while True:
            with self._lock:
                if self._used <= self.limit:
                    self._pressing.clear()
                    return
                excess = self._used - self.limit * 9 // 10
                victims = []
                for key, n in self._lru.items():
                    if key not in self._claimed:
                        victims.append(key)
                        excess -= n
                        if excess <= 0:
                            break
                if not victims:
                    return  # other threads are spilling what there is
                self._claimed.update(victims)
                tell, self._told = not self._told, True
            if tell:
                log.info("files being written hold more than %d MiB: spilling pages to %s",
                         self.limit >> 20, self.scratch_dir or tempfile.gettempdir())
            failure: OSError | None = None
            try:
                for f, p in victims:
                    f._spill(p)
            except OSError as exc:
                failure = exc
            finally:
                with self._lock:
                    self._claimed.difference_update(victims)
            if failure is not None:
                err = self._fail_pressing(failure)
                if mine is None or mine.failed:
                    raise err
                return

    def _fail_pressing(self, exc: OSError) -> ScratchFailed:
        """Spilling failed: the files whose writes pushed memory past the limit lose their
        unstored bytes (their writers get the error), which brings memory back down."""
        with self._lock:
            doomed, self._pressing = list(self._pressing), set()
        err = _scratch_error("spilling", self.scratch_dir, exc)
        log.error("files being written hold more than %d MiB and %s; failing %s", self.limit >> 20,
                  err, ", ".join(sorted(f.path for f in doomed)) or "nothing")
        for f in doomed:
            f.fail(str(err))
        return err


class _Live(Segment):
    """The bytes of a file being written, read when the segment is *planned*.

    Unlike every other segment, planning here does I/O (``PendingFile.read``: page
    copies, scratch preads, base reads), so plan it from a worker thread. Not a
    ``Produced`` segment: those are cached, and these bytes change.
    """

    def __init__(self, f: PendingFile, length: int) -> None:
        self.f = f
        self.length = length

    def plan(self, start: int, end: int, out: list) -> None:
        data = self.f.read(start, end - start)
        if len(data) < end - start:  # the file shrank since vfile(): keep the planned length
            data += bytes(end - start - len(data))
        out.append(LiteralPiece(data))


class PendingFile(FileNode):
    """A file as its writers left it: dirty pages over an optional base file."""

    def __init__(self, path: str, ingest: bool, base_time: float, budget: WriteBudget,
                 base: BaseFile | None = None) -> None:
        super().__init__(path.rsplit("/", 1)[-1], self.vfile, mtime=time.time())
        self.path = path
        self.ingest = ingest  # flush hands it to the write service (else: scratch)
        self.head_check: Callable[[bytes], str | None] | None = None  # refuses it by its first bytes
        self.dirty = False
        self.opens = 0
        self.base_time = base_time
        self.writer = 0  # the process (thread group) that opened it for writing
        self.lock = threading.Lock()
        self.budget = budget
        self.base = base
        self._page = budget.page_size
        self._size = base.size if base is not None else 0
        self._base_limit = self._size  # below it, bytes of absent pages are the base's
        self._pages: dict[int, bytearray | memoryview | int] = {}  # page no -> in memory | spilled length
        # pages whose base fill failed (a chunk changed under the view file): page no -> the sorted,
        # merged page-relative [start, end) ranges written into it; the rest of it reads the base
        self._parts: dict[int, list[list[int]]] = {}
        self._scratch: IO[bytes] | None = None
        self._gone = False
        self._failed: str | None = None  # why a write of it was lost (scratch I/O): never stored
        self._told = False  # a use after the loss was refused (and logged) once already
        self.unlinked = False  # its name was removed while open: never stored again
        self.created = False  # made by create() (writeops.flush_handle: closed before written)
        self.incomplete: str | None = None  # its last flush found it still being written: why

    # -- the node ----------------------------------------------------------------------------------
    def size(self) -> int:
        return self._size

    @property
    def based(self) -> bool:
        """Whether some of the view file's bytes still show through (False: the writer made the
        file from scratch: created it, or truncated it to nothing and wrote it anew)."""
        return self.base is not None and self._base_limit > 0

    def ready(self) -> bool:
        return True

    @property
    def built(self) -> bool:
        return True

    def vfile(self) -> VFile:
        """A view of the current bytes (length fixed now); its reads go through :meth:`read`."""
        return VFile([_Live(self, self._size)])

    def open_reader(self) -> SourceReader:
        """Stream the file (ingest, format libraries) without holding it whole in memory."""
        return SourceReader(self)

    # -- data ----------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._gone:
            raise Discarded(f"{self.path}: the file being written was discarded")
        if self._failed is not None:
            told, self._told = self._told, True
            raise (StillLost if told else ScratchFailed)(
                f"{self.path}: a write was lost ({self._failed}); nothing of this file is stored: write it anew "
                f"(O_TRUNC)")

    def _scratch_fd(self) -> int:
        """The scratch file's fd, made at first need (caller holds the lock)."""
        if self._scratch is None:  # lives until discard(); unlinked already
            self._scratch = tempfile.TemporaryFile(dir=self.budget.scratch_dir)  # noqa: SIM115
        return self._scratch.fileno()

    @property
    def gone(self) -> bool:
        """Whether :meth:`discard` freed it (every later use raises Discarded)."""
        return self._gone

    @property
    def failed(self) -> bool:
        """Whether a write of this file was lost (every use but a truncate to 0 gets EIO)."""
        return self._failed is not None

    def fail(self, reason: str) -> None:
        """A write of this file was lost: drop its pages and scratch space; later uses get EIO."""
        with self.lock:
            self._fail_locked(reason)

    def _fail_locked(self, reason: str) -> None:
        if self._gone or self._failed is not None:
            return
        self._failed = reason
        self._release_data()

    def _release_data(self) -> None:
        """Drop every page and the scratch file (caller holds the lock)."""
        for p in list(self._pages):
            self._drop_page(p)
        self._parts.clear()
        if self._scratch is not None:
            try:
                self._scratch.close()
            except OSError:
                pass
            self._scratch = None
        with self.budget._lock:
            self.budget._pressing.discard(self)

    def _base_need(self, p: int, w0: int, w1: int) -> tuple[int, int] | None:
        """Page-relative base range to read before writing ``[w0, w1)`` into absent page ``p``."""
        lim = min(self._page, self._base_limit - p * self._page) if self.base is not None else 0
        lead, trail = min(w0, lim) > 0, w1 < lim
        if lead and trail:
            return 0, lim
        if lead:
            return 0, min(w0, lim)
        if trail:
            return w1, lim
        return None

    def needs_base(self, off: int, n: int) -> bool:
        """True if ``write(off, n bytes)`` would first read the base (do it off the event loop)."""
        with self.lock:
            if self.base is None or n <= 0:
                return False
            P, end = self._page, off + n
            for p in {off // P, (end - 1) // P}:  # inner pages are covered whole
                if p not in self._pages and self._base_need(p, max(off - p * P, 0), min(end - p * P, P)):
                    return True
            return False

    def write(self, off: int, buf: bytes, relieve: bool = True) -> int:
        """Bytes into pages; ``relieve``: spill past the budget now (False: the caller does it,
        off its event loop, see :meth:`WriteBudget.over`)."""
        if off < 0:
            raise ValueError("negative offset")
        view = memoryview(buf).cast("B")
        end, P = off + len(view), self._page
        with self.lock:
            self._check()
            if end == off:
                return 0  # POSIX: a write of nothing changes nothing
            pos = off
            try:
                while pos < end:
                    p = pos // P
                    k = min(end, p * P + P) - pos
                    self._write_page(p, pos - p * P, view[pos - off:pos - off + k])
                    pos += k
            except OSError as exc:  # scratch I/O: part of this write may be in, part not
                err = _scratch_error(self.path, self.budget.scratch_dir, exc)
                self._fail_locked(str(err))
                raise err from None
            self._size = max(self._size, end)
            self.dirty = True
            self.mtime = time.time()
        if relieve:
            self.budget.relieve(self)
        return len(view)

    def _write_page(self, p: int, o: int, data: memoryview) -> None:
        page = self._pages.get(p)
        if page is None and o == 0 and len(data) >= min(self._page, self._base_limit - p * self._page):
            # covers all the base bytes it has: no zero fill; an immutable buffer is kept as it is
            page = data if isinstance(data.obj, bytes) else bytearray(data)
            self._pages[p] = page
            self.budget._account(self, p, len(page))
            return
        if isinstance(page, memoryview):
            page = bytearray(page)  # its first change: a copy of its own
        if page is None:
            page = bytearray(max(min(self._page, self._base_limit - p * self._page), 0))
            need = self._base_need(p, o, o + len(data))
            if need is not None:
                a, b = need
                try:
                    got = self.base.read(p * self._page + a, b - a)[:b - a]  # type: ignore[union-attr]
                except ChunkMissing:  # not this writer's bytes: they stay the base's (module docstring)
                    self._parts[p] = []
                else:
                    page[a:a + len(got)] = got
        if p in self._parts:
            self._add_part(p, o, o + len(data))
        if isinstance(page, bytearray):
            if len(page) < o:
                page.extend(bytes(o - len(page)))
            page[o:o + len(data)] = data
            self._pages[p] = page
            self.budget._account(self, p, len(page))
        else:  # spilled: write through, zero-filling a gap left by a truncate
            fd, at = self._scratch_fd(), p * self._page
            if page < o:
                _pwrite_all(fd, bytes(o - page), at + page)
            _pwrite_all(fd, data, at + o)
            self._pages[p] = max(page, o + len(data))
            self.budget._forget(self, p, self._pages[p] - page)

    def _add_part(self, p: int, a: int, b: int) -> None:
        """Range ``[a, b)`` of partial page ``p`` was written (caller holds the lock); a page
        whose base bytes are all written over is whole again."""
        parts = self._parts[p]
        merged: list[list[int]] = []
        for s, e in parts:
            if e < a or s > b:
                merged.append([s, e])
            else:
                a, b = min(a, s), max(b, e)
        merged.append([a, b])
        merged.sort()
        lim = min(self._page, self._base_limit - p * self._page)
        if lim <= 0 or (merged[0][0] <= 0 and merged[0][1] >= lim):
            del self._parts[p]
        else:
            self._parts[p] = merged

    def _gaps(self, p: int, a: int, b: int) -> list[tuple[int, int]]:
        """Absolute ranges inside ``[a, b)`` of partial page ``p`` that still read the base."""
        P = self._page
        lo, hi = p * P, min(p * P + P, self._base_limit)
        out, pos = [], max(a, lo)
        for s, e in self._parts[p]:
            if pos >= min(b, hi):
                break
            if lo + s > pos:
                out.append((pos, min(lo + s, b, hi)))
            pos = max(pos, lo + e)
        if pos < min(b, hi):
            out.append((pos, min(b, hi)))
        return out

    def read(self, off: int, n: int) -> bytes:
        """Base bytes + dirty pages; zeros in holes. Short only at end of file."""
        P = self._page
        base_ranges: list[list[int]] = []
        with self.lock:
            self._check()
            end = min(off + n, self._size)
            if n <= 0 or off >= end:
                return b""
            parts = self._in_memory(off, end)
            if parts is not None:  # one copy, under the lock (pages change after it)
                data = b"".join(parts)
                for m in parts:
                    m.release()  # a page with a live view cannot grow
                return data
            out = bytearray(end - off)
            view = memoryview(out)
            for p in range(off // P, (end - 1) // P + 1):
                a, b = max(off, p * P), min(end, p * P + P)
                page = self._pages.get(p)
                for g0, g1 in self._gaps(p, a, b) if p in self._parts else ():
                    if base_ranges and base_ranges[-1][1] == g0:
                        base_ranges[-1][1] = g1
                    else:
                        base_ranges.append([g0, g1])
                if isinstance(page, (bytearray, memoryview)):
                    with memoryview(page) as whole:  # released at once: a page with a live view cannot grow
                        chunk = whole[a - p * P:b - p * P]
                        view[a - off:a - off + len(chunk)] = chunk
                        chunk.release()
                elif page is not None:
                    k = min(b, p * P + page) - a
                    if k > 0:
                        try:
                            os.preadv(self._scratch_fd(), [view[a - off:a - off + k]], a)
                        except OSError as exc:
                            raise _scratch_error(self.path, self.budget.scratch_dir, exc) from None
                elif a < min(b, self._base_limit):
                    e = min(b, self._base_limit)
                    if base_ranges and base_ranges[-1][1] == a:
                        base_ranges[-1][1] = e
                    else:
                        base_ranges.append([a, e])
        for a, e in base_ranges:  # outside the lock: the base never changes
            got = self.base.read(a, e - a)[:e - a]  # type: ignore[union-attr]
            view[a - off:a - off + len(got)] = got
        return bytes(out)

    def _in_memory(self, off: int, end: int) -> list[memoryview] | None:
        """Views of ``[off, end)`` when in-memory pages hold all of it (the common case:
        a file just written), else None. Caller holds the lock."""
        P, parts = self._page, []
        for p in range(off // P, (end - 1) // P + 1):
            page = self._pages.get(p)
            a, b = max(off, p * P) - p * P, min(end, p * P + P) - p * P
            if page is None or isinstance(page, int) or len(page) < b or p in self._parts:
                return None
            parts.append(memoryview(page)[a:b])
        return parts

    def truncate(self, size: int) -> None:
        if size < 0:
            raise ValueError("negative size")
        with self.lock:
            if size == 0 and not self._gone and self._failed is not None:
                self._failed, self._told = None, False  # written anew from nothing: usable again
            self._check()
            if size == 0 and self._scratch is not None:
                self._release_data()  # every page goes: so does the scratch space
            if size < self._size:
                P = self._page
                first = -(-size // P)  # pages starting at or past the new end
                for p in [q for q in self._pages if q >= first]:
                    self._drop_page(p)
                p, keep = size // P, size % P
                page = self._pages.get(p)
                if isinstance(page, memoryview) and len(page) > keep:
                    self._pages[p] = page[:keep]
                    self.budget._account(self, p, keep)
                elif isinstance(page, bytearray) and len(page) > keep:
                    del page[keep:]
                    self.budget._account(self, p, keep)
                elif isinstance(page, int) and page > keep:
                    self._pages[p] = keep
                    self.budget._forget(self, p, keep - page)
                if p in self._parts:
                    self._parts[p] = [[a, min(b, keep)] for a, b in self._parts[p] if a < keep]
                self._base_limit = min(self._base_limit, size)
                if p in self._parts:
                    if not self._parts[p] and p in self._pages:
                        self._drop_page(p)  # nothing written is left in it: it reads the base again
                    elif self._parts[p]:
                        a, b = self._parts[p].pop()
                        self._add_part(p, a, b)  # whole again if the base no longer reaches past it
            self._size = size
            self.dirty = True
            self.mtime = time.time()

    def _drop_page(self, p: int) -> None:
        self._parts.pop(p, None)
        page = self._pages.pop(p)
        self.budget._forget(self, p, -page if isinstance(page, int) else 0)

    def _spill(self, p: int) -> None:
        """Move page ``p`` to the scratch file (called by the budget, no other lock held)."""
        with self.lock:
            page = self._pages.get(p)
            if self._gone or page is None or isinstance(page, int):
                self.budget._forget(self, p)  # freed or spilled meanwhile
                return
            _pwrite_all(self._scratch_fd(), page, p * self._page)  # on failure the page stays in memory
            self._pages[p] = len(page)
            self.budget._forget(self, p, len(page))

    # -- what the write service and the tree operations ask -----------------------------------------
    def untouched(self, off: int, n: int) -> bool:
        """True iff ``[off, off+n)`` still reads the base's bytes because no write or
        truncate reached it. Page-granular: a written page counts as touched whole."""
        with self.lock:
            self._check()
            end = off + n
            if off < 0 or end > self._base_limit:
                return False
            if n <= 0:
                return True
            first, last = off // self._page, (end - 1) // self._page
            if last - first + 1 > len(self._pages):
                hit = [p for p in self._pages if first <= p <= last]
            else:
                hit = [p for p in range(first, last + 1) if p in self._pages]
            return all(p in self._parts and self._gaps(p, off, end) == [self._clip(p, off, end)] for p in hit)

    def _clip(self, p: int, off: int, end: int) -> tuple[int, int]:
        """``[off, end)`` inside page ``p``."""
        return max(off, p * self._page), min(end, p * self._page + self._page)

    def dirty_ranges(self) -> list[tuple[int, int]]:
        """Merged ``(start, end)`` ranges inside ``[0, size())`` that may differ from the
        base (whole written pages, and everything past ``base_limit``); a changed length
        shows as ``size() != base.size``."""
        with self.lock:
            self._check()
            P = self._page
            spans = [(p * P, min(p * P + P, self._size)) for p in self._pages if p not in self._parts]
            spans += [(p * P + a, min(p * P + b, self._size)) for p, parts in self._parts.items() for a, b in parts]
            if self._base_limit < self._size:
                spans.append((self._base_limit, self._size))
        out: list[tuple[int, int]] = []
        for s, e in sorted(spans):
            if out and s <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], e))
            else:
                out.append((s, e))
        return out

    def clone(self, path: str) -> PendingFile:
        """An independent file with the same bytes (link(2)): shares the base, copies the
        pages (to memory while the budget has room, else straight to the clone's scratch)."""
        c = PendingFile(path, self.ingest, self.base_time, self.budget, self.base)
        c.writer = self.writer
        with self.lock, c.lock:  # c is unpublished: only a spiller could want its lock
            self._check()
            c._size, c._base_limit, c.dirty, c.mtime = self._size, self._base_limit, self.dirty, self.mtime
            c._parts = {p: [list(r) for r in parts] for p, parts in self._parts.items()}
            for p, page in self._pages.items():
                if not isinstance(page, int) and self.budget._room(len(page)):
                    c._pages[p] = page if isinstance(page, memoryview) else bytearray(page)  # views: immutable
                    self.budget._account(c, p, len(page))
                    continue
                if not isinstance(page, int):
                    data: bytes | bytearray | memoryview = page
                else:
                    data = os.pread(self._scratch_fd(), page, p * self._page)
                _pwrite_all(c._scratch_fd(), data, p * self._page)
                c._pages[p] = len(data)
                self.budget._forget(c, p, len(data))
        self.budget.relieve()
        return c

    def discard(self) -> None:
        """Free the memory and scratch space now (idempotent); later use raises Discarded."""
        with self.lock:
            if self._gone:
                return
            self._gone = True
            self._release_data()


class PendingDir(DirNode):
    """A directory made through a view that the store does not (yet) show."""

    def __init__(self, path: str) -> None:
        super().__init__(path.rsplit("/", 1)[-1], {}, cheap=True)
        self.path = path


@dataclass
class Overlay:
    """The path -> node table of files being written and directories not yet in the store."""

    files: dict[str, PendingFile] = field(default_factory=dict)
    dirs: dict[str, PendingDir] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, path: str) -> Node | None:
        with self.lock:
            return self.files.get(path) or self.dirs.get(path)

    def children(self, path: str) -> dict[str, Node]:
        """Overlay entries directly inside directory ``path``."""
        prefix = path + "/" if path else ""
        with self.lock:
            out: dict[str, Node] = {}
            for table in (self.dirs, self.files):
                for p, node in table.items():
                    if p.startswith(prefix) and "/" not in p[len(prefix):]:
                        out[p[len(prefix):]] = node
            return out

    def add_file(self, f: PendingFile) -> None:
        with self.lock:
            self.files[f.path] = f

    def add_dir(self, path: str) -> PendingDir:
        with self.lock:
            return self.dirs.setdefault(path, PendingDir(path))

    def drop(self, path: str) -> None:
        with self.lock:
            self.files.pop(path, None)
            self.dirs.pop(path, None)

    def drop_dirs_below(self, path: str) -> None:
        """Forget directories made at or below ``path`` (their object is gone)."""
        prefix = path + "/"
        with self.lock:
            for p in [p for p in self.dirs if p == path or p.startswith(prefix)]:
                del self.dirs[p]

    def holds(self, f: PendingFile) -> bool:
        """Whether ``f`` is still the file at its path (not unlinked, renamed or replaced)."""
        with self.lock:
            return self.files.get(f.path) is f

    def scratch_below(self, path: str) -> list[PendingFile]:
        """Files below directory ``path`` that are kept as scratch (not chunk or metadata files)."""
        prefix = path.rstrip("/") + "/"
        with self.lock:
            return [f for p, f in self.files.items() if p.startswith(prefix) and not f.ingest]

    def has_below(self, path: str) -> bool:
        prefix = path + "/"
        with self.lock:
            return any(p.startswith(prefix) for p in self.files) or any(p.startswith(prefix) for p in self.dirs)
