"""Writes through any writable view, translated into store changes. No format knowledge.

The FUSE layer hands over flushed files (as :class:`~polyfs.writes.protocol.ByteSource`)
and directory operations; the view's ingester (its format package) says what
the bytes are; this module decides what they mean and commits them:

- a group's or array's metadata file: create or update a group or dataset
  (attributes diffed against what the view showed, a shape change is a resize,
  a dtype or chunk change is refused), one commit per file;
- a chunk file: canonical chunks (:mod:`chunkin`), every chunk validated
  before the store is touched, chunks whose bytes are the stored ones skipped
  without decoding, the rest converted in parallel;
- ``mkdir`` makes a group (a new ``<name><suffix>`` directory at the view root
  makes a domain), ``unlink`` of chunk files deletes chunks, ``rmdir`` of an
  emptied group or array deletes it.

A chunk file is merged, never blindly replaced: an inner chunk whose bytes
are a version a writer read before someone else replaced it is kept as the
newer version (a stale copy from a read-modify-write), and a chunk absent
from the new file is deleted only if it was already there when the writer
read the file. With the per-file lock this is what lets several processes
write disjoint regions of one shard without losing each other's chunks.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

from ..codecs.registry import DEFLATE
from ..errors import AlreadyExists, InvalidInput, NotEmpty, NotFound, NotPermitted, PolyfsError
from ..model.changes import ObjectChange
from ..model.editor import DomainEditor, group_hints, is_implicit
from ..model.schema import Dataset, Group
from ..model.tree import DomainModel
from ..views import hdmf
from ..views.base import ViewContext
from ..views.root import domain_leaf_paths, folder_conflict, folder_name_problem, folder_paths, view_conflict
from .arraycheck import check_same_array
from .attrs import attribute_change, recorded_dimension_names, typed_attributes
from .chunkin import to_stored, zeros_unless_fill
from .history import WriteHistory, digest, zlib_canonical
from .protocol import (ArrayWrite, ByteSource, DocumentIngester, GroupWrite, HeadCheck, Ingester, NameCheck,
                       ScratchNames, WrittenChunk, WrittenFile, file_members)
from ..parallel import THREADS, Occupancy, bounded_map
from .router import Router, Target

log = logging.getLogger(__name__)

ENCODE_THREADS = THREADS
DOCUMENT_BATCH = 64  # chunks of a document stored per put_many
BATCH_BYTES = 64 << 20  # converted chunk bytes held at once (a document's batch, a chunk file's)
DELETED_DIGESTS = 64  # chunks deleted at once whose versions are remembered (each costs a read)


@dataclass
class ChunkFile:
    """A chunk-holding file of one dataset: the chunks it covers (local number -> coords)."""

    domain: str
    ds: Dataset
    decl: ArrayWrite
    members: dict[int, tuple[int, ...]]
    lock_key: tuple


class WriteService:
    def __init__(self, ctx: ViewContext, router: Router) -> None:
        self.ctx = ctx
        self.catalog = ctx.catalog
        self.editor = DomainEditor(ctx.catalog)
        self.router = router
        self._ingesters: dict[str, Ingester] = {}
        # (writer process, view, dataset id) -> the array as that process declared it: its chunk
        # files are encoded as its own zarr.json said; every other process writes what the view shows
        self._declared: dict[tuple[int, str, str], ArrayWrite] = {}
        self._file_locks: dict[tuple, threading.Lock] = {}
        self._guard = threading.Lock()
        self.history = WriteHistory()  # per chunk: when written, by whom, which versions replaced
        self._pool = ThreadPoolExecutor(ENCODE_THREADS, thread_name_prefix="polyfs-encode")
        self._ingesting = Occupancy()  # chunk files being merged now
        self._shown: dict[tuple[str, str], tuple[tuple[Any, Any], ArrayWrite]] = {}  # view, dataset -> shown
        # called once a change is in the store, before it is time-stamped: whoever serves the
        # views re-resolves its nodes from then on (a reader looking a file up later must not
        # get the old directory, or its read-modify-write would drop the new chunks)
        self.on_change: Callable[[], None] = lambda: None

    # -- classification ----------------------------------------------------------------
    def route(self, path: str) -> Target:
        t = self.router.route(path)
        if t.domain is not None and t.model is not None and not t.rest and t.h5path != "/":
            parent, name = t.h5path.rsplit("/", 1)
            ing = self.ingester(t)
            if name and not _is_document(ing) and name == ing.meta_name:
                # a child named like the view's metadata file is not shown there (views/hdmf.py):
                # in that view the name is its group's own metadata file
                t.obj, t.h5path, t.rest = t.model.resolve(parent or "/"), parent or "/", [name]
        return t

    def ingester(self, t: Target) -> Ingester:
        got = self._ingesters.get(t.view.name)
        if got is None:
            got = self._ingesters.setdefault(t.view.name, t.view.ingester_factory()(self.ctx))
        return got

    def is_ingestible(self, path: str) -> bool:
        """True when a file at ``path`` would change the store on flush (else it is scratch)."""
        t = self.route(path)
        if _is_document(self.ingester(t)):
            if t.domain is None:  # a new whole-domain document (hdf5/<name>.h5)
                return self._new_document_domain(t) is not None
            return self.ingester(t).is_document(t)  # type: ignore[attr-defined]
        if t.domain is None or not t.rest:
            return False
        if t.rest == [self.ingester(t).meta_name]:
            return True
        if isinstance(t.obj, Dataset):
            # a chunk file's name, even outside the array's extent (refused at flush, not kept)
            try:
                return self.ingester(t).file_position(t.rest, self._declared_for(t, t.obj)) is not None
            except PolyfsError:
                return False
        return False

    def is_scratch(self, path: str) -> bool:
        """True when a new file at ``path``, above every domain, is a tool's temporary for a
        domain file beside it (see ``ScratchNames``): kept in memory like a lock file and
        stored only when renamed over that file."""
        t = self.route(path)
        ing = self.ingester(t)
        if t.domain is not None or not t.parts or not isinstance(ing, ScratchNames):
            return False
        stem = ing.scratch_for(t.parts[-1])
        return bool(stem) and self._new_document_domain(Target(t.view, t.parts[:-1] + [stem])) is not None

    def refused_name(self, path: str) -> str | None:
        """Why no file may be made at ``path`` (see ``NameCheck``; a new whole-domain document
        whose domain would hide another in a view), or None."""
        t = self.route(path)
        ing = self.ingester(t)
        if t.domain is None and _is_document(ing):
            dom = self._new_document_domain(t)
            return view_conflict(self.catalog, dom) if dom is not None else None
        return ing.refuse_name(t.rest) if isinstance(ing, NameCheck) and t.domain is not None and t.rest else None

    def head_check(self, path: str) -> Callable[[bytes], str | None] | None:
        """What refuses a file at ``path`` by its first bytes (see ``HeadCheck``), if anything."""
        ing = self.ingester(self.route(path))
        return ing.refuse_head if isinstance(ing, HeadCheck) else None

    def holds_chunks(self, path: str) -> bool:
        """True when the file at ``path`` is an array's chunk, shard or block file: emptied,
        it stands for deleting the chunks it held (metadata and whole-domain documents
        emptied are refused instead)."""
        t = self.route(path)
        if _is_document(self.ingester(t)) or t.domain is None or not t.rest or not isinstance(t.obj, Dataset):
            return False
        return t.rest != [self.ingester(t).meta_name] and self.is_ingestible(path)

    def is_metadata_file(self, path: str) -> bool:
        """True for a group's or array's metadata file (``zarr.json``, ``attributes.json``)."""
        t = self.route(path)
        if _is_document(self.ingester(t)) or t.domain is None or not t.rest:
            return False
        return t.rest[-1] == self.ingester(t).meta_name

    def _new_document_domain(self, t: Target) -> str | None:
        """The domain a new file at ``t`` (above every domain) would be, in a view of one file per domain."""
        return t.new_domain_path() if t.view.kind == "file" else None

    def view_prefixes(self, path: str) -> list[str]:
        """Where the domain of ``path`` appears in every view (for cache invalidation); above
        domains, where that directory (a folder) appears in every view."""
        t = self.route(path)
        if t.domain is None:
            return folder_paths("/" + "/".join(t.parts)) if t.parts else [path]
        return domain_leaf_paths(t.domain)

    # -- directories ---------------------------------------------------------------------
    def mkdir(self, path: str) -> None:
        t = self.route(path)
        if t.domain is None:
            dom = t.new_domain_path()
            if dom is None:
                self._make_folder(t, path)
                return
            if t.view.kind != "dir":  # a file view (hdf5/x.h5) makes no domain by mkdir
                raise NotPermitted(f"{path}: a domain is a file in {t.view.name}/: write it instead (a folder's "
                                   f"name cannot end in {t.suffix})")
            why = view_conflict(self.catalog, dom)
            if why:  # it would hide that domain (or itself) in another view; EEXIST is not logged
                log.warning("mkdir refused (EEXIST): %s: %s", path, why)
                raise AlreadyExists(f"{path}: {why}")
            model = self.editor.create_domain(dom)
            # its root is a group nobody wrote metadata for, like a group made by mkdir: views
            # that can show no metadata file for it don't, so ``cp -r x.zarr`` (O_EXCL) can make it
            self.editor.make_implicit(dom, model.domain.root)
            self.router.domains.refresh(force=True)
            return
        if not t.rest:
            raise AlreadyExists(path)
        if isinstance(t.obj, Group) and len(t.rest) == 1:
            self.editor.create_group(t.domain, t.child_path(t.rest[0]), implicit=True)
            return
        if isinstance(t.obj, Dataset):
            return  # chunk directories (c/0/...) exist as their files do: nothing to store
        raise NotPermitted(f"{path}: cannot create a directory here")

    def _make_folder(self, t: Target, path: str) -> None:
        """``mkdir`` above domains makes an HSDS folder (a ``.domain.json`` without a root), so
        ``mkdir -p run/1 && cp x.h5 run/1/`` and ``cp -r`` of a directory of arrays work as on
        a disk; the folder is a directory in every view, as HSDS's own folders are."""
        why = folder_name_problem(t.parts[-1])
        if why:
            raise NotPermitted(f"{path}: {why}; a new domain is <name>{t.suffix}")
        folder = "/" + "/".join(t.parts)
        clash = folder_conflict(self.catalog, folder)
        if clash:
            log.warning("mkdir refused (EEXIST): %s: %s", path, clash)
            raise AlreadyExists(f"{path}: {clash}")
        self.editor.create_folder(folder)
        self.router.domains.refresh(force=True)

    def _remove_folder(self, t: Target, path: str) -> None:
        """``rmdir`` above domains: only an empty directory goes (a folder object, if one is
        there, with it); one that held domains only is gone with its last domain already."""
        if not t.parts:
            raise NotPermitted(f"{path}: a view's directory cannot be removed")
        folder = "/" + "/".join(t.parts)
        # a listing of the store now (another host may have put a domain inside), nothing read
        if any(p.startswith(folder + "/") for p in self.catalog.list_domains(include_folders=True)):
            raise NotEmpty(path)
        if self.editor.delete_folder(folder):
            self.router.domains.refresh(force=True)

    def rmdir(self, path: str) -> None:
        t = self.route(path)
        if t.domain is None:
            self._remove_folder(t, path)
            return
        if t.rest:
            if isinstance(t.obj, Dataset):
                self._clear_zeroed(t, lambda: self._chunks_below(t), path)
            return  # an emptied chunk directory: nothing stored
        if t.h5path == "/":
            if t.model is not None and self._shown_links(t, t.model.root):
                raise NotEmpty(path)
            self.editor.delete_domain(t.domain)
            self.router.domains.refresh(force=True)
            return
        meta = self.ingester(t).meta_name
        if meta and (isinstance(t.obj, Dataset) or (isinstance(t.obj, Group) and not is_implicit(t.obj))):
            # its metadata file is listed in it, so not empty, as on a disk (obstore's cleanup of
            # empty parents, after zarr-python dropped fill-value chunks, took the array)
            raise NotEmpty(f"{path}: {meta} is still in it (rm -r unlinks it first)")
        if isinstance(t.obj, Group) and self._shown_links(t, t.obj):
            raise NotEmpty(path)
        if isinstance(t.obj, Dataset) and len(idx := self.catalog.chunk_index(t.obj)):
            self._clear_zeroed(t, lambda: [tuple(int(x) for x in c) for c in idx.coords_of(idx.linear)], path)
        self._forget(t.obj.id)
        self._keep_dimension_names(t)
        self.editor.delete(t.domain, t.h5path, recursive=isinstance(t.obj, Group))

    def _keep_dimension_names(self, t: Target) -> None:
        """Before a dimension scale is deleted (zarr-python ``del group["time"]``, ``rm -r``), the
        datasets attached to it record its name as ``_ARRAY_DIMENSIONS`` (hidden where their
        ``DIMENSION_LIST`` says it): deleted, a scale takes its name with it, and the views would
        show the dimension they keep as ``phony_dim_<n>`` (``hdmf.gone_scales``)."""
        if t.model is None or t.obj is None or t.domain is None:
            return
        doomed = {t.obj.id}
        if isinstance(t.obj, Group):  # a dataset (each one rm -r unlinks) needs no walk of the domain
            below = t.h5path.rstrip("/") + "/"
            doomed |= {e.obj.id for e in t.model.walk() if e.path.startswith(below)}
        if not any(("REFERENCE_LIST" in ds.attributes or "CLASS" in ds.attributes)
                   for ds in (t.model.datasets.get(i) for i in doomed) if ds is not None):
            return  # no scale among them (the common case: no walk of the domain's datasets)
        for oid, names in hdmf.dimension_records(t.model, doomed).items():
            self.editor.set_attributes(t.domain, oid, recorded_dimension_names(names))

    def _shown_links(self, t: Target, group: Group) -> set[str]:
        """The links of ``group`` the view shows: members it hides (netCDF dimensions without
        a variable in ``zarr/``) do not keep its directory from ``rmdir``; they go with it."""
        ing = self.ingester(t)
        hidden = () if _is_document(ing) else ing.hidden_members(t, group)
        return set(group.links) - set(hidden)

    def _clear_zeroed(self, t: Target, below: Callable[[], list[tuple[int, ...]]], path: str) -> None:
        """``rmdir`` of a directory holding the chunks ``below()``: NotEmpty unless each is a
        chunk of zeros an ``unlink`` stored in a view whose absent blocks are zeros (N5, fill
        value not zero: ``rm -r``), which then go with it."""
        ds = t.obj
        assert isinstance(ds, Dataset) and t.domain is not None
        coords = below()
        if not coords:
            return
        zero = zeros_unless_fill(ds, self.catalog.pipeline(ds)) if self.ingester(t).absent_is_zero else None
        idx = self.catalog.chunk_index(ds)
        if zero is None or any(self._stored(idx.key_of(c)) != zero for c in coords):
            raise NotEmpty(path)
        self._put_converted(t.domain, ds, [], coords, 0, versions=False)

    def _chunks_below(self, t: Target) -> list[tuple[int, ...]]:
        """The chunks a chunk directory (``c/0`` in Zarr, ``3/1`` in N5) still holds."""
        ds = t.obj
        assert isinstance(ds, Dataset)
        idx = self.catalog.chunk_index(ds)
        if not len(idx):
            return []
        coords = np.asarray(idx.coords_of(idx.linear)).reshape(len(idx), -1)
        try:
            decl = self._declared_for(t, ds)
        except PolyfsError:
            return [tuple(int(x) for x in c) for c in coords]
        fixed = self.ingester(t).dir_position(t.rest, decl)
        if fixed is None:
            return []
        want, direction = fixed
        files = coords // np.asarray(decl.per_file)
        if direction < 0:
            files = files[:, ::-1]
        sel = np.ones(len(files), dtype=bool)
        for i, p in enumerate(want):
            sel &= files[:, i] == p
        return [tuple(int(x) for x in c) for c in coords[sel]]

    def unlink(self, path: str, writer: int = 0) -> None:
        t = self.route(path)
        if t.domain is not None and _is_document(self.ingester(t)):
            self._unlink_document(t, self.ingester(t), path)  # type: ignore[arg-type]
            return
        if t.domain is None or not t.rest:
            raise NotPermitted(f"{path}: not a file of a domain")
        if t.rest == [self.ingester(t).meta_name]:
            self._unlink_metadata(t)
            return
        if not isinstance(t.obj, Dataset):
            raise NotFound(path)
        cf = self._chunk_file(t)
        if cf is None:
            raise NotFound(path)
        zero = zeros_unless_fill(cf.ds, self.catalog.pipeline(cf.ds)) if self.ingester(t).absent_is_zero else None
        with self._lock_for(cf.lock_key):
            if zero is not None:  # an N5 block removed is zeros, not the fill value
                self._put_converted(cf.domain, cf.ds, [(c, zero, None) for c in cf.members.values()], [], writer,
                                    versions=False)
                return
            idx = self.catalog.chunk_index(cf.ds)
            gone = [c for c in cf.members.values() if idx.size_of(idx.linear_of(c)) >= 0]
            self._put_converted(cf.domain, cf.ds, [], gone, writer, versions=False)  # rm -r reads nothing

    def _unlink_document(self, t: Target, ing: DocumentIngester, path: str) -> None:
        """``rm`` of a document deletes what it stands for: a whole domain (HDF5's file) or one
        dataset (a TIFF image)."""
        assert t.domain is not None
        h5path = ing.document_path(t)
        if h5path is None:
            raise NotFound(path)
        if h5path == "/":
            self.editor.delete_domain(t.domain)
            self.router.domains.refresh(force=True)
            return
        for p in [h5path, *ing.companion_paths(t)]:  # and what goes with it (a TIFF image's mask)
            obj = t.model.resolve(p) if t.model is not None else None
            if obj is not None:
                self._forget(obj.id)
            self.editor.delete(t.domain, p)

    def _unlink_metadata(self, t: Target) -> None:
        """Without its metadata an array is no array: the dataset and its chunks go and an
        empty directory stays; a group loses its attributes (and is hidden while empty)."""
        obj = t.obj
        if isinstance(obj, Dataset):
            self._forget(obj.id)
            with self.editor.lock(t.domain):
                self._keep_dimension_names(t)
                self.editor.delete(t.domain, t.h5path)
                self.editor.create_group(t.domain, t.h5path, implicit=True)
            return
        assert isinstance(obj, Group)
        self.editor.apply(t.domain, ObjectChange(obj.id, remove_attributes=list(obj.attributes),
                                                 implicit=True if t.h5path != "/" else None))

    # -- files ---------------------------------------------------------------------------
    def ingest(self, path: str, src: ByteSource, base_time: float, writer: int = 0,
               seen: set[str] | None = None) -> None:
        """Apply a whole file written at ``path`` by process ``writer``; ``base_time`` is when
        the writer first read it since it last wrote it (or opened it for writing), ``seen``
        the chunk objects it read there (None: it did not read the file)."""
        t = self.route(path)
        if _is_document(self.ingester(t)) and (t.domain is not None or self._new_document_domain(t)):
            self._document(t, self.ingester(t), src, path, writer, base_time)  # type: ignore[arg-type]
            return
        if t.domain is None or not t.rest:
            raise NotPermitted(f"{path}: only metadata and chunk files can be written here")
        ing = self.ingester(t)
        if t.rest == [ing.meta_name]:
            self._metadata(t, ing, ing.parse_metadata(src.read(0, src.size()), path), path, writer)
            return
        if not isinstance(t.obj, Dataset):
            raise NotPermitted(f"{path}: not a chunk file of an array")
        cf = self._chunk_file(t, writer=writer)
        if cf is None:
            raise NotPermitted(f"{path}: not a chunk file of {t.domain}:{t.h5path}")
        with self._lock_for(cf.lock_key), self._ingesting.enter() as fan_out:
            self._chunks(cf, ing, src, path, base_time, writer, seen, fan_out)

    def _document(self, t: Target, ing: DocumentIngester, src: WrittenFile, where: str,
                  writer: int = 0, base_time: float = float("inf")) -> None:
        """A whole document. Written from scratch where it stands for a whole domain: that domain,
        new or replaced, all or nothing. Else its changes, validated by the ingester, committed
        under the domain's lock: new objects (their chunks already stored, unreachable), then
        every changed object once (links that reach the new ones, extents before chunks land
        past them), then removed objects, the model installed once; then the chunks."""
        if not ing.is_document(t):
            raise NotPermitted(f"{where}: not a file of this view that can be written")
        dom = t.domain or t.new_domain_path()
        assert dom is not None
        with self.editor.lock(dom):
            # routed again under the lock: another writer may have committed since (a new file's
            # link goes into its group's whole link table; one made from the model as it was
            # before the lock dropped the links of files written beside it at the same time)
            t = self.route(where)
            if (t.domain or t.new_domain_path()) != dom:
                raise NotFound(f"{where}: its domain {dom} was removed or replaced meanwhile")
            if t.domain is None or (ing.replaces_domain(t) and not getattr(src, "based", True)):
                ing.new_document(t, src, where)
                self.router.domains.refresh(force=True)
                self.on_change()
                return
            changes = ing.document_changes(t, src, where)
            if changes.is_empty():
                return
            assert t.model is not None
            for change in changes.objects:  # a group a document changes is a group to every view now
                if change.obj_id in t.model.groups and change.implicit is None:
                    change.implicit = False
            try:
                created = changes.created.objects() if changes.created is not None else []
                if changes.created is not None:
                    changes.created.commit()
                self.editor.apply_many(t.domain, changes.objects, created, changes.removed)
            except BaseException:
                changes.abort()  # the new objects' chunks and JSON: nothing links them
                raise
            self.on_change()
            model = self.catalog.load(t.domain)
            for ds_id in set(changes.puts) | set(changes.deletes):
                self._document_chunks(t.domain, model.datasets[ds_id], changes.puts.get(ds_id, []),
                                      changes.deletes.get(ds_id, []), writer, base_time, where)

    def _document_chunks(self, domain: str, ds: Dataset, puts: list, deletes: list, writer: int = 0,
                         base_time: float = float("inf"), where: str = "") -> None:
        """A dataset's chunks in batches: each fetched (read, perhaps encoded) in the pool, then
        stored together; memory holds one batch, never the whole change. Stale copies are kept
        out as in shards (:meth:`_chunks`): a view file is written back in whole pages, so a chunk
        beside the one a tool changed is written too, as it was when the page was first filled;
        if another process replaced it since this writer opened the file, the newer one stays
        (h5py ``r+`` reverted a chunk zarr-python had just written). Each chunk replaced is
        remembered as for chunk files: a shard another process read before this write and writes
        back afterwards carries the version replaced here, which must not win either (h5py
        ``r+`` and zarr-python writing disjoint rows of one shard lost h5py's rows). A chunk
        the file lacks is deleted only if it was stored when the writer opened the file (or by
        the writer itself), as for chunk files: the file's chunk index is the one it opened, so
        every chunk another process added since (zarr-python filling another array of the
        domain while h5py ``r+`` held the file) was missing from it, and was deleted."""
        batch: list[tuple[tuple[int, ...], bytes]] = []
        crcs: dict[tuple[int, ...], int] = {}  # CRC32s validation already computed (no second inflate)
        replaced: dict[tuple[int, ...], bytes | None] = {}  # digests of the versions this batch replaces
        idx = self.catalog.chunk_index(ds)
        canon = self._canonical(ds)
        size = 0

        Fetched = tuple[tuple[int, ...], bytes, "int | None", "bytes | None"]  # coords, data, crc, replaced digest

        def fetch(item: tuple[tuple[int, ...], Any]) -> Fetched | None:
            coords = tuple(item[0])
            at_grid = coords if ds.grid else (0,)  # a dataset without chunks is one chunk, (0,)
            key = idx.key_of(at_grid)
            old = self._stored(key) if idx.size_of(idx.linear_of(at_grid)) >= 0 else None
            data = item[1]()
            if old is not None and canon(data) == canon(old):
                return None  # a page written back over a chunk as stored: were it stored, a chunk
                # file merged meanwhile (tensorstore through n5/) would be reverted
            if self.history.is_stale_copy(key, canon(data), base_time, writer):  # (a deleted chunk's too)
                log.info("%s: chunk %s of %s is a stale copy of a replaced version; kept the newer one",
                         where, list(coords), ds.id)
                return None
            if old is not None:
                self.catalog.recent.keep(key, old)  # for readers whose layout still has it
            return coords, data, getattr(item[1], "crc32", None), None if old is None else digest(canon(old))

        def store(items: list, gone: list) -> None:
            self._put_converted(domain, ds, [(c, b, replaced.get(c)) for c, b in items], gone, writer, crcs,
                                at=lambda c: tuple(c) if ds.grid else (0,))  # no grid: one chunk, (0,)

        for got in bounded_map(self._pool, fetch, puts, ENCODE_THREADS * 2):
            if got is None:
                continue
            coords, data, crc, old = got
            batch.append((coords, data))
            replaced[coords] = old
            if crc is not None:
                crcs[coords] = crc
            size += len(data)
            if len(batch) >= DOCUMENT_BATCH or size >= BATCH_BYTES:
                store(batch, [])
                batch, crcs, replaced, size = [], {}, {}, 0
        deletes = self._seen_deletes(idx, deletes, writer, base_time, where, ds, grid=bool(ds.grid))
        if batch or deletes:
            store(batch, deletes)

    def _seen_deletes(self, idx: Any, deletes: list, writer: int, base_time: float, where: str, ds: Dataset,
                      grid: bool = True) -> list:
        """The chunks of ``deletes`` the writer could have seen: stored before ``base_time``, or
        by itself; the others (stored since by another process) stay, with one log line."""
        out, kept = [], []
        for coords in deletes:
            seen = self.history.seen_by(idx.key_of(tuple(coords) if grid else (0,)), base_time, writer)
            (out if seen else kept).append(coords)
        if kept:
            log.info("%s: kept chunks %s of %s that another process stored after this file was opened",
                     where, [list(c) for c in kept[:8]], ds.id)
        return out

    def _lock_for(self, key: tuple) -> threading.Lock:
        with self._guard:
            return self._file_locks.setdefault(key, threading.Lock())

    # -- metadata ------------------------------------------------------------------------
    def _metadata(self, t: Target, ing: Ingester, meta: GroupWrite | ArrayWrite, where: str, writer: int) -> None:
        obj = t.obj
        assert obj is not None and t.domain is not None
        if isinstance(meta, GroupWrite):
            if isinstance(obj, Dataset):
                raise InvalidInput(f"{where}: attributes of dataset {t.h5path} must keep its array metadata")
            change = attribute_change(obj, meta.attributes, ing.shown_attributes(t, obj))
            change.implicit = False
            old = group_hints(obj)
            hints = {**{k: v for k, v in old.items() if not k.startswith(ing.hint_prefix)}, **meta.hints}
            if hints != old:  # this view's hints as now declared; other views' are kept
                change.view_hints = hints
            self.editor.apply(t.domain, change)
            return
        if isinstance(obj, Group):
            ds = self._replace_group(t, where, meta)
            self._declare(writer, t, ds.id, meta)
            return
        assert isinstance(obj, Dataset)
        shown = functools.cache(lambda: self._view_shows(t, obj))  # built only if the stored one differs
        check_same_array(obj, meta, where, shown)
        written = dict(meta.attributes)
        names = meta.dimension_names
        if names and any(d is not None for d in names) and "_ARRAY_DIMENSIONS" not in written:
            written["_ARRAY_DIMENSIONS"] = [d or "" for d in names]  # kept as the dataset's attribute
        change = attribute_change(obj, written, ing.shown_attributes(t, obj))
        if meta.shape != obj.shape.array_shape and (shown() is None or meta.shape != shown().shape):
            change.resize = meta.shape
        old = obj.creation_properties.get("polyfs") or {}
        hints = {**{k: v for k, v in old.items() if not k.startswith(ing.hint_prefix)}, **meta.hints}
        if hints != old:  # this view's hints as now declared; other views' are kept
            change.view_hints = hints
        self.editor.apply(t.domain, change)
        self._declare(writer, t, obj.id, meta)

    def _view_shows(self, t: Target, ds: Dataset) -> ArrayWrite | None:
        """The array as the view shows it where that is not as stored (a netCDF variable
        shorter than its unlimited dimension, a scalar as one element in N5, array elements
        as trailing dimensions): written back unchanged, it is no change."""
        try:
            return self._declared_for(t, ds)
        except PolyfsError:
            return None

    def _replace_group(self, t: Target, where: str, meta: ArrayWrite) -> Dataset:
        """An array's metadata written into a group directory: the group becomes the array if
        it is empty or holds only that array's chunk directories made by ``mkdir`` (``cp -r``
        and rsync make ``c/0/...``, and write the chunk files in them, kept as scratch, before
        the array's metadata). The array is validated before anything changes; the group is
        checked under the domain's lock, on the domain as it is then."""
        assert isinstance(t.obj, Group) and t.domain is not None
        if t.h5path == "/":
            raise NotPermitted(f"{where}: the root of a domain is a group; create arrays inside it")
        attrs = typed_attributes(meta.attributes, meta.dimension_names)
        self.editor.check_dataset(meta.dtype, meta.shape, meta.chunks, meta.filters)
        with self.editor.lock(t.domain):
            model = self.editor.model(t.domain)
            group = model.resolve(t.h5path)
            if not isinstance(group, Group) or (group.links and not self._chunk_dirs_only(t, model, group, meta)):
                raise NotEmpty(f"{where}: group {t.h5path} has members; it cannot become an array")
            self.editor.delete(t.domain, t.h5path, recursive=bool(group.links))
            return self.editor.create_dataset(t.domain, t.h5path, meta.dtype, meta.shape, meta.chunks, meta.filters,
                                              meta.fill, attrs, meta.hints or None)

    def _chunk_dirs_only(self, t: Target, model: DomainModel, group: Group, meta: ArrayWrite) -> bool:
        """True when all below ``group`` is directories made by ``mkdir`` that are chunk
        directories of the array ``meta`` describes."""
        ing = self.ingester(t)

        def below(g: Group, rel: list[str]) -> bool:
            for name, link in g.links.items():
                child = model.get(link.id) if link.kind == "hard" and link.id else None
                if not isinstance(child, Group) or not is_implicit(child) or \
                        ing.dir_position([*rel, name], meta) is None or not below(child, [*rel, name]):
                    return False
            return True

        return below(group, [])

    # -- chunk files -----------------------------------------------------------------------
    def _declare(self, writer: int, t: Target, ds_id: str, meta: ArrayWrite) -> None:
        with self._guard:
            if len(self._declared) > 65536:
                self._declared.clear()  # a cache: without it, writers get what the view shows
            self._declared[(writer, t.view.name, ds_id)] = meta

    def _forget(self, ds_id: str) -> None:
        with self._guard:
            for key in [k for k in self._declared if k[2] == ds_id]:
                self._declared.pop(key, None)

    def _declared_for(self, t: Target, ds: Dataset, writer: int | None = None) -> ArrayWrite:
        got = self._declared.get((writer, t.view.name, ds.id)) if writer is not None else None
        if got is not None:
            return got
        # what the view shows depends on the model and the dataset's chunk index (its stored
        # pipeline is sniffed from a chunk): one parse per version of both, not one per file
        key = (t.view.name, ds.id)
        stamp = (t.model, self.catalog.chunk_index(ds))
        hit = self._shown.get(key)
        if hit is not None and hit[0][0] is stamp[0] and hit[0][1] is stamp[1]:
            return hit[1]
        shown = self.ingester(t).shown(t, ds)
        with self._guard:
            if len(self._shown) > 4096:
                self._shown.clear()
            self._shown[key] = (stamp, shown)
        return shown

    def _chunk_file(self, t: Target, probe: bool = False, writer: int | None = None) -> ChunkFile | None:
        ds = t.obj
        assert isinstance(ds, Dataset) and t.domain is not None
        try:
            decl = self._declared_for(t, ds, writer)
        except PolyfsError:
            if probe:
                return None
            raise
        pos = self.ingester(t).file_position(t.rest, decl)
        if pos is None:
            return None
        grid = ds.grid
        if any(p * k >= max(g, 1) for p, k, g in zip(pos, decl.per_file, grid)):
            if probe:
                return None
            raise InvalidInput(f"{t.view.name}/{'/'.join(t.parts)} ({t.domain}:{t.h5path}) lies outside "
                               f"the array's extent {list(ds.shape.array_shape)}")
        return ChunkFile(t.domain, ds, decl, file_members(pos, decl.per_file, grid), (ds.id, pos))

    def _chunks(self, cf: ChunkFile, ing: Ingester, src: ByteSource, where: str, base_time: float,
                writer: int, seen: set[str] | None, fan_out: bool = True) -> None:
        """Merge a chunk file into the store. Another process's changes made after this writer's
        ``base_time`` win over what it left untouched; its own earlier writes do not; a chunk it
        leaves out is deleted only if it saw it (when it read the file at all). ``fan_out``:
        its chunks are converted in worker threads (else here: other files' merges keep the
        cores busy). Every chunk is validated before the store is touched, but converted bytes
        are held only up to BATCH_BYTES: the others are converted again when stored, in batches
        (a shard of GiBs is never held whole)."""
        ds = cf.ds
        stored_pipe = self.catalog.pipeline(ds)
        idx = self.catalog.chunk_index(ds)
        canon = self._canonical(ds)

        def convert(w: WrittenChunk) -> tuple[tuple[int, ...], tuple[bytes, bytes | None] | None]:
            """(coords, (stored bytes, digest of the replaced version)), or (coords, None) when
            the chunk is unchanged or a stale copy of a version another writer replaced."""
            key = idx.key_of(w.coords)
            old = self._stored(key) if idx.size_of(idx.linear_of(w.coords)) >= 0 else None
            if old is not None and w.dims is None and w.data == old:
                return w.coords, None  # the bytes already stored: nothing to decode or write
            try:
                new = to_stored(ds, stored_pipe, cf.decl.incoming, w.data, w.dims, old=old)
            except PolyfsError as exc:
                raise type(exc)(f"{where}: chunk {list(w.coords)}: {exc}") from None
            if new == old or (old is not None and canon(new) == canon(old)):
                return w.coords, None  # (a deflate stream differing only in its header's level hint)
            if self.history.is_stale_copy(key, canon(new), base_time, writer):
                log.info("%s: chunk %s is a stale copy of a replaced version; kept the newer one",
                         where, list(w.coords))
                return w.coords, None
            if old is not None:
                self.catalog.recent.keep(key, old)  # for readers whose layout still has it
            return w.coords, (new, None if old is None else digest(canon(old)))

        def converted(members: dict[int, tuple[int, ...]]) -> Iterator[tuple[tuple[int, ...], Any]]:
            written = ing.chunks_in(src, cf.decl, members, where)
            if fan_out and len(members) > 1:
                return bounded_map(self._pool, convert, written, ENCODE_THREADS * 2)
            return map(convert, written)

        # validate and convert everything before the store is touched (shards: in parallel)
        present: set[tuple[int, ...]] = set()
        puts: list[tuple[tuple[int, ...], bytes, bytes | None]] = []
        again: dict[int, tuple[int, ...]] = {}  # converted again when stored: past BATCH_BYTES
        held = 0
        local_of = {coords: local for local, coords in cf.members.items()}
        for coords, r in converted(cf.members):
            present.add(coords)
            if r is None:
                continue
            if puts and held + len(r[0]) > BATCH_BYTES:
                again[local_of[coords]] = coords
            else:
                puts.append((coords, r[0], r[1]))
                held += len(r[0])
        deletes = []
        for coords in cf.members.values():
            if coords in present:
                continue
            key = idx.key_of(coords)
            if seen is not None and key not in seen:
                continue  # never shown to this writer: another's, newer than what it read
            if idx.size_of(idx.linear_of(coords)) >= 0 and self.history.seen_by(key, base_time, writer):
                deletes.append(coords)
        if not puts and not deletes:
            return
        if deletes:
            log.info("%s: deleting chunks %s absent from the file written by process %d (read at %.3f; "
                     "they were written at %s)", where, [list(c) for c in deletes], writer, base_time,
                     [self.history.written(idx.key_of(c)) for c in deletes])
        self._put_converted(cf.domain, ds, puts, deletes, writer)
        batch: list[tuple[tuple[int, ...], bytes, bytes | None]] = []
        held = 0
        for coords, r in converted(again) if again else ():
            if r is not None:
                batch.append((coords, r[0], r[1]))
                held += len(r[0])
            if held >= BATCH_BYTES:
                self._put_converted(cf.domain, ds, batch, [], writer)
                batch, held = [], 0
        if batch:
            self._put_converted(cf.domain, ds, batch, [], writer)
        self.on_change()

    def _put_converted(self, domain: str, ds: Dataset, puts: list[tuple[tuple[int, ...], bytes, bytes | None]],
                       deletes: list, writer: int, crcs: dict[tuple[int, ...], int] | None = None,
                       at: Callable[[Any], tuple[int, ...]] = tuple, versions: bool = True) -> None:
        """Store converted chunks (coords, bytes, digest of the version replaced) and delete
        others; remember when, and what they replaced (stale copies, see :meth:`_chunks`).
        ``at``: the coordinates of a chunk's key."""
        idx = self.catalog.chunk_index(ds)
        gone = self._deleted_versions(ds, idx, [at(c) for c in deletes]) if versions else {}
        replaced = [(idx.key_of(at(c)), old) for c, _, old in puts] + \
            [(key, gone.get(key)) for key in (idx.key_of(at(c)) for c in deletes)]
        # remembered before the store is touched too: another file's merge running meanwhile (h5py
        # r+ writing back a page that holds a stale copy of this chunk) must know the replaced
        # version as soon as the new one can be read, not only once this call returns
        before = time.time()
        for key, old in replaced:
            self.history.remember(key, before, old, writer)
        self.editor.put_chunks(domain, ds, [(c, b) for c, b, _ in puts], deletes, crcs=crcs)
        stamp = time.time()
        for key, old in replaced:
            self.history.remember(key, stamp, old, writer, was=before)

    def _deleted_versions(self, ds: Dataset, idx: Any, coords: list) -> dict[str, bytes]:
        """Digests of the stored versions of chunks about to be deleted (a few: each costs a
        read), remembered as replaced versions: a stale copy of one that a writer who read it
        before writes back later (h5py ``r+`` holding a page that held it) is left out, as for
        a replaced chunk, instead of bringing deleted data back."""
        if not coords or len(coords) > DELETED_DIGESTS:
            return {}
        canon = self._canonical(ds)
        out = {}
        for c in coords:
            key = idx.key_of(tuple(c))
            data = self._stored(key)
            if data is not None:
                out[key] = digest(canon(data))
                self.catalog.recent.keep(key, data)  # for readers whose layout still has it
        return out

    def _canonical(self, ds: Dataset) -> Callable[[bytes], bytes]:
        """How this dataset's stored chunks are compared: deflate streams without their
        header's level hint (:func:`zlib_canonical`), anything else as it is."""
        return zlib_canonical if self.catalog.pipeline(ds).ids[-1:] == (DEFLATE,) else _as_is

    def _stored(self, key: str) -> bytes | None:
        try:
            return self.catalog.store.get(key)
        except PolyfsError:
            return None


def _as_is(data: bytes) -> bytes:
    return data


def _is_document(ing: Any) -> bool:
    return bool(getattr(ing, "document", False))
