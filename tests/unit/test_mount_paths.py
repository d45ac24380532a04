"""Tier 1: finding a mount in mountinfo never touches the mountpoint itself.

Resolving a mountpoint stats the mounted file system's root; when the daemon died while
requests waited (a SIGKILLed daemon whose thread was stuck in the kernel), that stat never
returns, and ``polyfs umount``, the command that aborts such a connection, hung in it (seen
in the crash loop: writers stuck in D state until the connection was aborted by hand).
"""
from __future__ import annotations

import os

import pytest

from polyfs import daemon


@pytest.fixture
def no_stat_of(monkeypatch):
    """Make any stat of the given path fail the test, as a hung mount root would hang it."""
    forbidden: set[str] = set()
    real_stat, real_lstat = os.stat, os.lstat

    def guard(real):
        def stat(p, *a, **k):
            if isinstance(p, (str, bytes, os.PathLike)) and os.fsdecode(p) in forbidden:
                raise AssertionError(f"statted {os.fsdecode(p)}")
            return real(p, *a, **k)
        return stat

    monkeypatch.setattr(os, "stat", guard(real_stat))
    monkeypatch.setattr(os, "lstat", guard(real_lstat))
    return forbidden


def test_mount_path_resolves_the_directories_only(tmp_path, no_stat_of):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    mnt = str(tmp_path / "link" / "mnt")
    no_stat_of.add(str(tmp_path / "real" / "mnt"))
    no_stat_of.add(mnt)
    assert daemon.mount_path(mnt) == str(tmp_path / "real" / "mnt")
    assert daemon.mount_path(mnt + "/") == str(tmp_path / "real" / "mnt")


def test_a_mount_is_found_without_statting_its_root(no_stat_of):
    with open("/proc/self/mountinfo") as f:
        fields = [line.split() for line in f]
    root_fs = next(p[p.index("-") + 1] for p in fields if p[4] == "/proc")
    no_stat_of.add("/proc")
    assert daemon.mounted_fs("/proc") == root_fs
    assert daemon.connection_of("/proc") is not None
