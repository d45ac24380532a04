"""Load, cache and write the model of a store.

The catalog is the only component that turns store objects into model
objects and back. It caches loaded domains, chunk indexes (one listing per
dataset), effective pipelines (one 16-byte sniff per dataset) and CRC tables,
and is safe to call from several worker threads.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Any, Iterable, Iterator, Protocol

import numpy as np

from ..codecs.pipeline import Pipeline, adler32_of_zlib, effective
from ..codecs.registry import DEFLATE
from ..codecs.sniff import HEAD_BYTES
from ..errors import AlreadyExists, NotFound, PolyfsError, PreconditionFailed, SchemaError
from ..store.recent import RecentVersions
from ..store.base import Store
from . import ids, keys
from . import indexcache
from .chunks import ChunkIndex, CrcTable, storage_grid
from .schema import Dataset, Datatype, Domain, Group
from .tree import DomainModel
from .types import DType

log = logging.getLogger(__name__)


def dumps(obj: Any) -> bytes:
    """JSON bodies as HSDS writes them (compact enough, NaN allowed)."""
    return json.dumps(obj, separators=(", ", ": ")).encode("utf-8")


class RewriteWatcher(Protocol):
    """What makes bytes from chunk objects and keeps them (the reader's cache of gzip trailers
    and transcoded chunks). While a chunk is rewritten, what is made from it may come from
    either version: it must not be kept, or the other version's bytes served beside it (a
    gzip member's new body with its old trailer) would be served again."""

    def rewriting(self, keys: set[str]) -> None: ...

    def rewritten(self, keys: set[str]) -> None: ...


