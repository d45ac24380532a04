"""A whole domain as one HDF5 file: plan the blocks, then render the segments.

File order (all metadata first, so opening and listing touch one region):

    [user block: ``base`` bytes: polyglot files' zeros (for a TIFF header); the hdf5/ view's
     one the domain's file had (a MAT-file's header, userblock.py), else none]
    superblock 0 + root symbol table entry          <- base address (in the hdf5/ view 0 unless kept)
      (or superblock 2/3, the version the domain's file was written with: hints.py)
    object headers (version 2), in canonical tree order
    group local heaps, group B-trees, symbol table nodes
    global heap collections of attribute data
    chunk B-trees
    ---- data ----
    global heap collections of variable-length datasets
    per dataset: converted chunks (variable-length, references) or the
    stored chunk objects back to back (zero-copy ``ChunkRun``)

Per dataset the storage is chosen from the model plus chunk sizes:

- fixed-size types without references: the stored chunks as they are, under
  the EFFECTIVE filter pipeline (``catalog.pipeline``: HSDS's Blosc frames
  declared as gzip are declared as blosc here); contiguous/compact datasets
  whose one chunk is unfiltered keep a contiguous layout;
- object references: chunks converted at read time (``"groups/<id>"`` text
  to addresses), unfiltered;
- padded compounds (stored packed, as HSDS reads them): chunks converted at
  read time (members placed at their HDF5 offsets, zero padding), unfiltered,
  so every size is known from the shape without reading a chunk;
- variable-length types: chunks read and converted when the file is planned
  (heap ids), unfiltered, with their heap collections;
- scalars: a contiguous layout (HDF5 cannot chunk a scalar), the stored bytes
  if unfiltered, else decoded at read time.

Groups of up to 1024 links (and any group holding an external link) hold link
messages with their creation orders, larger ones are symbol-table groups;
attributes keep the model's order (its JSON's), which the object headers
record as their creation order (objects whose file tracked none: the order of their
header's messages only, as there, hints.py).
An object with an attribute over the 64 KiB a header message holds keeps all its
attributes in dense storage (dense.py: a fractal heap and two v2 B-trees), up to 8 MiB
an attribute and 16 MiB in all.
Anything one object cannot express (a larger attribute, a type or
value HDF5 has no spelling for, a dataset whose storage cannot be planned) is
left out with one log line naming it, with the links to it (``left_out``);
the rest of the file is unaffected. One convention is translated: HSDS writes a dimension
scale's ``CLASS`` attribute null-padded, H5DS (netCDF) wants it
null-terminated (same bytes), so the view declares it null-terminated.
A domain without dimension scales whose datasets name their dimensions in xarray's
``_ARRAY_DIMENSIONS`` (written through ``zarr/``) shows the scales netCDF-4 would
have (scales.py): shown, never stored.
"""
from __future__ import annotations

import logging
import math
import posixpath
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...codecs.pipeline import Pipeline
from ...errors import InvalidInput, PolyfsError, UnsupportedType
from ...model import types as T
from ...model import values
from ...model.chunks import ChunkIndex
from ...model.schema import Dataset, Group, Link
from ...model.tree import DomainModel
from ...vfile import ChunkRun, Produced, Segment, Stored, VFile
from ...views.transcode import TranscodedChunk
from . import dense
from . import messages as M
from .btree import ChunkBTree, Symbol, group_blocks
from .dtypes import DiskEncoder, disk_fill, disk_itemsize, fixed, has_padding, same_bytes, to_disk
from .filltime import write_time
from .layout import Block, Blob, FilePlan, blob_block
from .ncfill import shown_fill
from .scales import Synthesized, synthesize
from .hints import SUPERBLOCK_HINT, hints, tracks_attribute_order, tracks_link_order
from .names import name_bytes
from .structs import CACHE_NONE, MAX_MESSAGE, SUPERBLOCK_V0, SUPERBLOCK_V2, SUPERBLOCK_VERSIONS, SYMBOL_TABLE_ENTRY, lookup3
from .userblock import of_root
from .vlheap import GlobalHeap, vlen_chunks

log = logging.getLogger(__name__)

USER_BLOCK = 512  # polyglot files: room for a TIFF header before the superblock
MAX_LINK_MESSAGES = 60_000  # one object header holds at most 65535 messages
COMPACT_LINKS = 1024  # groups up to this size hold link messages (larger: a symbol table B-tree)
SUPERBLOCK_SIZE = SUPERBLOCK_V0.size + SYMBOL_TABLE_ENTRY.size


