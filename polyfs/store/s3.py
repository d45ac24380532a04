"""S3-compatible backend through obstore's synchronous API.

obstore's async API does not run under trio, so the daemon calls these
methods from worker threads. Endpoint and credentials come from explicit
options first, then the usual AWS environment variables
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``), which obstore reads itself.

Every call has a deadline and is retried here, not inside obstore: 5xx replies,
dropped or reset connections, timeouts and bodies cut short (caught by checking
every length against what was asked) get another attempt after a jittered
exponential backoff while the call's deadline allows; a call ends within deadline
+ timeout whatever the endpoint does. Only then does the caller get a StoreError
(EIO) naming the key. A 4xx reply (no such bucket, access denied) is an answer, not
a fault: it fails at once, named by its S3 error code. Whole-object PUTs and
DELETEs are idempotent, so retrying one whose reply was lost is safe. Limits come
from ``POLYFS_S3_TIMEOUT`` (seconds per attempt, default 30), ``POLYFS_S3_DEADLINE``
(seconds per call, default 120) and ``POLYFS_S3_RETRIES`` (attempts after the first,
default 10).
"""
from __future__ import annotations

import logging
import os
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator, Sequence, TypeVar
from urllib.parse import urlparse

from ..errors import NotFound, PreconditionFailed, ReadOnly, StoreError
from .base import Listing, ObjectInfo, Store, check_key, check_prefix, child_records


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_STATUS_RE = re.compile(r"status code: (\d{3})")
_CODE_RE = re.compile(r"<Code>([A-Za-z]+)</Code>")
# 4xx replies that are about the moment or the transfer, not the request: worth another
# attempt (a body cut or damaged on the way, a token refreshed meanwhile, a conflict).
_TRANSIENT_CODES = {"RequestTimeout", "SlowDown", "OperationAborted", "ConditionalRequestConflict",
                    "InternalError", "ServiceUnavailable", "IncompleteBody", "BadDigest",
                    "XAmzContentSHA256Mismatch", "ExpiredToken", "TokenRefreshRequired"}


