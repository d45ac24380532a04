"""Turn a store URL into a backend: a path or ``file://`` (local, the default),
``s3://bucket/prefix``, or ``memory://name`` (process-local, for tests)."""
from __future__ import annotations

import threading
from typing import Any

from ..errors import InvalidInput
from .base import Store

_MEMORY: dict[str, Store] = {}
_MEMORY_LOCK = threading.Lock()


def open_store(url: str, read_only: bool = False, create: bool = False, **options: Any) -> Store:
    """Open the store at ``url``; ``create`` makes a missing local directory."""
    if not url:
        raise InvalidInput("empty store URL")
    if url.startswith("s3://"):
        from .s3 import S3Store

        return S3Store(url, read_only=read_only, **options)
    if url.startswith("memory://"):
        from .memory import MemoryStore

        name = url[len("memory://"):]
        with _MEMORY_LOCK:
            store = _MEMORY.get(name)
            if store is None:
                store = _MEMORY[name] = MemoryStore(name=name)
        return store.read_only_view() if read_only else store
    if url.startswith("file://"):
        url = url[len("file://"):]
    elif "://" in url:
        raise InvalidInput(f"unsupported store URL scheme: {url.split('://')[0]!r}")
    from .local import LocalStore

    return LocalStore(url, read_only=read_only, create=create)
