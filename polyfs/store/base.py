"""The object store interface every backend implements.

Methods are synchronous and thread-safe: the daemon calls them from worker
threads (``trio.to_thread.run_sync``), which is also the only way obstore's
sync API runs under trio. Keys are ``/``-separated, never start with ``/``.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Iterator, Sequence

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


class Store(abc.ABC):
    """A flat key -> bytes object store with atomic whole-object writes."""

    url: str = ""
    read_only: bool = False

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; raises NotFound."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (short only at the object's end)."""

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several ``(start, length)`` ranges of one object."""
        return [self.get_range(key, s, n) for s, n in ranges]

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write the whole object atomically: readers see old or new, never a part."""

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
