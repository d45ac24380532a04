"""An HDF5 file's user block (the bytes before its superblock), kept with the domain.

MATLAB 7.3 MAT-files are HDF5 files after a 512-byte user block whose first 128 bytes say
``MATLAB 7.3 MAT-file, Platform: ..., Created on: ... HDF5 schema 1.00 .`` (then the
subsystem offset, version 0x0200 and ``IM``): MATLAB, Octave, ``scipy.io`` and
``hdf5storage`` look there before they read the file. ``h5jam -u`` and h5py
``userblock_size=`` (then raw writes into the block: what ``hdf5storage.savemat`` does) make
such files too. The block is kept as a view hint of the root group (hints.py),
``{"size": <power of two >= 512>, "data": <base64 of the block without its trailing zeros>}``,
and served again before the superblock of ``hdf5/<stem>.h5`` (which then sits at ``size``,
as HDF5 requires); a writer changing it in place (``r+b``) changes the hint.

A block of zeros keeps only its size (``hdf5storage`` makes one and writes its header into
it once the file is closed). A polyglot file's TIFF header is the views' own and is dropped.
A block over :data:`MAX_USER_BLOCK` holding data is refused (``EOPNOTSUPP``); one of zeros
that large is dropped.
"""
from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from typing import Any, Callable

from ...errors import InvalidInput, UnsupportedType
from .hints import hints, set_hint

log = logging.getLogger(__name__)

USER_BLOCK_HINT = "hdf5_user_block"
MAX_USER_BLOCK = 64 * 1024  # kept in the root group's JSON: bounded
TIFF_HEADERS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")


@dataclass(frozen=True)
class UserBlock:
    """The bytes before the superblock: ``size`` of them, ``data`` then zeros."""

    size: int
    data: bytes = b""

    def hint(self) -> dict[str, Any]:
        return {"size": self.size, "data": base64.b64encode(self.data).decode("ascii")}

    def bytes(self) -> bytes:
        return self.data.ljust(self.size, b"\0")


def valid_size(size: int) -> bool:
    """HDF5's rule: 0, or a power of two of at least 512."""
    return size == 0 or (size >= 512 and not size & (size - 1))


def of_bytes(raw: bytes, where: str, new_file: bool = True) -> UserBlock | None:
    """The block to keep of a file's ``raw`` user block, None for none (a new file's TIFF
    header, or only zeros over the bound). Refused: a size HDF5 cannot have (``EINVAL``),
    data over the bound (``EOPNOTSUPP``)."""
    size = len(raw)
    if not size or (new_file and raw[:4] in TIFF_HEADERS):
        return None
    if not valid_size(size):
        raise InvalidInput(f"{where}: a {size}-byte user block (HDF5's is a power of two of at least 512 bytes)")
    data = bytes(raw).rstrip(b"\0")
    if size > MAX_USER_BLOCK:
        if data:
            raise UnsupportedType(f"{where}: its {size}-byte user block holds data, and the store keeps user "
                                  f"blocks of up to {MAX_USER_BLOCK} bytes (nothing was stored; h5unjam "
                                  f"removes it)")
        return None
    return UserBlock(size, data)


def read_user_block(size: int, read: Callable[[int, int], bytes], where: str) -> UserBlock | None:
    """The user block of a file of ``size`` bytes before its superblock (h5py's
    ``userblock_size``) read with ``read(offset, length)``; only the first bound's bytes are
    read of a larger one (refused if any is not zero, else dropped)."""
    if not size:
        return None
    if size > MAX_USER_BLOCK:
        head = bytes(read(0, MAX_USER_BLOCK))
        data = any(head) or any(any(read(at, min(1 << 20, size - at))) for at in range(MAX_USER_BLOCK, size, 1 << 20))
        if data and head[:4] not in TIFF_HEADERS:
            raise UnsupportedType(f"{where}: its {size}-byte user block holds data, and the store keeps user "
                                  f"blocks of up to {MAX_USER_BLOCK} bytes (nothing was stored; h5unjam "
                                  f"removes it)")
        return None
    return of_bytes(bytes(read(0, size)), where)


def keep(root: Any, block: UserBlock | None) -> None:
    """Record ``block`` on a new domain's root group (hints.py), if any."""
    if block is not None and root is not None:
        set_hint(root, USER_BLOCK_HINT, block.hint())


def of_root(root: Any, where: str = "") -> UserBlock | None:
    """The user block a domain's root group keeps, None if none or not one HDF5 can have
    (a hand-edited record: one log line, the file is served without it)."""
    got = hints(root).get(USER_BLOCK_HINT) if root is not None else None
    if got is None:
        return None
    try:
        size, data = int(got["size"]), base64.b64decode(got.get("data", ""), validate=True)
        if not valid_size(size) or not size or size > MAX_USER_BLOCK or len(data) > size:
            raise ValueError(f"size {size}, {len(data)} bytes of data")
    except (TypeError, KeyError, ValueError, binascii.Error) as exc:
        log.warning("%s: the root group's %s record is not a user block HDF5 can have (%s); served without it",
                    where or "domain", USER_BLOCK_HINT, exc)
        return None
    return UserBlock(size, data)


def changed_hints(root: Any, block: UserBlock | None) -> dict[str, Any] | None:
    """The root group's whole new hint record when the file's ``block`` differs from the
    kept one, else None."""
    old = hints(root)
    new = {k: v for k, v in old.items() if k != USER_BLOCK_HINT}
    if block is not None:
        new[USER_BLOCK_HINT] = block.hint()
    return None if new == old else new
