"""The polyglot view: each qualifying dataset's polyglot file (file.py) under three names.

``MNT/polyglot/<stem>/<dataset path>.tif`` and ``.h5`` are the same bytes;
``<dataset path>.zarr/`` is a Zarr v3 array (``zarr.json``) whose one shard
``c/0/0...`` (one ``0`` per dimension) is that same file again.

The Zarr array is one shard covering the whole array (shard shape = the
chunk grid times the chunk, i.e. the shape rounded up to whole chunks) with
the stored chunk as inner chunk, codecs ``bytes`` (stored byte order) then
``zstd`` if compressed; attributes and dimension names as the Zarr view
gives them (zarr3.py). Writes are not supported here (read-only names).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ...errors import PolyfsError, UnsupportedType
from ...model.schema import Dataset, Group
from ...model.tree import DomainModel
from ...vfile import VFile
from ...views import hdmf
from ...views.base import DirNode, FileNode, Node, ViewContext, literal_file
from ..zarr import spec
from ..zarr import view as zarr3
from ..zarr.spec import CHUNK_DIR, META
from .file import _candidate, shared_file, why_not

log = logging.getLogger(__name__)


# -- the Zarr array ---------------------------------------------------------------------------
@dataclass
class OneShardPlan(zarr3.ArrayPlan):
    """The Zarr view's array plan with one shard covering the whole chunk grid."""

    @cached_property
    def factors(self) -> tuple[int, ...]:
        return tuple(self.grid)

    @cached_property
    def spelling(self) -> spec.Spelling:
        """The view's own: this file is laid out for every reader, not for one Zarr writer."""
        return spec.DEFAULT_SPELLING

    @property
    def use_shards(self) -> bool:
        # Always one shard, whatever the Zarr view does: the layout hint an unsharded
        # writer left with the dataset (``zarr_sharded: false``) is about zarr/, not this file.
        return not self.is_scalar and not self.void_fill


def zarr_metadata(zdom: zarr3.ZarrDomain, ds: Dataset, path: str) -> dict[str, Any]:
    """``zarr.json`` of the polyglot array (the Zarr view's metadata, one whole-array shard)."""
    plan = zdom.array_plan(ds, path)
    if plan is None:
        raise UnsupportedType(f"{zdom.where(path)} has no Zarr form")
    whole = OneShardPlan(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.init})
    whole.sharded = True
    recipe, _ = whole.recipe_codecs
    if recipe.mode != "stored" or recipe.head or not whole.use_shards:
        raise UnsupportedType(f"{zdom.where(path)}: the Zarr view does not serve its chunks as stored")
    return whole.metadata()


# -- the view tree ------------------------------------------------------------------------------
class _DatasetFiles:
    """The three names of one dataset, built lazily around one shared plan."""

    def __init__(self, model: DomainModel, ds: Dataset, parent: Group | None, path: str, ctx: ViewContext,
                 zdom: "_LazyZarrDomain") -> None:
        self.model, self.ds, self.parent, self.path, self.ctx, self.zdom = model, ds, parent, path, ctx, zdom
        self.mtime = ctx.catalog.dataset_modified(ds) or ds.created or None

    def vfile(self) -> VFile:
        pf = shared_file(self.model, self.ds, self.parent, self.path, self.ctx)
        if pf is None:  # qualified when listed; its chunks changed since
            raise UnsupportedType(f"{self.model.path}:{self.path} is no longer a polyglot dataset")
        return pf.vfile

    def nodes(self, stem: str) -> dict[str, Node]:
        return {stem + ".tif": FileNode(stem + ".tif", self.vfile, self.mtime),
                stem + ".h5": FileNode(stem + ".h5", self.vfile, self.mtime),
                stem + ".zarr": DirNode(stem + ".zarr", self._zarr_entries, self.mtime)}

    def _zarr_entries(self) -> dict[str, Node]:
        meta = zarr_metadata(self.zdom.get(), self.ds, self.path)
        node: Node = FileNode("0", self.vfile, self.mtime)
        for _ in range(self.ds.rank - 1):
            node = DirNode("0", {"0": node}, self.mtime)
        return {META: literal_file(META, hdmf.dumps(meta), self.mtime),
                CHUNK_DIR: DirNode(CHUNK_DIR, {"0": node}, self.mtime)}


