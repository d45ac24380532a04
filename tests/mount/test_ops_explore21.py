"""Round 21, an operator following README.md on real mounts: ``-o views=zarr,n5`` mounts the two
views, ``-o subtype=`` is refused before it makes a mount ``polyfs umount`` cannot find, the
mount(8) helper takes fstab's ``comment=``, and a ``domain_ttl`` of years still lists domains."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import is_mounted, polyfs_cmd
from test_ops_mount_explore11 import _needs_fuse, make_store  # noqa: F401 - fixture, store

pytestmark = pytest.mark.mount
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path) -> Path:
    return make_store(tmp_path / "store")


@pytest.fixture
def mp(tmp_path):
    path = tmp_path / "mp"
    path.mkdir()
    yield path
    if is_mounted(path):
        subprocess.run(polyfs_cmd("umount", str(path)), capture_output=True, timeout=60)
    if is_mounted(path):
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True)


def polyfs(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(polyfs_cmd(*args), capture_output=True, text=True, timeout=timeout)


def fstype(path: Path) -> str | None:
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if parts[1] == str(path):
                return parts[2]
    return None


def test_views_given_with_commas_mount_those_views(store, mp):
    """``-o views=zarr,n5`` failed after the fork: "fuse_session_new() failed (-o n5: ...)"."""
    res = polyfs("mount", str(store), str(mp), "-o", "views=zarr,n5")
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(mp)) == ["n5", "zarr"]
    assert polyfs("umount", str(mp)).returncode == 0 and not is_mounted(mp)


def test_subtype_is_refused_and_nothing_is_mounted(store, mp):
    """``-o subtype=bar`` mounted as fuse.bar, which ``polyfs umount`` then refused to touch."""
    res = polyfs("mount", str(store), str(mp), "-o", "subtype=bar")
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "subtype" in res.stderr and not is_mounted(mp)


def test_mount_helper_takes_an_fstab_comment(store, mp):
    """An fstab line with ``comment=...`` (util-linux bookkeeping) failed in libfuse."""
    helper = REPO / ".venv" / "bin" / "mount.polyfs"
    if not helper.exists():
        pytest.skip("no mount.polyfs in .venv")
    res = subprocess.run([str(helper), str(store), str(mp), "-o", "rw,comment=x-gvfs-show,_netdev"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert fstype(mp) == "fuse.polyfs" and "a.h5" in os.listdir(mp / "hdf5")


def test_a_domain_ttl_of_years_still_lists_the_domains(store, mp):
    """``domain_ttl`` is validated as any finite number >= 0, but at >= 1e9 s the first listing
    never happened (the list's "last read" started at -1e9): every view was empty."""
    res = polyfs("mount", str(store), str(mp), "-o", "domain_ttl=2e9")
    assert res.returncode == 0, res.stderr
    assert os.listdir(mp / "hdf5") == ["a.h5"]
