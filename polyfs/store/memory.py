"""In-memory backend, for tests and throw-away mounts."""
from __future__ import annotations

import threading
import time
from typing import Iterator

from ..errors import NotFound, PreconditionFailed, ReadOnly
from .base import Listing, ObjectInfo, Store, check_key, check_prefix


_last = 0.0
_stamp_lock = threading.Lock()


def _stamp() -> float:
    """Wall-clock time, strictly increasing across puts (it doubles as the version tag)."""
    global _last
    with _stamp_lock:
        t = time.time()
        _last = t if t > _last else _last + 1e-6
        return _last


class MemoryStore(Store):
    """A dict of key -> bytes behind a lock."""

    def __init__(self, read_only: bool = False, name: str = "") -> None:
        self._objects: dict[str, tuple[bytes, float]] = {}
        self._lock = threading.Lock()
        self.name = name
        self.read_only = read_only
        self.url = f"memory://{name or format(id(self), 'x')}"

    def read_only_view(self) -> "MemoryStore":
        """The same objects through a store that refuses writes."""
        view = MemoryStore(read_only=True, name=self.name)
        view._objects, view._lock, view.url = self._objects, self._lock, self.url
        return view

    def _item(self, key: str) -> tuple[bytes, float]:
        check_key(key)
        with self._lock:
            try:
                return self._objects[key]
            except KeyError:
                raise NotFound(f"no object {key!r}") from None

    def get(self, key: str) -> bytes:
        return self._item(key)[0]

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError("negative range")
        return self._item(key)[0][start : start + length]

    def head(self, key: str) -> ObjectInfo:
        data, mtime = self._item(key)
        return ObjectInfo(key, len(data), mtime)

    def put(self, key: str, data: bytes) -> None:
        if self.read_only:
            raise ReadOnly(f"store {self.url} is read-only")
        check_key(key)
        with self._lock:
            self._objects[key] = (bytes(data), _stamp())

    @staticmethod
    def _tag(item: tuple[bytes, float]) -> str:
        return repr(item[1])  # every put stamps a new, strictly later time

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        item = self._item(key)
        return item[0], self._tag(item)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        if self.read_only:
            raise ReadOnly(f"store {self.url} is read-only")
        check_key(key)
        with self._lock:
            have = self._objects.get(key)
            if (None if have is None else self._tag(have)) != tag:
                raise PreconditionFailed(f"{key}: changed by another writer")
            item = self._objects[key] = (bytes(data), _stamp())
            return self._tag(item)

    def delete(self, key: str) -> None:
        if self.read_only:
            raise ReadOnly(f"store {self.url} is read-only")
        check_key(key)
        with self._lock:
            self._objects.pop(key, None)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        with self._lock:
            items = [(k, v) for k, v in self._objects.items() if k.startswith(prefix)]
        for k, (data, mtime) in sorted(items):
            yield ObjectInfo(k, len(data), mtime)

    def list_dir(self, prefix: str = "") -> Listing:
        check_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            raise ValueError("list_dir prefix must be empty or end with '/'")
        prefixes: set[str] = set()
        objects: list[ObjectInfo] = []
        for info in self.list(prefix):
            rest = info.key[len(prefix):]
            if "/" in rest:
                prefixes.add(prefix + rest.split("/", 1)[0] + "/")
            else:
                objects.append(info)
        return Listing(tuple(sorted(prefixes)), tuple(objects))
