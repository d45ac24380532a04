"""Global heap collections for variable-length data (strings, sequences).

HDF5 keeps each variable-length element in a global heap collection and
stores ``(length, collection address, object index)`` in the attribute or
chunk. :class:`GlobalHeap` packs objects into collections of at most
:data:`COLLECTION_BYTES` (and 65535 objects; at least 4096 bytes, which
libhdf5 requires), deduplicating identical payloads. Collections are blocks
of the file plan; their addresses fill the heap ids' slots at render time.

Variable-length *datasets* are the one place where the HDF5 view reads chunk
data while planning: :func:`vlen_chunks` decodes every stored chunk (HSDS's
length-prefixed encoding), puts the elements in a heap and gives each chunk
as unfiltered HDF5 bytes (heap ids), so the file's size is known when it is
first opened.
"""
from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Hashable

import numpy as np

from ...codecs import vlen as vlen_codec
from ...errors import ChunkMissing, NotFound
from ...model.schema import Dataset
from .layout import Block, Blob, blob_block
from .structs import GLOBAL_HEAP, GLOBAL_HEAP_MIN, GLOBAL_HEAP_OBJECT, pad8

log = logging.getLogger(__name__)

COLLECTION_BYTES = 1 << 20
MAX_OBJECTS = 0xFFFF


class _Collection:
    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.blob = Blob()
        self.count = 0

    @property
    def used(self) -> int:
        return GLOBAL_HEAP.size + len(self.blob)

    def add(self, data: Blob) -> int:
        self.count += 1
        self.blob.write(GLOBAL_HEAP_OBJECT.pack(index=self.count, refcount=1, size=len(data)))
        self.blob.extend(data)
        self.blob.align(8)
        return self.count

    def block(self) -> Block:
        used = self.used + GLOBAL_HEAP_OBJECT.size  # room for the free-space object
        total = max(GLOBAL_HEAP_MIN, pad8(used))
        out = Blob(GLOBAL_HEAP.pack(collection_size=total))
        out.extend(self.blob)
        free = total - len(out)
        out.write(GLOBAL_HEAP_OBJECT.pack(index=0, refcount=0, size=free))
        out.write(bytes(free - GLOBAL_HEAP_OBJECT.size))
        return blob_block(self.key, out)


class GlobalHeap:
    """Objects in collections keyed ``(name, n)``; ``add`` returns ``(collection key, index)``."""

    def __init__(self, name: Hashable, collection_bytes: int = COLLECTION_BYTES, shared: bool = True) -> None:
        self.name = name
        self.limit = collection_bytes
        self.shared = shared  # identical payloads share one object (False: a writer may free one)
        self.collections: list[_Collection] = []
        self._seen: dict[bytes, tuple[Hashable, int]] = {}

    def add(self, data: Blob) -> tuple[Hashable, int]:
        plain = self.shared and not data.slots and not data.bulk
        if plain:
            hit = self._seen.get(bytes(data.buf))
            if hit is not None:
                return hit
        need = GLOBAL_HEAP_OBJECT.size + pad8(len(data))
        cur = self.collections[-1] if self.collections else None
        if cur is None or cur.count >= MAX_OBJECTS or (cur.count and cur.used + need > self.limit):
            cur = _Collection((self.name, len(self.collections)))
            self.collections.append(cur)
        ident = (cur.key, cur.add(data))
        if plain:
            self._seen[bytes(data.buf)] = ident
        return ident

    def __len__(self) -> int:
        return len(self.collections)

    def blocks(self, metadata: bool = True) -> list[Block]:
        out = []
        for c in self.collections:
            b = c.block()
            b.metadata = metadata
            out.append(b)
        return out


def vlen_chunks(ds: Dataset, ctx: Any, encoder: Any) -> list[tuple[int, Blob]]:
    """Every stored chunk of a variable-length dataset as HDF5 bytes: ``(linear, blob)``.

    Reads and decodes all chunks (in parallel); the elements go to the
    encoder's heap in chunk order, so the file is the same every time.
    """
    catalog = ctx.catalog
    idx = catalog.chunk_index(ds)
    pipe = catalog.pipeline(ds)
    count = math.prod(ds.chunks) if ds.chunks else 1

    def fetch(linear: int) -> np.ndarray:
        key = idx.key(linear)
        try:
            data = catalog.store.get(key)
        except NotFound:
            log.error("chunk object vanished from the store: %s", key)
            raise ChunkMissing(f"stored object {key} is missing") from None
        return vlen_codec.decode(ds.type, pipe.decode(data), count)

    linears = [int(x) for x in idx.linear]
    with ThreadPoolExecutor(4) as pool:
        decoded = list(pool.map(fetch, linears))
    return [(lin, encoder.encode(ds.type, arr)) for lin, arr in zip(linears, decoded)]
