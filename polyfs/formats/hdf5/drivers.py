"""Why a written file HDF5 cannot open is refused, when an HDF5 multi-file driver wrote it.

h5py's ``driver="family"`` (``x%d.h5``: members ``x0.h5``, ``x1.h5``, ...) and
``driver="split"``/``"multi"`` (``x-m.h5`` metadata, ``x-r.h5`` raw data) spread one HDF5
file over several files. The view takes one file per domain, and each member is closed (and
checked) on its own, so none can be stored; HDF5's own errors for them ("truncated file",
"file signature not found", "family driver should be used") do not say so. The first
member (or the ``-m`` file) names its driver in its superblock's driver information
(``NCSAfami``, ``NCSAmult``: in the driver info block of a version 0/1 superblock, in the
superblock extension's driver info message of a version 2/3 one, both within a few hundred
bytes of the signature); the other members have no superblock and are known by name only.

One family file is taken all the same: a whole family in its first member (h5py's default
member size is 2 GiB; ``h5repart -family_to_sec2`` closes its output before it marks it a
plain file) is read as one file, as h5repart makes it (:func:`single_member`).
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ...writes.protocol import ByteSource
from .structs import SIGNATURE, SUPERBLOCK_V0

_V0_ADDRESSES = SUPERBLOCK_V0.offset_of("base_address")  # where a version 0 superblock's addresses start
_VERSION = SUPERBLOCK_V0.offset_of("version")
_WIDTH = SUPERBLOCK_V0.offset_of("sizeof_offsets")  # the same in versions 0 and 1
# the driver identifications HDF5 writes for its multi-file drivers (H5FDfamily.c, H5FDmulti.c)
DRIVER_IDS = {b"NCSAfami": "family", b"NCSAmult": "split/multi"}
NEAR_SIGNATURE = 1024  # the driver id lies within this many bytes after the signature
LAST_SUPERBLOCK = 1 << 16  # user blocks searched: 0, 512, 1024, ... up to 64 KiB

WAY_OUT = ("polyfs takes one HDF5 file per domain: write it with the default driver "
           "(a family's members can be joined first: h5repart -family_to_sec2)")
# member names the drivers make: ``x1.h5`` (family, member 1 and on), ``x-r.h5`` (split raw data)
MEMBER_NAME = re.compile(r".*(?:[^0-9]|^)(?P<n>\d+)\.[A-Za-z0-9]+|.*-r\.h5")


def _superblock_at(size: int, read: Callable[[int, int], bytes]) -> int | None:
    """Where the HDF5 signature is (offset 0, then each power of two from 512), or None."""
    at = 0
    while at < min(size, LAST_SUPERBLOCK + 1):
        if read(at, len(SIGNATURE)) == SIGNATURE:
            return at
        at = 512 if at == 0 else at * 2
    return None


def _v01_driver(at: int, size: int, read: Callable[[int, int], bytes]) -> tuple[str | None, int, int, int] | None:
    """For a version 0/1 superblock at ``at``: (the driver its driver info block names, or None;
    where the block's address field is; its width; the superblock's end of file), else None."""
    head = bytes(read(at, 32))
    version, width = head[_VERSION] if len(head) > _VERSION else None, head[_WIDTH] if len(head) > _WIDTH else None
    if len(head) < 32 or version not in (0, 1) or width not in (2, 4, 8):
        return None
    # base, free space, end of file, driver info addresses; version 1 has 4 more bytes before them
    # (the indexed storage K and a reserved field)
    field = at + _V0_ADDRESSES + (0 if version == 0 else 4)
    raw = bytes(read(field, 4 * width))
    if len(raw) < 4 * width:
        return None
    eof = int.from_bytes(raw[2 * width:3 * width], "little")
    addr = int.from_bytes(raw[3 * width:], "little")
    if addr == (1 << 8 * width) - 1:
        return None, field + 3 * width, width, eof
    if at + addr + 16 > size:  # the block is in a later member (a family file HDF5 wrote again)
        return "family or split/multi", field + 3 * width, width, eof
    return DRIVER_IDS.get(bytes(read(at + addr + 8, 8))), field + 3 * width, width, eof


def multi_file_driver(size: int, read: Callable[[int, int], bytes]) -> str | None:
    """The multi-file driver ("family", "split/multi") whose first member this file is, or None."""
    at = _superblock_at(size, read)
    if at is None:
        return None
    v01 = _v01_driver(at, size, read)
    if v01 is not None:  # the superblock says which driver block is current (h5repart leaves the old)
        return v01[0]
    window = bytes(read(at, min(NEAR_SIGNATURE, size - at)))
    return next((name for ident, name in DRIVER_IDS.items() if ident in window), None)


class _Patched:
    """A ByteSource with a few bytes replaced (the superblock's driver info address)."""

    def __init__(self, src: ByteSource, at: int, data: bytes) -> None:
        self.src, self.at, self.data = src, at, data

    def size(self) -> int:
        return self.src.size()

    def read(self, off: int, n: int) -> bytes:
        got = bytes(self.src.read(off, n))
        lo, hi = max(off, self.at), min(off + len(got), self.at + len(self.data))
        if lo >= hi:
            return got
        return got[:lo - off] + self.data[lo - self.at:hi - self.at] + got[hi - off:]


class FileSource:
    """A ByteSource over an open binary file (``polyfs import`` of a path)."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def size(self) -> int:
        return self.fh.seek(0, 2)

    def read(self, off: int, n: int) -> bytes:
        self.fh.seek(off)
        return self.fh.read(n)


def single_member(src: ByteSource) -> ByteSource:
    """``src`` as one plain HDF5 file when it is a whole family in its first member (h5py's
    default member size holds 2 GiB; ``h5repart -family_to_sec2`` closes its output so before
    it marks it plain): the superblock's driver info address undefined, as ``h5repart`` makes
    it. Anything else (a version 2/3 superblock, a family over several members) is ``src``."""
    size = src.size()
    at = _superblock_at(size, src.read)
    v01 = None if at is None else _v01_driver(at, size, src.read)
    if v01 is None or v01[0] != "family" or at + v01[3] > size:
        return src
    return _Patched(src, v01[1], b"\xff" * v01[2])


def refusal(path: str, size: int, read: Callable[[int, int], bytes]) -> tuple[str, bool] | None:
    """Why the file at ``path`` (HDF5 could not open it) is refused, when a multi-file driver
    wrote it, and whether it is HDF5 the store cannot hold (True: EOPNOTSUPP) or, a member
    without a superblock, no HDF5 file (False: EINVAL); None when nothing says so."""
    driver = multi_file_driver(size, read)
    if driver is not None:
        return f"written by HDF5's {driver} driver (several member files); {WAY_OUT}", True
    hit = MEMBER_NAME.fullmatch(path.rsplit("/", 1)[-1])
    if hit is not None and hit.group("n") != "0" and _superblock_at(size, read) is None:
        return f"no HDF5 superblock: a member file of HDF5's family or split driver? {WAY_OUT}", False
    return None
