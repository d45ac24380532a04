"""The mount's top level: one directory per view, every domain under each.

``MNT/<view>/<domain dirs>/<stem><suffix>`` where ``<stem>`` is the domain
path without a trailing ``.h5``: domain ``/home/alice/brain.h5`` appears as
``zarr/home/alice/brain.zarr/``, ``n5/home/alice/brain.n5/``,
``hdf5/home/alice/brain.h5``, ``tiff/home/alice/brain/``.

Each format package (:mod:`polyfs.formats`) declares its view directory,
suffix and kind, and its ``view.domain_node(model, ctx, name)`` returns
that kind of node; this module only places what they return. The domain
list is re-read when a view directory is listed after ``ttl`` seconds, so
domains imported while mounted appear.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import PolyfsError
from ..formats import formats
from ..model.catalog import Catalog
from .base import DirNode, FileNode, Node, ViewContext

log = logging.getLogger(__name__)


def domain_stem(domain_path: str) -> list[str]:
    """Path components of a domain without the trailing ``.h5``."""
    parts = [p for p in domain_path.split("/") if p]
    if parts and parts[-1].endswith(".h5") and len(parts[-1]) > 3:
        parts[-1] = parts[-1][:-3]
    return parts


def view_parts(suffix: str, keeps: tuple[str, ...], domain_path: str) -> list[str]:
    """A domain's path in one view: its directories and its leaf (``<stem><suffix>``, or the
    domain's own name when it ends in a name the view keeps, as a netCDF writer's ``x.nc``)."""
    parts = [p for p in domain_path.split("/") if p]
    if parts and any(parts[-1].endswith(k) and len(parts[-1]) > len(k) for k in keeps):
        return parts
    stem = domain_stem(domain_path)
    return stem[:-1] + [stem[-1] + suffix]


def domain_leaf_paths(domain_path: str) -> list[str]:
    """Where a domain appears in every view (``zarr/a/b.zarr``, ``hdf5/a/b.h5``, ...)."""
    return ["/".join([f.name] + view_parts(f.suffix, f.keeps_names, domain_path)) for f in formats()]


def view_conflict(catalog: Catalog, path: str) -> str | None:
    """Why domain ``path`` would collide with another domain in a view, else None.

    Every view names a domain by its path (``/a/b.h5`` is ``zarr/a/b.zarr``, ``tiff/a/b``):
    a domain at the place of another's directory (``/a`` next to ``/a/b.h5``), below another
    domain (``/a/b.h5/c.h5``), or with the same view name (``/a`` and ``/a.h5`` are both
    ``tiff/a``) would hide one of them in the mount, so it is refused before anything is
    written."""
    return _collision(catalog, path, f"domain {path}", domain_leaf_paths(path), may_hold=False)


def folder_paths(folder: str) -> list[str]:
    """Where a folder appears in every view: ``<view>/<its path>``, no suffix."""
    parts = [p for p in folder.split("/") if p]
    return ["/".join([f.name] + parts) for f in formats()]


def folder_conflict(catalog: Catalog, folder: str) -> str | None:
    """Why a new folder ``folder`` would collide with a domain in a view, else None: it is
    ``<view>/<folder>`` in every view, so ``/a`` would be ``tiff/a``, domain ``/a.h5``'s name
    there, and ``/x/y`` would lie inside domain ``/x``."""
    return _collision(catalog, folder, f"folder {folder}", folder_paths(folder), may_hold=True)


def folder_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a folder (a directory made above domains), else None: a
    name the views give domains (``x.zarr``, ``x.h5``, ``x.nc``...) would show a folder
    where tools look for a domain."""
    if not name or name.startswith("."):
        return "a folder's name cannot start with '.'"
    endings = sorted({e for f in formats() for e in (f.suffix, *f.keeps_names) if e})
    if any(name.endswith(e) for e in endings):
        return f"a folder's name cannot end in {', '.join(endings)} (the views' names of domains)"
    return None


