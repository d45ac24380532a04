"""The S3 backend behind a fault-injecting proxy (tests/s3faultproxy.py) in front of moto.

Under every kind of fault a real endpoint produces, each call either returns the right
bytes (after retries) or, when the endpoint stays broken, raises a StoreError naming the
key within its deadline; answers about the key itself (not found) are never retried.
"""
from __future__ import annotations

import logging
import time
import uuid

import numpy as np
import pytest

from polyfs.errors import NotFound, StoreError
from polyfs.store.s3 import S3Store
from s3faultproxy import KINDS, FaultProxy

pytestmark = pytest.mark.s3

# A hung request must be given up well before the proxy lets go of it (HANG).
TIMEOUT, DEADLINE, HANG = 1.0, 4.0, 60.0
# Generous: only a hang (a call that ignores its deadline) trips it, never a slow machine.
HANG_DETECTOR = DEADLINE + TIMEOUT + 20


@pytest.fixture
def proxy(s3_server):
    with FaultProxy(s3_server.endpoint, seed=7, hang=HANG) as p:
        yield p


@pytest.fixture
def store(s3_server, proxy, monkeypatch):
    monkeypatch.setenv("POLYFS_S3_TIMEOUT", str(TIMEOUT))
    monkeypatch.setenv("POLYFS_S3_DEADLINE", str(DEADLINE))
    monkeypatch.setenv("POLYFS_S3_RETRIES", "20")
    bucket = s3_server.create_bucket(f"faults-{uuid.uuid4().hex[:10]}")
    return S3Store(f"s3://{bucket}/pre", endpoint=proxy.endpoint)


def blobs(n: int) -> dict[str, bytes]:
    return {f"d/{i:03d}": np.random.default_rng(i).bytes(500 + 1777 * i) for i in range(n)}


def test_every_call_returns_the_right_bytes_under_every_fault(store, proxy):
    want = blobs(10)
    proxy.configure(rate=0.25, kinds=KINDS)
    for key, data in want.items():
        store.put(key, data)
    store.put_many([(f"m/{k}", v) for k, v in want.items()])
    for key, data in want.items():
        assert store.get(key) == data
        assert store.get_range(key, 7, 300) == data[7:307]
        assert store.get_range(key, len(data) - 5, 100) == data[-5:]  # short only at the end
        assert store.get_ranges(key, [(0, 9), (200, 64), (len(data) - 2, 50)]) == [data[:9], data[200:264],
                                                                                    data[-2:]]
        assert store.head(key).size == len(data)
    assert sorted(o.key for o in store.list("d/")) == sorted(want)
    assert [o.key for o in store.list_dir("m/d/").objects] == sorted(f"m/{k}" for k in want)
    for key in list(want)[:5]:
        store.delete(key)
    proxy.up()
    assert sorted(o.key for o in store.list("d/")) == sorted(want)[5:]
    assert all(store.get(f"m/{k}") == v for k, v in want.items())
    assert set(proxy.counts) == set(KINDS), proxy.counts  # every kind was injected and survived


@pytest.mark.parametrize("kind", ["500", "503", "reset", "truncate", "timeout"])
def test_a_broken_endpoint_gives_a_store_error_naming_the_key_within_the_deadline(store, proxy, kind, caplog):
    store.put("d/x", b"0123456789" * 100)
    proxy.down(kind)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="polyfs.store.s3"):
        with pytest.raises(StoreError) as err:
            store.get_range("d/x", 10, 20)
    assert time.monotonic() - t0 < HANG_DETECTOR
    assert not isinstance(err.value, NotFound)
    assert "d/x" in str(err.value)
    assert [r for r in caplog.records if "d/x" in r.getMessage()], "no log line names the key"
    assert proxy.requests >= 2  # it was retried
    proxy.up()
    assert store.get_range("d/x", 10, 20) == (b"0123456789" * 3)[:20]


def test_a_refused_put_leaves_the_old_object(store, proxy):
    store.put("d/y", b"old")
    proxy.down("503")
    with pytest.raises(StoreError):
        store.put("d/y", b"new")
    proxy.up()
    assert store.get("d/y") == b"old"


def test_a_put_whose_reply_is_lost_is_retried_and_lands_once(store, proxy):
    proxy.configure(rate=1.0, kinds=["reset_after"], methods=["PUT"])
    with pytest.raises(StoreError):
        store.put("d/z", b"v1")  # applied upstream every time, acknowledged never
    proxy.configure(rate=0.5)
    store.put("d/z", b"v2")
    proxy.up()
    assert store.get("d/z") == b"v2"


def test_answers_about_the_key_are_not_retried(store, proxy):
    proxy.up()
    before = proxy.requests
    with pytest.raises(NotFound):
        store.get("d/missing")
    with pytest.raises(NotFound):
        store.head("d/missing")
    store.delete("d/missing")  # deleting a missing object is no error
    assert proxy.requests - before == 3


def test_bad_limits_are_a_clear_error(s3_server, monkeypatch):
    monkeypatch.setenv("POLYFS_S3_TIMEOUT", "soon")
    with pytest.raises(StoreError, match="POLYFS_S3_TIMEOUT"):
        S3Store("s3://some-bucket/pre")
