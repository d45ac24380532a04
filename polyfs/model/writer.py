"""Create a new domain all-or-nothing.

Chunks are written as they come (they can be large); object JSON and CRC
tables at :meth:`DomainWriter.commit`; the ``.domain.json`` that makes the
domain visible is written last. A failure before that point deletes
everything written under the new domain's ``db/<uuid1>/`` prefix, so a failed
import leaves the store as it was (and a crash leaves only unreachable
objects, which ``polyfs check --repair`` removes).
"""
from __future__ import annotations

import itertools
import logging
import math
import threading
import zlib
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..codecs import vlen as vlen_codec
from ..codecs.pipeline import Pipeline, adler32_of_zlib
from ..codecs.registry import DEFLATE, Filter
from ..errors import AlreadyExists, InvalidInput
from . import ids, keys, limits, values
from .catalog import Catalog
from .chunks import storage_grid
from .schema import Attribute, Dataset, Datatype, Domain, Group, Link, Shape, now
from .types import DType

log = logging.getLogger(__name__)

_clock = threading.Lock()
_last_stamp = 0.0


def stamp() -> float:
    """``now()``, strictly increasing within this process: links and attributes made one
    after another keep their order (the HDF5 view's creation order) even when the clock
    does not move between two calls (its float has ~0.2 us steps) or steps back."""
    global _last_stamp
    with _clock:
        t = now()
        if t <= _last_stamp:
            t = math.nextafter(_last_stamp, math.inf)
        _last_stamp = t
        return t