def _collision(catalog: Catalog, path: str, what: str, mine: list[str], may_hold: bool) -> str | None:
    """Why ``mine`` (the new domain's or folder's place in each view) would hide or be hidden
    by an existing domain, else None. ``may_hold``: others may lie below ``mine`` (``mine`` is
    a folder's). An existing folder blocks nothing: a domain shown at its place wins (HSDS
    keeps ``/home/`` and ``/home.h5`` apart; only ``tiff/`` names both ``tiff/home``). A
    listing only; the few paths whose names collide are read to see whether they are
    domains (with a root group) or HSDS folders."""
    for other in catalog.list_domains(include_folders=True):
        if other == path:
            continue
        why = _overlap(what, mine, may_hold, domain_leaf_paths(other), f"existing domain {other}")
        if why and catalog.domain_kind(other) == "domain":
            return why
    return None


def _overlap(what: str, mine: list[str], i_hold: bool, theirs: list[str], other: str) -> str | None:
    """The first view where two places collide: the same name, or one below the other
    (below ``mine`` is fine when ``i_hold``: a folder has things below it)."""
    for a, b in zip(mine, theirs):
        if a == b:
            return f"{what} and {other} would both be {a} in the mount"
        if b.startswith(a + "/") and not i_hold:
            return f"{what} would be {a} in the mount, where {other} has its folder"
        if a.startswith(b + "/"):
            return f"{what} would lie inside {other} ({b}) in the mount"
    return None


@dataclass
class ViewSpec:
    name: str
    suffix: str
    domain_node: Callable[..., Node]
    kind: str = "dir"  # "dir" or "file": what domain_node returns
    keeps: tuple[str, ...] = ()  # domain names ending so keep their name in this view


def load_views(names: list[str] | None = None) -> list[ViewSpec]:
    out = []
    for fmt in formats():
        if names is not None and fmt.name not in names:
            continue
        try:
            mod = fmt.view()
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith(fmt.package):
                raise
            log.warning("view %s is not available (%s)", fmt.name, exc)
            continue
        out.append(ViewSpec(fmt.name, fmt.suffix, mod.domain_node, fmt.kind, fmt.keeps_names))
    return out


class DomainDir(DirNode):
    """A view directory whose subtree mirrors the store's domain hierarchy."""

    def __init__(self, name: str, view: ViewSpec, ctx: ViewContext, domains: "DomainList", prefix: tuple[str, ...] = ()):
        self.view = view
        self.ctx = ctx
        self.domains = domains
        self.prefix = prefix
        self._generation = -1
        self._nodes: dict[str, Node] = {}
        super().__init__(name, self._load)

    def entries(self) -> dict[str, Node]:
        if self.domains.generation() != self._generation:
            self.reset()
        return super().entries()

    def ready(self) -> bool:
        return self.loaded and self.domains.fresh() and self.domains.generation() == self._generation

    def _load(self) -> dict[str, Node]:
        """This directory's children from the list's per-view tree (built once per version of
        the list): a listing costs what it holds, not the number of domains in the store."""
        gen, tree = self.domains.tree(self.view.suffix, self.view.keeps)
        out: dict[str, Node] = {}
        for name, path in tree.get(self.prefix, {}).items():
            if path is None:
                out[name] = self._subdir(name)
                continue
            node = self._nodes.get(name)
            if node is None or getattr(node, "_domain_path", None) != path:
                node = self._domain_leaf(path, name)
            out[name] = node
        self._nodes = dict(out)
        self._generation = gen
        return out

    def _subdir(self, name: str) -> "DomainDir":
        node = self._nodes.get(name)
        if isinstance(node, DomainDir):
            return node
        return DomainDir(name, self.view, self.ctx, self.domains, self.prefix + (name,))

    def _domain_leaf(self, path: str, leaf: str) -> Node:
        """A lazy leaf: the domain is loaded and rendered on first use, not on listing."""
        render = _DomainRender(self.view, self.ctx, path, leaf)
        node: Node = _FileLeaf(leaf, render) if self.view.kind == "file" else _DirLeaf(leaf, render)
        node._domain_path = path  # type: ignore[attr-defined]
        return node


