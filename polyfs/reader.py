"""The one executor of read plans: fetch stored ranges, produce, splice, cache.

``Reader.read`` is synchronous and thread-safe; the FUSE layer calls it from a
worker thread. Stored ranges of one object are coalesced into one request;
ranges of several objects are fetched in parallel. Produced bytes
(transcoded chunks, gzip trailers) are cached in a bounded LRU and produced
once even when several readers ask at the same time. A reader going through a
file in order gets the produced bytes ahead of it made in the background
(``READAHEAD``), on the cores the FUSE loop does not use.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Hashable

from .errors import ChunkChanged, ChunkMissing, NotFound
from .rewrites import Rewrites
from .store.recent import kept_version
from .vfile import LiteralPiece, Piece, ProducedPiece, RangePiece, VFile, coalesce

log = logging.getLogger(__name__)

READAHEAD = 16 << 20  # produced bytes made ahead of a sequential reader (twice the cache's share at most)
AHEAD_THREADS = max(2, os.cpu_count() or 2)
AHEAD_OBJECT_MAX = 8 << 20  # remote stored objects fetched ahead whole up to this size
AHEAD_FETCHES = 32  # remote objects fetched ahead at once (each a round trip)
ASSEMBLE_TRIES = 4  # reads made again while rewrites of their chunks keep overlapping them
AHEAD_LIFE = 5.0  # seconds an object fetched ahead may serve reads (another host may rewrite it)


class ByteLRU:
    """A thread-safe LRU of bytes values bounded by their total size."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._items: OrderedDict[Hashable, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            v = self._items.get(key)
            if v is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return v

    def put(self, key: Hashable, value: bytes) -> None:
        if len(value) > self.capacity:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.used -= len(old)
            self._items[key] = value
            self.used += len(value)
            while self.used > self.capacity and self._items:
                _, v = self._items.popitem(last=False)
                self.used -= len(v)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            v = self._items.pop(key, None)
            if v is not None:
                self.used -= len(v)

    def discard_where(self, pred) -> None:
        with self._lock:
            for k in [k for k in self._items if pred(k)]:
                self.used -= len(self._items.pop(k))


