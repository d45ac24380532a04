"""Dataset geometry the store and every view can hold, spelled once for every way in
(writes through any view, imports, resizes).

Extents and chunk counts are int64 in HSDS JSON, in numpy indexes and in chunk numbers;
a larger one is accepted by JSON and then fails every read. A chunk must be one the HDF5
view can describe, since every domain is also an HDF5 file: 32-bit chunk extents (the
layout message) and under 4 GiB (libhdf5 refuses larger chunks).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

MAX_EXTENT = 2**63 - 1
MAX_CHUNK_EXTENT = 2**32 - 1
MAX_CHUNK_BYTES = 2**32 - 1


def extent_problem(dims: Sequence[int], chunks: Sequence[int] | None) -> str | None:
    """Why ``dims`` (chunked by ``chunks``) cannot be held, or None."""
    if any(not 0 <= d <= MAX_EXTENT for d in dims):
        return f"shape {list(dims)}: every extent must lie in 0..2**63-1"
    if chunks and len(chunks) == len(dims) and all(c > 0 for c in chunks) and \
            math.prod(-(-d // c) for d, c in zip(dims, chunks)) > MAX_EXTENT:
        return f"shape {list(dims)} in chunks of {list(chunks)}: more chunks than can be counted (2**63-1)"
    return None


def chunk_problem(chunks: Sequence[int], itemsize: int) -> str | None:
    """Why a chunk of shape ``chunks`` cannot be held, or None."""
    if any(c > MAX_CHUNK_EXTENT for c in chunks):
        return f"chunk shape {list(chunks)}: every chunk extent must be below 2**32"
    if math.prod(chunks) * itemsize > MAX_CHUNK_BYTES:
        return f"chunk shape {list(chunks)} makes chunks of {math.prod(chunks) * itemsize} bytes (HDF5 holds " \
               f"chunks below 4 GiB)"
    return None