class _DomainRender:
    """The view's node for one domain, rendered again whenever the catalog says
    files laid out earlier may be wrong (its generation for the domain moved)."""

    def __init__(self, view: ViewSpec, ctx: ViewContext, path: str, leaf: str) -> None:
        self.view, self.ctx, self.path, self.leaf = view, ctx, path, leaf
        self._node: Node | None = None
        self._gen = -1
        self._lock = threading.Lock()

    def current(self) -> Node | None:
        """The rendered node if it is up to date (no work needed), else None."""
        node = self._node
        return node if node is not None and self._gen == self.ctx.catalog.generation(self.path) else None

    def node(self) -> Node:
        gen = self.ctx.catalog.generation(self.path)
        with self._lock:
            if self._node is None or gen != self._gen:
                model = self.ctx.catalog.load(self.path)
                self._node = self.view.domain_node(model, self.ctx, self.leaf)
                self._gen = gen
            return self._node


class _FileLeaf(FileNode):
    def __init__(self, name: str, render: _DomainRender) -> None:
        super().__init__(name, lambda: render.node().vfile())
        self._render = render

    def vfile(self):
        return self._render.node().vfile()

    @property  # type: ignore[override]
    def mtime(self) -> float:
        """The current rendering's: it moves when the domain changes (``rsync -a``, ``make``)."""
        return self._render.node().mtime

    @mtime.setter
    def mtime(self, value: float) -> None:
        pass  # FileNode's own stamp; the rendered node's is the one shown

    def resolved(self) -> FileNode:
        return self._render.node().resolved()

    def size(self) -> int:
        return self._render.node().size()

    def ready(self) -> bool:
        node = self._render.current()
        return node is not None and node.ready()

    @property
    def built(self) -> bool:
        node = self._render.current()
        return node is not None and getattr(node, "built", False)


class _DirLeaf(DirNode):
    def __init__(self, name: str, render: _DomainRender) -> None:
        super().__init__(name, lambda: render.node().entries())
        self._render = render

    def entries(self) -> dict[str, Node]:
        return self._render.node().entries()

    @property  # type: ignore[override]
    def mtime(self) -> float:
        """The current rendering's once there is one (see _FileLeaf.mtime); a ``stat`` of a
        directory never loads its domain (``ls -l`` of thousands of domains)."""
        node = self._render.current()
        return node.mtime if node is not None else self._stamp

    @mtime.setter
    def mtime(self, value: float) -> None:
        self._stamp = value

    def ready(self) -> bool:
        node = self._render.current()
        return node is not None and node.ready()


ViewTree = dict[tuple[str, ...], dict[str, "str | None"]]


def view_tree(suffix: str, keeps: tuple[str, ...], paths: list[str], folders: list[str]) -> ViewTree:
    """Every directory of one view (its components below the view) -> its children: a name
    maps to the domain it shows (a leaf) or None (a directory). Domains come in ``paths``'
    order: a leaf replaces a directory of its name, a directory never replaces a leaf (logged);
    folders only add directories (a domain's name wins). One pass, linear in the names."""
    tree: ViewTree = {}
    for path in paths:
        parts = view_parts(suffix, keeps, path)
        for depth in range(len(parts) - 1):
            here = tree.setdefault(tuple(parts[:depth]), {})
            sub = parts[depth]
            if here.get(sub) is not None:
                log.warning("domain leaf %s (views naming domains *%s) hides a directory of domains", sub, suffix)
                break
            here.setdefault(sub, None)
        else:
            if parts:
                tree.setdefault(tuple(parts[:-1]), {})[parts[-1]] = path
    for folder in folders:
        parts = [p for p in folder.split("/") if p]
        for depth in range(len(parts)):
            tree.setdefault(tuple(parts[:depth]), {}).setdefault(parts[depth], None)
    return tree


