"""Object header messages and version 2 object headers.

Each builder returns a :class:`Message` whose body is a :class:`Blob` (it may
hold address slots: a B-tree, a heap, a committed type, a link target). The
versions are the oldest that say what is needed, so HDF5 1.8 and later,
pyfive and netCDF read them: dataspace 2 (scalar and null spaces), fill value
2, layout 3 (a version 1 B-tree chunk index, the one index every reader
knows), filter pipeline 1, attribute 1 (3 when the type is a committed one),
link info 0 / group info 0 / link 1 (each link with its creation order).

Object headers are version 2 with attribute creation order tracked and
indexed, as libhdf5 writes them under ``track_order`` (and netCDF-4 always):
an attribute message holds no order of its own, HDF5 keeps it in the v2
message header, so a version 1 header cannot tell HDF5 (h5py, netCDF) in
which order attributes were made. Here an attribute's order is its position
among the header's attribute messages, and an attribute info message says
how many there are.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

from ...codecs.registry import BLOSC, BZIP2, DEFLATE, FLETCHER32, SHUFFLE, ZSTD, Filter
from ...errors import UnsupportedType
from ...model import types as T
from ...model.schema import Shape
from .dtypes import encode_type, shared_type
from .filltime import DEFAULT_WRITE_TIME
from .layout import AddrKey, Blob
from .names import is_utf8_text, name_bytes
from .structs import (ALLOC_INCREMENTAL, ALLOC_LATE, ATTRIBUTE_INFO, ATTRIBUTE_INFO_ORDERED, ATTRIBUTE_V1, ATTRIBUTE_V3, DATASPACE_V2,
                      FILL_SIZE, FILL_V2, FILTER_PIPELINE_V1, FILTER_V1, FLAG_CONSTANT, FLAG_DONT_SHARE, FLAG_SHARED,
                      GROUP_INFO, LAYOUT_V3_CHUNKED, LAYOUT_V3_CONTIGUOUS, LINK_EXTERNAL, LINK_INFO, LINK_INFO_ORDERED,
                      LINK_SOFT, LINK_V1, MAX_CREATION_INDEX, MAX_MESSAGE, MESSAGE_V2, MESSAGE_V2_UNORDERED, MSG_ATTRIBUTE,
                      MSG_ATTRIBUTE_INFO, MSG_DATASPACE, MSG_DATATYPE, MSG_FILL, MSG_FILTERS, MSG_GROUP_INFO,
                      MSG_LAYOUT, MSG_LINK, MSG_LINK_INFO, MSG_NIL, MSG_REFCOUNT, MSG_SYMBOL_TABLE, OBJECT_HEADER_V2,
                      OHDR_ATTR_ORDER_INDEXED, OHDR_ATTR_ORDER_TRACKED, REFCOUNT, SPACE_NULL, SPACE_SCALAR,
                      SPACE_SIMPLE, SYMBOL_TABLE_MSG, UNDEF, padded)

FILTER_NAMES = {DEFLATE: "deflate", SHUFFLE: "shuffle", FLETCHER32: "fletcher32", ZSTD: "zstd",
                BLOSC: "blosc", BZIP2: "bzip2"}


# libhdf5 makes no object header chunk smaller than this (H5O_MIN_SIZE): when a writer adds a
# message to a full header, HDF5 puts a continuation message (16 bytes of body) where messages
# were, and over a smaller chunk it writes one that overruns it (the file is then unreadable)
MIN_HEADER_DATA = 22


class MessageTooLarge(UnsupportedType):
    """A message over the 64 KiB an object header message can hold."""


@dataclass
class Message:
    type: int
    body: Blob
    flags: int = 0
    name: str = ""  # an attribute's name (its dense storage indexes it)

    @property
    def size(self) -> int:
        return len(self.body)


def object_header(messages: Sequence[Message], refcount: int, dense_info: Blob | None = None,
                  tracked: bool = True) -> Blob:
    """A version 2 object header: one chunk holding every message, attributes numbered
    in creation order as they come (unless not ``tracked``: the object's file tracked none),
    an attribute info message when there are any (or ``dense_info``, when they are in dense
    storage: dense.py), a reference count message when more than one link leads here."""
    nattrs = sum(1 for m in messages if m.type == MSG_ATTRIBUTE)
    # past a 16-bit order: by name, as HDF5 lists untracked ones; dense storage tracks it
    ordered = (tracked or dense_info is not None) and nattrs <= MAX_CREATION_INDEX
    extra = []
    if refcount > 1:
        extra.append(Message(MSG_REFCOUNT, Blob(REFCOUNT.pack(refcount=refcount)), FLAG_DONT_SHARE))
    if dense_info is not None:  # creation order tracked and indexed, as in dense.py
        extra.append(Message(MSG_ATTRIBUTE_INFO, dense_info, FLAG_DONT_SHARE))
    elif nattrs:
        info = ATTRIBUTE_INFO_ORDERED.pack(max_creation_index=nattrs) if ordered else ATTRIBUTE_INFO.pack()
        extra.append(Message(MSG_ATTRIBUTE_INFO, Blob(info), FLAG_DONT_SHARE))
    messages = [*extra, *messages]
    head = MESSAGE_V2 if ordered else MESSAGE_V2_UNORDERED
    total = sum(head.size + m.size for m in messages)
    if total < MIN_HEADER_DATA:  # e.g. a committed integer type: one 18-byte message
        pad = Message(MSG_NIL, Blob(bytes(max(0, MIN_HEADER_DATA - total - head.size))))
        messages.append(pad)
        total += head.size + pad.size
    width = next(i for i, w in enumerate((1, 2, 4, 8)) if total < 1 << (8 * w))
    flags = width | (OHDR_ATTR_ORDER_TRACKED | OHDR_ATTR_ORDER_INDEXED if ordered else 0)
    out = Blob(OBJECT_HEADER_V2.pack(flags=flags))
    out.write(total.to_bytes(1 << width, "little"))
    order = 0
    for m in messages:
        if m.size > MAX_MESSAGE:
            raise MessageTooLarge(f"a message of type {m.type:#x} needs {m.size} bytes (at most {MAX_MESSAGE})")
        if ordered:
            out.write(MESSAGE_V2.pack(type=m.type, size=m.size, flags=m.flags,
                                      creation_order=order if m.type == MSG_ATTRIBUTE else 0))
            order += m.type == MSG_ATTRIBUTE
        else:
            out.write(MESSAGE_V2_UNORDERED.pack(type=m.type, size=m.size, flags=m.flags))
        out.extend(m.body)
    out.checksum(0)
    return out


# -- dataspace, datatype, fill value ----------------------------------------------------
def dataspace_bytes(shape: Shape, with_max: bool = True) -> bytes:
    if shape.kind == "null":
        return DATASPACE_V2.pack(rank=0, flags=0, kind=SPACE_NULL)
    if shape.kind == "scalar":
        return DATASPACE_V2.pack(rank=0, flags=0, kind=SPACE_SCALAR)
    rank = len(shape.dims)
    maxdims = shape.maxdims if with_max else None
    out = DATASPACE_V2.pack(rank=rank, flags=1 if maxdims is not None else 0, kind=SPACE_SIMPLE)
    out += struct.pack(f"<{rank}Q", *shape.dims)
    if maxdims is not None:
        out += struct.pack(f"<{rank}Q", *(UNDEF if m is None else int(m) for m in maxdims))
    return out


def dataspace(shape: Shape) -> Message:
    return Message(MSG_DATASPACE, Blob(dataspace_bytes(shape)))


def datatype(t: T.DType, constant: bool = True) -> Message:
    """A datatype message; a committed type is referred to (shared), not copied."""
    body = Blob()
    if isinstance(t, T.Committed):
        shared_type(t.id, body)
        return Message(MSG_DATATYPE, body, FLAG_CONSTANT | FLAG_SHARED)
    body.write(encode_type(t))
    return Message(MSG_DATATYPE, body, FLAG_CONSTANT if constant else 0)


def fill_value(value: bytes | Blob | None, chunked: bool, write_time: int = DEFAULT_WRITE_TIME) -> Message:
    """Fill value message 2: ``value`` None means the library default (zeros); a Blob is a
    variable-length value (a heap id, its address filled at render time); ``write_time``:
    when HDF5 writes it (see filltime.py)."""
    body = Blob(FILL_V2.pack(alloc_time=ALLOC_INCREMENTAL if chunked else ALLOC_LATE, write_time=write_time))
    if value is None:
        body.write(FILL_SIZE.pack(size=0))
    else:
        body.write(FILL_SIZE.pack(size=len(value)))
        body.extend(value if isinstance(value, Blob) else Blob(value))
    return Message(MSG_FILL, body, FLAG_CONSTANT)


# -- storage -----------------------------------------------------------------------------
def layout_chunked(btree: AddrKey | None, chunks: Sequence[int], itemsize: int) -> Message:
    body = Blob(LAYOUT_V3_CHUNKED.pack(dimensionality=len(chunks) + 1, btree_address=0))
    body.slot_at(LAYOUT_V3_CHUNKED.offset_of("btree_address"), btree)
    for c in chunks:
        if not 0 < c < 1 << 32:
            raise UnsupportedType(f"chunk dimension {c} does not fit HDF5's 32-bit chunk dims")
    body.write(struct.pack(f"<{len(chunks) + 1}I", *chunks, itemsize))
    return Message(MSG_LAYOUT, body)


def layout_contiguous(data: AddrKey | None, size: int) -> Message:
    body = Blob(LAYOUT_V3_CONTIGUOUS.pack(address=0, size=size))
    body.slot_at(LAYOUT_V3_CONTIGUOUS.offset_of("address"), data)
    return Message(MSG_LAYOUT, body)


# The plugin filters of the table are served optional, as h5py, hdf5plugin and netCDF-C write
# them (H5Z_FLAG_OPTIONAL); their flag is not stored (HSDS's filter dicts have none).
# - blosc (hdf5-blosc, hdf5plugin, netCDF's) gives up on a chunk it cannot shrink (incompressible
#   data, or under blosc's 128-byte minimum): served mandatory, every write of such a chunk
#   through the view failed at flush ("filter returned failure").
# - libhdf5 refuses to write a dataset whose *mandatory* filter is not registered yet, and a
#   filter HDF5 would load from HDF5_PLUGIN_PATH is not (only reads load it): h5py "r+" on a
#   zstd array made through zarr/ failed ("required filter 32015 is not registered") unless the
#   writer had imported hdf5plugin, where the same write to an h5py-made file works.
# A chunk HDF5 then writes unfiltered (its filter mask) is encoded again at commit (diff.py).
MAY_SKIP = frozenset({BLOSC, ZSTD, BZIP2})


def filter_pipeline(filters: Sequence[Filter]) -> Message:
    out = [FILTER_PIPELINE_V1.pack(filters=len(filters))]
    for f in filters:
        # an opaque filter keeps the name its file gave it (none: a zero-length name)
        text = FILTER_NAMES.get(f.id, f"filter {f.id}") if f.known else f.label
        name = padded(text.encode("ascii", "replace") + b"\0") if text else b""
        cd = tuple(int(v) & 0xFFFFFFFF for v in f.cd_values)
        out.append(FILTER_V1.pack(id=f.id, name_length=len(name), flags=1 if f.optional or f.id in MAY_SKIP else 0,
                                  client_values=len(cd)))
        out.append(name)
        out.append(struct.pack(f"<{len(cd)}I", *cd))
        if len(cd) % 2:
            out.append(bytes(4))
    return Message(MSG_FILTERS, Blob(b"".join(out)), FLAG_CONSTANT)


# -- attributes --------------------------------------------------------------------------
def attribute(name: str, t: T.DType, shape: Shape, data: Blob) -> Message:
    """Attribute message 1, or 3 when the type is committed (v1 cannot share a type)."""
    raw_name = name.encode("utf-8") + b"\0"
    space = dataspace_bytes(shape, with_max=False)
    body = Blob()
    if isinstance(t, T.Committed):
        dt = Blob()
        shared_type(t.id, dt)
        body.write(ATTRIBUTE_V3.pack(flags=1, name_size=len(raw_name), datatype_size=len(dt),
                                     dataspace_size=len(space), charset=_charset(name)))
        body.write(raw_name)
        body.extend(dt)
        body.write(space)
    else:
        dt_bytes = encode_type(t)
        body.write(ATTRIBUTE_V1.pack(name_size=len(raw_name), datatype_size=len(dt_bytes),
                                     dataspace_size=len(space)))
        body.write(padded(raw_name))
        body.write(padded(dt_bytes))
        body.write(padded(space))
    body.extend(data)
    return Message(MSG_ATTRIBUTE, body, name=name)


def _charset(name: str) -> int:
    return 0 if name.isascii() else 1


# -- groups -----------------------------------------------------------------------------
def symbol_table(btree: AddrKey, heap: AddrKey) -> Message:
    body = Blob(SYMBOL_TABLE_MSG.pack(btree_address=0, heap_address=0))
    body.slot_at(0, btree)
    body.slot_at(8, heap)
    return Message(MSG_SYMBOL_TABLE, body)


def link_info(next_order: int | None = None) -> Message:
    """Compact link storage; ``next_order``: links carry creation orders, the next one is this."""
    if next_order is None:
        return Message(MSG_LINK_INFO, Blob(LINK_INFO.pack()))
    return Message(MSG_LINK_INFO, Blob(LINK_INFO_ORDERED.pack(max_creation_index=next_order)))


def group_info() -> Message:
    return Message(MSG_GROUP_INFO, Blob(GROUP_INFO.pack()), FLAG_CONSTANT)


def link(name: str, kind: str, target: AddrKey | None = None, path: str = "", file: str = "",
         order: int | None = None) -> Message:
    """A link message (hard: ``target`` is the object's address key; ``order``: its creation order)."""
    raw = name_bytes(name)  # names.py: bytes that are not UTF-8 as they were made
    n = len(raw)
    utf8 = is_utf8_text(raw)
    width, code = (1, 0) if n < 1 << 8 else (2, 1) if n < 1 << 16 else (4, 2)
    flags = code | (0x08 if kind != "hard" else 0) | (0x10 if utf8 else 0) | \
        (0x04 if order is not None else 0)
    body = Blob(LINK_V1.pack(flags=flags))
    if kind != "hard":
        body.write(bytes([LINK_SOFT if kind == "soft" else LINK_EXTERNAL]))
    if order is not None:
        body.write(struct.pack("<q", order))
    if utf8:
        body.write(b"\x01")
    body.write(n.to_bytes(width, "little") + raw)
    if kind == "hard":
        body.addr(target)
    elif kind == "soft":
        value = name_bytes(path)
        body.write(struct.pack("<H", len(value)) + value)
    else:
        value = b"\x00" + name_bytes(file) + b"\0" + name_bytes(path) + b"\0"
        body.write(struct.pack("<H", len(value)) + value)
    return Message(MSG_LINK, body)

