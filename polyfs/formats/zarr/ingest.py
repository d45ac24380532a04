"""What a ``zarr.json`` written through the Zarr view asks for, and shard splitting.

:func:`parse` validates a written ``zarr.json`` as Zarr v3 metadata and
returns a :class:`GroupMeta` or :class:`ArrayMeta`: the dataset it describes
(type, shape, canonical chunk shape, filters, fill value), how its chunk
files are laid out (sharded or not, key encoding) and how each chunk is
encoded (:class:`~polyfs.writes.chunkin.Incoming`). :func:`split_shard` reads
a shard's index (checking its crc32c) and returns its inner chunks. Anything
the store cannot hold is an :class:`InvalidInput` naming the cause.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ...codecs.pipeline import strip_crc32c
from ...codecs.registry import Filter
from ...errors import CodecError, InvalidInput, UnsupportedType
from ...importers.common import dtype_from_numpy
from .source import DTYPES, bytes_codecs, fill_json, is_real_transpose
from ...model import types as T
from ...writes.chunkin import Incoming

MISSING = 2 ** 64 - 1


@dataclass
class GroupMeta:
    attributes: dict[str, Any]


@dataclass
class ArrayMeta:
    shape: tuple[int, ...]
    dtype: T.DType  # the stored element type (byte order of the bytes codec)
    chunks: tuple[int, ...]  # canonical (inner) chunk shape
    outer: tuple[int, ...]  # chunk-file shape (shard shape, or = chunks)
    sharded: bool
    filters: tuple[Filter, ...]
    incoming: Incoming
    fill: Any
    attributes: dict[str, Any]
    dimension_names: list[str | None] | None
    key_of: Callable[[tuple[int, ...]], str] = field(repr=False, default=lambda c: "")
    separator: str = "/"
    index_at_start: bool = False
    index_crc32c: bool = True
    index_big: bool = False

    @property
    def per_shard(self) -> tuple[int, ...]:
        return tuple(o // c for o, c in zip(self.outer, self.chunks))

    @property
    def index_size(self) -> int:
        return 16 * math.prod(self.per_shard) + (4 if self.index_crc32c else 0)

    def file_position(self, rel: list[str]) -> tuple[int, ...] | None:
        """Chunk-file grid coordinates of a path below the array (``c/0/1``), or None."""
        if not rel:
            return None
        if self.separator == "/":
            if rel[0] != "c":
                return None
            parts = rel[1:]
        else:
            if len(rel) != 1 or not (rel[0] == "c" or rel[0].startswith("c" + self.separator)):
                return None
            parts = rel[0].split(self.separator)[1:]
        if len(parts) != len(self.shape) or not all(p.isdigit() for p in parts):
            return None
        return tuple(int(p) for p in parts)


def _err(where: str, cause: str) -> InvalidInput:
    return InvalidInput(f"{where}: {cause}")


def parse(data: bytes, where: str) -> GroupMeta | ArrayMeta:
    try:
        meta = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _err(where, f"not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise _err(where, "not a JSON object")
    if meta.get("zarr_format") != 3:
        raise _err(where, f"zarr_format {meta.get('zarr_format')!r} (only Zarr v3 metadata can be written)")
    attrs = meta.get("attributes", {})
    if not isinstance(attrs, dict):
        raise _err(where, "attributes is not a JSON object")
    kind = meta.get("node_type")
    if kind == "group":
        return GroupMeta(attrs)
    if kind != "array":
        raise _err(where, f"node_type {kind!r} is neither group nor array")
    try:
        return _array(meta, attrs, where)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _err(where, f"malformed array metadata ({type(exc).__name__}: {exc})") from None


def _array(meta: dict, attrs: dict, where: str) -> ArrayMeta:
    if meta.get("storage_transformers"):
        raise _err(where, "storage_transformers are not supported")
    shape = tuple(int(x) for x in meta["shape"])
    if any(d < 0 for d in shape):
        raise _err(where, f"negative shape {list(shape)}")
    grid = meta["chunk_grid"]
    if grid.get("name") != "regular":
        raise _err(where, f"chunk_grid {grid.get('name')!r} (only regular grids are supported)")
    outer = tuple(int(x) for x in grid["configuration"]["chunk_shape"])
    if len(outer) != len(shape) or any(c <= 0 for c in outer):
        raise _err(where, f"chunk_shape {list(outer)} does not fit shape {list(shape)}")
    if not shape:
        raise _err(where, "0-d arrays cannot be written through the view")
    codecs = list(meta.get("codecs") or [])
    chunks, sharded, inner_codecs, idx = outer, False, codecs, {}
    if codecs and codecs[0].get("name") == "sharding_indexed":
        if len(codecs) != 1:
            raise _err(where, "codecs after sharding_indexed are not supported")
        cfg = codecs[0].get("configuration") or {}
        chunks = tuple(int(x) for x in cfg["chunk_shape"])
        if len(chunks) != len(shape) or any(c <= 0 for c in chunks) or any(o % c for o, c in zip(outer, chunks)):
            raise _err(where, f"inner chunk_shape {list(chunks)} does not divide the shard shape {list(outer)}")
        sharded, inner_codecs = True, list(cfg.get("codecs") or [])
        idx = _index_codecs(cfg, where)
    endian, filters, incoming_flags = _chain(inner_codecs, meta, where, len(shape))
    npdt = _numpy_dtype(meta.get("data_type"), endian, where)
    dtype = dtype_from_numpy(npdt)
    fill = fill_json(meta.get("fill_value"), dtype, where, lambda w, c: _err(str(w), str(c)))
    dims = meta.get("dimension_names")
    if dims is not None and (not isinstance(dims, list) or len(dims) != len(shape)
                             or not all(d is None or isinstance(d, str) for d in dims)):
        raise _err(where, f"dimension_names {dims!r} must list one name or null per dimension")
    key_of, sep = _key_encoding(meta.get("chunk_key_encoding") or {"name": "default"}, where)
    inc = Incoming(npdt, tuple(filters), incoming_flags["gzip"], incoming_flags["crc32c"])
    return ArrayMeta(shape, dtype, chunks, outer, sharded, tuple(filters), inc, fill, attrs, dims, key_of, sep,
                     idx.get("start", False), idx.get("crc", True), idx.get("big", False))


def _index_codecs(cfg: dict, where: str) -> dict:
    out = {"start": cfg.get("index_location", "end") == "start", "crc": False, "big": False}
    for c in cfg.get("index_codecs") or [{"name": "bytes", "configuration": {"endian": "little"}},
                                         {"name": "crc32c"}]:
        if c.get("name") == "bytes":
            out["big"] = (c.get("configuration") or {}).get("endian") == "big"
        elif c.get("name") == "crc32c":
            out["crc"] = True
        else:
            raise _err(where, f"shard index codec {c.get('name')!r} is not supported")
    return out


def _chain(codecs: list[dict], meta: dict, where: str, rank: int) -> tuple[str, list[Filter], dict]:
    ab = [i for i, c in enumerate(codecs) if c.get("name") in ("bytes", "endian", "vlen-utf8", "vlen-bytes")]
    if not ab:
        raise _err(where, "the codec chain has no bytes codec")
    if any(is_real_transpose(c, rank) for c in codecs[:ab[0]]):
        raise _err(where, "array-to-array codecs (transpose) cannot be written through the view")
    head = codecs[ab[0]]
    if head["name"] not in ("bytes", "endian"):
        raise UnsupportedType(f"{where}: {head['name']} arrays cannot be written through the view")
    endian = (head.get("configuration") or {}).get("endian", "little")
    itemsize = _numpy_dtype(meta.get("data_type"), endian, where).itemsize
    chain = bytes_codecs(codecs[ab[0] + 1:], itemsize)
    if chain.reason:
        raise _err(where, f"{chain.reason} is not supported")
    return endian, chain.filters, {"gzip": chain.gzip, "crc32c": chain.strip_crc32c}


def _numpy_dtype(dt: Any, endian: str, where: str) -> np.dtype:
    if isinstance(dt, str) and dt in DTYPES:
        code = DTYPES[dt]
        return np.dtype(code if code.startswith("|") else (">" if endian == "big" else "<") + code)
    raise UnsupportedType(f"{where}: data_type {dt!r} cannot be written through the view "
                          f"(numeric and bool arrays can)")


def _key_encoding(enc: dict, where: str) -> tuple[Callable[[tuple[int, ...]], str], str]:
    name = enc.get("name", "default")
    sep = (enc.get("configuration") or {}).get("separator")
    if name == "default":
        sep = sep or "/"
        if sep not in ("/", "."):
            raise _err(where, f"chunk key separator {sep!r}")
        return (lambda c: "c" + "".join(sep + str(i) for i in c)), sep
    raise _err(where, f"chunk_key_encoding {name!r} cannot be written through the view (use 'default')")


def split_shard(blob: bytes, meta: ArrayMeta, where: str) -> dict[int, bytes]:
    """Inner chunks of a shard file: local C-order index -> encoded bytes."""
    n = math.prod(meta.per_shard)
    isize = meta.index_size
    if len(blob) < isize:
        raise _err(where, f"shard of {len(blob)} bytes is shorter than its index ({isize} bytes)")
    raw = blob[:isize] if meta.index_at_start else blob[len(blob) - isize:]
    if meta.index_crc32c:
        try:
            raw = strip_crc32c(raw)
        except CodecError as exc:
            raise CodecError(f"{where}: shard index {exc}") from None
    entries = np.frombuffer(raw, dtype=">u8" if meta.index_big else "<u8").reshape(n, 2)
    out: dict[int, bytes] = {}
    for local in range(n):
        off, nb = int(entries[local, 0]), int(entries[local, 1])
        if off == MISSING and nb == MISSING:
            continue
        if off + nb > len(blob):
            raise _err(where, f"inner chunk {local} ({off}+{nb}) lies outside the shard of {len(blob)} bytes")
        out[local] = blob[off:off + nb]
    return out
