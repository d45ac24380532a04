"""What tools write into the N5 view: ``attributes.json`` files and block files.

:class:`N5Ingester` implements the write protocol (:mod:`polyfs.writes.protocol`).
A dataset's ``attributes.json`` carries ``dimensions``/``blockSize`` (fastest
dimension first: reversed into C order here), ``dataType`` and
``compression``; every other key is a user attribute. A block is a
big-endian header (mode, rank, the block's own extent) and the compressed
C-order payload; writers such as z5py truncate edge blocks, which are
reported so they can be padded.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

from ...errors import InvalidInput, UnsupportedType
from ...model import types as T
from ...model.schema import Dataset, Group
from ...model.types import ArrayType, resolved
from ...views import hdmf
from ...views.base import ViewContext
from ...writes.chunkin import Incoming
from ...writes.protocol import ArrayWrite, ByteSource, GroupWrite, WrittenChunk
from ..base import json_object
from .spec import DATASET_KEYS, HINT_PREFIX, META, MODE_DEFAULT, MODE_NAMES, N5_KEYS, RESERVED, compression_of, \
    declared_hints, geometry, group_skip, group_user_attributes, is_dataset_attributes, numpy_dtype, \
    parse_block_header

ZARR_METADATA = frozenset({".zarray", ".zgroup", ".zattrs", ".zmetadata", "zarr.json"})
HEADER_PROBE = 4096  # bytes read for a block header (a header of 1000 dimensions fits)
# what a malformed (but valid JSON) attributes.json makes Python raise while it is read
MALFORMED = (KeyError, TypeError, ValueError, OverflowError, AttributeError, RecursionError)


@dataclass(frozen=True)
class BlockLayout:
    """What the N5 view adds to a dataset's blocks (``ArrayWrite.layout`` of a shown dataset):
    trailing C-order dimensions for HDF5 array elements, or a 1-element block for a scalar."""

    element_dims: int = 0
    scalar: bool = False


def _err(where: str, cause: object) -> InvalidInput:
    return InvalidInput(f"{where}: {cause}")


def load(data: bytes, where: str) -> dict[str, Any]:
    try:
        return json_object(data) if data.strip() else {}
    except ValueError as exc:
        raise _err(where, exc) from None
    except RecursionError:
        raise _err(where, "not valid JSON (nested too deeply)") from None


def user_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if k not in RESERVED and k != "n5"}


def parse(data: bytes, where: str) -> GroupWrite | ArrayWrite:
    attrs = load(data, where)
    try:
        return _parse(attrs, where)
    except MALFORMED as exc:
        raise _err(where, f"malformed attributes ({type(exc).__name__}: {exc})") from None


def _parse(attrs: dict[str, Any], where: str) -> GroupWrite | ArrayWrite:
    if not is_dataset_attributes(attrs):  # n5-java's rule: a group may have a dataType of its own
        return GroupWrite(group_user_attributes(attrs))
    missing = [k for k in DATASET_KEYS if k not in attrs]
    if missing:
        raise _err(where, f"dataset attributes lack {', '.join(missing)}")
    npdt = numpy_dtype(attrs["dataType"])
    if npdt is None:
        raise UnsupportedType(f"{where}: dataType {attrs['dataType']!r} cannot be written (numeric types can)")
    try:
        shape, block = geometry(attrs, npdt.itemsize)
    except ValueError as exc:
        raise _err(where, exc) from None
    try:
        comp = compression_of(attrs, npdt, block)
    except ValueError as exc:
        raise _err(where, exc) from None
    if comp.filters is None:
        raise UnsupportedType(f"{where}: compression {comp.kind!r} cannot be written "
                              f"(raw, gzip, zstd, bzip2, blosc can)")
    user = user_attributes(attrs)
    hints = declared_hints(comp, user, len(shape), attrs.get("compression"), npdt)
    return ArrayWrite(shape, T.from_numpy(npdt), block, comp.filters, Incoming(npdt, comp.filters, comp.gzip_member),
                      None, user, (1,) * len(shape), hints=hints, fill_declared=False)


class N5Ingester:
    meta_name = META
    skip_attributes = hdmf.RESERVED + N5_KEYS
    hint_prefix = HINT_PREFIX
    absent_is_zero = True  # N5 readers read an absent block as zeros: writers delete all-zero blocks

    def __init__(self, ctx: ViewContext) -> None:
        self.ctx = ctx

    def hidden_members(self, t: Any, group: Group) -> list[str]:
        """Nothing: the N5 view shows every member (netCDF dimensions too)."""
        return []

    def parse_metadata(self, data: bytes, where: str) -> GroupWrite | ArrayWrite:
        return parse(data, where)

    def refuse_name(self, rest: list[str]) -> str | None:
        """Zarr metadata (zarr_n5 under zarr-python 3 writes ``.zarray`` and ``0.0`` chunks, not
        N5; a Zarr v3 writer pointed here writes ``zarr.json``): kept, it would live only in
        the daemon's memory and vanish at unmount."""
        if rest[-1] in ZARR_METADATA:
            return f"Zarr metadata ({rest[-1]}) cannot be written in the N5 view (write Zarr through zarr/)"
        return None

    def shown(self, t: Any, ds: Dataset) -> ArrayWrite:
        from .view import N5Domain

        got = parse(N5Domain(t.model, self.ctx).shown_metadata(ds, t.h5path), f"{t.domain}:{t.h5path}")
        assert isinstance(got, ArrayWrite)
        elem = resolved(ds.type)
        layout = BlockLayout(len(elem.dims) if isinstance(elem, ArrayType) else 0, not ds.shape.array_shape)
        return replace(got, layout=layout) if layout != BlockLayout() else got

    def shown_attributes(self, t: Any, obj: Group | Dataset) -> dict[str, Any]:
        from .view import N5Domain

        # a group's as N5Domain.group_metadata shows them; a dataset's as its attributes.json
        skip = hdmf.RESERVED + group_skip(obj.attributes) if isinstance(obj, Group) else self.skip_attributes
        return N5Domain(t.model, self.ctx).shown_attributes(obj, t.h5path, skip)

    def file_position(self, rest: list[str], decl: ArrayWrite) -> tuple[int, ...] | None:
        if len(rest) != len(decl.shape) or not all(p.isdigit() for p in rest):
            return None
        pos = tuple(int(p) for p in reversed(rest))
        inner = decl.layout.element_dims if decl.layout else 0  # whole in every block, so at 0
        if not inner:
            return pos
        return (pos[:-inner] or (0,)) if not any(pos[-inner:]) else None  # a scalar's: its chunk ``0``

    def dir_position(self, rest: list[str], decl: ArrayWrite) -> tuple[list[int], int] | None:
        if not all(p.isdigit() for p in rest) or len(rest) > len(decl.shape):
            return None
        # N5 paths name the fastest dimension first: directory i/j fixes the last dims
        return [int(p) for p in rest], -1

    def chunks_in(self, src: ByteSource, decl: ArrayWrite, members: dict[int, tuple[int, ...]],
                  where: str) -> Iterator[WrittenChunk]:
        if decl.layout and decl.layout.element_dims:
            raise UnsupportedType(f"{where}: blocks of a dataset of HDF5 array elements cannot be written "
                                  f"through this view (write them through hdf5/)")
        size = src.size()
        if not size or 0 not in members:
            return
        head_bytes = src.read(0, min(size, HEADER_PROBE))
        try:
            head = parse_block_header(head_bytes)
        except ValueError as exc:
            raise _err(where, exc) from None
        rank = len(decl.shape)
        if head.mode != MODE_DEFAULT:
            raise UnsupportedType(f"{where}: {MODE_NAMES[head.mode]}-mode block (mode {head.mode}); only "
                                  f"default-mode blocks (mode 0) of numeric data can be written")
        if len(head.dims_n5) != rank:
            raise _err(where, f"block header has {len(head.dims_n5)} dimensions, the dataset {rank}")
        dims = head.dims
        if any(d > b or d <= 0 for d, b in zip(dims, decl.chunks)):
            raise _err(where, f"block header dims {list(head.dims_n5)} do not fit blockSize "
                              f"{list(reversed(decl.chunks))}")
        scalar = decl.layout is not None and decl.layout.scalar  # its 1-element block: the whole (0-d) chunk
        yield WrittenChunk(members[0], src.read(head.size, size - head.size), None if scalar else dims)


def make_ingester(ctx: ViewContext) -> N5Ingester:
    return N5Ingester(ctx)