class DomainWriter:
    def __init__(self, catalog: Catalog, path: str, owner: str = "admin", overwrite: bool = False) -> None:
        self.catalog = catalog
        self.store = catalog.store
        self.path = keys.normalize_domain(path)
        self.overwrite = overwrite
        if not overwrite and catalog.domain_exists(self.path):
            raise AlreadyExists(f"domain {self.path} already exists in {self.store.url}")
        self.root_id = ids.new_root_id()
        self.domain = Domain.new(self.path, self.root_id, owner)
        t = stamp()
        self.root = Group(self.root_id, self.root_id, created=t, last_modified=t)
        self.groups: dict[str, Group] = {self.root_id: self.root}
        self.datasets: dict[str, Dataset] = {}
        self.datatypes: dict[str, Datatype] = {}
        self._pipelines: dict[str, Pipeline] = {}
        self._crcs: dict[str, list[tuple[int, int, int]]] = {}
        self._written: dict[str, dict[int, int]] = {}  # dataset id -> {linear: stored size}
        self._committed = False
        self._touched = False

    # -- context manager: commit on success, roll back on error -----------
    def __enter__(self) -> "DomainWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if not self._committed:
                self.commit()
        else:
            self.abort()

    # -- objects -------------------------------------------------------------
    def _link(self, parent: Group, name: str, link: Link) -> None:
        if not name or "/" in name or name in (".", ".."):
            raise InvalidInput(f"invalid link name {name!r}")
        if name in parent.links:
            raise AlreadyExists(f"link {name!r} already exists")
        parent.links[name] = link

    def add_group(self, parent: Group | None, name: str | None) -> Group:
        t = stamp()
        g = Group(ids.new_id("g", self.root_id), self.root_id, created=t, last_modified=t)
        if parent is not None and name:
            self._link(parent, name, Link(name, "hard", id=g.id, created=t))
        self.groups[g.id] = g
        return g

    def add_datatype(self, parent: Group | None, name: str | None, dtype: DType) -> Datatype:
        t = stamp()
        ct = Datatype(ids.new_id("t", self.root_id), self.root_id, dtype, created=t, last_modified=t)
        if parent is not None and name:
            self._link(parent, name, Link(name, "hard", id=ct.id, created=t))
        self.datatypes[ct.id] = ct
        return ct

    def add_dataset(self, parent: Group | None, name: str | None, dtype: DType, shape: Shape,
                    chunks: Sequence[int] | None = None, filters: Sequence[Filter] | Pipeline = (),
                    fill_value: Any = None, layout_class: str = "H5D_CHUNKED",
                    creation_properties: dict | None = None) -> Dataset:
        """A dataset whose chunks will be encoded with ``filters`` (HDF5 write order)."""
        dims = shape.array_shape
        if chunks is None or not dims:
            chunks = tuple(max(1, d) for d in dims)
        chunks = tuple(int(c) for c in chunks)
        if len(chunks) != len(dims) or any(c <= 0 for c in chunks):
            raise InvalidInput(f"chunk shape {list(chunks)} does not fit shape {list(dims)}")
        why = limits.extent_problem(dims, chunks)
        if why:
            raise InvalidInput(why)
        if shape.maxdims is not None and layout_class != "H5D_CHUNKED":
            layout_class = "H5D_CHUNKED"
        itemsize = 1 if dtype.is_vlen else dtype.itemsize
        pipeline = filters if isinstance(filters, Pipeline) else Pipeline(tuple(filters), itemsize)
        pipeline._check()
        t = stamp()
        ds = Dataset(ids.new_id("d", self.root_id), self.root_id, dtype, shape, chunks, layout_class,
                     pipeline.to_json(), fill_value, {}, dict(creation_properties or {}), t, t)
        if parent is not None and name:
            self._link(parent, name, Link(name, "hard", id=ds.id, created=t))
        self.datasets[ds.id] = ds
        self._pipelines[ds.id] = pipeline.with_chunk(dtype, chunks)  # opaque filters need both
        return ds

    def link_hard(self, parent: Group, name: str, target: Group | Dataset | Datatype) -> None:
        self._link(parent, name, Link(name, "hard", id=target.id, created=stamp()))

    def link_soft(self, parent: Group, name: str, h5path: str) -> None:
        self._link(parent, name, Link(name, "soft", h5path=h5path, created=stamp()))

    def link_external(self, parent: Group, name: str, domain: str, h5path: str) -> None:
        self._link(parent, name, Link(name, "external", h5path=h5path, domain=domain, created=stamp()))

    def set_attr(self, obj: Group | Dataset | Datatype, name: str, dtype: DType, shape: Shape, value: Any) -> None:
        """An attribute from its JSON value."""
        obj.attributes[name] = Attribute(name, dtype, shape, value, stamp())

    def set_attr_array(self, obj: Group | Dataset | Datatype, name: str, dtype: DType, arr: Any,
                       scalar: bool | None = None) -> None:
        """An attribute from a numpy value (``scalar`` forces an H5S_SCALAR dataspace)."""
        arr = np.asarray(arr) if not isinstance(arr, np.ndarray) else arr
        is_scalar = arr.ndim == 0 if scalar is None else scalar
        shape = Shape("scalar") if is_scalar else Shape("simple", tuple(arr.shape))
        self.set_attr(obj, name, dtype, shape, values.from_numpy(dtype, arr.reshape(()) if is_scalar else arr))

    # -- chunks ----------------------------------------------------------------
    def pipeline(self, ds: Dataset) -> Pipeline:
        return self._pipelines[ds.id]

    def write_chunk(self, ds: Dataset, coords: Sequence[int], stored: bytes, crc32: int | None = None) -> None:
        """Store already-encoded chunk bytes as they are (zero recompression)."""
        grid = ds.grid or (1,)
        coords = tuple(int(c) for c in coords) if ds.grid else (0,)
        if len(coords) != len(grid) or any(not 0 <= c < g for c, g in zip(coords, grid)):
            raise InvalidInput(f"chunk {list(coords)} is outside the grid {list(grid)} of {ds.id}")
        self._touched = True
        self.store.put(keys.chunk_key(ds.id, coords), stored)
        self._written.setdefault(ds.id, {})[int(np.ravel_multi_index(coords, grid))] = len(stored)
        p = self._pipelines[ds.id]
        if p.compressor is not None and p.compressor.id == DEFLATE and p.filters[-1].id == DEFLATE:
            if crc32 is None:
                crc32 = zlib.crc32(zlib.decompress(stored))
            linear = int(np.ravel_multi_index(coords, grid))
            self._crcs.setdefault(ds.id, []).append((linear, adler32_of_zlib(stored), crc32))

    def staged_chunk_keys(self) -> Iterator[str]:
        """The keys of every chunk object written so far (unreachable until the commit)."""
        for ds_id, chunks in self._written.items():
            ds = self.datasets.get(ds_id)
            if ds is None:
                continue
            grid = tuple(ds.grid) or (1,)
            for linear in chunks:
                coords = tuple(int(c) for c in np.unravel_index(int(linear), grid)) if ds.grid else (0,)
                yield keys.chunk_key(ds_id, coords)

    def encode_chunk(self, ds: Dataset, block: np.ndarray) -> tuple[bytes, int | None]:
        """Encode one full-size chunk; returns (stored bytes, crc32 of raw if deflate)."""
        if ds.type.is_vlen:
            raw = vlen_codec.encode(ds.type, block)
        else:
            dt = ds.type.numpy()
            if dt.subdtype is not None:  # array types: numpy folds their dims into the shape
                dt = dt.subdtype[0]
            raw = values.as_layout(block, dt).tobytes()  # padded compounds: zero padding
        p = self._pipelines[ds.id]
        if p.filters and p.filters[-1].id == DEFLATE:
            # the CRC32 a spliced gzip member needs is that of the bytes entering the final
            # deflate (after shuffle, if any), not of the raw chunk
            inner = Pipeline(p.filters[:-1], p.itemsize, p.chunk).encode(raw) if len(p.filters) > 1 else raw
            return Pipeline(p.filters[-1:], p.itemsize).encode(inner), zlib.crc32(inner)
        return p.encode(raw), None

    def write_array(self, ds: Dataset, data: np.ndarray, skip_fill: bool = False, progress=None) -> int:
        """Chunk, pad (with the fill value), encode and store a whole array; returns chunks written."""
        dims = ds.shape.array_shape
        data = np.asarray(data)
        if tuple(data.shape) != tuple(dims):
            raise InvalidInput(f"array of shape {list(data.shape)} for dataset of shape {list(dims)}")
        written = 0
        for coords, block in iter_chunks(ds, data):
            if skip_fill and _all_fill(ds, block):
                if progress:
                    progress(1)
                continue
            stored, crc = self.encode_chunk(ds, block)
            self.write_chunk(ds, coords, stored, crc)
            written += 1
            if progress:
                progress(1)
        return written

    # -- commit / abort -------------------------------------------------------
    def commit(self) -> Domain:
        if self._committed:
            return self.domain
        try:
            for obj in itertools.chain(self.datatypes.values(), self.datasets.values(), self.groups.values()):
                self.catalog.put_object(obj)
            self._save_derived()
            self.catalog.put_domain(self.domain, new=not self.overwrite)  # last: makes the domain visible
        except BaseException:
            self.abort()
            raise
        self._committed = True
        return self.domain

    def _save_derived(self) -> None:
        """CRC tables, and the listing a first open would otherwise do: after every object's JSON
        (a chunk index is valid for its directory's token only if nothing is written there after
        it), before anything links the objects (no other writer can have written there)."""
        for did, items in self._crcs.items():
            self.catalog.save_crcs(did, items, grid=storage_grid(self.datasets[did].grid))
        for ds in self.datasets.values():
            written = self._written.get(ds.id, {})
            self.catalog.save_chunk_index(ds, np.fromiter(written.keys(), np.int64, len(written)),
                                          np.fromiter(written.values(), np.int64, len(written)))

    def abort(self) -> None:
        """Delete everything this writer put in the store."""
        if self._committed:
            return
        for prefix in (keys.domain_db_prefix(self.root_id), *keys.derived_prefixes(self.root_id)):
            _rollback(self.store.delete_prefix, prefix)


