"""How stored chunks become the bytes a chunked view serves (Zarr, N5, later TIFF).

A view decides once per dataset, from the model and the effective pipeline
(never from chunk data), a :class:`Recipe`: what every existing chunk object
turns into.

- ``stored``: the chunk object unchanged, optionally after a fixed literal
  ``head`` (zero-copy: a :class:`~polyfs.vfile.ChunkRun`).
- ``gzip``: a zlib stream spliced into a gzip member: ``head`` +
  ``GZIP_HEADER`` + ``stored[2:-4]`` + an 8-byte trailer (CRC32 + ISIZE)
  made by a producer. Only the trailer is computed; for fixed-size types the
  CRC32 comes from polyfs's CRC table (:class:`GzipTrailer`), for
  variable-length data (decoded size unknown) the stream is inflated once
  when the trailer is first read (:class:`InflatedGzipTrailer`).
- ``crc32c`` (with ``stored`` or ``gzip``): each served chunk is followed by
  the CRC32C of its served bytes (Zarr's ``crc32c`` codec, which a writer
  declared), a 4-byte producer that reads the chunk once (:class:`Crc32cTrailer`);
  a transcoding appends it to its output instead (:meth:`Recipe.checksummed`).
- ``transcode``: decode with the stored pipeline, ``transform``, ``encode``
  (a :class:`TranscodedChunk`, produced once and cached by the reader). The
  view picks targets whose size is known from the shape (``length``) so
  listing and ``stat`` never read chunk data; only variable-length outputs
  (``length=None``) are measured by producing them once when the file is
  built.

:func:`build_items` lays the chunks of a list (C-order linear indexes of
existing chunks) back to back and reports where each one landed, which is
all a shard index, an N5 block or a TIFF tile table needs.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable

import numpy as np

from ..codecs.pipeline import GZIP_HEADER, ZLIB_HEADER_LEN, ZLIB_TRAILER_LEN, Pipeline, gzip_trailer
from ..codecs.registry import DEFLATE
from ..errors import ChunkMissing, CodecError, PolyfsError
from ..model.chunks import ChunkIndex
from ..model.schema import Dataset
from ..vfile import ChunkRun, Produced, Segment
from .transcode import CRC32C_LEN, Crc32cTrailer, GzipTrailer, TranscodedChunk, fetch_chunk, with_crc32c

GZIP_TRAILER_LEN = 8


@dataclass(frozen=True)
class Transcoding:
    """Stored chunk -> ``pipeline.decode`` -> ``transform`` -> ``encode``.

    ``tag`` names the target (it keys the reader's cache together with the
    chunk key); ``length`` is the exact output size, or None when it depends
    on the data (then measured once when the file is built).
    """

    tag: Hashable
    encode: Callable[[bytes], bytes] = field(compare=False)
    transform: Callable[[bytes], bytes] | None = field(default=None, compare=False)
    length: int | None = None


@dataclass(frozen=True)
class Recipe:
    """What each stored chunk of a dataset becomes in one view."""

    mode: str  # "stored" | "gzip" | "transcode"
    head: bytes = b""  # literal bytes before each (spliced) stored chunk
    transcoding: Transcoding | None = None
    vlen: bool = False  # gzip mode: decoded size unknown, trailer inflates
    reason: str = ""  # why transcoded (for ``polyfs info`` and logs)
    crc32c: bool = False  # each served chunk is followed by its CRC32C (Zarr's ``crc32c`` codec)

    def __post_init__(self) -> None:
        if self.mode not in ("stored", "gzip", "transcode"):
            raise ValueError(f"unknown recipe mode {self.mode!r}")
        if (self.mode == "transcode") != (self.transcoding is not None):
            raise ValueError("a transcode recipe needs a transcoding (and only it)")

    @property
    def zero_copy(self) -> bool:
        """True when the stored chunk bytes are served unchanged (maybe wrapped)."""
        return self.mode != "transcode"

    def describe(self) -> str:
        if self.mode == "stored":
            return "zero-copy"
        if self.mode == "gzip":
            return "zero-copy (gzip spliced)"
        return f"transcoded ({self.reason})" if self.reason else "transcoded"

    def checksummed(self) -> Recipe:
        """The same chunks, each followed by its CRC32C: the body stays zero-copy (the trailer
        is computed), a transcoding appends it to its output."""
        if self.crc32c:
            return self
        t = self.transcoding
        if t is not None:
            length = None if t.length is None else t.length + CRC32C_LEN
            t = Transcoding(("crc32c", t.tag), with_crc32c(t.encode), t.transform, length)
            return replace(self, transcoding=t)
        return replace(self, crc32c=True)

    # -- per-chunk size arithmetic, from stored sizes only -------------------
    def item_lengths(self, sizes: np.ndarray) -> np.ndarray | None:
        """Served size of each chunk from its stored size (None: must be measured)."""
        sizes = np.asarray(sizes, dtype=np.int64)
        crc = CRC32C_LEN if self.crc32c else 0
        if self.mode == "stored":
            return sizes + len(self.head) + crc
        if self.mode == "gzip":
            return sizes + (len(self.head) + len(GZIP_HEADER) + GZIP_TRAILER_LEN
                            - ZLIB_HEADER_LEN - ZLIB_TRAILER_LEN + crc)
        assert self.transcoding is not None
        if self.transcoding.length is None:
            return None
        return np.full(sizes.shape, self.transcoding.length, dtype=np.int64)


def stored(head: bytes = b"") -> Recipe:
    return Recipe("stored", head)


def gzip_spliced(head: bytes = b"", vlen: bool = False) -> Recipe:
    return Recipe("gzip", head, vlen=vlen)


def transcoded(transcoding: Transcoding, reason: str) -> Recipe:
    return Recipe("transcode", transcoding=transcoding, reason=reason)


def opaque_reason(pipe: Pipeline, view: str) -> str:
    """Why a view transcodes chunks under filters outside the table (HDF5 decodes them)."""
    return f"{', '.join(f.name for f in pipe.opaque)}: no {view} codec"


_LEFT_OUT: set[tuple[str, str]] = set()


def left_out(view: str, where: str, ds: Dataset, ctx: Any, log: Any) -> bool:
    """True when no library here decodes ``ds``'s chunks (an opaque filter without a
    plugin): the view leaves the dataset out, said in one log line per view and dataset.
    Pure: the declared filters alone decide (no chunk is read)."""
    try:
        why = ctx.catalog.declared_pipeline(ds).undecodable
    except PolyfsError:  # filters that do not parse: the view's own error path names them
        return False
    if why is None:
        return False
    if (view, ds.id) not in _LEFT_OUT:
        _LEFT_OUT.add((view, ds.id))
        log.warning("%s: %s not shown: %s", view, where, why)
    return True


def deflate_last(pipe: Pipeline) -> bool:
    """A zlib stream is the outermost layer: it can be spliced into a gzip member."""
    return bool(pipe.filters) and pipe.filters[-1].id == DEFLATE


# -- producers ----------------------------------------------------------------------
@dataclass(frozen=True)
class InflatedGzipTrailer:
    """CRC32 + ISIZE of a zlib stream whose decoded size is not known (variable-length
    chunks): the stream is inflated once, when the trailer is first read."""

    key: str
    stored_size: int
    length: int = GZIP_TRAILER_LEN

    @property
    def cache_key(self) -> Hashable:
        return ("gzip-trailer-inflated", self.key, self.stored_size)

    def produce(self, ctx: Any) -> bytes:
        stream = fetch_chunk(ctx, self.key, self.stored_size)
        try:
            raw = zlib.decompress(stream)
        except zlib.error as exc:
            raise CodecError(f"chunk {self.key}: corrupt zlib stream ({exc})") from None
        return gzip_trailer(zlib.crc32(raw), len(raw))


# -- laying chunks out ----------------------------------------------------------------
@dataclass
class Items:
    """Chunks laid back to back: the segments, and each chunk's (offset, length)."""

    segments: list[Segment]
    offsets: np.ndarray  # relative to the first segment
    lengths: np.ndarray

    @property
    def length(self) -> int:
        return int(self.lengths.sum()) if self.lengths.size else 0


