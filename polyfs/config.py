"""Mount and daemon options: config file < environment < command-line flags.

The config file is TOML with a ``[mount]`` table whose keys are the option
names below (``store``, ``options``, ``read_only``, ``shard_max_chunks``...).
Environment variables are ``POLYFS_<NAME>`` in upper case. ``-o`` takes a
comma-separated list mixing FUSE options (passed to the kernel) and polyfs
options (``name=value``, or a bare flag such as ``unsharded``).
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import InvalidInput
from .views.base import ViewOptions

# polyfs's own -o options: name -> (field, type)
_POLYFS_OPTIONS: dict[str, tuple[str, type]] = {
    "shard_max_chunks": ("shard_max_chunks", int),
    "unsharded": ("zarr_sharded", bool),  # flag: turns sharding off
    "sharded": ("zarr_sharded", bool),
    "zarr_numcodecs": ("zarr_numcodecs", bool),  # flag: numcodecs.* codecs instead of transcoding
    "tiff_level": ("tiff_level", int),
    "cache_mb": ("cache_mb", int),
    "cache_dir": ("cache_dir", str),  # chunk cache of a remote store (see store/chunkcache.py)
    "cache_gb": ("cache_gb", float),
    "read_ahead_kb": ("read_ahead_kb", int),
    "max_background": ("max_background", int),
    "entry_timeout": ("entry_timeout", float),
    "domain_ttl": ("domain_ttl", float),
    "threads": ("threads", int),
    "write_buffer_mb": ("write_buffer_mb", int),
    "scratch_dir": ("scratch_dir", str),
    "views": ("views", str),
    "shard_shape": ("shard_shape", str),
}

# FUSE options polyfs sets itself or that break pyfuse3 (DESIGN.md section 5)
_REJECTED_FUSE = {"max_read": "max_read= makes libfuse 3.14 refuse to mount under pyfuse3"}


@dataclass
class MountConfig:
    store: str = ""
    mountpoint: str = ""
    foreground: bool = False
    read_only: bool = False
    fuse_options: list[str] = field(default_factory=list)
    shard_max_chunks: int = 512
    shard_shape: str = ""  # "path:64x64x64;other/path:8x8" (per dataset, in chunks of the array)
    zarr_sharded: bool = True
    zarr_numcodecs: bool = False  # zero-copy numcodecs.* chains (zarr-python only) instead of spec codecs
    tiff_level: int = 0
    cache_mb: int = 256
    cache_dir: str = ""  # local chunk cache of an s3:// store; "" = /var/cache/polyfs or the XDG cache dir
    cache_gb: float = 10.0  # its bound (LRU); 0 turns it off
    read_ahead_kb: int = 1024  # measured: sequential reads peak here, and metadata scans over-read less
    max_background: int = 64  # asynchronous FUSE requests in flight (kernel default 12), via fusectl
    entry_timeout: float = 60.0  # kernel name/attribute caching; changes are pushed (fs/kernelcache.py)
    domain_ttl: float = 5.0
    threads: int = 16
    write_buffer_mb: int = 256  # daemon-wide memory for files being written; past it, scratch files
    scratch_dir: str = "/var/tmp"  # where writes past write_buffer_mb spill (unlinked temporary files)
    views: str = ""  # comma-separated subset of zarr,n5,hdf5,tiff,polyglot
    log_level: str = "warning"
    log_file: str = ""

    def view_options(self) -> ViewOptions:
        shapes: dict[str, list[int]] = {}
        for item in filter(None, (s.strip() for s in self.shard_shape.split(";"))):
            path, _, dims = item.rpartition(":")
            try:
                shapes["/" + path.strip().strip("/")] = [int(d) for d in dims.replace(",", "x").split("x")]
            except ValueError:
                raise InvalidInput(f"bad shard_shape entry {item!r} (want path:64x64x64)") from None
            if not path.strip() or any(d <= 0 for d in shapes["/" + path.strip().strip("/")]):
                raise InvalidInput(f"bad shard_shape entry {item!r} (want path:64x64x64)")
        return ViewOptions(shard_max_chunks=self.shard_max_chunks, shard_shape=shapes,
                           zarr_sharded=self.zarr_sharded, zarr_numcodecs=self.zarr_numcodecs,
                           tiff_deflate_level=self.tiff_level,
                           transcode_cache_bytes=self.cache_mb << 20)

    def view_names(self) -> list[str] | None:
        names = [v.strip() for v in self.views.split(",") if v.strip()]
        return names or None


def _coerce(name: str, value: Any, typ: type) -> Any:
    if typ is bool:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in ("1", "true", "yes", "on", ""):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise InvalidInput(f"option {name}: expected a boolean, got {value!r}")
    try:
        return typ(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"option {name}: expected {typ.__name__}, got {value!r}") from None


def _apply(cfg: MountConfig, values: dict[str, Any], source: str) -> None:
    types = {f.name: f.type for f in fields(MountConfig)}
    for key, value in values.items():
        if key == "options":
            apply_o_options(cfg, value if isinstance(value, str) else ",".join(value))
            continue
        if key not in types:
            raise InvalidInput(f"{source}: unknown option {key!r}")
        typ = {"bool": bool, "int": int, "float": float, "str": str}.get(str(types[key]), str)
        if key == "fuse_options":
            cfg.fuse_options.extend(value if isinstance(value, list) else str(value).split(","))
        else:
            setattr(cfg, key, _coerce(key, value, typ))


def apply_o_options(cfg: MountConfig, text: str) -> None:
    """Split one ``-o`` string into polyfs options and FUSE options."""
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, value = item.partition("=")
        if name in _REJECTED_FUSE:
            raise InvalidInput(f"-o {name}: {_REJECTED_FUSE[name]}")
        if name in _POLYFS_OPTIONS:
            attr, typ = _POLYFS_OPTIONS[name]
            if name == "unsharded":
                cfg.zarr_sharded = False
            elif name == "views":
                cfg.views = value.replace(":", ",")
            else:
                setattr(cfg, attr, _coerce(name, value if eq else True, typ))
        elif name in ("ro", "rw"):
            cfg.read_only = name == "ro"
        elif name in ("defaults", "auto", "noauto", "user", "nouser", "_netdev", "nofail", "users"):
            continue  # fstab/mount(8) bookkeeping, not for FUSE
        elif name.startswith("x-"):
            continue  # systemd/util-linux comment options
        else:
            cfg.fuse_options.append(item)


def load(args: Any, environ: dict[str, str] | None = None) -> MountConfig:
    """Build the configuration from a config file, the environment and parsed flags."""
    environ = os.environ if environ is None else environ
    cfg = MountConfig()
    path = getattr(args, "config", None) or environ.get("POLYFS_CONFIG")
    if path:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            raise InvalidInput(f"config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidInput(f"config file {path}: {exc}") from None
        _apply(cfg, dict(data.get("mount", data)), f"config file {path}")
    env_values = {}
    for f in fields(MountConfig):
        key = "POLYFS_" + f.name.upper()
        if key in environ and key != "POLYFS_CONFIG":
            env_values[f.name] = environ[key]
    _apply(cfg, env_values, "environment")
    if getattr(args, "store", None):
        cfg.store = args.store
    if getattr(args, "mountpoint", None):
        cfg.mountpoint = args.mountpoint
    if getattr(args, "foreground", False):
        cfg.foreground = True
    if getattr(args, "read_only", False):
        cfg.read_only = True
    for text in getattr(args, "options", None) or []:
        apply_o_options(cfg, text)
    if getattr(args, "log_level", None):
        cfg.log_level = args.log_level
    if getattr(args, "log_file", None):
        cfg.log_file = args.log_file
    if not cfg.store or not cfg.mountpoint:
        raise InvalidInput("a store and a mountpoint are required")
    if cfg.cache_gb < 0:
        raise InvalidInput(f"option cache_gb: must be >= 0, got {cfg.cache_gb}")
    if not 0 <= cfg.max_background <= 65535:
        raise InvalidInput(f"option max_background: must be 0..65535, got {cfg.max_background}")
    # the daemon changes to / before using any of these: relative paths mean the caller's
    if "://" not in cfg.store:
        cfg.store = os.path.abspath(cfg.store)
    cfg.mountpoint = os.path.abspath(cfg.mountpoint)
    for name in ("cache_dir", "scratch_dir", "log_file"):
        if getattr(cfg, name):
            setattr(cfg, name, os.path.abspath(getattr(cfg, name)))
    return cfg
