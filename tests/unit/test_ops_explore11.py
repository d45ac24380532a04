"""Round 11, operator experience without a kernel: mount options and config files are
validated before anything mounts, the mount helper and the systemd unit's lines parse,
``check --repair`` never deletes a damaged domain's data, ``info`` names what it cannot read."""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from polyfs import check, config, daemon
from polyfs.check import check_store
from polyfs.cli import build_parser, main
from polyfs.codecs.registry import DEFLATE, Filter
from polyfs.errors import InvalidInput
from polyfs.inspect import info_text
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.mounthelper import parse as helper_parse
from polyfs.store import open_store

REPO = Path(__file__).resolve().parents[2]


def args(**kw):
    base = dict(store="s", mountpoint="m", foreground=False, read_only=False, options=[], log_level=None,
                log_file=None, config=None)
    base.update(kw)
    return SimpleNamespace(**base)


def load_o(*options: str) -> config.MountConfig:
    return config.load(args(options=list(options)), environ={})


def load_toml(tmp_path, body: str) -> config.MountConfig:
    f = tmp_path / "c.toml"
    head = '[mount]\nstore = "s"\n' + ('' if body.startswith("mountpoint") else 'mountpoint = "m"\n')
    f.write_text(head + body)
    return config.load(args(store=None, mountpoint=None, config=str(f)), environ={})


# -- -o values no mount can use are refused before mounting -------------------------------
@pytest.mark.parametrize("option", [
    "threads=0",  # hung every request of the mount (a CapacityLimiter of 0)
    "threads=-3",  # a ValueError from trio inside the daemon
    "tiff_level=42", "tiff_level=-1",  # mounted; every transcoded TIFF read then failed
    "write_buffer_mb=-1", "cache_mb=-5", "read_ahead_kb=-5", "shard_max_chunks=0",
    "domain_ttl=-1", "entry_timeout=nan", "entry_timeout=-1", "cache_gb=inf",
])
def test_out_of_range_values_are_refused_by_name(option):
    name = option.split("=")[0]
    with pytest.raises(InvalidInput, match=rf"option {name}: must be"):
        load_o(option)


def test_edge_values_that_mean_something_still_mount():
    cfg = load_o("write_buffer_mb=0,cache_mb=0,read_ahead_kb=0,max_background=0,domain_ttl=0,"
                 "entry_timeout=0,tiff_level=9,threads=1,cache_gb=0")
    assert (cfg.threads, cfg.tiff_level, cfg.domain_ttl) == (1, 9, 0.0)


def test_a_numeric_option_without_a_value_is_refused():
    with pytest.raises(InvalidInput, match="cache_mb"):  # was cache_mb = int(True) = 1 MiB
        load_o("cache_mb")


@pytest.mark.parametrize("views", ["bogus", "zarr:bogus", ":"])
def test_unknown_views_are_refused(views):
    with pytest.raises(InvalidInput, match="option views"):  # was a mount with no view at all
        load_o(f"views={views}")
    assert load_o("views=zarr:n5").view_names() == ["zarr", "n5"]


def test_flag_options_take_a_boolean_value():
    assert load_o("unsharded=0").zarr_sharded is True  # was: any value turned sharding off
    assert load_o("unsharded").zarr_sharded is False
    assert load_o("ro=0").read_only is False  # was: read-only whatever the value
    with pytest.raises(InvalidInput, match="unsharded"):
        load_o("unsharded=maybe")


# -- config files --------------------------------------------------------------------------
def test_config_typo_names_the_nearest_option(tmp_path):
    with pytest.raises(InvalidInput, match=r"unknown option 'cahce_mb'; did you mean 'cache_mb'"):
        load_toml(tmp_path, "cahce_mb = 5\n")


@pytest.mark.parametrize("body, word", [
    ("options = 5\n", "options"),  # was a TypeError traceback
    ("fuse_options = 5\n", "fuse_options"),
    ("cache_mb = true\n", "cache_mb"),  # was 1 MiB
    ("cache_mb = 1.5\n", "cache_mb"),  # was silently 1
    ("mountpoint = 5\n", "mountpoint"),
    ("read_only = \"perhaps\"\n", "read_only"),
])
def test_config_wrong_types_are_one_line_naming_the_file(tmp_path, body, word):
    with pytest.raises(InvalidInput, match=rf"c\.toml: option {word}"):
        load_toml(tmp_path, body)


