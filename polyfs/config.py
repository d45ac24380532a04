"""Mount and daemon options: config file < environment < command-line flags.

The config file is TOML with a ``[mount]`` table whose keys are the option
names below (``store``, ``options``, ``read_only``, ``shard_max_chunks``...).
Environment variables are ``POLYFS_<NAME>`` in upper case. ``-o`` takes a
comma-separated list mixing FUSE options (passed to the kernel) and polyfs
options (``name=value``, or a bare flag such as ``unsharded``).
"""
from __future__ import annotations

import difflib
import math
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

# what each numeric option may be (low, high; None: unbounded): a value outside mounted
# anyway and failed later (threads=0 hung every request, tiff_level=42 failed every read)
_RANGES: dict[str, tuple[float, float | None]] = {
    "shard_max_chunks": (1, None), "tiff_level": (0, 9), "cache_mb": (0, None), "cache_gb": (0, None),
    "read_ahead_kb": (0, None), "max_background": (0, 65535), "entry_timeout": (0, None),
    "domain_ttl": (0, None), "threads": (1, 4096), "write_buffer_mb": (0, None),
}

# FUSE options polyfs sets itself or that break pyfuse3 (DESIGN.md section 5)
_REJECTED_FUSE = {
    "max_read": "max_read= makes libfuse 3.14 refuse to mount under pyfuse3",
    # the mount would be fuse.<x>: polyfs umount, mount(8) and fstab find polyfs mounts by fuse.polyfs
    "subtype": "polyfs mounts as fuse.polyfs (polyfs umount, mount(8) and fstab find it by that type)",
}

# mount(8)/fstab options that are bookkeeping for mount(8) or systemd, never for FUSE
_FSTAB_ONLY = frozenset(("defaults", "auto", "noauto", "user", "nouser", "_netdev", "nofail", "users",
                         "comment"))


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
    if typ in (int, float) and isinstance(value, bool):  # TOML true, or a bare -o name
        raise InvalidInput(f"option {name}: expected a number ({name}=N), got {value!r}")
    if typ is int and isinstance(value, float) and not value.is_integer():
        raise InvalidInput(f"option {name}: expected int, got {value!r}")
    if typ is str and not isinstance(value, str):
        raise InvalidInput(f"option {name}: expected a string, got {value!r}")
    try:
        return typ(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"option {name}: expected {typ.__name__}, got {value!r}") from None


def _unknown(source: str, key: str) -> InvalidInput:
    """One line naming the unknown key, with the nearest known name (a typo is the usual cause)."""
    known = [f.name for f in fields(MountConfig)] + ["options"]
    near = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return InvalidInput(f"{source}: unknown option {key!r}{hint}")


def validate(cfg: MountConfig) -> None:
    """Refuse values no mount can use, each with one line naming the option and its range."""
    for name, (low, high) in _RANGES.items():
        value = getattr(cfg, name)
        if not math.isfinite(value) or value < low or (high is not None and value > high):
            want = f"{low:g}..{high:g}" if high is not None else f">= {low:g}"
            raise InvalidInput(f"option {name}: must be {want}, got {value}")
    cfg.views = cfg.views.replace(":", ",")  # -o views=a:b (commas split -o), or a,b in a config file
    names = [v.strip() for v in cfg.views.split(",") if v.strip()]
    if cfg.views.strip() and not names:
        raise InvalidInput(f"option views: no view named in {cfg.views!r}")
    from .formats import formats

    known = [f.name for f in formats()]
    bad = [n for n in names if n not in known]
    if bad:
        raise InvalidInput(f"option views: unknown view {bad[0]!r} (known: {', '.join(known)})")


def _apply(cfg: MountConfig, values: dict[str, Any], source: str) -> None:
    for key, value in values.items():
        try:
            _apply_one(cfg, key, value, source)
        except InvalidInput as exc:
            text = str(exc)
            raise InvalidInput(text if text.startswith(source) else f"{source}: {text}") from None


def _apply_one(cfg: MountConfig, key: str, value: Any, source: str) -> None:
    types = {f.name: f.type for f in fields(MountConfig)}
    if key == "options":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if not isinstance(value, str):
            raise InvalidInput(f"option options: expected a string or a list of strings, got {value!r}")
        apply_o_options(cfg, value)
        return
    if key not in types and (key in _POLYFS_OPTIONS or key in ("ro", "rw")):  # an -o name (README)
        if isinstance(value, bool):
            apply_o_options(cfg, key if value else f"{key}=0")
        elif key in ("ro", "rw"):
            raise InvalidInput(f"option {key}: expected a boolean, got {value!r}")
        else:
            apply_o_options(cfg, f"{key}={value}")
        return
    if key not in types:
        raise _unknown(source, key)
    typ = {"bool": bool, "int": int, "float": float, "str": str}.get(str(types[key]), str)
    if key == "fuse_options":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            cfg.fuse_options.extend(value)
        elif isinstance(value, str):
            cfg.fuse_options.extend(filter(None, value.split(",")))
        else:
            raise InvalidInput(f"option fuse_options: expected a string or a list of strings, got {value!r}")
    else:
        setattr(cfg, key, _coerce(key, value, typ))


