"""``mount.polyfs`` / ``mount.fuse.polyfs``: the helper mount(8) runs for
``mount -t fuse.polyfs STORE MNT -o ...`` and for ``/etc/fstab`` lines.

mount(8) calls ``mount.<type> SPEC DIR [-sfnv] [-N ns] [-o OPTIONS] [-t TYPE]``;
this turns that into ``polyfs mount STORE MNT -o OPTIONS`` (daemonized, so
mount(8) returns once the mount is live).
"""
from __future__ import annotations

import sys
from typing import Sequence

from .cli import main as polyfs_main

USAGE = "usage: mount.polyfs STORE MOUNTPOINT [-o options]"


def parse(argv: Sequence[str]) -> tuple[list[str], bool]:
    """(polyfs mount arguments, fake) from a mount(8) helper command line."""
    positional: list[str] = []
    options: list[str] = []
    fake = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-o":
            i += 1
            if i == len(argv):  # was an IndexError traceback
                raise SystemExit(USAGE)
            options.append(argv[i])
        elif a.startswith("-o") and len(a) > 2:
            options.append(a[2:])
        elif a in ("-t", "-N"):
            i += 1  # type / namespace: nothing for us
            if i == len(argv):
                raise SystemExit(USAGE)
        elif a.startswith("-") and len(a) > 1:
            fake = fake or "f" in a[1:]  # -f: fake, do everything but mount
        else:
            positional.append(a)
        i += 1
    if len(positional) != 2:
        raise SystemExit(USAGE)
    args = ["mount", positional[0], positional[1]]
    for o in options:
        args += ["-o", o]
    return args, fake


def main(argv: Sequence[str] | None = None) -> int:
    args, fake = parse(list(sys.argv[1:] if argv is None else argv))
    if fake:
        return 0
    return polyfs_main(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
