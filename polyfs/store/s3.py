"""S3-compatible backend through obstore's synchronous API.

obstore's async API does not run under trio, so the daemon calls these
methods from worker threads. Endpoint and credentials come from explicit
options first, then the usual AWS environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``), which obstore reads itself.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Sequence
from urllib.parse import urlparse

from ..errors import NotFound, PreconditionFailed, ReadOnly, StoreError
from .base import Listing, ObjectInfo, Store, check_key, check_prefix


def _obstore():
    import obstore  # imported lazily: only S3 users pay for it

    return obstore


_PUT_POOL = ThreadPoolExecutor(8, thread_name_prefix="polyfs-s3put")


class S3Store(Store):
    """Objects in ``s3://bucket/prefix``."""

    def __init__(
        self,
        url: str,
        read_only: bool = False,
        endpoint: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        region: str | None = None,
        **_: Any,
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise StoreError(f"not an s3 URL: {url!r}")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.url = url
        self.read_only = read_only
        self.concurrent_fetches = True
        from obstore.store import S3Store as _S3

        config: dict[str, Any] = {}
        endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            config["endpoint"] = endpoint
        if access_key_id:
            config["access_key_id"] = access_key_id
        if secret_access_key:
            config["secret_access_key"] = secret_access_key
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        config["region"] = region or "us-east-1"
        client: dict[str, Any] = {}
        if endpoint and endpoint.startswith("http://"):
            client["allow_http"] = True
        try:
            self._s = _S3(self.bucket, prefix=self.prefix or None, config=config, client_options=client)
        except Exception as exc:  # obstore raises its own config errors
            raise StoreError(f"{url}: {exc}") from None

    # -- error mapping ---------------------------------------------------
    def _err(self, key: str, exc: Exception) -> Exception:
        ex = _obstore().exceptions
        if isinstance(exc, (ex.NotFoundError, FileNotFoundError)):
            return NotFound(f"no object {key!r}")
        if isinstance(exc, (ex.PreconditionError, ex.AlreadyExistsError)):
            return PreconditionFailed(f"{key}: concurrent write")
        return StoreError(f"{self.url}/{key}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnly(f"store {self.url} is read-only")

    # -- reads -----------------------------------------------------------
    def get(self, key: str) -> bytes:
        check_key(key)
        try:
            return bytes(_obstore().get(self._s, key).bytes())
        except Exception as exc:
            raise self._err(key, exc) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        check_key(key)
        if length == 0:
            return b""
        try:
            return bytes(_obstore().get_range(self._s, key, start=start, length=length))
        except Exception as exc:
            # A range starting past the end is an error in obstore, an empty read here.
            if not isinstance(exc, _obstore().exceptions.NotFoundError):
                try:
                    if start >= self.head(key).size:
                        return b""
                except NotFound:
                    pass
            raise self._err(key, exc) from None

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        check_key(key)
        nonempty = [(s, n) for s, n in ranges if n > 0]
        if not nonempty:
            return [b"" for _ in ranges]
        try:
            got = _obstore().get_ranges(
                self._s, key, starts=[s for s, _ in nonempty], lengths=[n for _, n in nonempty]
            )
        except Exception as exc:
            raise self._err(key, exc) from None
        it = iter(bytes(b) for b in got)
        return [next(it) if n > 0 else b"" for _, n in ranges]

    def head(self, key: str) -> ObjectInfo:
        check_key(key)
        try:
            meta = _obstore().head(self._s, key)
        except Exception as exc:
            raise self._err(key, exc) from None
        return ObjectInfo(key, int(meta["size"]), meta["last_modified"].timestamp(), meta.get("e_tag"))

    # -- writes ----------------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        self._writable()
        check_key(key)
        try:
            _obstore().put(self._s, key, bytes(data), use_multipart=False)
        except Exception as exc:
            raise self._err(key, exc) from None

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Single PUTs, several in flight."""
        for key, _ in items:
            check_key(key)
        list(_PUT_POOL.map(lambda item: self.put(*item), items))

    def delete(self, key: str) -> None:
        self._writable()
        check_key(key)
        try:
            _obstore().delete(self._s, key)
        except Exception as exc:
            err = self._err(key, exc)
            if not isinstance(err, NotFound):
                raise err from None

    # -- listings --------------------------------------------------------
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        # obstore matches prefixes per path segment; list the enclosing
        # directory and filter so a partial name matches as on other backends.
        base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        try:
            stream = _obstore().list(self._s, base or None, chunk_size=1000)
            for batch in stream:
                for meta in batch:
                    path = meta["path"]
                    if path.startswith(prefix):
                        yield ObjectInfo(path, int(meta["size"]), meta["last_modified"].timestamp(), meta.get("e_tag"))
        except Exception as exc:
            raise self._err(prefix, exc) from None

    def list_dir(self, prefix: str = "") -> Listing:
        check_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            raise ValueError("list_dir prefix must be empty or end with '/'")
        try:
            res = _obstore().list_with_delimiter(self._s, prefix.rstrip("/") or None)
        except Exception as exc:
            raise self._err(prefix, exc) from None
        prefixes = tuple(sorted(p.rstrip("/") + "/" for p in res["common_prefixes"]))
        objects = tuple(
            sorted(
                (ObjectInfo(m["path"], int(m["size"]), m["last_modified"].timestamp(), m.get("e_tag")) for m in res["objects"]),
                key=lambda o: o.key,
            )
        )
        return Listing(prefixes, objects)

    def list_records(self, prefixes) -> dict[str, bytes]:
        """One delimiter listing per prefix, many at a time (each is a round trip)."""
        from concurrent.futures import ThreadPoolExecutor

        prefixes = list(prefixes)
        if len(prefixes) <= 1:
            return super().list_records(prefixes)
        with ThreadPoolExecutor(min(16, len(prefixes))) as pool:
            parts = pool.map(lambda p: super(S3Store, self).list_records([p]), prefixes)
            out: dict[str, bytes] = {}
            for part in parts:
                out.update(part)
        return out