class DomainList:
    """The store's domains and folders, re-listed at most every ``ttl`` seconds."""

    def __init__(self, catalog: Catalog, ttl: float = 5.0) -> None:
        self.catalog = catalog
        self.ttl = ttl
        self._paths: list[str] = []
        self._folders: list[str] = []
        self._at = -math.inf  # never listed: due whatever the ttl (domain_ttl may be years)
        self._gen = 0
        self._trees: dict[tuple[str, tuple[str, ...]], tuple[int, ViewTree]] = {}
        self._lock = threading.Lock()

    def refresh(self, force: bool = False) -> None:
        with self._lock:
            if not force and time.monotonic() - self._at < self.ttl:
                return
            try:
                paths, folders = self.catalog.list_tree()
            except PolyfsError as exc:
                log.error("cannot list domains: %s", exc)
                return
            self._at = time.monotonic()
            if paths != self._paths or folders != self._folders:
                self._paths, self._folders = paths, folders
                self._gen += 1

    def fresh(self) -> bool:
        """The list is young enough that asking for it does no I/O."""
        return time.monotonic() - self._at < self.ttl

    def tree(self, suffix: str, keeps: tuple[str, ...]) -> tuple[int, "ViewTree"]:
        """The list's generation and, for a view naming domains with ``suffix``/``keeps``, every
        directory's children (see :func:`view_tree`), made once per generation and view: each
        directory of the view then lists in the time of its own entries (``ls -R`` of thousands
        of domains in hundreds of folders would otherwise go over every domain per folder)."""
        self.refresh()
        with self._lock:
            gen, paths, folders = self._gen, self._paths, self._folders
            made = self._trees.get((suffix, keeps))
        if made is not None and made[0] == gen:
            return made
        made = (gen, view_tree(suffix, keeps, paths, folders))
        with self._lock:
            if self._gen == gen:
                self._trees = {k: v for k, v in self._trees.items() if v[0] == gen}
                self._trees[(suffix, keeps)] = made
        return made

    def domain_at(self, suffix: str, keeps: tuple[str, ...], parts: list[str]) -> tuple[str, int] | None:
        """The domain whose leaf ``parts`` (components below a view) starts with, and how many
        components that leaf takes; None above or beside every domain. Dictionary lookups in
        :meth:`tree`, never a pass over every domain (a write routed per file)."""
        _, tree = self.tree(suffix, keeps)
        for i, name in enumerate(parts):
            path = tree.get(tuple(parts[:i]), {}).get(name)
            if path is not None:
                return path, i + 1
        return None

    def paths(self) -> list[str]:
        self.refresh()
        return list(self._paths)

    def folders(self) -> list[str]:
        """HSDS folders: directories in every view even with no domain inside."""
        self.refresh()
        return list(self._folders)

    def generation(self) -> int:
        self.refresh()
        return self._gen

    def known(self) -> tuple[int, list[str]]:
        """The list as last read, and its generation, without re-reading (no I/O)."""
        with self._lock:
            return self._gen, self._paths


class DomainLocator:
    """Which domain a mount path belongs to: ``zarr/a/b.zarr/g/x`` -> (``/a/b.h5``, ``g/x``).

    Pure dictionary lookups over the domain list as last read (never I/O), rebuilt when
    that list changes; used to decide permissions for every node under a domain's leaf."""

    def __init__(self, root: DirNode) -> None:
        self._views = {name: node for name, node in root.entries().items() if isinstance(node, DomainDir)}
        first = next(iter(self._views.values()), None)
        self.domains: DomainList | None = first.domains if first is not None else None
        self._gen = -1
        self._index: dict[tuple[str, ...], str] = {}
        self._longest = 0
        self._lock = threading.Lock()

    def _current(self) -> dict[tuple[str, ...], str]:
        if self.domains is None:
            return {}
        gen, paths = self.domains.known()
        if gen != self._gen:
            with self._lock:
                index: dict[tuple[str, ...], str] = {}
                for name, d in self._views.items():
                    for path in paths:
                        if domain_stem(path):
                            key = (name, *view_parts(d.view.suffix, d.view.keeps, path))
                            index.setdefault(key, path)
                self._index, self._gen = index, gen
                self._longest = max((len(k) for k in index), default=0)
        return self._index

    def locate(self, path: str) -> tuple[str | None, list[str]]:
        """The domain ``path`` is in (None above every domain) and the components below
        the domain's leaf (empty: ``path`` is the leaf itself)."""
        parts = [p for p in path.split("/") if p]
        index = self._current()
        for i in range(2, min(len(parts), self._longest) + 1):
            dom = index.get(tuple(parts[:i]))
            if dom is not None:
                return dom, parts[i:]
        return None, []


def build_root(ctx: ViewContext, views: list[str] | None = None, ttl: float = 5.0) -> DirNode:
    """The mount root: one DomainDir per view."""
    domains = DomainList(ctx.catalog, ttl)
    ctx.domains = domains
    entries: dict[str, Node] = {}
    for spec in load_views(views):
        entries[spec.name] = DomainDir(spec.name, spec, ctx, domains)
    return DirNode("", entries)
