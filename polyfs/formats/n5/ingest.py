"""What an ``attributes.json`` or block file written through the N5 view asks for.

A dataset's ``attributes.json`` carries ``dimensions``/``blockSize`` (fastest
dimension first: reversed into C order here), ``dataType`` and
``compression``; every other key is a user attribute. A block is a
big-endian header (mode, rank, the block's own extent) and the compressed
C-order payload; writers such as z5py truncate edge blocks, which
:func:`parse_block` reports so they can be padded.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codecs.registry import BLOSC, BLOSC_CODES, BZIP2, DEFLATE, ZSTD, Filter
from ...errors import InvalidInput, UnsupportedType
from .source import BLOCK_HEAD, RESERVED, block_dims_layout
from ...model import types as T
from ...writes.chunkin import Incoming

_DTYPES = {"uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "int8": "i1", "int16": "i2",
           "int32": "i4", "int64": "i8", "float32": "f4", "float64": "f8"}
DATASET_KEYS = ("dimensions", "blockSize", "dataType")


@dataclass
class N5Dataset:
    shape: tuple[int, ...]  # C order
    block: tuple[int, ...]  # C order
    dtype: T.DType  # big-endian
    filters: tuple[Filter, ...]
    incoming: Incoming
    attributes: dict[str, Any]


def _err(where: str, cause: str) -> InvalidInput:
    return InvalidInput(f"{where}: {cause}")


def load(data: bytes, where: str) -> dict[str, Any]:
    try:
        attrs = json.loads(data) if data.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise _err(where, f"not valid JSON ({exc})") from None
    if not isinstance(attrs, dict):
        raise _err(where, "not a JSON object")
    return attrs


def is_dataset(attrs: dict[str, Any]) -> bool:
    return any(k in attrs for k in DATASET_KEYS)


def user_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if k not in RESERVED and k != "n5"}


def dataset(attrs: dict[str, Any], where: str) -> N5Dataset:
    missing = [k for k in DATASET_KEYS if k not in attrs]
    if missing:
        raise _err(where, f"dataset attributes lack {', '.join(missing)}")
    try:
        shape = tuple(int(x) for x in reversed(attrs["dimensions"]))
        block = tuple(int(x) for x in reversed(attrs["blockSize"]))
    except (TypeError, ValueError) as exc:
        raise _err(where, f"malformed dimensions/blockSize ({exc})") from None
    name = attrs["dataType"]
    if name not in _DTYPES:
        raise UnsupportedType(f"{where}: dataType {name!r} cannot be written (numeric types can)")
    if not shape or len(block) != len(shape) or any(b <= 0 for b in block) or any(d < 0 for d in shape):
        raise _err(where, f"blockSize {attrs['blockSize']} does not fit dimensions {attrs['dimensions']}")
    npdt = np.dtype(">" + _DTYPES[name])
    filters, member = compression(attrs, npdt, block, where)
    return N5Dataset(shape, block, T.from_numpy(npdt), filters, Incoming(npdt, filters, member),
                     user_attributes(attrs))


def compression(attrs: dict, npdt: np.dtype, block: tuple[int, ...], where: str) -> tuple[tuple[Filter, ...], bool]:
    """(HDF5 filters, payload is a gzip member) of an N5 ``compression``."""
    comp = attrs.get("compression")
    if comp is None:
        comp = {"type": attrs.get("compressionType", "raw")}
    if not isinstance(comp, dict) or "type" not in comp:
        raise _err(where, f"malformed compression {comp!r}")
    kind = comp["type"]
    if kind == "raw":
        return (), False
    if kind == "gzip":
        level = int(comp.get("level", -1))
        return (Filter(DEFLATE, (level if 0 <= level <= 9 else 6,)),), not comp.get("useZlib", False)
    if kind == "zstd":
        return (Filter(ZSTD, (int(comp.get("level", 3)),)),), False
    if kind == "bzip2":
        return (Filter(BZIP2, (int(comp.get("blockSize", 9)),)),), False
    if kind == "blosc":
        cname = str(comp.get("cname", "blosclz"))
        if cname not in BLOSC_CODES:
            raise UnsupportedType(f"{where}: blosc cname {cname!r} is not supported")
        return (Filter(BLOSC, (2, 2, npdt.itemsize, math.prod(block) * npdt.itemsize, int(comp.get("clevel", 5)),
                               int(comp.get("shuffle", 1)), BLOSC_CODES[cname])),), False
    raise UnsupportedType(f"{where}: compression {kind!r} cannot be written (raw, gzip, zstd, bzip2, blosc can)")


def parse_block(data: bytes, rank: int, block: tuple[int, ...], where: str) -> tuple[tuple[int, ...], bytes]:
    """(C-order extent of the block, payload); refuses headers that do not fit the dataset."""
    if len(data) < BLOCK_HEAD.size:
        raise _err(where, f"block of {len(data)} bytes has no header")
    head = BLOCK_HEAD.unpack(data)
    if head["mode"] != 0:
        raise UnsupportedType(f"{where}: block mode {head['mode']} (only default-mode blocks can be written)")
    if head["ndim"] != rank:
        raise _err(where, f"block header has {head['ndim']} dimensions, the dataset {rank}")
    lay = block_dims_layout(rank)
    if len(data) < BLOCK_HEAD.size + lay.size:
        raise _err(where, "block header is truncated")
    rec = lay.unpack(data, BLOCK_HEAD.size)
    dims = tuple(int(rec[f"d{i}"]) for i in reversed(range(rank)))
    if any(d > b or d <= 0 for d, b in zip(dims, block)):
        raise _err(where, f"block header dims {list(reversed(dims))} do not fit blockSize {list(reversed(block))}")
    return dims, data[BLOCK_HEAD.size + lay.size:]
