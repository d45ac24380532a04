"""Binary layouts declared once, as data, and used both to pack and to parse.

A :class:`Layout` is an ordered list of ``(name, struct code[, default])``
fields with one byte order. The synthesizers (HDF5, TIFF, N5 headers) pack
with it and the tests and ingest paths parse with the same declaration, so a
layout can never drift between writer and reader.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

_NO_DEFAULT = object()


@dataclass(frozen=True)
class Field:
    name: str
    code: str
    default: Any = _NO_DEFAULT


@dataclass(frozen=True)
class Layout:
    """A fixed-size binary record."""

    name: str
    fields: tuple[Field, ...]
    endian: str = "<"
    _struct: struct.Struct = field(init=False, repr=False, compare=False)
    _names: frozenset = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fmt = self.endian + "".join(f.code for f in self.fields)
        object.__setattr__(self, "_struct", struct.Struct(fmt))
        object.__setattr__(self, "_names", frozenset(f.name for f in self.fields))

    @classmethod
    def of(cls, name: str, spec: Iterable[tuple], endian: str = "<") -> "Layout":
        """Build from ``(name, code)`` or ``(name, code, default)`` tuples."""
        return cls(name, tuple(Field(*item) for item in spec), endian)

    @property
    def size(self) -> int:
        return self._struct.size

    def with_endian(self, endian: str) -> "Layout":
        """The same layout in another byte order (TIFF writes both)."""
        return Layout(self.name, self.fields, endian)

    def pack(self, values: Mapping[str, Any] | None = None, **kw: Any) -> bytes:
        merged = dict(values or {}, **kw)
        if not self._names.issuperset(merged):
            raise KeyError(f"{self.name}: unknown fields {sorted(set(merged) - self._names)}")
        out = []
        for f in self.fields:
            if f.name in merged:
                out.append(merged[f.name])
            elif f.default is not _NO_DEFAULT:
                out.append(f.default)
            else:
                raise KeyError(f"{self.name}: no value for field {f.name!r}")
        return self._struct.pack(*out)

    def unpack(self, buf: bytes | memoryview, offset: int = 0) -> dict[str, Any]:
        if len(buf) - offset < self.size:
            raise ValueError(
                f"{self.name}: need {self.size} bytes at offset {offset}, have {len(buf) - offset}"
            )
        vals = self._struct.unpack_from(buf, offset)
        return {f.name: v for f, v in zip(self.fields, vals)}

    def offset_of(self, name: str) -> int:
        """Byte offset of a field inside the record (for checksums, patching)."""
        pos = 0
        for f in self.fields:
            if f.name == name:
                return pos
            pos += struct.calcsize(self.endian + f.code)
        raise KeyError(name)
