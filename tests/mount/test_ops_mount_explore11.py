"""Round 11, operator experience on real mounts: non-ASCII paths, ``polyfs umount`` leaves
other file systems alone, the systemd unit's lines recover from a crashed daemon, signals
leave one log line, bad option values never reach the kernel."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import fuse_available, is_mounted, polyfs_cmd
from polyfs.codecs.registry import DEFLATE, Filter
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

pytestmark = pytest.mark.mount
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _needs_fuse():
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")


def make_store(path: Path) -> Path:
    cat = Catalog(open_store(str(path), create=True))
    with DomainWriter(cat, "/a.h5") as w:
        d = w.add_dataset(w.root, "img", T.IntType(2, False, "<"), Shape("simple", (20, 30)), (10, 10),
                          [Filter(DEFLATE, (4,))])
        w.write_array(d, np.arange(600, dtype="u2").reshape(20, 30))
    return path


def polyfs(*args, timeout=60):
    return subprocess.run(polyfs_cmd(*args), capture_output=True, text=True, timeout=timeout)


def wait_until(pred, timeout=20.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def cleanup():
    paths: list[Path] = []
    yield paths
    for p in paths:
        if is_mounted(p):
            subprocess.run(["fusermount3", "-u", "-z", str(p)], capture_output=True)


def test_non_ascii_store_and_mountpoint(tmp_path, cleanup):
    """A store under /srv/données failed with a UnicodeEncodeError, and umount of /mnt/ü
    said "not mounted" (mountinfo decoded as unicode_escape)."""
    store = make_store(tmp_path / "données sp")
    mp = tmp_path / "mnt ü"
    mp.mkdir()
    cleanup.append(mp)
    res = polyfs("mount", str(store), str(mp))
    assert res.returncode == 0, res.stderr
    assert "a.h5" in os.listdir(mp / "hdf5")
    res = polyfs("umount", str(mp))
    assert res.returncode == 0, res.stderr
    assert not is_mounted(mp)


def test_umount_leaves_other_file_systems_alone(tmp_path):
    """Its last resort is ``umount -l``: a typo must not detach a real file system."""
    mp = tmp_path / "tmpfs"
    mp.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "none", str(mp)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        res = polyfs("umount", str(mp))
        assert res.returncode == 1 and "not a polyfs" in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
        assert is_mounted(mp)  # was: lazily unmounted
    finally:
        subprocess.run(["umount", str(mp)], capture_output=True)


def test_bad_thread_count_is_refused_before_mounting(tmp_path):
    """threads=0 mounted, and every request to the mount then hung for ever."""
    store = make_store(tmp_path / "store")
    mp = tmp_path / "mp"
    mp.mkdir()
    for extra in ([], ["-f"]):
        res = polyfs("mount", str(store), str(mp), "-o", "threads=0", *extra, timeout=30)
        assert res.returncode == 1 and res.stderr.strip().startswith("polyfs: error: option threads")
        assert not is_mounted(mp)


def test_systemd_lines_recover_from_a_killed_daemon(tmp_path, cleanup):
    """ExecStart killed -9 leaves a dead mount; ExecStopPost clears it, so Restart= works."""
    store = make_store(tmp_path / "store")
    mp = tmp_path / "mp"
    mp.mkdir()
    cleanup.append(mp)
    conf = tmp_path / "x.toml"
    conf.write_text(f'[mount]\nstore = "{store}"\nmountpoint = "{mp}"\n')
    unit = (REPO / "systemd" / "polyfs@.service").read_text()

    def line(key: str) -> list[str]:
        text = next(l for l in unit.splitlines() if l.startswith(key + "=")).split("=", 1)[1].lstrip("-")
        return text.replace("/etc/polyfs/%i.toml", str(conf)).split()[1:]

    proc = subprocess.Popen(polyfs_cmd(*line("ExecStart")), stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: is_mounted(mp) and "hdf5" in os.listdir(mp))
        assert polyfs(*line("ExecStopPost")).returncode == 0
        assert "hdf5" in os.listdir(mp)  # a live mount is left alone
        proc.kill()
        proc.wait(timeout=30)
        assert is_mounted(mp)  # dead: a restart is refused
        assert "dead FUSE mount" in polyfs(*line("ExecStart")).stderr
        res = polyfs(*line("ExecStopPost"))
        assert res.returncode == 0, res.stderr
        assert not is_mounted(mp)
        assert polyfs(*line("ExecStopPost")).returncode == 0  # after a clean stop: nothing to do
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sighup_unmounts_with_a_line_in_the_default_log(tmp_path, cleanup):
    store = make_store(tmp_path / "store")
    mp = tmp_path / "mp"
    mp.mkdir()
    cleanup.append(mp)
    log = tmp_path / "log"
    res = polyfs("mount", str(store), str(mp), "--log-file", str(log))  # default level: warning
    assert res.returncode == 0, res.stderr
    pid = next(int(p) for p in os.listdir("/proc") if p.isdigit() and _serves(int(p), mp))
    os.kill(pid, signal.SIGHUP)
    assert wait_until(lambda: not is_mounted(mp))
    assert wait_until(lambda: "SIGHUP" in log.read_text()), log.read_text()  # was: an empty log


def _serves(pid: int, mp: Path) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"mount" in cmd and os.fsencode(str(mp)) in cmd


def test_a_non_empty_mountpoint_is_mounted_with_a_warning(tmp_path, cleanup):
    store = make_store(tmp_path / "store")
    mp = tmp_path / "mp"
    mp.mkdir()
    (mp / "precious.txt").write_text("x")
    cleanup.append(mp)
    res = polyfs("mount", str(store), str(mp))
    assert res.returncode == 0, res.stderr
    assert "not empty" in res.stderr and res.stderr.startswith("polyfs: warning:"), res.stderr
    assert polyfs("umount", str(mp)).returncode == 0
    assert (mp / "precious.txt").read_text() == "x"