class HDF5File:
    """The planned file: its segments and, for tests and tools, where things are.

    The segments are rendered on first use of ``vfile``: the size is the plan's (every block's
    size is fixed before any address), so ``ls -l`` of many domains plans each file but packs
    none of its headers and B-trees."""

    def __init__(self, plan: FilePlan, datasets: dict[str, "DatasetPlan"] | None = None,
                 vfile: VFile | None = None, where: str = "") -> None:
        self.plan = plan
        self.datasets = datasets if datasets is not None else {}
        self._vfile = vfile
        self._where = where
        self._lock = threading.Lock()

    @property
    def vfile(self) -> VFile:
        if self._vfile is None:
            with self._lock:
                if self._vfile is None:
                    try:
                        vf = VFile(self.plan.render())
                    except PolyfsError:
                        raise
                    except (ValueError, KeyError, OverflowError) as exc:  # as when planned (plan_domain)
                        raise UnsupportedType(f"hdf5 view of {self._where}: {exc}") from exc
                    if vf.size != self.size:
                        raise AssertionError(f"hdf5 view of {self._where}: rendered {vf.size} bytes, "
                                             f"planned {self.size}")
                    self._vfile = vf
        return self._vfile

    @property
    def rendered(self) -> bool:
        return self._vfile is not None

    @property
    def size(self) -> int:
        """The file's size, from the plan: the user block, then every block placed."""
        return self.plan.base + self.plan.end

    def address(self, key: Any) -> int:
        """Absolute file offset of a block."""
        return self.plan.base + self.plan.address(key)


@dataclass
class DatasetPlan:
    ds: Dataset
    storage: str  # chunked-stored | chunked-converted | contiguous | none
    filters: tuple = ()
    index: ChunkIndex | None = None
    btree: ChunkBTree | None = None
    data: list[Block] = field(default_factory=list)
    fill: bytes | None = None  # the fill value as the file declares it (None: the library default, zeros)


def superblock(plan: FilePlan, root_key: Any, version: int = 0) -> Block:
    """Superblock 0 with the root's symbol table entry, or 2/3 (checksummed, the root's header
    by address): the version the domain's file was written with (:func:`superblock_version`)."""
    def render(resolve) -> bytes:
        end = plan.end if plan.eof is None else plan.eof
        if version:
            head = SUPERBLOCK_V2.pack(version=version, base_address=plan.base, eof_address=plan.base + end,
                                      root_header_address=resolve(root_key))
            return head + lookup3(head).to_bytes(4, "little")
        head = SUPERBLOCK_V0.pack(base_address=plan.base, eof_address=plan.base + end)
        entry = SYMBOL_TABLE_ENTRY.pack(name_offset=0, header_address=resolve(root_key), cache_type=CACHE_NONE)
        return head + entry

    return Block("superblock", SUPERBLOCK_V2.size + 4 if version else SUPERBLOCK_SIZE, render)


def superblock_version(model: DomainModel) -> int:
    """The superblock version the domain's file had when it was written or imported (kept in its
    root group's hints, hints.py): an SWMR writer needs 3 (``libver="latest"``) again when it
    reopens the file, netCDF-C writes 2. Other domains: 0."""
    try:
        version = hints(model.root).get(SUPERBLOCK_HINT, 0)
    except (KeyError, PolyfsError):
        return 0
    return version if version in SUPERBLOCK_VERSIONS else 0


