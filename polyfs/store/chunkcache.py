"""A local disk cache of a remote store's chunk objects.

Why: each object store request costs milliseconds and the network gives a
fraction of local disk bandwidth, so a chunk read a second time should be a
local read. Only chunk objects (``db/<uuid1>/d/<uuid2>/<i>_<j>``, see
``model/keys.py``) are kept: they are most of the bytes, and they are what
every view reads. Metadata JSON, listings and polyfs's derived data always go
to the store, so every host sees one tree.

Validation. Each entry holds the object's version tag (its ETag; size and
mtime where a store has no ETags) and the time it was last checked. An entry
checked less than ``ttl`` (the mount's ``domain_ttl``) ago is served with no
request; an older one costs one conditional request (S3: GET with
If-None-Match, answered 304 or with the new bytes; elsewhere a HEAD), so a
chunk another host rewrote is seen within ``ttl``, the bound a new domain has.
When many chunks of one dataset are cached, the first stale one revalidates
them all with one listing of the dataset (a request per 1000 objects, each
with its ETag) instead: a second read of a large dataset minutes later costs a
few requests, not one per chunk. This daemon's own writes and deletes update
or drop the entry at once.

Files. ``<dir>/<hh>/<blake2b(key)>.<blake2b(tag)>`` is a header (magic, data
size, CRC32 of the data, tag, key) and then the object's bytes. A file is
written under ``tmp/`` and renamed into place, so a crash leaves no file or a
whole one; a file whose size disagrees with its header, whose key is another
one or whose CRC fails (checked once per process, at its first use after the
start: power loss can leave a renamed file without its data) is deleted, never
served. A new version of an object is a new file name, so a reader holding an
entry never reads another version's bytes. The file's mtime is its last
validation: after a restart the index is rebuilt by one scan, in LRU order by
mtime, and entries checked less than ``ttl`` ago are still served without a
request. ``<dir>/lock`` (flock) gives each running daemon its own directory.
A disk that fills up before the bound (shared with others: ENOSPC, EDQUOT) lowers the
bound to what it holds, least recently used out first, said in one log line; any other
failure to write a file is said once too, and those chunks are served from the store.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import itertools
import logging
import os
import re
import struct
import threading
import time
import zlib
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar, Union, cast

from ..errors import ChunkChanged, NotFound, PolyfsError, StoreError
from ..model.keys import is_chunk_key
from .base import Listing, ObjectInfo, Store
from .chunkversions import Buffer, Fetched, Versions, versions_for

log = logging.getLogger(__name__)

T = TypeVar("T")

_MAGIC = b"PFCC"
_VERSION = 1
# magic, version, header length, data size, CRC32 of the data, tag length, key length
_HEAD = struct.Struct("<4sB3xIQIHH")
_BLOCK = 4096  # a file takes whole blocks on disk: that is what the bound counts
_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
_NAME_RE = re.compile(r"^([0-9a-f]{32})\.([0-9a-f]{12})$")
_FORGET_AFTER = 4096  # remembered recent writes (see _note_write) before they are folded into one floor
LIST_MIN = 32  # cached chunks of one dataset before one listing revalidates them all
PAGE = 1000  # objects per listing request (S3's page)


def default_cache_root() -> Path:
    """``/var/cache/polyfs`` for root, else ``$XDG_CACHE_HOME/polyfs`` (``~/.cache/polyfs``)."""
    if os.geteuid() == 0:
        return Path("/var/cache/polyfs")
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "polyfs" if xdg else Path.home() / ".cache" / "polyfs"


def store_dir_name(url: str) -> str:
    """A readable, unique directory name for one store URL."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", url).strip("_")[:60] or "store"
    return f"{slug}-{hashlib.blake2b(url.encode(), digest_size=6).hexdigest()}"


def _key_hash(key: str) -> str:
    return hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()


def _file_name(key_hash: str, tag: str) -> str:
    return f"{key_hash}.{hashlib.blake2b(tag.encode(), digest_size=6).hexdigest()}"


