"""Version 1 B-trees: the chunk index of a dataset and the symbol table of a group.

Both are built bottom-up from sorted entries into full nodes (every node but
the last of a level holds 2K children), stored root first so a lookup reads
forward. Chunk B-tree nodes are packed with numpy from the chunk index's
arrays (no Python object per chunk): a million chunks are about 16,000 nodes.

Chunk keys hold the stored size, a zero filter mask and the chunk's element
offsets (plus a 0 for the element-size dimension); key ``i+1`` is the next
chunk's key, the last one the corner just past the last chunk, so libhdf5's
lexicographic search finds every stored chunk and reports missing ones as
absent (fill value).

A group is a local heap (names, soft link values), a group B-tree whose keys
are heap offsets of the last name under each child, and symbol table nodes of
up to 8 entries sorted by name (byte order, as ``strcmp``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from ...errors import UnsupportedType
from ...vfile import Produced
from .layout import AddrKey, Blob, Block
from .structs import (BTREE_CHUNK, BTREE_GROUP, BTREE_V1, CACHE_NONE, CACHE_SLINK, CHUNK_K, GROUP_INTERNAL_K, GROUP_LEAF_K, LOCAL_HEAP, SCRATCH_SLINK, SNOD, SYMBOL_TABLE_ENTRY, UNDEF, chunk_key_dtype, chunk_node_dtype, group_node_size, numpy_dtype, snod_size)

FANOUT = 2 * CHUNK_K


def level_sizes(n: int, fanout: int) -> list[int]:
    """Node counts per level, leaves first (empty for no entries)."""
    sizes = []
    while n > 0:
        n = -(-n // fanout)
        sizes.append(n)
        if n == 1:
            break
    return sizes


def _node_order(levels: list[int]) -> list[int]:
    """Index of the first node of each level (leaves first) when stored root first."""
    starts = [0] * len(levels)
    pos = 0
    for lv in reversed(range(len(levels))):
        starts[lv] = pos
        pos += levels[lv]
    return starts


# -- chunk index ---------------------------------------------------------------------------
@dataclass
class ChunkBTree:
    """A dataset's chunk B-tree as one block; chunk addresses are ``data_key + offsets``."""

    key: AddrKey
    grid: tuple[int, ...]
    chunks: tuple[int, ...]
    linear: np.ndarray  # sorted C-order chunk numbers
    sizes: np.ndarray  # stored bytes of each
    data_key: AddrKey | None  # None: ``offsets`` are already addresses
    offsets: np.ndarray

    def __post_init__(self) -> None:
        self.rank = len(self.chunks)
        self.levels = level_sizes(len(self.linear), FANOUT)
        self.node_dtype = chunk_node_dtype(self.rank)
        if len(self.sizes) and int(self.sizes.max()) >= 1 << 32:
            raise UnsupportedType("a chunk of 4 GiB or more cannot be indexed by an HDF5 chunk B-tree")

    @property
    def size(self) -> int:
        return sum(self.levels) * self.node_dtype.itemsize

    @property
    def empty(self) -> bool:
        return not self.levels

    def block(self) -> Block:
        return Block(self.key, self.size, self.render)

    def _keys(self) -> np.ndarray:
        n = len(self.linear)
        keys = np.zeros(n + 1, dtype=chunk_key_dtype(self.rank))
        coords = np.stack(np.unravel_index(self.linear, self.grid), axis=-1).astype(np.uint64)
        dims = np.asarray(self.chunks, dtype=np.uint64)
        keys["size"][:n] = self.sizes
        keys["offsets"][:n, :self.rank] = coords * dims
        keys["offsets"][n, :self.rank] = (coords[-1] + 1) * dims
        return keys

    def render(self, resolve) -> bytes | list:
        """The nodes' bytes; a big tree is rendered lazily, when first read, by a
        producer (its size is fixed by the chunk count, so planning never waits
        for it: a domain of a million chunks opens without packing 16,000 nodes)."""
        base = resolve(self.key)
        data_base = 0 if self.data_key is None else resolve(self.data_key)
        if sum(self.levels) <= LAZY_NODES:
            return self.nodes(base, data_base)
        return [Produced(LazyNodes(self, base, data_base, next(_SERIAL)))]

    def nodes(self, base: int, data_base: int) -> bytes:
        node_size = self.node_dtype.itemsize
        starts = _node_order(self.levels)
        nodes = np.zeros(sum(self.levels), dtype=self.node_dtype)
        hdr = nodes["header"]
        hdr["signature"] = b"TREE"
        hdr["node_type"] = BTREE_CHUNK
        keys = self._keys()
        children = np.asarray(self.offsets, dtype=np.uint64) + np.uint64(data_base)
        for lv, count in enumerate(self.levels):
            first = starts[lv]
            sl = slice(first, first + count)
            _fill_level(nodes[sl], keys, children, lv, FANOUT)
            addrs = base + (first + np.arange(count, dtype=np.uint64)) * node_size
            _siblings(nodes["header"][sl], addrs)
            # the next level up indexes these nodes by their first keys
            firsts = np.arange(count) * FANOUT
            keys = np.concatenate([keys[firsts], keys[-1:]])
            children = addrs
        return nodes.tobytes()