class Reader:
    def __init__(self, ctx: Any, cache_bytes: int = 256 << 20, threads: int = 8) -> None:
        """``ctx`` carries ``store`` and ``catalog``; producers receive it."""
        self.ctx = ctx
        self.store = ctx.store
        self.cache = ByteLRU(cache_bytes)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="polyfs-fetch")
        self._inflight: dict[Hashable, Future] = {}
        self._inflight_lock = threading.Lock()
        self._overtaken: set[Future] = set()  # productions whose chunk was rewritten meanwhile
        self._ahead_pool = ThreadPoolExecutor(AHEAD_THREADS, thread_name_prefix="polyfs-ahead")
        self._fetch_ahead_pool = ThreadPoolExecutor(AHEAD_FETCHES, thread_name_prefix="polyfs-fetch-ahead")
        self._ahead_at: dict[Hashable, float] = {}  # object fetched ahead -> when (see AHEAD_LIFE)
        self._prefetched = ByteLRU(4096)  # keys lately handed to store.prefetch (asked once)
        self._ahead: weakref.WeakKeyDictionary[VFile, list[int]] = weakref.WeakKeyDictionary()
        self._ahead_lock = threading.Lock()
        self.readahead = min(READAHEAD, cache_bytes // 4)
        catalog = getattr(ctx, "catalog", None)
        self.rewrites = Rewrites()  # chunk keys being rewritten through this daemon
        if catalog is not None:
            catalog.rewrite_watchers.append(self)
            catalog.dataset_listeners.append(self.forget_datasets)

    def forget_chunks(self, keys: set[str]) -> None:
        """Chunks rewritten or deleted: what was made from their old bytes must not be served.

        That includes productions under way (they may have fetched the old bytes): later
        requests start their own instead of waiting for one, and its result is not cached.
        Under the lock ``produced`` caches under, so no old result lands after the discard."""
        self._forget_where(lambda k: _made_from(k) in keys)

    def rewriting(self, keys: set[str]) -> None:
        """Chunks are about to be rewritten (see ``Catalog.rewriting``): what was made from
        them goes, and nothing made from them is kept until :meth:`rewritten`. A gzip
        trailer kept from the old bytes would otherwise close the new body of a chunk of the
        same size (its layout cannot tell them apart): a reader got a member failing its
        CRC check, and zarr-python wrote that back as an untouched chunk of its shard."""
        epoch = self.rewrites.begin(keys)
        recent = _recent(self.ctx)
        if recent is not None:  # the versions kept for these keys end here (read as of before)
            recent.ended(keys, epoch)
        self.forget_chunks(keys)

    def rewritten(self, keys: set[str]) -> None:
        """The rewrite is over. Nothing made meanwhile was kept; what is still being made
        (maybe from the old bytes) is not kept either, and later reads do not wait for it."""
        with self._inflight_lock:
            self.rewrites.end(keys)
            for k in [k for k in self._inflight if _made_from(k) in keys]:
                self._overtaken.add(self._inflight.pop(k))

    def forget_datasets(self, prefixes: set[str]) -> None:
        """Datasets (by key prefix) whose chunks another host may have rewritten: what was made
        from their chunks goes, as for :meth:`forget_chunks` (on a shared store, at most once
        per ``domain_ttl`` for the domains in use)."""
        starts = tuple(prefixes)
        self._forget_where(lambda k: isinstance(k, tuple) and len(k) > 1 and isinstance(k[1], str)
                           and k[1].startswith(starts))

    def _forget_where(self, made_from: Callable[[Hashable], bool]) -> None:
        with self._inflight_lock:
            for k in [k for k in self._inflight if made_from(k)]:
                self._overtaken.add(self._inflight.pop(k))
            self.cache.discard_where(made_from)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._ahead_pool.shutdown(wait=False, cancel_futures=True)
        self._fetch_ahead_pool.shutdown(wait=False, cancel_futures=True)

    # -- readahead of produced bytes -------------------------------------------
    def _read_ahead(self, vfile: VFile, offset: int, size: int) -> None:
        """After a read that continues the previous one, have the producers of the
        next ``readahead`` bytes run in the background (each once: the in-flight
        table and the cache dedupe them). Random readers never trigger it."""
        if self.readahead <= 0:
            return
        end = offset + size
        with self._ahead_lock:
            state = self._ahead.get(vfile)
            if state is None:
                self._ahead[vfile] = [end, end]
                return
            # near the furthest point read so far: one reader going forward, or several
            # threads of one reader with their reads in flight out of order
            sequential = abs(offset - state[0]) <= self.readahead // 4
            state[0] = max(state[0], end) if sequential else end
            if not sequential or state[1] >= end + self.readahead // 2 or end >= vfile.size:
                return
            start = max(state[1], end)
            state[1] = end + self.readahead
        for p in vfile.plan(start, end + self.readahead - start):
            if isinstance(p, ProducedPiece) and self.cache.get(p.producer.cache_key) is None:
                self._ahead_pool.submit(self._produce_quietly, p.producer)
            elif isinstance(p, RangePiece) and self.store.concurrent_fetches \
                    and 0 < p.object_size <= AHEAD_OBJECT_MAX:
                # object stores: each read is a round trip, so the objects a sequential
                # reader reaches next are fetched whole, many at once: into the store's
                # local cache where it has one, else held here until read
                if self.store.caches_locally:
                    if self._prefetched.get(p.key) is None:
                        self._prefetched.put(p.key, b"-")
                        self._fetch_ahead_pool.submit(self._prefetch_quietly, p.key, p.object_size)
                    continue
                fetch = _ObjectFetch(self, p.key, p.object_size)
                if self.cache.get(fetch.cache_key) is None:
                    claimed = self._claim(fetch.cache_key)  # in flight from now: a read waits for it
                    if claimed is not None:
                        self._fetch_ahead_pool.submit(self._produce_quietly, fetch, claimed)

    def _prefetch_quietly(self, key: str, size: int) -> None:
        try:
            self.store.prefetch(key, size)
        except Exception as exc:  # noqa: BLE001 - the reader that needs it reports it
            log.debug("prefetch of %s failed: %s", key, exc)

    def _produce_quietly(self, producer: Any, claimed: Future | None = None) -> None:
        try:
            self.produced(producer, claimed)
        except Exception as exc:  # noqa: BLE001 - the reader that needs it reports it
            log.debug("readahead of %s failed: %s", producer.cache_key, exc)

    # -- producing ---------------------------------------------------------
    def _claim(self, key: Hashable) -> Future | None:
        """Make ``key`` in flight now (a future readers wait for); None if it already is."""
        with self._inflight_lock:
            if key in self._inflight:
                return None
            fut: Future = Future()
            self._inflight[key] = fut
            return fut

    def produced(self, producer: Any, claimed: Future | None = None) -> bytes:
        """The producer's bytes, from the cache or made once (``claimed``: the caller
        registered it in flight already, see :meth:`_claim`)."""
        key = producer.cache_key
        fut = claimed
        if fut is None:
            data = self.cache.get(key)
            if data is not None:
                return data
            with self._inflight_lock:
                fut = self._inflight.get(key)
                owner = fut is None
                if owner:
                    fut = Future()
                    self._inflight[key] = fut
            if not owner:
                return fut.result()
        try:
            data = producer.produce(self.ctx)
            if len(data) != producer.length:
                raise ChunkMissing(f"produced {len(data)} bytes for {key}, planned {producer.length}")
            with self._inflight_lock:
                # else made from bytes a rewrite replaced, or is replacing
                if fut not in self._overtaken and not self.rewrites.busy(_made_from(key)):
                    self.cache.put(key, data)
            fut.set_result(data)
            return data
        except BaseException as exc:
            fut.set_exception(exc)
            raise
        finally:
            with self._inflight_lock:
                self._overtaken.discard(fut)
                if self._inflight.get(key) is fut:
                    del self._inflight[key]

    # -- reading -----------------------------------------------------------
    def _fetched_ahead(self, p: RangePiece) -> bytes | None:
        """``p``'s bytes from a whole object fetched ahead (cached, or still arriving:
        then waited for rather than asked for twice); None if there is none."""
        if p.object_size <= 0:
            return None
        key = _ObjectFetch.key_of(p.key, p.object_size)
        data = self.cache.get(key)
        if data is not None and time.monotonic() - self._ahead_at.get(key, 0.0) > AHEAD_LIFE:
            self.cache.discard(key)
            data = None
        if data is None:
            with self._inflight_lock:
                fut = self._inflight.get(key)
            if fut is None:
                return None
            try:
                data = fut.result()
            except Exception:  # noqa: BLE001 - the read asks the store itself, and reports
                return None
        if p.start + p.length >= len(data):  # read to its end: a sequential reader is done with it
            self.cache.discard(key)
        return data[p.start:p.start + p.length]

    def _fetch(self, key: str, start: int, length: int, expect_size: int = -1) -> bytes | bytearray:
        """``[start, start+length)`` of a stored object; with ``expect_size`` (its size when the
        file was laid out) checked as :meth:`_fill_range` does: a version replaced since is
        served from the ones the write side kept, else EIO, never bytes of another layout."""
        if expect_size >= 0:
            buf = bytearray(length)
            self._fill_range(RangePiece(key, start, length, expect_size), memoryview(buf))
            return buf  # read into once, not copied again
        try:
            data = self.store.get_range(key, start, length)
        except NotFound:
            log.error("chunk object vanished from the store: %s", key)
            raise ChunkMissing(f"stored object {key} is missing") from None
        if len(data) != length:
            log.error("stored object %s is shorter than listed (wanted %d bytes at %d, got %d)",
                      key, length, start, len(data))
            raise ChunkMissing(f"stored object {key} changed size")
        return data

    def _fill_range(self, p: RangePiece, dest: memoryview) -> None:
        try:
            n = self.store.read_into(p.key, p.start, dest, p.object_size)
        except ChunkChanged as exc:
            held = kept_version(self.ctx, p.key, p.object_size)
            if held is not None and p.start + p.length <= len(held):  # replaced here since the open
                dest[:p.length] = held[p.start:p.start + p.length]
                return
            log.error("%s: the file was laid out from an older listing; it is re-planned on its next open", exc)
            changed = getattr(getattr(self.ctx, "catalog", None), "chunk_changed", None)
            if changed is not None:
                changed(p.key)
            raise
        except NotFound:
            held = kept_version(self.ctx, p.key, p.object_size)
            if held is not None and p.start + p.length <= len(held):  # deleted here since the open
                dest[:p.length] = held[p.start:p.start + p.length]
                return
            log.error("chunk object vanished from the store: %s", p.key)
            raise ChunkMissing(f"stored object {p.key} is missing") from None
        if n != p.length:
            log.error("stored object %s is shorter than listed (wanted %d bytes at %d, got %d)",
                      p.key, p.length, p.start, n)
            raise ChunkMissing(f"stored object {p.key} changed size")

    def _fetch_coalesced(self, pieces: list[Piece]) -> dict[str, list[tuple[int, bytes]]]:
        """Object stores: each object's ranges merged into one request, objects in parallel."""
        fetched: dict[str, list[tuple[int, bytes]]] = {}
        fetches = coalesce(pieces)
        sizes = {p.key: p.object_size for p in pieces if isinstance(p, RangePiece)}
        if len(fetches) == 1:
            k, s, n = fetches[0]
            fetched[k] = [(s, self._fetch(k, s, n, sizes.get(k, -1)))]
        elif fetches:
            futs = [(k, s, self._pool.submit(self._fetch, k, s, n, sizes.get(k, -1))) for k, s, n in fetches]
            for k, s, f in futs:
                fetched.setdefault(k, []).append((s, f.result()))
        return fetched

    def _assemble(self, pieces: list[Piece], nowait: bool, as_of: int | None = None) -> bytearray | None:
        """The pieces in one buffer, each chunk in it from one version (see ``rewrites``):
        a read of chunks being rewritten waits for the rewrite, one that overlapped a
        rewrite of its chunks is made again. With ``nowait`` it does neither (None)."""
        gate = self.rewrites
        keys: list[object] = []
        out = None
        for _ in range(ASSEMBLE_TRIES):
            if gate.under_way():
                keys = keys or _chunk_keys(pieces)
                if gate.any_busy(keys):
                    if nowait:
                        return None
                    gate.wait_quiet(keys)
            since = gate.epoch
            out = self._assemble_once(pieces, nowait, as_of)
            if out is None or gate.still(since):
                return out
            keys = keys or _chunk_keys(pieces)
            if not gate.overlapped(keys, since):
                return out
            if nowait:
                return None
        return out

    def _assemble_once(self, pieces: list[Piece], nowait: bool, as_of: int | None = None) -> bytearray | None:
        """The pieces in one buffer (pyfuse3 replies from any buffer).

        Local stores read each range straight into its place (``preadv``): no
        extra copy. With ``nowait`` nothing may block: produced bytes must be
        cached and stored ranges in the page cache, else None. ``as_of``: the
        epoch the file was opened at (chunks rewritten since are read as they were).
        """
        pins = self._pins(pieces, as_of)
        if pins and nowait:
            return None
        total = 0
        for p in pieces:
            if nowait and isinstance(p, ProducedPiece) and self.cache.get(p.producer.cache_key) is None:
                return None
            total += len(p.data) if isinstance(p, LiteralPiece) else p.length
        fetched = self._fetch_coalesced(pieces) if self.store.concurrent_fetches and not nowait else {}
        out = bytearray(total)
        view = memoryview(out)
        pos = 0
        for p in pieces:
            if isinstance(p, LiteralPiece):
                n = len(p.data)
                view[pos:pos + n] = p.data
            elif isinstance(p, RangePiece):
                n = p.length
                pinned = pins.get(p.key) if pins else None
                if pinned is not None and p.object_size in (-1, len(pinned)) and p.start + n <= len(pinned):
                    view[pos:pos + n] = memoryview(pinned)[p.start:p.start + n]
                elif nowait:
                    try:
                        got = self.store.read_into_nowait(p.key, p.start, view[pos:pos + n], p.object_size)
                    except (ChunkChanged, ChunkMissing, NotFound):
                        return None  # the threaded path reports (and logs) it properly
                    if got != n:
                        return None
                elif self.store.concurrent_fetches and (ahead := self._fetched_ahead(p)) is not None:
                    view[pos:pos + n] = ahead
                elif p.key in fetched:
                    for s, data in fetched[p.key]:
                        if s <= p.start and p.start + n <= s + len(data):
                            view[pos:pos + n] = memoryview(data)[p.start - s:p.start - s + n]
                            break
                else:
                    self._fill_range(p, view[pos:pos + n])
            else:
                assert isinstance(p, ProducedPiece)
                n = p.length
                made_from = _made_from(p.producer.cache_key)
                if pins and made_from in pins:
                    data = self._produce_pinned(p.producer, made_from, pins[made_from])  # type: ignore[arg-type]
                else:
                    data = self.cache.get(p.producer.cache_key) if nowait else self.produced(p.producer)
                if data is None:
                    return None
                view[pos:pos + n] = memoryview(data)[p.start:p.start + n]
            pos += n
        return out

    def _pins(self, pieces: list[Piece], as_of: int | None) -> dict[str, bytes]:
        """The chunks of ``pieces`` this daemon rewrote since epoch ``as_of``, as they were
        then (kept versions still held): a file open since reads them so, whatever their
        size. A chunk read in several requests was else half old, half new when a rewrite
        kept its size (uncompressed chunks), where a disk's descriptor reads the old file."""
        if as_of is None or as_of >= self.rewrites.epoch:
            return {}
        recent = _recent(self.ctx)
        if recent is None:
            return {}
        pins: dict[str, bytes] = {}
        for k in set(_chunk_keys(pieces)):
            if isinstance(k, str) and (held := recent.as_of(k, as_of)) is not None:
                pins[k] = held
        return pins

    def _produce_pinned(self, producer: Any, key: str, data: bytes) -> bytes:
        """What ``producer`` makes from version ``data`` of ``key`` (not cached: the cache
        holds what is made from the store's versions). A layout planned after the rewrite
        (opened while it landed) has the new version's size: that one is made, as stored."""
        try:
            out = producer.produce(_PinnedContext(self.ctx, key, data))
        except ChunkChanged:
            return self.produced(producer)
        if len(out) != producer.length:
            raise ChunkMissing(f"produced {len(out)} bytes for {producer.cache_key}, planned {producer.length}")
        return out

    def execute(self, pieces: list[Piece], as_of: int | None = None) -> bytearray:
        out = self._assemble(pieces, nowait=False, as_of=as_of)
        assert out is not None
        return out

    def read_nowait(self, vfile: VFile, offset: int, size: int,
                    as_of: int | None = None) -> bytearray | list[Piece]:
        """The read, if it can be served without blocking (literal bytes, cached
        produced bytes, stored ranges already in the page cache); else its plan, which
        the caller hands to :meth:`read` in a worker thread (planned once per request).
        ``as_of``: the epoch the file was opened at (see :meth:`_pins`)."""
        pieces = vfile.plan(offset, size)
        out = self._assemble(pieces, nowait=True, as_of=as_of)
        if out is None:
            return pieces
        self._read_ahead(vfile, offset, size)
        return out

    def read(self, vfile: VFile, offset: int, size: int, pieces: list[Piece] | None = None,
             as_of: int | None = None) -> bytes | bytearray:
        """Bytes ``[offset, offset+size)`` of a virtual file (short only at its end);
        ``pieces``: its plan when the caller has it already (:meth:`read_nowait`);
        ``as_of``: the epoch the file was opened at (see :meth:`_pins`)."""
        if pieces is None:
            pieces = vfile.plan(offset, size)
        self._read_ahead(vfile, offset, size)
        if len(pieces) == 1 and isinstance(pieces[0], RangePiece) and self.store.concurrent_fetches \
                and (as_of is None or as_of >= self.rewrites.epoch):
            p = pieces[0]
            ahead = self._fetched_ahead(p)
            return ahead if ahead is not None else self._fetch(p.key, p.start, p.length, p.object_size)
        return self.execute(pieces, as_of)


def _recent(ctx: Any) -> Any:
    """The write side's kept versions (``store/recent.py``), if the context has a catalog."""
    return getattr(getattr(ctx, "catalog", None), "recent", None)


class _PinnedStore:
    """A store that reads one object as a given version (a file open since before it was
    rewritten) and everything else as the store it wraps."""

    def __init__(self, inner: Any, key: str, data: bytes) -> None:
        self._inner, self._key, self._data = inner, key, data

    def get(self, key: str) -> bytes:
        return self._data if key == self._key else self._inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._data[start:start + length] if key == self._key else self._inner.get_range(key, start, length)

    def read_into(self, key: str, start: int, buf: memoryview, expect_size: int = -1) -> int:
        if key != self._key:
            return self._inner.read_into(key, start, buf, expect_size)
        if expect_size >= 0 and expect_size != len(self._data):
            raise ChunkChanged(f"chunk {key}: the version read is {len(self._data)} bytes, planned {expect_size}")
        part = self._data[start:start + len(buf)]
        buf[:len(part)] = part
        return len(part)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _PinnedContext:
    """A producer's context whose store reads one chunk as a pinned version."""

    def __init__(self, ctx: Any, key: str, data: bytes) -> None:
        self._ctx = ctx
        self.store = _PinnedStore(ctx.store, key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _made_from(key: Hashable) -> object:
    """The chunk key a production's cache key names (its second member), or None."""
    return key[1] if isinstance(key, tuple) and len(key) > 1 else None


def _chunk_keys(pieces: list[Piece]) -> list[object]:
    """The stored objects the pieces of one read come from."""
    out: list[object] = []
    for p in pieces:
        if isinstance(p, RangePiece):
            out.append(p.key)
        elif isinstance(p, ProducedPiece):
            out.append(_made_from(p.producer.cache_key))
    return out


class _ObjectFetch:
    """A whole stored object fetched ahead of a sequential reader (object stores), made
    once through :meth:`Reader.produced` and cached beside produced bytes; a rewrite of
    the object drops it (``forget_chunks``), a size change never matches it."""

    def __init__(self, reader: Reader, key: str, size: int) -> None:
        self.reader, self.key, self.length = reader, key, size
        self.cache_key = self.key_of(key, size)

    @staticmethod
    def key_of(key: str, size: int) -> tuple[str, str, int]:
        return ("object", key, size)

    def produce(self, ctx: Any) -> bytes:
        data = self.reader._fetch(self.key, 0, self.length, self.length)
        now = time.monotonic()
        at = self.reader._ahead_at
        if len(at) > 4096:  # forget the times of entries too old to serve anyway
            for k in [k for k, t in list(at.items()) if now - t > AHEAD_LIFE]:
                at.pop(k, None)
        at[self.cache_key] = now
        return data
