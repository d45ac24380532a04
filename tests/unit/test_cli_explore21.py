"""Round 21, an operator following README.md: ``-o`` lists as people type them (``views=zarr,n5``),
typos of polyfs options named before forking, ``subtype=`` (which made the mount invisible to
``polyfs umount``), fstab's ``comment=``, the systemd unit's failure modes and
``scripts/install`` into a ``DESTDIR``."""
from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from argparse import Namespace
from pathlib import Path

import pytest

from polyfs import config
from polyfs.cli import main
from polyfs.errors import InvalidInput
from polyfs.mounthelper import parse as helper_parse

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "polyfs@.service"
INSTALL = REPO / "scripts" / "install"


def load(*options: str) -> config.MountConfig:
    return config.load(Namespace(store="/srv/s", mountpoint="/mnt/m", options=list(options)), environ={})


# -- -o as operators write it -------------------------------------------------------------------
def test_views_listed_with_commas_like_every_other_list():
    """``-o views=zarr,n5`` passed ``n5`` to libfuse, and the mount failed after the fork with
    "fuse_session_new() failed (-o n5: neither a polyfs nor a FUSE option)"."""
    cfg = load("views=zarr,n5,allow_other")
    assert cfg.view_names() == ["zarr", "n5"] and cfg.fuse_options == ["allow_other"]
    assert load("views=zarr:n5,tiff").view_names() == ["zarr", "n5", "tiff"]


def test_views_with_commas_in_a_config_file_options_string(tmp_path):
    conf = tmp_path / "m.toml"
    conf.write_text('[mount]\nstore = "/srv/s"\nmountpoint = "/mnt/m"\noptions = "views=hdf5,tiff"\n')
    cfg = config.load(Namespace(config=str(conf)), environ={})
    assert cfg.view_names() == ["hdf5", "tiff"] and cfg.fuse_options == []