class ObjectsWriter(DomainWriter):
    """New objects for an *existing* domain (a writer made them in its HDF5 view).

    Chunks go to the store as they come, under the new datasets' own ids: nothing
    reaches them until a group links them, which the caller commits afterwards.
    :meth:`commit` stores their JSON, then their derived data (CRC tables, chunk indexes,
    each saved after the last write into its dataset's directory); the caller then writes
    the links that make them reachable (its creation of the same JSON leaves it alone,
    see :meth:`Catalog.create_object`). :meth:`abort` deletes only the new objects, never
    the domain they were meant for.
    """

    def __init__(self, catalog: Catalog, domain: Domain) -> None:
        super().__init__(catalog, domain.path, overwrite=True)
        self.root_id = domain.root
        self.domain = domain
        self.groups = {}
        self.root = None  # type: ignore[assignment]  # the root exists; new objects are linked by the caller

    def objects(self) -> list[Group | Dataset | Datatype]:
        return [*self.datatypes.values(), *self.datasets.values(), *self.groups.values()]

    def commit(self) -> Domain:
        try:
            for obj in self.objects():  # unreachable until the caller links them
                self.catalog.create_object(obj)
            self._save_derived()
        except BaseException:
            self.abort()
            raise
        return self.domain

    def abort(self) -> None:
        doomed = [keys.chunk_index_key(d) for d in self.datasets] + [keys.crc_table_key(d) for d in self.datasets]
        doomed += [keys.object_key(o.id) for o in [*self.groups.values(), *self.datatypes.values()]]
        for key in doomed:
            _rollback(self.store.delete, key)
        for did in self.datasets:
            _rollback(self.store.delete_prefix, keys.dataset_prefix(did))


