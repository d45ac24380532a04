"""HDF5 binary structures (File Format Specification 3.0), declared once as data.

Every fixed-size record the synthesizer writes is a :class:`~polyfs.binfmt.Layout`
here; the tests parse the synthesized bytes back with the very same
declarations. Records that are packed in bulk (chunk B-tree nodes, heap ids of
variable-length data) get a numpy dtype derived from the same declaration by
:func:`numpy_dtype`, so a million chunk keys are packed without a Python
object per chunk.

The structures are the ones HDF5 itself writes for ``libver="earliest"``
files with creation order tracked (``track_order=True``, as netCDF-4 does):
superblock 0, version 2 object headers (checksummed, each message carrying
its creation order: the only place HDF5 keeps an attribute's), symbol-table
groups or link messages, version 1 B-trees. Every reader in use (HDF5 1.10,
1.14, 2.0, pyfive, netCDF, GDAL) opens them. Offsets and lengths are 8
bytes, so files past 4 GiB need nothing special.
"""
from __future__ import annotations

import functools
import struct
from typing import Sequence

import numpy as np

from ...binfmt import Layout

SIGNATURE = b"\x89HDF\r\n\x1a\n"
UNDEF = 0xFFFFFFFFFFFFFFFF  # the undefined address
SIZEOF_ADDR = 8
SIZEOF_SIZE = 8
LOCAL_HEAP_FREE_NULL = 1  # "no free block" in a local heap (H5HL_FREE_NULL), not UNDEF

# B-tree 'K' values of superblock 0 (it cannot store others): a group B-tree
# node has up to 2*16 children, a symbol table node 2*4 entries, a chunk
# B-tree node 2*32 children.
GROUP_LEAF_K = 4
GROUP_INTERNAL_K = 16
CHUNK_K = 32

# -- level 0: superblock -------------------------------------------------------
SUPERBLOCK_V0 = Layout.of("superblock v0", [
    ("signature", "8s", SIGNATURE),
    ("version", "B", 0),
    ("freespace_version", "B", 0),
    ("root_symtab_version", "B", 0),
    ("reserved0", "B", 0),
    ("shared_header_version", "B", 0),
    ("sizeof_offsets", "B", SIZEOF_ADDR),
    ("sizeof_lengths", "B", SIZEOF_SIZE),
    ("reserved1", "B", 0),
    ("group_leaf_k", "H", GROUP_LEAF_K),
    ("group_internal_k", "H", GROUP_INTERNAL_K),
    ("consistency_flags", "I", 0),
    ("base_address", "Q"),  # absolute file offset of the superblock; all addresses are relative to it
    ("freespace_address", "Q", UNDEF),
    ("eof_address", "Q"),  # absolute: relative end of file + base address
    ("driver_info_address", "Q", UNDEF),
])

# superblocks 2 and 3 (HDF5 1.8 and 1.10: netCDF-C writes 2, libver="latest" 3, which SWMR
# writers need): the root group's object header by address, no B-tree 'K' values (the defaults,
# the ones above), checksummed. Version 3's flags say a writer has the file open (0: none).
SUPERBLOCK_V2 = Layout.of("superblock v2/v3", [
    ("signature", "8s", SIGNATURE),
    ("version", "B"),
    ("sizeof_offsets", "B", SIZEOF_ADDR),
    ("sizeof_lengths", "B", SIZEOF_SIZE),
    ("consistency_flags", "B", 0),
    ("base_address", "Q"),
    ("extension_address", "Q", UNDEF),
    ("eof_address", "Q"),
    ("root_header_address", "Q"),
])
SUPERBLOCK_VERSIONS = (0, 2, 3)  # the ones the view renders

SYMBOL_TABLE_ENTRY = Layout.of("symbol table entry", [
    ("name_offset", "Q"),  # into the group's local heap
    ("header_address", "Q"),
    ("cache_type", "I"),  # 0 nothing cached, 1 symbol table addresses, 2 soft link value
    ("reserved", "I", 0),
    ("scratch", "16s", b""),
])
CACHE_NONE, CACHE_STAB, CACHE_SLINK = 0, 1, 2
SCRATCH_SLINK = Layout.of("scratch: soft link", [("value_offset", "I"), ("pad", "12s", b"")])

