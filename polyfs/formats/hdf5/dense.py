"""Dense attribute storage, for an object with an attribute message over the 64 KiB an
object header message can hold (libhdf5 moves attributes out of the header for the same
reason).

The object header then holds an attribute info message naming three blocks instead of
attribute messages:

- a fractal heap whose root is one direct block holding every attribute message, back to
  back (its size a power of two; heap ids are 8 bytes: a type byte, a 4-byte heap offset
  and the length);
- a version 2 B-tree of one leaf indexing them by name (lookup3 hash, then name);
- one indexing them by creation order (the model's order, as compact headers number them).

Every attribute goes there, large or not (libhdf5 reads an object's attributes from one
place). No free-space manager is written: readers never need one, and a writer adding an
attribute later (h5py ``r+``) starts a new block, as libhdf5 does when it has no record of
free space.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

from ...errors import UnsupportedType
from .layout import AddrKey, Blob, Block, blob_block
from .structs import (ATTR_NAME_RECORD, ATTR_ORDER_RECORD, ATTRIBUTE_INFO_ORDERED, BTREE2_ATTR_NAME,
                      BTREE2_ATTR_ORDER, BTREE2_HEADER, BTREE2_LEAF, FRACTAL_HEAP_DIRECT, FRACTAL_HEAP_HEADER, FRACTAL_HEAP_OFFSET_BYTES,
                      MAX_CREATION_INDEX, lookup3)

MIN_BLOCK = 1024  # libhdf5's own starting block size for attribute heaps
MAX_BLOCK = 1 << 24  # an 8-byte heap id holds a 4-byte offset and at most a 3-byte length
MIN_NODE = 512  # libhdf5's B-tree node size for attribute indexes
_CHECKSUM = 4
HEAP_ID_BYTES = 8


class DenseTooLarge(UnsupportedType):
    """Attributes dense storage of this shape cannot hold (a message over 8 MiB, or more than
    65535 attributes)."""


@dataclass
class DenseAttributes:
    """What an object header needs: its attribute info message body, and the blocks."""

    info: Blob
    blocks: list[Block]


def _log2_bytes(n: int) -> int:
    """Bytes libhdf5 uses for offsets within ``n`` (a power of two): ceil(log2(n) / 8)."""
    return (n.bit_length() - 1 + 7) // 8


def block_size(sizes: Sequence[int]) -> int:
    """The heap block that holds attribute messages of these sizes (a power of two, each
    message at most half of it), or :class:`DenseTooLarge`."""
    if len(sizes) > MAX_CREATION_INDEX:
        raise DenseTooLarge(f"{len(sizes)} attributes: dense storage here holds at most {MAX_CREATION_INDEX}")
    used, largest = FRACTAL_HEAP_DIRECT.size + sum(sizes), max(sizes, default=0)
    size = MIN_BLOCK
    while size < used or size < 2 * largest:
        size *= 2
    if size > MAX_BLOCK:
        raise DenseTooLarge(f"attributes of {used} bytes in all, the largest {largest}: dense storage here holds "
                            f"at most {MAX_BLOCK // 2} bytes per attribute and {MAX_BLOCK} in all")
    return size


def dense_attributes(owner: Hashable, attributes: Sequence[tuple[str, Blob]]) -> DenseAttributes:
    """The heap and both indexes for ``attributes`` (name, message body) in creation order;
    block keys are ``(kind, owner)``."""
    size = block_size([len(body) for _, body in attributes])
    prefix = FRACTAL_HEAP_DIRECT.size
    used = sum(len(body) for _, body in attributes)
    max_managed = size // 2
    length_bytes = min(_log2_bytes(size), _log2_bytes(max_managed))
    heap_key, block_key = ("fheap", owner), ("fheap-block", owner)
    names_key, orders_key = ("attr-names", owner), ("attr-orders", owner)

    block = Blob(FRACTAL_HEAP_DIRECT.pack(heap_address=0))
    block.slot_at(FRACTAL_HEAP_DIRECT.offset_of("heap_address"), heap_key)
    ids = []
    for _, body in attributes:
        at = block.extend(body)
        ids.append((bytes([0]) + at.to_bytes(FRACTAL_HEAP_OFFSET_BYTES, "little")
                    + len(body).to_bytes(length_bytes, "little")).ljust(HEAP_ID_BYTES, b"\0"))
    block.write(bytes(size - len(block)))

    header = Blob(FRACTAL_HEAP_HEADER.pack(
        max_managed=max_managed, free_space=size - prefix - used, managed_space=size, allocated_space=size,
        managed_objects=len(attributes), start_block_size=size, max_direct_block_size=size, root_address=0))
    header.slot_at(FRACTAL_HEAP_HEADER.offset_of("root_address"), block_key)
    header.checksum(0)

    by_name = sorted(range(len(attributes)),
                     key=lambda i: (lookup3(attributes[i][0].encode("utf-8")), attributes[i][0].encode("utf-8")))
    name_records = [ATTR_NAME_RECORD.pack(heap_id=ids[i], creation_order=i,
                                          name_hash=lookup3(attributes[i][0].encode("utf-8"))) for i in by_name]
    order_records = [ATTR_ORDER_RECORD.pack(heap_id=ids[i], creation_order=i) for i in range(len(attributes))]

    info = Blob(ATTRIBUTE_INFO_ORDERED.pack(max_creation_index=len(attributes)))
    info.slot_at(ATTRIBUTE_INFO_ORDERED.offset_of("heap_address"), heap_key)
    info.slot_at(ATTRIBUTE_INFO_ORDERED.offset_of("name_btree_address"), names_key)
    info.slot_at(ATTRIBUTE_INFO_ORDERED.offset_of("order_btree_address"), orders_key)
    blocks = [blob_block(heap_key, header), Block(block_key, size, block.render, blob=block)]
    blocks += _btree(names_key, BTREE2_ATTR_NAME, ATTR_NAME_RECORD.size, name_records)
    blocks += _btree(orders_key, BTREE2_ATTR_ORDER, ATTR_ORDER_RECORD.size, order_records)
    return DenseAttributes(info, blocks)


def _btree(key: AddrKey, kind: int, record_size: int, records: list[bytes]) -> list[Block]:
    """A version 2 B-tree whose root is one leaf holding ``records`` (already in order)."""
    leaf_key = (key, "leaf")
    node = BTREE2_LEAF.size + record_size * len(records) + _CHECKSUM
    node_size = max(MIN_NODE, -(-node // 8) * 8)
    leaf = Blob(BTREE2_LEAF.pack(type=kind))
    for r in records:
        leaf.write(r)
    leaf.checksum(0)
    leaf.write(bytes(node_size - len(leaf)))
    head = Blob(BTREE2_HEADER.pack(type=kind, node_size=node_size, record_size=record_size, root_address=0,
                                   root_records=len(records), total_records=len(records)))
    head.slot_at(BTREE2_HEADER.offset_of("root_address"), leaf_key)
    head.checksum(0)
    return [blob_block(key, head), Block(leaf_key, node_size, leaf.render, blob=leaf)]
