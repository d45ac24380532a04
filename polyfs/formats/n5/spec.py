"""N5 4.0.0 spelled once: the block header, ``dataType`` names, ``compression`` objects.

Used in both directions: the view packs headers and writes ``compression``
for stored filters; the ingester and the importer parse headers and map a
``compression`` onto HDF5 filters. Pure: no I/O. Errors are ``ValueError``
with the cause; callers add where it happened. N5 lists dimensions fastest
first; everything here takes and returns C order unless a name says ``n5``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ...binfmt import Layout
from ...codecs.pipeline import Pipeline
from ...codecs.registry import BLOSC, BLOSC_CODES, BZIP2, DEFLATE, ZSTD, Filter
from ...model import limits

META = "attributes.json"
N5_VERSION = "4.0.0"
MODE_DEFAULT = 0
MODE_VARLENGTH = 1
MODE_OBJECT = 2  # a serialized object: the mode, then the payload (no dims)
MODE_NAMES = {MODE_DEFAULT: "default", MODE_VARLENGTH: "varlength", MODE_OBJECT: "object"}
MAX_BLOCK_DIM = 2**32 - 1  # a block header holds each extent as a uint32
# keys of a dataset's attributes.json that are not user attributes
DATASET_KEYS = ("dimensions", "blockSize", "dataType")
RESERVED = DATASET_KEYS + ("compression", "compressionType")
N5_KEYS = ("n5",) + DATASET_KEYS + ("compression",)
# what makes attributes.json a dataset's: n5-java reads a node without both as a group, so a
# group's own ``dataType`` (BigDataViewer's setup groups) or ``dimensions`` is an attribute
DATASET_MARKS = ("dimensions", "dataType")


def is_dataset_attributes(attrs: Any) -> bool:
    """True if an ``attributes.json`` (or its names) describes a dataset (n5-java's rule)."""
    return all(k in attrs for k in DATASET_MARKS)


def group_skip(names: Any) -> tuple[str, ...]:
    """The attribute names of a group (``names``) N5 cannot show as its attributes: the
    container's version, and the dataset keys when together they would make it a dataset."""
    return N5_KEYS if is_dataset_attributes(names) else ("n5",)


def group_user_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes a group's ``attributes.json`` sets."""
    skip = group_skip(attrs)
    return {k: v for k, v in attrs.items() if k not in skip}

# per-axis attributes N5 readers interpret (tensorstore rejects other shapes)
AXIS_ATTRS = {
    "units": lambda v, n: isinstance(v, list) and len(v) == n and all(isinstance(x, str) for x in v),
    "axes": lambda v, n: isinstance(v, list) and len(v) == n and all(isinstance(x, str) for x in v),
    "resolution": lambda v, n: isinstance(v, list) and len(v) == n
    and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v),
}
# what a writer declared in its attributes.json that the view serves back as written (kept in
# the dataset's view hints; only spellings other than the view's default are kept):
HINT_PREFIX = "n5_"  # every hint the N5 view keeps starts so (a rewrite replaces only these)
HINT_ZLIB = HINT_PREFIX + "use_zlib"  # gzip with useZlib: blocks are the stored zlib stream
HINT_AXIS_ATTRS = HINT_PREFIX + "axis_attributes"  # units/axes/resolution written in another than the per-axis form
# the compression as written where it reads the same blocks but is spelled otherwise than the view
# spells it (tensorstore's gzip "level": -1): tensorstore refuses to resize a dataset whose
# attributes.json reads back with another compression
HINT_COMPRESSION = HINT_PREFIX + "compression"


def not_per_axis(attrs: dict[str, Any], rank: int) -> list[str]:
    """The attributes named like N5's per-axis ones that do not have their form."""
    return sorted(k for k in attrs if k in AXIS_ATTRS and not AXIS_ATTRS[k](attrs[k], rank))