def test_config_mount_not_a_table(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("mount = 5\n")
    with pytest.raises(InvalidInput, match="must be a table"):  # was a TypeError traceback
        config.load(args(config=str(f)), environ={})


def test_config_takes_the_o_names_the_readme_promises(tmp_path):
    cfg = load_toml(tmp_path, "unsharded = true\nro = true\nviews = \"zarr:tiff\"\n")
    assert cfg.zarr_sharded is False and cfg.read_only and cfg.view_names() == ["zarr", "tiff"]


def test_environment_errors_name_the_environment():
    with pytest.raises(InvalidInput, match="environment: option cache_mb"):
        config.load(args(), environ={"POLYFS_CACHE_MB": "abc"})


# -- the daemon's pieces -------------------------------------------------------------------
def test_a_non_ascii_store_path_is_a_valid_fuse_option():
    cfg = config.load(args(store="/srv/données", mountpoint="/mnt/x"), environ={})
    for opt in daemon.fuse_options(cfg):
        opt.encode("us-ascii")  # what pyfuse3 does with every option (was UnicodeEncodeError)
    fsname = next(o for o in daemon.fuse_options(cfg) if o.startswith("fsname="))
    assert fsname.encode("us-ascii") == "fsname=/srv/données".encode()


def test_mountinfo_paths_are_unescaped_without_mojibake():
    assert daemon._unescape("/mnt/a\\040b\\134c/ü") == "/mnt/a b\\c/ü"  # unicode_escape made 'Ã¼'


def test_mount_helper_with_a_dangling_o_is_a_usage_line():
    with pytest.raises(SystemExit, match="usage"):  # was an IndexError traceback
        helper_parse(["/srv/a", "/mnt/a", "-o"])
    with pytest.raises(SystemExit, match="usage"):
        helper_parse(["/srv/a", "/mnt/a", "-t"])
    assert helper_parse(["/srv/a", "/mnt/a", "-n", "-o", "ro"]) == (["mount", "/srv/a", "/mnt/a", "-o", "ro"], False)


def test_version(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    assert ei.value.code == 0 and capsys.readouterr().out.startswith("polyfs ")


def test_umount_takes_the_mountpoint_from_the_config(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text(f'[mount]\nstore = "/srv/a"\nmountpoint = "{tmp_path / "nowhere"}"\n')
    assert main(["umount", "--if-dead", "--config", str(f)]) == 0  # nothing mounted: fine
    assert main(["umount", "--config", str(f)]) == 1
    assert "nowhere is not mounted" in capsys.readouterr().err
    assert main(["umount"]) == 1
    assert "mountpoint" in capsys.readouterr().err


def test_systemd_unit_clears_a_dead_mount_after_the_daemon_stops():
    """A crashed daemon leaves a dead mountpoint every restart refused: ExecStopPost clears it."""
    unit = (REPO / "systemd" / "polyfs@.service").read_text()
    line = next(l for l in unit.splitlines() if l.startswith("ExecStopPost="))
    argv = line.split("=", 1)[1].lstrip("-").split()
    assert argv[0] == "/usr/local/bin/polyfs"
    parsed = build_parser().parse_args([a.replace("%i", "x") for a in argv[1:]])
    assert parsed.command == "umount" and parsed.if_dead and parsed.config == "/etc/polyfs/x.toml"


# -- check and info on damaged stores --------------------------------------------------------
def make_store(tmp_path):
    url = str(tmp_path / "store")
    cat = Catalog(open_store(url, create=True))
    with DomainWriter(cat, "/a.h5") as w:
        d = w.add_dataset(w.root, "d", T.IntType(2, True), Shape("simple", (20, 20)), (8, 8), [Filter(DEFLATE, (4,))])
        w.write_array(d, np.arange(400, dtype="i2").reshape(20, 20))
    return url


def digest(root: str) -> dict[str, str]:
    out = {}
    for sub, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(sub, name)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("damage", [
    lambda body: "[]",  # a .domain.json that is not an object: its data looked unreachable
    lambda body: re.sub(r'"root": "g-(\w)', lambda m: '"root": "g-' + "0123456789abcdef"[
        ("0123456789abcdef".index(m.group(1)) + 1) % 16], body),  # a hand-edited root id
    lambda body: re.sub(r'"root": "[^"]*"', '"root": "garbage"', body),
])
def test_repair_never_deletes_the_data_of_a_damaged_domain(tmp_path, monkeypatch, damage):
    monkeypatch.setattr(check, "ORPHAN_SETTLE", 0.0)
    url = make_store(tmp_path)
    dj = Path(url) / "a.h5" / ".domain.json"
    dj.write_text(damage(dj.read_text()))
    before = digest(url)
    report = check_store(url, repair=True)
    assert report.problems and not report.repaired
    assert digest(url) == before  # was: every chunk of /a.h5 deleted as unreachable


def test_info_and_check_name_a_store_path_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "file.h5"
    f.write_bytes(b"\x89HDF\r\n\x1a\n")
    for cmd in (["info", str(f)], ["check", str(f)]):
        assert main(cmd) == 1
        err = capsys.readouterr().err.strip()
        assert "not a directory" in err and "does not exist" not in err and len(err.splitlines()) == 1


def test_info_lists_a_domain_whose_json_does_not_parse(tmp_path):
    url = make_store(tmp_path)
    (Path(url) / "a.h5" / ".domain.json").write_text("{bad")
    text = info_text(url)
    assert "/a.h5" in text and "unreadable" in text  # was "no domains in ..."


def test_an_unopenable_log_file_is_one_clear_line_before_forking(tmp_path, capsys):
    """The daemon opened it after the fork, with nowhere to say why it could not: the user
    saw only "the daemon exited before the mount was ready"."""
    code = main(["mount", str(tmp_path), str(tmp_path / "no-mountpoint"), "--log-file",
                 str(tmp_path / "no-dir" / "polyfs.log")])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.startswith("polyfs: error: log file") and "No such file" in err, err
