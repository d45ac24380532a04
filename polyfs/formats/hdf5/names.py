"""Names and link targets of an HDF5 file as the store keeps them: UTF-8 text.

HDF5 names are bytes; a file written with latin-1 names (older tools) has ones that are
not UTF-8, which h5py gives as bytes (link and attribute names), as ``str()`` of the bytes
(a soft link's target: ``"b'/\\xe9t\\xe9'"``, which would be kept as that text) or with
surrogates (an external link's file, which the view's JSON documents cannot spell). Such
a file is refused naming the name, not changed and not half stored. A name the store got
otherwise (a directory ``mkdir``-ed in ``zarr/`` from latin-1 bytes) is shown by its bytes.
"""
from __future__ import annotations

from typing import Any

NOT_UTF8 = "its name is not UTF-8 text, and the store keeps names as text (rename it first)"
TARGET_NOT_UTF8 = "its target is not UTF-8 text, and the store keeps link targets as text"


def bad_name(names: list[Any]) -> bytes | None:
    """The first of h5py's names that is not text (not UTF-8 in the file), else None."""
    return next((n for n in names if isinstance(n, bytes)), None)


def link_text(grp: Any, name: str) -> tuple[str, ...] | None:
    """A soft link's target ``(path,)`` or an external link's ``(file, path)`` as text,
    None when the file's bytes are not UTF-8."""
    val = grp.id.links.get_val(name.encode("utf-8"))
    try:
        return tuple(v.decode("utf-8") for v in (val if isinstance(val, tuple) else (val,)))
    except UnicodeDecodeError:
        return None


def name_bytes(name: str) -> bytes:
    """A stored name or link target as the file's bytes. One made through another view from
    bytes that are not UTF-8 (``mkdir`` of a latin-1 name in ``zarr/``) holds them as
    surrogate escapes: the file shows those bytes, as a disk's would, rather than none of the
    domain at all."""
    return name.encode("utf-8", "surrogateescape")


def is_utf8_text(raw: bytes) -> bool:
    """Bytes HDF5 may call UTF-8 (a link's character set): not plain ASCII, and valid."""
    if raw.isascii():
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