def declared_hints(compression: Compression, attrs: dict[str, Any], rank: int,
                   declared: Any = None, npdt: np.dtype | None = None) -> dict[str, Any]:
    """The view hints a written dataset ``attributes.json`` leaves (empty for the defaults);
    ``declared``: its ``compression`` object as written, for ``npdt`` elements."""
    hints: dict[str, Any] = {}
    if compression.kind == "gzip" and not compression.gzip_member:
        hints[HINT_ZLIB] = True
    if isinstance(declared, dict) and npdt is not None and compression.filters is not None:
        shown = compression_for(Pipeline(compression.filters, npdt.itemsize), not compression.gzip_member)
        if shown is not None and shown != declared:
            hints[HINT_COMPRESSION] = declared
    odd = not_per_axis(attrs, rank)
    if odd:
        hints[HINT_AXIS_ATTRS] = odd
    return hints


# dataType name <-> big-endian numpy dtype
DATA_TYPES = {"uint8": ">u1", "uint16": ">u2", "uint32": ">u4", "uint64": ">u8", "int8": ">i1", "int16": ">i2",
              "int32": ">i4", "int64": ">i8", "float32": ">f4", "float64": ">f8"}
_NAME_OF = {(np.dtype(v).kind, np.dtype(v).itemsize): k for k, v in DATA_TYPES.items()}
_NAME_OF[("b", 1)] = "uint8"

BLOCK_HEAD = Layout.of("n5 block header", [("mode", "H"), ("ndim", "H")], ">")
NUM_ELEMENTS = Layout.of("n5 varlength count", [("num", "I")], ">")


def data_type_name(dt: np.dtype) -> str | None:
    """The N5 ``dataType`` of a numpy element type (bool as uint8), or None."""
    return _NAME_OF.get((dt.kind, dt.itemsize))


def numpy_dtype(name: Any) -> np.dtype | None:
    return np.dtype(DATA_TYPES[name]) if isinstance(name, str) and name in DATA_TYPES else None


@lru_cache(maxsize=None)
def block_dims_layout(ndim: int) -> Layout:
    return Layout.of(f"n5 block dims[{ndim}]", [(f"d{i}", "I") for i in range(ndim)], ">")


def block_header(block_dims_n5: tuple[int, ...]) -> bytes:
    """Header of a default-mode block whose dims are given in N5 order (fastest first)."""
    n = len(block_dims_n5)
    return BLOCK_HEAD.pack(mode=MODE_DEFAULT, ndim=n) + \
        block_dims_layout(n).pack({f"d{i}": int(d) for i, d in enumerate(block_dims_n5)})


@dataclass(frozen=True)
class BlockHeader:
    mode: int
    dims_n5: tuple[int, ...]  # the block's own extent, fastest first
    size: int  # header bytes before the payload
    num_elements: int | None = None  # varlength mode only

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(reversed(self.dims_n5))


def parse_block_header(buf: bytes | memoryview) -> BlockHeader:
    """The header at the start of a block file; ValueError if truncated or of an unknown mode.
    An object-mode block has no dims (``dims_n5`` empty): callers refuse it by its mode."""
    if len(buf) < 2:
        raise ValueError(f"block of {len(buf)} bytes has no header")
    mode = int.from_bytes(bytes(buf[:2]), "big")
    if mode == MODE_OBJECT:
        return BlockHeader(mode, (), 2)
    if mode not in (MODE_DEFAULT, MODE_VARLENGTH):
        raise ValueError(f"block mode {mode} is not an N5 block mode (0, 1 or 2)")
    if len(buf) < BLOCK_HEAD.size:
        raise ValueError(f"block of {len(buf)} bytes has no header")
    ndim = BLOCK_HEAD.unpack(buf)["ndim"]
    lay = block_dims_layout(ndim)
    size = BLOCK_HEAD.size + lay.size
    if len(buf) < size + (NUM_ELEMENTS.size if mode == MODE_VARLENGTH else 0):
        raise ValueError("block header is truncated")
    rec = lay.unpack(buf, BLOCK_HEAD.size)
    dims = tuple(int(rec[f"d{i}"]) for i in range(ndim))
    if mode == MODE_VARLENGTH:
        num = NUM_ELEMENTS.unpack(buf, size)["num"]
        return BlockHeader(mode, dims, size + NUM_ELEMENTS.size, num)
    return BlockHeader(mode, dims, size)