LAZY_NODES = 4  # trees with more nodes are rendered on first read
_SERIAL = itertools.count()


@dataclass(frozen=True, eq=False)
class LazyNodes:
    """A chunk B-tree's nodes, packed when first read and cached by the reader."""

    tree: ChunkBTree
    base: int
    data_base: int
    serial: int  # distinguishes trees of different plans of the same dataset

    @property
    def cache_key(self) -> Hashable:
        return ("hdf5-btree", self.tree.key, self.serial)

    @property
    def length(self) -> int:
        return self.tree.size

    def produce(self, ctx) -> bytes:
        return self.tree.nodes(self.base, self.data_base)


def _fill_level(nodes: np.ndarray, keys: np.ndarray, children: np.ndarray, level: int, fanout: int) -> None:
    """Fill a level's nodes: ``children[i]`` between ``keys[i]`` and ``keys[i + 1]``."""
    m = len(children)
    count = len(nodes)
    nodes["header"]["level"] = level
    used = np.minimum(fanout, m - np.arange(count) * fanout)
    nodes["header"]["entries_used"] = used
    k = np.arange(fanout + 1)
    idx = np.arange(count)[:, None] * fanout + k[None, :]
    valid_key = k[None, :] <= used[:, None]
    valid_child = k[None, :fanout] < used[:, None]
    kk = keys[np.minimum(idx, m)]
    kk[~valid_key] = np.zeros((), dtype=keys.dtype)
    nodes["pairs"]["key"] = kk[:, :fanout]
    nodes["last"] = kk[:, fanout]
    cc = children[np.minimum(idx[:, :fanout], m - 1)]
    nodes["pairs"]["child"] = np.where(valid_child, cc, 0)


def _siblings(hdr: np.ndarray, addrs: np.ndarray) -> None:
    undef = np.uint64(UNDEF)
    left = np.empty(len(addrs), dtype=np.uint64)
    right = np.empty(len(addrs), dtype=np.uint64)
    left[0], right[-1] = undef, undef
    left[1:], right[:-1] = addrs[:-1], addrs[1:]
    hdr["left"], hdr["right"] = left, right


# -- groups ---------------------------------------------------------------------------------
@dataclass
class Symbol:
    """One link of an old-style group: a hard link (``target`` key) or a soft link (``value``)."""

    name: bytes
    target: AddrKey | None = None
    value: bytes | None = None  # soft link path


