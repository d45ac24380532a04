"""A fault-injecting HTTP proxy in front of an S3 endpoint (the tests' moto server).

It forwards each request unchanged and, for a seeded random share of them, does
what real object stores and networks do instead:

- ``500``: an ``InternalError`` reply, the request never reaching the store;
- ``503``: an S3 ``SlowDown`` reply;
- ``reset``: the connection reset (TCP RST) before any reply;
- ``reset_after``: the request applied upstream, then the connection reset (a PUT
  whose acknowledgement was lost);
- ``timeout``: no reply at all until the client gives up (the connection is held);
- ``truncate``: the reply's headers with the full ``Content-Length``, half the body,
  then a reset;
- ``slow``: the right reply, late (under any sane timeout).

``counts`` says how many of each were injected, so a test can show the faults
happened. The proxy speaks just enough HTTP/1.1 for S3 clients: keep-alive,
``Content-Length`` and chunked request bodies.
"""
from __future__ import annotations

import http.client
import random
import socket
import socketserver
import struct
import threading
from collections import Counter
from typing import BinaryIO, Iterable
from urllib.parse import urlparse

KINDS = ("500", "503", "reset", "reset_after", "timeout", "truncate", "slow")
# What each kind does not break: a client retrying these always gets the right answer.
TRANSIENT = KINDS

_XML = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{msg}</Message>'
        '<RequestId>polyfs-fault</RequestId></Error>')
_CANNED = {
    "500": (500, "Internal Server Error", _XML.format(code="InternalError", msg="injected fault")),
    "503": (503, "Slow Down", _XML.format(code="SlowDown", msg="Please reduce your request rate.")),
}


class FaultProxy:
    """``FaultProxy(upstream).start()``; point clients at ``.endpoint``.

    ``rate`` is the share of requests that get a fault, drawn from ``kinds``;
    ``methods`` limits faults to those HTTP methods (None: all). Change them at any
    time with :meth:`configure`; :meth:`down` fails every request until :meth:`up`.
    """

    def __init__(self, upstream: str, seed: int = 0, rate: float = 0.0, kinds: Iterable[str] = KINDS,
                 hang: float = 30.0, slow: float = 0.3) -> None:
        u = urlparse(upstream)
        self.upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self.rng = random.Random(seed)
        self.hang = hang
        self.slow = slow
        self.counts: Counter[str] = Counter()
        self.requests = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.configure(rate=rate, kinds=kinds)
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def configure(self, rate: float | None = None, kinds: Iterable[str] | None = None,
                  methods: Iterable[str] | None = None) -> None:
        with self._lock:
            if rate is not None:
                self.rate = rate
            if kinds is not None:
                kinds = tuple(kinds)
                unknown = set(kinds) - set(KINDS)
                if unknown:
                    raise ValueError(f"unknown fault kinds {sorted(unknown)}")
                self.kinds = kinds
            self.methods = None if methods is None else {m.upper() for m in methods}

    def down(self, kind: str = "500") -> None:
        """Every request fails the same way (an endpoint that is down)."""
        self.configure(rate=1.0, kinds=(kind,))

    def up(self) -> None:
        self.configure(rate=0.0)

    def start(self) -> "FaultProxy":
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def injected(self) -> int:
        return sum(self.counts.values())

    # -- one connection ----------------------------------------------------
    def _pick(self, method: str) -> str | None:
        with self._lock:
            self.requests += 1
            if self.methods is not None and method not in self.methods:
                return None
            if not self.kinds or self.rng.random() >= self.rate:
                return None
            kind = self.rng.choice(self.kinds)
            self.counts[kind] += 1
            return kind

    def _serve(self, conn: socket.socket) -> None:
        rfile = conn.makefile("rb")
        try:
            while not self._stopping.is_set():
                req = _read_request(rfile)
                if req is None:
                    return
                method, target, headers, body = req
                fault = self._pick(method)
                if fault in _CANNED:
                    status, reason, text = _CANNED[fault]
                    data = text.encode()
                    _send(conn, status, reason, [("Content-Type", "application/xml")], data, length=len(data))
                    continue
                if fault == "reset":
                    return _reset(conn)
                if fault == "timeout":
                    self._stopping.wait(self.hang)
                    return _reset(conn)
                if fault == "slow":
                    self._stopping.wait(self.slow)
                status, reason, rheaders, rbody, declared = self._forward(method, target, headers, body)
                if fault == "reset_after":
                    return _reset(conn)
                if fault == "truncate" and len(rbody) > 1:
                    _send(conn, status, reason, rheaders, rbody[: len(rbody) // 2], length=declared)
                    return _reset(conn)
                _send(conn, status, reason, rheaders, rbody, length=declared)
                if any(k.lower() == "connection" and v.lower() == "close" for k, v in headers):
                    return
        except (OSError, ValueError):
            return
        finally:
            try:
                rfile.close()
                conn.close()
            except OSError:
                pass

    def _forward(self, method: str, target: str, headers: list[tuple[str, str]],
                 body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes, int | None]:
        """Upstream's reply: status, reason, headers, body and the Content-Length to
        declare (a HEAD declares the object's size; 204/304 declare none)."""
        up = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            up.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                if k.lower() in ("transfer-encoding", "content-length"):
                    continue
                up.putheader(k, v)
            up.putheader("Content-Length", str(len(body)))
            up.endheaders(body)
            resp = up.getresponse()
            data = resp.read()
            hdrs = [(k, v) for k, v in resp.getheaders()
                    if k.lower() not in ("transfer-encoding", "content-length", "connection")]
            declared: int | None = len(data)
            if resp.status in (204, 304):
                declared = None
            elif method == "HEAD":
                declared = int(resp.getheader("Content-Length") or 0)
            return resp.status, resp.reason, hdrs, data, declared
        finally:
            up.close()


def _read_request(rfile: BinaryIO) -> tuple[str, str, list[tuple[str, str]], bytes] | None:
    line = rfile.readline(65537)
    if not line:
        return None
    method, target, _version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    headers: list[tuple[str, str]] = []
    while True:
        h = rfile.readline(65537)
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers.append((k.strip(), v.strip()))
    lower = {k.lower(): v for k, v in headers}
    if lower.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            parts.append(rfile.read(size))
            rfile.readline()
        body = b"".join(parts)
    else:
        body = rfile.read(int(lower.get("content-length", "0") or 0))
    return method.upper(), target, headers, body


def _send(conn: socket.socket, status: int, reason: str, headers: list[tuple[str, str]], body: bytes,
          length: int | None = None) -> None:
    head = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers]
    if length is not None:
        head.append(f"Content-Length: {length}")
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


def _reset(conn: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer sees a reset, not an orderly end."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