def _extents(value: Any, key: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise ValueError(f"{key} must be a list of integers, not {value!r}")
    return tuple(reversed(value))


def geometry(attrs: dict[str, Any], itemsize: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """C-order (shape, block shape) of a dataset's ``attributes.json``; ValueError naming what
    does not fit (JSON floats, strings or booleans are no extents; a block must fit its header's
    uint32s, and the store's limits, :mod:`polyfs.model.limits`)."""
    shape = _extents(attrs["dimensions"], "dimensions")
    block = _extents(attrs["blockSize"], "blockSize")
    if not shape:
        raise ValueError("0-d N5 datasets are not supported")
    if len(block) != len(shape) or any(not 0 < b <= MAX_BLOCK_DIM for b in block):
        raise ValueError(f"blockSize {attrs['blockSize']} does not fit dimensions {attrs['dimensions']}")
    why = limits.extent_problem(shape, block) or limits.chunk_problem(block, itemsize)
    if why:
        raise ValueError(why)
    return shape, block


# -- compression <-> HDF5 filters -------------------------------------------------------------
@dataclass(frozen=True)
class Compression:
    """An N5 ``compression`` as HDF5 filters. ``gzip_member``: the payload is a gzip member
    (not ``useZlib``); ``filters`` None: no filter in polyfs's table reads it."""

    kind: str
    filters: tuple[Filter, ...] | None
    gzip_member: bool = False


def compression_of(attrs: dict, npdt: np.dtype, block: tuple[int, ...]) -> Compression:
    """The compression a dataset's ``attributes.json`` declares."""
    comp = attrs.get("compression")
    if comp is None:
        comp = {"type": attrs.get("compressionType", "raw")}
    if not isinstance(comp, dict) or "type" not in comp:
        raise ValueError(f"malformed compression {comp!r}")
    kind = comp["type"]
    if kind == "raw":
        return Compression(kind, ())
    if kind == "gzip":
        level = int(comp.get("level", -1))
        return Compression(kind, (Filter(DEFLATE, (level if 0 <= level <= 9 else 6,)),),
                           not comp.get("useZlib", False))
    if kind == "zstd":
        return Compression(kind, (Filter(ZSTD, (int(comp.get("level", 3)),)),))
    if kind == "bzip2":
        return Compression(kind, (Filter(BZIP2, (int(comp.get("blockSize", 9)),)),))
    if kind == "blosc":
        cname = str(comp.get("cname", "blosclz"))
        if cname not in BLOSC_CODES:
            return Compression(kind, None)
        return Compression(kind, (Filter(BLOSC, (2, 2, npdt.itemsize, math.prod(block) * npdt.itemsize,
                                                 int(comp.get("clevel", 5)), int(comp.get("shuffle", 1)),
                                                 BLOSC_CODES[cname])),))
    return Compression(kind, None)


def declared_compression(declared: Any, shown: dict, npdt: np.dtype, block: tuple[int, ...]) -> dict:
    """A writer's own ``compression`` object (a view hint) where it reads the blocks that
    ``shown`` reads (the same filters, the same gzip framing), else ``shown``."""
    if not isinstance(declared, dict):
        return shown
    try:
        comp = compression_of({"compression": declared}, npdt, block)
    except (ValueError, TypeError, AttributeError, OverflowError):
        return shown
    if comp.filters is None:
        return shown
    same = compression_for(Pipeline(comp.filters, npdt.itemsize), not comp.gzip_member) == shown
    return declared if same else shown


def compression_for(pipe: Pipeline, use_zlib: bool = False) -> dict | None:
    """The N5 ``compression`` that reads bytes stored under ``pipe`` (None: none does); deflate
    is a gzip member spliced from the stored zlib stream, or with ``use_zlib`` that stream as
    it is (``useZlib``)."""
    if pipe.is_identity:
        return {"type": "raw"}
    if len(pipe.filters) != 1:
        return None
    f = pipe.filters[0]
    if f.id == DEFLATE:
        comp = {"type": "gzip", "level": f.level if f.level is not None else 6}
        return {**comp, "useZlib": True} if use_zlib else comp
    if f.id in (ZSTD, BLOSC, BZIP2):
        return f.spec.n5(f)
    return None