@dataclass
class ChunkSource:
    """One dataset's stored chunks as a view sees them."""

    ctx: Any
    dataset: Dataset
    index: ChunkIndex
    pipeline: Pipeline
    raw_nbytes: int | None  # decoded size of one chunk (None: variable-length)

    @classmethod
    def of(cls, ctx: Any, ds: Dataset) -> "ChunkSource":
        raw = None if ds.type.is_vlen else ds.chunk_nbytes
        return cls(ctx, ds, ctx.catalog.chunk_index(ds), ctx.catalog.pipeline(ds), raw)

    def sizes(self, linear: np.ndarray) -> np.ndarray:
        sizes = self.index.sizes_for(linear)
        if np.any(sizes < 0):
            missing = int(np.asarray(linear)[sizes < 0][0])
            raise ChunkMissing(f"chunk {self.index.key(missing)} is not in the chunk index of {self.dataset.id}")
        return sizes

    def transcoded_chunk(self, linear: int, t: Transcoding, stored_size: int = -1) -> TranscodedChunk:
        return TranscodedChunk(self.index.key(int(linear)), self.pipeline, self.raw_nbytes,  # type: ignore[arg-type]
                               t.tag, t.encode, t.transform, -1 if t.length is None else t.length,
                               stored_size=stored_size)