class DomainRenderer:
    """Plans one domain's file (``build``) from its model and chunk sizes."""

    def __init__(self, model: DomainModel, ctx: Any, base: int = 0,
                 placed: dict[str, tuple[np.ndarray, Pipeline]] | None = None) -> None:
        self.model = model
        self.ctx = ctx
        self.placed = placed or {}  # dataset id -> (chunks, pipeline) whose bytes the caller places
        self.plan = FilePlan(base)
        self.token = uuid.uuid4().hex  # names this rendering in producer cache keys
        self.objects: list[tuple[str, Any]] = []  # (path, object) in file order
        self.in_file: set[str] = set()
        self.attr_heap = GlobalHeap("gheap")
        # each element of variable-length data its own heap object, never shared: HDF5 frees an
        # element's object when a writer overwrites it, which would cut its equals off
        self.data_heap = GlobalHeap("vheap", shared=False)
        self.attr_encoder = DiskEncoder(self.attr_heap, self.ref_key)
        self.data_encoder = DiskEncoder(self.data_heap, self.ref_key)
        self.datasets: dict[str, DatasetPlan] = {}
        self.messages: dict[str, list[M.Message]] = {}  # dataset id -> its messages (attributes apart)
        self.left_out: dict[str, str] = {}  # object id -> why the file does not show it
        self._synth: Synthesized | None = None

    def synthesized(self) -> Synthesized:
        """Dimension scales shown for ``_ARRAY_DIMENSIONS`` (scales.py), with their dimension-only
        datasets; none in polyglot files (one dataset, chunks placed by the caller)."""
        if self._synth is None:
            self._synth = Synthesized() if self.placed else synthesize(self.model)
        return self._synth

    def ref_key(self, obj_id: str | None):
        return ("oh", obj_id) if obj_id and obj_id in self.in_file else None

    # -- the walk -----------------------------------------------------------------------
    def _collect(self) -> None:
        for entry in self.model.walk():
            self.objects.append((entry.path, entry.obj))
            self.in_file.add(entry.obj.id)
        rest = [o for table in (self.model.datatypes, self.model.datasets, self.model.groups)
                for o in table.values() if o.id not in self.in_file]
        for obj in sorted(rest, key=lambda o: o.id):  # unlinked objects (anonymous types, referenced datasets)
            self.objects.append((f"<{obj.id}>", obj))
            self.in_file.add(obj.id)
        for path, oid in self.synthesized().paths().items():  # shown only (scales.py)
            self.objects.append((path, self.synthesized().dim_only[oid][2]))
            self.in_file.add(oid)

    def _refcounts(self) -> dict[str, int]:
        counts = {oid: 0 for oid in self.in_file}
        for _, obj in self.objects:
            if isinstance(obj, Group):
                for link in obj.links.values():
                    if link.kind == "hard" and link.id in counts:
                        counts[link.id] += 1
        for oid in self.synthesized().dim_only:
            counts[oid] = 1
        root = self.model.domain.root
        counts[root] = max(1, counts.get(root, 0))
        return counts

    # -- build ----------------------------------------------------------------------------
    def build(self) -> HDF5File:
        p = self.layout()
        return HDF5File(p, self.datasets, where=self.model.path)

    def layout(self) -> FilePlan:
        """Every block planned and placed (rendering is left to the caller)."""
        self._collect()
        self._drop_unshowable()
        self._plan_datasets()
        refcounts = self._refcounts()
        headers: list[Block] = []
        groups: list[Block] = []
        for path, obj in self.objects:
            msgs: list[M.Message] = []
            if isinstance(obj, Group):
                msgs += self._group_messages(obj, path, groups)
            elif isinstance(obj, Dataset):
                msgs += self.messages[obj.id]
            else:
                msgs.append(M.datatype(T.resolved(obj.type)))
            attrs = self._attributes(obj, path)
            info = None
            tracked = tracks_attribute_order(obj)  # else the header's order, by name to h5py (hints.py)
            if any(m.size > MAX_MESSAGE for m in attrs):  # every attribute in dense storage
                if not tracked:  # which numbers them: by name, as h5py lists an untracked object's
                    attrs = sorted(attrs, key=lambda m: m.name.encode("utf-8", "surrogateescape"))
                stored = dense.dense_attributes(obj.id, [(m.name, m.body) for m in attrs])
                info, attrs = stored.info, []
                groups.extend(stored.blocks)
            headers.append(blob_block(("oh", obj.id), M.object_header(msgs + attrs, refcounts.get(obj.id, 1), info,
                                                                      tracked)))
        p = self.plan
        version = 0 if self.placed else superblock_version(self.model)  # polyglot files: 0
        p.add(superblock(p, ("oh", self.model.domain.root), version))
        p.extend(headers)
        p.extend(groups)
        p.extend(self.attr_heap.blocks())
        for dp in self.datasets.values():
            if dp.btree is not None and not dp.btree.empty:
                p.add(dp.btree.block())
        p.extend(self.data_heap.blocks(metadata=False))
        for dp in self.datasets.values():
            p.extend(dp.data)
        p.assign()
        return p

    # -- groups -----------------------------------------------------------------------------
    def _shown_links(self, g: Group, path: str) -> list[Link]:
        """The links of ``g`` the file can show (in name order); the others are logged."""
        links = []
        shown = dict(g.links)
        shown.update({lk.name: lk for lk in self.synthesized().links(path) if lk.id in self.in_file})
        for n in sorted(shown):
            link = shown[n]
            if link.kind == "hard" and link.id in self.left_out:
                continue  # its object is left out (logged once, with the reason)
            if link.kind == "hard" and self.ref_key(link.id) is None:
                log.error("hdf5 view of %s: hard link %r of %s left out: object %s is not in the domain",
                          self.model.path, n, path, link.id)
                continue
            links.append(link)
        external = any(link.kind == "external" for link in links)
        if external and len(links) > MAX_LINK_MESSAGES:
            log.error("hdf5 view of %s: the external links of %s are left out: a group of %d links holding "
                      "external links cannot be written as link messages", self.model.path, path, len(links))
            links = [link for link in links if link.kind != "external"]
        return links

    def _group_messages(self, g: Group, path: str, out: list[Block]) -> list[M.Message]:
        links = self._shown_links(g, path)
        if len(links) <= COMPACT_LINKS or any(link.kind == "external" for link in links):
            # link messages in the header, each with its creation order (links in the order they
            # were made): netCDF-4 opens a file for writing only when every group tracks it. A
            # group that did not track it (h5py's) tracks none: HDF5 lists its links by name (and
            # in the header's order, pyfive's, as made). Its links keep their numbers: diff.py tells
            # a link kept from one HDF5 made again by them (made again, a link has none)
            ordered = sorted(links, key=lambda lk: (lk.created, lk.name))
            msgs = [M.link_info(len(ordered) if tracks_link_order(g) else None), M.group_info()]
            for order, link in enumerate(ordered):
                msgs.append(self._link_message(link, order))
            return msgs
        symbols = []
        for link in links:
            name = name_bytes(link.name)
            if link.kind == "hard":
                symbols.append(Symbol(name, target=self.ref_key(link.id)))
            else:
                symbols.append(Symbol(name, value=name_bytes(link.h5path or "")))
        tree, heap, blocks = group_blocks(g.id, symbols)
        out.extend(blocks)
        return [M.symbol_table(tree, heap)]

    def _link_message(self, link: Link, order: int) -> M.Message:
        if link.kind == "hard":
            return M.link(link.name, "hard", target=self.ref_key(link.id), order=order)
        if link.kind == "soft":
            return M.link(link.name, "soft", path=link.h5path or "", order=order)
        return M.link(link.name, "external", path=link.h5path or "/",
                      file=external_file(link.domain or "", self.model.path), order=order)

    # -- attributes -------------------------------------------------------------------------
    def _attributes(self, obj: Any, path: str) -> list[M.Message]:
        out = []
        for name, attr in self.synthesized().shown(obj.id, obj.attributes, self.in_file).items():
            attr = shown_fill(obj, name, attr)  # of its variable's type, as netCDF requires
            try:
                t = attr.type
                if isinstance(t, T.Committed) and t.id not in self.in_file:
                    t = t.type
                t = dimension_scale_class(name, t, attr.value)
                if attr.shape.kind == "null":
                    data = Blob()
                else:
                    arr = null_strings(attr, values.to_numpy(attr.type, attr.shape, attr.value))
                    data = self.attr_encoder.encode(attr.type, arr)
                msg = M.attribute(name, t, attr.shape, data)
                if msg.size > MAX_MESSAGE:
                    dense.block_size([msg.size])  # one the object's dense storage can hold
                out.append(msg)
            except (UnsupportedType, InvalidInput) as exc:
                log.error("hdf5 view of %s: attribute %r of %s left out: %s", self.model.path, name, path, exc)
        if any(m.size > MAX_MESSAGE for m in out):
            try:
                dense.block_size([m.size for m in out])
            except dense.DenseTooLarge:  # keep the large ones that fit beside the others, in order
                sizes = [m.size for m in out if m.size <= MAX_MESSAGE]
                kept = []
                for m in out:
                    if m.size > MAX_MESSAGE:
                        try:
                            dense.block_size(sizes + [m.size])
                        except dense.DenseTooLarge as exc:
                            log.error("hdf5 view of %s: attribute %r of %s left out: %s bytes, over the %d an "
                                      "object header message holds, and %s", self.model.path, m.name, path,
                                      m.size, MAX_MESSAGE, exc)
                            continue
                        sizes.append(m.size)
                    kept.append(m)
                out = kept
        return out

    # -- what the file cannot show ---------------------------------------------------------------
    def _leave_out(self, obj: Any, path: str, why: object) -> None:
        """Leave one object (and the links to it) out of the file, with one log line."""
        kind = "dataset" if isinstance(obj, Dataset) else "datatype"
        log.error("hdf5 view of %s: %s %s left out: %s", self.model.path, kind, path, why)
        self.left_out[obj.id] = str(why)
        self.in_file.discard(obj.id)
        self.objects = [(p, o) for p, o in self.objects if o.id != obj.id]

    def _drop_unshowable(self) -> None:
        """Datasets and committed types whose type HDF5 cannot spell here, before anything
        refers to them (a committed type left out takes the objects using it along)."""
        typed = [(p, o) for p, o in self.objects if not isinstance(o, (Group, Dataset))]
        typed += [(p, o) for p, o in self.objects if isinstance(o, Dataset)]
        for path, obj in typed:
            if self.placed:
                continue
            try:
                t = obj.type
                if isinstance(t, T.Committed) and t.id in self.left_out:
                    raise UnsupportedType(f"its committed type {t.id} is left out")
                M.datatype(T.resolved(t))
                disk_itemsize(t)
            except (UnsupportedType, InvalidInput) as exc:
                self._leave_out(obj, path, exc)

    # -- datasets -----------------------------------------------------------------------------
    def _plan_datasets(self) -> None:
        """Every dataset's storage and messages; one that fails is left out and the others
        are planned again without it (they may refer to it; its heap objects go too)."""
        while True:
            failed = self._plan_datasets_once()
            if failed is None:
                return
            path, ds, exc = failed
            self._leave_out(ds, path, exc)
            self.data_heap = GlobalHeap("vheap", shared=False)
            self.data_encoder = DiskEncoder(self.data_heap, self.ref_key)
            self.datasets.clear()
            self.messages.clear()

    def _plan_datasets_once(self) -> tuple[str, Dataset, Exception] | None:
        order = [(path, obj) for path, obj in self.objects if isinstance(obj, Dataset)]
        if self.placed:
            for path, ds in order:
                self.datasets[ds.id] = self._plan_placed(ds, *self.placed[ds.id])
                self.messages[ds.id] = self._dataset_messages(self.datasets[ds.id], path)
            return None
        catalog = self.ctx.catalog
        shown_only = self.synthesized().dim_only
        for path, ds in order:
            if ds.id in shown_only:  # a dimension-only dataset: no data, nothing stored
                self.datasets[ds.id] = DatasetPlan(ds, "contiguous")
                self.messages[ds.id] = self._dataset_messages(self.datasets[ds.id], path)
        order = [(path, ds) for path, ds in order if ds.id not in shown_only]
        # one bulk listing for every dataset's chunks, then the pipelines (a 16-byte sniff each)
        catalog.prefetch_chunk_indexes([ds for _, ds in order if ds.shape.kind in ("simple", "scalar")])
        if len(order) > 1 and _remote(catalog.store):  # sniffs are round trips: overlap them
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(catalog.pipeline, [ds for _, ds in order]))
        for path, ds in order:
            if ds.id in self.datasets:
                continue
            try:
                dp = self._plan_dataset(ds)
                self.messages[ds.id] = self._dataset_messages(dp, path)
            except (InvalidInput, ValueError, OverflowError) as exc:  # a dataset the format cannot hold
                return path, ds, exc
            self.datasets[ds.id] = dp
        return None

    def _plan_dataset(self, ds: Dataset) -> DatasetPlan:
        catalog = self.ctx.catalog
        if ds.shape.kind == "null":
            return DatasetPlan(ds, "none")
        idx = catalog.chunk_index(ds)
        pipe = catalog.pipeline(ds)
        ok = idx.sizes > 0  # an empty object cannot be a chunk: treat it as missing
        if not ok.all():
            idx = ChunkIndex(idx.dataset_id, idx.prefix, idx.grid, idx.linear[ok], idx.sizes[ok])
        if ds.shape.kind == "scalar":
            return self._plan_scalar(ds, idx, pipe)
        if ds.type.is_vlen:
            return self._plan_vlen(ds, idx)
        if T.has_reference(ds.type):
            return self._plan_converted(ds, idx, lambda key, count, resolve: self._ref_chunk(ds, pipe, key, count,
                                                                                             resolve))
        if has_padding(ds.type):
            return self._plan_converted(ds, idx, lambda key, count, resolve: _disk_chunk(ds, pipe, key, count))
        nbytes = math.prod(ds.shape.dims) * ds.type.itemsize
        if ds.layout_class in ("H5D_CONTIGUOUS", "H5D_COMPACT") and pipe.is_identity and ds.shape.maxdims is None \
                and (len(idx) == 0 or (len(idx) == 1 and int(idx.sizes[0]) == nbytes)):
            data = []
            if len(idx):
                data = [Block(("data", ds.id), nbytes, lambda r, k=idx.key(int(idx.linear[0])): [Stored(k, 0, nbytes)],
                              metadata=False)]
            return DatasetPlan(ds, "contiguous", index=idx, data=data)
        run = ChunkRun(idx, idx.linear, idx.sizes)
        btree = ChunkBTree(("cbtree", ds.id), idx.grid, ds.chunks, idx.linear, idx.sizes, ("data", ds.id),
                           run.item_offsets())
        data = [Block(("data", ds.id), run.length, lambda r, run=run: [run], metadata=False)] if len(idx) else []
        return DatasetPlan(ds, "chunked-stored", tuple(pipe.filters), idx, btree, data)

    def _plan_placed(self, ds: Dataset, linear: np.ndarray, pipe: Pipeline) -> DatasetPlan:
        """Chunks at addresses the caller chooses later (polyglot files): only the B-tree is planned."""
        if ds.shape.kind != "simple" or not same_bytes(ds.type):
            raise UnsupportedType(f"dataset {ds.id}: only chunked datasets of fixed-size types without "
                                  f"references can have caller-placed chunks")
        n = len(linear)
        btree = ChunkBTree(("cbtree", ds.id), ds.grid, ds.chunks, np.asarray(linear, np.int64),
                           np.ones(n, np.int64), None, np.zeros(n, np.int64))
        return DatasetPlan(ds, "chunked-stored", tuple(pipe.filters), None, btree, [])

    def _plan_scalar(self, ds: Dataset, idx: ChunkIndex, pipe: Pipeline) -> DatasetPlan:
        size = disk_itemsize(ds.type)
        if not len(idx):
            return DatasetPlan(ds, "contiguous", index=idx)
        key = idx.key(int(idx.linear[0]))
        stored = int(idx.sizes[0])
        if ds.type.is_vlen:
            (_, blob), = vlen_chunks(ds, self.ctx, self.data_encoder)
            block = Block(("data", ds.id), len(blob), blob.render, metadata=False)
        elif T.has_reference(ds.type):
            block = Block(("data", ds.id), size, lambda r: [Produced(self._ref_chunk(ds, pipe, key, 1, r))],
                          metadata=False)
        elif pipe.is_identity and stored == size:
            block = Block(("data", ds.id), size, lambda r: [Stored(key, 0, size)], metadata=False)
        elif has_padding(ds.type):
            block = Block(("data", ds.id), size, lambda r: [Produced(_disk_chunk(ds, pipe, key, 1))], metadata=False)
        else:
            producer = TranscodedChunk(key, pipe, ds.type.itemsize, ("hdf5-raw",), encode=bytes, length=size)
            block = Block(("data", ds.id), size, lambda r: [Produced(producer)], metadata=False)
        return DatasetPlan(ds, "contiguous", index=idx, data=[block])

    def _plan_vlen(self, ds: Dataset, idx: ChunkIndex) -> DatasetPlan:
        chunks = vlen_chunks(ds, self.ctx, self.data_encoder)
        blob = Blob()
        offsets = []
        for _, b in chunks:
            offsets.append(blob.extend(b))
        sizes = np.asarray([len(b) for _, b in chunks], dtype=np.int64)
        data = [Block(("data", ds.id), len(blob), blob.render, metadata=False)] if len(blob) else []
        if _one_piece(ds):
            return DatasetPlan(ds, "contiguous", (), idx, None, data)
        btree = ChunkBTree(("cbtree", ds.id), idx.grid, ds.chunks, idx.linear, sizes, ("data", ds.id),
                           np.asarray(offsets, dtype=np.int64))
        return DatasetPlan(ds, "chunked-converted", (), idx, btree, data)

    def _plan_converted(self, ds: Dataset, idx: ChunkIndex, chunk: Any) -> DatasetPlan:
        """Chunks converted at read time into their disk bytes (``chunk(key, count, resolve)``
        makes one's producer), unfiltered: each is the chunk's element count times the disk
        element size, known without reading it."""
        count = math.prod(ds.chunks)
        size = count * disk_itemsize(ds.type)
        n = len(idx)
        offsets = np.arange(n, dtype=np.int64) * size
        btree = ChunkBTree(("cbtree", ds.id), idx.grid, ds.chunks, idx.linear, np.full(n, size, np.int64),
                           ("data", ds.id), offsets)

        def render(resolve) -> list[Segment]:
            return [Produced(chunk(idx.key(int(lin)), count, resolve)) for lin in idx.linear]

        data = [Block(("data", ds.id), n * size, render, metadata=False)] if n else []
        if _one_piece(ds):
            return DatasetPlan(ds, "contiguous", (), idx, None, data)
        return DatasetPlan(ds, "chunked-converted", (), idx, btree, data)

    def _ref_chunk(self, ds: Dataset, pipe: Pipeline, key: str, count: int, resolve) -> TranscodedChunk:
        """A chunk holding references: model text -> object header addresses, at read time."""
        dt = ds.type.numpy()
        base = dt.subdtype[0] if dt.subdtype is not None else dt
        encoder = self.data_encoder

        def convert(raw: bytes) -> bytes:
            arr = np.frombuffer(raw, dtype=base)
            return encoder.encode(ds.type, arr).render(resolve)

        return TranscodedChunk(key, pipe, count * ds.type.itemsize, ("hdf5-refs", self.token), encode=bytes,
                               transform=convert, length=count * disk_itemsize(ds.type))

    def _vlen_fill(self, ds: Dataset) -> Blob | None:
        """A variable-length string's fill value as HDF5 keeps it (a heap id, its text in a
        heap object of its own), so HDF5 fills what a writer leaves unwritten with it (netCDF-C's string
        ``_FillValue``; without it netCDF sees ``_NoFill``). Sequences keep the default."""
        base = T.resolved(ds.type)
        if not (isinstance(base, T.StringType) and base.length is None):
            return None
        return self.data_encoder.encode(ds.type, values.fill_array(ds.type, ds.fill_value, ()).reshape(1))

    def _dataset_messages(self, dp: DatasetPlan, path: str) -> list[M.Message]:
        ds = dp.ds
        t = ds.type
        if isinstance(t, T.Committed) and t.id not in self.in_file:
            t = t.type
        msgs = [M.dataspace(ds.shape), M.datatype(t)]
        fill = None
        shown: bytes | Blob | None = None
        if ds.fill_value is not None:
            try:
                if fixed(ds.type):
                    shown = fill = disk_fill(ds.type, ds.fill_value)
                else:
                    shown = self._vlen_fill(ds)
            except (InvalidInput, UnsupportedType, ValueError, TypeError) as exc:
                log.error("hdf5 view of %s: fill value of %s left out: %s", self.model.path, path, exc)
        dp.fill = fill
        chunked = dp.storage.startswith("chunked")
        msgs.append(M.fill_value(shown, chunked, write_time(ds.creation_properties)))
        if chunked:
            key = None if dp.btree is None or dp.btree.empty else dp.btree.key
            msgs.append(M.layout_chunked(key, ds.chunks, disk_itemsize(ds.type)))
            if dp.filters:
                msgs.append(M.filter_pipeline(dp.filters))
        else:
            size = 0 if ds.shape.kind == "null" else ds.shape.size * disk_itemsize(ds.type)
            msgs.append(M.layout_contiguous(("data", ds.id) if dp.data else None, size))
        return msgs


