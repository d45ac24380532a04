"""Change an existing domain, one atomic store write at a time.

Writes through the views land here. Every change is made copy-on-write: the
changed object is copied, written to the store (an atomic put), and a new
:class:`DomainModel` holding it replaces the catalog's cached one, whose
generation moves so every view re-plans its files. Files laid out from the
old model keep reading the old, immutable objects until then.

Order keeps a crash harmless: a new object is written before the link that
makes it reachable (a crash leaves an unreachable object, which
``polyfs check --repair`` removes), and a link is removed before the object
it pointed at is deleted. Chunks are single objects, each put atomically, so
a crash leaves every chunk either old or new.
"""
from __future__ import annotations

import copy
import logging
import random
import threading
import time
import zlib
from typing import Any, Callable, Iterable, Sequence, TypeVar

import numpy as np

from ..codecs.pipeline import Pipeline, adler32_of_zlib
from ..codecs.registry import DEFLATE, Filter
from ..codecs.sniff import HEAD_BYTES, sniff
from ..errors import AlreadyExists, InvalidInput, NotFound, NotPermitted, PolyfsError, PreconditionFailed
from . import ids, keys, limits
from .catalog import Catalog
from .changes import ObjectChange
from .schema import Attribute, Dataset, Domain, Group, Link, Shape, UNLIMITED, now
from .tree import DomainModel, Obj
from .types import DType
from .writer import DomainWriter, delete_root

log = logging.getLogger(__name__)
T = TypeVar("T")
G = TypeVar("G", Group, Dataset)
# lost races in a row before the writer is told to try again (EAGAIN): at least this many, and
# for at least this long (a loaded machine re-reads a domain slowly while the other host's
# queued changes keep winning; each lost race is another writer's progress, not a livelock)
SWAP_ATTEMPTS = 12
SWAP_SECONDS = 30.0


class _Writes:
    """The JSON writes of one editor operation, each conditional: new objects only where
    their key is free, changed ones only where the store still holds the version the
    model was loaded with. On a lost race the operation is re-run on a fresh model; the
    new objects of the lost attempt stay (unreachable, ``check --repair`` removes them):
    on S3 a swap whose reply was lost may have landed, and deleting them could break a link."""

    def __init__(self, catalog: Catalog, model: DomainModel) -> None:
        self.catalog = catalog
        self.model = model
        self.tags: dict[str, str] = {}

    def create(self, obj: Obj) -> None:
        key, tag = self.catalog.create_object(obj)
        self.tags[key] = tag

    def swap(self, obj: Obj) -> None:
        key, tag = self.catalog.swap_object(self.model, obj)
        self.tags[key] = tag