# -- level 1: B-trees, symbol table nodes, heaps ----------------------------------
BTREE_V1 = Layout.of("v1 B-tree node", [
    ("signature", "4s", b"TREE"),
    ("node_type", "B"),  # 0 group nodes, 1 raw data chunks
    ("level", "B"),
    ("entries_used", "H"),
    ("left", "Q", UNDEF),
    ("right", "Q", UNDEF),
])
BTREE_GROUP, BTREE_CHUNK = 0, 1
GROUP_KEY = Layout.of("group node key", [("name_offset", "Q")])

SNOD = Layout.of("symbol table node", [
    ("signature", "4s", b"SNOD"),
    ("version", "B", 1),
    ("reserved", "B", 0),
    ("symbols", "H"),
])

LOCAL_HEAP = Layout.of("local heap", [
    ("signature", "4s", b"HEAP"),
    ("version", "B", 0),
    ("reserved", "3s", b""),
    ("data_size", "Q"),
    ("free_list", "Q", LOCAL_HEAP_FREE_NULL),
    ("data_address", "Q"),
])

GLOBAL_HEAP = Layout.of("global heap collection", [
    ("signature", "4s", b"GCOL"),
    ("version", "B", 1),
    ("reserved", "3s", b""),
    ("collection_size", "Q"),  # whole collection, header included; at least 4096
])
GLOBAL_HEAP_OBJECT = Layout.of("global heap object", [
    ("index", "H"),  # 0 = the free space at the end
    ("refcount", "H", 0),
    ("reserved", "I", 0),
    ("size", "Q"),
])
GLOBAL_HEAP_MIN = 4096  # libhdf5 reads 4096 bytes speculatively and asserts collections are at least that

# -- level 2: object headers and messages ------------------------------------------
# version 1 (what libver="earliest" writes without creation order; tests parse libhdf5's with it)
OBJECT_HEADER_V1 = Layout.of("object header v1", [
    ("version", "B", 1),
    ("reserved", "B", 0),
    ("messages", "H"),
    ("refcount", "I"),
    ("size", "I"),  # bytes of messages in this chunk
    ("pad", "4s", b""),  # messages start 8-aligned
])
MESSAGE_V1 = Layout.of("object header v1 message", [
    ("type", "H"),
    ("size", "H"),  # of the data, a multiple of 8
    ("flags", "B"),
    ("reserved", "3s", b""),
])

# version 2: prefix, chunk 0 size (1, 2, 4 or 8 bytes: flags bits 0-1), messages, checksum
OBJECT_HEADER_V2 = Layout.of("object header v2 prefix", [
    ("signature", "4s", b"OHDR"),
    ("version", "B", 2),
    ("flags", "B"),  # bits 0-1: width of the chunk 0 size; 2: attribute order tracked; 3: indexed
])
OHDR_ATTR_ORDER_TRACKED, OHDR_ATTR_ORDER_INDEXED = 0x04, 0x08
MESSAGE_V2_UNORDERED = Layout.of("object header v2 message", [("type", "B"), ("size", "H"), ("flags", "B")])
MESSAGE_V2 = Layout.of("object header v2 message (attribute creation order tracked)", [
    ("type", "B"),
    ("size", "H"),  # of the data, unpadded
    ("flags", "B"),
    ("creation_order", "H"),  # attributes: their creation order; other messages 0
])
MAX_MESSAGE = 0xFFFF  # a message's size field is 16 bits
MAX_CREATION_INDEX = 0xFFFF  # an attribute's creation order is 16 bits

# message type ids
MSG_NIL, MSG_DATASPACE, MSG_LINK_INFO, MSG_DATATYPE = 0x0, 0x1, 0x2, 0x3
MSG_FILL, MSG_LINK, MSG_LAYOUT, MSG_GROUP_INFO = 0x5, 0x6, 0x8, 0xA
MSG_FILTERS, MSG_ATTRIBUTE, MSG_CONTINUATION, MSG_SYMBOL_TABLE = 0xB, 0xC, 0x10, 0x11
MSG_ATTRIBUTE_INFO, MSG_REFCOUNT = 0x15, 0x16
# message flags
FLAG_CONSTANT, FLAG_SHARED, FLAG_DONT_SHARE = 0x01, 0x02, 0x04

DATASPACE_V2 = Layout.of("dataspace message v2", [
    ("version", "B", 2),
    ("rank", "B"),
    ("flags", "B"),  # bit 0: max dims present
    ("kind", "B"),  # 0 scalar, 1 simple, 2 null
])
SPACE_SCALAR, SPACE_SIMPLE, SPACE_NULL = 0, 1, 2

