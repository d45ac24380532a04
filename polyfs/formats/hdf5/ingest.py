"""What a writer (h5py ``"r+"``) does to ``hdf5/<stem>.h5``, as store changes.

The HDF5 view is one document: at flush the written file (the view's bytes
plus the writer's dirty pages) is opened read-only by h5py's file-object
driver, walked, and compared with the model the view was planned from.
What this first slice accepts:

- chunk data of chunked datasets whose chunks the view serves as stored: a
  chunk still at its planned byte range that the writer never touched is
  unchanged and never read; a chunk HDF5 wrote anew with the dataset's own
  filters is the stored encoding and is stored as written (decoded once to
  validate it); anything else is decoded by HDF5 and encoded again;
- a new extent within the maximum shape (``resize``, appends);
- attributes set, changed or deleted (converted by the importer's code).

Everything else (new or deleted objects, links, type, layout or filter
changes, data of contiguous or converted datasets) is refused with
:class:`UnsupportedType` naming the object, and nothing is committed.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import CodecError, InvalidInput, NotFound, PolyfsError, UnsupportedType
from ...model import types as T
from ...model import values
from ...model.changes import ObjectChange
from ...model.schema import Attribute, Dataset, Datatype, Group, Shape, now
from ...model.tree import DomainModel
from ...vfile import ChunkRun
from ...views.base import ViewContext
from ...writes.chunkin import Incoming, stored_dtype, to_stored
from ...writes.protocol import DocumentChanges, SourceReader, WrittenFile
from .render import (
    USER_BLOCK,
    DatasetPlan,
    DomainRenderer,
    HDF5File,
    dimension_scale_class,
    external_file,
)
from .source import HDF5Importer, _h5, _Object

log = logging.getLogger(__name__)

KINDS = {"group": Group, "dataset": Dataset, "datatype": Datatype}


class _Planner(DomainRenderer):
    """The view's own plan, also recording which attributes it shows (it leaves out those an
    object header cannot hold: they are absent from the file and must not read as deleted)."""

    def __init__(self, model: DomainModel, ctx: Any) -> None:
        super().__init__(model, ctx)
        self.shown: dict[str, set[str]] = {}

    def _attributes(self, obj: Any, path: str) -> list:
        out = []
        names = self.shown.setdefault(obj.id, set())
        for name, attr in obj.attributes.items():
            msgs = super()._attributes(_Only({name: attr}), path)
            if msgs:
                names.add(name)
            out += msgs
        return out


class _Only:
    def __init__(self, attributes: dict[str, Attribute]) -> None:
        self.attributes = attributes


class _AttrSink:
    """Stands in for the importer's DomainWriter: collects converted attributes per object id."""

    def __init__(self, root: Group) -> None:
        self.root = root
        self.attrs: dict[str, dict[str, Attribute]] = {}

    def set_attr(self, obj: Any, name: str, dtype: T.DType, shape: Shape, value: Any) -> None:
        self.attrs.setdefault(obj.id, {})[name] = Attribute(name, dtype, shape, value, 0.0)


class Hdf5Ingester:
    """Reads a flushed ``hdf5/<stem>.h5`` (pure: no store writes)."""

    document = True

    def __init__(self, ctx: ViewContext) -> None:
        self.ctx = ctx
        self.catalog = ctx.catalog

    def is_document(self, t: Any) -> bool:
        return t.rest == []

    def document_changes(self, t: Any, src: WrittenFile, where: str) -> DocumentChanges:
        model: DomainModel = t.model
        planner = _Planner(model, self.ctx)
        try:
            hf = planner.build()
        except (ValueError, KeyError, OverflowError) as exc:
            raise UnsupportedType(f"{where}: the view of {model.path} cannot be planned: {exc}") from exc
        h5py = _h5()
        try:
            f = h5py.File(SourceReader(src), "r")
        except (OSError, ValueError, RuntimeError) as exc:
            raise InvalidInput(f"{where}: not a readable HDF5 file ({' '.join(str(exc).split())})") from None
        with f:
            if not src.untouched(0, USER_BLOCK) and any(src.read(0, USER_BLOCK)):
                raise UnsupportedType(f"{where}: the 512-byte user block cannot be written")
            return _Diff(self, model, planner, hf, f, src, where).run()


