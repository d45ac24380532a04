"""How the chunk cache learns which version of an object it holds: the one seam
between ``chunkcache.py`` and a backend.

Why a seam: a cached copy is only worth something if its version is pinned to the
very bytes fetched (a HEAD then a GET can straddle a rewrite), and only cheap to
keep current if the store can say "unchanged" without sending the bytes again. S3
does both (the ETag of a GET's own reply; GET with If-None-Match answered 304);
other stores get the nearest generic equivalent.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Protocol, TypeVar, Union

from ..errors import NotFound, StoreError
from .base import ObjectInfo, Store

Buffer = Union[bytes, bytearray, memoryview]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Fetched:
    """A whole object and its version tag (None: could not be pinned; serve, do not keep)."""

    data: Buffer
    tag: str | None


class Versions(Protocol):
    def fetch(self, key: str) -> Fetched:
        """The whole object with the tag of exactly those bytes; raises NotFound."""

    def fetch_if_changed(self, key: str, tag: str) -> Fetched | None:
        """None when the object's tag is still ``tag``, else the new object; raises NotFound."""

    def tag_of_put(self, key: str, data: Buffer, result: object) -> str | None:
        """The tag the store gave ``data`` just written (``result``: what put returned)."""

    def tag_of(self, info: ObjectInfo) -> str | None:
        """The tag a listing or head entry shows (None: it shows none)."""


class GenericVersions:
    """Any Store: tags from ``head`` (ETag, else size and mtime); a fetch is bracketed
    by two heads so bytes are never filed under another version's tag."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    @staticmethod
    def tag(info: ObjectInfo) -> str:
        return info.etag or f"{info.size}:{info.mtime!r}"

    def tag_of(self, info: ObjectInfo) -> str | None:
        return self.tag(info)

    def fetch(self, key: str) -> Fetched:
        data: bytes = b""
        for _ in range(3):
            before = self.inner.head(key)
            data = self.inner.get(key)
            if self.tag(self.inner.head(key)) == self.tag(before) and len(data) == before.size:
                return Fetched(data, self.tag(before))
        return Fetched(data, None)

    def fetch_if_changed(self, key: str, tag: str) -> Fetched | None:
        return None if self.tag(self.inner.head(key)) == tag else self.fetch(key)

    def tag_of_put(self, key: str, data: Buffer, result: object) -> str | None:
        if isinstance(result, str):
            return result
        return self.tag(self.inner.head(key))


class _Truncated(Exception):
    """A reply body shorter than the object (retried like any transient failure)."""


class ObstoreVersions:
    """S3 through obstore directly (``inner._s``): GET returns the ETag of the very bytes
    it carries, and revalidation is one GET with If-None-Match (304: unchanged). Calls
    go through the store's own retry loop (``inner._call``) when it has one."""

    def __init__(self, inner: Store) -> None:
        import obstore

        self._ob = obstore
        self._s = getattr(inner, "_s")
        self._call: Callable[[str, str, Callable[[], object]], object] | None = getattr(inner, "_call", None)

    def _run(self, what: str, key: str, fn: Callable[[], T]) -> T:
        if self._call is not None:
            return self._call(what, key, fn)  # type: ignore[return-value]
        try:
            return fn()
        except (FileNotFoundError, self._ob.exceptions.NotFoundError):
            raise NotFound(f"no object {key!r}") from None
        except Exception as exc:  # noqa: BLE001 - obstore's own errors become StoreError
            raise StoreError(f"{key}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    def _get(self, key: str, tag: str | None) -> Fetched | None:
        try:
            res = self._ob.get(self._s, key, options={"if_none_match": tag} if tag else None)
        except self._ob.exceptions.NotModifiedError:
            return None
        data = memoryview(res.bytes())
        lo, hi = res.range
        if len(data) != hi - lo or hi - lo != int(res.meta["size"]):
            raise _Truncated(f"{len(data)} of {int(res.meta['size'])} bytes")
        return Fetched(data, res.meta.get("e_tag"))

    def tag_of(self, info: ObjectInfo) -> str | None:
        return info.etag  # a listing's ETag is the GET's

    def fetch(self, key: str) -> Fetched:
        got = self._run("GET", key, lambda: self._get(key, None))
        assert got is not None
        return got

    def fetch_if_changed(self, key: str, tag: str) -> Fetched | None:
        return self._run("GET", key, lambda: self._get(key, tag))

    def tag_of_put(self, key: str, data: Buffer, result: object) -> str | None:
        if isinstance(result, str):
            return result
        if isinstance(result, dict) and isinstance(result.get("e_tag"), str):
            return result["e_tag"]
        # S3's ETag of a single-part PUT is the MD5 of the body. Should the store differ
        # (SSE-KMS), the first revalidation finds another tag and fetches once: a guess
        # can cost a transfer, never serve wrong bytes.
        return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def versions_for(inner: Store) -> Versions:
    from .s3 import S3Store

    return ObstoreVersions(inner) if isinstance(inner, S3Store) else GenericVersions(inner)
