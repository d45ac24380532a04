"""Writes through the Zarr and N5 views, translated into model changes.

The FUSE layer hands over whole files (at flush/fsync) and directory
operations; this module decides what they mean:

- ``zarr.json`` / ``attributes.json``: create or update a group or dataset
  (attributes typed from JSON, a shape change is a resize, a dtype or chunk
  change is refused);
- a Zarr chunk or shard file, an N5 block file: canonical chunks
  (:mod:`chunkin`), everything validated before the store is touched;
- ``mkdir`` makes a group (a new ``<name>.zarr``/``<name>.n5`` directory at
  the view root makes a domain), ``unlink`` of chunk files deletes chunks,
  ``rmdir`` of an emptied group or array deletes it.

A chunk file is merged, never blindly replaced: an inner chunk whose bytes
are the version a writer read before someone else replaced it is kept as the
newer version (a stale copy from a read-modify-write), and a chunk absent
from the new file is deleted only if it was already there when the writer
read the file. With the per-file lock this is what lets several processes
write disjoint regions of one shard without losing each other's chunks.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import (AlreadyExists, InvalidInput, NotEmpty, NotFound, NotPermitted, PolyfsError,
                      UnsupportedType)
from ..importers.common import json_attribute
from ..model.editor import DomainEditor
from ..model.schema import Attribute, Dataset, Group, now
from ..views import hdmf
from ..formats.n5 import view as n5view
from ..formats.zarr import view as zarr3
from ..views.base import ViewContext
from ..formats.n5 import ingest as n5meta
from ..formats.zarr import ingest as zarrmeta
from .chunkin import Incoming, stored_dtype, to_stored
from ..views.root import domain_stem
from .router import Router, Target

log = logging.getLogger(__name__)

HISTORY = 4096  # chunks whose superseded versions are remembered


@dataclass
class ChunkFile:
    """A chunk-holding file of one dataset: which chunks it covers and how they are encoded."""

    domain: str
    ds: Dataset
    members: list[tuple[int, ...]]  # chunk coords the file covers (inside the grid)
    lock_key: tuple


class WriteService:
    def __init__(self, ctx: ViewContext, router: Router) -> None:
        self.ctx = ctx
        self.catalog = ctx.catalog
        self.editor = DomainEditor(ctx.catalog)
        self.router = router
        self._declared: dict[str, Any] = {}  # dataset id -> ArrayMeta / N5Dataset a writer declared
        self._file_locks: dict[tuple, threading.Lock] = {}
        self._guard = threading.Lock()
        self._superseded: OrderedDict[str, list[tuple[bytes, float]]] = OrderedDict()
        self._written_at: OrderedDict[str, float] = OrderedDict()

    # -- classification ----------------------------------------------------------------
    def route(self, path: str) -> Target:
        return self.router.route(path)

    def is_ingestible(self, path: str) -> bool:
        """True when a file at ``path`` would change the store on flush (else it is scratch)."""
        t = self.route(path)
        if t.domain is None or not t.rest:
            return False
        meta = zarr3.META if t.view == "zarr" else n5view.META
        if t.rest == [meta]:
            return True
        if isinstance(t.obj, Dataset):
            return self._chunk_file(t, probe=True) is not None
        return False

    def view_prefixes(self, path: str) -> list[str]:
        """Where the domain of ``path`` appears in every view (for cache invalidation)."""
        t = self.route(path)
        if t.domain is None:
            return [path]
        stem = domain_stem(t.domain)
        out = []
        for view, suffix in (("zarr", ".zarr"), ("n5", ".n5"), ("hdf5", ".h5"), ("tiff", ""), ("polyglot", "")):
            out.append("/".join([view] + stem[:-1] + [stem[-1] + suffix]))
        return out

    # -- directories ---------------------------------------------------------------------
    def mkdir(self, path: str) -> None:
        t = self.route(path)
        if t.domain is None:
            dom = t.new_domain_path()
            if dom is None:
                raise NotPermitted(f"{path}: only <name>{t.suffix} directories (new domains) can be made here")
            self.editor.create_domain(dom)
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

    def rmdir(self, path: str) -> None:
        t = self.route(path)
        if t.domain is None:
            raise NotPermitted(f"{path}: not a domain, group or array directory")
        if t.rest:
            if isinstance(t.obj, Dataset) and self._has_chunks_below(t):
                raise NotEmpty(path)
            return  # an emptied chunk directory: nothing stored
        if t.h5path == "/":
            if t.model is not None and t.model.root.links:
                raise NotEmpty(path)
            self.editor.delete_domain(t.domain)
            self.router.domains.refresh(force=True)
            return
        if isinstance(t.obj, Group) and t.obj.links:
            raise NotEmpty(path)
        if isinstance(t.obj, Dataset) and len(self.catalog.chunk_index(t.obj)):
            raise NotEmpty(path)
        self._declared.pop(t.obj.id, None)
        self.editor.delete(t.domain, t.h5path)

    def _has_chunks_below(self, t: Target) -> bool:
        """Whether a chunk directory (``c/0`` in Zarr, ``3/1`` in N5) still holds a chunk file."""
        ds = t.obj
        assert isinstance(ds, Dataset)
        idx = self.catalog.chunk_index(ds)
        if not len(idx):
            return False
        try:
            decl = self._declared_for(t, ds)
        except PolyfsError:
            return True
        coords = np.asarray(idx.coords_of(idx.linear)).reshape(len(idx), -1)
        if t.view == "zarr":
            if t.rest[0] != "c" or decl.separator != "/":
                return False
            per = np.asarray(decl.per_shard if decl.sharded else (1,) * coords.shape[1])
            files = coords // per
            want = t.rest[1:]
        else:
            files = coords[:, ::-1]  # N5 paths list the fastest dimension first
            want = t.rest
        if not all(p.isdigit() for p in want) or len(want) > files.shape[1]:
            return False
        sel = np.ones(len(files), dtype=bool)
        for i, p in enumerate(want):
            sel &= files[:, i] == int(p)
        return bool(sel.any())

    def unlink(self, path: str) -> None:
        t = self.route(path)
        if t.domain is None or not t.rest:
            raise NotPermitted(f"{path}: not a file of a domain")
        meta = zarr3.META if t.view == "zarr" else n5view.META
        if t.rest == [meta]:
            self._unlink_metadata(t)
            return
        if not isinstance(t.obj, Dataset):
            raise NotFound(path)
        cf = self._chunk_file(t)
        if cf is None:
            raise NotFound(path)
        with self._lock_for(cf.lock_key):
            idx = self.catalog.chunk_index(cf.ds)
            gone = [c for c in cf.members if idx.size_of(idx.linear_of(c)) >= 0]
            self.editor.put_chunks(cf.domain, cf.ds, [], gone)

    def _unlink_metadata(self, t: Target) -> None:
        """Without its metadata an array is no array: the dataset and its chunks go and an
        empty directory stays; a group loses its attributes (and is hidden while empty)."""
        obj = t.obj
        if isinstance(obj, Dataset):
            self._declared.pop(obj.id, None)
            with self.editor.lock(t.domain):
                self.editor.delete(t.domain, t.h5path)
                self.editor.create_group(t.domain, t.h5path, implicit=True)
            return
        assert isinstance(obj, Group)
        if obj.attributes:
            self.editor.set_attributes(t.domain, obj.id, {}, list(obj.attributes))
        if t.h5path != "/":
            self.editor.make_implicit(t.domain, obj.id)

    # -- files ---------------------------------------------------------------------------
    def ingest(self, path: str, data: bytes, base_time: float) -> None:
        """Apply a whole file written at ``path``; ``base_time`` is when the writer last
        read it (or opened it for writing)."""
        t = self.route(path)
        if t.domain is None or not t.rest:
            raise NotPermitted(f"{path}: only metadata and chunk files can be written here")
        meta = zarr3.META if t.view == "zarr" else n5view.META
        if t.rest == [meta]:
            if t.view == "zarr":
                self._zarr_metadata(t, data, path)
            else:
                self._n5_attributes(t, data, path)
            return
        if not isinstance(t.obj, Dataset):
            raise NotPermitted(f"{path}: not a chunk file of an array")
        cf = self._chunk_file(t)
        if cf is None:
            raise NotPermitted(f"{path}: not a chunk file of {t.domain}:{t.h5path}")
        with self._lock_for(cf.lock_key):
            self._chunks(t, cf, data, path, base_time)

    def _lock_for(self, key: tuple) -> threading.Lock:
        with self._guard:
            return self._file_locks.setdefault(key, threading.Lock())

    # -- metadata ------------------------------------------------------------------------
    def _zarr_metadata(self, t: Target, data: bytes, where: str) -> None:
        meta = zarrmeta.parse(data, where)
        obj = t.obj
        if isinstance(meta, zarrmeta.GroupMeta):
            if isinstance(obj, Dataset):
                raise NotPermitted(f"{where}: {t.h5path} is an array; remove it before making a group there")
            self._set_attrs(t, obj, meta.attributes, self._shown_zarr_attrs(t, obj))
            self.editor.make_explicit(t.domain, obj.id)
            return
        if isinstance(obj, Group):
            ds = self._replace_group(t, where, lambda parent_path: self.editor.create_dataset(
                t.domain, parent_path, meta.dtype, meta.shape, meta.chunks, meta.filters, meta.fill,
                self._typed(meta.attributes, meta.dimension_names), self._zarr_hints(meta)))
            self._declared[ds.id] = meta
            return
        assert isinstance(obj, Dataset)
        self._check_same_array(obj, meta.dtype, meta.chunks, where)
        if meta.fill != obj.fill_value and not (meta.fill in (None, 0, 0.0) and obj.fill_value in (None, 0, 0.0)):
            raise InvalidInput(f"{where}: the fill value of an existing array cannot change "
                               f"({obj.fill_value!r} -> {meta.fill!r})")
        if meta.shape != obj.shape.array_shape:
            self.editor.resize(t.domain, obj.id, meta.shape)
        hints = self._zarr_hints(meta)
        if obj.creation_properties.get("polyfs") != hints:
            self.editor.set_view_hints(t.domain, obj.id, hints)
        self._set_attrs(t, obj, meta.attributes, self._shown_zarr_attrs(t, obj))
        self._declared[obj.id] = meta

    def _n5_attributes(self, t: Target, data: bytes, where: str) -> None:
        attrs = n5meta.load(data, where)
        obj = t.obj
        if not n5meta.is_dataset(attrs):
            if isinstance(obj, Dataset):
                # tools rewrite a dataset's attributes.json without the dataset keys only by mistake
                raise InvalidInput(f"{where}: attributes of dataset {t.h5path} must keep dimensions, "
                                   f"blockSize and dataType")
            self._set_attrs(t, obj, n5meta.user_attributes(attrs), self._shown_n5_attrs(t, obj))
            self.editor.make_explicit(t.domain, obj.id)
            return
        spec = n5meta.dataset(attrs, where)
        if isinstance(obj, Group):
            ds = self._replace_group(t, where, lambda parent_path: self.editor.create_dataset(
                t.domain, parent_path, spec.dtype, spec.shape, spec.block, spec.filters, None,
                self._typed(spec.attributes, None)))
            self._declared[ds.id] = spec
            return
        assert isinstance(obj, Dataset)
        self._check_same_array(obj, spec.dtype, spec.block, where)
        if spec.shape != obj.shape.array_shape:
            self.editor.resize(t.domain, obj.id, spec.shape)
        self._set_attrs(t, obj, spec.attributes, self._shown_n5_attrs(t, obj))
        self._declared[obj.id] = spec

    def _replace_group(self, t: Target, where: str, create) -> Dataset:
        """An array's metadata written into a group directory: the (empty) group becomes the array."""
        assert isinstance(t.obj, Group)
        if t.h5path == "/":
            raise NotPermitted(f"{where}: the root of a domain is a group; create arrays inside it")
        if t.obj.links:
            raise NotEmpty(f"{where}: group {t.h5path} has members; it cannot become an array")
        with self.editor.lock(t.domain):
            self.editor.delete(t.domain, t.h5path)
            return create(t.h5path)

    @staticmethod
    def _check_same_array(ds: Dataset, dtype, chunks: tuple[int, ...], where: str) -> None:
        have = stored_dtype(ds)
        want = dtype.numpy()
        if (have.kind, have.itemsize) != (want.kind, want.itemsize) and not (
                have.kind in "bu" and want.kind in "bu" and have.itemsize == want.itemsize == 1):
            raise InvalidInput(f"{where}: the data type of an existing array cannot change ({have} -> {want})")
        if tuple(chunks) != tuple(ds.chunks):
            raise InvalidInput(f"{where}: the chunk shape of an existing array cannot change "
                               f"({list(ds.chunks)} -> {list(chunks)})")

    @staticmethod
    def _zarr_hints(meta: zarrmeta.ArrayMeta) -> dict:
        if not meta.sharded:
            return {"zarr_sharded": False}
        return {"zarr_chunks_per_shard": list(meta.per_shard)}

    def _typed(self, attrs: dict[str, Any], dimension_names) -> dict[str, Attribute]:
        out = {}
        for name, value in attrs.items():
            if not name or name in hdmf.RESERVED:
                continue
            t, s, v = json_attribute(value)
            out[name] = Attribute(name, t, s, v, now())
        if dimension_names and any(d is not None for d in dimension_names) and "_ARRAY_DIMENSIONS" not in out:
            t, s, v = json_attribute([d or "" for d in dimension_names])
            out["_ARRAY_DIMENSIONS"] = Attribute("_ARRAY_DIMENSIONS", t, s, v, now())
        return out

    def _shown_zarr_attrs(self, t: Target, obj) -> dict[str, Any]:
        h = hdmf.Hierarchy(t.model, zarr3.SUFFIX)
        return hdmf.attributes_json(obj, h.paths, h.where(t.h5path), skip=hdmf.RESERVED)

    def _shown_n5_attrs(self, t: Target, obj) -> dict[str, Any]:
        h = hdmf.Hierarchy(t.model, n5view.SUFFIX)
        return hdmf.attributes_json(obj, h.paths, h.where(t.h5path), skip=n5view.SKIP_ATTRS)

    def _set_attrs(self, t: Target, obj, written: dict[str, Any], shown: dict[str, Any]) -> None:
        """Attributes as written: changed or new ones typed from JSON, shown ones left out removed
        (attributes the view does not show are kept)."""
        changed = {k: v for k, v in written.items() if k not in hdmf.RESERVED and shown.get(k, object()) != v}
        removed = [k for k in shown if k not in written]
        if changed or removed:
            self.editor.set_attributes(t.domain, obj.id, self._typed(changed, None), removed)

    # -- chunk files -----------------------------------------------------------------------
    def _declared_for(self, t: Target, ds: Dataset) -> Any:
        got = self._declared.get(ds.id)
        if got is not None and (t.view == "zarr") == isinstance(got, zarrmeta.ArrayMeta):
            return got
        where = f"{t.domain}:{t.h5path}"
        if t.view == "zarr":
            plan = zarr3.ZarrDomain(t.model, self.ctx).array_plan(ds, t.h5path)
            if plan is None:
                raise UnsupportedType(f"{where} is not shown in the Zarr view")
            return zarrmeta.parse(hdmf.dumps(plan.metadata()), where)
        plan = n5view.N5Domain(t.model, self.ctx).dataset_plan(ds, t.h5path)
        if plan is None:
            raise UnsupportedType(f"{where} is not shown in the N5 view")
        return n5meta.dataset(plan.metadata(), where)

    def _chunk_file(self, t: Target, probe: bool = False) -> ChunkFile | None:
        ds = t.obj
        assert isinstance(ds, Dataset)
        try:
            decl = self._declared_for(t, ds)
        except PolyfsError:
            if probe:
                return None
            raise
        grid = ds.grid
        if t.view == "zarr":
            pos = decl.file_position(t.rest)
            if pos is None:
                return None
            per = decl.per_shard if decl.sharded else (1,) * len(pos)
        else:
            rank = len(grid)
            if not all(p.isdigit() for p in t.rest):
                return None
            if len(t.rest) != rank:
                return None
            pos, per = tuple(int(p) for p in reversed(t.rest)), (1,) * rank
        if any(p * k >= max(g, 1) for p, k, g in zip(pos, per, grid)):
            if probe:
                return None
            raise InvalidInput(f"{'/'.join(t.rest)} lies outside the array's extent {list(ds.shape.array_shape)}")
        members = [tuple(p * k + i for p, k, i in zip(pos, per, local))
                   for local in np.ndindex(*per)]
        members = [m for m in members if all(c < g for c, g in zip(m, grid))]
        return ChunkFile(t.domain, ds, members, (ds.id, pos))

    def _chunks(self, t: Target, cf: ChunkFile, data: bytes, where: str, base_time: float) -> None:
        ds = cf.ds
        decl = self._declared_for(t, ds)
        stored_pipe = self.catalog.pipeline(ds)
        inc: Incoming = decl.incoming
        incoming: dict[tuple[int, ...], tuple[bytes, tuple[int, ...] | None]] = {}
        if t.view == "zarr":
            if decl.sharded:
                per = decl.per_shard
                parts = zarrmeta.split_shard(data, decl, where) if data else {}
                for local, blob in parts.items():
                    lc = np.unravel_index(local, per)
                    coords = tuple(int(cf.lock_key[1][i]) * per[i] + int(lc[i]) for i in range(len(per)))
                    if all(c < g for c, g in zip(coords, ds.grid)):
                        incoming[coords] = (blob, None)
            elif data:
                incoming[cf.members[0]] = (data, None)
        else:
            if data:
                dims, payload = n5meta.parse_block(data, len(ds.grid), tuple(ds.chunks), where)
                incoming[cf.members[0]] = (payload, dims)
        # validate and convert everything before the store is touched
        converted: dict[tuple[int, ...], bytes] = {}
        for coords, (blob, dims) in incoming.items():
            try:
                converted[coords] = to_stored(ds, stored_pipe, inc, blob, dims)
            except PolyfsError as exc:
                raise type(exc)(f"{where}: chunk {list(coords)}: {exc}") from None
        idx = self.catalog.chunk_index(ds)
        puts, deletes = [], []
        for coords in cf.members:
            key = idx.key_of(coords)
            exists = idx.size_of(idx.linear_of(coords)) >= 0
            new = converted.get(coords)
            if new is None:
                if exists and self._written_at.get(key, 0.0) <= base_time:
                    deletes.append(coords)
                continue
            old = None
            if exists:
                digest = self._digest(stored_pipe, new)
                old = self._old(stored_pipe, key)
                if old == digest:
                    continue
                if any(d == digest and at > base_time for d, at in self._superseded.get(key, ())):
                    log.info("%s: chunk %s is a stale copy of a replaced version; kept the newer one",
                             where, list(coords))
                    continue
            puts.append((coords, new, key, old))
        if not puts and not deletes:
            return
        if deletes:
            log.info("%s: deleting chunks %s absent from the written file (read at %.3f)", where,
                     [list(c) for c in deletes], base_time)
        self.editor.put_chunks(cf.domain, ds, [(c, b) for c, b, _, _ in puts], deletes)
        stamp = time.time()
        for _, _, key, old in puts:
            self._remember(key, stamp, old)
        for coords in deletes:
            self._remember(idx.key_of(coords), stamp, None)

    @staticmethod
    def _digest(pipe, stored: bytes) -> bytes:
        """Of the decoded bytes: two encodings of the same data are the same version."""
        raw = pipe.decode(stored, None) if not pipe.is_identity else stored
        return hashlib.blake2b(raw, digest_size=16).digest()

    def _old(self, pipe, key: str) -> bytes | None:
        try:
            return self._digest(pipe, self.catalog.store.get(key))
        except PolyfsError:
            return None

    def _remember(self, key: str, stamp: float, replaced: bytes | None) -> None:
        """``key`` was written at ``stamp``, replacing the version ``replaced``."""
        with self._guard:
            self._written_at[key] = stamp
            self._written_at.move_to_end(key)
            while len(self._written_at) > HISTORY * 4:
                self._written_at.popitem(last=False)
            if replaced is not None:
                hist = self._superseded.setdefault(key, [])
                hist.append((replaced, stamp))
                del hist[:-8]
                self._superseded.move_to_end(key)
                while len(self._superseded) > HISTORY:
                    self._superseded.popitem(last=False)