def _rollback(delete: Any, key: str) -> None:
    try:
        delete(key)
    except Exception as exc:  # noqa: BLE001 - keep rolling back the rest
        log.error("rollback of %s failed: %s", key, exc)


def iter_chunks(ds: Dataset, data: np.ndarray) -> Iterable[tuple[tuple[int, ...], np.ndarray]]:
    """(grid coords, full-size chunk block padded with the fill value) in C order."""
    dims = ds.shape.array_shape
    if not dims:
        yield (0,), np.asarray(data).reshape(())
        return
    if any(d == 0 for d in dims):
        return
    fill = values.fill_array(ds.type, ds.fill_value, ds.chunks)
    for coords in itertools.product(*(range(g) for g in ds.grid)):
        sl = tuple(slice(c * n, min((c + 1) * n, d)) for c, n, d in zip(coords, ds.chunks, dims))
        part = data[sl]
        if part.shape == tuple(ds.chunks):
            yield coords, part
        else:
            block = fill.copy()
            values.put(block, part, tuple(slice(0, s) for s in part.shape))
            yield coords, block


def _all_fill(ds: Dataset, block: np.ndarray) -> bool:
    if block.dtype.kind == "O":
        return False
    fill = values.fill_array(ds.type, ds.fill_value, ())
    return bool(np.all(block == fill)) if block.dtype.names is None else block.tobytes() == fill.tobytes() * block.size


def chunk_count(ds: Dataset) -> int:
    return math.prod(ds.grid) if ds.grid else 1


def delete_root(store: Any, root_id: str, on_error: Callable[[str, Exception], None] | None = None) -> None:
    """Delete the objects of root ``root_id``, whose ``.domain.json`` is gone or names another
    root now: its root group first, so what a failure (or a crash) leaves behind is never
    taken by ``check --repair`` for a domain whose domain file was lost, named again rather
    than deleted. ``on_error(what, exc)``: go on with the rest after a failure (else raise)."""
    steps = [(keys.group_key(root_id), store.delete)]
    steps += [(prefix, store.delete_prefix) for prefix in (keys.domain_db_prefix(root_id),
                                                           *keys.derived_prefixes(root_id))]
    for what, delete in steps:
        try:
            delete(what)
        except Exception as exc:
            if on_error is None:
                raise
            on_error(what, exc)