DATATYPE = Layout.of("datatype message header", [
    ("class_version", "B"),  # class in the low nibble, version in the high one
    ("bits0", "B", 0),
    ("bits1", "B", 0),
    ("bits2", "B", 0),
    ("size", "I"),
])
FIXED_POINT = Layout.of("fixed-point properties", [("offset", "H", 0), ("precision", "H")])
FLOATING_POINT = Layout.of("floating-point properties", [
    ("offset", "H", 0),
    ("precision", "H"),
    ("exponent_location", "B"),
    ("exponent_size", "B"),
    ("mantissa_location", "B"),
    ("mantissa_size", "B"),
    ("exponent_bias", "I"),
])
COMPOUND_MEMBER_V1 = Layout.of("compound member v1 (after the padded name)", [
    ("offset", "I"),
    ("rank", "B", 0),
    ("reserved", "3s", b""),
    ("permutation", "I", 0),
    ("reserved2", "I", 0),
    ("dims", "16s", b""),
])
COMPOUND_MEMBER_V2 = Layout.of("compound member v2 (after the padded name)", [("offset", "I")])
ARRAY_V2 = Layout.of("array properties v2", [("rank", "B"), ("reserved", "3s", b"")])
TIME_PROPERTIES = Layout.of("time properties", [("precision", "H")])
CLASS_FIXED, CLASS_FLOAT, CLASS_TIME, CLASS_STRING, CLASS_OPAQUE = 0, 1, 2, 3, 5
CLASS_COMPOUND, CLASS_REFERENCE, CLASS_ENUM, CLASS_VLEN, CLASS_ARRAY = 6, 7, 8, 9, 10
CLASS_BITFIELD = 4

FILL_V2 = Layout.of("fill value message v2", [
    ("version", "B", 2),
    ("alloc_time", "B"),  # 1 early, 2 late, 3 incremental
    ("write_time", "B", 2),  # 2: write the fill value only if one was set
    ("defined", "B", 1),
])
FILL_SIZE = Layout.of("fill value size", [("size", "I")])
ALLOC_LATE, ALLOC_INCREMENTAL = 2, 3

LAYOUT_V3_CHUNKED = Layout.of("data layout v3, chunked", [
    ("version", "B", 3),
    ("layout_class", "B", 2),
    ("dimensionality", "B"),  # rank + 1 (the last dimension is the element size)
    ("btree_address", "Q"),
])
LAYOUT_V3_CONTIGUOUS = Layout.of("data layout v3, contiguous", [
    ("version", "B", 3),
    ("layout_class", "B", 1),
    ("address", "Q"),
    ("size", "Q"),
])

FILTER_PIPELINE_V1 = Layout.of("filter pipeline v1", [
    ("version", "B", 1),
    ("filters", "B"),
    ("reserved", "6s", b""),
])
FILTER_V1 = Layout.of("filter description v1", [
    ("id", "H"),
    ("name_length", "H"),  # padded name, null included
    ("flags", "H"),  # bit 0: optional
    ("client_values", "H"),
])

ATTRIBUTE_V1 = Layout.of("attribute message v1", [
    ("version", "B", 1),
    ("reserved", "B", 0),
    ("name_size", "H"),  # null included; name, datatype and dataspace each padded to 8
    ("datatype_size", "H"),
    ("dataspace_size", "H"),
])
ATTRIBUTE_V3 = Layout.of("attribute message v3", [
    ("version", "B", 3),
    ("flags", "B"),  # bit 0: the datatype is shared (committed)
    ("name_size", "H"),
    ("datatype_size", "H"),
    ("dataspace_size", "H"),
    ("charset", "B"),
])