class Catalog:
    def __init__(self, store: Store, fetch_threads: int = 8) -> None:
        self.store = store
        self.recent = RecentVersions()  # chunk versions the write side replaced, for open readers
        self._lock = threading.RLock()
        self._domains: dict[str, DomainModel] = {}
        self._chunk_index: dict[str, ChunkIndex] = {}
        # dataset id -> bumped when its chunks change through polyfs or its index is dropped: a
        # listing that ran meanwhile may miss those chunks and is not cached (prefetch_chunk_indexes)
        self._index_gen: dict[str, int] = {}
        self._pipelines: dict[str, Pipeline] = {}
        self._crc: dict[str, CrcTable] = {}
        self._fetch_threads = fetch_threads
        self._dataset_domain: dict[str, str] = {}  # dataset id -> domain path (for invalidation)
        self._generations: dict[str, int] = {}  # domain path -> bumped whenever its files must be re-planned
        self._untrusted: set[str] = set()  # datasets whose persisted index proved stale
        # dataset id -> wall time of its last chunk change through this daemon: chunk writes date
        # no metadata object, but ``ls -l`` and ``rsync -a`` must see the files holding them change
        self._data_written: dict[str, float] = {}
        self._crc_locks: dict[str, threading.Lock] = {}  # dataset id -> serialises its CRC table's updates
        self._used: set[str] = set()  # domains whose files were asked for since the last refresh_used()
        self._refresh_due: dict[str, float] = {}  # domain -> when refresh_used() may re-read it again
        # A daemon watching the store (domain_ttl) sets these: a cached domain not re-read for
        # longer than ``stale_after`` (idle, so the watcher skipped it) is re-read before its
        # files are laid out again, or its first use after a change elsewhere (an import
        # --overwrite) would be served from the old model.
        self.stale_after: float | None = None
        self.stale_chunks_too = False  # the store is shared with other hosts (refresh_used's chunks_too)
        self._checked: dict[str, float] = {}  # domain -> when its cached model was last read or re-read
        self._rereading: set[str] = set()
        self.on_reread: Callable[[list[str]], None] | None = None  # told what such a re-read found changed
        # told the keys of chunks written or deleted through polyfs, before and after (caches of their bytes)
        self.rewrite_watchers: list[RewriteWatcher] = []
        # told the key prefixes of datasets whose chunks another writer may have rewritten (a
        # re-read found them changed, or re-lists them on a shared store): what was made from
        # their chunks (re-encoded views) must be made again
        self.dataset_listeners: list[Callable[[set[str]], None]] = []

    # -- JSON objects ------------------------------------------------------
    def get_json(self, key: str) -> Any:
        return _parse_json(key, self.store.get(key))

    def get_json_tagged(self, key: str) -> tuple[Any, str]:
        """The parsed object and its version tag (for a later conditional write)."""
        data, tag = self.store.get_tagged(key)
        return _parse_json(key, data), tag

    def put_json(self, key: str, obj: Any) -> None:
        self.store.put(key, dumps(obj))

    # -- domains -----------------------------------------------------------
    def list_domains(self, include_folders: bool = False) -> list[str]:
        """Every domain path in the store (domains with a root group unless asked)."""
        if include_folders:
            return sorted(path for path, _ in self._domain_keys())
        return self.list_tree()[0]

    def list_tree(self) -> tuple[list[str], list[str]]:
        """The store's domains (with a root group) and its HSDS folders (a ``.domain.json``
        without one, what ``hstouch /a/b/`` or ``mkdir`` in a view makes), each sorted."""
        domains: list[str] = []
        folders: list[str] = []
        for path, _ in self._domain_keys():
            kind = self.domain_kind(path)
            if kind is not None:
                (domains if kind == "domain" else folders).append(path)
        return sorted(domains), sorted(folders)

    def domain_kind(self, path: str) -> str | None:
        """``"domain"`` (its ``.domain.json`` names a root group), ``"folder"`` (an HSDS folder:
        none), or None when nothing readable is there (gone meanwhile, or not an object)."""
        try:
            body = self.get_json(keys.domain_key(path))
        except (NotFound, SchemaError):
            return None
        if not isinstance(body, dict):
            return None
        return "domain" if body.get("root") else "folder"

    def _domain_keys(self) -> list[tuple[str, str]]:
        """(path, key) of every ``.domain.json`` in the store: a listing, nothing read."""
        out: list[tuple[str, str]] = []
        pending = [""]
        while pending:
            prefix = pending.pop()
            listing = self.store.list_dir(prefix)
            for obj in listing.objects:
                path = keys.domain_from_key(obj.key)
                if path is not None:
                    out.append((path, obj.key))
            for sub in listing.prefixes:
                if prefix == "" and sub in (keys.DB, keys.DERIVED):
                    continue
                pending.append(sub)
        return out

    def domain_exists(self, path: str) -> bool:
        return self.store.exists(keys.domain_key(path))

    def load(self, path: str, refresh: bool = False) -> DomainModel:
        """The whole object graph of a domain (cached)."""
        path = keys.normalize_domain(path)
        with self._lock:
            if not refresh and path in self._domains:
                return self._domains[path]
        t0 = time.monotonic()
        model = self._load(path)
        with self._lock:
            self._domains[path] = model
            self._checked[path] = t0
            for did in model.datasets:
                self._dataset_domain[did] = path
        return model

    def generation(self, path: str) -> int:
        """Changes whenever files of the domain laid out earlier may be wrong (re-plan them)."""
        path = keys.normalize_domain(path)
        now = time.monotonic()
        with self._lock:
            self._used.add(path)
            stale = self.stale_after is not None and path in self._domains and path not in self._rereading \
                and now - self._checked.get(path, now) > self.stale_after and now >= self._refresh_due.get(path, 0.0)
            if stale:
                self._rereading.add(path)
                cached = {path: self._domains[path]}
        if stale:
            try:
                changed = self._reread(cached, self.stale_chunks_too)
            finally:
                with self._lock:
                    self._rereading.discard(path)
            if changed and self.on_reread is not None:  # what the kernel holds of it goes too
                self.on_reread(changed)
        with self._lock:
            return self._generations.get(path, 0)

    def refresh_used(self, chunks_too: bool = False) -> list[str]:
        """Re-read the domains used since the last call and install what another writer
        (another daemon, another host) changed; returns their paths. A daemon calls this
        every ``domain_ttl`` seconds, so changes made elsewhere show within that time.
        ``chunks_too``: also forget the chunk listings of those domains (the store is
        shared with other hosts, which may have rewritten chunks without a metadata change)."""
        now = time.monotonic()
        with self._lock:
            # A domain whose re-read is slow (thousands of objects) is re-read less often:
            # never more than REFRESH_SHARE of the time, so watching costs little.
            due = {p for p in self._used if now >= self._refresh_due.get(p, 0.0)}
            self._used -= due
            cached = {p: self._domains[p] for p in due if p in self._domains}
        return self._reread(cached, chunks_too)

    def _reread(self, cached: dict[str, DomainModel], chunks_too: bool) -> list[str]:
        """Re-read these cached domains; install and return those another writer changed."""
        changed = []
        dropped: set[str] = set()
        for path, old in cached.items():
            t0 = time.monotonic()
            try:
                new = self._load(path)
            except NotFound:
                new = None
            except PolyfsError as exc:
                log.warning("cannot re-read domain %s: %s", path, exc)
                continue
            took = time.monotonic() - t0
            with self._lock:
                self._refresh_due[path] = time.monotonic() + took / REFRESH_SHARE
                self._checked[path] = t0
                if self._domains.get(path) is not old:
                    continue  # changed through this mount meanwhile: that model is newer
                if new is None:
                    self.invalidate(path)
                    self.touch(path)
                    changed.append(path)
                    continue
                if new.tags != old.tags:
                    for did in old.datasets:
                        key = keys.object_key(did)
                        if new.tags.get(key) != old.tags.get(key):
                            self.invalidate_dataset(did)
                            dropped.add(keys.dataset_prefix(did))
                    self.install(new)
                    changed.append(path)
                elif chunks_too and old.datasets:
                    for did in old.datasets:
                        self.invalidate_dataset(did)
                        dropped.add(keys.dataset_prefix(did))
                    self.touch(path)
        if dropped:
            with self._lock:
                listeners = list(self.dataset_listeners)
            for listener in listeners:
                listener(dropped)
        return changed

    def _load(self, path: str) -> DomainModel:
        """A consistent read: an object a link names that is missing may be one another
        writer is replacing right now (a reader racing a change): read the domain again."""
        for attempt in range(3):
            try:
                return self._load_once(path)
            except _Missing as exc:
                last = exc
                if attempt < 2:
                    time.sleep(0.05 * (attempt + 1))
        raise NotFound(str(last)) from None

    def _load_once(self, path: str) -> DomainModel:
        try:
            body, tag = self.get_json_tagged(keys.domain_key(path))
        except NotFound:
            raise NotFound(f"no domain {path} in {self.store.url}") from None
        domain = Domain.from_json(path, body)
        model = DomainModel(domain, tags={keys.domain_key(path): tag})
        if not domain.root:
            return model
        cache: dict[str, Any] = {}

        def fetch(obj_id: str) -> tuple[str, Any]:
            key = keys.object_key(obj_id)
            try:
                body, tag = self.get_json_tagged(key)
                model.tags[key] = tag
                return obj_id, body
            except NotFound:
                if ids.is_root(obj_id):
                    try:
                        return obj_id, self.get_json(keys.legacy_root_group_key(obj_id))
                    except NotFound:
                        pass
                raise _Missing(f"domain {path}: object {obj_id} is missing ({key})") from None

        def resolve(type_id: str) -> DType:
            if type_id not in model.datatypes:
                _, body = fetch(type_id)
                model.datatypes[type_id] = Datatype.from_json(body, resolve)
            return model.datatypes[type_id].type

        frontier = [domain.root]
        with ThreadPoolExecutor(self._fetch_threads) as pool:
            while frontier:
                parallel = len(frontier) > 1 and self.store.concurrent_fetches  # local reads: threads only cost
                bodies = list(pool.map(fetch, frontier)) if parallel else [fetch(f) for f in frontier]
                frontier = []
                for obj_id, body in bodies:
                    cache[obj_id] = body
                    kind = ids.kind_of(obj_id)
                    try:
                        if kind == "group":
                            g = Group.from_json(body, resolve)
                            model.groups[obj_id] = g
                            for link in g.links.values():
                                if link.kind == "hard" and link.id and link.id not in cache \
                                        and link.id not in frontier and _same_domain(link.id, domain.root):
                                    frontier.append(link.id)
                        elif kind == "dataset":
                            model.datasets[obj_id] = Dataset.from_json(body, resolve)
                        elif obj_id not in model.datatypes:
                            model.datatypes[obj_id] = Datatype.from_json(body, resolve)
                    except SchemaError as exc:
                        raise SchemaError(f"domain {path}: {exc}") from None
                    except (KeyError, TypeError, ValueError) as exc:
                        raise SchemaError(f"domain {path}: object {obj_id} is malformed ({exc})") from None
        self._load_unlinked_types(path, model, fetch, resolve)
        return model

    @staticmethod
    def _load_unlinked_types(path: str, model: DomainModel, fetch: Callable[[str], tuple[str, Any]],
                             resolve: Callable[[str], DType]) -> None:
        """Committed types no link reaches (a type whose link was deleted while a dataset or an
        attribute still uses it: HDF5's anonymous committed type) are named only inline, by the
        ``id`` in a type body: fetch them so views show them as committed types. One that is
        missing (a store from before they were kept) leaves the inline type as it is."""
        tried: set[str] = set()
        while True:
            wanted = sorted(tid for tid in model.committed_types_used() - set(model.datatypes) - tried
                            if _same_domain(tid, model.domain.root))
            if not wanted:
                return
            for tid in wanted:
                tried.add(tid)
                try:
                    _, body = fetch(tid)
                    model.datatypes[tid] = Datatype.from_json(body, resolve)
                except _Missing:
                    log.debug("domain %s: unlinked datatype %s is missing; its users keep the type inline",
                              path, tid)
                except SchemaError as exc:
                    raise SchemaError(f"domain {path}: {exc}") from None
                except (KeyError, TypeError, ValueError) as exc:
                    raise SchemaError(f"domain {path}: object {tid} is malformed ({exc})") from None

    def invalidate(self, path: str | None = None) -> None:
        with self._lock:
            if path is None:
                self._domains.clear()
                for did in self._chunk_index:
                    self._index_gen[did] = self._index_gen.get(did, 0) + 1
                self._chunk_index.clear()
                self._pipelines.clear()
                self._crc.clear()
            else:
                model = self._domains.pop(keys.normalize_domain(path), None)
                if model is not None:
                    for did in model.datasets:
                        self.invalidate_dataset(did)

    def invalidate_dataset(self, dataset_id: str) -> None:
        with self._lock:
            self._index_gen[dataset_id] = self._index_gen.get(dataset_id, 0) + 1
            self._chunk_index.pop(dataset_id, None)
            self._pipelines.pop(dataset_id, None)
            self._crc.pop(dataset_id, None)

    # -- chunks ------------------------------------------------------------
    def chunk_index(self, dataset: Dataset) -> ChunkIndex:
        """The dataset's existing chunks and their sizes, from one listing."""
        listings = 0
        while True:
            with self._lock:
                idx = self._chunk_index.get(dataset.id)
            if idx is not None:
                return idx
            built = self.prefetch_chunk_indexes([dataset])
            listings += dataset.id in built
            if listings >= LISTING_ATTEMPTS and dataset.id in built:
                return built[dataset.id]  # chunks kept changing while listed: this listing, uncached

    def prefetch_chunk_indexes(self, datasets: Iterable[Dataset]) -> dict[str, ChunkIndex]:
        """The chunk indexes of many datasets (returned, and cached): from persisted indexes
        still valid for their directory's token, else from one bulk store listing (then
        persisted when the store is writable and the directory held still). One whose chunks
        changed through polyfs while it was read is returned but not cached: the listing may
        have run before a chunk landed, whose ``chunks_updated`` found nothing to update."""
        with self._lock:
            todo = {keys.dataset_prefix(d.id): d for d in datasets if d.id not in self._chunk_index}
            gens = {d.id: self._index_gen.get(d.id, 0) for d in todo.values()}
        if not todo:
            return {}

        built: dict[str, ChunkIndex] = {}
        tokens = {p: self.store.dir_token(p) for p in todo}
        for p, d in todo.items():
            if tokens[p] is not None and d.id not in self._untrusted:
                idx = self._cached_index(d, p, tokens[p][0])
                if idx is not None:
                    built[d.id] = idx
        listed = {p: d for p, d in todo.items() if d.id not in built}
        if listed:
            started = indexcache.now()
            records = self.store.list_records(list(listed))
            by_rank: dict[int, list[tuple[str, Dataset]]] = {}
            for p, d in listed.items():
                by_rank.setdefault(len(storage_grid(d.grid)), []).append((p, d))
            for group in by_rank.values():  # one numpy parse per rank, not one per dataset
                blobs = [records.get(p, b"") for p, _ in group]
                for (p, d), idx in zip(group, ChunkIndex.many_from_records(
                        [(d.id, p, d.grid) for p, d in group], blobs)):
                    built[d.id] = idx
            if not self.store.read_only:
                for p, d in listed.items():
                    after = self.store.dir_token(p) if tokens[p] is not None else None
                    if indexcache.stable(tokens[p], after, started):
                        self._persist_index(built[d.id], tokens[p][0])
        with self._lock:
            for did, idx in built.items():
                if self._index_gen.get(did, 0) == gens[did]:
                    self._chunk_index.setdefault(did, idx)
        return built

    def _cached_index(self, d: Dataset, prefix: str, token: str) -> ChunkIndex | None:
        try:
            data = self.store.get(keys.chunk_index_key(d.id))
        except (NotFound, PolyfsError):
            return None
        return indexcache.decode(data, d.id, prefix, storage_grid(d.grid), token)

    def _persist_index(self, idx: ChunkIndex, token: str) -> None:
        try:
            self.store.put(keys.chunk_index_key(idx.dataset_id), indexcache.encode(idx, token))
        except PolyfsError as exc:  # derived data: failing to save it only costs time later
            log.warning("cannot save the chunk index of %s: %s", idx.dataset_id, exc)

    def persisted_index_state(self, dataset: Dataset) -> str:
        """What the loader would make of the dataset's persisted index (see indexcache):
        ``"none"``; ``"outdated"`` (not in force: ignored, listed afresh); ``"in force"``
        (used, and a real listing agrees); ``"stale"`` (used, but a real listing disagrees)."""
        prefix = keys.dataset_prefix(dataset.id)
        try:
            data = self.store.get(keys.chunk_index_key(dataset.id))
        except NotFound:
            return "none"
        token = self.store.dir_token(prefix)
        cached = indexcache.decode(data, dataset.id, prefix, storage_grid(dataset.grid), token.token) \
            if token is not None else None
        if cached is None:
            return "outdated"
        records = self.store.list_records([prefix]).get(prefix, b"")
        real = ChunkIndex.from_records(dataset.id, prefix, dataset.grid, records)
        same = np.array_equal(cached.linear, real.linear) and np.array_equal(cached.sizes, real.sizes)
        return "in force" if same else "stale"

    def save_chunk_index(self, dataset: Dataset, linear: np.ndarray, sizes: np.ndarray) -> None:
        """Persist an index its writer knows to be complete: a new dataset's chunks, once its
        ``.dataset.json`` is written too (the token is read after the last write into the
        directory) and before anything links it (see :func:`indexcache.writer_may_save`)."""
        prefix = keys.dataset_prefix(dataset.id)
        token = self.store.dir_token(prefix)
        if not indexcache.writer_may_save(token, indexcache.now()):
            return
        grid = storage_grid(dataset.grid)
        linear = np.asarray(linear, np.int64)
        coords = np.stack(np.unravel_index(linear, grid), axis=-1) if linear.size else np.zeros((0, len(grid)), np.int64)
        self._persist_index(ChunkIndex._build(dataset.id, prefix, grid, coords, np.asarray(sizes, np.int64)),
                            token.token)

    def chunk_changed(self, key: str) -> None:
        """A chunk is not what the listing said (rewritten behind our back): forget
        what was derived from the listing and have the domain's files re-planned."""
        did = keys.dataset_of_chunk_key(key)
        if did is None:
            return
        with self._lock:
            self._untrusted.add(did)
            path = self._dataset_domain.get(did)
            if path is not None:
                self._generations[path] = self._generations.get(path, 0) + 1
        self.invalidate_dataset(did)
        if not self.store.read_only:
            self.drop_persisted_index(did)

    def drop_persisted_index(self, dataset_id: str) -> None:
        """Delete a dataset's persisted index: its directory changed, or is about to. A store
        without directory tokens holds none in force: no request (one per chunk file written)."""
        if not self.store.has_dir_tokens:
            return
        try:
            self.store.delete(keys.chunk_index_key(dataset_id))
        except PolyfsError as exc:  # left behind, it is only outdated: its token moved
            log.warning("cannot drop the persisted chunk index of %s: %s", dataset_id, exc)

    def declared_pipeline(self, dataset: Dataset) -> Pipeline:
        p = Pipeline.from_json(dataset.filters, _filter_itemsize(dataset), where=f"dataset {dataset.id}")
        return p.with_chunk(dataset.type, dataset.chunks) if p.opaque else p  # opaque filters need both

    def pipeline(self, dataset: Dataset) -> Pipeline:
        """The filters the stored bytes really need (declared, corrected by a sniff)."""
        with self._lock:
            p = self._pipelines.get(dataset.id)
        if p is not None:
            return p
        declared = self.declared_pipeline(dataset)
        idx = self.chunk_index(dataset)
        first = idx.first()
        p = declared
        if first is not None and not declared.is_identity:
            size = idx.size_of(first)
            try:
                head = self.store.get_range(idx.key(first), 0, HEAD_BYTES)
                p = effective(declared, head, size)
            except NotFound:
                pass
        with self._lock:
            self._pipelines[dataset.id] = p
        return p

    def crc_table(self, dataset: Dataset) -> CrcTable:
        """The dataset's CRC32 table, keyed by linear index under its current grid."""
        grid = storage_grid(dataset.grid)
        with self._lock:
            t = self._crc.get(dataset.id)
        if t is not None and t.grid == grid:
            return t
        if t is not None:
            t = t.for_grid(grid)
        else:
            try:
                t = CrcTable.from_bytes(self.store.get(keys.crc_table_key(dataset.id)), grid)
            except NotFound:
                t = CrcTable.empty(grid)
        with self._lock:
            self._crc[dataset.id] = t
        return t

    def chunk_crc32(self, dataset: Dataset, linear: int, stream: bytes) -> int:
        """CRC32 of a deflate chunk's decoded bytes: from the table if it matches the
        stream's Adler-32, else by inflating (and remembered in memory)."""
        adler = adler32_of_zlib(stream)
        table = self.crc_table(dataset)
        crc = table.lookup(linear, adler)
        if crc is not None:
            return crc
        crc = zlib.crc32(zlib.decompress(stream))
        with self._lock:
            self._crc[dataset.id] = self.crc_table(dataset).merged([(linear, adler, crc)])
        return crc

    def save_crcs(self, dataset_id: str, items: Iterable[tuple[int, int, int]], keep_old: bool = False,
                  grid: tuple[int, ...] | None = None, removed: Iterable[int] = ()) -> None:
        """Persist ``(linear, adler32, crc32)`` entries for a deflate dataset (``keep_old``: beside
        the chunks' current entries, see :meth:`CrcTable.merged`) and drop those of the
        ``removed`` chunks (deleted); linear indexes count in ``grid`` (the dataset's storage
        grid; None only where the table's own is meant)."""
        items, removed = list(items), list(removed)
        if not items and not removed:
            return
        self._update_crcs(dataset_id, lambda current: current.without(removed).merged(items, keep_old=keep_old),
                          grid)

    def prune_crcs(self, dataset_id: str, present: Iterable[int], grid: tuple[int, ...] | None = None) -> None:
        """Drop the entries of chunks not in ``present`` (deleted chunks), and any outside ``grid``."""
        present = list(present)
        self._update_crcs(dataset_id, lambda current: current.only(present), grid, keep_beyond=False)

    def regrid_crcs(self, dataset_id: str, old_grid: tuple[int, ...], new_grid: tuple[int, ...]) -> None:
        """A resize: the table keyed under the new grid, entries of chunks outside it dropped
        (the chunks a shrink deletes; kept, they would come back with a later growth)."""
        old_grid, new_grid = storage_grid(old_grid), storage_grid(new_grid)
        self._update_crcs(dataset_id, lambda current: current.for_grid(new_grid), old_grid, keep_beyond=False)

    def _update_crcs(self, dataset_id: str, change: Callable[[CrcTable], CrcTable],
                     grid: tuple[int, ...] | None = None, keep_beyond: bool = True) -> None:
        """Read, change and write a CRC table as one step (keyed under ``grid``; entries outside
        it written back as they were unless not ``keep_beyond``: a writer whose model lags a
        growth another made keeps that one's entries). The shards of one array commit in
        parallel here, and other processes (``check --repair``, another daemon or host) may
        update the same table: a lock orders this process's updates, a conditional write
        the others' (a lost race reads the table again and re-applies the change)."""
        key = keys.crc_table_key(dataset_id)
        with self._lock:
            crc_lock = self._crc_locks.setdefault(dataset_id, threading.Lock())
        with crc_lock:
            for _ in range(50):
                try:
                    data, tag = self.store.get_tagged(key)
                    current: CrcTable = CrcTable.from_bytes(data, grid, keep_beyond)
                except NotFound:
                    current, tag = CrcTable.empty(grid), None
                table = change(current)
                if tag is None and not len(table):
                    break  # no table, and nothing to put in one
                try:
                    self.store.put_if(key, table.to_bytes(), tag)
                    break
                except PreconditionFailed:
                    time.sleep(0.01)
            else:
                raise PreconditionFailed(f"{key}: changed by other writers 50 times in a row")
            with self._lock:
                self._crc[dataset_id] = CrcTable(table.entries, table.grid)

    # -- writes ------------------------------------------------------------
    def put_domain(self, domain: Domain, new: bool = False) -> None:
        """``new``: only if no domain is there (another host may be making one): else AlreadyExists."""
        key = keys.domain_key(domain.path)
        if new:
            try:
                self.store.put_if(key, dumps(domain.to_json()), None)
            except PreconditionFailed:
                raise AlreadyExists(f"domain {domain.path} already exists in {self.store.url}") from None
        else:
            self.put_json(key, domain.to_json())
        self.invalidate(domain.path)

    def put_object(self, obj: Group | Dataset | Datatype) -> None:
        self.put_json(keys.object_key(obj.id), obj.to_json())

    def create_object(self, obj: Group | Dataset | Datatype) -> tuple[str, str]:
        """A new object's JSON, written only if its key is free; (key, tag). Already there
        as these very bytes (an earlier attempt, or the writer that stored its chunks, see
        ObjectsWriter), it is left alone: a dataset's directory, and so its index, stays."""
        key = keys.object_key(obj.id)
        data = dumps(obj.to_json())
        try:
            return key, self.store.put_if(key, data, None)
        except PreconditionFailed:  # ids are fresh UUIDs: only an earlier attempt of ours made it
            have, tag = self.store.get_tagged(key)
            if have == data:
                return key, tag
            tag = self.store.put_if(key, data, tag)
            if isinstance(obj, Dataset):
                self.drop_persisted_index(obj.id)
            return key, tag

    def check_current(self, model: DomainModel, obj_ids: Iterable[str]) -> None:
        """PreconditionFailed unless the store still holds each object at the version ``model``
        was loaded with: one versioned read each, for changes that rest on objects they do not
        rewrite (deleting a group another host may have filled meanwhile)."""
        for oid in obj_ids:
            key = keys.object_key(oid)
            try:
                _, tag = self.store.get_tagged(key)
            except NotFound:
                tag = None
            if tag != model.tags.get(key):
                raise PreconditionFailed(f"{key}: changed by another writer")

    def swap_object(self, model: DomainModel, obj: Group | Dataset | Datatype) -> tuple[str, str]:
        """A changed object's JSON, written only if the store still holds the version
        ``model`` was loaded with (PreconditionFailed if another writer changed it); (key, tag).
        A dataset's persisted chunk index goes with it: the write moved its directory's token."""
        key = keys.object_key(obj.id)
        tag = self.store.put_if(key, dumps(obj.to_json()), model.tags.get(key))
        if isinstance(obj, Dataset):
            self.drop_persisted_index(obj.id)
        return key, tag

    # -- changes made through the views (model/editor.py) ---------------------
    def dataset_modified(self, ds: Dataset) -> float | None:
        """When the files of ``ds`` last changed: its metadata, or its chunks through this daemon
        (chunk writes date no metadata object, but ``ls -l`` and ``rsync -a`` must see them)."""
        with self._lock:
            return max(ds.last_modified, self._data_written.get(ds.id, 0.0)) or None

    def domain_modified(self, model: DomainModel) -> float | None:
        """When a file showing the whole domain last changed: its newest object or chunk write."""
        with self._lock:
            t = max((max(o.last_modified, self._data_written.get(o.id, 0.0))
                     for o in (*model.groups.values(), *model.datasets.values(), *model.datatypes.values())),
                    default=0.0)
        return max(t, model.domain.last_modified) or None

    def touch(self, path: str) -> None:
        """Files of the domain laid out so far are out of date: have them re-planned."""
        path = keys.normalize_domain(path)
        with self._lock:
            self._generations[path] = self._generations.get(path, 0) + 1

    def install(self, model: DomainModel) -> None:
        """Replace the cached model of a domain by an edited copy (and re-plan its files)."""
        with self._lock:
            old = self._domains.get(model.path)
            self._domains[model.path] = model
            self._checked.setdefault(model.path, time.monotonic())
            for did in model.datasets:
                self._dataset_domain[did] = model.path
            if old is not None:
                for did, ds in old.datasets.items():
                    new = model.datasets.get(did)
                    if new is None or new.shape != ds.shape or new.chunks != ds.chunks or new.filters != ds.filters:
                        self.invalidate_dataset(did)
        self.touch(model.path)

    def chunks_updated(self, dataset: Dataset, sizes: dict[int, int], removed: Iterable[int] = ()) -> None:
        """Chunks written (linear -> stored size) or deleted through polyfs: update the
        cached index in place of a new listing."""
        removed = list(removed)
        with self._lock:
            self._index_gen[dataset.id] = self._index_gen.get(dataset.id, 0) + 1
            self._data_written[dataset.id] = time.time()
            idx = self._chunk_index.get(dataset.id)
            if idx is not None:
                self._chunk_index[dataset.id] = idx.updated(sizes, removed)
            if idx is None or not len(idx):  # the pipeline was settled without a chunk to sniff
                self._pipelines.pop(dataset.id, None)
            path = self._dataset_domain.get(dataset.id)
        if path is not None:
            self.touch(path)

    @contextmanager
    def rewriting(self, dataset: Dataset, linears: Iterable[int]) -> Iterator[None]:
        """Chunks (linear numbers) of ``dataset`` are rewritten or deleted in this block: the
        rewrite watchers keep nothing made from them until it is over (see RewriteWatcher)."""
        watchers = list(self.rewrite_watchers)
        keys_ = _chunk_keys(dataset, linears) if watchers else set()
        for w in watchers:
            w.rewriting(keys_)
        try:
            yield
        finally:
            for w in watchers:
                w.rewritten(keys_)


def _chunk_keys(dataset: Dataset, linears: Iterable[int]) -> set[str]:
    grid = dataset.grid or (1,)
    return {keys.chunk_key(dataset.id, tuple(int(c) for c in np.unravel_index(lin, grid))) for lin in linears}


LISTING_ATTEMPTS = 4  # listings of a dataset whose chunks keep changing meanwhile, before one is used uncached
REFRESH_SHARE = 0.05  # of the daemon's time at most spent re-reading domains other writers may change


class _Missing(NotFound):
    """An object a loaded link names is not in the store."""


def _parse_json(key: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SchemaError(f"{key}: not valid JSON ({type(exc).__name__}: {exc})") from None


def _same_domain(obj_id: str, root_id: str) -> bool:
    try:
        return ids.root_of(obj_id) == root_id
    except SchemaError:
        return False


def _filter_itemsize(dataset: Dataset) -> int:
    t = dataset.type
    if t.is_vlen:
        return 1
    return t.itemsize


def is_deflate(p: Pipeline) -> bool:
    return p.compressor is not None and p.compressor.id == DEFLATE