class _Diff:
    """One flushed file against the model: structure first (refusals), then attributes, shapes, chunks."""

    def __init__(self, ing: Hdf5Ingester, model: DomainModel, planner: _Planner, hf: HDF5File, f: Any,
                 src: WrittenFile, where: str) -> None:
        self.ing = ing
        self.model = model
        self.planner = planner
        self.hf = hf
        self.f = f
        self.src = src
        self.where = where
        self.sink = _AttrSink(model.root)
        self.imp = HDF5Importer(Path(where), self.sink, None)  # type: ignore[arg-type]
        self.imp.file = f
        self.out = DocumentChanges()
        # planned chunk positions describe the writer's base file only if the model has not moved
        # since it was opened (same planned size); otherwise every chunk is read and compared
        base = getattr(src, "base", None)
        self.trust = base is None or getattr(base, "size", hf.size) == hf.size

    def refuse(self, what: str, why: str) -> UnsupportedType:
        return UnsupportedType(f"{self.where}: {what}: {why} (the HDF5 view takes chunk data, resizes and "
                               f"attributes only; nothing was stored)")

    def run(self) -> DocumentChanges:
        try:
            self.imp._walk(self.f)
        except PolyfsError as exc:
            raise InvalidInput(f"{self.where}: {exc}") from None
        self._match_objects()
        self._match_links()
        for obj in self.imp.objects.values():
            self._attributes(obj)
            if obj.kind == "dataset":
                self._dataset(obj)
            elif obj.kind == "datatype":
                self._datatype(obj)
        return self.out

    # -- structure ------------------------------------------------------------------------
    def _match_objects(self) -> None:
        seen: set[str] = set()
        for obj in self.imp.objects.values():
            if obj.path == "/":
                seen.add(self.model.root.id)
                continue
            try:
                m = self.model.resolve(obj.path)
            except NotFound:
                raise self.refuse(f"{obj.kind} {obj.path}", "new objects cannot be created") from None
            if not isinstance(m, KINDS[obj.kind]):
                raise self.refuse(obj.path, f"a {type(m).__name__.lower()} cannot become a {obj.kind}")
            if m.id in seen:
                raise self.refuse(obj.path, "hard links cannot be added")
            obj.model = m
            seen.add(m.id)
        for e in self.model.walk():
            if e.obj.id not in seen:
                raise self.refuse(e.path, "objects cannot be deleted")

    def _match_links(self) -> None:
        by_key = {k: o for k, o in self.imp.objects.items()}
        written: dict[str, dict[str, Any]] = {}
        for link in self.imp.links:
            group = by_key[link.parent].model
            written.setdefault(group.id, {})[link.name] = link
        tables = (self.model.groups, self.model.datasets, self.model.datatypes)
        for obj in self.imp.objects.values():
            if obj.kind != "group":
                continue
            g: Group = obj.model
            have = written.get(g.id, {})
            want = {n: lk for n, lk in g.links.items()
                    if not (lk.kind == "hard" and not any(lk.id in tb for tb in tables))}
            for name in sorted(set(have) | set(want)):
                path = obj.path.rstrip("/") + "/" + name
                if name not in want:
                    raise self.refuse(f"link {path}", "links cannot be added")
                if name not in have:
                    raise self.refuse(f"link {path}", "links cannot be deleted")
                a, b = have[name], want[name]
                same = a.kind == b.kind and (
                    (a.kind == "hard" and by_key[a.target].model.id == b.id)
                    or (a.kind == "soft" and a.target == (b.h5path or ""))
                    or (a.kind == "external" and a.target == (external_file(b.domain or "", self.model.path),
                                                               b.h5path or "/")))
                if not same:
                    raise self.refuse(f"link {path}", "links cannot be changed")

    # -- attributes -----------------------------------------------------------------------
    def _attributes(self, obj: _Object) -> None:
        h5obj = self.f if obj.path == "/" else self.f[obj.path]
        try:
            self.imp._copy_attrs(h5obj, obj.model, obj.path)
        except PolyfsError as exc:
            raise UnsupportedType(f"{self.where}: {exc}") from None
        got = self.sink.attrs.get(obj.model.id, {})
        shown = self.planner.shown.get(obj.model.id, set())
        have = obj.model.attributes
        change = ObjectChange(obj.model.id)
        for name, attr in got.items():
            old = have.get(name)
            if old is None or not _same_attribute(name, old, attr):
                change.set_attributes[name] = Attribute(name, attr.type, attr.shape, attr.value, now())
        change.remove_attributes = sorted(n for n in shown if n not in got)
        if not change.is_empty():
            self._object_change(change)

    def _object_change(self, change: ObjectChange) -> None:
        for c in self.out.objects:
            if c.obj_id == change.obj_id:
                c.set_attributes.update(change.set_attributes)
                c.remove_attributes += change.remove_attributes
                c.resize = change.resize if change.resize is not None else c.resize
                return
        self.out.objects.append(change)

    # -- datatypes and datasets -----------------------------------------------------------
    def _datatype(self, obj: _Object) -> None:
        got = self._type(self.f[obj.path].id, obj.path)
        if _type_json(got) != _type_json(obj.model.type):
            raise self.refuse(f"datatype {obj.path}", "a committed type cannot change")

    def _type(self, tid: Any, where: str) -> T.DType:
        try:
            return self.imp.type_of(tid, where)
        except T.UnsupportedType as exc:
            raise self.refuse(where, str(exc)) from None

    def _dataset(self, obj: _Object) -> None:
        from h5py import h5d, h5s

        ds: Dataset = obj.model
        d = self.f[obj.path]
        what = f"dataset {obj.path}"
        if _type_json(self._type(d.id.get_type(), what)) != _type_json(ds.type):
            raise self.refuse(what, "the data type cannot change")
        kind = {h5s.NULL: "null", h5s.SCALAR: "scalar"}.get(d.id.get_space().get_simple_extent_type(), "simple")
        if kind != ds.shape.kind or (kind == "simple" and len(d.shape) != ds.shape.rank):
            raise self.refuse(what, "the dataspace cannot change rank or kind")
        dp = self.hf.datasets[ds.id]
        dcpl = d.id.get_create_plist()
        chunked = dcpl.get_layout() == h5d.CHUNKED
        if chunked != dp.storage.startswith("chunked") or (chunked and tuple(d.chunks) != tuple(ds.chunks)):
            raise self.refuse(what, "the storage layout or chunk shape cannot change")
        file_filters = tuple(int(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters()))
        if file_filters != tuple(fl.id for fl in dp.filters):
            raise self.refuse(what, "the filters cannot change")
        if kind == "simple":
            dims = tuple(int(x) for x in d.shape)
            maxdims = tuple(None if m is None else int(m) for m in (d.maxshape or dims))
            want_max = ds.shape.maxdims or ds.shape.dims
            if maxdims != tuple(want_max):
                raise self.refuse(what, "the maximum shape cannot change")
            if dims != tuple(ds.shape.dims):
                self._object_change(ObjectChange(ds.id, resize=dims))
        if dp.storage == "chunked-stored":
            self._chunks(d, ds, dp, what)
        else:
            self._unchanged_data(d, dp, what)

    def _unchanged_data(self, d: Any, dp: DatasetPlan, what: str) -> None:
        """Data this slice cannot take (contiguous, converted): refused unless still as planned."""
        for blk in dp.data:
            if not self.src.untouched(self.hf.address(blk.key), blk.size):
                raise self.refuse(what, f"data of {dp.storage} datasets cannot be written")
        if dp.storage == "contiguous" and dp.data:
            if d.id.get_offset() != self.hf.address(("data", dp.ds.id)):
                raise self.refuse(what, "data of contiguous datasets cannot be written")
        elif dp.storage == "chunked-converted":
            want = _planned(self.hf, dp)
            for info in _chunk_infos(d):
                coords = tuple(o // c for o, c in zip(info.chunk_offset, dp.ds.chunks))
                if want.get(coords) != (info.byte_offset, info.size):
                    raise self.refuse(what, "data of variable-length or reference datasets cannot be written")

    def _chunks(self, d: Any, ds: Dataset, dp: DatasetPlan, what: str) -> None:
        dims = tuple(int(x) for x in d.shape)
        grid = tuple(-(-n // c) for n, c in zip(dims, ds.chunks))
        want = _planned(self.hf, dp)
        idx = dp.index
        pipe = self.ing.catalog.pipeline(ds)
        same_filters = tuple(fl.id for fl in dp.filters) == pipe.ids
        inc = Incoming(stored_dtype(ds), tuple(pipe.filters))
        present: set[tuple[int, ...]] = set()
        puts: list[tuple[tuple[int, ...], bytes]] = []
        for info in _chunk_infos(d):
            coords = tuple(int(o) // c for o, c in zip(info.chunk_offset, ds.chunks))
            if not all(c < g for c, g in zip(coords, grid)):
                continue  # HDF5 keeps no chunk past the extent; be safe
            present.add(coords)
            at = (int(info.byte_offset), int(info.size))
            if self.trust and want.get(coords) == at and self.src.untouched(*at):
                continue  # still the stored bytes: never read
            data = self.src.read(*at)
            if len(data) != at[1]:
                raise InvalidInput(f"{self.where}: {what}: chunk {list(coords)} lies past the end of the file")
            linear = idx.linear_of(coords) if idx is not None and all(
                c < g for c, g in zip(coords, idx.grid)) else -1
            if linear >= 0 and idx.size_of(linear) == len(data) and info.filter_mask == 0 and \
                    _stored(self.ing.catalog, idx.key(linear)) == data:
                continue  # rewritten with the same bytes (or a neighbour's page was written)
            try:
                if info.filter_mask == 0 and same_filters:
                    new = to_stored(ds, pipe, inc, data)
                else:
                    new = self._recode(d, ds, pipe, coords, dims)
            except (PolyfsError, ValueError, TypeError, OSError) as exc:
                kind = CodecError if isinstance(exc, CodecError) else InvalidInput
                raise kind(f"{self.where}: {what}: chunk {list(coords)}: {exc}") from None
            puts.append((coords, new))
        if puts:
            self.out.puts[ds.id] = puts
        if idx is not None and len(idx):
            coords_all = np.asarray(idx.coords_of(idx.linear)).reshape(len(idx), -1)
            gone = [tuple(int(x) for x in c) for c in coords_all
                    if all(x < g for x, g in zip(c, grid)) and tuple(int(x) for x in c) not in present]
            if gone:  # chunks outside a new extent are the resize's to delete
                self.out.deletes[ds.id] = gone

    def _recode(self, d: Any, ds: Dataset, pipe: Any, coords: tuple[int, ...], dims: tuple[int, ...]) -> bytes:
        """A chunk HDF5 stored otherwise (a skipped filter): decoded by HDF5, encoded as stored."""
        region = tuple(slice(c * k, min(c * k + k, n)) for c, k, n in zip(coords, ds.chunks, dims))
        arr = np.asarray(d[region])
        if arr.dtype.kind == "c":
            from ...importers.common import complex_as_pairs
            arr = complex_as_pairs(arr)
        dt = stored_dtype(ds)
        block = values.fill_array(ds.type, ds.fill_value, tuple(ds.chunks))
        block[tuple(slice(0, s) for s in arr.shape[:len(ds.chunks)])] = arr.astype(block.dtype, copy=False)
        raw = np.ascontiguousarray(block, dtype=dt).tobytes()
        return to_stored(ds, pipe, Incoming(dt), raw)


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


def make_ingester(ctx: ViewContext) -> Hdf5Ingester:
    return Hdf5Ingester(ctx)
