"""The object store interface every backend implements.

Methods are synchronous and thread-safe: the daemon calls them from worker
threads (``trio.to_thread.run_sync``), which is also the only way obstore's
sync API runs under trio. Keys are ``/``-separated, never start with ``/``.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple, Sequence

from ..errors import InvalidInput


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or a head tells about one object."""

    key: str
    size: int
    mtime: float = 0.0
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class Listing:
    """One level of a delimiter listing: sub-prefixes (ending in ``/``) and objects."""

    prefixes: tuple[str, ...]
    objects: tuple[ObjectInfo, ...]


FINE_TOKEN_WINDOW = 0.05  # fine timestamps (ns fields, a coarse kernel clock): a few ms between ticks
COARSE_TOKEN_WINDOW = 2.0  # whole-second timestamps (some network and FUSE filesystems; FAT: 2 s)


class DirToken(NamedTuple):
    """A directory's change detector (see :meth:`Store.dir_token`)."""

    token: str  # changes whenever an object in the directory is added, removed or renamed over
    mtime: float  # when it last changed (wall clock seconds, the filesystem's timestamp)
    window: float = FINE_TOKEN_WINDOW  # how long after a change a later one may leave ``token`` as it is


def check_key(key: str) -> str:
    """Reject keys that could escape the store or are malformed."""
    if not key or key.startswith("/") or key.endswith("/"):
        raise InvalidInput(f"invalid store key {key!r}")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidInput(f"invalid store key {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: empty (everything) or a key prefix."""
    if prefix.startswith("/") or ".." in prefix.split("/"):
        raise InvalidInput(f"invalid store prefix {prefix!r}")
    return prefix


def child_records(prefix: str, objects: Iterable[ObjectInfo]) -> bytes:
    """``<size>_<name>\\0`` for each direct child of ``prefix`` among ``objects`` (the
    records of :meth:`Store.list_records`; deeper keys are not children)."""
    n = len(prefix)
    return b"".join(f"{o.size}_{o.key[n:]}".encode("utf-8", "surrogateescape") + b"\0"
                    for o in objects if "/" not in o.key[n:])


class Store(abc.ABC):
    """A flat key -> bytes object store with atomic whole-object writes."""

    url: str = ""
    read_only: bool = False
    # True where each request is a round trip (object stores): readers then
    # coalesce ranges and fetch them in parallel; local reads go one by one.
    concurrent_fetches: bool = False

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; raises NotFound."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (short only at the object's end)."""

    def read_into(self, key: str, start: int, buf: memoryview, expect_size: int = -1) -> int:
        """Read ``len(buf)`` bytes from ``start`` straight into ``buf``; returns bytes read.

        ``expect_size`` is the object's size the caller planned with; backends
        that can check it cheaply raise ChunkChanged when it no longer holds.
        """
        data = self.get_range(key, start, len(buf))
        buf[:len(data)] = data
        return len(data)

    def read_into_nowait(self, key: str, start: int, buf: memoryview, expect_size: int = -1) -> int | None:
        """Like :meth:`read_into`, but only if it cannot block (data already in memory);
        None means "would block: do it in a worker thread". Default: always None."""
        return None

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several ``(start, length)`` ranges of one object."""
        return [self.get_range(key, s, n) for s, n in ranges]

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write the whole object atomically: readers see old or new, never a part."""

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Write several objects, each atomically (not the batch: a crash may leave some new);
        on error some may have been written. Backends batch what they can (durability
        barriers, requests in flight). Keys are all checked before anything is written."""
        for key, _ in items:
            check_key(key)
        for key, data in items:
            self.put(key, data)

    # -- compare-and-swap, for metadata several hosts may change ----------------
    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """The whole object and its version tag (an ETag on S3); raises NotFound."""
        raise NotImplementedError(f"{type(self).__name__} has no versioned reads")

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Write the whole object only if it is still at version ``tag`` (None: only if it
        does not exist); returns the new tag. Raises PreconditionFailed when another
        writer got there first: the caller re-reads, re-applies its change and retries,
        so two hosts changing one object never silently lose one change."""
        raise NotImplementedError(f"{type(self).__name__} has no conditional writes")

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove an object; missing objects are not an error."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size and mtime of one object; raises NotFound."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, recursively, sizes included."""

    @abc.abstractmethod
    def list_dir(self, prefix: str = "") -> Listing:
        """One level below ``prefix`` (which is empty or ends with ``/``)."""

    def list_records(self, prefixes: Sequence[str]) -> dict[str, bytes]:
        """For each prefix (ending with ``/``): its direct child objects as compact
        records ``<size>_<name>\\0``, concatenated. This is the bulk listing a view
        needs to lay out a million chunks without a Python object per chunk;
        backends override it with something faster than one ``list_dir`` each."""
        return {prefix: child_records(prefix, self.list_dir(prefix).objects) for prefix in prefixes}

    def dir_token(self, prefix: str) -> DirToken | None:
        """A cheap change detector for the direct children of ``prefix``: a token that
        changes whenever an object there is added, removed or replaced by rename, except
        for a change within ``window`` seconds of the one before (timestamps have a
        granularity); None where the backend has none."""
        return None

    # True where :meth:`dir_token` gives tokens: chunk indexes are persisted (and trusted)
    # only under one, so a store without them never holds one in force.
    has_dir_tokens: bool = False

    def write_refusal(self) -> str | None:
        """Why writes to this store would be refused as a whole (None: they would not, as
        far as can be told without writing); a mount then serves it read-only."""
        return "opened read-only" if self.read_only else None

    def space(self) -> tuple[int, int, int] | None:
        """``(total, free, available)`` bytes of the file system holding the store, for the
        mount's ``statfs`` (``df``, tools checking for room before they write); None where
        nothing says (object stores)."""
        return None

    # True where :meth:`prefetch` keeps objects on local disk (a chunk cache): readers
    # then fetch ahead through it instead of holding the bytes themselves.
    caches_locally: bool = False

    def prefetch(self, key: str, size: int = -1) -> None:
        """Have ``key`` ready locally for a read soon (``size``: as planned); no-op here."""

    def leftovers(self, older_than: float) -> list[str]:
        """Temporary files (not objects) a killed writer left, untouched for ``older_than``
        seconds: wasted space listings never show. Backends whose writes are atomic
        requests (S3) leave none."""
        return []

    def remove_leftover(self, name: str) -> None:
        """Delete one of :meth:`leftovers`."""

    def exists(self, key: str) -> bool:
        from ..errors import NotFound

        try:
            self.head(key)
            return True
        except NotFound:
            return False

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many."""
        keys = [o.key for o in self.list(prefix)]
        for k in keys:
            self.delete(k)
        return len(keys)

    def close(self) -> None:  # pragma: no cover - most backends hold nothing
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