def _view_names() -> list[str]:
    from .formats import formats

    return [f.name for f in formats()]


def _typo_of_polyfs_option(name: str) -> str | None:
    """The polyfs option a FUSE-looking name is a typo of (``write_bufer_mb``): libfuse would
    only say ``fuse_session_new() failed``, after the fork."""
    near = difflib.get_close_matches(name, list(_POLYFS_OPTIONS), n=1, cutoff=0.8)
    return near[0] if near else None


def apply_o_options(cfg: MountConfig, text: str) -> None:
    """Split one ``-o`` string into polyfs options and FUSE options."""
    in_views = False  # after views=: bare view names continue the list (views=zarr,n5 as views=zarr:n5)
    views = _view_names()
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, value = item.partition("=")
        if not eq and name in views:
            if not in_views:
                raise InvalidInput(f"-o {name}: a view name, not an option (show views with views=zarr:n5)")
            cfg.views = f"{cfg.views},{name}" if cfg.views else name
            continue
        in_views = name == "views" and bool(eq)
        if name in _REJECTED_FUSE:
            raise InvalidInput(f"-o {name}: {_REJECTED_FUSE[name]}")
        if name in _POLYFS_OPTIONS:
            attr, typ = _POLYFS_OPTIONS[name]
            if typ is not bool and not eq:
                raise InvalidInput(f"-o {name}: needs a value ({name}=...)")
            if name == "unsharded":  # a flag; unsharded=0 means sharded
                cfg.zarr_sharded = not _coerce(name, value if eq else True, bool)
            elif name == "views":
                cfg.views = value.replace(":", ",")
            else:
                setattr(cfg, attr, _coerce(name, value if eq else True, typ))
        elif name in ("ro", "rw"):
            on = _coerce(name, value if eq else True, bool)
            cfg.read_only = on if name == "ro" else not on
        elif name in _FSTAB_ONLY:
            continue  # fstab/mount(8) bookkeeping, not for FUSE
        elif name.startswith("x-"):
            continue  # systemd/util-linux comment options
        elif meant := _typo_of_polyfs_option(name):
            raise InvalidInput(f"-o {name}: unknown option; did you mean {meant!r}?")
        else:
            cfg.fuse_options.append(item)


def mountpoint_of(args: Any, environ: dict[str, str] | None = None) -> str:
    """The mountpoint ``polyfs umount`` acts on: given, or the config file's (so a systemd unit
    that only knows its config file can clear a mount its crashed daemon left dead)."""
    if getattr(args, "mountpoint", None):
        return args.mountpoint
    environ = os.environ if environ is None else environ
    path = getattr(args, "config", None) or environ.get("POLYFS_CONFIG")
    if not path:
        raise InvalidInput("a mountpoint (or --config with one) is required")
    cfg = MountConfig()
    _apply(cfg, _read_config(path), f"config file {path}")
    if not cfg.mountpoint:
        raise InvalidInput(f"config file {path}: no mountpoint")
    return os.path.abspath(cfg.mountpoint)


def _read_config(path: str) -> dict[str, Any]:
    """The ``[mount]`` table of a TOML config file (or its top level, without one)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise InvalidInput(f"config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"config file {path}: {exc}") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"config file {path}: not UTF-8 text") from None
    table = data.get("mount", data)
    if not isinstance(table, dict):
        raise InvalidInput(f"config file {path}: [mount] must be a table of options")
    return dict(table)


def load(args: Any, environ: dict[str, str] | None = None) -> MountConfig:
    """Build the configuration from a config file, the environment and parsed flags."""
    environ = os.environ if environ is None else environ
    cfg = MountConfig()
    path = getattr(args, "config", None) or environ.get("POLYFS_CONFIG")
    if path:
        _apply(cfg, _read_config(path), f"config file {path}")
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
    validate(cfg)
    # the daemon changes to / before using any of these: relative paths mean the caller's
    if "://" not in cfg.store:
        cfg.store = os.path.abspath(cfg.store)
    cfg.mountpoint = os.path.abspath(cfg.mountpoint)
    for name in ("cache_dir", "scratch_dir", "log_file"):
        if getattr(cfg, name):
            setattr(cfg, name, os.path.abspath(getattr(cfg, name)))
    return cfg
