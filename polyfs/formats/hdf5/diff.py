"""One flushed ``hdf5/<stem>.h5`` against the model it was planned from: the store changes it makes.

The written file is walked by h5py (the HDF5 library itself) and its objects
matched to the model's. While the model is still the one the writer's file was
planned from, an object is matched by its object header address (HDF5's own
identity for an object, which ``move``, new links and new attributes leave
alone); otherwise by path and kind. HDF5 reuses a deleted object's header address
for the next object it makes, and never changes an object's kind or a dataset's
type, layout, chunk shape, filters, maximum shape or fill value in place: an
object at a planned address differing in one of them is a new object (the old
one removed), unless a link the view gave the old one is still there with its
creation order (then it is the old one changed in place, and refused). Then:

- objects only the file has are new: groups, committed types and datasets are
  imported as ``polyfs import`` would (codecs of the table kept, chunks stored
  as HDF5 wrote them; contiguous and compact datasets become chunked);
- model objects the file no longer reaches are removed;
- every group's link table (hard, soft, external) is taken from the file;
- attributes are set, changed and removed as written; the dimension scales the view
  shows for ``_ARRAY_DIMENSIONS`` (scales.py: attributes and dimension-only datasets)
  are not stored while the file keeps them as shown, and all stored as the file has
  them (new datasets, attributes) once a writer changes them;
- existing datasets may grow or shrink within their maximum shape; a chunk still
  at its planned byte range and never touched is unchanged and never read; a
  chunk HDF5 wrote anew with the dataset's own filters is stored as written
  (decoded once to validate it); others are decoded by HDF5 and encoded again;
- data the view converts (contiguous, variable-length, references): chunks whose
  bytes the writer wrote are read back through HDF5 and encoded as stored.

What the store cannot hold (virtual or external-storage datasets, changes of
type, layout or filters of an existing dataset, types outside the model) is
refused with :class:`UnsupportedType` naming the object, and nothing is
committed.
"""
from __future__ import annotations

import functools
import logging
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...codecs import vlen as vlen_codec
from ...errors import CodecError, InvalidInput, NoCodec, NotFound, PolyfsError, SourceError, UnsupportedType
from ...importers.common import ImportOptions, Progress, parse_codec
from ...model import types as T
from ...model import values
from ...model.changes import ObjectChange
from ...model.schema import Attribute, Dataset, Datatype, Group, Link
from ...model.tree import DomainModel
from ...model.writer import ObjectsWriter, stamp
from ...parallel import ordered_map
from ...vfile import ChunkRun
from ...writes.chunkin import Incoming, stored_dtype, to_stored
from ...writes.protocol import DocumentChanges, KnownChunk, WrittenFile
from .render import DatasetPlan, HDF5File, Planner, dimension_scale_class, external_file
from .hints import file_tracks_attribute_order, record_untracked_orders
from .ncfill import shown_fill
from .scales import SCALE_ATTRS, same_as_shown
from .filetypes import model_type
from .source import HDF5Importer, _Object, scalar_block

log = logging.getLogger(__name__)

KINDS = {"group": Group, "dataset": Dataset, "datatype": Datatype}


def default_options(where: str) -> ImportOptions:
    """How data HDF5 wrote in no codec of the table is stored (the import default)."""
    return ImportOptions(parse_codec(None, None, where), progress=False)


def _merged_links(opened: dict[str, Link], written: dict[str, Link], now: dict[str, Link]) -> dict[str, Link]:
    """A group's link table when it changed since the writer opened the file: what is there
    now, with the writer's own changes (links it removed, added or changed against what it
    opened); a link another writer added meanwhile (an array made through ``zarr/`` while
    h5py held the file) stays."""
    out = dict(now)
    for name in opened.keys() - written.keys():
        out.pop(name, None)
    for name, lk in written.items():
        if opened.get(name) is not lk:
            out[name] = lk
    return out


class _AttrSink:
    """Stands in for the importer's DomainWriter while attributes are read: collects them per id."""

    def __init__(self, root: Group) -> None:
        self.root = root
        self.attrs: dict[str, dict[str, Attribute]] = {}

    def set_attr(self, obj: Any, name: str, dtype: T.DType, shape: Any, value: Any) -> None:
        self.attrs.setdefault(obj.id, {})[name] = Attribute(name, dtype, shape, value, stamp())


class _Only:
    """An h5py object whose ``attrs`` lists only some names (the importer reads those)."""

    def __init__(self, h5obj: Any, names: set[str]) -> None:
        self.attrs = _OnlyAttrs(h5obj.attrs, names)


