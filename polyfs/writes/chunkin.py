"""Written chunk bytes -> canonical stored chunk bytes.

A writer encodes a chunk with the codecs its metadata declares (its
``Incoming`` encoding). When those decode the same way as the dataset's
stored encoding (same filters in the same order, same byte order) the bytes
are stored as written (a gzip member becomes the zlib stream it holds, no
recompression); otherwise they are decoded and encoded again with the
stored pipeline. Either way the chunk is decoded once to prove it is what it
claims (a wrong size or a corrupt stream is refused before the store is
touched).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..codecs.pipeline import Pipeline, adler32_of_zlib, gzip_to_zlib, strip_crc32c
from ..codecs.registry import BLOSC, DEFLATE, SHUFFLE, ZSTD, Filter
from ..errors import CodecError, InvalidInput, NoCodec, UnsupportedType
from ..codecs.sniff import zstd_has_content_size
from ..model import values
from ..model.schema import Dataset
from ..model.types import StringType, resolved
from ..views import hdmf


@dataclass(frozen=True)
class Incoming:
    """How a writer encodes one chunk: its element dtype and HDF5-style filters."""

    dtype: np.dtype  # element type with the writer's byte order
    filters: tuple[Filter, ...] = ()
    gzip_member: bool = False  # the outermost filter is a gzip member (Zarr gzip, N5 gzip)
    crc32c: bool = False  # a crc32c checksum follows (Zarr crc32c codec)
    # text a format frames its own way (Zarr vlen-utf8, fixed_length_utf32): its decoded chunk
    # of n elements -> the stored variable-length encoding (codecs/vlen.py), CodecError if bad
    unframe: Callable[[bytes, int], bytes] | None = None

    def pipeline(self) -> Pipeline:
        return Pipeline(self.filters, self.dtype.itemsize)


def stored_dtype(ds: Dataset) -> np.dtype:
    dt = ds.type.numpy()
    return dt.subdtype[0] if dt.subdtype is not None else dt


def _same_encoding(inc: Incoming, stored: Pipeline, dt: np.dtype) -> bool:
    if inc.dtype.str != dt.str and not (inc.dtype.itemsize == 1 and inc.dtype.kind == dt.kind):
        return False
    if tuple(f.id for f in inc.filters) != stored.ids:
        return False
    for a, b in zip(inc.filters, stored.filters):
        if a.id == SHUFFLE and (a.cd_values[:1] or (inc.dtype.itemsize,)) != (b.cd_values[:1] or (stored.itemsize,)):
            return False
    return True


def unwrapped(inc: Incoming, data: bytes) -> bytes:
    """A written chunk without the framing a stored encoding never keeps: its trailing
    crc32c (checked) and its gzip member header (the zlib stream inside)."""
    if inc.crc32c:
        data = strip_crc32c(data)
    if inc.gzip_member:
        data, _ = gzip_to_zlib(data)
    return data


def to_stored(ds: Dataset, stored: Pipeline, inc: Incoming, data: bytes, dims: tuple[int, ...] | None = None,
              crc: list[int] | None = None, old: bytes | None = None) -> bytes:
    """The canonical bytes of one chunk written as ``data``; ``dims`` is the block's
    extent when a writer sends less than a full chunk (N5 edge blocks). ``crc``: gets the
    CRC32 of the inflated bytes when they are stored as written in deflate alone (the
    deflate CRC table needs it; validation has just inflated them). ``old``: the stored
    bytes of the chunk; under a filter outside the table they are kept when the written
    values are theirs (a view that transcodes serves other bytes; a lossy filter must
    not be applied again to values that did not change)."""
    full = tuple(ds.chunks) if ds.chunks else ()
    dims = full if dims is None else tuple(dims)
    if len(dims) != len(full) or any(d > f or d < 0 for d, f in zip(dims, full)):
        raise InvalidInput(f"block of shape {list(dims)} does not fit chunk shape {list(full)}")
    data = unwrapped(inc, data)
    if inc.unframe is not None:
        return _unframed(ds, stored, inc, data, dims, full)
    nbytes = math.prod(dims) * inc.dtype.itemsize
    pipe = inc.pipeline()
    if pipe.opaque:  # the dataset's own opaque filters (HDF5 view): HDF5 decodes them to validate
        if dims != full or inc.dtype.str != stored_dtype(ds).str:
            raise NoCodec(f"a chunk under filter {', '.join(f.name for f in pipe.opaque)} must be a full "
                          f"chunk of the stored type")
        pipe = pipe.with_chunk(ds.type, full)
    dt = stored_dtype(ds)
    as_written = dims == full and _same_encoding(inc, stored, dt) and not stored.is_identity \
        and (stored.ids[-1] != ZSTD or zstd_has_content_size(data))
    try:
        if pipe.is_identity:
            raw = data
        else:  # bytes stored as written are only validated: decoded into scratch memory
            raw = pipe.check(data, nbytes) if as_written else pipe.decode(data, nbytes)
    except (CodecError, NoCodec):
        raise
    except Exception as exc:  # numcodecs raises plain RuntimeError/ValueError
        raise CodecError(f"chunk does not decode with {describe(inc)}: {exc}") from None
    if len(raw) != nbytes:
        raise InvalidInput(f"chunk decodes to {len(raw)} bytes; a {list(dims)} block of "
                           f"{inc.dtype.name} needs {nbytes}")
    if as_written:
        if stored.ids == (DEFLATE,):
            # zlib ignores bytes after a stream's end; stored, they would be served inside the
            # gzip member the Zarr and N5 views splice from the stream's last bytes
            if zlib.adler32(raw) != adler32_of_zlib(data):
                raise CodecError("deflate chunk does not end with its stream (bytes after it, or a wrong "
                                 "Adler-32)")
            if crc is not None:
                crc.append(zlib.crc32(raw))
        return data
    arr = np.frombuffer(raw, dtype=inc.dtype).reshape(dims)
    if dims != full:
        block = values.fill_array(ds.type, ds.fill_value, full)
        values.put(block, arr, tuple(slice(0, s) for s in dims))
        arr = block
    out = values.as_layout(arr, dt).tobytes()  # complex record fields: both parts
    if old is not None and stored.opaque:
        try:
            if stored.decode(old, len(out)) == out:
                return old
        except (CodecError, NoCodec):
            pass
    return stored.encode(out) if not stored.is_identity else out


def _unframed(ds: Dataset, stored: Pipeline, inc: Incoming, data: bytes, dims: tuple[int, ...],
              full: tuple[int, ...]) -> bytes:
    """A chunk of text (or of byte strings) in the writer's framing, stored as variable-length
    strings (sequences of bytes). Always decoded and encoded again: the stored encoding has no
    framing of its own to keep."""
    t = resolved(ds.type)
    if not ((isinstance(t, StringType) and t.is_vlen) or hdmf.is_byte_sequence(t)):
        raise UnsupportedType(f"variable-length chunks cannot be written into a dataset of {ds.type.to_json()}")
    if dims != full:
        raise InvalidInput(f"a chunk of text must be a whole {list(full)} chunk")
    pipe = inc.pipeline()
    try:
        raw = data if pipe.is_identity else pipe.decode(data)
    except (CodecError, NoCodec):
        raise
    except Exception as exc:  # noqa: BLE001 - numcodecs raises plain RuntimeError/ValueError
        raise CodecError(f"chunk does not decode with {describe(inc)}: {exc}") from None
    assert inc.unframe is not None
    body = inc.unframe(bytes(raw), math.prod(full))
    return stored.encode(body) if not stored.is_identity else body


def describe(inc: Incoming) -> str:
    names = {DEFLATE: "deflate", ZSTD: "zstd", BLOSC: "blosc", SHUFFLE: "shuffle"}
    return "+".join(names.get(f.id, str(f.id)) for f in inc.filters) or "no compression"


def zeros_unless_fill(ds: Dataset, stored: Pipeline) -> bytes | None:
    """The stored bytes of a chunk of zeros, when a chunk file removed in a view whose absent
    chunks read as zeros (N5) must become one: None when the fill value is zero bytes anyway
    (the chunk is deleted) or the type is not plain numbers."""
    if not ds.chunks or ds.type.numpy().subdtype is not None:
        return None
    dt = stored_dtype(ds)
    if dt.kind not in "biufc" or dt.fields is not None:
        return None
    if not np.asarray(values.fill_array(ds.type, ds.fill_value, ())).tobytes().strip(b"\0"):
        return None
    raw = bytes(math.prod(ds.chunks) * dt.itemsize)
    return stored.encode(raw) if not stored.is_identity else raw

