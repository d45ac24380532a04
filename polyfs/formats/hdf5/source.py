"""Import an HDF5 file: every group, dataset, committed type, attribute and link.

Chunked datasets whose filters are all in the translation table and have a
compressor (or have no filter at all, when ``--codec none`` is chosen) keep their stored chunks: ``read_direct_chunk`` bytes go into the
store unchanged, in the file's byte order (missing chunks stay missing).
Everything else is read through h5py, chunked and encoded with the chosen
encoding in the file's byte order (a dataset the
file wrote whose values are all fill keeps one chunk): contiguous, compact and virtual datasets,
uncompressed chunks, chunks with a nonzero filter mask (those keep the
dataset's own filters), variable-length data (HSDS length-prefixed chunks),
object references (rewritten to the referenced object's new id, as HSDS's
``S48`` ``"datasets/d-..."`` strings). Compounds keep their member offsets
and size (C-struct padding, as netCDF writes it) in their type; a padded one's
chunks are stored packed, as HSDS reads them (repack.py re-encodes them).

Filters outside the table are *opaque* and never a reason to refuse: their
chunks are kept byte for byte with the whole original pipeline (id,
parameters, optional flag, name), as for known compressors. A chunk stored
with a filter skipped (nonzero filter mask) is decoded by HDF5 and encoded
again with the full pipeline when HDF5 here can; when it cannot and the
skipped filters are optional (h5repack's scale-offset on an integer dataset),
the dataset is stored as HDF5 reads it, with the chosen encoding and without
them (else a SourceError naming the file, dataset and filter). Only data whose
bytes cannot be kept (e.g. variable-length) under a filter HDF5 cannot decode
is refused.

Types keep their exact HDF5 description (model/types.py): odd-size and
partial-precision integers, non-IEEE floats (long double), binary128 and
times are read as the file's own bytes (the file type as the memory type)
and stored in the file's byte order, as are fixed strings (their padding
kept); region references become HDF5/JSON region values (the dataset's new
id and the selection). External raw storage is resolved relative to the
source file's directory (``efile_prefix``), as HDF5 resolves it for a file
opened from there, and stored as ordinary chunks.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...codecs.pipeline import Pipeline
from ...codecs.registry import DEFLATE, SHUFFLE, Filter
from ...errors import InvalidInput, PolyfsError, ReadOnly, SourceError, StoreError, UnsupportedSource, UnsupportedType
from ...model import types as T
from ...model import values
from ...model.schema import Dataset, Datatype, Group, Shape
from ...model.types import REF_ITEMSIZE
from ...model.writer import DomainWriter
from ...writes.protocol import SourceReader
from . import drivers
from .filltime import fill_time_property
from .filters import LZF, h5py_with_plugins
from .repack import copy_repacked, needs_repack, packed_filters
from .region import selection_json
from .filetypes import model_type, null_vlen_strings, raw_layout_matches, raw_read_type, read_raw
from .vlenorder import fix_vlen_order
from .names import NOT_UTF8, TARGET_NOT_UTF8, bad_name, link_text
from .userblock import UserBlock, keep as keep_user_block, read_user_block
from .hints import file_tracks_attribute_order, keep_superblock_version, native_attribute_order, record_untracked_orders
from ...importers.common import (source_errors, ChunkSink, ImportOptions, Progress, chunk_region, chunks_for,
                                 complex_as_pairs, padded, stored_pipeline_filters, write_decoded)

log = logging.getLogger(__name__)

SIGNATURE = b"\x89HDF\r\n\x1a\n"


def claims(path: Path) -> bool:
    """A file with an HDF5 superblock (also after a user block, as in polyglot files)."""
    return path.is_file() and is_hdf5(path)


def is_hdf5(path: Path) -> bool:
    """The superblock signature at 0, 512, 1024, 2048, ... (after a user block)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            offset = 0
            while offset + 8 <= size:
                f.seek(offset)
                if f.read(8) == SIGNATURE:
                    return True
                offset = 512 if offset == 0 else offset * 2
    except OSError:
        return False
    return False


# -- the file's object graph -----------------------------------------------------
@dataclass
class _Link:
    parent: tuple  # key of the parent group
    name: str
    kind: str  # hard | soft | external
    target: Any = None  # key (hard), path (soft), (file, path) (external)


