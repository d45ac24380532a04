"""Arrays zarr-python writes under ``numcodecs.*`` codecs the store has no filter for.

zarr-python's ``numcodecs.zarr3`` codecs (``Delta``, ``FixedScaleOffset``, ``PackBits``,
``AsType`` as array-to-array codecs; ``LZ4``, ``LZMA``, ``CRC32``, ``Adler32``... as
bytes-to-bytes codecs) have no HDF5 filter in the translation table, so their chunks cannot
be stored as written. They are decoded with numcodecs when written (the store keeps the
values, compressed with the chain's own table filters, else deflate, so every other view
reads them), and the Zarr view serves them back encoded with the declared chain: the
writer's open handle, and any later zarr-python open, reads and updates them with its own
codecs (the chain is kept as the hint ``zarr_numcodecs_chain``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codecs.registry import DEFLATE, Filter
from ...errors import CodecError, UnsupportedType
from .spec import HINT_PREFIX, bytes_codecs

HINT_NUMCODECS = HINT_PREFIX + "numcodecs_chain"  # {"filters": [...], "codecs": [...]}: the declared numcodecs chain
PREFIX = "numcodecs."
CORE = ("gzip", "zstd", "blosc")  # Zarr v3 core codecs a numcodecs chain may hold
STORED = (Filter(DEFLATE, (6,)),)  # how the values are stored when the chain has no table compressor


def codec(c: dict, itemsize: int) -> Any:
    """The numcodecs codec a ``numcodecs.<id>`` Zarr v3 codec names, or a core codec in such a
    chain (gzip: a gzip member; zstd and blosc as the filter table spells them); UnsupportedType
    if there is none."""
    name = str(c.get("name", ""))
    cfg = c.get("configuration") or {}
    if name not in CORE and not name.startswith(PREFIX):
        raise UnsupportedType(f"codec {name!r} is not supported")
    try:
        import numcodecs

        if name == "gzip":  # a gzip member, where the table's deflate is a zlib stream
            return numcodecs.GZip(level=int(cfg.get("level", 5)))
        if name in CORE:
            chain = bytes_codecs([c], itemsize)
            if chain.reason:
                raise ValueError(chain.reason)
            f = chain.filters[0]
            return f.spec.numcodec(f, itemsize)
        return numcodecs.get_codec({**cfg, "id": name[len(PREFIX):]})
    except Exception as exc:  # numcodecs raises ValueError/TypeError/KeyError for unknown ids or configs
        raise UnsupportedType(f"codec {name!r} ({cfg!r}): no numcodecs codec here "
                              f"({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class NumcodecsChain:
    """A chunk's declared chain: array-to-array codecs, then (after ``bytes``) bytes codecs."""

    filters: tuple[dict, ...]
    codecs: tuple[dict, ...]
    dtype: np.dtype  # the array's element, in the byte order the writer's ``bytes`` codec declares
    chunks: tuple[int, ...]

    @classmethod
    def from_hint(cls, hint: Any, dtype: np.dtype, chunks: tuple[int, ...]) -> "NumcodecsChain | None":
        if not isinstance(hint, dict):
            return None
        f, c = hint.get("filters"), hint.get("codecs")
        if not all(isinstance(x, list) and all(isinstance(d, dict) for d in x) for x in (f, c)):
            return None
        out = cls(tuple(f), tuple(c), dtype, tuple(chunks))
        try:
            out.coders()
        except UnsupportedType:
            return None
        return out

    def hint(self) -> dict:
        return {"filters": list(self.filters), "codecs": list(self.codecs)}

    def coders(self) -> tuple[list[Any], list[Any]]:
        n = self.dtype.itemsize
        return [codec(c, n) for c in self.filters], [codec(c, n) for c in self.codecs]

    def decode(self, data: bytes) -> bytes:
        """A written chunk -> its elements in C order (CodecError when it does not decode)."""
        from numcodecs.compat import ensure_contiguous_ndarray

        a2a, b2b = self.coders()
        want = math.prod(self.chunks) * self.dtype.itemsize
        try:
            buf: Any = data
            for c in reversed(b2b):
                buf = c.decode(buf)
            for c in reversed(a2a):
                buf = c.decode(buf)
            if a2a:  # numcodecs hands back the array's values (in its own byte order)
                raw = np.ascontiguousarray(np.asarray(buf).astype(self.dtype)).tobytes()
            else:
                raw = bytes(ensure_contiguous_ndarray(buf).view("u1"))
        except Exception as exc:  # numcodecs raises many types for bad input
            raise CodecError(f"chunk does not decode under {self.names()}: {type(exc).__name__}: {exc}") from None
        if len(raw) != want:
            raise CodecError(f"chunk decodes to {len(raw)} bytes under {self.names()}; a {list(self.chunks)} "
                             f"chunk needs {want}")
        return raw

    def encode(self, raw: bytes) -> bytes:
        """A chunk's elements in C order -> the bytes the declared chain writes."""
        from numcodecs.compat import ensure_contiguous_ndarray

        a2a, b2b = self.coders()
        buf: Any = np.frombuffer(raw, dtype=self.dtype).reshape(self.chunks)
        for c in a2a:
            buf = c.encode(buf)
        data: Any = np.ascontiguousarray(buf).tobytes()
        for c in b2b:
            data = c.encode(data)
        return bytes(ensure_contiguous_ndarray(data).view("u1"))

    def check(self) -> None:
        """UnsupportedType when the chain cannot code this array's elements (bitround of
        integers...): tried once on a small chunk of zeros, so it is refused at its ``zarr.json``."""
        self.coders()
        trial = NumcodecsChain(self.filters, self.codecs, self.dtype, tuple(min(c, 2) for c in self.chunks))
        raw = bytes(math.prod(trial.chunks) * self.dtype.itemsize)
        try:
            back = trial.decode(trial.encode(raw))
        except Exception as exc:  # noqa: BLE001 - numcodecs raises many types
            back, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "values change on a round trip"
        if back != raw:
            kind = "array-to-array codec" if self.filters else "codec"
            raise UnsupportedType(f"{kind} {self.names()} cannot be written through the view for "
                                  f"{self.dtype.name} elements ({why})")

    def names(self) -> str:
        return "+".join(str(c.get("name")) for c in self.filters + self.codecs)


def needs_numcodecs(a2a: list[dict], bytes_reason: str, declared: list[dict]) -> bool:
    """A chain only numcodecs codes: an array-to-array codec the store cannot keep the chunks
    under, or a ``numcodecs.*`` bytes codec outside the table (``bytes_reason`` says which)."""
    body = declared[:-1] if declared and declared[-1].get("name") == "crc32c" else declared  # a checksum trailer
    return bool(a2a) or (bool(bytes_reason) and all(str(c.get("name", "")).startswith(PREFIX) or c.get("name") in CORE
                                                    for c in body))
