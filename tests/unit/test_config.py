"""Mount options: config file < environment < flags; -o splitting."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from polyfs import config
from polyfs.errors import InvalidInput
from polyfs.mounthelper import parse as helper_parse


def args(**kw):
    base = dict(store=None, mountpoint=None, foreground=False, read_only=False, options=[], log_level=None,
                log_file=None, config=None)
    base.update(kw)
    return SimpleNamespace(**base)


def test_precedence(tmp_path):
    f = tmp_path / "polyfs.toml"
    f.write_text('[mount]\nstore = "/srv/a"\nmountpoint = "/mnt/a"\nshard_max_chunks = 64\n'
                 'tiff_level = 2\noptions = "allow_other"\n')
    cfg = config.load(args(config=str(f)), environ={"POLYFS_TIFF_LEVEL": "4"})
    assert (cfg.store, cfg.mountpoint, cfg.shard_max_chunks, cfg.tiff_level) == ("/srv/a", "/mnt/a", 64, 4)
    assert cfg.fuse_options == ["allow_other"]
    cfg = config.load(args(config=str(f), store="/srv/b", options=["unsharded,tiff_level=9,ro,noatime"]),
                      environ={})
    assert cfg.store == "/srv/b" and not cfg.zarr_sharded and cfg.tiff_level == 9 and cfg.read_only
    assert cfg.fuse_options == ["allow_other", "noatime"]
    vo = cfg.view_options()
    assert vo.tiff_deflate_level == 9 and vo.zarr_sharded is False


def test_bad_options(tmp_path):
    with pytest.raises(InvalidInput, match="max_read"):
        config.load(args(store="s", mountpoint="m", options=["max_read=131072"]), environ={})
    with pytest.raises(InvalidInput, match="shard_max_chunks"):
        config.load(args(store="s", mountpoint="m", options=["shard_max_chunks=lots"]), environ={})
    with pytest.raises(InvalidInput, match="required"):
        config.load(args(), environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[mount\n")
    with pytest.raises(InvalidInput, match="bad.toml"):
        config.load(args(config=str(bad)), environ={})
    bad.write_text('[mount]\nnonsense = 1\n')
    with pytest.raises(InvalidInput, match="nonsense"):
        config.load(args(config=str(bad)), environ={})


def test_fstab_bookkeeping_options_are_dropped():
    cfg = config.load(args(store="s", mountpoint="m", options=["defaults,noauto,_netdev,x-systemd.automount,allow_other"]),
                      environ={})
    assert cfg.fuse_options == ["allow_other"]


def test_shard_shape_option():
    cfg = config.load(args(store="s", mountpoint="m", options=["shard_shape=grp/d:8x8;x:4"]), environ={})
    assert cfg.view_options().shard_shape == {"/grp/d": [8, 8], "/x": [4]}
    with pytest.raises(InvalidInput, match="shard_shape"):
        config.load(args(store="s", mountpoint="m", options=["shard_shape=grp/d:8xq"]), environ={}).view_options()


def test_mount_helper_command_line():
    assert helper_parse(["/srv/s", "/mnt/x", "-o", "rw,allow_other", "-n"]) == \
        (["mount", "/srv/s", "/mnt/x", "-o", "rw,allow_other"], False)
    assert helper_parse(["/srv/s", "/mnt/x", "-f", "-t", "fuse.polyfs"])[1] is True


def test_relative_paths_are_made_absolute_before_the_daemon_forks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = config.load(args(store="st", mountpoint="mp", log_file="d.log",
                           options=["scratch_dir=scratch,cache_dir=cache"]), environ={})
    assert (cfg.store, cfg.mountpoint, cfg.log_file) == (str(tmp_path / "st"), str(tmp_path / "mp"),
                                                         str(tmp_path / "d.log"))
    assert (cfg.scratch_dir, cfg.cache_dir) == (str(tmp_path / "scratch"), str(tmp_path / "cache"))
    assert config.load(args(store="s3://b/p", mountpoint="/mnt/x"), environ={}).store == "s3://b/p"