class DomainEditor:
    """Model changes for the write path; safe to call from many worker threads."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.store = catalog.store
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()

    def lock(self, path: str) -> threading.RLock:
        """The lock serialising metadata changes of one domain."""
        path = keys.normalize_domain(path)
        with self._guard:
            return self._locks.setdefault(path, threading.RLock())

    def model(self, path: str) -> DomainModel:
        return self.catalog.load(path)

    # -- domains ------------------------------------------------------------
    def create_domain(self, path: str) -> DomainModel:
        """A new, empty domain (a root group and its ``.domain.json``)."""
        with self.lock(path):
            DomainWriter(self.catalog, path).commit()
            self.catalog.touch(path)
            return self.catalog.load(path)

    def delete_domain(self, path: str) -> None:
        """The domain's ``.domain.json`` first (it disappears at once), then its objects."""
        with self.lock(path):
            model = self.catalog.load(path)
            self.store.delete(keys.domain_key(path))
            self.catalog.invalidate(path)
            self.catalog.touch(path)
            if model.domain.root:
                delete_root(self.store, model.domain.root)

    def create_folder(self, path: str) -> None:
        """An HSDS folder: a ``.domain.json`` without a root group, what ``hstouch /a/b/``
        makes; AlreadyExists when a domain or folder is there (another host too)."""
        self.catalog.put_domain(Domain.new(path, None), new=True)

    def delete_folder(self, path: str) -> bool:
        """Remove folder ``path`` (nothing below it: the caller checked); False when there
        is no such folder (gone meanwhile). A domain at that path is never removed here."""
        with self.lock(path):
            kind = self.catalog.domain_kind(path)
            if kind is None:
                return False
            if kind != "folder":
                raise NotPermitted(f"{path}: a domain, not a folder")
            self.store.delete(keys.domain_key(path))
            self.catalog.invalidate(path)
            return True

    # -- objects ------------------------------------------------------------
    def _parent(self, model: DomainModel, h5path: str) -> tuple[Group, str]:
        parts = [p for p in h5path.split("/") if p]
        if not parts:
            raise InvalidInput(f"{model.path}: the root group cannot be created or removed")
        name = parts[-1]
        if name in (".", "..") or not name:
            raise InvalidInput(f"invalid name {name!r}")
        parent = model.resolve("/".join(parts[:-1]))
        if not isinstance(parent, Group):
            raise InvalidInput(f"{model.path}: {'/' + '/'.join(parts[:-1])} is not a group")
        return parent, name

    def _retrying(self, path: str, op: Callable[[], T]) -> T:
        """Run ``op`` under the domain's lock; when another writer (another host, another
        daemon) changed an object it swaps, re-read the domain and run it again."""
        with self.lock(path):
            attempt, deadline = 0, time.monotonic() + SWAP_SECONDS
            while True:
                try:
                    return op()
                except PreconditionFailed as exc:
                    log.info("%s: changed by another writer (%s); re-reading and re-applying", path, exc)
                    self.catalog.invalidate(path)
                    self.catalog.touch(path)
                attempt += 1
                if attempt >= SWAP_ATTEMPTS and time.monotonic() >= deadline:
                    raise PreconditionFailed(f"{path}: changed by other writers {attempt} times in a row over "
                                             f"{SWAP_SECONDS:.0f} s; try again")
                time.sleep(random.uniform(0, min(0.5, 0.005 * 2 ** min(attempt, 10))))

    def _install(self, model: DomainModel, changed: Iterable[Obj], removed: Iterable[str] = (),
                 tags: dict[str, str] | None = None) -> DomainModel:
        """A new model with ``changed`` objects replaced or added and ``removed`` ids dropped;
        ``tags``: the versions just written."""
        new = DomainModel(model.domain, dict(model.groups), dict(model.datasets), dict(model.datatypes),
                          {**model.tags, **(tags or {})})
        for obj in changed:
            table = {"group": new.groups, "dataset": new.datasets, "datatype": new.datatypes}[ids.kind_of(obj.id)]
            table[obj.id] = obj
        for oid in removed:
            for table in (new.groups, new.datasets, new.datatypes):
                table.pop(oid, None)
            new.tags.pop(keys.object_key(oid), None)
        self.catalog.install(new)
        return new

    def _linked(self, parent: Group, name: str, link: Link | None) -> Group:
        g = copy.deepcopy(parent)
        if link is None:
            g.links.pop(name, None)
        else:
            g.links[name] = link
        g.last_modified = now()
        return g

    def _create_linked(self, path: str, h5path: str, make: Callable[[DomainModel, float], G]) -> G:
        """A new object ``make(model, time)`` written, then linked at ``h5path`` (first the
        object, then the link to it), under the domain's lock and retried on a lost swap."""
        mine: list[str] = []  # ids made by earlier attempts (on S3 one may have landed unacknowledged)

        def op() -> G:
            model = self.model(path)
            parent, name = self._parent(model, h5path)
            if name in parent.links:
                if parent.links[name].id in mine:
                    return model.get(parent.links[name].id)  # type: ignore[return-value]
                raise AlreadyExists(f"{model.path}:{h5path} already exists")
            t = now()
            obj = make(model, t)
            mine.append(obj.id)
            w = _Writes(self.catalog, model)
            w.create(obj)
            p = self._linked(parent, name, Link(name, "hard", id=obj.id, created=t))
            w.swap(p)
            self._install(model, [obj, p], tags=w.tags)
            return obj

        return self._retrying(path, op)

    def create_group(self, path: str, h5path: str, implicit: bool = False) -> Group:
        """``implicit``: made by ``mkdir`` alone; views that need metadata to call a
        directory a group (Zarr, N5) hide its metadata file while it stays empty."""
        def make(model: DomainModel, t: float) -> Group:
            g = Group(ids.new_id("g", model.domain.root), model.domain.root, created=t, last_modified=t)
            if implicit:
                g.extra["polyfs"] = {"implicit": True}
            return g

        return self._create_linked(path, h5path, make)

    def create_dataset(self, path: str, h5path: str, dtype: DType, dims: Sequence[int],
                       chunks: Sequence[int], filters: Sequence[Filter], fill_value: Any = None,
                       attributes: dict[str, Attribute] | None = None, view_hints: dict | None = None) -> Dataset:
        """A chunked dataset, resizable without limit along every dimension."""
        dims_ = tuple(int(d) for d in dims)
        chunks_ = tuple(int(c) for c in chunks)
        pipeline = self.check_dataset(dtype, dims_, chunks_, filters)
        props: dict[str, Any] = {"polyfs": dict(view_hints)} if view_hints else {}
        shape = Shape("simple", dims_, tuple(UNLIMITED for _ in dims_)) if dims_ else Shape("scalar")

        def make(model: DomainModel, t: float) -> Dataset:
            return Dataset(ids.new_id("d", model.domain.root), model.domain.root, dtype, shape,
                           chunks_ if dims_ else (), "H5D_CHUNKED" if dims_ else "H5D_CONTIGUOUS",
                           pipeline.to_json(), fill_value, dict(attributes or {}), props, t, t)

        return self._create_linked(path, h5path, make)

    @staticmethod
    def check_dataset(dtype: DType, dims: Sequence[int], chunks: Sequence[int], filters: Sequence[Filter]) -> Pipeline:
        """The pipeline of a dataset ``create_dataset`` would make; InvalidInput when it cannot."""
        dims, chunks = tuple(int(d) for d in dims), tuple(int(c) for c in chunks)
        if len(chunks) != len(dims) or any(c <= 0 for c in chunks) or any(d < 0 for d in dims):
            raise InvalidInput(f"chunk shape {list(chunks)} does not fit shape {list(dims)}")
        why = limits.extent_problem(dims, chunks) or limits.chunk_problem(chunks, 1 if dtype.is_vlen else dtype.itemsize)
        if why:
            raise InvalidInput(why)
        pipeline = Pipeline(tuple(filters), 1 if dtype.is_vlen else dtype.itemsize).with_chunk(dtype, chunks)
        pipeline._check()
        return pipeline

    def apply(self, path: str, change: ObjectChange) -> None:
        """Apply everything ``change`` asks of one object: validated first, then one JSON write,
        the chunks a shrink leaves outside deleted, and the model installed once."""
        self.apply_many(path, [change])

    def apply_many(self, path: str, changes: Sequence[ObjectChange], created: Sequence[Obj] = (),
                   removed: Sequence[str] = ()) -> None:
        """Several objects at once (a flushed HDF5 file): every change validated before any
        write; then the ``created`` objects' JSON (unreachable until a changed group links
        them), the changed objects (one JSON write each), the chunks shrinks leave outside, and
        the ``removed`` objects (no longer linked) deleted; the model installed once."""
        changes = [c for c in changes if not c.is_empty()]
        if not changes and not created and not removed:
            return
        def op() -> None:
            model = self.model(path)
            prepared = [p for p in (self._prepared(model, c) for c in changes) if p is not None]
            w = _Writes(self.catalog, model)
            for obj in created:
                w.create(obj)
            for obj, outside, resized in prepared:
                w.swap(obj)  # a dataset's persisted chunk index goes with its old JSON (Catalog.swap_object)
                for key in outside:
                    self.store.delete(key)
                if resized:
                    old = model.datasets[obj.id]
                    if old.grid != obj.grid:  # the CRC32 table keyed anew, the deleted chunks' entries out
                        self.catalog.regrid_crcs(obj.id, old.grid, obj.grid)
                    self.catalog.invalidate_dataset(obj.id)
            new = self._install(model, [*created, *(obj for obj, _, _ in prepared)], tags=w.tags)
            if removed:
                gone = [oid for oid in removed if oid in new.groups or oid in new.datasets or oid in new.datatypes]
                self._delete_objects(gone)
                self._install(new, [], gone)

        self._retrying(path, op)

    def _prepared(self, model: DomainModel, change: ObjectChange) -> tuple[Obj, list[str], bool] | None:
        """The changed copy of one object, the chunk keys its shrink leaves outside, whether it
        was resized; None if nothing changes. Validation only: nothing is written."""
        old = model.get(change.obj_id)
        obj = copy.deepcopy(old)
        changed = False
        outside: list[str] = []
        resized = False
        if change.resize is not None:
            if not isinstance(old, Dataset):
                raise InvalidInput(f"{model.path}: {change.obj_id} is not a dataset")
            resized = _resized(old, obj, tuple(int(d) for d in change.resize))
            changed |= resized
            outside = self._chunks_outside(old, obj) if resized else []
        if change.view_hints is not None and isinstance(obj, Dataset) and \
                obj.creation_properties.get("polyfs") != change.view_hints:
            obj.creation_properties["polyfs"] = dict(change.view_hints)
            changed = True
        if change.implicit is not None:
            changed |= _set_implicit(obj, change.implicit)
        if change.view_hints is not None and isinstance(obj, Group):
            changed |= _set_group_hints(obj, change.view_hints)
        if change.links is not None:
            if not isinstance(obj, Group):
                raise InvalidInput(f"{model.path}: {change.obj_id} is not a group")
            if {n: lk.to_json() for n, lk in obj.links.items()} != \
                    {n: lk.to_json() for n, lk in change.links.items()}:
                obj.links = dict(change.links)
                changed = True
        remove = [n for n in change.remove_attributes if n not in change.set_attributes]
        for name in remove:
            changed |= obj.attributes.pop(name, None) is not None
        for name, attr in change.set_attributes.items():
            have = obj.attributes.get(name)
            if have is None or have.to_json() != attr.to_json():
                obj.attributes[name] = attr
                changed = True
        if change.attribute_order is not None:
            order = [n for n in change.attribute_order if n in obj.attributes]
            order += [n for n in obj.attributes if n not in order]
            if order != list(obj.attributes):
                obj.attributes = {n: obj.attributes[n] for n in order}
                changed = True
        if not changed:
            return None
        obj.last_modified = now()
        return obj, outside, resized

    def set_attributes(self, path: str, obj_id: str, set_: dict[str, Attribute], remove: Iterable[str] = ()) -> None:
        """Add or replace ``set_`` and drop ``remove`` on one object (one JSON write)."""
        self.apply(path, ObjectChange(obj_id, dict(set_), list(remove)))

    def make_explicit(self, path: str, group_id: str) -> None:
        """A group's metadata was written: it is a group in every view from now on."""
        self.apply(path, ObjectChange(group_id, implicit=False))

    def make_implicit(self, path: str, group_id: str) -> None:
        """A group whose metadata file was removed: hidden by Zarr and N5 while it is empty."""
        self.apply(path, ObjectChange(group_id, implicit=True))

    def set_view_hints(self, path: str, ds_id: str, hints: dict) -> None:
        """Remember how a view presents a dataset (e.g. the Zarr shard shape a writer chose)."""
        self.apply(path, ObjectChange(ds_id, view_hints=hints))

    def resize(self, path: str, ds_id: str, dims: Sequence[int]) -> None:
        """A new extent within ``maxdims``; chunks wholly outside it are deleted."""
        self.apply(path, ObjectChange(ds_id, resize=tuple(int(d) for d in dims)))

    def _chunks_outside(self, old: Dataset, new: Dataset) -> list[str]:
        idx = self.catalog.chunk_index(old)
        if not len(idx):
            return []
        coords = np.asarray(idx.coords_of(idx.linear)).reshape(len(idx), -1)
        grid = np.asarray(new.grid, dtype=np.int64)
        out = ~(coords < grid).all(axis=1)
        return [idx.key(int(lin)) for lin in idx.linear[out]]

    def delete(self, path: str, h5path: str, recursive: bool = False) -> None:
        """Unlink ``h5path``; delete the object (and, for groups with ``recursive``,
        everything below) when no other link in the domain reaches it."""
        def op() -> None:
            model = self.model(path)
            parent, name = self._parent(model, h5path)
            link = parent.links.get(name)
            if link is None:
                raise NotFound(f"{model.path}:{h5path} not found")
            target = model.get(link.id) if link.kind == "hard" and link.id else None
            if isinstance(target, Group):
                # another host may have filled the group since this model was read: decide
                # on what the store holds, not on the cached links (else its arrays orphan)
                self.catalog.check_current(model, _subtree_groups(model, target))
            if isinstance(target, Group) and target.links and not recursive:
                from ..errors import NotEmpty
                raise NotEmpty(f"{model.path}:{h5path} is not empty")
            p = self._linked(parent, name, None)
            w = _Writes(self.catalog, model)
            w.swap(p)  # unreachable first, then deleted
            model = self._install(model, [p], tags=w.tags)
            if target is None:
                return
            reachable = set(model.canonical_paths())
            doomed = [oid for oid in _subtree(model, target) if oid not in reachable]
            self._delete_objects(doomed)
            self._install(model, [], doomed)

        self._retrying(path, op)

    def _delete_objects(self, doomed: Iterable[str]) -> None:
        """Objects nothing links any more: a dataset with its chunks and derived data."""
        for oid in doomed:
            if ids.kind_of(oid) == "dataset":
                self.store.delete_prefix(keys.dataset_prefix(oid))
                self._drop_derived(oid)
            else:
                self.store.delete(keys.object_key(oid))

    # -- chunks ---------------------------------------------------------------
    def put_chunks(self, path: str, ds: Dataset, items: Sequence[tuple[Sequence[int], bytes]],
                   deletes: Sequence[Sequence[int]] = (), crcs: dict[tuple[int, ...], int] | None = None) -> None:
        """Store encoded chunks as they are and delete others; keeps the CRC table
        of deflate datasets and the in-memory chunk index up to date. ``crcs``: CRC32s of
        chunks' inflated bytes the caller already knows (else each is inflated here)."""
        if not items and not deletes:
            return
        grid = ds.grid or (1,)
        for coords, _ in items:
            _check_coords(ds, coords)
        if self.store.read_only:
            from ..errors import ReadOnly
            raise ReadOnly(f"store {self.store.url} is read-only")
        self._drop_persisted_index(ds.id)  # before any chunk moves: no stale index survives a crash
        known, table = crcs or {}, []
        deflate = _deflate_last(self.catalog.declared_pipeline(ds))
        sizes: dict[int, int] = {}
        for coords, data in items:
            linear = int(np.ravel_multi_index(tuple(coords) if ds.grid else (0,), grid))
            sizes[linear] = len(data)
            if deflate and sniff(bytes(data[:HEAD_BYTES]), len(data)) != "blosc":  # HSDS's "gzip": blosc
                crc = known.get(tuple(int(c) for c in coords))  # frames, served as blosc: no gzip member
                table.append((linear, adler32_of_zlib(data), zlib.crc32(zlib.decompress(data)) if crc is None else crc))
        gone = [int(np.ravel_multi_index(tuple(coords) if ds.grid else (0,), grid)) for coords in deletes]
        with self.catalog.rewriting(ds, [*sizes, *gone]):  # readers keep nothing made meanwhile
            if table:  # the new entries beside the old ones first: a crash mid-way leaves a table for either
                self.catalog.save_crcs(ds.id, table, keep_old=True, grid=grid)
            self.store.put_many([(keys.chunk_key(ds.id, tuple(coords) if ds.grid else (0,)), data)
                                 for coords, data in items])
            for coords in deletes:
                self.store.delete(keys.chunk_key(ds.id, tuple(coords) if ds.grid else (0,)))
            if deflate:  # then the old entries replaced, and those of deleted chunks dropped
                self.catalog.save_crcs(ds.id, table, grid=grid, removed=gone)
            self.catalog.chunks_updated(ds, sizes, gone)

    def _drop_persisted_index(self, ds_id: str) -> None:
        self.catalog.drop_persisted_index(ds_id)

    def _drop_derived(self, ds_id: str) -> None:
        for key in (keys.chunk_index_key(ds_id), keys.crc_table_key(ds_id)):
            try:
                self.store.delete(key)
            except PolyfsError as exc:
                log.warning("cannot delete %s: %s", key, exc)


