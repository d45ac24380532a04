"""Coding chunks whose pipeline holds a filter outside the translation table.

Such filters (LZF, LZ4, bitshuffle, szip, zfp, blosc2, a private id...) are
carried exactly and their chunks kept as stored. Decoding them needs the
library that defines them; the one well-kept library here that runs any
registered HDF5 filter is libhdf5 itself (h5py + hdf5plugin), so a format
package that can drive it declares ``runs_filters`` and provides a
``filters`` module. This module only finds that runner: no format is named.
"""
from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from ..errors import NoCodec

if TYPE_CHECKING:  # pragma: no cover
    from .pipeline import Pipeline


class ChunkCoder(Protocol):
    def decode(self, data: bytes) -> bytes: ...

    def encode(self, raw: bytes) -> bytes: ...


@cache
def _runners() -> tuple[ModuleType, ...]:
    from ..formats import formats

    return tuple(f.filter_runner() for f in formats() if f.runs_filters)


def _names(pipe: "Pipeline") -> str:
    return ", ".join(f.name for f in pipe.opaque)


def why_not(pipe: "Pipeline", encode: bool = False) -> str | None:
    """None when some runner codes ``pipe`` here, else why none does (names the filters)."""
    reasons = []
    for r in _runners():
        why = r.why_not(pipe, encode)
        if why is None:
            return None
        reasons.append(why)
    return f"filter {_names(pipe)}: " + ("; ".join(reasons) or "no library here runs it")


def coder(pipe: "Pipeline") -> ChunkCoder:
    """The coder of ``pipe``'s chunks; NoCodec (EOPNOTSUPP) naming the filters when none."""
    for r in _runners():
        if r.why_not(pipe, False) is None:
            return r.coder(pipe)
    raise NoCodec(why_not(pipe) or f"filter {_names(pipe)}: no decoder")
