"""What every importer shares: the encoding of re-chunked data, the chunk-shape
rule, JSON attributes as HDF5 attributes, numpy dtypes as model types, the
progress bar, and writing decoded data chunk by chunk.

Importers copy stored chunk bytes whenever the translation table can express
the source's encoding; everything else (contiguous or uncompressed data,
codecs the table lacks, chunks that are not full size) is decoded and written
with an :class:`Encoding` (deflate by default), in the source's byte order.
"""
from __future__ import annotations

import itertools
import math
import os
import sys
import zlib
from collections import deque
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..codecs.filterspec import parse_filter_spec
from ..formats.base import json_object
from ..codecs.registry import BLOSC, BLOSC_CNAMES, BLOSC_CODES, BLOSC_SHUFFLES, BZIP2, DEFLATE, SHUFFLE, ZSTD, Filter
from ..errors import CodecError, InvalidInput, PolyfsError, ReadOnly, SourceError, StoreError, UnknownFilter
from ..model import types as T
from ..model import values
from ..model.schema import Dataset
from ..model.jsonattrs import json_attribute_record
from ..model.writer import DomainWriter, stamp

TARGET_CHUNK_BYTES = 1 << 20  # decoded size the chunk-shape rule aims at
SMALL_PLANE_BYTES = 64 << 10  # planes smaller than this are stacked into one chunk

# --codec names -> (filter id, default level)
CODEC_NAMES = {"deflate": (DEFLATE, 6), "gzip": (DEFLATE, 6), "zlib": (DEFLATE, 6), "zstd": (ZSTD, 3),
               "blosc": (BLOSC, 5), "bzip2": (BZIP2, 9), "bz2": (BZIP2, 9), "none": (None, None)}
BLOSC_DEFAULT_CNAME = "lz4"
# the levels each codec's HDF5 filter accepts (HDF5's deflate refuses others when it
# writes, so a view write into such a dataset would fail; bzip2 too; zstd clamps silently)
LEVEL_RANGES = {DEFLATE: ("deflate", 0, 9), BZIP2: ("bzip2", 1, 9), ZSTD: ("zstd", 1, 22), BLOSC: ("blosc", 0, 9)}


def _check_level(fid: int, level: int, text: str, source: object) -> None:
    name, lo, hi = LEVEL_RANGES[fid]
    if not lo <= level <= hi:
        raise SourceError(source, f"--codec {text!r}: {name} level {level} is out of range ({lo} to {hi})")


def _check_blosc(cd: Sequence[int], text: str, source: object) -> None:
    _check_level(BLOSC, cd[4], text, source)
    if cd[5] not in BLOSC_SHUFFLES:
        raise SourceError(source, f"--codec {text!r}: blosc shuffle {cd[5]} is not one of "
                                  f"{', '.join(f'{k} ({v})' for k, v in BLOSC_SHUFFLES.items())}")
    if cd[6] not in BLOSC_CNAMES:
        raise SourceError(source, f"--codec {text!r}: blosc compressor {cd[6]} is not one of "
                                  f"{', '.join(f'{k} ({v})' for k, v in BLOSC_CNAMES.items())}")


# -- the encoding of decoded data ---------------------------------------------
@dataclass(frozen=True)
class Encoding:
    """The filters for data that has to be (re)encoded, in HDF5 write order.

    ``filters`` are templates: shuffle's element size and blosc's type size and
    buffer size depend on the dataset and are filled in by :meth:`filters_for`.
    """

    filters: tuple[Filter, ...]
    text: str = "deflate"

    def filters_for(self, dtype: T.DType, chunk_shape: Sequence[int] = ()) -> list[Filter]:
        itemsize = 1 if dtype.is_vlen else dtype.itemsize
        nbytes = math.prod(chunk_shape) * itemsize if chunk_shape else itemsize
        out = []
        for f in self.filters:
            if f.id == SHUFFLE:
                f = Filter(SHUFFLE, (itemsize,))
            elif f.id == BLOSC:
                cd = list(f.cd_values)
                f = Filter(BLOSC, (2, 2, itemsize, nbytes, cd[4], cd[5], cd[6]))
            out.append(f)
        return out