def _resized(old: Dataset, ds: Dataset, dims: tuple[int, ...]) -> bool:
    """Set ``ds``'s extent to ``dims`` (validated against ``old``); False if unchanged."""
    if old.shape.kind != "simple" or len(dims) != old.shape.rank:
        raise InvalidInput(f"dataset {old.id}: cannot change rank or reshape a scalar to {list(dims)}")
    if dims == old.shape.dims:
        return False
    why = limits.extent_problem(dims, old.chunks)
    if why:
        raise InvalidInput(f"dataset {old.id}: {why}")
    maxdims = old.shape.maxdims or old.shape.dims
    for d, m in zip(dims, maxdims):
        if d < 0 or (m is not UNLIMITED and d > m):
            raise InvalidInput(f"shape {list(dims)} exceeds the maximum shape "
                               f"{['unlimited' if m is None else m for m in maxdims]}")
    ds.shape = Shape("simple", dims, tuple(maxdims))  # a shrink keeps the limit it had (HDF5's)
    return True


def _set_implicit(obj: Obj, implicit: bool) -> bool:
    if not isinstance(obj, Group):
        raise InvalidInput(f"{obj.id} is not a group")
    flag = obj.extra.get("polyfs")
    flag = dict(flag) if isinstance(flag, dict) else {}
    if implicit:
        if flag.get("implicit") is True:
            return False
        obj.extra["polyfs"] = {**flag, "implicit": True}
        return True
    if not flag.get("implicit"):  # attributes set or not
        return False
    flag.pop("implicit")
    _put_group_flags(obj, flag)
    return True