def _disk(nbytes: int) -> int:
    return -(-max(nbytes, 1) // _BLOCK) * _BLOCK


def _prefix_of(key: str) -> str:
    """The dataset prefix of a chunk key (``db/<uuid1>/d/<uuid2>/``)."""
    return key[:key.rindex("/") + 1]


# -- the index ------------------------------------------------------------------------
@dataclass(slots=True)
class _Entry:
    name: str  # file name, under <dir>/<name[:2]>/
    key: str | None  # None until the file's header was read (entries found by the start-up scan)
    tag: str | None
    size: int  # the object's bytes (the file's size until verified)
    offset: int  # where they start in the file
    disk: int  # bytes counted against the bound
    checked: float  # clock() of the last validation against the store


@dataclass
class CacheStats:
    hits: int = 0  # served from a file without a request
    misses: int = 0  # fetched whole from the store
    revalidated: int = 0  # conditional requests that found the entry current
    refreshed: int = 0  # conditional requests that brought a new version
    evicted: int = 0
    corrupt: int = 0  # files found broken and deleted
    uncached: int = 0  # objects served without being kept (too large, untagged, raced)
    listings: int = 0  # dataset listings that revalidated many entries at once


_Got = Union[_Entry, Buffer]


def _claim_dir(root: Path, url: str) -> tuple[Path, int]:
    """This store's directory under ``root``, locked for this process; a daemon of the
    same store already running there makes us take ``<name>.1``, ``.2``..."""
    base = root / store_dir_name(url)
    for i in range(64):
        d = base if i == 0 else base.with_name(f"{base.name}.{i}")
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return d, fd
        except BlockingIOError:
            os.close(fd)
    raise StoreError(f"no free chunk cache directory under {root} for {url}")


class ChunkCacheStore(Store):
    """``inner`` with its chunk objects kept on local disk (module docstring)."""

    def __init__(self, inner: Store, cache_dir: str | os.PathLike[str] | None = None,
                 cache_bytes: int = 10 << 30, ttl: float = 5.0, versions: Versions | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = inner
        self.url = inner.url
        self.read_only = inner.read_only
        self.concurrent_fetches = inner.concurrent_fetches  # misses are round trips
        self.ttl = ttl
        self.capacity = cache_bytes
        self.max_object = cache_bytes // 4  # larger objects pass through (would flush the cache)
        self.stats = CacheStats()
        self._versions = versions if versions is not None else versions_for(inner)
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # key hash -> entry, oldest first
        self._used = 0
        self._inflight: dict[str, Future[object]] = {}
        self._prefixes: dict[str, set[str]] = {}  # dataset prefix -> key hashes of its complete entries
        self._listed: dict[str, tuple[float, int]] = {}  # dataset prefix -> (clock, objects) of its last listing
        self._epoch = 0  # counts writes; a fetch notes it to tell whether a write overtook it
        self._written: dict[str, int] = {}  # key -> epoch of its last write through us
        self._floor = 0  # fetches started before this epoch are presumed overtaken
        self._seq = itertools.count()
        self.dir, self._lock_fd = _claim_dir(Path(cache_dir) if cache_dir else default_cache_root(), inner.url)
        self._root = str(self.dir)
        self._tmp = self.dir / "tmp"
        self._tmp.mkdir(exist_ok=True)
        self._big: OrderedDict[str, None] = OrderedDict()  # keys found larger than max_object
        self._shrunk = False  # the bound was lowered to what a full disk holds (_disk_full)
        self._troubled: set[tuple[str, int | None]] = set()  # failures already logged (_trouble)
        self._load()
        # Store methods this class does not define (added to the interface later) must
        # reach the backend, not run the base class's generic versions over this wrapper.
        for name, attr in vars(Store).items():
            if callable(attr) and not name.startswith("_") and name not in vars(ChunkCacheStore):
                setattr(self, name, getattr(inner, name))

    # -- everything that is not a chunk read or write is the inner store's ------------
    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def list_dir(self, prefix: str = "") -> Listing:
        return self.inner.list_dir(prefix)

    def __getattr__(self, name: str) -> object:
        # Backend-specific extras (conditional metadata writes...) reach the inner store.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    # -- reads ---------------------------------------------------------------------
    caches_locally = True

    def prefetch(self, key: str, size: int = -1) -> None:
        """Fetch (or revalidate) a chunk into the cache ahead of a sequential reader:
        concurrent asks share one request, a current entry costs nothing."""
        if not self._bypass(key, size):
            self._obtain(key, size)

    def _bypass(self, key: str, expect_size: int = -1) -> bool:
        """Not for the cache: no chunk, or an object too large to keep (read in ranges)."""
        return not is_chunk_key(key) or expect_size > self.max_object or (bool(self._big) and key in self._big)

    def _note_big(self, key: str) -> None:
        with self._lock:
            self._big[key] = None
            if len(self._big) > _FORGET_AFTER:
                self._big.popitem(last=False)

    def get(self, key: str) -> bytes:
        if self._bypass(key):
            return self.inner.get(key)
        return self._serve(key, -1, lambda fd, e: self._pread(fd, e, 0, e.size), bytes)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if self._bypass(key):
            return self.inner.get_range(key, start, length)
        if start < 0 or length < 0:
            raise ValueError("negative range")
        if length == 0:
            return b""
        return self._serve(key, -1, lambda fd, e: self._pread(fd, e, start, length),
                           lambda d: bytes(memoryview(d)[start:start + length]))

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        if self._bypass(key):
            return self.inner.get_ranges(key, ranges)
        if all(n == 0 for _, n in ranges):
            return [b"" for _ in ranges]
        return self._serve(key, -1, lambda fd, e: [self._pread(fd, e, s, n) if n else b"" for s, n in ranges],
                           lambda d: [bytes(memoryview(d)[s:s + n]) for s, n in ranges])

    def read_into(self, key: str, start: int, buf: memoryview, expect_size: int = -1) -> int:
        if self._bypass(key, expect_size):
            return self.inner.read_into(key, start, buf, expect_size)

        def from_data(d: Buffer) -> int:
            n = max(0, min(len(buf), len(d) - start))
            buf[:n] = memoryview(d)[start:start + n]
            return n

        return self._serve(key, expect_size, lambda fd, e: self._preadv(fd, e, start, buf, 0), from_data)

    def read_into_nowait(self, key: str, start: int, buf: memoryview, expect_size: int = -1) -> int | None:
        """From a current cache file already in the page cache (``RWF_NOWAIT``), else None:
        the FUSE loop answers such reads itself, as it does for a local store."""
        if self._bypass(key, expect_size):
            return self.inner.read_into_nowait(key, start, buf, expect_size)
        if not _NOWAIT:
            return None
        kh = _key_hash(key)
        with self._lock:
            e = self._entries.get(kh)
            if e is None or e.key is None or self._clock() - e.checked >= self.ttl \
                    or (expect_size >= 0 and e.size != expect_size):
                return None
            self._entries.move_to_end(kh)
        try:
            fd = os.open(self._path(e.name), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            n = self._preadv(fd, e, start, buf, _NOWAIT)
        except OSError:
            return None  # would block, or the threaded path reports it
        finally:
            os.close(fd)
        self.stats.hits += 1
        return n

    # -- writes (write-through) -------------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        if not is_chunk_key(key):
            self.inner.put(key, data)
            return
        epoch = self._note_write(key)
        self.inner.put(key, data)
        self._keep_written(key, data, epoch)

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        epochs = {key: self._note_write(key) for key, _ in items if is_chunk_key(key)}
        self.inner.put_many(items)
        for key, data in items:
            if key in epochs:
                self._keep_written(key, data, epochs[key])

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Conditional writes are for metadata; should one name a chunk, its entry goes."""
        if is_chunk_key(key):
            self._note_write(key)
        return self.inner.put_if(key, data, tag)

    def delete(self, key: str) -> None:
        if is_chunk_key(key):
            self._note_write(key)
        self.inner.delete(key)

    def delete_many(self, keys: Sequence[str]) -> None:
        """Several deletes (S3: a request per 1000); each chunk's entry goes first."""
        for key in keys:
            if is_chunk_key(key):
                self._note_write(key)
        many = getattr(self.inner, "delete_many", None)
        if many is not None:
            many(keys)
        else:
            for key in keys:
                self.inner.delete(key)

    def delete_prefix(self, prefix: str) -> int:
        n = self.inner.delete_prefix(prefix)
        with self._lock:
            self._epoch += 1
            self._floor = self._epoch  # a fetch under way may have read a deleted object
            for kh, e in list(self._entries.items()):
                if e.key is not None and e.key.startswith(prefix):
                    self._remove(kh)
        return n

    def _note_write(self, key: str) -> int:
        """A write of ``key`` begins: drop its entry, and keep fetches that started
        before from filing the old bytes after it. Returns the write's epoch."""
        with self._lock:
            self._epoch += 1
            self._written[key] = self._epoch
            if len(self._written) > _FORGET_AFTER:
                self._written.clear()
                self._floor = self._epoch
            self._remove(_key_hash(key))
            return self._epoch

    def _overtaken(self, key: str, epoch: int) -> bool:
        """(lock held) Whether a write of ``key`` began after a fetch noted ``epoch``."""
        return epoch < self._floor or self._written.get(key, -1) > epoch

    def _keep_written(self, key: str, data: Buffer, epoch: int) -> None:
        if len(data) > self.max_object:
            return
        try:
            tag = self._versions.tag_of_put(key, data)
        except PolyfsError as exc:
            log.debug("chunk cache: no tag for %s after writing it: %s", key, exc)
            return
        if tag is not None:
            self._install(key, tag, data, self._clock(), epoch)

    # -- the read path -------------------------------------------------------------
    def _serve(self, key: str, expect_size: int, from_file: Callable[[int, _Entry], T],
               from_data: Callable[[Buffer], T]) -> T:
        """``from_file`` on a current entry's open file, else ``from_data`` on the
        fetched object. A file that vanished or broke is dropped and the read retried."""
        for _ in range(3):
            got = self._obtain(key, expect_size)
            if not isinstance(got, _Entry):
                return from_data(got)
            try:
                fd = os.open(self._path(got.name), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._forget(got)
                continue
            try:
                if os.fstat(fd).st_size != got.offset + got.size:
                    raise OSError(errno.EIO, "cache file changed size")
                return from_file(fd, got)
            except OSError as exc:
                log.warning("chunk cache: %s: %s; dropped", self._path(got.name), exc.strerror or exc)
                self.stats.corrupt += 1
                self._forget(got)
            finally:
                os.close(fd)
        return from_data(self._checked(key, self._once(_key_hash(key), lambda: self._fetch(key)), expect_size))

    def _obtain(self, key: str, expect_size: int) -> _Got:
        """A current entry, or the object's bytes just fetched (and filed)."""
        kh = _key_hash(key)
        with self._lock:
            e = self._entries.get(kh)
            if e is not None:
                self._entries.move_to_end(kh)
        if e is not None and e.key is None:
            e = self._verify(kh, e, key)
        if e is not None and self._clock() - e.checked >= self.ttl and self._revalidate_by_listing(key):
            with self._lock:
                e = self._entries.get(kh)
        if e is None:
            return self._checked(key, self._once(kh, lambda: self._fetch(key)), expect_size)
        if self._clock() - e.checked < self.ttl and (expect_size < 0 or e.size == expect_size):
            self.stats.hits += 1
            return e
        entry = e
        return self._checked(key, self._once(kh, lambda: self._revalidate(key, entry)), expect_size)

    def _revalidate_by_listing(self, key: str) -> bool:
        """Revalidate every cached chunk of ``key``'s dataset with one listing (a request
        per 1000 objects, each with its ETag), when that is cheaper than a conditional
        request per cached chunk and the dataset was not listed within ``ttl``. Entries
        whose tag matches become current; entries of objects no longer listed are
        dropped; changed ones are left to their own conditional request."""
        prefix = _prefix_of(key)
        with self._lock:
            at, listed = self._listed.get(prefix, (float("-inf"), 0))
            cached = len(self._prefixes.get(prefix, ()))
            if self._clock() - at < self.ttl or cached < max(LIST_MIN, 4 * -(-listed // PAGE)):
                return False
        self._once("list:" + prefix, lambda: self._list_prefix(prefix))
        return True

    def _list_prefix(self, prefix: str) -> None:
        started = self._clock()
        try:
            infos = [o for o in self.inner.list(prefix) if "/" not in o.key[len(prefix):]]
        except PolyfsError as exc:
            log.info("chunk cache: listing %s to revalidate failed (%s); one request per chunk instead", prefix, exc)
            with self._lock:
                self._listed[prefix] = (started, 0)
            return
        tags = {_key_hash(o.key): self._versions.tag_of(o) for o in infos if is_chunk_key(o.key)}
        current: list[str] = []
        with self._lock:
            self._listed[prefix] = (started, len(infos))
            for kh in list(self._prefixes.get(prefix, ())):
                e = self._entries[kh]
                if e.checked >= started:
                    continue
                if kh not in tags:
                    self._remove(kh)  # deleted by another host
                elif tags[kh] is not None and tags[kh] == e.tag:
                    e.checked = started
                    current.append(e.name)
        self.stats.listings += 1
        for name in current:
            try:
                os.utime(self._path(name))
            except OSError:
                pass

    @staticmethod
    def _checked(key: str, got: _Got, expect_size: int) -> _Got:
        """ChunkChanged when the store's object (just checked) is not the planned size."""
        size = got.size if isinstance(got, _Entry) else len(got)
        if expect_size >= 0 and size != expect_size:
            raise ChunkChanged(f"stored object {key} is {size} bytes, listed as {expect_size}")
        return got

    def _once(self, token: str, work: Callable[[], T]) -> T:
        """``work`` run once for all threads asking for the same ``token`` at the same time."""
        with self._lock:
            fut = self._inflight.get(token)
            owner = fut is None
            if fut is None:
                fut = self._inflight[token] = Future()
        if not owner:
            return cast(T, fut.result())
        try:
            got = work()
            fut.set_result(got)
            return got
        except BaseException as exc:
            fut.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._inflight.pop(token, None)

    def _fetch(self, key: str) -> Buffer:
        started, epoch = self._clock(), self._epoch
        got = self._versions.fetch(key)
        self.stats.misses += 1
        self._file_fetched(key, got, started, epoch)
        return got.data

    def _revalidate(self, key: str, e: _Entry) -> _Got:
        started, epoch = self._clock(), self._epoch
        assert e.tag is not None
        try:
            got = self._versions.fetch_if_changed(key, e.tag)
        except NotFound:
            self._forget(e)
            raise
        if got is None:
            self.stats.revalidated += 1
            with self._lock:
                e.checked = max(e.checked, started)
            try:
                os.utime(self._path(e.name))  # the file's mtime is its last validation
            except OSError:
                pass
            return e
        self.stats.refreshed += 1
        self._file_fetched(key, got, started, epoch)
        return got.data

    def _file_fetched(self, key: str, got: Fetched, checked: float, epoch: int) -> None:
        if got.tag is None or len(got.data) > self.max_object:
            self.stats.uncached += 1
            if got.tag is not None:
                self._note_big(key)
            with self._lock:
                self._remove(_key_hash(key))
            return
        self._install(key, got.tag, got.data, checked, epoch)

    # -- files -----------------------------------------------------------------------
    def _path(self, name: str) -> str:
        return f"{self._root}/{name[:2]}/{name}"

    @staticmethod
    def _pread(fd: int, e: _Entry, start: int, length: int) -> bytes:
        n = max(0, min(length, e.size - start))
        data = os.pread(fd, n, e.offset + start) if n else b""
        if len(data) != n:
            raise OSError(errno.EIO, "cache file is short")
        return data

    @staticmethod
    def _preadv(fd: int, e: _Entry, start: int, buf: memoryview, flags: int) -> int:
        n = max(0, min(len(buf), e.size - start))
        done = 0
        while done < n:
            got = os.preadv(fd, [buf[done:n]], e.offset + start + done, flags)
            if got == 0:
                raise OSError(errno.EIO, "cache file is short")
            done += got
        return n

    def _install(self, key: str, tag: str, data: Buffer, checked: float, epoch: int) -> None:
        """File ``data`` as ``key``'s version ``tag``: temp file, then rename under the lock
        (unless a write overtook the fetch); then evict down to the bound."""
        kh = _key_hash(key)
        name = _file_name(kh, tag)
        keyb, tagb = key.encode("utf-8", "surrogateescape"), tag.encode()
        hlen = _HEAD.size + len(tagb) + len(keyb)
        header = _HEAD.pack(_MAGIC, _VERSION, hlen, len(data), zlib.crc32(data), len(tagb), len(keyb)) + tagb + keyb
        disk = _disk(hlen + len(data))
        if disk > min(self.max_object, self.capacity):
            return
        tmp = f"{self._tmp}/{name}.{os.getpid()}.{next(self._seq)}"
        for attempt in range(2):
            try:
                _write_file(tmp, header, data)
                break
            except OSError as exc:
                _unlink(tmp)
                if attempt == 0 and exc.errno in (errno.ENOSPC, errno.EDQUOT) and self._disk_full(disk):
                    continue  # room made by evicting: one more try
                self._trouble("write", tmp, exc)
                self.stats.uncached += 1
                return
        with self._lock:
            if self._overtaken(key, epoch):
                _unlink(tmp)
                self.stats.uncached += 1
                return
            final = self._path(name)
            try:
                try:
                    os.rename(tmp, final)
                except FileNotFoundError:
                    os.makedirs(os.path.dirname(final), exist_ok=True)
                    os.rename(tmp, final)
            except OSError as exc:
                _unlink(tmp)
                self._trouble("file", final, exc)
                return
            self._troubled.clear()  # the disk takes files again: the next trouble is news
            old = self._index_pop(kh)
            if old is not None and old.name != name:
                _unlink(self._path(old.name))
            self._make_room(disk)
            self._index_put(kh, _Entry(name, key, tag, len(data), hlen, disk, checked))

    def _disk_full(self, need: int) -> bool:
        """The cache's disk refused a file (ENOSPC, EDQUOT): it holds less than the bound
        promised, shared with others. The cache keeps at most what it holds now from then
        on (until a restart), evicting the least recently used so ``need`` fits; without
        that, every later miss would fail the same way, log a line, and keep no recent
        chunk while the oldest stay. Returns whether room was made (worth another try)."""
        with self._lock:
            was, used = self.capacity, self._used
            if used < was:
                self.capacity = used
                if not self._shrunk:
                    log.warning("chunk cache: the disk of %s is full at %.1f MiB cached (the bound was %.1f MiB); "
                                "the cache keeps at most that much from now on", self.dir, used / 2**20, was / 2**20)
                else:
                    log.debug("chunk cache: disk full again; bound now %.1f MiB", used / 2**20)
                self._shrunk = True
            before = self.stats.evicted
            self._make_room(need)
            return self.stats.evicted > before

    def _trouble(self, what: str, path: str, exc: OSError) -> None:
        """One warning per kind of failure (``errno``) until a file is filed again: a cache
        disk that fails, fails for every chunk, and one line says it."""
        kind = (what, exc.errno)
        with self._lock:
            said = kind in self._troubled
            self._troubled.add(kind)
        if said:
            log.debug("chunk cache: cannot %s %s: %s", what, path, exc.strerror or exc)
            return
        log.warning("chunk cache: cannot %s %s: %s (chunks are served from the store meanwhile; said once)",
                    what, path, exc.strerror or exc)

    def _index_put(self, kh: str, e: _Entry) -> None:
        """(lock held) Add an entry as the most recently used."""
        self._entries[kh] = e
        self._used += e.disk
        if e.key is not None:
            self._prefixes.setdefault(_prefix_of(e.key), set()).add(kh)

    def _index_pop(self, kh: str) -> _Entry | None:
        """(lock held) Take an entry out of the index (its file stays)."""
        e = self._entries.pop(kh, None)
        if e is not None:
            self._used -= e.disk
            if e.key is not None:
                prefix = _prefix_of(e.key)
                members = self._prefixes.get(prefix)
                if members is not None:
                    members.discard(kh)
                    if not members:
                        del self._prefixes[prefix]
        return e

    def _make_room(self, need: int) -> None:
        """(lock held) Evict least recently used entries until ``need`` more bytes fit."""
        while self._entries and self._used + need > self.capacity:
            e = self._index_pop(next(iter(self._entries)))
            assert e is not None
            _unlink(self._path(e.name))
            self.stats.evicted += 1

    def _remove(self, kh: str) -> None:
        """(lock held) Drop an entry and its file."""
        e = self._index_pop(kh)
        if e is not None:
            _unlink(self._path(e.name))

    def _forget(self, e: _Entry) -> None:
        """Drop ``e`` if it is still the entry of its key (not a newer version)."""
        kh = e.name.split(".", 1)[0]
        with self._lock:
            if self._entries.get(kh) is e:
                self._remove(kh)

    def _verify(self, kh: str, e: _Entry, key: str) -> _Entry | None:
        """Read a file found by the start-up scan once: header, key, size and CRC must
        hold, else it is deleted. Returns the entry, complete, or None."""
        why = None
        try:
            with open(self._path(e.name), "rb") as f:
                blob = f.read()
        except OSError as exc:
            blob, why = b"", exc.strerror or str(exc)
        if why is None:
            why = _check_file(blob, key, e.name)
        if why is not None:
            log.warning("chunk cache: %s: %s; deleted", self._path(e.name), why)
            self.stats.corrupt += 1
            self._forget(e)
            return None
        _, _, hlen, size, _, tlen, _ = _HEAD.unpack_from(blob)
        with self._lock:
            cur = self._entries.get(kh)
            if cur is not e:  # replaced meanwhile: the newer entry, if it is complete
                return cur if cur is not None and cur.key is not None else None
            e.key, e.size, e.offset = key, size, hlen
            e.tag = blob[_HEAD.size:_HEAD.size + tlen].decode()
            self._prefixes.setdefault(_prefix_of(key), set()).add(kh)
        return e

    def _load(self) -> None:
        """Rebuild the index from the files (no file is read: see _verify), oldest first;
        clear temp files a crash left; evict down to the bound."""
        for entry in os.scandir(self._tmp):
            _unlink(entry.path)
        found: dict[str, tuple[float, str, int]] = {}
        for sub in os.scandir(self.dir):
            if not (sub.is_dir(follow_symlinks=False) and len(sub.name) == 2):
                continue
            for f in os.scandir(sub.path):
                m = _NAME_RE.match(f.name)
                try:
                    st = f.stat(follow_symlinks=False)
                except OSError:
                    continue
                if m is None or m.group(1)[:2] != sub.name or not f.is_file(follow_symlinks=False):
                    _unlink(f.path)
                    continue
                kh = m.group(1)
                prev = found.get(kh)
                if prev is not None:  # two versions (a crash between rename and unlink): keep the newer
                    older = f.name if prev[0] >= st.st_mtime else prev[1]
                    _unlink(f"{sub.path}/{older}")
                    if older == prev[1]:
                        found[kh] = (st.st_mtime, f.name, st.st_size)
                    continue
                found[kh] = (st.st_mtime, f.name, st.st_size)
        now, wall = self._clock(), time.time()
        for kh, (mtime, name, size) in sorted(found.items(), key=lambda item: item[1][0]):
            age = wall - mtime
            checked = now - age if age >= 0 else float("-inf")
            self._index_put(kh, _Entry(name, None, None, size, 0, _disk(size), checked))
        with self._lock:
            self._make_room(0)
        if self._entries:
            log.info("chunk cache %s: %d files, %.1f MiB", self.dir, len(self._entries), self._used / 2**20)

    # -- introspection -----------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def entry_count(self) -> int:
        return len(self._entries)


def _check_file(blob: bytes, key: str, name: str) -> str | None:
    """Why a cache file cannot be served for ``key`` (None: it can)."""
    if len(blob) < _HEAD.size:
        return "shorter than a header"
    magic, version, hlen, size, crc, tlen, klen = _HEAD.unpack_from(blob)
    if magic != _MAGIC or version != _VERSION or hlen != _HEAD.size + tlen + klen:
        return "not a cache file of this version"
    if len(blob) != hlen + size:
        return f"{len(blob)} bytes, header says {hlen + size} (partial write)"
    stored_key = blob[_HEAD.size + tlen:hlen].decode("utf-8", "surrogateescape")
    if stored_key != key:
        return f"holds {stored_key!r}, not {key!r}"
    tag = blob[_HEAD.size:_HEAD.size + tlen].decode(errors="replace")
    if _file_name(_key_hash(key), tag) != name:
        return "named for another version"
    if zlib.crc32(memoryview(blob)[hlen:]) != crc:
        return "CRC32 mismatch (data lost or damaged)"
    return None


def _write_file(path: str, header: bytes, data: Buffer) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, header)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: Buffer) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