ATTRIBUTE_INFO_ORDERED = Layout.of("attribute info message, creation order tracked and indexed", [
    ("version", "B", 0),
    ("flags", "B", 3),
    ("max_creation_index", "H"),  # the order the next attribute gets
    ("heap_address", "Q", UNDEF),  # compact storage: attributes are messages of the header
    ("name_btree_address", "Q", UNDEF),
    ("order_btree_address", "Q", UNDEF),
])
ATTRIBUTE_INFO = Layout.of("attribute info message, no creation order", [
    ("version", "B", 0),
    ("flags", "B", 0),
    ("heap_address", "Q", UNDEF),
    ("name_btree_address", "Q", UNDEF),
])
# dense attribute storage (an attribute message over 64 KiB): a fractal heap of one direct
# block holding every attribute message, indexed by name and creation order in v2 B-trees of
# one leaf each; no free-space manager, direct blocks unchecksummed (heap flags 0)
FRACTAL_HEAP_OFFSET_BYTES = 4  # heap offsets (in heap ids and direct block prefixes)
FRACTAL_HEAP_HEADER = Layout.of("fractal heap header", [
    ("signature", "4s", b"FRHP"),
    ("version", "B", 0),
    ("id_length", "H", 8),  # the attribute B-tree records hold 8-byte heap ids
    ("filters_length", "H", 0),
    ("flags", "B", 0),
    ("max_managed", "I"),  # larger objects would be "huge" ones: none here
    ("next_huge_id", "Q", 0),
    ("huge_btree_address", "Q", UNDEF),
    ("free_space", "Q"),  # in the managed blocks
    ("free_space_manager", "Q", UNDEF),
    ("managed_space", "Q"),
    ("allocated_space", "Q"),
    ("iterator_offset", "Q", 0),  # a root direct block: what libhdf5 writes
    ("managed_objects", "Q"),
    ("huge_size", "Q", 0),
    ("huge_objects", "Q", 0),
    ("tiny_size", "Q", 0),
    ("tiny_objects", "Q", 0),
    ("table_width", "H", 4),
    ("start_block_size", "Q"),
    ("max_direct_block_size", "Q"),
    ("max_heap_bits", "H", 8 * FRACTAL_HEAP_OFFSET_BYTES),
    ("start_root_rows", "H", 1),
    ("root_address", "Q"),
    ("root_rows", "H", 0),  # 0: the root is a direct block
])
FRACTAL_HEAP_DIRECT = Layout.of("fractal heap direct block prefix", [
    ("signature", "4s", b"FHDB"),
    ("version", "B", 0),
    ("heap_address", "Q"),
    ("block_offset", "I", 0),  # FRACTAL_HEAP_OFFSET_BYTES; the root block is at heap offset 0
])
BTREE2_HEADER = Layout.of("version 2 B-tree header", [
    ("signature", "4s", b"BTHD"),
    ("version", "B", 0),
    ("type", "B"),
    ("node_size", "I"),
    ("record_size", "H"),
    ("depth", "H", 0),  # one leaf: the root
    ("split_percent", "B", 100),
    ("merge_percent", "B", 40),
    ("root_address", "Q"),
    ("root_records", "H"),
    ("total_records", "Q"),
])
BTREE2_LEAF = Layout.of("version 2 B-tree leaf prefix", [
    ("signature", "4s", b"BTLF"),
    ("version", "B", 0),
    ("type", "B"),
])
BTREE2_ATTR_NAME, BTREE2_ATTR_ORDER = 8, 9
ATTR_NAME_RECORD = Layout.of("attribute name index record (type 8)", [
    ("heap_id", "8s"),
    ("message_flags", "B", 0),
    ("creation_order", "I"),
    ("name_hash", "I"),  # lookup3 of the name: records sorted by it, then by name
])
ATTR_ORDER_RECORD = Layout.of("attribute creation order index record (type 9)", [
    ("heap_id", "8s"),
    ("message_flags", "B", 0),
    ("creation_order", "I"),
])
REFCOUNT = Layout.of("object reference count message", [("version", "B", 0), ("refcount", "I")])

SYMBOL_TABLE_MSG = Layout.of("symbol table message", [("btree_address", "Q"), ("heap_address", "Q")])
LINK_INFO = Layout.of("link info message", [
    ("version", "B", 0),
    ("flags", "B", 0),
    ("heap_address", "Q", UNDEF),  # compact storage: no fractal heap
    ("name_btree_address", "Q", UNDEF),
])
LINK_INFO_ORDERED = Layout.of("link info message, creation order tracked and indexed", [
    ("version", "B", 0),
    ("flags", "B", 3),  # netCDF-4 writes only to groups whose links are creation-ordered
    ("max_creation_index", "Q"),  # the order the next link gets
    ("heap_address", "Q", UNDEF),  # compact storage: no fractal heap, no indexes yet
    ("name_btree_address", "Q", UNDEF),
    ("order_btree_address", "Q", UNDEF),
])
GROUP_INFO = Layout.of("group info message", [("version", "B", 0), ("flags", "B", 0)])
LINK_V1 = Layout.of("link message header", [("version", "B", 1), ("flags", "B")])
LINK_HARD, LINK_SOFT, LINK_EXTERNAL = 0, 1, 64
SHARED_V2 = Layout.of("shared message v2", [
    ("version", "B", 2),
    ("type", "B", 2),  # 2: a committed object (its object header address follows)
    ("address", "Q"),
])
CONTINUATION = Layout.of("continuation message", [("address", "Q"), ("length", "Q")])