def group_hints(g: Group) -> dict[str, Any]:
    """How views present a group (e.g. Zarr consolidated metadata a writer asked for); kept
    in the group's ``polyfs`` record beside the ``implicit`` flag (HSDS ignores the key)."""
    flag = g.extra.get("polyfs")
    return {k: v for k, v in flag.items() if k != "implicit"} if isinstance(flag, dict) else {}


def _set_group_hints(g: Group, hints: dict) -> bool:
    if group_hints(g) == hints:
        return False
    flag = g.extra.get("polyfs")
    implicit = {"implicit": True} if isinstance(flag, dict) and flag.get("implicit") else {}
    _put_group_flags(g, {**implicit, **hints})
    return True


def _put_group_flags(g: Group, flag: dict) -> None:
    if flag:
        g.extra["polyfs"] = flag
    else:
        g.extra.pop("polyfs", None)


def is_implicit(g: Group) -> bool:
    """A group made by ``mkdir`` (or a domain's root so made) that nobody has written metadata
    into, members or not: views that need metadata to call a directory a group (Zarr, N5) show
    none for it, as a local disk would not, so a copy (``cp -r`` creates each file with
    O_EXCL) can make it."""
    flag = g.extra.get("polyfs")
    return isinstance(flag, dict) and bool(flag.get("implicit")) and not g.attributes