class _OnlyAttrs:
    def __init__(self, attrs: Any, names: set[str]) -> None:
        self._attrs = attrs
        self._names = names

    def __iter__(self):
        return (n for n in self._attrs if n in self._names)

    def get_id(self, name: str) -> Any:
        return self._attrs.get_id(name)

    def __getitem__(self, name: str) -> Any:
        return self._attrs[name]


class DocumentDiff:
    """One flushed file against the model: structure, attributes, shapes, chunks."""

    def __init__(self, catalog: Any, model: DomainModel, planner: Planner, hf: HDF5File, f: Any,
                 src: WrittenFile, where: str, trusted: bool, current: DomainModel | None = None) -> None:
        self.catalog = catalog
        self.model = model  # what the writer opened: the file is compared with it
        self.current = current if current is not None else model  # the changes apply to this
        self.planner = planner
        self.hf = hf
        self.f = f
        self.src = src
        self.where = where
        self.trusted = trusted  # the file was planned from this very model: header addresses identify objects
        self.sink = _AttrSink(model.root)
        self.imp = HDF5Importer(Path(where), self.sink, default_options(where))  # type: ignore[arg-type]
        self.imp.file = f
        self.imp.files_dir = None  # a file written here reaches no other files
        self.new = ObjectsWriter(catalog, model.domain)
        self.out = DocumentChanges(created=self.new)
        self.created: list[_Object] = []
        self._new: set[int] = set()  # id() of the file's objects the model lacks
        self._sizes: dict[str, int] | None = None
        self.scales_written = False  # the writer changed the dimension scales the view showed (scales.py)
        self._shown_only: dict[int, _Object] = {}  # id() of the file's dimension-only datasets the view made

    def is_new(self, obj: _Object) -> bool:
        return id(obj) in self._new

    def refuse(self, what: str, why: str) -> UnsupportedType:
        return UnsupportedType(f"{self.where}: {what}: {why} (nothing was stored)")

    def run(self) -> DocumentChanges:
        try:
            self._run()
        except BaseException:
            self.new.abort()
            raise
        return self.out

    def _run(self) -> None:
        try:
            self.imp._walk(self.f)
        except SourceError:
            raise  # names the file already
        except PolyfsError as exc:
            raise InvalidInput(f"{self.where}: {exc}") from None
        self._match_objects()
        self.scales_written = self._scales_changed()
        if self.scales_written:  # the view's dimension-only datasets are the file's: new objects
            for obj in self._shown_only.values():
                obj.model = None
                self.created.append(obj)
                self._new.add(id(obj))
            self._shown_only.clear()
        self._create_objects()
        self._links()
        for obj in self.imp.objects.values():
            self._attributes(obj)
        for obj in self.imp.objects.values():
            if self.is_new(obj) or id(obj) in self._shown_only:
                continue
            if obj.kind == "dataset":
                self._dataset(obj)
            elif obj.kind == "datatype":
                self._datatype(obj)
        self._new_data()

    # -- structure ------------------------------------------------------------------------
    def _match_objects(self) -> None:
        planned: dict[int, str] = {}
        if self.trusted:
            planned = {self.hf.plan.address(("oh", oid)): oid for oid in self.planner.in_file}  # HDF5: from the base
        seen: set[str] = set()
        synth = self.planner.synthesized()
        shown_paths = synth.paths()
        for key, obj in self.imp.objects.items():
            m: Any = None
            oid = planned.get(key[1]) if self.trusted else shown_paths.get(obj.path)
            if oid in synth.dim_only and self._is_dim_only(obj, synth.dim_only[oid][2]):
                obj.model = synth.dim_only[oid][2]  # shown by the view, not stored
                self._shown_only[id(obj)] = obj
                continue
            if obj.path == "/":
                m = self.model.root
            elif self.trusted:
                m = self.model.get(oid) if oid is not None else None
                if m is not None and self._replaced(key, obj, m, planned):
                    m = None  # a new object HDF5 put where a deleted one was: the old one goes
            else:
                try:
                    m = self.model.resolve(obj.path)
                except NotFound:
                    m = None
                if m is not None and (not isinstance(m, KINDS[obj.kind]) or m.id in seen):
                    m = None  # another object now sits at that path: a new one
            if m is None:
                self.created.append(obj)
                self._new.add(id(obj))
                continue
            if not isinstance(m, KINDS[obj.kind]):  # the same object (a link of it kept): changed in place
                raise self.refuse(obj.path, f"a {type(m).__name__.lower()} cannot become a {obj.kind}")
            obj.model = m
            seen.add(m.id)
        reachable = {e.obj.id for e in self.model.walk()}
        if self.current is not self.model:  # removed meanwhile by another writer: gone already
            reachable &= {e.obj.id for e in self.current.walk()}
        unreached = reachable - seen - self.planner.left_out.keys()  # not shown is not deleted
        self.out.removed = sorted(unreached - self.model.committed_types_used(set(unreached)))  # unlinked, still used
        if self.out.removed and not self.trusted:
            gone = ", ".join(self.model.canonical_paths().get(i, i) for i in self.out.removed[:3])
            raise self.refuse(gone, "the domain changed in the store since this file was opened, so objects "
                                    "it lacks cannot be told deleted from added meanwhile; reopen the file")

    def _replaced(self, key: tuple, obj: _Object, m: Any, planned: dict[int, str]) -> bool:
        """Whether the object the file has at model object ``m``'s header address is a new one.

        HDF5 reuses a freed object header's address for the next object it makes (netCDF-C's
        ``renameDimension`` deletes a dimension's placeholder dataset and makes another, which
        lands where the old one was). HDF5 never changes an object's kind, a dataset's type,
        dataspace rank, maximum shape, layout, chunk shape, filters or fill value, nor a
        committed type, in place: fixed at creation. So an object there that differs in one of
        them is a new object (the old one is deleted, the new one created with its data,
        attributes and links), unless a link the view gave the old object is still in the file
        with its creation order (a deleted link's name made again gets a new one): then the
        object was never freed, it is the old one changed in place, and ``_dataset`` refuses it.

        An object at a reused address with the same fixed properties is taken for the old one
        (a ``move`` looks the same): its extent, chunks, attributes and links are compared
        with what the file holds and changed to it, so the store ends up holding what the
        file does either way."""
        if isinstance(m, KINDS[obj.kind]):
            if obj.kind == "group" or self.src.untouched(key[1], self._header_sizes().get(m.id, 1)):
                return False  # a group has nothing fixed; an untouched header is the planned one
            why = self._fixed_difference(obj, m)
            if why is None:
                return False
        else:
            why = f"a {type(m).__name__.lower()} is now a {obj.kind}"
        if self._keeps_a_link(key, m, planned):
            return False
        log.debug("%s: %s: a new object at the address of %s (%s)", self.where, obj.path, m.id, why)
        return True

    def _header_sizes(self) -> dict[str, int]:
        """Object id -> the size of the header the view planned for it."""
        if self._sizes is None:
            self._sizes = {b.key[1]: b.size for b in self.hf.plan.blocks
                           if isinstance(b.key, tuple) and b.key[0] == "oh"}
        return self._sizes

    def _fixed_difference(self, obj: _Object, m: Any) -> str | None:
        """How the file's object differs from ``m`` in what HDF5 fixes at creation, or None."""
        if obj.kind == "datatype":
            got = self._type(lambda: self.imp.type_of(self.f[obj.path].id, obj.path), obj.path)
            return "a committed type cannot change" if _type_json(got) != _type_json(m.type) else None
        d = self.f[obj.path]
        dp = self.hf.datasets[m.id]
        return self._fixed_change(d, m, dp, f"dataset {obj.path}") or _fill_difference(d, dp)

    def _keeps_a_link(self, key: tuple, m: Any, planned: dict[int, str]) -> bool:
        """Whether a hard link the view gave ``m`` is in the file, to this object, with the
        creation order the view gave it (the object was never freed)."""
        order = self.planner.link_order
        for lk in self.imp.links:
            if lk.kind != "hard" or lk.target != key:
                continue
            gid = self.model.root.id if self.imp.objects[lk.parent].path == "/" else planned.get(lk.parent[1])
            want = order.get((gid, lk.name)) if gid is not None else None
            g = self.model.get(gid) if want is not None else None
            old = g.links.get(lk.name) if isinstance(g, Group) else None
            if old is None or old.kind != "hard" or old.id != m.id:
                continue
            parent = self.f[self.imp.objects[lk.parent].path]
            info = parent.id.links.get_info(lk.name.encode("utf-8"))
            if info.corder_valid and int(info.corder) == want:
                return True
        return False

    def _create_objects(self) -> None:
        """New objects as the importer makes them (not linked yet: the link tables do that)."""
        from h5py import h5d

        w = self.new
        for obj in self.created:
            if obj.kind == "datatype":
                tid = self.f[obj.path].id
                obj.model = w.add_datatype(None, None, self._type(lambda: model_type(tid, obj.path), obj.path))
        for obj in self.created:
            if obj.kind == "group":
                obj.model = w.add_group(None, None)
            elif obj.kind == "dataset":
                d = self.f[obj.path]
                dcpl = d.id.get_create_plist()
                if dcpl.get_layout() == getattr(h5d, "VIRTUAL", -1):
                    raise self.refuse(f"dataset {obj.path}", "virtual datasets cannot be stored")
                if dcpl.get_external_count():
                    raise self.refuse(f"dataset {obj.path}", "datasets in external raw files cannot be stored")
                p = obj.plan = self.imp._plan_dataset(d)  # SourceError names the file and the cause
                layout = "H5D_CHUNKED" if p.chunks else "H5D_CONTIGUOUS"
                obj.model = w.add_dataset(None, None, p.source_type, p.shape, p.chunks or None, p.filters,
                                          p.fill_value, layout_class=layout)

    def _type(self, read: Callable[[], T.DType], where: str) -> T.DType:
        try:
            return read()
        except T.UnsupportedType as exc:
            raise self.refuse(where, str(exc)) from None

    def _links(self) -> None:
        """Every group's link table as the file has it (links the view cannot show are kept)."""
        written: dict[tuple, dict[str, Any]] = {}
        for link in self.imp.links:
            n = link.name
            if not n or "/" in n or n in (".", ".."):  # HDF5 takes them; no view, import or disk can
                raise InvalidInput(f"{self.where}: invalid link name {n!r} (nothing was stored)")
            written.setdefault(link.parent, {})[link.name] = link
        for key, obj in self.imp.objects.items():
            if obj.kind != "group":
                continue
            g: Group = obj.model
            new = self.is_new(obj)
            table: dict[str, Link] = {}
            if not new:
                hidden = self.planner.links_shown.get(g.id, set())
                table = {n: lk for n, lk in g.links.items() if n not in hidden}
            for name, lk in written.get(key, {}).items():
                if lk.kind == "hard" and id(self.imp.objects[lk.target]) in self._shown_only:
                    continue  # the view's link to a dimension-only dataset (not stored)
                old = None if new else g.links.get(name)
                keep = old is not None and self._same_link(lk, old) and self._same_order(obj.path, g.id, name)
                table[name] = old if keep else self._link(lk)
            if new:
                g.links = table
                continue
            now = self.current.groups.get(g.id, g) if self.current is not self.model else g
            if now is not g:
                table = _merged_links(g.links, table, now.links)
            if {n: lk.to_json() for n, lk in table.items()} != {n: lk.to_json() for n, lk in now.links.items()}:
                self._object_change(ObjectChange(g.id, links=table))

    def _same_order(self, path: str, gid: str, name: str) -> bool:
        """Whether the file's link keeps the creation order the view gave it. A writer that
        made the link again (netCDF-C's ``renameVariable``/``renameDimension`` delete and
        relink a group's other variables) put it after the links made before: the model's
        link gets a new creation time, or the view would list it where it was."""
        want = self.planner.link_order.get((gid, name))
        if want is None:
            return True
        group = self.f[path]  # held: its id must outlive the link lookup
        info = group.id.links.get_info(name.encode("utf-8"))
        return not info.corder_valid or int(info.corder) == want

    def _link(self, lk: Any) -> Link:
        if lk.kind == "hard":
            return Link(lk.name, "hard", id=self.imp.objects[lk.target].model.id, created=stamp())
        if lk.kind == "soft":
            return Link(lk.name, "soft", h5path=lk.target, created=stamp())
        return Link(lk.name, "external", h5path=lk.target[1], domain=lk.target[0], created=stamp())

    def _same_link(self, a: Any, b: Link) -> bool:
        if a.kind != b.kind:
            return False
        if a.kind == "hard":
            return self.imp.objects[a.target].model.id == b.id
        if a.kind == "soft":
            return a.target == (b.h5path or "")
        return a.target == (external_file(b.domain or "", self.model.path), b.h5path or "/")

    # -- attributes -----------------------------------------------------------------------
    def _attributes(self, obj: _Object) -> None:
        if id(obj) in self._shown_only:
            return  # a dimension-only dataset the view made, as it made it (_scales_changed)
        h5obj = self.f if obj.path == "/" else self.f[obj.path]
        try:
            self.imp._copy_attrs(h5obj, obj.model, obj.path)
        except PolyfsError as exc:
            raise UnsupportedType(f"{self.where}: {exc}") from None
        got = self.sink.attrs.get(obj.model.id, {})
        if self.is_new(obj):
            record_untracked_orders(h5obj, obj.model)  # netCDF-C's objects made in an "a" session, h5py's
            obj.model.attributes = dict(got)
            return
        shown = self.planner.shown.get(obj.model.id, set())
        have = obj.model.attributes
        extra = self.planner.synthesized().extra.get(obj.model.id, {})  # shown, not stored (scales.py)
        change = ObjectChange(obj.model.id)
        for name, attr in got.items():
            if name in extra and not self.scales_written:
                continue  # as the view showed it (_scales_changed), a stored one it extended too
            old = have.get(name)  # compared as shown (ncfill.py)
            if old is None or not _same_attribute(name, shown_fill(obj.model, name, old), attr):
                change.set_attributes[name] = attr
        change.remove_attributes = sorted(n for n in shown if n not in got and n in have)
        if _tracks_attribute_order(h5obj):
            change.attribute_order = _reordered(have, got, change)
        if not change.is_empty():
            self._object_change(change)

    # -- dimension scales the view showed (scales.py) ----------------------------------------
    def _is_dim_only(self, obj: _Object, ds: Dataset) -> bool:
        """Whether the file's object is the dimension-only dataset the view made (HDF5 may have
        put a new object at its address after deleting it)."""
        if obj.kind != "dataset":
            return False
        d = self.f[obj.path]
        return tuple(d.shape) == tuple(ds.shape.dims) and d.dtype == np.dtype(">f4")

    def _scales_changed(self) -> bool:
        """Whether the writer changed the dimension scales the view showed for
        ``_ARRAY_DIMENSIONS``: detached or attached one, made a scale, wrote to, added an
        attribute to, linked or deleted a dimension-only dataset, or added an object with
        scale attributes (netCDF-C adding a variable). Then the file's scales are stored, as a
        file copied in would be (the view never mixes stored and shown scales); else none."""
        synth = self.planner.synthesized()
        if not synth:
            return False
        for obj in self.created:  # first: references to new objects cannot be compared
            if set(self.f[obj.path].attrs) & set(SCALE_ATTRS):
                return True
        found: set[str] = set()
        removed = set(self.out.removed)  # deleted by the writer: left in the scales it used
        for obj in self.imp.objects.values():
            if self.is_new(obj):
                continue
            h5obj = self.f if obj.path == "/" else self.f[obj.path]
            names = set(h5obj.attrs)
            oid = obj.model.id
            extra = synth.extra.get(oid, {})
            have = obj.model.attributes
            if {n for n in names if n in SCALE_ATTRS and (n not in have or n in extra)} != set(extra):
                return True
            if id(obj) in self._shown_only:
                found.add(oid)
                if names != set(extra) or h5obj.id.get_storage_size() > 0:
                    return True
            if extra:
                try:
                    self.imp._copy_attrs(_Only(h5obj, set(extra)), obj.model, obj.path)
                except PolyfsError as exc:
                    raise UnsupportedType(f"{self.where}: {exc}") from None
                got = self.sink.attrs.get(oid, {})
                for n, a in extra.items():
                    if n not in got:
                        return True
                    same = same_as_shown(a, got[n], removed)
                    if not (_same_attribute(n, a, got[n]) if same is None else same):
                        return True
        if found != set(synth.dim_only):
            return True  # one was deleted
        links = sorted((self.imp.objects[lk.parent].path, lk.name) for lk in self.imp.links
                       if lk.kind == "hard" and id(self.imp.objects[lk.target]) in self._shown_only)
        return links != sorted((g, n) for g, n, _ in synth.dim_only.values())

    def _object_change(self, change: ObjectChange) -> None:
        """``change`` merged into the object's change already made (a group whose links and
        attributes both changed: one commit), every field of it kept."""
        for c in self.out.objects:
            if c.obj_id == change.obj_id:
                c.set_attributes.update(change.set_attributes)
                c.remove_attributes += change.remove_attributes
                for name in ("resize", "links", "attribute_order", "view_hints", "implicit"):
                    if getattr(change, name) is not None:
                        setattr(c, name, getattr(change, name))
                return
        self.out.objects.append(change)

    # -- new datasets' data ---------------------------------------------------------------------
    def _new_data(self) -> None:
        """Chunks of new datasets, stored under their (unreachable) ids as the importer does."""
        self.imp.writer = self.new  # type: ignore[assignment]  # from attributes to chunks
        bar = Progress(0, "", False)
        for obj in self.created:
            if obj.kind != "dataset":
                continue
            try:
                self.imp._dataset_data(self.f[obj.path], obj.model, obj.plan, bar)
            except PolyfsError as exc:
                raise InvalidInput(f"{self.where}: dataset {obj.path}: {exc}") from None
            except (OSError, RuntimeError, ValueError, TypeError) as exc:
                raise InvalidInput(f"{self.where}: dataset {obj.path}: {' '.join(str(exc).split())}") from None

    # -- existing datatypes and datasets ---------------------------------------------------
    def _datatype(self, obj: _Object) -> None:
        got = self._type(lambda: self.imp.type_of(self.f[obj.path].id, obj.path), obj.path)
        if _type_json(got) != _type_json(obj.model.type):
            raise self.refuse(f"datatype {obj.path}", "a committed type cannot change")

    def _dataset(self, obj: _Object) -> None:
        ds: Dataset = obj.model
        d = self.f[obj.path]
        what = f"dataset {obj.path}"
        dp = self.hf.datasets[ds.id]
        why = self._fixed_change(d, ds, dp, what)
        if why is not None:
            raise self.refuse(what, why)
        if ds.shape.kind == "simple":
            dims = tuple(int(x) for x in d.shape)
            if dims != tuple(ds.shape.dims):
                self._object_change(ObjectChange(ds.id, resize=dims))
        if dp.storage == "chunked-stored":
            self._chunks(d, ds, dp, what)
        else:
            self._converted_data(d, ds, dp, what)

    def _fixed_change(self, d: Any, ds: Dataset, dp: DatasetPlan, what: str) -> str | None:
        """Why the file's dataset ``d`` cannot be ``ds`` changed in place (a type, dataspace
        rank or kind, layout, chunk shape, filters or maximum shape of its own), or None."""
        from h5py import h5d, h5s

        if _type_json(self._type(lambda: self.imp.type_of(d.id.get_type(), what), what)) != _type_json(ds.type):
            return "the data type cannot change"
        kind = {h5s.NULL: "null", h5s.SCALAR: "scalar"}.get(d.id.get_space().get_simple_extent_type(), "simple")
        if kind != ds.shape.kind or (kind == "simple" and len(d.shape) != ds.shape.rank):
            return "the dataspace cannot change rank or kind"
        dcpl = d.id.get_create_plist()
        chunked = dcpl.get_layout() == h5d.CHUNKED
        if chunked != dp.storage.startswith("chunked") or (chunked and tuple(d.chunks) != tuple(ds.chunks)):
            return "the storage layout or chunk shape cannot change"
        file_filters = tuple(int(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters()))
        if file_filters != tuple(fl.id for fl in dp.filters):
            return "the filters cannot change"
        if kind == "simple":
            dims = tuple(int(x) for x in d.shape)
            maxdims = tuple(None if m is None else int(m) for m in (d.maxshape or dims))
            if maxdims != tuple(ds.shape.maxdims or ds.shape.dims):
                return "the maximum shape cannot change"
        return None

    def _converted_data(self, d: Any, ds: Dataset, dp: DatasetPlan, what: str) -> None:
        """Data the view converts (contiguous, variable-length, references): a chunk whose bytes
        the writer wrote (or moved) is read back through HDF5 and encoded as stored; new heap
        objects of variable-length data always come with new chunk bytes (their heap ids)."""
        pipe = self.catalog.pipeline(ds)
        dims = tuple(int(x) for x in d.shape) if ds.shape.kind == "simple" else ()
        changed: list[tuple[int, ...]] = []
        if dp.storage == "contiguous":
            placed = not dp.data or d.id.get_offset() == self.hf.address(("data", ds.id))
            if not placed or any(not self.src.untouched(self.hf.address(b.key), b.size) for b in dp.data):
                changed = [tuple(c) for c in np.ndindex(*ds.grid)] if dims else [()]
        elif dp.storage == "chunked-converted":
            want = _planned(self.hf, dp) if self.trusted else {}
            for info in _chunk_infos(d):
                coords = tuple(int(o) // c for o, c in zip(info.chunk_offset, ds.chunks))
                at = (int(info.byte_offset), int(info.size))
                if not (want.get(coords) == at and self.src.untouched(*at)):
                    changed.append(coords)
        elif any(not self.src.untouched(self.hf.address(b.key), b.size) for b in dp.data):
            raise self.refuse(what, f"data of {dp.storage} datasets cannot be written")
        if dims and any(d_ == 0 for d_ in dims):
            changed = []
        puts = []
        for coords in changed:
            try:
                puts.append((coords, _const(self._encode_region(d, ds, pipe, coords, dims))))
            except (PolyfsError, ValueError, TypeError, OSError) as exc:
                raise InvalidInput(f"{self.where}: {what}: chunk {list(coords)}: {exc}") from None
        if puts:
            self.out.puts[ds.id] = puts

    def _chunks(self, d: Any, ds: Dataset, dp: DatasetPlan, what: str) -> None:
        dims = tuple(int(x) for x in d.shape)
        grid = tuple(-(-n // c) for n, c in zip(dims, ds.chunks))
        want = _planned(self.hf, dp) if self.trusted else {}
        idx = dp.index
        pipe = self.catalog.pipeline(ds)
        same_filters = tuple(fl.id for fl in dp.filters) == pipe.ids
        inc = Incoming(stored_dtype(ds), tuple(pipe.filters))
        present: set[tuple[int, ...]] = set()
        puts: list[tuple[tuple[int, ...], Callable[[], bytes]]] = []
        touched: list[tuple[tuple[int, ...], tuple[int, int], int]] = []
        for info in _chunk_infos(d):
            coords = tuple(int(o) // c for o, c in zip(info.chunk_offset, ds.chunks))
            if not all(c < g for c, g in zip(coords, grid)):
                continue  # HDF5 keeps no chunk past the extent; be safe
            present.add(coords)
            at = (int(info.byte_offset), int(info.size))
            if self.src.untouched(*at) and (not self.trusted or want.get(coords) == at):
                # bytes the writer never wrote: the stored chunk as it was when the file was opened
                # (never read; and never stale bytes over a newer version another view stored since)
                continue
            touched.append((coords, at, int(info.filter_mask)))

        def failed(coords: tuple[int, ...], exc: Exception) -> PolyfsError:
            # NoCodec: a filter outside the table that HDF5 here cannot run (EOPNOTSUPP)
            kind = type(exc) if isinstance(exc, (CodecError, NoCodec)) else InvalidInput
            return kind(f"{self.where}: {what}: chunk {list(coords)}: {exc}")

        def check(item: tuple[tuple[int, ...], tuple[int, int], int]) -> Callable[[], bytes] | None:
            """One written chunk read and validated, in a worker (zlib and the other codecs release
            the GIL): None if unchanged, _RECODE if HDF5 must decode it, else its stored bytes' fetch."""
            coords, at, mask = item
            data = self._read(at, what, coords)
            linear = idx.linear_of(coords) if idx is not None and all(
                c < g for c, g in zip(coords, idx.grid)) else -1
            if linear >= 0 and idx.size_of(linear) == len(data) and mask == 0 and \
                    _stored(self.catalog, idx.key(linear)) == data:
                return None  # rewritten with the same bytes (or a neighbour's page was written)
            if mask != 0 or not same_filters:
                return _RECODE
            crc: list[int] = []
            try:
                new = to_stored(ds, pipe, inc, data, crc=crc)
            except (PolyfsError, ValueError, TypeError, OSError) as exc:
                raise failed(coords, exc) from None
            if new is not data and new != data:  # uncompressed chunks come back as equal copies
                return _const(new)
            # stored as written: read again at commit (never held, so an r+ session rewriting a
            # large uncompressed file keeps no copy of it), and only if still these bytes
            fetch = functools.partial(self._read_again, at, what, coords, zlib.crc32(data))
            return KnownChunk(fetch, crc[0]) if crc else fetch

        for (coords, _, _), fetch in zip(touched, ordered_map(check, touched)):
            if fetch is _RECODE:  # h5py on this thread only
                try:
                    fetch = _const(self._encode_region(d, ds, pipe, coords, dims))
                except (PolyfsError, ValueError, TypeError, OSError) as exc:
                    raise failed(coords, exc) from None
            if fetch is not None:
                puts.append((coords, fetch))
        if puts:
            self.out.puts[ds.id] = puts
        if idx is not None and len(idx):
            coords_all = np.asarray(idx.coords_of(idx.linear)).reshape(len(idx), -1)
            gone = [tuple(int(x) for x in c) for c in coords_all
                    if all(x < g for x, g in zip(c, grid)) and tuple(int(x) for x in c) not in present]
            if gone:  # chunks outside a new extent are the resize's to delete
                self.out.deletes[ds.id] = gone

    def _read_again(self, at: tuple[int, int], what: str, coords: tuple[int, ...], digest: int) -> bytes:
        """A validated chunk's bytes read again to be stored: refused if they changed since
        (another process wrote the file meanwhile): unvalidated bytes are never stored."""
        data = self._read(at, what, coords)
        if zlib.crc32(data) != digest:
            raise InvalidInput(f"{self.where}: {what}: chunk {list(coords)} changed while it was being "
                               f"stored (written meanwhile); flush the file again")
        return data

    def _read(self, at: tuple[int, int], what: str, coords: tuple[int, ...]) -> bytes:
        data = self.src.read(*at)
        if len(data) != at[1]:
            raise InvalidInput(f"{self.where}: {what}: chunk {list(coords)} lies past the end of the file")
        return data

    def _encode_region(self, d: Any, ds: Dataset, pipe: Any, coords: tuple[int, ...],
                       dims: tuple[int, ...]) -> bytes:
        """One chunk read back through HDF5 (a skipped filter, converted data) and encoded as
        stored: references become the referenced objects' ids, variable-length data its HSDS
        encoding, the rest the stored byte order; the edge is padded with the fill value."""
        region = tuple(slice(c * k, min(c * k + k, n)) for c, k, n in zip(coords, ds.chunks, dims))
        arr = np.asarray(self.imp._read(d, ds.type)(region))
        block = values.fill_array(ds.type, ds.fill_value, tuple(ds.chunks) if dims else ())
        if dims:
            values.put(block, arr, tuple(slice(0, s) for s in arr.shape[:len(ds.chunks)]))
        else:
            block = scalar_block(ds, arr)
        if ds.type.is_vlen:
            raw = vlen_codec.encode(ds.type, block)
        else:
            raw = np.ascontiguousarray(block, dtype=stored_dtype(ds)).tobytes()
        return raw if pipe.is_identity else pipe.encode(raw)


def _const(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def _RECODE() -> bytes:  # a marker: the chunk is decoded by HDF5 and encoded again
    raise AssertionError("not a fetch")


def _chunk_infos(d: Any) -> list[Any]:
    """Every chunk h5py's index holds (chunk_iter: one walk of the B-tree)."""
    out: list[Any] = []
    try:
        d.id.chunk_iter(out.append)
    except AttributeError:  # pragma: no cover - h5py without chunk_iter
        out = [d.id.get_chunk_info(i) for i in range(d.id.get_num_chunks())]
    return out


def _planned(hf: HDF5File, dp: DatasetPlan) -> dict[tuple[int, ...], tuple[int, int]]:
    """Grid coords -> (file offset, size) where the view put each chunk."""
    idx = dp.index
    if idx is None or not len(idx) or not dp.data:
        return {}
    if dp.storage == "chunked-stored":
        run = ChunkRun(idx, idx.linear, idx.sizes)
        offsets, sizes = run.item_offsets(), idx.sizes
    else:
        offsets, sizes = dp.btree.offsets, dp.btree.sizes  # type: ignore[union-attr]
    base = hf.address(("data", dp.ds.id))
    coords = np.asarray(idx.coords_of(idx.linear)).reshape(len(idx), -1)
    return {tuple(int(x) for x in c): (base + int(o), int(s)) for c, o, s in zip(coords, offsets, sizes)}


def _stored(catalog: Any, key: str) -> bytes | None:
    try:
        return catalog.store.get(key)
    except PolyfsError:
        return None


def _fill_difference(d: Any, dp: DatasetPlan) -> str | None:
    """Whether the file's dataset declares another fill value than the view gave it (compared
    as bytes, for the plain fixed-size types whose memory bytes are the file's; None if the
    same or not comparable)."""
    from h5py import h5d

    dcpl = d.id.get_create_plist()
    state = dcpl.fill_value_defined()
    dt = d.dtype
    if state == h5d.FILL_VALUE_UNDEFINED or dt.kind not in "iufcbS" or dt.itemsize == 0:
        return None
    want = dp.fill if dp.fill is not None else bytes(dt.itemsize)
    if len(want) != dt.itemsize:
        return None
    got = bytes(dt.itemsize)
    if state == h5d.FILL_VALUE_USER_DEFINED:
        try:
            arr = np.zeros(1, dtype=dt)
            dcpl.get_fill_value(arr)
        except (ValueError, TypeError, OSError, RuntimeError):
            return None
        got = arr.tobytes()
    return None if got == want else "the fill value cannot change"


def _type_json(t: T.DType) -> Any:
    return T.resolved(t).to_json()


def _same_attribute(name: str, old: Attribute, new: Attribute) -> bool:
    """Whether an attribute read back from the file is the model's (as the view renders it)."""
    old_type = dimension_scale_class(name, T.resolved(old.type), old.value)
    if old.shape.to_json() != new.shape.to_json() or old_type.to_json() != T.resolved(new.type).to_json():
        return False
    if old.value == new.value:
        return True
    if old.shape.kind == "null":
        return True
    try:
        a = values.to_numpy(old.type, old.shape, old.value)
        b = values.to_numpy(new.type, new.shape, new.value)
    except (PolyfsError, ValueError, TypeError):
        return False
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    try:
        return bool(np.array_equal(a, b))
    except (TypeError, ValueError):
        return False


def _tracks_attribute_order(h5obj: Any) -> bool:
    """Whether the file's object tracks its attributes' creation order (netCDF-4 objects do):
    h5py then lists them in that order, else by name, which says nothing of it."""
    return bool(file_tracks_attribute_order(h5obj))  # a committed type has none to follow


def _reordered(have: dict[str, Attribute], got: dict[str, Attribute], change: ObjectChange) -> tuple[str, ...] | None:
    """The stored attributes' order after ``change`` when the file lists them otherwise (one
    deleted and written again, as netCDF-C and h5py change one, is last in creation order), else
    None; ones the file does not show keep their places. Called only for objects whose file
    tracks the order (the view renders an object that tracked none untracked, hints.py), so a
    stored order that happens to be by name (CMOR writes its attributes so) is creation order."""
    after = [n for n in have if n not in change.remove_attributes] + \
        [n for n in change.set_attributes if n not in have]
    written = [n for n in got if n in after]
    shown = [n for n in after if n in got]
    if shown == written:
        return None
    slots = iter(written)
    return tuple(next(slots) if n in got else n for n in after)