VL_HEAP_ID = Layout.of("variable-length element", [
    ("length", "I"),  # elements (sequences) or bytes (strings)
    ("collection", "Q"),
    ("index", "I"),
])
OBJECT_REFERENCE = Layout.of("object reference", [("address", "Q")])
REGION_REFERENCE = Layout.of("dataset region reference (heap id)", [("collection", "Q"), ("index", "I")])
# a region reference's global heap object: the dataset's header address, then its selection
SELECTION = Layout.of("serialized selection header (version 1)", [
    ("kind", "I"),  # SEL_NONE, SEL_POINTS, SEL_HYPERSLABS, SEL_ALL
    ("version", "I", 1),
    ("reserved", "I", 0),
    ("length", "I"),  # bytes after this field
])
SELECTION_LIST = Layout.of("selection rank and count", [("rank", "I"), ("count", "I")])
SEL_NONE, SEL_POINTS, SEL_HYPERSLABS, SEL_ALL = 0, 1, 2, 3


# -- numpy dtypes from the declarations (bulk packing) ---------------------------------
_NP_CODES = {"B": "u1", "b": "i1", "H": "u2", "h": "i2", "I": "u4", "i": "i4", "Q": "u8", "q": "i8",
             "f": "f4", "d": "f8"}


def numpy_dtype(layout: Layout) -> np.dtype:
    """The packed numpy dtype of a layout (same field names, same bytes)."""
    endian = "<" if layout.endian in ("<", "=") else ">"
    fields = []
    for f in layout.fields:
        code = f.code
        if code.endswith("s"):
            fields.append((f.name, f"S{int(code[:-1] or 1)}"))
        else:
            fields.append((f.name, endian + _NP_CODES[code]))
    dt = np.dtype(fields)
    assert dt.itemsize == layout.size, layout.name
    return dt


@functools.lru_cache(maxsize=64)
def chunk_key_dtype(rank: int) -> np.dtype:
    """A chunk B-tree key: stored size, filter mask, then ``rank + 1`` element offsets."""
    return np.dtype([("size", "<u4"), ("filter_mask", "<u4"), ("offsets", "<u8", (rank + 1,))])


@functools.lru_cache(maxsize=64)
def chunk_node_dtype(rank: int) -> np.dtype:
    """A whole chunk B-tree node: header, 2K (key, child) pairs, the last key (pure, cached:
    every dataset's B-tree asks for it when a domain is planned, ``ls -l`` of many domains)."""
    key = chunk_key_dtype(rank)
    pair = np.dtype([("key", key), ("child", "<u8")])
    return np.dtype([("header", numpy_dtype(BTREE_V1)), ("pairs", pair, (2 * CHUNK_K,)), ("last", key)])


def snod_size() -> int:
    return SNOD.size + 2 * GROUP_LEAF_K * SYMBOL_TABLE_ENTRY.size


def group_node_size() -> int:
    return BTREE_V1.size + 2 * GROUP_INTERNAL_K * SIZEOF_ADDR + (2 * GROUP_INTERNAL_K + 1) * GROUP_KEY.size