def dimension_scale_class(name: str, t: T.DType, value: Any) -> T.DType:
    """HSDS (h5pyd) writes a dimension scale's ``CLASS`` as a null-padded string;
    libhdf5's H5DS, and so netCDF, only recognise a null-terminated one (the
    bytes are the same: "DIMENSION_SCALE" and its NUL fill the 16 bytes)."""
    if name == "CLASS" and isinstance(t, T.StringType) and t.length is not None and t.pad == "nullpad" \
            and value in ("DIMENSION_SCALE", ["DIMENSION_SCALE"]) and t.length > len("DIMENSION_SCALE"):
        return T.StringType(t.length, t.charset, "nullterm")
    return t


def _disk_chunk(ds: Dataset, pipe: Pipeline, key: str, count: int) -> TranscodedChunk:
    """A stored (packed) chunk of a padded compound in its disk layout, at read time."""
    return TranscodedChunk(key, pipe, count * ds.type.itemsize, ("hdf5-disk",), encode=bytes,
                           transform=lambda raw, t=ds.type: to_disk(t, raw), length=count * disk_itemsize(ds.type))


def _remote(store: Any) -> bool:
    return not str(getattr(store, "url", "")).startswith(("file://", "memory://"))


def _one_piece(ds: Dataset) -> bool:
    """A contiguous/compact dataset (one chunk covering the shape) whose converted
    bytes keep a contiguous layout, as in the file it came from."""
    return ds.layout_class in ("H5D_CONTIGUOUS", "H5D_COMPACT") and ds.shape.maxdims is None \
        and tuple(ds.chunks) == tuple(ds.shape.dims)


