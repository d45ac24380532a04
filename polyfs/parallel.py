"""Ordered, bounded parallel maps for the write path (codecs release the GIL)."""
from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

THREADS = max(2, min(8, os.cpu_count() or 2))


class Occupancy:
    """How many calls are inside a section at once. A call that could fan its items out to
    worker threads does so only while fewer than ``limit`` calls run side by side: past that
    the cores are busy with the calls themselves, and more threads would only hand the GIL
    back and forth (a context switch per codec call or syscall)."""

    def __init__(self, limit: int = THREADS) -> None:
        self.limit = limit
        self._inside = 0
        self._lock = threading.Lock()

    @contextmanager
    def enter(self) -> Iterator[bool]:
        """Inside the section; yields whether this call should fan out."""
        with self._lock:
            self._inside += 1
            fan_out = self._inside <= self.limit // 2 or self._inside == 1
        try:
            yield fan_out
        finally:
            with self._lock:
                self._inside -= 1


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