@dataclass
class _Object:
    kind: str  # group | dataset | datatype
    path: str  # first path found
    model: Any = None  # the writer's Group / Dataset / Datatype
    plan: Any = None  # datasets: how the data is brought in


@dataclass
class _DatasetPlan:
    copy: bool  # chunks copied as stored
    source_type: Any  # model type as in the file, and of the stored chunks (its byte order kept)
    shape: Shape
    chunks: tuple[int, ...]
    filters: list[Filter]
    fill_value: Any
    nchunks: int  # chunk objects to write (progress)
    existing_only: bool  # write only chunks the source has
    unknown: list[tuple[int, str]] = field(default_factory=list)
    repack_from: list[Filter] | None = None  # copied chunks' filters in the file, if they are repacked
    creation: dict[str, Any] = field(default_factory=dict)  # creationProperties kept as HSDS spells them


class HDF5Importer:
    def __init__(self, path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
        self.path = Path(path)
        self.writer = writer
        self.opts = opts
        self.objects: dict[tuple, _Object] = {}
        self.links: list[_Link] = []
        self.anonymous: dict[tuple, Datatype] = {}  # committed types no link reaches (type_of)
        self.file = None
        self.user_block: UserBlock | None = None  # the bytes before the superblock, kept (userblock.py)
        # where a virtual dataset's other source files are looked for (None: nowhere, a file
        # written through the view has no directory of its own)
        self.files_dir: Path | None = self.path.resolve().parent

    def err(self, what: str, cause: object) -> SourceError:
        cause = " ".join(str(cause).split())
        return SourceError(self.path, f"{what}: {cause}" if what else cause)

    def unsupported(self, what: str, cause: object) -> SourceError:
        """What the store cannot hold (a type, a filter no one here decodes): EOPNOTSUPP."""
        cause = " ".join(str(cause).split())
        return UnsupportedSource(self.path, f"{what}: {cause}")

    # -- entry ------------------------------------------------------------------
    def run(self) -> None:
        h5py = h5py_with_plugins()
        fh = None  # the file read directly, when HDF5 cannot open it by path
        try:
            try:
                f = h5py.File(self.path, "r")
            except (OSError, ValueError) as exc:
                try:
                    fh = open(self.path, "rb")
                except OSError:
                    raise self.err("", f"not a readable HDF5 file ({exc})") from None
                f = self._open_family_member(fh, exc)
            with f:
                self.user_block = self._user_block(f)
                self.run_file(f)
        finally:
            if fh is not None:
                fh.close()

    def _open_family_member(self, fh: Any, exc: BaseException) -> Any:
        """A whole family in its first member opened as one file (drivers.py), or the error
        naming the multi-file driver that wrote the file, or HDF5's own."""
        src = drivers.FileSource(fh)
        one = drivers.single_member(src)
        if one is not src:
            try:
                return h5py_with_plugins().File(SourceReader(one), "r")
            except (OSError, ValueError) as again:
                exc = again
        why = drivers.refusal(self.path.name, src.size(), src.read)
        if why is not None:
            raise (UnsupportedSource if why[1] else SourceError)(self.path, why[0]) from None
        raise self.err("", f"not a readable HDF5 file ({exc})") from None

    def _user_block(self, f) -> UserBlock | None:
        """The source file's user block (a MAT-file's header), read from its path."""
        try:
            with open(self.path, "rb") as fh:
                def read(at: int, n: int) -> bytes:
                    fh.seek(at)
                    return fh.read(n)
                return read_user_block(int(f.userblock_size or 0), read, "")
        except OSError as exc:
            raise self.err("", f"its user block cannot be read ({exc})") from None
        except UnsupportedType as exc:
            raise UnsupportedSource(self.path, str(exc).lstrip(": ")) from None
        except InvalidInput as exc:
            raise self.err("", str(exc).lstrip(": ")) from None

    def run_file(self, f) -> None:
        """Import from an open h5py File (a path, or a file object such as a file being written);
        ``self.user_block``, set by the caller, is kept with the domain (userblock.py)."""
        self.file = f
        with source_errors(lambda cause: self.err("", cause)):
            keep_superblock_version(getattr(self.writer, "root", None), f)  # rendered again (hints.py)
            keep_user_block(getattr(self.writer, "root", None), self.user_block)
            self._walk(f)
            self._plan()
            self._create()
            self._attributes()
            self._data()

    # -- pass 1: the graph --------------------------------------------------------
    @staticmethod
    def key(objid) -> tuple:
        from h5py import h5o

        info = h5o.get_info(objid)
        return (info.fileno, info.addr)

    def _walk(self, f) -> None:
        h5py = h5py_with_plugins()
        root = self.key(f.id)
        self.objects[root] = _Object("group", "/", model=self.writer.root)
        queue = [(root, f, "/")]
        while queue:
            gkey, grp, gpath = queue.pop(0)
            # h5py lists a group tracking link creation order (netCDF-4, track_order) in that
            # order, others by name: links are made (and stamped) in this order, which the HDF5
            # view gives back as their creation order
            names = list(grp)
            if bad_name(names) is not None:  # h5py's name (bytes) when it is not UTF-8
                raise self.unsupported(f"link {bad_name(names)!r} in group {gpath}", NOT_UTF8)
            for name in names:
                path = (gpath.rstrip("/") + "/" + name)
                try:
                    link = grp.get(name, getlink=True)
                except (KeyError, OSError, RuntimeError) as exc:
                    raise self.err(f"link {path}", exc) from None
                if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):  # targets as text (names.py)
                    text = link_text(grp, name)
                    if text is None:
                        raise self.unsupported(f"link {path}", TARGET_NOT_UTF8)
                    soft = isinstance(link, h5py.SoftLink)
                    self.links.append(_Link(gkey, name, "soft" if soft else "external", text[0] if soft else text))
                    continue
                if not isinstance(link, h5py.HardLink):
                    log.warning("%s: skipping user-defined link %s", self.path, path)
                    continue
                try:
                    obj = grp[name]
                except (KeyError, OSError, RuntimeError) as exc:
                    raise self.err(f"object {path}", exc) from None
                okey = self.key(obj.id)
                self.links.append(_Link(gkey, name, "hard", okey))
                if okey in self.objects:
                    continue
                if isinstance(obj, h5py.Group):
                    self.objects[okey] = _Object("group", path)
                    queue.append((okey, obj, path))
                elif isinstance(obj, h5py.Dataset):
                    self.objects[okey] = _Object("dataset", path)
                else:
                    self.objects[okey] = _Object("datatype", path)

    # -- pass 2: types and data plans -------------------------------------------------
    def dataset(self, path: str):
        """The dataset at ``path``. External raw storage is found relative to the source
        file's directory, as HDF5 resolves it for a file opened from there (not the cwd).
        A file written through the mount reaches no other files: its writer's cwd is not
        known here, and the daemon must not read files its writer named (``/etc/...``)."""
        h5py = h5py_with_plugins()
        from h5py import h5d, h5p

        d = self.file[path]
        count = d.id.get_create_plist().get_external_count()
        if count == 0:
            return d
        if self.files_dir is None:
            names = [os.fsdecode(d.id.get_create_plist().get_external(i)[0]) for i in range(count)]
            raise self.unsupported(f"dataset {path}", f"its data is in external raw files {names}: a file written "
                                                      f"here cannot reach other files; write the data inside "
                                                      f"the file (no external=), or h5repack -l CONTI it first")
        del d  # HDF5 refuses a second open with another prefix while this one is open
        dapl = h5p.create(h5p.DATASET_ACCESS)
        dapl.set_efile_prefix(os.fsencode(self.files_dir))
        return h5py.Dataset(h5d.open(self.file.id, path.encode("utf-8"), dapl=dapl))

    def type_of(self, tid, where: str) -> T.DType:
        """The model type of ``tid``; a committed type no link reaches (h5copy copies a dataset's
        committed type so; HDF5 keeps one whose link was deleted) is made an unlinked datatype,
        as HDF5 and HSDS hold it, when this import makes objects (diff.py's does not)."""
        inner = model_type(tid, where)
        if tid.committed():
            key = self.key(tid)
            obj = self.objects.get(key)
            if obj is not None and obj.kind == "datatype" and obj.model is not None:
                return T.Committed(obj.model.id, inner)
            if obj is None and isinstance(self.writer, DomainWriter):
                if key not in self.anonymous:
                    self.anonymous[key] = self.writer.add_datatype(None, None, inner)
                return T.Committed(self.anonymous[key].id, inner)
        return inner

    def _plan(self) -> None:
        # committed types first: datasets and attributes may refer to them
        for okey, obj in self.objects.items():
            if obj.kind == "datatype":
                tid = self.file[obj.path].id
                obj.model = self.writer.add_datatype(None, None, model_type(tid, f"datatype {obj.path}"))
        total = 0
        for obj in self.objects.values():
            if obj.kind == "dataset":
                obj.plan = self._plan_dataset(self.dataset(obj.path))
                total += obj.plan.nchunks
        self.total_chunks = total

    def _plan_dataset(self, d) -> _DatasetPlan:
        from h5py import h5d, h5s

        where = f"dataset {d.name}"
        tid = d.id.get_type()
        try:
            source_type = self.type_of(tid, where)
        except T.UnsupportedType as exc:
            raise self.unsupported(where, exc) from None
        space = d.id.get_space()
        stype = space.get_simple_extent_type()
        if stype == h5s.NULL:
            shape = Shape("null")
        elif stype == h5s.SCALAR:
            shape = Shape("scalar")
        else:
            dims = tuple(int(x) for x in d.shape)
            maxdims = tuple(None if m is None else int(m) for m in (d.maxshape or dims))
            shape = Shape("simple", dims, None if maxdims == dims else maxdims)
        dcpl = d.id.get_create_plist()
        layout = dcpl.get_layout()
        if layout == getattr(h5d, "VIRTUAL", -1):
            self._check_virtual(dcpl, where)
        filters: list[Filter] = []
        unknown: list[tuple[int, str]] = []
        for i in range(dcpl.get_nfilters()):
            fid, flags, cd, name = dcpl.get_filter(i)
            f = Filter(int(fid), tuple(int(c) for c in cd))
            if not f.known:  # opaque: carried exactly (id, parameters, optional flag, name)
                label = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
                f = Filter(f.id, f.cd_values, bool(flags & 1), label)
                unknown.append((f.id, label))
            filters.append(f)
        has_compressor = any(f.spec.compressor for f in filters)
        chunked = layout == h5d.CHUNKED and d.chunks is not None and shape.kind == "simple"
        raw_copy = not filters and not self.opts.encoding.filters  # --codec none
        # chunks are kept as stored with the whole pipeline, opaque filters included
        copy = chunked and (has_compressor or raw_copy) and raw_layout_matches(tid) and \
            not (unknown and needs_repack(source_type))  # repacked chunks are encoded again here
        if copy and unknown and self._skipped_for_good(d, filters, source_type, where):
            copy, filters, unknown = False, [], []  # decoded by HDF5, stored with the default encoding
        fill = None
        try:
            if dcpl.fill_value_defined() == h5d.FILL_VALUE_USER_DEFINED and not T.has_reference(source_type) \
                    and (not source_type.is_vlen or _vlen_string(source_type)):
                fv = d.fillvalue
                if np.iscomplexobj(fv):  # stored as the {r, i} compound
                    fv = (fv.real, fv.imag)
                fill = values.element_to_json(source_type, fv)
                if fill == "" and source_type.is_vlen:  # netCDF-C's default string fill: none
                    fill = None
        except (ValueError, TypeError, OSError, PolyfsError):
            fill = None
        creation = fill_time_property(dcpl)
        if copy:
            chunks = tuple(int(c) for c in d.chunks)
            repack = needs_repack(source_type)
            return _DatasetPlan(True, source_type, shape, chunks,
                                packed_filters(filters, source_type) if repack else filters, fill,
                                d.id.get_num_chunks() if shape.size else 0, True, [], filters if repack else None,
                                creation)
        # stored in the file's byte order, as copied chunks are: it is the one readers see (numpy's
        # '>f8' is refused by scipy.sparse, torch.from_numpy and pandas' dtype checks)
        dims = shape.array_shape
        if chunked:
            chunks = tuple(int(c) for c in d.chunks)
        else:
            itemsize = 16 if source_type.is_vlen else source_type.itemsize
            chunks = chunks_for(dims, itemsize, self.opts.chunks)
        new_filters = stored_pipeline_filters(self.opts, source_type, chunks)
        if shape.kind == "null":
            n = 0
        elif chunked:
            n = d.id.get_num_chunks() if shape.size else 0
        else:
            n = int(np.prod([-(-x // c) for x, c in zip(dims, chunks)])) if dims else 1
            if dims and shape.size == 0:
                n = 0
        plan = _DatasetPlan(False, source_type, shape, chunks, new_filters, fill, n, chunked, unknown,
                            creation=creation)
        if unknown and n:
            self._check_decodable(d, plan)
        return plan

    def _skipped_for_good(self, d, filters: list[Filter], source_type: T.DType, where: str) -> bool:
        """Whether HDF5 skipped an optional filter for some chunk (the filter mask) that
        cannot be applied to it here either. ``h5repack -f SOFF=3,DSCALE`` puts an optional
        scale-offset filter on every dataset, which fails (and is skipped) on every chunk of
        an integer one. The store has no per-chunk filter mask, so such a dataset is stored
        as HDF5 reads it, without those filters: its values exactly, not a refusal of the
        whole file. An optional LZF skipped is applied after all (filters.py)."""
        skipped = 0
        for _, mask, _ in self._existing_chunks(d, _GridOnly(d)):
            skipped |= int(mask)
        if not skipped:
            return False
        names = [f for i, f in enumerate(filters) if skipped >> i & 1]
        if not all(f.optional for f in names) or all(f.id == LZF for f in names):
            return False  # a mandatory filter cannot have been skipped; LZF is redone
        why = Pipeline(tuple(filters), source_type.itemsize).with_chunk(
            source_type, tuple(int(c) for c in d.chunks)).unencodable
        if why is None:
            return False
        log.info("%s: %s: optional filter %s was skipped for some chunks and cannot be applied here (%s): "
                 "stored without it", self.path.name, where, ", ".join(f.name for f in names), why)
        return True

    def _check_virtual(self, dcpl, where: str) -> None:
        """A virtual dataset is read through HDF5, which reads a mapping whose source file it
        cannot open as fill values: every source file must be there, or its data would be
        stored as fill values without a word."""
        for i in range(dcpl.get_virtual_count()):
            name = dcpl.get_virtual_filename(i)
            if name == ".":  # this file: its data is read and stored
                continue
            if self.files_dir is None:
                raise self.unsupported(where, f"a virtual dataset mapping source file {name!r}: a file written "
                                              f"here cannot reach other files (its data would read as fill "
                                              f"values); copy it with its sources resolved (h5repack -l CONTI)")
            if "%" in name:  # printf-style names (%b: the file's name) are not checked
                continue
            found = Path(name) if os.path.isabs(name) else self.files_dir / name
            if not found.is_file():
                raise self.err(where, f"virtual dataset source file {name!r} not found (looked for {found}); "
                                      f"its data would read as fill values")

    def _check_decodable(self, d, plan: _DatasetPlan) -> None:
        """Read the first stored chunk through HDF5. Only for data whose bytes cannot be
        kept (types stored differently, e.g. variable-length): a filter outside the table
        is fine if HDF5 can decode it, else the import fails naming it."""
        info = d.id.get_chunk_info(0)
        region = tuple(slice(o, min(o + c, n)) for o, c, n in zip(info.chunk_offset, plan.chunks, d.shape))
        try:
            d[region]
        except (OSError, RuntimeError, ValueError) as exc:
            ids = ", ".join(f"{fid} ({name})" if name else str(fid) for fid, name in plan.unknown)
            raise self.unsupported(f"dataset {d.name}",
                                   f"filter {ids} is not in polyfs's translation table and HDF5 cannot decode it "
                           f"({' '.join(str(exc).split())})") from None

    # -- pass 3: objects and links in the store model -------------------------------------
    def _create(self) -> None:
        w = self.writer
        for link in self.links:
            parent = self.objects[link.parent].model
            if link.kind == "soft":
                w.link_soft(parent, link.name, link.target)
            elif link.kind == "external":
                w.link_external(parent, link.name, link.target[0], link.target[1])
            else:
                obj = self.objects[link.target]
                if obj.model is not None:
                    w.link_hard(parent, link.name, obj.model)
                elif obj.kind == "group":
                    obj.model = w.add_group(parent, link.name)
                else:
                    p = obj.plan
                    layout = "H5D_CHUNKED" if p.chunks else "H5D_CONTIGUOUS"
                    obj.model = w.add_dataset(parent, link.name, p.source_type, p.shape, p.chunks or None,
                                              p.filters, p.fill_value, layout_class=layout,
                                              creation_properties=dict(p.creation) or None)

    # -- pass 4: attributes ----------------------------------------------------------
    def ref_value(self, ref) -> bytes:
        """An h5py object reference as HSDS stores it: ``b"datasets/d-..."`` (``b""`` if null)."""
        if not ref:
            return b""
        try:
            obj = self.objects.get(self.key(self.file[ref].id))
        except (KeyError, OSError, RuntimeError, ValueError, TypeError):
            obj = None
        if obj is None or obj.model is None:
            log.warning("%s: a reference to an object outside the link graph becomes null", self.path)
            return b""
        return values.ref_to_json(obj.model.id).encode("ascii")

    def region_value(self, ref) -> bytes:
        """An h5py region reference as the model keeps it: HDF5/JSON's region value
        (the dataset's new id and the selection) as JSON text; ``b""`` if null."""
        from h5py import h5r

        if not ref:
            return b""
        try:
            target = self.file[ref]
            obj = self.objects.get(self.key(target.id))
            space = h5r.get_region(ref, target.id)
        except (KeyError, OSError, RuntimeError, ValueError, TypeError):
            obj = None
        if obj is None or obj.model is None:
            log.warning("%s: a region reference to a dataset outside the link graph becomes null", self.path)
            return b""
        value = {"id": values.ref_to_json(obj.model.id), **selection_json(space)}
        return values.region_from_json(value)

    def to_model(self, arr: Any, t: T.DType) -> Any:
        """h5py's array with references replaced by their new ids (S48)."""
        arr = fix_vlen_order(arr, t)
        base = T.resolved(t)
        if isinstance(arr, np.ndarray) and arr.dtype.kind == "c":
            return complex_as_pairs(arr)
        if not T.has_reference(base):
            return arr
        arr = np.asarray(arr)
        if isinstance(base, T.ReferenceType) and base.kind == "region":
            out = np.empty(arr.shape, dtype=object)
            for i, r in enumerate(arr.flat):
                out.flat[i] = self.region_value(r)
            return out
        if isinstance(base, T.ReferenceType):
            out = np.empty(arr.shape, dtype=f"S{REF_ITEMSIZE}")
            for i, r in enumerate(arr.flat):
                out.flat[i] = self.ref_value(r)
            return out
        if isinstance(base, T.CompoundType):
            dt = np.dtype([(n, np.dtype(object) if ft.is_vlen else
                            (ft.numpy() if not T.has_reference(ft) else np.dtype(f"S{REF_ITEMSIZE}")))
                           for n, ft in base.fields])
            if any(isinstance(T.resolved(ft), (T.CompoundType, T.ArrayType)) and T.has_reference(ft)
                   for _, ft in base.fields):
                raise T.UnsupportedType("references nested inside compound or array members are not supported")
            out = np.empty(arr.shape, dtype=dt)
            for n, ft in base.fields:
                out[n] = self.to_model(arr[n], ft)
            return out
        if isinstance(base, T.ArrayType) and isinstance(T.resolved(base.base), T.ReferenceType):
            out = np.empty(arr.shape, dtype=f"S{REF_ITEMSIZE}")
            for i, r in enumerate(arr.flat):
                out.flat[i] = self.ref_value(r)
            return out
        if isinstance(base, T.VlenType) and isinstance(T.resolved(base.base), T.ReferenceType):
            out = np.empty(arr.shape, dtype=object)  # netCDF's DIMENSION_LIST: sequences of references
            for i, seq in enumerate(arr.flat):
                out.flat[i] = self.to_model(np.asarray(seq), base.base)
            return out
        raise T.UnsupportedType("references inside variable-length data are not supported")

    def _attributes(self) -> None:
        for obj in self.objects.values():
            h5obj = self.file[obj.path] if obj.path != "/" else self.file
            record_untracked_orders(h5obj, obj.model)  # its header's order kept, by name to h5py
            self._copy_attrs(h5obj, obj.model, obj.path)

    def _copy_attrs(self, h5obj, target: Group | Dataset | Datatype, opath: str) -> None:
        from h5py import h5s

        h5py = h5py_with_plugins()
        # in creation order when the object tracks it (h5py iterates H5_INDEX_CRT_ORDER then),
        # else in its header's (HDF5's native order, netCDF-C's): the model keeps this order
        names = list(h5obj.attrs)
        if bad_name(names) is not None:
            raise self.unsupported(f"attribute {bad_name(names)!r} of {opath}", NOT_UTF8)
        if len(names) > 1 and file_tracks_attribute_order(h5obj) is False:
            names = native_attribute_order(h5obj, names)
        for name in names:
            where = f"attribute {name!r} of {opath}"
            try:
                aid = h5obj.attrs.get_id(name)
                t = self.type_of(aid.get_type(), where)
                kind = aid.get_space().get_simple_extent_type()
                if kind == h5s.NULL:
                    self.writer.set_attr(target, name, t, Shape("null"), None)
                    continue
                claimed = aid.get_space().get_simple_extent_npoints() * max(1, aid.get_type().get_size())
                if claimed > self.file.id.get_filesize():  # a damaged dataspace: h5py would allocate it all
                    raise InvalidInput(f"its dataspace claims {claimed} bytes, more than the whole file holds")
                value = read_raw(aid, t) if raw_read_type(t) else h5obj.attrs[name]
                if isinstance(value, h5py.Empty):
                    self.writer.set_attr(target, name, t, Shape("null"), None)
                    continue
                arr = self.to_model(value if isinstance(value, np.ndarray) else _scalar_array(value), t)
                scalar = kind == h5s.SCALAR
                if scalar:
                    base = T.resolved(t)
                    inner = base.dims if isinstance(base, T.ArrayType) else ()
                    arr = np.asarray(arr)
                    if arr.shape != inner:
                        arr = arr.reshape(inner)
                    shape = Shape("scalar")
                    json_value = values.from_numpy(t, arr) if inner else values.element_to_json(t, arr[()])
                else:
                    dims = tuple(int(x) for x in aid.shape)
                    shape = Shape("simple", dims)
                    json_value = values.from_numpy(t, np.asarray(arr))
                json_value = _with_nulls(json_value, null_vlen_strings(aid, t))
                self.writer.set_attr(target, name, t, shape, json_value)
            except SourceError:
                raise
            except (PolyfsError, OSError, RuntimeError, ValueError, TypeError, KeyError) as exc:
                raise self.err(where, exc) from None

    # -- pass 5: data ------------------------------------------------------------------
    def _data(self) -> None:
        bar = Progress(self.total_chunks, self.path.name, self.opts.progress)
        try:
            for obj in self.objects.values():
                if obj.kind == "dataset":
                    try:
                        self._dataset_data(self.dataset(obj.path), obj.model, obj.plan, bar)
                    except (SourceError, StoreError, ReadOnly):
                        raise  # the store's own failure (full, read-only) keeps its errno
                    except PolyfsError as exc:
                        raise self.err(f"dataset {obj.path}", exc) from None
                    except Exception as exc:  # library errors while reading the data
                        raise self.err(f"dataset {obj.path}", f"{type(exc).__name__}: {exc}") from None
        finally:
            bar.close()

    def _existing_chunks(self, d, ds: Dataset):
        """(grid coords, filter mask) of the chunks the file holds, within the extent."""
        out = []

        def visit(info):
            coords = tuple(o // c for o, c in zip(info.chunk_offset, ds.chunks))
            if all(c < g for c, g in zip(coords, ds.grid)):
                out.append((coords, info.filter_mask, tuple(info.chunk_offset)))

        try:
            d.id.chunk_iter(visit)
        except AttributeError:  # pragma: no cover - h5py without chunk_iter
            for i in range(d.id.get_num_chunks()):
                visit(d.id.get_chunk_info(i))
        return out

    def _read(self, d, t: T.DType):
        raw = raw_read_type(t)

        def read(region):
            if raw:
                return read_raw(d, t, region)
            data = d[region] if region else d[()]
            if not region and (not isinstance(data, np.ndarray) or T.resolved(t).is_vlen):
                data = _scalar_array(data)  # a scalar's element (a sequence's is an ndarray)
            return self.to_model(data, t)
        return read

    def _dataset_data(self, d, ds: Dataset, plan: _DatasetPlan, bar: Progress) -> None:
        if plan.shape.kind == "null" or plan.nchunks == 0:
            return
        w = self.writer
        if plan.copy:
            with ChunkSink(w) as sink:
                if plan.repack_from is not None:  # padded compounds: stored packed
                    return copy_repacked(d, ds, plan.repack_from, plan.source_type, sink, self._existing_chunks(d, ds),
                                         self._read(d, plan.source_type), bar)
                verify = _verifier(w.pipeline(ds), ds)
                for coords, mask, offset in self._existing_chunks(d, ds):
                    if mask == 0:
                        _, data = d.id.read_direct_chunk(offset)
                        if verify is None:
                            sink.stored(ds, coords, bytes(data))
                        else:
                            sink.job(ds, coords, verify, bytes(data))
                    else:  # some filters were skipped for this chunk: decode, re-encode with all
                        why = w.pipeline(ds).unencodable
                        if why is not None:
                            raise self.unsupported(f"dataset {d.name}", f"chunk {list(coords)} was stored with a "
                                                   f"filter skipped and cannot be encoded again here: {why}")
                        part = self.to_model(np.asarray(d[chunk_region(ds, coords)]), plan.source_type)
                        sink.encoded(ds, coords, padded(ds, part))
                    bar(1)
            return
        read = self._read(d, plan.source_type)
        if plan.shape.kind == "scalar":  # its one element may itself be an array (padded() reshapes)
            with ChunkSink(w) as sink:
                sink.encoded(ds, (0,), scalar_block(ds, read(())))
            bar(1)
            return
        if plan.existing_only:
            coords = [c for c, _, _ in self._existing_chunks(d, ds)]
            write_decoded(w, ds, read, coords, skip_fill=False, progress=bar)
        elif not write_decoded(w, ds, read, None, skip_fill=True, progress=bar) and d.id.get_storage_size():
            # all fill values, but written (netCDF's fill mode, h5py's zeros): one chunk stored, so
            # the view's dataset has storage as the file's had (h5diff: "not comparable" else)
            write_decoded(w, ds, read, [(0,) * len(ds.chunks)], skip_fill=False)


def _verifier(pipe: Pipeline, ds: Dataset) -> Callable[[bytes], tuple[bytes, None]] | None:
    """What checks that a copied chunk decodes (in the sink's workers), or None when the sink
    checks it itself (deflate last: inflated for its CRC32) or nothing can. A chunk is copied
    unread, so a damaged file (a cut or overwritten blosc, bzip2, LZF... chunk, a wrong
    fletcher32 checksum) would otherwise be stored as it is and fail every later read."""
    if pipe.is_identity or pipe.ids in ((DEFLATE,), (SHUFFLE, DEFLATE)) or pipe.undecodable is not None:
        return None
    if pipe.opaque:
        pipe = pipe.with_chunk(ds.type, tuple(ds.chunks))
    nbytes = int(np.prod(ds.chunks)) * ds.type.itemsize

    def verify(data: bytes) -> tuple[bytes, None]:
        pipe.check(data, nbytes)  # CodecError (EINVAL), named with its chunk by the sink
        return data, None
    return verify


def scalar_block(ds: Dataset, arr: np.ndarray) -> np.ndarray:
    """A scalar dataset's one chunk from what :meth:`HDF5Importer._read` gives for it: a 0-d
    array holding the element, or the element itself when it is an array (array types).
    The element is put in: a 0-d object array put into another would be stored as the
    array object (its memory, a pointer), not the string or sequence it holds."""
    block = values.fill_array(ds.type, ds.fill_value, ())
    arr = complex_as_pairs(np.asarray(arr))
    if block.shape and arr.shape == block.shape:
        values.put(block, arr)
    else:
        block[()] = arr.reshape(())[()]
    return block


class _GridOnly:
    """What :meth:`HDF5Importer._existing_chunks` needs of a dataset before its model exists."""

    def __init__(self, d) -> None:
        self.chunks = tuple(int(c) for c in d.chunks)
        self.grid = tuple(-(-int(n) // c) for n, c in zip(d.shape, self.chunks))


def _scalar_array(value: Any) -> np.ndarray:
    """A 0-d array holding one h5py scalar value (str, bytes, Reference, numpy scalar)."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    out = np.empty((), dtype=object)
    out[()] = value
    return out


def import_into(path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
    HDF5Importer(path, writer, opts).run()


def _with_nulls(json_value: Any, nulls: np.ndarray | None) -> Any:
    """A string attribute's JSON value with its null pointers as ``null`` (served as null
    pointers again, which ncdump prints as ``NIL``), not as ``""``."""
    if nulls is None or not nulls.any():
        return json_value
    if nulls.ndim == 0:
        return None
    flat = iter(nulls.reshape(-1).tolist())

    def walk(v: Any) -> Any:
        return [walk(x) for x in v] if isinstance(v, list) else (None if next(flat) else v)
    return walk(json_value)


def _vlen_string(t: T.DType) -> bool:
    """A variable-length string type, whose fill value (netCDF's string ``_FillValue``) is kept."""
    base = T.resolved(t)
    return isinstance(base, T.StringType) and base.length is None