def external_file(domain: str, here: str) -> str:
    """The file name an external link names: a relative name stays as it is; an
    absolute domain path becomes the path of its HDF5 view file relative to
    this one's directory (both live under ``MNT/hdf5/``)."""
    if not domain.startswith("/"):
        return domain
    from ...views.root import view_parts
    from . import FORMAT

    target = "/".join(view_parts(FORMAT.suffix, FORMAT.keeps_names, domain))
    here_dir = posixpath.dirname("/".join(view_parts(FORMAT.suffix, FORMAT.keeps_names, here)))
    return posixpath.relpath(target, here_dir or ".")


class Planner(DomainRenderer):
    """The view's own plan, also recording the attributes and links it shows (those an object
    header cannot hold are absent from the file and must not read as deleted). The view plans
    its files with it, so a file written back is compared with the very plan its writer opened
    (diff.py), even when the domain changed meanwhile."""

    def __init__(self, model: DomainModel, ctx: Any) -> None:
        block = of_root(model.groups.get(model.domain.root or ""), model.path)  # a MAT-file's header
        super().__init__(model, ctx, block.size if block else 0)
        self.plan.head = block.data if block else b""
        self.shown: dict[str, set[str]] = {}
        self.links_shown: dict[str, set[str]] = {}
        self.link_order: dict[tuple[str, str], int] = {}  # (group id, link name) -> creation order
        self._group = ""

    def _attributes(self, obj: Any, path: str) -> list:
        out = super()._attributes(obj, path)
        self.shown.setdefault(obj.id, set()).update(m.name for m in out)
        return out

    def _shown_links(self, g: Group, path: str) -> list[Link]:
        links = super()._shown_links(g, path)
        self.links_shown[g.id] = {lk.name for lk in links}
        return links

    def _group_messages(self, g: Group, path: str, out: list) -> list:
        self._group = g.id
        return super()._group_messages(g, path, out)

    def _link_message(self, link: Link, order: int) -> Any:
        self.link_order[(self._group, link.name)] = order  # the creation order the file gives it
        return super()._link_message(link, order)