class _LazyZarrDomain:
    """The Zarr view's hierarchy of the domain (object paths for attributes), made once."""

    def __init__(self, model: DomainModel, ctx: ViewContext) -> None:
        self.model, self.ctx = model, ctx
        self._zdom: zarr3.ZarrDomain | None = None
        self._lock = threading.Lock()

    def get(self) -> zarr3.ZarrDomain:
        with self._lock:
            if self._zdom is None:
                self._zdom = zarr3.ZarrDomain(self.model, self.ctx)
            return self._zdom


def domain_node(model: DomainModel, ctx: ViewContext, name: str) -> DirNode:
    """``polyglot/<stem>/``: per qualifying dataset ``<path>.tif``, ``<path>.h5``, ``<path>.zarr/``."""
    return DirNode(name, lambda: _tree(model, ctx), mtime=model.domain.last_modified or None)


def _qualifying(model: DomainModel, ctx: ViewContext) -> list[tuple[Any, Dataset]]:
    found = []
    for e in model.walk():
        ds = e.obj
        if not isinstance(ds, Dataset):
            continue
        try:
            if _candidate(ds, ctx):
                found.append((e, ds))
        except PolyfsError as exc:  # e.g. an unknown filter: that dataset only is left out
            log.info("polyglot view of %s: %s left out: %s", model.path, e.path, exc)
    ctx.catalog.prefetch_chunk_indexes([ds for _, ds in found])
    out = []
    for e, ds in found:
        try:
            reason = why_not(ds, ctx.catalog.pipeline(ds))
        except PolyfsError as exc:
            reason = str(exc)
        if reason is None:
            out.append((e, ds))
        else:
            log.info("polyglot view of %s: %s left out: %s", model.path, e.path, reason)
    return out


def _tree(model: DomainModel, ctx: ViewContext) -> dict[str, Node]:
    root: dict[str, Any] = {}
    files: dict[str, _DatasetFiles] = {}  # dataset id -> its files (aliases share them)
    zdom = _LazyZarrDomain(model, ctx)

    def place(path: str, f: _DatasetFiles) -> None:
        parts = [p for p in path.split("/") if p]
        d = root
        for part in parts[:-1]:
            sub = d.setdefault(part, {})
            if not isinstance(sub, dict):
                log.warning("polyglot view of %s: %s hides group %s", model.path, part, path)
                return
            d = sub
        leaves = f.nodes(parts[-1])
        if any(k in d for k in leaves):
            log.warning("polyglot view of %s: %s is shown once (name taken)", model.path, path)
            return
        d.update(leaves)

    for e, ds in _qualifying(model, ctx):
        parent = e.parent.obj if e.parent is not None and isinstance(e.parent.obj, Group) else None
        files[ds.id] = _DatasetFiles(model, ds, parent, e.path, ctx, zdom)
        place(e.path, files[ds.id])
    for gpath, link in model.aliases():
        if link.kind == "external":
            continue
        path = gpath.rstrip("/") + "/" + link.name
        try:
            target = model.resolve(path)
        except PolyfsError:  # dangling soft link
            continue
        if isinstance(target, Dataset) and target.id in files:
            place(path, files[target.id])

    def to_nodes(d: dict[str, Any]) -> dict[str, Node]:
        return {k: DirNode(k, to_nodes(v)) if isinstance(v, dict) else v for k, v in d.items()}

    return to_nodes(root)


__all__ = ["domain_node", "zarr_metadata", "OneShardPlan"]
