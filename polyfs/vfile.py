"""Virtual files: segments with cumulative offsets, and pure read planning.

A view describes each file as a list of segments: literal bytes, a range of a
stored object, zeros, bytes made by a :class:`Producer` (a transcoded chunk,
a gzip trailer), or a :class:`ChunkRun` (many whole chunk objects back to
back, kept as numpy arrays so a million chunks stay cheap). ``plan`` turns a
``(offset, size)`` read into :class:`Piece` s without any I/O; the reader
(``reader.py``) is the one place that executes them.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Hashable, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .model.chunks import ChunkIndex


# -- what a read turns into --------------------------------------------------
@dataclass(frozen=True, slots=True)
class LiteralPiece:
    data: bytes | memoryview


@dataclass(frozen=True, slots=True)
class RangePiece:
    key: str
    start: int
    length: int
    object_size: int = -1  # the stored object's size when planned (-1: unknown); checked on read


@dataclass(frozen=True, slots=True)
class ProducedPiece:
    producer: "Producer"
    start: int
    length: int


Piece = LiteralPiece | RangePiece | ProducedPiece


class Producer(Protocol):
    """Bytes computed from the store (transcoding, splicing); cached by the reader."""

    cache_key: Hashable
    length: int

    def produce(self, ctx: Any) -> bytes:  # runs in a worker thread
        ...


# -- segments -------------------------------------------------------------
class Segment:
    length: int

    def plan(self, start: int, end: int, out: list) -> None:
        """Append the pieces for bytes ``[start, end)`` of this segment."""
        raise NotImplementedError


_ZERO_BLOCK = bytes(1 << 16)


@dataclass(frozen=True, slots=True)
class Literal(Segment):
    data: bytes

    @property
    def length(self) -> int:  # type: ignore[override]
        return len(self.data)

    def plan(self, start: int, end: int, out: list) -> None:
        out.append(LiteralPiece(memoryview(self.data)[start:end]))


@dataclass(frozen=True, slots=True)
class Zeros(Segment):
    length: int

    def plan(self, start: int, end: int, out: list) -> None:
        n = end - start
        while n > 0:
            k = min(n, len(_ZERO_BLOCK))
            out.append(LiteralPiece(memoryview(_ZERO_BLOCK)[:k]))
            n -= k


@dataclass(frozen=True, slots=True)
class Stored(Segment):
    """``length`` bytes of stored object ``key`` from ``offset``."""

    key: str
    offset: int
    length: int
    object_size: int = -1  # the whole object's size when planned, if known

    def plan(self, start: int, end: int, out: list) -> None:
        out.append(RangePiece(self.key, self.offset + start, end - start, self.object_size))


@dataclass(frozen=True, slots=True)
class Produced(Segment):
    producer: Producer

    @property
    def length(self) -> int:  # type: ignore[override]
        return self.producer.length

    def plan(self, start: int, end: int, out: list) -> None:
        out.append(ProducedPiece(self.producer, start, end - start))


class ChunkRun(Segment):
    """Chunk objects of one dataset laid back to back, each optionally wrapped.

    Each item ``i`` is ``head(i) + stored[skip_head : size - skip_tail] + tail(i)``;
    ``head``/``tail`` are fixed literal bytes or per-item producers (a gzip trailer).
    """

    def __init__(self, index: "ChunkIndex", linear: np.ndarray, sizes: np.ndarray,
                 head: bytes = b"", skip_head: int = 0, skip_tail: int = 0,
                 tail: Callable[[int, int], Producer] | None = None, tail_len: int = 0) -> None:
        self.index = index
        self.linear = np.asarray(linear, dtype=np.int64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.head = head
        self.skip_head = skip_head
        self.skip_tail = skip_tail
        self.tail = tail
        self.tail_len = tail_len if tail is not None else 0
        item = self.sizes - skip_head - skip_tail + len(head) + self.tail_len
        self.starts = np.zeros(len(self.sizes) + 1, dtype=np.int64)
        np.cumsum(item, out=self.starts[1:])
        self.length = int(self.starts[-1])

    def item_offsets(self) -> np.ndarray:
        """Start offset of each item within the run (for index tables)."""
        return self.starts[:-1]

    def plan(self, start: int, end: int, out: list) -> None:
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        hl = len(self.head)
        while start < end and i < len(self.sizes):
            base = int(self.starts[i])
            size = int(self.sizes[i])
            body = size - self.skip_head - self.skip_tail
            lo, hi = start - base, min(end, int(self.starts[i + 1])) - base
            # head
            if lo < hl:
                out.append(LiteralPiece(memoryview(self.head)[lo:min(hi, hl)]))
            # body
            b0, b1 = max(lo, hl) - hl, min(hi, hl + body) - hl
            if b1 > b0:
                out.append(RangePiece(self.index.key(int(self.linear[i])), self.skip_head + b0, b1 - b0, size))
            # tail
            t0, t1 = max(lo, hl + body) - hl - body, hi - hl - body
            if t1 > t0 and self.tail is not None:
                out.append(ProducedPiece(self.tail(int(self.linear[i]), size), t0, t1 - t0))
            start = base + hi
            i += 1


# -- the file -------------------------------------------------------------
class VFile:
    """Segments with cumulative offsets; ``plan`` bisects into them."""

    def __init__(self, segments: Sequence[Segment]) -> None:
        self.segments = [s for s in segments if s.length > 0]
        self.offsets = [0]
        for s in self.segments:
            self.offsets.append(self.offsets[-1] + s.length)
        self.size = self.offsets[-1]

    def object_keys(self) -> set[str]:
        """The stored objects this file shows (what a reader of it has seen; no I/O)."""
        out: set[str] = set()
        for seg in self.segments:
            if isinstance(seg, ChunkRun):
                out.update(seg.index.key(int(lin)) for lin in seg.linear)
            elif isinstance(seg, Stored):
                out.add(seg.key)
            elif isinstance(seg, Produced) and isinstance(getattr(seg.producer, "key", None), str):
                out.add(seg.producer.key)
        return out

    def plan(self, offset: int, size: int) -> list[Piece]:
        end = min(offset + size, self.size)
        out: list[Piece] = []
        if offset >= end:
            return out
        i = bisect.bisect_right(self.offsets, offset) - 1
        while offset < end:
            seg_start = self.offsets[i]
            seg_end = self.offsets[i + 1]
            self.segments[i].plan(offset - seg_start, min(end, seg_end) - seg_start, out)
            offset = min(end, seg_end)
            i += 1
        return out

    def segment_at(self, offset: int) -> tuple[int, Segment]:
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.offsets[i], self.segments[i]


def coalesce(pieces: list[Piece], gap: int = 0) -> list[tuple[str, int, int]]:
    """Merge the stored ranges of a plan per key: ``(key, start, length)`` fetches."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    for p in pieces:
        if isinstance(p, RangePiece):
            by_key.setdefault(p.key, []).append((p.start, p.start + p.length))
    out = []
    for key, ranges in by_key.items():
        ranges.sort()
        cur_s, cur_e = ranges[0]
        for s, e in ranges[1:]:
            if s <= cur_e + gap:
                cur_e = max(cur_e, e)
            else:
                out.append((key, cur_s, cur_e - cur_s))
                cur_s, cur_e = s, e
        out.append((key, cur_s, cur_e - cur_s))
    return out
