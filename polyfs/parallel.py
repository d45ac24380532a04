"""Ordered, bounded parallel maps for the write path (codecs release the GIL)."""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

THREADS = max(2, min(8, os.cpu_count() or 2))


def bounded_map(pool: ThreadPoolExecutor, fn: Callable[[T], R], items: Iterable[T], window: int) -> Iterator[R]:
    """``pool.map`` that pulls at most ``window`` items ahead (memory holds a window of chunks,
    never the whole change); results in order, the first failure in order raised; what is
    still queued when the consumer stops is cancelled."""
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for fut in pending:
            fut.cancel()


def ordered_map(fn: Callable[[T], R], items: list[T], threads: int = THREADS) -> Iterator[R]:
    """:func:`bounded_map` in a pool of its own (a few items ahead at most)."""
    if len(items) < 2:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="polyfs-map") as pool:
        yield from bounded_map(pool, fn, items, threads * 2)