def _reply(exc: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and S3 error code an obstore error carries in its text, if any."""
    text = str(exc)
    status, code = _STATUS_RE.search(text), _CODE_RE.search(text)
    return (int(status.group(1)) if status else None), (code.group(1) if code else None)


def _obstore():
    import obstore  # imported lazily: only S3 users pay for it

    return obstore


_PUT_POOL = ThreadPoolExecutor(8, thread_name_prefix="polyfs-s3put")
log = logging.getLogger("polyfs.store.s3")
T = TypeVar("T")


class _ShortBody(Exception):
    """A reply body shorter than its request promised (a connection cut mid-reply)."""


@dataclass(frozen=True)
class S3Limits:
    """How long one S3 call may take, and how often it is tried."""

    timeout: float = 30.0  # one attempt, connect to last byte
    deadline: float = 120.0  # one call, every attempt and backoff included
    retries: int = 10  # attempts after the first
    backoff: float = 0.1  # first backoff; doubles up to max_backoff, with full jitter
    max_backoff: float = 5.0

    @classmethod
    def from_env(cls) -> "S3Limits":
        def num(name: str, default: float) -> float:
            raw = os.environ.get(name)
            if raw is None:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise StoreError(f"{name}={raw!r} is not a number") from None
            if value < 0:
                raise StoreError(f"{name}={raw!r} is negative")
            return value

        base = cls()
        return cls(timeout=num("POLYFS_S3_TIMEOUT", base.timeout), deadline=num("POLYFS_S3_DEADLINE", base.deadline),
                   retries=int(num("POLYFS_S3_RETRIES", base.retries)))


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
        self.endpoint = endpoint or "AWS S3"
        if endpoint:
            config["endpoint"] = endpoint
        if access_key_id:
            config["access_key_id"] = access_key_id
        if secret_access_key:
            config["secret_access_key"] = secret_access_key
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        config["region"] = region or "us-east-1"
        self.limits = S3Limits.from_env()
        client: dict[str, Any] = {"timeout": timedelta(seconds=self.limits.timeout),
                                  "connect_timeout": timedelta(seconds=min(5.0, self.limits.timeout))}
        if endpoint and endpoint.startswith("http://"):
            client["allow_http"] = True
        # One retry policy, ours (see _call): obstore's would multiply attempts and
        # overrun the deadline, and it does not retry cut bodies or timed-out PUTs.
        retry = {"max_retries": 0, "retry_timeout": timedelta(seconds=max(self.limits.deadline, 1.0))}
        try:
            self._s = _S3(self.bucket, prefix=self.prefix or None, config=config, client_options=client,
                          retry_config=retry)
        except Exception as exc:  # obstore raises its own config errors
            raise StoreError(f"{url}: {exc}") from None

    # -- error mapping ---------------------------------------------------
    def _err(self, key: str, exc: Exception) -> Exception:
        ex = _obstore().exceptions
        status, code = _reply(exc)
        if code == "NoSuchBucket":  # obstore says "object not found" for a GET or PUT there
            return StoreError(f"{self.url}: bucket {self.bucket!r} does not exist at {self.endpoint} (NoSuchBucket)")
        if isinstance(exc, (ex.PreconditionError, ex.AlreadyExistsError)):
            return PreconditionFailed(f"{key}: concurrent write")
        if isinstance(exc, (ex.NotFoundError, FileNotFoundError)):
            return NotFound(f"no object {key!r}")
        where = f"{self.url}/{key}" if key != "/" else self.url
        if code and status and 400 <= status < 500:  # the reply's S3 code says it, not the XML around it
            return StoreError(f"{where}: {code} (HTTP {status}) from {self.endpoint}")
        return StoreError(f"{where}: {_first_line(exc)}")

    def _transient(self, exc: Exception) -> bool:
        """Worth another attempt: network and server trouble, not answers about the key."""
        if isinstance(exc, _ShortBody):
            return True
        status, code = _reply(exc)
        if status is not None and 400 <= status < 500 and status not in (408, 429) \
                and code not in _TRANSIENT_CODES:
            return False  # an answer about the request (no bucket, denied, bad request): the same again
        ex = _obstore().exceptions
        final = (ex.NotFoundError, FileNotFoundError, ex.PreconditionError, ex.AlreadyExistsError,
                 ex.PermissionDeniedError, ex.UnauthenticatedError, ex.NotSupportedError, ex.InvalidPathError)
        return not isinstance(exc, final)

    def _call(self, what: str, key: str, fn: Callable[[], T]) -> T:
        """``fn()`` retried with backoff until it succeeds, fails for good, or the
        call's deadline passes; failures become polyfs errors naming the key."""
        lim = self.limits
        start = time.monotonic()
        attempt = 0
        while True:
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified just below
                attempt += 1
                elapsed = time.monotonic() - start
                pause = random.uniform(0, min(lim.max_backoff, lim.backoff * 2 ** (attempt - 1)))
                # An attempt starts only inside the deadline, so a call ends within
                # deadline + timeout whatever the endpoint does.
                if not self._transient(exc) or attempt > lim.retries or elapsed + pause >= lim.deadline:
                    err = self._err(key, exc)
                    if type(err) is StoreError:
                        log.warning("S3 %s %s failed after %d attempt(s) in %.1fs: %s", what, key, attempt,
                                    elapsed, err)
                        raise StoreError(f"{err} ({what}, {attempt} attempt(s) in {elapsed:.1f}s)") from None
                    raise err from None
                log.info("S3 %s %s: retrying after %s", what, key, _first_line(exc))
                time.sleep(pause)

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnly(f"store {self.url} is read-only")

    # -- reads -----------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self.get_tagged(key)[0]

    def _size(self, key: str) -> int:
        return int(_obstore().head(self._s, key)["size"])

    def _check_lengths(self, key: str, ranges: Sequence[tuple[int, int]], got: Sequence[bytes]) -> None:
        """A short range is only right where the object ends; anything else was cut."""
        short = [(s, n, len(b)) for (s, n), b in zip(ranges, got) if len(b) != n]
        if not short:
            return
        size = self._size(key)
        for s, n, k in short:
            if k != max(0, min(n, size - s)):
                raise _ShortBody(f"range {s}+{n}: {k} bytes of an object of {size}")

    def get_range(self, key: str, start: int, length: int) -> bytes:
        check_key(key)
        if length == 0:
            return b""

        def once() -> bytes:
            try:
                data = bytes(_obstore().get_range(self._s, key, start=start, length=length))
            except Exception as exc:
                # A range starting past the end is an error in obstore, an empty read here.
                if not isinstance(exc, _obstore().exceptions.NotFoundError):
                    try:
                        if start >= self._size(key):
                            return b""
                    except Exception:
                        pass
                raise
            self._check_lengths(key, [(start, length)], [data])
            return data

        return self._call("GET", key, once)

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        check_key(key)
        nonempty = [(s, n) for s, n in ranges if n > 0]
        if not nonempty:
            return [b"" for _ in ranges]

        def once() -> list[bytes]:
            got = [bytes(b) for b in _obstore().get_ranges(
                self._s, key, starts=[s for s, _ in nonempty], lengths=[n for _, n in nonempty])]
            self._check_lengths(key, nonempty, got)
            return got

        it = iter(self._call("GET", key, once))
        return [next(it) if n > 0 else b"" for _, n in ranges]

    def head(self, key: str) -> ObjectInfo:
        check_key(key)
        meta = self._call("HEAD", key, lambda: _obstore().head(self._s, key))
        return ObjectInfo(key, int(meta["size"]), meta["last_modified"].timestamp(), meta.get("e_tag"))

    # -- writes ----------------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        self._writable()
        check_key(key)
        body = bytes(data)
        self._call("PUT", key, lambda: _obstore().put(self._s, key, body, use_multipart=False))

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        got = self.get_if_changed(key, None)
        assert got is not None
        return got

    def get_if_changed(self, key: str, tag: str | None) -> tuple[bytes, str] | None:
        """The object and the ETag of exactly those bytes, or None when its ETag is still
        ``tag`` (one GET with If-None-Match, answered 304 without the bytes)."""
        check_key(key)

        def once() -> tuple[bytes, str] | None:
            try:
                res = _obstore().get(self._s, key, options={"if_none_match": tag} if tag else None)
            except _obstore().exceptions.NotModifiedError:
                return None
            data = bytes(res.bytes())
            lo, hi = res.range
            if len(data) != hi - lo or hi - lo != int(res.meta["size"]):
                raise _ShortBody(f"{len(data)} of {int(res.meta['size'])} bytes")
            return data, str(res.meta.get("e_tag") or "")

        return self._call("GET", key, once)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """A PUT with ``If-Match: tag`` (``If-None-Match: *`` for None). A retried PUT
        whose first attempt landed but whose reply was lost fails its precondition
        against itself: the object then holding exactly ``data`` means it landed."""
        self._writable()
        check_key(key)
        body = bytes(data)
        mode: Any = "create" if tag is None else {"e_tag": tag}
        attempts = 0

        def once() -> str:
            nonlocal attempts
            attempts += 1
            return str(_obstore().put(self._s, key, body, mode=mode, use_multipart=False).get("e_tag") or "")

        try:
            return self._call("PUT", key, once)
        except PreconditionFailed:
            if attempts > 1:
                try:
                    have, now_tag = self.get_tagged(key)
                except NotFound:
                    raise PreconditionFailed(f"{key}: changed by another writer") from None
                if have == body:
                    return now_tag
            raise PreconditionFailed(f"{key}: changed by another writer") from None

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Single PUTs, several in flight."""
        for key, _ in items:
            check_key(key)
        list(_PUT_POOL.map(lambda item: self.put(*item), items))

    def delete(self, key: str) -> None:
        self._writable()
        check_key(key)
        try:
            self._call("DELETE", key, lambda: _obstore().delete(self._s, key))
        except NotFound:
            pass

    def delete_many(self, keys: Sequence[str]) -> None:
        """S3 DeleteObjects: up to 1000 keys a request (one DELETE each would make removing
        a domain of 100,000 chunks 100,000 round trips). Idempotent, so a retried batch
        whose reply was lost is safe; absent keys are no error."""
        self._writable()
        keys = [check_key(k) for k in keys]
        for i in range(0, len(keys), _PAGE):
            batch = keys[i:i + _PAGE]
            self._call("DELETE", f"{batch[0]} (+{len(batch) - 1} more)" if len(batch) > 1 else batch[0],
                       lambda b=batch: _obstore().delete(self._s, b))  # type: ignore[misc]

    def delete_prefix(self, prefix: str) -> int:
        """Every object under ``prefix`` deleted a listing page at a time (a request per
        1000): memory holds one page, not a million keys of a large dataset. A failed page
        starts the listing again; what was deleted is no longer listed, so no work is lost."""
        self._writable()
        check_prefix(prefix)
        base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""  # as in list()
        done = 0
        in_flight: set[str] = set()  # the page being deleted (counted once, also if listed again)

        def once() -> int:
            nonlocal done, in_flight
            for batch in _obstore().list(self._s, base or None, chunk_size=_PAGE):
                keys = [m["path"] for m in batch if m["path"].startswith(prefix)]
                if keys:
                    done += sum(k not in in_flight for k in keys)
                    in_flight = set(keys)
                    _obstore().delete(self._s, keys)
            return done

        return self._call("DELETE", prefix or "/", once)

    # -- listings --------------------------------------------------------
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        # obstore matches prefixes per path segment; list the enclosing
        # directory and filter so a partial name matches as on other backends.
        base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""

        def once() -> list[ObjectInfo]:
            # Collected whole, so a retry after a failed page cannot yield an object twice.
            out = []
            for batch in _obstore().list(self._s, base or None, chunk_size=_PAGE):
                out.extend(_info(meta) for meta in batch if meta["path"].startswith(prefix))
            return out

        yield from self._call("LIST", prefix or "/", once)

    def list_dir(self, prefix: str = "") -> Listing:
        check_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            raise ValueError("list_dir prefix must be empty or end with '/'")
        res = self._call("LIST", prefix or "/",
                         lambda: _obstore().list_with_delimiter(self._s, prefix.rstrip("/") or None))
        prefixes = tuple(sorted(p.rstrip("/") + "/" for p in res["common_prefixes"]))
        objects = tuple(
            sorted(
                (_info(m) for m in res["objects"]),
                key=lambda o: o.key,
            )
        )
        return Listing(prefixes, objects)

    def list_records(self, prefixes: Sequence[str]) -> dict[str, bytes]:
        """The direct children of each prefix, many prefixes at a time (each listing is a
        round trip); a prefix with more than one page of children (a large dataset's
        chunks) is listed in parallel key ranges."""
        prefixes = list(prefixes)
        out: dict[str, bytes] = {}
        for prefix, records in zip(prefixes, _LIST_POOL.map(self._child_records, prefixes)):
            out[prefix] = records
        return out

    def _child_records(self, prefix: str) -> bytes:
        check_prefix(prefix)
        first = self._call("LIST", prefix or "/", lambda: self._list_page(prefix))
        if len(first) < _PAGE:
            return child_records(prefix, first)
        # More than a page: chunk names start with a digit, so ten ranges split the key
        # space; each is listed from its start (S3 start-after) up to the next one's.
        bounds = ["", *"123456789", ":"]
        ranges = [(lo, hi) for lo, hi in zip(bounds, bounds[1:] + [None])
                  if hi is None or prefix + hi > first[-1].key]  # the first page covered the rest
        parts = _RANGE_POOL.map(lambda r: self._call("LIST", prefix + r[0], lambda: self._list_range(
            prefix, *r, after=first[-1].key)), ranges)
        found: dict[str, ObjectInfo] = {o.key: o for o in first}
        for part in parts:
            found.update((o.key, o) for o in part)
        return child_records(prefix, [found[k] for k in sorted(found)])

    def _list_page(self, prefix: str) -> list[ObjectInfo]:
        stream = _obstore().list(self._s, prefix.rstrip("/") or None, chunk_size=_PAGE)
        for batch in stream:
            return [_info(m) for m in batch]
        return []

    def _list_range(self, prefix: str, lo: str, hi: str | None, after: str) -> list[ObjectInfo]:
        """Children of ``prefix`` whose names sort in [lo, hi) and after ``after`` (a few
        more are harmless: the caller keys them by name)."""
        start = prefix + lo[:-1] + chr(ord(lo[-1]) - 1) + "\uffff" if lo else after
        start = max(start, after)
        out: list[ObjectInfo] = []
        for batch in _obstore().list(self._s, prefix.rstrip("/") or None, offset=start, chunk_size=_PAGE):
            infos = [_info(m) for m in batch]
            out.extend(infos)
            if hi is not None and infos and infos[-1].key >= prefix + hi:
                break
        return out


_PAGE = 1000  # S3's page of a listing
_LIST_POOL = ThreadPoolExecutor(16, thread_name_prefix="polyfs-s3list")  # prefixes
_RANGE_POOL = ThreadPoolExecutor(16, thread_name_prefix="polyfs-s3range")  # ranges of one (never waits on the first)


def _info(meta: Any) -> ObjectInfo:
    return ObjectInfo(meta["path"], int(meta["size"]), meta["last_modified"].timestamp(), meta.get("e_tag"))
