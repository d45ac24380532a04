"""A counting HTTP proxy in front of an S3 endpoint (moto), for tests and scripts/bench_s3.py.

Why: "how many requests did that take" must be counted where the requests
arrive, not inside polyfs. Point ``AWS_ENDPOINT_URL`` at ``proxy.endpoint``;
each request is forwarded unchanged (same Host header, so signatures hold) over
a kept-alive connection and counted by method, kind and status.
"""
from __future__ import annotations

import http.client
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

CHUNK_PATH = re.compile(r"/db/[0-9a-f]{8}-[0-9a-f]{8}/d/[0-9a-f]{4}-[0-9a-f]{6}-[0-9a-f]{6}/\d+(?:_\d+)*$")
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


def kind_of(method: str, target: str) -> str:
    """``list`` (a bucket listing), ``chunk`` (a chunk object) or ``other``."""
    path, _, query = target.partition("?")
    if method == "GET" and ("list-type=" in query or "delimiter=" in query or "prefix=" in query):
        return "list"
    return "chunk" if CHUNK_PATH.search(path) else "other"


class CountingProxy:
    """Start with ``with CountingProxy(upstream) as proxy:``; ``proxy.counts`` is a
    Counter of ``(method, kind, status)``."""

    def __init__(self, upstream: str) -> None:
        u = urlparse(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self.counts: Counter[tuple[str, str, int]] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = proxy._conn()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                except (OSError, http.client.HTTPException):
                    proxy._drop()
                    self.send_error(502)
                    return
                proxy.count(self.command, self.path, resp.status)
                self.send_response_only(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                if self.command == "HEAD" or resp.status in (204, 304):
                    length = resp.getheader("Content-Length")
                    if length is not None and self.command == "HEAD":
                        self.send_header("Content-Length", length)
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD" and resp.status not in (204, 304):
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._local = threading.local()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(*self.upstream, timeout=120)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def count(self, method: str, target: str, status: int) -> None:
        with self._lock:
            self.counts[(method, kind_of(method, target), status)] += 1

    def snapshot(self) -> Counter[tuple[str, str, int]]:
        with self._lock:
            return Counter(self.counts)

    def total(self, method: str | None = None, kind: str | None = None, status: int | None = None) -> int:
        return sum(n for (m, k, s), n in self.snapshot().items()
                   if (method is None or m == method) and (kind is None or k == kind)
                   and (status is None or s == status))

    def __enter__(self) -> "CountingProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