def group_blocks(gid: Hashable, symbols: Sequence[Symbol]) -> tuple[AddrKey, AddrKey, list[Block]]:
    """Local heap, B-tree and symbol table nodes of one group.

    Returns ``(btree key, heap key, blocks)``; ``symbols`` in any order.
    """
    syms = sorted(symbols, key=lambda s: s.name)
    heap_key, tree_key, snod_key = ("lheap", gid), ("gbtree", gid), ("snod", gid)
    # local heap: the empty string at 0, then names and soft link values, 8-aligned
    data = bytearray(8)
    name_off, value_off = [], []
    for s in syms:
        name_off.append(len(data))
        data += s.name + b"\0"
        data += bytes(-len(data) % 8)
        if s.value is not None:
            value_off.append(len(data))
            data += s.value + b"\0"
            data += bytes(-len(data) % 8)
        else:
            value_off.append(0)
    heap = Blob(LOCAL_HEAP.pack(data_size=len(data), data_address=0))
    heap.slot_at(LOCAL_HEAP.offset_of("data_address"), heap_key, LOCAL_HEAP.size)
    heap.write(bytes(data))
    heap_block = Block(heap_key, len(heap), heap.render)

    # symbol table nodes
    per = 2 * GROUP_LEAF_K
    nsnod = max(1, -(-len(syms) // per)) if syms else 0
    ssize = snod_size()
    snods = Blob()
    keys: list[AddrKey] = []
    key_pos: dict[AddrKey, int] = {}
    slot_offsets, slot_index = [], []
    for j in range(nsnod):
        part = list(range(j * per, min(len(syms), (j + 1) * per)))
        start = snods.write(SNOD.pack(symbols=len(part)))
        for i in part:
            s = syms[i]
            pos = len(snods)
            if s.value is not None:
                snods.write(SYMBOL_TABLE_ENTRY.pack(name_offset=name_off[i], header_address=UNDEF,
                                                    cache_type=CACHE_SLINK,
                                                    scratch=SCRATCH_SLINK.pack(value_offset=value_off[i])))
            else:
                snods.write(SYMBOL_TABLE_ENTRY.pack(name_offset=name_off[i], header_address=0,
                                                    cache_type=CACHE_NONE))
                if s.target is None:
                    snods.slot_at(pos + 8, None)
                else:
                    if s.target not in key_pos:
                        key_pos[s.target] = len(keys)
                        keys.append(s.target)
                    slot_offsets.append(pos + 8)
                    slot_index.append(key_pos[s.target])
        snods.write(bytes(start + ssize - len(snods)))
    snods.bulk_slots(np.asarray(slot_offsets, np.int64), keys, np.asarray(slot_index, np.int64))

    # group B-tree over the nodes: boundaries are the heap offsets of each node's last name
    bounds = np.zeros(nsnod + 1, dtype=np.uint64)
    for j in range(nsnod):
        bounds[j + 1] = name_off[min(len(syms), (j + 1) * per) - 1]
    tree = _group_tree(tree_key, snod_key, nsnod, ssize, bounds)
    blocks = [heap_block, tree]
    if nsnod:
        blocks.append(Block(snod_key, len(snods), snods.render))
    return tree_key, heap_key, blocks


def _group_tree(tree_key: AddrKey, snod_key: AddrKey, nsnod: int, ssize: int, bounds: np.ndarray) -> Block:
    fan = 2 * GROUP_INTERNAL_K
    levels = level_sizes(nsnod, fan) or [1]  # an empty group: one leaf with no children
    nsize = group_node_size()
    keydt = np.dtype([("key", "<u8"), ("child", "<u8")])
    node_dt = np.dtype([("header", numpy_dtype(BTREE_V1)), ("pairs", keydt, (fan,)), ("last", "<u8")])
    assert node_dt.itemsize == nsize

    def render(resolve) -> bytes:
        base = resolve(tree_key)
        nodes = np.zeros(sum(levels), dtype=node_dt)
        nodes["header"]["signature"] = b"TREE"
        nodes["header"]["node_type"] = BTREE_GROUP
        starts = _node_order(levels)
        keys = bounds.copy()
        children = (resolve(snod_key) + np.arange(nsnod, dtype=np.uint64) * ssize) if nsnod else \
            np.zeros(0, np.uint64)
        for lv, count in enumerate(levels):
            first = starts[lv]
            sl = slice(first, first + count)
            if len(children):
                _fill_level(nodes[sl], keys, children, lv, fan)
            addrs = base + (first + np.arange(count, dtype=np.uint64)) * nsize
            _siblings(nodes["header"][sl], addrs)
            keys = np.concatenate([keys[np.arange(count) * fan], keys[-1:]])
            children = addrs
        return nodes.tobytes()

    return Block(tree_key, sum(levels) * nsize, render)

