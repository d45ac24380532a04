"""Tier 1: files being written when their scratch space fails (``ENOSPC`` from spilling).

A failed scratch write is the writer's EIO and fails the file it belongs to (never stored,
its memory and scratch freed); a victim page whose spill failed stays in memory, so the
other file it belongs to is intact. The real thing (a full tmpfs) is in
tests/mount/test_disk_faults.py.
"""
from __future__ import annotations

import errno

import pytest

from polyfs.errors import errno_of
from polyfs.fs import overlay
from polyfs.fs.overlay import PendingFile, ScratchFailed, WriteBudget

PAGE = 1024


def no_space(fd: int, data, at: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_spill_fails_the_file_that_pushed_past_the_budget(monkeypatch) -> None:
    budget = WriteBudget(2 * PAGE, page_size=PAGE)
    a = PendingFile("a", True, 0.0, budget)
    a.write(0, b"1" * PAGE)  # within the budget
    monkeypatch.setattr(overlay, "_pwrite_all", no_space)
    b = PendingFile("b", True, 0.0, budget)
    with pytest.raises(ScratchFailed) as info:
        b.write(0, b"2" * 2 * PAGE)  # past the budget: a's page is the victim, and cannot go
    assert errno_of(info.value) == errno.EIO
    assert b.failed and not a.failed
    assert a.read(0, PAGE) == b"1" * PAGE  # the victim kept its page in memory
    assert budget.used == PAGE  # b's pages are gone
    for use in (lambda: b.read(0, 10), lambda: b.write(0, b"x"), b.dirty_ranges):
        with pytest.raises(ScratchFailed):
            use()
    b.truncate(0)  # O_TRUNC: written anew from nothing
    assert not b.failed
    b.write(0, b"3" * 10)
    assert b.read(0, 10) == b"3" * 10


def test_a_failed_write_into_a_spilled_page_fails_the_file(monkeypatch) -> None:
    budget = WriteBudget(2 * PAGE, page_size=PAGE)
    f = PendingFile("f", True, 0.0, budget)
    f.write(0, b"a" * 8 * PAGE)  # spills all but the newest pages
    assert budget.spilled > 0
    monkeypatch.setattr(overlay, "_pwrite_all", no_space)
    with pytest.raises(ScratchFailed):
        f.write(10, b"b" * 100)  # page 0 lives in scratch: written through, and that fails
    assert f.failed and budget.used == 0 and budget.spilled == 0
    with pytest.raises(ScratchFailed):
        f.read(0, 10)


def test_a_scratch_file_that_cannot_be_made_fails_the_write(monkeypatch, tmp_path) -> None:
    budget = WriteBudget(2 * PAGE, scratch_dir=str(tmp_path / "gone"), page_size=PAGE)
    (tmp_path / "gone").rmdir()  # TemporaryFile in it fails (ENOENT)
    f = PendingFile("f", True, 0.0, budget)
    f.write(0, b"a" * PAGE)
    with pytest.raises(ScratchFailed):
        f.write(PAGE, b"b" * 2 * PAGE)
    assert f.failed and budget.used == 0