def _check_coords(ds: Dataset, coords: Sequence[int]) -> None:
    grid = ds.grid or (1,)
    c = tuple(int(x) for x in coords) if ds.grid else (0,)
    if len(c) != len(grid) or any(not 0 <= x < g for x, g in zip(c, grid)):
        raise InvalidInput(f"chunk {list(c)} is outside the grid {list(grid)} of dataset {ds.id}")


def _deflate_last(p: Pipeline) -> bool:
    return bool(p.filters) and p.filters[-1].id == DEFLATE and p.compressor is not None


def _subtree_groups(model: DomainModel, obj: Obj) -> list[str]:
    """Ids of the groups among ``obj`` and everything below it."""
    return [oid for oid in _subtree(model, obj) if ids.kind_of(oid) == "group"]


def _subtree(model: DomainModel, obj: Obj) -> list[str]:
    """Ids of ``obj`` and everything reachable from it by hard links."""
    out, stack, seen = [], [obj], set()
    while stack:
        o = stack.pop()
        if o.id in seen:
            continue
        seen.add(o.id)
        out.append(o.id)
        if isinstance(o, Group):
            for link in o.links.values():
                if link.kind == "hard" and link.id:
                    try:
                        stack.append(model.get(link.id))
                    except NotFound:
                        pass
    return out
