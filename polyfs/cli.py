"""Command line: argparse only. Subcommands map to functions elsewhere; every
failure becomes one line on stderr and a non-zero exit code."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from .errors import PolyfsError, one_line

EXIT_ERROR = 1
EXIT_USAGE = 2

DESCRIPTION = ("polyfs keeps HDF5 domains in one chunk store and mounts them as N5, Zarr v3, HDF5 and "
               "TIFF at once. Import files into a store, inspect and check it, mount it.")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
STORE_HELP = "store URL: a directory, file://... or s3://bucket/prefix"
DOMAIN_HELP = "domain path in the store, e.g. /data/brain.h5 (see 'polyfs info STORE')"


def _add_import(sub) -> None:
    p = sub.add_parser("import", help="bring an HDF5, TIFF, Zarr v3 or N5 source into the store as one domain")
    p.add_argument("source", help="HDF5 file, TIFF file, Zarr v3 hierarchy or N5 container")
    p.add_argument("store", help=STORE_HELP + " (a new directory is created)")
    p.add_argument("--domain", help="domain path, folders included, e.g. /data/run1.h5 (default /<source stem>.h5)")
    p.add_argument("--codec", default="deflate",
                   help="encoding for data that has to be (re)chunked: deflate (default), zstd, blosc, "
                        "bzip2, none, or a netCDF filter spec such as '32015,3'")
    p.add_argument("--level", type=int, help="compression level for --codec")
    p.add_argument("--chunks", help="chunk shape for contiguous sources, e.g. 64,64,64")
    p.add_argument("--owner", default="admin", help="domain owner (default admin)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing domain")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_import)


def _add_info(sub) -> None:
    p = sub.add_parser("info", help="list domains, or the tree of one domain")
    p.add_argument("store", help=STORE_HELP)
    p.add_argument("domain", nargs="?", help=DOMAIN_HELP + "; without it, every domain is listed")
    p.set_defaults(func=cmd_info)


def _add_create(sub) -> None:
    p = sub.add_parser("create", help="make an empty domain")
    p.add_argument("store", help=STORE_HELP)
    p.add_argument("domain", help=DOMAIN_HELP)
    p.add_argument("--owner", default="admin", help="domain owner (default admin)")
    p.set_defaults(func=cmd_create)


def _add_mount(sub) -> None:
    p = sub.add_parser("mount", help="mount a store (daemonizes unless -f)")
    p.add_argument("store", nargs="?", help="store URL (or 'store' in the config file)")
    p.add_argument("mountpoint", nargs="?", help="mountpoint (or 'mountpoint' in the config file)")
    p.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground")
    p.add_argument("--read-only", action="store_true", help="refuse all writes (EROFS)")
    p.add_argument("-o", dest="options", action="append", default=[],
                   help="comma-separated options: FUSE options (allow_other, ...) and polyfs options "
                        "(shard_max_chunks=N, unsharded, tiff_level=N, cache_mb=N, read_ahead_kb=N, "
                        "write_buffer_mb=N, scratch_dir=DIR, ...; README.md lists them all)")
    p.add_argument("--log-level", default=None, type=str.lower, choices=LOG_LEVELS,
                   help="debug, info, warning (default), error, critical")
    p.add_argument("--log-file", default=None, help="log to this file (daemon default: syslog-less stderr file)")
    p.add_argument("--config", default=None, help="config file (TOML); flags override it")
    p.set_defaults(func=cmd_mount)


def _add_umount(sub) -> None:
    p = sub.add_parser("umount", help="unmount (lazily if the daemon is gone)")
    p.add_argument("mountpoint", nargs="?", help="the directory a store is mounted on (or 'mountpoint' in --config)")
    p.add_argument("--config", default=None, help="take the mountpoint from this config file (TOML, as for mount)")
    p.add_argument("--if-dead", action="store_true",
                   help="only a polyfs mount whose daemon is gone; anything else (nothing mounted, a live "
                        "mount) is left alone with exit 0 (systemd's ExecStopPost)")
    p.set_defaults(func=cmd_umount)


def _add_check(sub) -> None:
    p = sub.add_parser("check", help="verify a store; --repair rebuilds derived data and removes unreachable objects")
    p.add_argument("store", help=STORE_HELP)
    p.add_argument("domain", nargs="?", help=DOMAIN_HELP + "; without it, the whole store")
    p.add_argument("--deep", action="store_true", help="also decode every chunk")
    p.add_argument("--repair", action="store_true", help="rebuild CRC32 tables, delete unreachable db/ prefixes")
    p.set_defaults(func=cmd_check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="polyfs", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"polyfs {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_import, _add_info, _add_create, _add_mount, _add_umount, _add_check):
        add(sub)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("polyfs")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


# -- command functions ------------------------------------------------------
def cmd_import(args) -> int:
    from .importers import import_source

    domain = import_source(args.source, args.store, domain=args.domain, codec=args.codec, level=args.level,
                           chunks=args.chunks, owner=args.owner, overwrite=args.overwrite,
                           progress=not args.no_progress)
    print(f"imported {args.source} as {domain}")
    return 0


def cmd_info(args) -> int:
    from .inspect import info_text

    sys.stdout.write(info_text(args.store, args.domain))
    return 0


def cmd_create(args) -> int:
    from .inspect import create_domain

    path = create_domain(args.store, args.domain, owner=args.owner)
    print(f"created {path}")
    return 0


def cmd_check(args) -> int:
    from .check import check_store

    report = check_store(args.store, args.domain, deep=args.deep, repair=args.repair)
    sys.stdout.write(report.text())
    return 1 if report.problems else 0


def cmd_mount(args) -> int:
    from .daemon import mount_command

    return mount_command(args)


def cmd_umount(args) -> int:
    from .config import mountpoint_of
    from .daemon import dead_mount, umount

    mountpoint = mountpoint_of(args)
    if args.if_dead and not dead_mount(mountpoint):
        return 0
    umount(mountpoint)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = getattr(args, "log_level", None) or "WARNING"
    logging.basicConfig(level=level.upper(), format="polyfs: %(levelname)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except PolyfsError as exc:
        print(f"polyfs: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("polyfs: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"polyfs: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
