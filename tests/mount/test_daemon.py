"""Tier 3: the daemon's lifecycle on real FUSE mounts."""
from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import is_mounted, polyfs_cmd
from polyfs.codecs.registry import DEFLATE, Filter
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

pytestmark = pytest.mark.mount
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store_dir(tmp_path):
    path = tmp_path / "store"
    cat = Catalog(open_store(str(path), create=True))
    with DomainWriter(cat, "/home/alice/brain.h5") as w:
        d = w.add_dataset(w.root, "img", T.IntType(2, False, ">"), Shape("simple", (40, 50)), (16, 16),
                          [Filter(DEFLATE, (4,))])
        w.write_array(d, np.arange(2000, dtype="u2").reshape(40, 50))
    return path


def polyfs(*args, env=None, timeout=60):
    return subprocess.run(polyfs_cmd(*args), capture_output=True, text=True, timeout=timeout, env=env)


def daemon_pid(log: Path) -> int:
    m = re.search(r"polyfs\[(\d+)\]", log.read_text())
    assert m, log.read_text()
    return int(m.group(1))


def wait_until(pred, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_mount_lists_views_and_refuses_writes(mount_store, store_dir):
    m = mount_store(str(store_dir))
    names = os.listdir(m.path)
    assert names  # one directory per available view
    for view in names:
        assert (m.path / view).is_dir()
    # files outside a domain are refused (the HDF5 view takes writes only to a domain's file)
    with pytest.raises(OSError) as ei:
        (m.path / "hdf5" / "new-file").write_bytes(b"x")
    assert ei.value.errno == errno.EPERM
    with pytest.raises(OSError) as ei:
        (m.path / "zarr" / "new-file").write_bytes(b"x")
    assert ei.value.errno == errno.EPERM
    with pytest.raises(OSError) as ei:
        os.mkdir(m.path / "zarr" / "not-a-domain.n5")  # another view's domain name (other names: folders)
    assert ei.value.errno == errno.EPERM
    ro = mount_store(str(store_dir), "ro")
    for view in names:
        with pytest.raises(OSError) as ei:
            (ro.path / view / "new-file").write_bytes(b"x")
        assert ei.value.errno == errno.EROFS
        with pytest.raises(OSError) as ei:
            os.mkdir(ro.path / view / "new.zarr")
        assert ei.value.errno == errno.EROFS


def test_read_only_flag(mount_store, store_dir):
    m = mount_store(str(store_dir))
    ro_target = m.path.parent / "ro"
    ro_target.mkdir()
    res = polyfs("mount", str(store_dir), str(ro_target), "--read-only")
    try:
        assert res.returncode == 0, res.stderr
        with open("/proc/self/mountinfo") as f:
            line = next(l for l in f if l.split()[4] == str(ro_target))
        assert "ro" in line.split()[5].split(",")
    finally:
        polyfs("umount", str(ro_target))


@pytest.mark.parametrize("case", ["bad-store", "busy", "file", "missing-mountpoint", "unknown-option"])
def test_mount_errors_are_one_clear_line(mount_store, store_dir, tmp_path, case):
    if case == "unknown-option":  # libfuse only says "fuse_session_new() failed"
        mp = tmp_path / "mp"
        mp.mkdir()
        args, word = [str(store_dir), str(mp), "-o", "bogus=1"], "-o bogus=1"
    elif case == "bad-store":
        args, word = [str(tmp_path / "no-such-store"), str(tmp_path)], "store"
    elif case == "busy":
        m = mount_store(str(store_dir))
        args, word = [str(store_dir), str(m.path)], "busy"
    elif case == "file":
        f = tmp_path / "plain-file"
        f.write_text("x")
        args, word = [str(store_dir), str(f)], "not a directory"
    else:
        args, word = [str(store_dir), str(tmp_path / "nowhere")], "does not exist"
    for extra in ([], ["-f"]):
        res = polyfs("mount", *args, *extra)
        assert res.returncode != 0
        lines = res.stderr.strip().splitlines()
        if case == "unknown-option":  # libfuse's own line ("fuse: unknown option(s)") comes first
            lines = lines[-1:]
        assert len(lines) == 1 and lines[0].startswith("polyfs: error:") and word in lines[0], res.stderr


def test_max_background_is_raised_through_fusectl(mount_store, store_dir, tmp_path):
    m = mount_store(str(store_dir), "max_background=40")
    dev = os.stat(m.path).st_dev
    conn = f"/sys/fs/fuse/connections/{os.minor(dev)}"
    assert open(f"{conn}/max_background").read().strip() == "40", m.log_text()
    assert open(f"{conn}/congestion_threshold").read().strip() == "30"
    res = polyfs("mount", str(store_dir), str(tmp_path), "-o", "max_background=-1")
    assert res.returncode != 0 and "max_background" in res.stderr


def test_relative_paths_mount_in_the_background(store_dir, tmp_path):
    """The daemon changes to / after forking: relative store, mountpoint and log file
    paths mean the caller's working directory."""
    (tmp_path / "mp").mkdir()
    shutil.copytree(store_dir, tmp_path / "st")
    res = subprocess.run(polyfs_cmd("mount", "st", "mp", "--log-file", "daemon.log"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    try:
        assert res.returncode == 0, res.stderr
        assert sorted(os.listdir(tmp_path / "mp")) and (tmp_path / "daemon.log").exists()
    finally:
        polyfs("umount", str(tmp_path / "mp"))
    assert not is_mounted(tmp_path / "mp")


def test_no_dev_fuse(store_dir, tmp_path):
    if not shutil.which("unshare") or os.geteuid() != 0:
        pytest.skip("needs unshare and root")
    mp = tmp_path / "mp"
    mp.mkdir()
    fake = tmp_path / "not-fuse"
    fake.write_text("")
    script = f"mount --bind {fake} /dev/fuse && exec {sys.executable} -m polyfs mount {store_dir} {mp}"
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode != 0
    assert res.stderr.strip().count("\n") == 0 and "/dev/fuse" in res.stderr


def test_killed_daemon_is_cleared_by_lazy_umount(mount_store, store_dir):
    m = mount_store(str(store_dir))
    pid = daemon_pid(m.log)
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2])
    with pytest.raises(OSError) as ei:
        os.listdir(m.path)
    assert ei.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    res = polyfs("mount", str(store_dir), str(m.path))
    assert res.returncode != 0 and "umount" in res.stderr
    res = polyfs("umount", str(m.path))
    assert res.returncode == 0, res.stderr
    assert not is_mounted(m.path)
    assert polyfs("mount", str(store_dir), str(m.path)).returncode == 0  # usable again
    assert os.listdir(m.path)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_unmount_cleanly(mount_store, store_dir, sig):
    m = mount_store(str(store_dir))
    pid = daemon_pid(m.log)
    os.kill(pid, sig)
    assert wait_until(lambda: not is_mounted(m.path))
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"))
    assert "unmounted" in m.log_text()


def test_foreground_with_systemd_notify(store_dir, tmp_path):
    mp = tmp_path / "mp"
    mp.mkdir()
    sock_path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(sock_path)
    srv.settimeout(30)
    env = {**os.environ, "NOTIFY_SOCKET": sock_path}
    proc = subprocess.Popen(polyfs_cmd("mount", "-f", str(store_dir), str(mp)), env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        msg = srv.recv(4096).decode()
        assert "READY=1" in msg
        assert is_mounted(mp) and os.listdir(mp)  # ready means served
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not is_mounted(mp)
        assert "STOPPING=1" in srv.recv(4096).decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.close()
        if is_mounted(mp):
            polyfs("umount", str(mp))


def test_mount_helper_and_fstab(store_dir, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    res = subprocess.run([str(REPO / "scripts" / "install")], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    mp = tmp_path / "mp"
    mp.mkdir()
    try:
        res = subprocess.run(["mount", "-t", "fuse.polyfs", str(store_dir), str(mp), "-o", "allow_other"],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert is_mounted(mp) and os.listdir(mp)
        assert polyfs("umount", str(mp)).returncode == 0
        fstab = tmp_path / "fstab"
        fstab.write_text(f"{store_dir} {mp} fuse.polyfs defaults,noauto,allow_other,entry_timeout=2 0 0\n")
        res = subprocess.run(["mount", "-T", str(fstab), str(mp)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert is_mounted(mp) and os.listdir(mp)
    finally:
        if is_mounted(mp):
            polyfs("umount", str(mp))


def test_systemd_unit_command_line(store_dir, tmp_path):
    """The unit's ExecStart, with its %i config, mounts and reports READY=1 (Type=notify)."""
    unit = (REPO / "systemd" / "polyfs@.service").read_text()
    assert "Type=notify" in unit
    exec_start = next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart="))
    mp = tmp_path / "mp"
    mp.mkdir()
    conf = tmp_path / "arrays.toml"
    conf.write_text(f'[mount]\nstore = "{store_dir}"\nmountpoint = "{mp}"\noptions = "entry_timeout=2"\n')
    argv = exec_start.replace("/etc/polyfs/%i.toml", str(conf)).split()
    assert argv[0] == "/usr/local/bin/polyfs" and argv[1:3] == ["mount", "--foreground"]
    sock_path = str(tmp_path / "notify.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(sock_path)
    srv.settimeout(30)
    proc = subprocess.Popen(polyfs_cmd(*argv[1:]), env={**os.environ, "NOTIFY_SOCKET": sock_path},
                            stderr=subprocess.PIPE, text=True)
    try:
        assert "READY=1" in srv.recv(4096).decode()
        assert is_mounted(mp) and "zarr" in os.listdir(mp)
        proc.send_signal(signal.SIGTERM)  # what `systemctl stop` does
        assert proc.wait(timeout=30) == 0 and not is_mounted(mp)
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.close()
        if is_mounted(mp):
            polyfs("umount", str(mp))