def test_a_bare_view_name_is_one_line_before_mounting(capsys):
    with pytest.raises(InvalidInput, match=r"-o n5: a view name.*views=zarr:n5"):
        load("allow_other,n5")
    assert main(["mount", "/nonexistent-store", "/nonexistent-mp", "-o", "hdf5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a view name" in err[0], err


@pytest.mark.parametrize("typo, meant", [("write_bufer_mb=5", "write_buffer_mb"), ("shard_max_chunk=8", "shard_max_chunks"),
                                         ("cache_md=64", "cache_mb"), ("entry_timout=1", "entry_timeout")])
def test_a_typo_of_a_polyfs_option_names_the_option(typo, meant):
    """A misspelt polyfs option went to libfuse, which said only "fuse_session_new() failed"."""
    with pytest.raises(InvalidInput, match=rf"did you mean {meant!r}"):
        load(typo)


@pytest.mark.parametrize("fuse_opt", ["allow_other", "allow_root", "default_permissions", "auto_unmount",
                                      "fsname=foo", "max_idle_threads=4", "noatime", "nodev", "sync", "user"])
def test_real_fuse_options_are_not_mistaken_for_typos(fuse_opt):
    cfg = load(fuse_opt)
    assert cfg.fuse_options in ([fuse_opt], [])  # user: fstab bookkeeping, dropped


def test_subtype_is_refused_because_umount_could_not_find_the_mount():
    """``-o subtype=x`` mounted as ``fuse.x``: ``polyfs umount`` then refused it ("a fuse.x
    mount, not a polyfs one") and mount(8)/fstab could not match it."""
    with pytest.raises(InvalidInput, match=r"-o subtype: .*fuse\.polyfs"):
        load("subtype=bar")


def test_fstab_comment_option_is_not_passed_to_fuse():
    """``comment=`` is fstab bookkeeping (util-linux, like x-*): libfuse refused the mount."""
    args, _fake = helper_parse(["/srv/s", "/mnt/m", "-o", "rw,comment=x-gvfs-show,allow_other"])
    cfg = config.load(build_args(args), environ={})
    assert cfg.fuse_options == ["allow_other"]


def build_args(argv: list[str]) -> Namespace:
    from polyfs.cli import build_parser

    return build_parser().parse_args(argv)


# -- the systemd unit ---------------------------------------------------------------------------
def unit_values() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in UNIT.read_text().splitlines():
        m = re.match(r"^([A-Za-z]+)=(.*)$", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_a_permanently_failing_start_does_not_restart_forever():
    """Restart=on-failure with RestartSec=5 never reached the default start limit (5 starts in
    10 s): a bad option in /etc/polyfs/<name>.toml restarted the mount every 5 s for ever."""
    v = unit_values()
    assert v.get("Restart") == "on-failure"
    restart_sec = float(v.get("RestartSec", "0.1"))
    interval = float(v.get("StartLimitIntervalSec", "10"))
    burst = int(v.get("StartLimitBurst", "5"))
    assert burst * restart_sec < interval, (burst, restart_sec, interval)


def test_a_misspelt_instance_fails_instead_of_being_skipped():
    """ConditionPathExists made ``systemctl enable --now polyfs@typo`` succeed with nothing
    mounted; an Assert fails the start naming the missing config file."""
    v = unit_values()
    assert "ConditionPathExists" not in v
    assert v.get("AssertPathExists") == "/etc/polyfs/%i.toml"


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze")
    inst = tmp_path / "polyfs@arrays.service"
    # verify checks that ExecStart's binary exists: point it at this checkout's, since
    # /usr/local/bin/polyfs is there only after scripts/install
    here = Path(sys.executable).with_name("polyfs")
    assert here.exists(), here
    (tmp_path / "polyfs@.service").write_text(UNIT.read_text().replace("/usr/local/bin/polyfs", str(here)))
    inst.symlink_to(tmp_path / "polyfs@.service")
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(inst)], capture_output=True, text=True,
                         timeout=60)
    problems = [ln for ln in res.stderr.splitlines() if "polyfs@" in ln]
    assert res.returncode == 0 and not problems, res.stderr


# -- scripts/install ----------------------------------------------------------------------------
def test_install_into_a_destdir_links_what_the_unit_and_mount8_run(tmp_path):
    """README's install step, tried without touching the system: the old script had no DESTDIR
    and wrote /usr/local/bin and /usr/sbin whatever it was given."""
    assert "DESTDIR" in INSTALL.read_text()  # never run a script that would write /usr here
    if not (REPO / ".venv" / "bin" / "mount.polyfs").exists():
        pytest.skip("no .venv (scripts/setup not run)")
    dest = tmp_path / "root"
    res = subprocess.run([str(INSTALL), "--no-setup"], env={**os.environ, "DESTDIR": str(dest)},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    exec_start = unit_values()["ExecStart"].split()[0]
    for path in (exec_start, "/usr/sbin/mount.polyfs", "/usr/sbin/mount.fuse.polyfs"):
        target = dest / path.lstrip("/")
        assert target.is_symlink() and os.access(target, os.X_OK), path
    assert (dest / "etc/systemd/system/polyfs@.service").read_text() == UNIT.read_text()
    assert (dest / "etc/polyfs").is_dir()
    version = subprocess.run([str(dest / exec_start.lstrip("/")), "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("polyfs ")


def test_install_refuses_a_non_root_user_and_unknown_arguments_in_one_line(tmp_path):
    assert "DESTDIR" in INSTALL.read_text()
    res = subprocess.run([str(INSTALL), "--bogus"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    if os.geteuid() != 0:
        pytest.skip("needs root to try as another user")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")

    def drop() -> None:
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    env = {k: v for k, v in os.environ.items() if k != "DESTDIR"}
    where = Path(tempfile.mkdtemp(prefix="polyfs-install-"))  # pytest's tmp_path is root-only
    try:
        (where / "scripts").mkdir()
        shutil.copy(INSTALL, where / "scripts" / "install")
        for p in (where, where / "scripts", where / "scripts" / "install"):
            p.chmod(0o755)
        res = subprocess.run(["bash", str(where / "scripts" / "install"), "--no-setup"], env=env,
                             capture_output=True, text=True, timeout=60, preexec_fn=drop, cwd="/")
    finally:
        shutil.rmtree(where)
    assert res.returncode == 1 and "run as root" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
