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
from typing import TYPE_CHECKING, Protocol, Union

from .base import ObjectInfo, Store

if TYPE_CHECKING:
    from .s3 import S3Store

Buffer = Union[bytes, bytearray, memoryview]


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

    def tag_of_put(self, key: str, data: Buffer) -> str | None:
        """The tag the store gave ``data`` just written."""

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

    tag_of = tag

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

    def tag_of_put(self, key: str, data: Buffer) -> str | None:
        return self.tag(self.inner.head(key))


class TaggedVersions:
    """S3: a GET returns the ETag of the very bytes it carries, and revalidation is one
    GET with If-None-Match (304: unchanged), through the store's own retries and deadlines
    (``S3Store.get_tagged`` / ``get_if_changed``)."""

    def __init__(self, inner: "S3Store") -> None:
        self.inner = inner

    def tag_of(self, info: ObjectInfo) -> str | None:
        return info.etag  # a listing's ETag is the GET's

    def fetch(self, key: str) -> Fetched:
        data, tag = self.inner.get_tagged(key)
        return Fetched(data, tag or None)

    def fetch_if_changed(self, key: str, tag: str) -> Fetched | None:
        got = self.inner.get_if_changed(key, tag)
        return None if got is None else Fetched(got[0], got[1] or None)

    def tag_of_put(self, key: str, data: Buffer) -> str | None:
        # S3's ETag of a single-part PUT is the MD5 of the body. Should the store differ
        # (SSE-KMS), the first revalidation finds another tag and fetches once: a guess
        # can cost a transfer, never serve wrong bytes.
        return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def versions_for(inner: Store) -> Versions:
    from .s3 import S3Store

    return TaggedVersions(inner) if isinstance(inner, S3Store) else GenericVersions(inner)