def parse_codec(codec: str | None, level: int | None, source: object) -> Encoding:
    """``--codec`` (a name or a netCDF filter spec) and ``--level`` as an Encoding.

    An unknown name or filter id fails with a SourceError naming the source, so
    the CLI prints one line before anything is written.
    """
    text = (codec or "deflate").strip()
    name = text.lower()
    try:
        if name in CODEC_NAMES:
            fid, default = CODEC_NAMES[name]
            if fid is None:
                if level is not None:
                    raise SourceError(source, f"--level {level}: --codec {text!r} does not compress")
                return Encoding((), "none")
            lvl = default if level is None else int(level)
            _check_level(fid, lvl, text, source)
            if fid == BLOSC:
                return Encoding((Filter(BLOSC, (2, 2, 0, 0, lvl, 1, BLOSC_CODES[BLOSC_DEFAULT_CNAME])),), text)
            return Encoding((Filter(fid, (lvl,)),), text)
        filters = parse_filter_spec(text)
    except SourceError:
        raise
    except UnknownFilter as exc:
        raise SourceError(source, f"--codec {text!r}: unknown filter id {exc.filter_id} "
                                  f"(known: deflate, zstd, blosc, bzip2, none or a filter spec "
                                  f"with ids 1, 2, 3, 307, 32001, 32015)") from None
    except InvalidInput as exc:
        raise SourceError(source, f"--codec {text!r}: {exc}") from None
    out = []
    for f in filters:
        cd = list(f.cd_values)
        if f.id == BLOSC:
            clevel = cd[4] if len(cd) > 4 else 5
            shuffle = cd[5] if len(cd) > 5 else 1
            comp = cd[6] if len(cd) > 6 else BLOSC_CODES[BLOSC_DEFAULT_CNAME]
            f = Filter(BLOSC, (2, 2, 0, 0, clevel if level is None else level, shuffle, comp))
            _check_blosc(f.cd_values, text, source)
        elif f.id in (DEFLATE, ZSTD, BZIP2):
            default = CODEC_NAMES[{DEFLATE: "deflate", ZSTD: "zstd", BZIP2: "bzip2"}[f.id]][1]
            lvl = level if level is not None else (cd[0] if cd else default)
            _check_level(f.id, int(lvl), text, source)
            f = Filter(f.id, (int(lvl),))
        out.append(f)
    return Encoding(tuple(out), text)


# -- chunk shapes ---------------------------------------------------------------
def parse_chunks(text: str | Sequence[int] | None, source: object) -> tuple[int, ...] | None:
    """``--chunks 64,64,64`` as a tuple (None when not given)."""
    if text is None or text == "":
        return None
    try:
        parts = [int(p) for p in (text.split(",") if isinstance(text, str) else text)]
    except ValueError:
        raise SourceError(source, f"--chunks {text!r}: expected integers separated by commas") from None
    if not parts or any(p <= 0 for p in parts):
        raise SourceError(source, f"--chunks {text!r}: every chunk dimension must be a positive integer")
    return tuple(parts)


