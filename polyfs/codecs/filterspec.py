"""netCDF-4 filter specification strings: ``"32015,3"``, ``"307,9|4,32,32"``.

Grammar (netCDF "Appendix A"): specs separated by ``|``, each a filter id and
comma-separated constants. Constants may carry a type tag (``b``, ``ub``,
``s``, ``us``, ``u``, ``f``, ``d``, ``l``, ``ul``); 8-byte values become two
32-bit parameters in little-endian order, as netCDF encodes them.
"""
from __future__ import annotations

import re
import struct

from ..errors import InvalidInput
from .registry import Filter, spec_by_name, spec_for

_CONST = re.compile(r"^([+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?))([a-zA-Z]*)$")


def _u32(v: int) -> int:
    return v & 0xFFFFFFFF


def parse_constant(text: str) -> list[int]:
    """One parameter constant -> one or two unsigned 32-bit values."""
    m = _CONST.match(text.strip())
    if not m:
        raise InvalidInput(f"bad filter parameter {text!r}")
    num, tag = m.group(1), m.group(2).lower()
    try:
        if tag in ("f",):
            return [struct.unpack("<I", struct.pack("<f", float(num)))[0]]
        if tag in ("d",):
            lo, hi = struct.unpack("<II", struct.pack("<d", float(num)))
            return [lo, hi]
        value = int(num)
    except ValueError:
        raise InvalidInput(f"bad filter parameter {text!r}") from None
    if tag in ("l", "ll", "ul", "lu", "ull"):
        lo, hi = struct.unpack("<II", struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF))
        return [lo, hi]
    if tag in ("b", "ub", "bu"):
        return [value & 0xFF]
    if tag in ("s", "us", "su"):
        return [value & 0xFFFF]
    if tag in ("", "u"):
        if not -(2**31) <= value < 2**32:
            raise InvalidInput(f"filter parameter {text!r} does not fit 32 bits")
        return [_u32(value)]
    raise InvalidInput(f"unknown type tag {tag!r} in filter parameter {text!r}")


def parse_filter_spec(text: str, validate: bool = True) -> list[Filter]:
    """Parse a netCDF filter spec into filters (write order).

    With ``validate`` every id must be in the translation table (UnknownFilter
    names the first that is not); without, the syntax alone is checked.
    """
    if not text or not text.strip():
        raise InvalidInput("empty filter spec")
    out: list[Filter] = []
    for spec in text.split("|"):
        parts = [p.strip() for p in spec.split(",")]
        if not parts[0]:
            raise InvalidInput(f"filter spec {spec!r} has no filter id")
        head = parts[0]
        if head.isdigit():
            fid = spec_for(int(head)).id if validate else int(head)
        else:
            fid = spec_by_name(head).id
        params: list[int] = []
        for p in parts[1:]:
            params.extend(parse_constant(p))
        out.append(Filter(fid, tuple(params)))
    return out


def format_filter_spec(filters: list[Filter]) -> str:
    return "|".join(",".join([str(f.id), *map(str, f.cd_values)]) for f in filters)