def build_items(src: ChunkSource, recipe: Recipe, linear: np.ndarray) -> Items:
    """Segments serving the chunks ``linear`` (existing ones, in the order given)."""
    linear = np.asarray(linear, dtype=np.int64)
    sizes = src.sizes(linear)
    index = src.index
    if recipe.mode == "stored":
        if not recipe.crc32c:
            run = ChunkRun(index, linear, sizes, head=recipe.head)
        else:
            def crc_tail(lin: int, size: int):
                return Crc32cTrailer(index.key(lin), size, recipe.head)
            run = ChunkRun(index, linear, sizes, head=recipe.head, tail=crc_tail, tail_len=CRC32C_LEN)
        return Items([run], run.item_offsets(), np.diff(run.starts))
    if recipe.mode == "gzip":
        ds, raw = src.dataset, src.raw_nbytes
        if recipe.vlen or raw is None:
            def gz_tail(lin: int, size: int):
                return InflatedGzipTrailer(index.key(lin), size)
        else:
            def gz_tail(lin: int, size: int):
                return GzipTrailer(ds, lin, index.key(lin), size, raw)
        tail, tail_len = gz_tail, GZIP_TRAILER_LEN
        head = recipe.head + GZIP_HEADER
        if recipe.crc32c:
            def tail(lin: int, size: int):
                return Crc32cTrailer(index.key(lin), size, head, ZLIB_HEADER_LEN, ZLIB_TRAILER_LEN,
                                     gz_tail(lin, size))
            tail_len += CRC32C_LEN
        run = ChunkRun(index, linear, sizes, head=head, skip_head=ZLIB_HEADER_LEN,
                       skip_tail=ZLIB_TRAILER_LEN, tail=tail, tail_len=tail_len)
        return Items([run], run.item_offsets(), np.diff(run.starts))
    t = recipe.transcoding
    assert t is not None
    segments: list[Segment] = []
    lengths = np.zeros(linear.shape, dtype=np.int64)
    for i, lin in enumerate(linear):
        tc = src.transcoded_chunk(int(lin), t, int(sizes[i]))
        if t.length is None:
            # variable-length output: produce once to learn the size (documented exception)
            tc = replace(tc, length=len(tc.produce(src.ctx)))
        segments.append(Produced(tc))
        lengths[i] = tc.length
    offsets = np.zeros(linear.shape, dtype=np.int64)
    if lengths.size:
        np.cumsum(lengths[:-1], out=offsets[1:])
    return Items(segments, offsets, lengths)


# -- common transforms ---------------------------------------------------------------
def astype_transform(src: np.dtype, dst: np.dtype) -> Callable[[bytes], bytes]:
    """Reinterpret chunk bytes as ``src`` and convert them to ``dst`` (e.g. a byte swap)."""
    src, dst = np.dtype(src), np.dtype(dst)
    return lambda raw: np.frombuffer(raw, dtype=src).astype(dst, copy=False).tobytes()


def identity(raw: bytes) -> bytes:
    return raw