def auto_chunks(shape: Sequence[int], itemsize: int, target: int = TARGET_CHUNK_BYTES) -> tuple[int, ...]:
    """The chunk shape for data that has none of its own (contiguous, stripped).

    Rule: a dataset of at most ``target`` bytes (1 MiB) is one chunk. Else, with
    two or more dims, chunks are one plane deep (so TIFF views serve them as
    tiles without transcoding) and the last two dims are halved, largest first,
    staying multiples of 16, until a chunk is at most ``target``; planes smaller
    than 64 KiB are stacked along the leading dim up to ``target`` instead. A
    1-D dataset is cut into runs of ``target`` bytes.
    """
    dims = [max(1, int(d)) for d in shape]
    if not dims:
        return ()
    itemsize = max(1, int(itemsize))
    if math.prod(dims) * itemsize <= target:
        return tuple(dims)
    if len(dims) == 1:
        return (max(1, target // itemsize),)
    chunk = [1] * (len(dims) - 2) + dims[-2:]
    plane = math.prod(dims[-2:]) * itemsize
    if plane < SMALL_PLANE_BYTES:
        chunk[-3] = max(1, min(dims[-3], target // plane))
        return tuple(chunk)
    while math.prod(chunk) * itemsize > target:
        axis = len(dims) - 2 if chunk[-2] >= chunk[-1] else len(dims) - 1
        other = len(dims) - 1 if axis == len(dims) - 2 else len(dims) - 2
        new = _half16(chunk[axis])
        if new == chunk[axis]:
            new = _half16(chunk[other])
            if new == chunk[other]:
                break
            chunk[other] = new
        else:
            chunk[axis] = new
    return tuple(chunk)


def _half16(n: int) -> int:
    """Half of ``n`` rounded up to a multiple of 16 (never below 16, never growing)."""
    if n <= 16:
        return n
    half = -(-n // 2)
    return min(n, -(-half // 16) * 16) if half > 16 else 16


def chunks_for(shape: Sequence[int], itemsize: int, requested: tuple[int, ...] | None) -> tuple[int, ...]:
    """``--chunks`` when its rank fits the dataset (clamped to the shape), else :func:`auto_chunks`."""
    if not shape:
        return ()
    if requested is not None and len(requested) == len(shape):
        return tuple(max(1, min(c, d)) for c, d in zip(requested, shape))
    return auto_chunks(shape, itemsize)


# -- model types of plain numpy dtypes ------------------------------------------
def set_json_attrs(obj, attrs: dict[str, Any], skip: Iterable[str] = ()) -> None:
    skip = set(skip)
    for name, value in attrs.items():
        if name in skip or not name:
            continue
        obj.attributes[name] = json_attribute_record(name, value, stamp())


# -- progress --------------------------------------------------------------------
class Progress:
    """A tqdm bar over chunks written; shown only when asked and stderr is a terminal."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self._bar = None
        if enabled and total > 0 and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="chunk", dynamic_ncols=True, leave=False)

    def __call__(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


# -- decoded data -> chunks ---------------------------------------------------------
Region = tuple[slice, ...]


def chunk_region(ds: Dataset, coords: Sequence[int]) -> Region:
    dims = ds.shape.array_shape
    return tuple(slice(c * n, min((c + 1) * n, d)) for c, n, d in zip(coords, ds.chunks, dims))


def padded(ds: Dataset, part: np.ndarray) -> np.ndarray:
    """A full-size chunk: ``part`` padded with the fill value (edge chunks). Complex data (a
    TIFF's, an HDF5 source's) becomes the ``{r, i}`` compound it is stored as."""
    part = complex_as_pairs(part)
    if not ds.chunks:
        return part.reshape(())
    if tuple(part.shape) == tuple(ds.chunks):
        return part
    block = values.fill_array(ds.type, ds.fill_value, ds.chunks)
    values.put(block, part, tuple(slice(0, s) for s in part.shape))  # complex record fields: both parts
    return block


def grid_coords(ds: Dataset) -> Iterable[tuple[int, ...]]:
    if not ds.shape.array_shape:
        return [(0,)] if ds.shape.kind == "scalar" else []
    return itertools.product(*(range(g) for g in ds.grid))


class ChunkSink:
    """Stores a dataset's chunks, with the CPU work in worker threads.

    Encoding decoded blocks and the CRC32 of copied deflate chunks (which needs
    them inflated) run in a thread pool (zlib, zstd, blosc and bz2 release the
    GIL); reading the source and writing the store stay in the calling thread,
    at most ``window`` chunks ahead. Used as a context manager: leaving it
    stores what is pending, or on error drops it.
    """

    def __init__(self, writer: DomainWriter, workers: int | None = None) -> None:
        self.writer = writer
        self.workers = max(1, workers if workers is not None else min(8, os.cpu_count() or 1))
        self.window = 2 * self.workers
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="polyfs-import") \
            if self.workers > 1 else None
        self._pending: deque = deque()

    def __enter__(self) -> "ChunkSink":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.flush()
        finally:
            for _, _, fut in self._pending:
                fut.cancel()
            self._pending.clear()
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def encoded(self, ds: Dataset, coords: Sequence[int], block: np.ndarray) -> None:
        """A full-size decoded block, to encode with the dataset's pipeline."""
        self._submit(ds, coords, self.writer.encode_chunk, ds, block)

    def stored(self, ds: Dataset, coords: Sequence[int], data: bytes, crc32: int | None = None) -> None:
        """Chunk bytes already in the dataset's encoding (stored as they are)."""
        if crc32 is None and _needs_crc(self.writer, ds):
            self._submit(ds, coords, _with_crc, data)
        else:
            self._submit(ds, coords, _as_is, data, crc32)

    def job(self, ds: Dataset, coords: Sequence[int], fn: Callable[..., tuple[bytes, int | None]], *args) -> None:
        """``fn(*args) -> (stored bytes, crc32 or None)`` in a worker, then stored."""
        self._submit(ds, coords, fn, *args)

    def _submit(self, ds, coords, fn, *args) -> None:
        if self._pool is None:
            self._store(ds, coords, _Done(fn, args))
            return
        self._pending.append((ds, tuple(coords), self._pool.submit(fn, *args)))
        while len(self._pending) > self.window:
            self._store(*self._pending.popleft())

    def flush(self) -> None:
        while self._pending:
            self._store(*self._pending.popleft())

    def _store(self, ds, coords, fut) -> None:
        try:
            stored, crc = fut.result()
        except zlib.error as exc:
            raise CodecError(f"chunk {list(coords)}: stored deflate stream is corrupt ({exc})") from None
        except CodecError as exc:
            raise CodecError(f"chunk {list(coords)}: {exc}") from None
        self.writer.write_chunk(ds, coords, stored, crc)


class _Done:
    """A job run inline (no pool), shaped like a finished future."""

    def __init__(self, fn, args) -> None:
        self.fn, self.args = fn, args

    def result(self):
        return self.fn(*self.args)


def _as_is(data: bytes, crc32: int | None) -> tuple[bytes, int | None]:
    return data, crc32


def _with_crc(data: bytes) -> tuple[bytes, int]:
    return data, zlib.crc32(zlib.decompress(data))


def _needs_crc(writer: DomainWriter, ds: Dataset) -> bool:
    p = writer.pipeline(ds)
    return bool(p.filters) and p.filters[-1].id == DEFLATE


def write_decoded(writer: DomainWriter, ds: Dataset, read: Callable[[Region], np.ndarray],
                  coords: Iterable[tuple[int, ...]] | None = None, skip_fill: bool = True,
                  progress: Callable[[int], None] | None = None, workers: int | None = None) -> int:
    """Read each chunk's region with ``read``, pad, encode and store it.

    ``coords`` limits the chunks (the source's existing chunks); with
    ``skip_fill`` a chunk holding only the fill value is left missing (it
    reads back as the fill value anyway). Encoding runs in worker threads.
    """
    written = 0
    scalar = not ds.shape.array_shape
    with ChunkSink(writer, workers) as sink:
        for c in (grid_coords(ds) if coords is None else coords):
            region = () if scalar else chunk_region(ds, c)
            part = np.asarray(read(region))
            block = padded(ds, part)
            if progress:
                progress(1)
            if skip_fill and not scalar and _only_fill(ds, block):
                continue
            sink.encoded(ds, (0,) if scalar else c, block)
            written += 1
    return written


def _only_fill(ds: Dataset, block: np.ndarray) -> bool:
    if block.dtype.kind == "O" or (block.dtype.names and any(block.dtype[n].kind == "O" for n in block.dtype.names)):
        return False
    fill = values.fill_array(ds.type, ds.fill_value, ()).tobytes()
    dt = ds.type.numpy()
    raw = values.as_layout(block, dt.subdtype[0] if dt.subdtype else dt).tobytes()
    return raw == fill * (len(raw) // max(1, len(fill)))


def read_json_object(f: Path) -> dict[str, Any]:
    """A source's metadata file as a JSON object; SourceError naming the file otherwise."""
    try:
        return json_object(f.read_bytes())
    except OSError as exc:
        raise SourceError(f, exc.strerror or exc) from None
    except ValueError as exc:
        raise SourceError(f, exc) from None


@contextmanager
def source_errors(err: Callable[[object], SourceError]) -> Iterator[None]:
    """Whatever reading a source raises becomes one SourceError (``err(cause)``) naming it:
    polyfs's own errors by their message, library errors by their type and message. The
    store's own failures (a full disk, a read-only store) are not the source's fault and
    keep their class, so the caller gets EIO/EROFS rather than EINVAL."""
    try:
        yield
    except (SourceError, StoreError, ReadOnly):
        raise
    except PolyfsError as exc:
        raise err(exc) from None
    except Exception as exc:  # numcodecs, zlib, h5py, tifffile, tensorstore, zarr-python raise many kinds
        raise err(f"{type(exc).__name__}: {exc}") from None


def write_plans(plans: Sequence[Any], write: Callable[[Any, "Progress"], None], name: str, progress: bool) -> None:
    """Write every planned dataset (each has ``nchunks``) under one progress bar."""
    bar = Progress(sum(p.nchunks for p in plans), name, progress)
    try:
        for p in plans:
            write(p, bar)
    finally:
        bar.close()


@dataclass(frozen=True)
class ImportOptions:
    """What ``polyfs import`` was asked for, shared by every format."""

    encoding: Encoding
    chunks: tuple[int, ...] | None = None
    progress: bool = True


def stored_pipeline_filters(opts: ImportOptions, dtype: T.DType, chunks: Sequence[int]) -> list[Filter]:
    """Filters for decoded data: none for scalars (one element; HDF5 cannot filter them)."""
    if not chunks:
        return []
    return opts.encoding.filters_for(dtype, chunks)


def complex_as_pairs(arr: np.ndarray) -> np.ndarray:
    """A complex array viewed as the ``{r, i}`` compound it is stored as."""
    return values.complex_pairs(arr)


def dir_below(root: Path, matches: Callable[[Path], bool], limit: int = 4096) -> bool:
    """Whether a directory below ``root`` satisfies ``matches``: how a source without root
    metadata (tensorstore writes arrays into plain directories, no group or container
    document) is still recognised. Breadth first, so metadata next to the root is met before
    chunk directories; hidden directories skipped; at most ``limit`` directories looked into."""
    queue, seen = deque([root]), 0
    while queue and seen < limit:
        node = queue.popleft()
        seen += 1
        try:
            children = sorted(p for p in node.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            continue
        for child in children:
            if matches(child):
                return True
            queue.append(child)
    return False
