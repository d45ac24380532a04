"""libhdf5 runs the filters outside the translation table, one chunk at a time.

Chunks under an opaque filter (LZF, LZ4, bitshuffle, szip, zfp, blosc2, ...)
are stored as the source file had them. Every view but HDF5 must decode
them; the library that knows every registered HDF5 filter is libhdf5 with
the filters h5py and hdf5plugin register, so this module asks it:

- decode: the chunk is wrapped in a one-chunk HDF5 file synthesized by this
  package (:class:`~.single.SingleDatasetFile`: the same filter pipeline
  message the HDF5 view serves, parameters exactly as stored) and read back
  through h5py. No dataset is *created*, so no filter's ``set_local``
  rewrites the parameters (bitshuffle's and SZ's do), and what a view decodes
  is exactly what an HDF5 reader of the HDF5 view gets.
- encode (writes through other views, chunks a source stored with a filter
  skipped): a dataset with the same pipeline is created in an in-memory file
  (core driver, no backing store), the chunk written and its bytes read with
  ``read_direct_chunk``; the result is accepted only if it decodes back to the
  same bytes with the stored parameters (lossy filters and ``set_local``
  disagreements are refused, never stored wrong).
"""
from __future__ import annotations

import io
import itertools
import os
import threading
from functools import lru_cache
from typing import Any

import numpy as np

from ...codecs.pipeline import Pipeline
from ...errors import CodecError, NoCodec, PolyfsError
from ...model import ids
from ...model import types as T
from ...model.schema import Dataset, Shape

_PLUGINS_REGISTERED = False
_SERIAL = itertools.count()
LZF = 32000  # h5py's LZF: an optional filter that HDF5 skips for a chunk it cannot shrink


def h5py_with_plugins() -> Any:
    """h5py, with hdf5plugin's filters registered in this process.

    ``import hdf5plugin`` skips filters HDF5 already finds, and with
    ``HDF5_PLUGIN_PATH`` set (for h5dump and friends) HDF5 finds hdf5plugin's
    shared objects and loads them against another libhdf5: their callbacks
    then fail ("error during user callback"). Registering with ``force``
    installs the in-process copies instead.
    """
    global _PLUGINS_REGISTERED
    import h5py

    if not _PLUGINS_REGISTERED:
        try:
            import hdf5plugin

            if os.environ.get("HDF5_PLUGIN_PATH"):
                hdf5plugin.register(force=True)
        except ImportError:  # pragma: no cover - only HDF5's own filters then
            pass
        except RuntimeError:  # a filter already in use by an open dataset stays as it is
            pass
        _PLUGINS_REGISTERED = True
    return h5py


def _numpy_type(dtype: T.DType) -> np.dtype | None:
    """The numpy dtype h5py maps to the stored HDF5 type, or None (vlen, references)."""
    if dtype.is_vlen or T.has_reference(dtype):
        return None
    try:
        return np.dtype(T.resolved(dtype).numpy())
    except (PolyfsError, TypeError, ValueError, AttributeError):
        return None


def why_not(pipe: Pipeline, encode: bool = False) -> str | None:
    """None when libhdf5 here codes ``pipe``'s chunks, else the reason."""
    if pipe.chunk is None or not pipe.chunk.chunks:
        return "the element type and chunk shape are unknown"
    if _numpy_type(pipe.chunk.dtype) is None:
        return "HDF5 filters are run here on fixed-size types only"
    h5z = h5py_with_plugins().h5z
    missing = [f for f in pipe.filters if not h5z.filter_avail(f.id)]
    if missing:
        return f"HDF5 here has no filter {', '.join(str(f.id) for f in missing)} (no plugin)"
    if encode:
        try:
            return _encode_probe(pipe.filters, pipe.itemsize, pipe.chunk.dtype, pipe.chunk.chunks)
        except TypeError:  # a type that cannot be hashed: probed uncached
            return _encode_probe.__wrapped__(pipe.filters, pipe.itemsize, pipe.chunk.dtype, pipe.chunk.chunks)
    return None


