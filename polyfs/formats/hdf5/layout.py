"""Address planning: blocks of known size, placed one after another.

Every piece of the synthesized file is a :class:`Block` whose size is known
before any address is (address fields have a fixed width), so planning is a
running sum and rendering fills the addresses in afterwards. A
:class:`Blob` is bytes with *address slots*: "the address of block K (plus an
offset) goes here", resolved at render time, element by element or in bulk
(numpy) for large tables, and *checksum slots* ("the lookup3 checksum of
these bytes goes here", computed once the addresses are in). Nothing here
does I/O.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Sequence

import numpy as np

from ...vfile import Literal, Segment, Zeros
from .structs import UNDEF, lookup3, lookup3_many, pad8

AddrKey = Hashable
Resolve = Callable[[AddrKey], int]
_Q = struct.Struct("<Q")
_I = struct.Struct("<I")


class Blob:
    """Bytes under construction with address slots filled at render time."""

    __slots__ = ("buf", "slots", "bulk", "sums")

    def __init__(self, data: bytes = b"") -> None:
        self.buf = bytearray(data)
        self.slots: list[tuple[int, AddrKey, int]] = []  # (offset, key, addend)
        self.bulk: list[tuple[np.ndarray, list, np.ndarray, np.ndarray | None]] = []
        self.sums: list[tuple[int, int]] = []  # (start, end): checksum of [start, end) at end

    def __len__(self) -> int:
        return len(self.buf)

    def write(self, data: bytes) -> int:
        pos = len(self.buf)
        self.buf += data
        return pos

    def addr(self, key: AddrKey | None, addend: int = 0) -> int:
        """An 8-byte address of block ``key`` (+ ``addend``); None writes the undefined address."""
        pos = len(self.buf)
        if key is None:
            self.buf += _Q.pack(UNDEF)
        else:
            self.buf += bytes(8)
            self.slots.append((pos, key, addend))
        return pos

    def slot_at(self, pos: int, key: AddrKey | None, addend: int = 0) -> None:
        """An address slot at an existing position (bytes already reserved)."""
        if key is None:
            self.buf[pos:pos + 8] = _Q.pack(UNDEF)
        else:
            self.slots.append((pos, key, addend))

    def bulk_slots(self, offsets: np.ndarray, keys: list, key_index: np.ndarray,
                   addends: np.ndarray | None = None) -> None:
        """Many slots at once: ``offsets[i]`` gets address of ``keys[key_index[i]]`` (+ addends[i])."""
        if len(offsets):
            self.bulk.append((np.asarray(offsets, np.int64), list(keys), np.asarray(key_index, np.int64),
                              None if addends is None else np.asarray(addends, np.int64)))

    def checksum(self, start: int) -> int:
        """Four bytes: the lookup3 checksum of the bytes from ``start`` to here, as rendered."""
        pos = len(self.buf)
        self.buf += bytes(4)
        self.sums.append((start, pos))
        return pos

    def align(self, multiple: int = 8) -> None:
        self.buf += bytes(-len(self.buf) % multiple)

    def extend(self, other: "Blob") -> int:
        """Append another blob (its slots move with it); returns where it starts."""
        base = len(self.buf)
        self.buf += other.buf
        self.slots.extend((o + base, k, a) for o, k, a in other.slots)
        self.bulk.extend((o + base, ks, ki, ad) for o, ks, ki, ad in other.bulk)
        self.sums.extend((s + base, e + base) for s, e in other.sums)
        return base

    def render(self, resolve: Resolve) -> bytes:
        out = self.fill(resolve)
        for start, end in self.sums:  # in order: an outer checksum covers the inner ones
            _I.pack_into(out, end, lookup3(memoryview(out)[start:end]))
        return bytes(out)

    def fill(self, resolve: Resolve) -> bytearray:
        """The bytes with every address in, checksum slots still zero."""
        out = bytearray(self.buf)
        for pos, key, addend in self.slots:
            _Q.pack_into(out, pos, resolve(key) + addend)
        if self.bulk:
            view = np.frombuffer(out, dtype=np.uint8)
            for offsets, keys, index, addends in self.bulk:
                table = np.asarray([resolve(k) for k in keys], dtype=np.uint64)
                vals = table[index]
                if addends is not None:
                    vals = vals + addends.astype(np.uint64)
                view[offsets[:, None] + np.arange(8)] = vals.astype("<u8").view(np.uint8).reshape(-1, 8)
        return out


@dataclass
class Block:
    """A piece of the file: ``size`` bytes rendered once every address is known."""

    key: AddrKey
    size: int
    render: Callable[[Resolve], bytes | Sequence[Segment]]
    metadata: bool = True
    blob: Blob | None = None  # what ``render`` renders, when it is a blob (checksums in bulk)


def blob_block(key: AddrKey, blob: Blob) -> Block:
    blob.align(8)
    return Block(key, len(blob), blob.render, blob=blob)


@dataclass
class FilePlan:
    """Blocks in file order; addresses are relative to the superblock (at ``base``)."""

    base: int = 0
    head: bytes = b""  # the user block's bytes before its trailing zeros (userblock.py)
    blocks: list[Block] = field(default_factory=list)
    _addr: dict[AddrKey, int] = field(default_factory=dict)
    end: int = 0  # relative end of the last block
    eof: int | None = None  # the superblock's end of file, if not ``end`` (data placed by a caller)

    def add(self, block: Block) -> Block:
        self.blocks.append(block)
        return block

    def extend(self, blocks: Iterable[Block]) -> None:
        self.blocks.extend(blocks)

    def assign(self, start: int = 0) -> dict[AddrKey, int]:
        """Place every block back to back (metadata 8-aligned)."""
        pos = start
        addr: dict[AddrKey, int] = {}
        for b in self.blocks:
            if b.metadata:
                pos = pad8(pos)
            if b.key in addr:
                raise ValueError(f"block {b.key!r} placed twice")
            addr[b.key] = pos
            pos += b.size
        self._addr = addr
        self.end = pos
        return addr

    def address(self, key: AddrKey) -> int:
        return self._addr[key]

    def metadata_end(self) -> int:
        """Relative end of the last metadata block (data blocks follow it)."""
        end = 0
        for b in self.blocks:
            if b.metadata:
                end = self._addr[b.key] + b.size
        return end

    def checksummed(self) -> dict[AddrKey, bytes]:
        """Blob blocks holding one checksum (object headers), rendered together: their
        lookup3 checksums in one pass over all of them (:func:`lookup3_many`)."""
        blocks = [b for b in self.blocks if b.blob is not None and len(b.blob.sums) == 1]
        filled = [b.blob.fill(self.address) for b in blocks]  # type: ignore[union-attr]
        spans = [b.blob.sums[0] for b in blocks]  # type: ignore[union-attr]
        sums = lookup3_many([memoryview(buf)[s:e] for buf, (s, e) in zip(filled, spans)])
        out = {}
        for b, buf, (_, end), value in zip(blocks, filled, spans, sums):
            _I.pack_into(buf, end, value)
            out[b.key] = bytes(buf)
        return out

    def render(self) -> list[Segment]:
        """The file's segments after the user block (adjacent bytes merged)."""
        ready = self.checksummed()
        segs: list[Segment] = []
        pending: list[bytes] = []
        pos = 0

        def flush() -> None:
            if pending:
                segs.append(Literal(b"".join(pending)))
                pending.clear()

        for b in self.blocks:
            at = self._addr[b.key]
            if at > pos:
                pending.append(bytes(at - pos))
            out = ready.pop(b.key) if b.key in ready else b.render(self.address)
            if isinstance(out, (bytes, bytearray)):
                if len(out) != b.size:
                    raise AssertionError(f"block {b.key!r} rendered {len(out)} bytes, planned {b.size}")
                pending.append(bytes(out))
            else:
                flush()
                n = sum(s.length for s in out)
                if n != b.size:
                    raise AssertionError(f"block {b.key!r} rendered {n} bytes, planned {b.size}")
                segs.extend(out)
            pos = at + b.size
        flush()
        if self.base:
            zeros = self.base - len(self.head)
            segs[:0] = ([Literal(self.head)] if self.head else []) + ([Zeros(zeros)] if zeros else [])
        return segs