def render_domain(model: DomainModel, ctx: Any, base: int = 0) -> HDF5File:
    """The domain's HDF5 file (plans, reads chunk data only for variable-length datasets).

    The superblock is at 0 (``base``): readers that find it past a user block
    do not all keep its address (pyfive 1.3 opening a path does not)."""
    try:
        return DomainRenderer(model, ctx, base).build()
    except PolyfsError:
        raise
    except (ValueError, KeyError, OverflowError) as exc:  # a model the format cannot hold
        raise UnsupportedType(f"hdf5 view of {model.path}: {exc}") from exc


def plan_domain(model: DomainModel, ctx: Any) -> tuple[Planner, HDF5File]:
    """The view's file of the domain and the plan that made it, kept with the file so that a
    writer's file is compared with what it opened (the planner's working state is dropped)."""
    planner = Planner(model, ctx)
    try:
        hf = planner.build()
    except PolyfsError:
        raise
    except (ValueError, KeyError, OverflowError) as exc:  # a model the format cannot hold
        raise UnsupportedType(f"hdf5 view of {model.path}: {exc}") from exc
    planner.objects, planner.messages = [], {}
    return planner, hf


__all__ = ["HDF5File", "DatasetPlan", "DomainRenderer", "Planner", "plan_domain", "render_domain",
           "external_file"]


def null_strings(attr: Any, arr: np.ndarray) -> np.ndarray:
    """A variable-length string attribute's ``null`` elements as None (served as null
    pointers, netCDF's ``NIL``; the JSON-to-numpy step makes them ``""``)."""
    t = T.resolved(attr.type)
    if not (isinstance(t, T.StringType) and t.length is None and arr.dtype.kind == "O"):
        return arr
    if attr.value is None or (attr.shape.kind == "scalar" and attr.value in (None, [None])):
        out = arr.copy()
        out[()] = None
        return out
    flat = _flat(attr.value, arr.ndim) if isinstance(attr.value, list) else []
    if None not in flat or len(flat) != arr.size:
        return arr
    out = arr.copy()
    for i, v in enumerate(flat):
        if v is None:
            out.flat[i] = None
    return out


def _flat(value: Any, rank: int) -> list:
    if rank == 0 or not isinstance(value, list):
        return [value]
    return [x for v in value for x in _flat(v, rank - 1)]
