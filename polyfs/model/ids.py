"""Object ids of the HSDS object storage schema v2.

An id is ``<g|d|t>-<hex8>-<hex8>-<hex4>-<hex6>-<hex6>``. All objects of a
domain share the first 16 hex digits; the root group's last 16 digits are
the first 16 with every hex digit rotated by 8, so any id names its root.
"""
from __future__ import annotations

import re
import secrets

from ..errors import SchemaError

ID_RE = re.compile(r"^([gdt])-([0-9a-f]{8})-([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{6})-([0-9a-f]{6})$")
KINDS = {"g": "group", "d": "dataset", "t": "datatype"}


def _rotate(hex16: str) -> str:
    return "".join(format((int(c, 16) + 8) % 16, "x") for c in hex16)


def _format(kind: str, first16: str, second16: str) -> str:
    a, b = first16[:8], first16[8:]
    c, d, e = second16[:4], second16[4:10], second16[10:]
    return f"{kind}-{a}-{b}-{c}-{d}-{e}"


def parse(obj_id: str) -> tuple[str, str, str]:
    """``(kind, first16, second16)``; raises SchemaError for malformed ids."""
    m = ID_RE.match(obj_id) if isinstance(obj_id, str) else None  # JSON may hold any type
    if not m:
        raise SchemaError(f"malformed object id {obj_id!r}")
    kind, a, b, c, d, e = m.groups()
    return kind, a + b, c + d + e


def kind_of(obj_id: str) -> str:
    """``group``, ``dataset`` or ``datatype``."""
    return KINDS[parse(obj_id)[0]]


def new_root_id() -> str:
    """A fresh root group id (a fresh domain)."""
    first = secrets.token_hex(8)
    return _format("g", first, _rotate(first))


def root_of(obj_id: str) -> str:
    """The root group id of the domain ``obj_id`` belongs to."""
    _, first, _ = parse(obj_id)
    return _format("g", first, _rotate(first))


def is_root(obj_id: str) -> bool:
    return root_of(obj_id) == obj_id


def new_id(kind: str, root_id: str) -> str:
    """A new ``g``/``d``/``t`` id in the domain of ``root_id`` (never the root's)."""
    if kind not in KINDS:
        raise ValueError(f"bad id kind {kind!r}")
    _, first, _ = parse(root_id)
    while True:
        second = secrets.token_hex(8)
        if second != _rotate(first):
            return _format(kind, first, second)


def halves(obj_id: str) -> tuple[str, str]:
    """The two key components ``<uuid1>`` = hex8-hex8 and ``<uuid2>`` = hex4-hex6-hex6."""
    m = ID_RE.match(obj_id) if isinstance(obj_id, str) else None  # JSON may hold any type
    if not m:
        raise SchemaError(f"malformed object id {obj_id!r}")
    _, a, b, c, d, e = m.groups()
    return f"{a}-{b}", f"{c}-{d}-{e}"
