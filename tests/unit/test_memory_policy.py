"""The daemon's malloc policy: trims are rate-limited, and a trim skipped inside the window
happens at its end (memory freed by the last file of a burst goes back too)."""
from __future__ import annotations

import time

from polyfs import memory


class FakeLibc:
    def __init__(self) -> None:
        self.trims: list[float] = []

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(time.monotonic())
        return 1


def test_a_burst_trims_once_now_and_once_at_the_end_of_the_window(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(memory, "_libc", libc)
    monkeypatch.setattr(memory, "_last", 0.0)
    monkeypatch.setattr(memory, "_pending", None)
    monkeypatch.setattr(memory, "TRIM_EVERY", 0.3)
    for _ in range(50):  # a burst of stored files
        memory.trim()
    assert len(libc.trims) == 1
    deadline = time.monotonic() + 30  # polled: a loaded machine may run the timer late
    while len(libc.trims) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(libc.trims) == 2, "the trim skipped inside the window never happened"
    assert libc.trims[1] - libc.trims[0] >= 0.25
    time.sleep(0.5)
    assert len(libc.trims) == 2  # nothing more was asked for: no more trims


def test_without_glibc_nothing_is_trimmed(monkeypatch):
    monkeypatch.setattr(memory, "_libc", None)
    memory.trim()  # no error, no timer
    assert memory._pending is None or not memory._pending.is_alive()