def coder(pipe: Pipeline) -> "ChunkCoder":
    """The (cached) coder of ``pipe``'s chunks."""
    assert pipe.chunk is not None
    try:
        return _coder(pipe.filters, pipe.itemsize, pipe.chunk.dtype, pipe.chunk.chunks)
    except TypeError:  # a type that cannot be hashed: not cached
        return ChunkCoder(pipe)


@lru_cache(maxsize=256)
def _coder(filters: tuple, itemsize: int, dtype: T.DType, chunks: tuple[int, ...]) -> "ChunkCoder":
    return ChunkCoder(Pipeline(filters, itemsize).with_chunk(dtype, chunks))


@lru_cache(maxsize=256)
def _encode_probe(filters: tuple, itemsize: int, dtype: T.DType, chunks: tuple[int, ...]) -> str | None:
    """Encode a chunk of ramp bytes and check it decodes back (lossy filters do not)."""
    c = ChunkCoder(Pipeline(filters, itemsize).with_chunk(dtype, chunks))
    raw = (np.arange(c.nbytes, dtype=np.uint32) % 251).astype(np.uint8).tobytes()
    try:
        c.encode(raw)
    except PolyfsError as exc:
        return str(exc)
    return None


class _MemoryFile:
    """An HDF5 file in memory only (core driver, no backing store), closed on exit."""

    def __enter__(self) -> Any:
        from h5py import h5f, h5p

        fapl = h5p.create(h5p.FILE_ACCESS)
        fapl.set_fapl_core(1 << 16, False)
        self.fid = h5f.create(f"polyfs-encode-{os.getpid()}-{next(_SERIAL)}".encode(), h5f.ACC_TRUNC, fapl=fapl)
        return self.fid

    def __exit__(self, *exc: object) -> None:
        self.fid.close()