def lookup3(data: bytes | bytearray | memoryview, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``: HDF5's checksum of version 2 metadata
    (``H5_checksum_lookup3`` with initial value 0)."""
    n = len(data)
    a = b = c = (0xDEADBEEF + n + initval) & _M32
    if n == 0:
        return c
    tail = -n % 12
    words = struct.unpack(f"<{(n + tail) // 4}I", bytes(data) + bytes(tail))
    blocks = len(words) // 3  # the last one holds the final 1..12 bytes, zero padded (zeros add nothing)
    a, b, c = _mix_blocks(words, 0, blocks - 1, a, b, c)
    return _final(words[-3] + a, words[-2] + b, words[-1] + c)


def lookup3_many(buffers: Sequence[bytes | bytearray | memoryview]) -> list[int]:
    """:func:`lookup3` of many buffers at once. One buffer's rounds depend on each other,
    different buffers' do not: their rounds run in lockstep on numpy arrays (longest
    first), and the few long ones left when most are done finish in Python."""
    n = len(buffers)
    if n < _LOCKSTEP:
        return [lookup3(x) for x in buffers]
    lengths = np.fromiter((len(x) for x in buffers), np.int64, n)
    blocks = np.maximum(1, (lengths + 11) // 12)
    words = np.frombuffer(b"".join(bytes(x) + bytes(12 * int(k) - len(x)) for x, k in zip(buffers, blocks)),
                          "<u4").astype(np.uint32)
    starts = np.concatenate(([0], np.cumsum(blocks[:-1] * 3)))
    order = np.argsort(-blocks, kind="stable")
    rounds, starts = blocks[order] - 1, starts[order]  # full rounds per buffer, descending
    a = ((0xDEADBEEF + lengths[order]) & _M32).astype(np.uint32)
    b, c = a.copy(), a.copy()
    r = 0
    while (k := int(np.count_nonzero(rounds > r))) >= _LOCKSTEP:
        at = starts[:k] + 3 * r
        av, bv, cv = a[:k], b[:k], c[:k]  # views: the updates land in a, b, c
        av += words[at]
        bv += words[at + 1]
        cv += words[at + 2]
        for x, y, z, shift in ((av, bv, cv, 4), (bv, cv, av, 6), (cv, av, bv, 8),
                               (av, bv, cv, 16), (bv, cv, av, 19), (cv, av, bv, 4)):  # mix(), in place
            x -= z
            x ^= (z << shift) | (z >> (32 - shift))
            z += y
        r += 1
    for j in range(k):  # the long ones, in Python from where the lockstep left them
        state = _mix_blocks(words[starts[j]:starts[j] + 3 * int(rounds[j])].tolist(), r, int(rounds[j]),
                            int(a[j]), int(b[j]), int(c[j]))
        a[j], b[j], c[j] = state
    last = starts + 3 * rounds
    done = [_final(int(x), int(y), int(z)) for x, y, z in
            zip(a + words[last], b + words[last + 1], c + words[last + 2])]
    out = [0] * n
    for j, i in enumerate(order.tolist()):
        out[i] = done[j] if lengths[i] else int(a[j])  # empty: the initial value, no final mix
    return out


_LOCKSTEP = 16  # below this many buffers in a round, numpy's per-call cost beats its width


def _mix_blocks(words: Sequence[int], first: int, stop: int, a: int, b: int, c: int) -> tuple[int, int, int]:
    """lookup3's mix() over 12-byte blocks ``first`` to ``stop - 1`` of ``words``."""
    m = _M32
    for i in range(3 * first, 3 * stop, 3):  # rotations written out: this loop is the cost
        a = (a + words[i]) & m
        b = (b + words[i + 1]) & m
        c = (c + words[i + 2]) & m
        a = ((a - c) & m) ^ (((c << 4) | (c >> 28)) & m)
        c = (c + b) & m
        b = ((b - a) & m) ^ (((a << 6) | (a >> 26)) & m)
        a = (a + c) & m
        c = ((c - b) & m) ^ (((b << 8) | (b >> 24)) & m)
        b = (b + a) & m
        a = ((a - c) & m) ^ (((c << 16) | (c >> 16)) & m)
        c = (c + b) & m
        b = ((b - a) & m) ^ (((a << 19) | (a >> 13)) & m)
        a = (a + c) & m
        c = ((c - b) & m) ^ (((b << 4) | (b >> 28)) & m)
        b = (b + a) & m
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    """lookup3's final() after the last block's words were added; returns c."""
    a, b, c = a & _M32, b & _M32, c & _M32
    c = ((c ^ b) - _rot(b, 14)) & _M32
    a = ((a ^ c) - _rot(c, 11)) & _M32
    b = ((b ^ a) - _rot(a, 25)) & _M32
    c = ((c ^ b) - _rot(b, 16)) & _M32
    a = ((a ^ c) - _rot(c, 4)) & _M32
    b = ((b ^ a) - _rot(a, 14)) & _M32
    c = ((c ^ b) - _rot(b, 24)) & _M32
    return c


_M32 = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M32


def pad8(n: int) -> int:
    return (n + 7) & ~7


def padded(data: bytes, multiple: int = 8) -> bytes:
    return data + b"\0" * (-len(data) % multiple)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)