class ChunkCoder:
    """Decode and encode the chunks of one (filters, type, chunk shape) through libhdf5."""

    def __init__(self, pipe: Pipeline) -> None:
        from .single import SingleDatasetFile

        assert pipe.chunk is not None
        self.pipe = pipe
        self.chunks = pipe.chunk.chunks
        self.np_type = _numpy_type(pipe.chunk.dtype)
        if self.np_type is None:
            raise NoCodec(f"filter {pipe.ids}: HDF5 filters are run here on fixed-size types only")
        self.nbytes = int(np.prod(self.chunks)) * pipe.chunk.dtype.itemsize
        root = ids.new_root_id()
        self.ds = Dataset(ids.new_id("d", root), root, pipe.chunk.dtype, Shape("simple", self.chunks), self.chunks,
                          "H5D_CHUNKED", pipe.to_json())
        self._file = SingleDatasetFile(self.ds, pipe, np.zeros(1, np.int64), name="c", attributes=False)
        self._lock = threading.Lock()  # render() reuses the file's B-tree
        self._user: list[tuple[int, ...]] | None = None

    def _image(self, data: bytes) -> bytes:
        f = self._file
        with self._lock:
            start = f.data_start
            meta = f.render(np.array([start]), np.array([len(data)]), start + len(data))
        return bytes(f.user_block) + meta + data

    def decode(self, data: bytes) -> bytes:
        h5py = h5py_with_plugins()
        from h5py import h5s

        out = np.empty(self.nbytes, np.uint8)
        try:
            with h5py.File(io.BytesIO(self._image(data)), "r") as f:
                dsid = f["c"].id
                dsid.read(h5s.ALL, h5s.ALL, out, mtype=dsid.get_type())
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            raise CodecError(f"HDF5 cannot decode a chunk with filter {', '.join(x.name for x in self.pipe.opaque)}:"
                             f" {' '.join(str(exc).split())}") from None
        return out.tobytes()

    def _user_parameters(self) -> list[tuple[int, ...]]:
        """Per filter, the parameters to set so that creating a dataset leaves the stored ones.

        A filter's ``set_local`` rewrites its parameters when a dataset is created
        (bitshuffle prepends its version and element size to what the user gave):
        the stored values, or the stored values without their first 1-3 entries,
        whichever the filter turns back into exactly the stored values. None fits:
        the stored values (the decode check then refuses a wrong encoding)."""
        if self._user is not None:
            return self._user
        from h5py import h5d, h5p, h5s, h5t

        out = []
        for x in self.pipe.filters:
            stored = tuple(int(c) for c in x.cd_values)
            chosen = stored
            for k in range(0, min(3, len(stored)) + 1):
                try:
                    with _MemoryFile() as fid:
                        dcpl = h5p.create(h5p.DATASET_CREATE)
                        dcpl.set_chunk(self.chunks)
                        dcpl.set_filter(x.id, 0, stored[k:])
                        dsid = h5d.create(fid, b"c", h5t.py_create(self.np_type), h5s.create_simple(self.chunks),
                                          dcpl=dcpl)
                        got = tuple(int(c) for c in dsid.get_create_plist().get_filter(0)[2])
                except (OSError, RuntimeError, ValueError, TypeError):
                    continue
                if got == stored:
                    chosen = stored[k:]
                    break
            out.append(chosen)
        self._user = out
        return out

    def encode(self, raw: bytes) -> bytes:
        """The stored bytes of one full chunk, checked by decoding them back."""
        if len(raw) != self.nbytes:
            raise CodecError(f"chunk of {len(raw)} bytes, expected {self.nbytes}")
        h5py = h5py_with_plugins()
        from h5py import h5d, h5p, h5s, h5t

        names = ", ".join(x.name for x in self.pipe.opaque)
        try:
            user = self._user_parameters()
            with _MemoryFile() as fid:
                dcpl = h5p.create(h5p.DATASET_CREATE)
                dcpl.set_chunk(self.chunks)
                for x, cd in zip(self.pipe.filters, user):
                    dcpl.set_filter(x.id, 1 if x.optional else 0, cd)
                tid = h5t.py_create(self.np_type)
                dsid = h5d.create(fid, b"c", tid, h5s.create_simple(self.chunks), dcpl=dcpl)
                arr = np.frombuffer(raw, dtype=self.np_type).reshape(self.chunks)
                dsid.write(h5s.ALL, h5s.ALL, np.ascontiguousarray(arr))
                mask, stored = dsid.read_direct_chunk((0,) * len(self.chunks))
        except (OSError, RuntimeError, ValueError, TypeError) as exc:
            raise NoCodec(f"HDF5 here cannot encode with filter {names}: {' '.join(str(exc).split())}") from None
        del h5py
        stored = bytes(stored)
        if mask:
            stored = self._apply_skipped(mask, stored, names)
        try:
            back = self.decode(stored)
        except CodecError as exc:
            raise NoCodec(f"filter {names} set up here encodes what the stored parameters do not "
                          f"decode: {exc}") from None
        if back != raw:
            raise NoCodec(f"filter {names} does not give back the bytes it encoded (lossy, or its "
                          f"parameters differ when set up here)")
        return stored

    def _apply_skipped(self, mask: int, stored: bytes, names: str) -> bytes:
        """The chunk with the filters HDF5 skipped applied after all.

        The store has no per-chunk filter mask (HSDS's schema has none): every chunk
        must carry the whole pipeline. An optional LZF filter is skipped for any chunk
        it cannot shrink (random or small data, as h5py writes it); an LZF stream of
        literal runs holds any bytes, and every LZF decoder reads it. Other skipped
        filters, or a skipped LZF followed by filters that ran, stay refused."""
        skipped = [i for i, _ in enumerate(self.pipe.filters) if mask >> i & 1]
        trailing = skipped == list(range(len(self.pipe.filters) - len(skipped), len(self.pipe.filters)))
        if not skipped or not trailing or any(self.pipe.filters[i].id != LZF for i in skipped):
            raise NoCodec(f"HDF5 here skipped filter {names} when encoding (filter mask {mask})")
        for _ in skipped:
            stored = lzf_literal(stored)
        return stored


def lzf_literal(data: bytes) -> bytes:
    """``data`` as an LZF stream of literal runs only (a control byte ``n - 1`` before each
    run of ``n`` <= 32 bytes): valid LZF for any input, 1/32 larger."""
    full, rest = divmod(len(data), 32)
    runs = np.empty((full, 33), np.uint8)
    runs[:, 0] = 31
    runs[:, 1:] = np.frombuffer(data, np.uint8, full * 32).reshape(full, 32)
    tail = bytes([rest - 1]) + data[full * 32:] if rest else b""
    return runs.tobytes() + tail
