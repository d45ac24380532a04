"""The N5 view: ``MNT/n5/<stem>.n5/``, one N5 container per domain (read-only).

Groups are directories with an ``attributes.json`` (the root's carries
``"n5": "4.0.0"``, which z5py requires); datasets are directories whose
``attributes.json`` holds ``dimensions``/``blockSize`` (reversed: N5 lists
the fastest dimension first), ``dataType``, ``compression`` and the HDF5
attributes (JSON as in hdmf.py; an attribute named like an N5 key is left
out, and so are ``units``/``axes``/``resolution`` unless they have the
per-axis form N5 readers interpret, which tensorstore enforces, or a writer
of this view put them in ``attributes.json`` in their form: that is read back
as written, kept in the dataset's view hints as ``spec.HINT_AXIS_ATTRS``). Blocks are files at the reversed chunk-grid position
(``<ds>/k/j/i``): the default-mode header (mode 0, ndim, the FULL block
dims, big-endian) and the payload. No transpose is ever needed: N5's block
payload is the C-order chunk. A block crossing the dataset's edge is served
cropped to it, as n5-java and z5py write them (transcoded: decoded, cropped,
encoded again with the dataset's N5 compression): z5py's read-modify-write of
part of an edge block assumes that size, and scrambles a padded one.

Types: u/int 8-64 and float32/64; bool as ``uint8`` (the stored bytes are
0/1); HDF5 array types add (reversed, leading) dimensions; a scalar is a
1-element 1-D dataset. Everything else (float16, strings, compounds,
references, ...) is not shown (N5 has no such types).

Payloads (chunkserve.py recipes):

- **zero-copy** when the stored data is big-endian (or single-byte) and its
  pipeline is one N5 compression: none (``raw``), ``zstd``, ``blosc`` (only
  cname/clevel/shuffle/blocksize, which N5 readers insist on), ``bzip2``
  (tensorstore and z5py; zarr-n5 has no bzip2), and deflate.
- **deflate** is served as ``{"type": "gzip", "level": L}``: a gzip member
  spliced from the stored zlib stream (header + raw deflate + CRC32/ISIZE
  from polyfs's CRC table). ``useZlib: true`` would serve the zlib stream
  untouched to tensorstore and z5py, but zarr-n5 ignores ``useZlib`` and
  would fail; the splice costs 8 computed bytes per block and every reader
  reads it. A dataset whose writer declared ``useZlib: true`` through this
  view (``spec.HINT_ZLIB`` in its view hints) is served as declared: the
  stored zlib stream untouched, which that writer's open handle expects.
  A writer's ``compression`` object that reads the same blocks but is spelled
  otherwise (tensorstore's gzip ``"level": -1``) is shown as written
  (``spec.HINT_COMPRESSION``): tensorstore re-reads it at a resize and refuses
  any difference.
- **transcoded** to ``raw`` big-endian (size known from the block shape, so
  listing and ``stat`` never read chunk data) when the stored data is
  little-endian or its pipeline has no N5 spelling (shuffle, fletcher32,
  several filters).

N5 has no fill value (readers return 0 for absent blocks): absent chunks
are absent blocks when the fill value is all zero bytes, otherwise every
absent chunk is a block of the fill value encoded with the dataset's N5
compression (computed once per dataset from the model).
"""
from __future__ import annotations

import bz2
import gzip
import json
import logging
import math
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping

import numpy as np

from ...codecs import uncompressed as plain
from ...model import values
from ...model.editor import is_implicit
from ...model.schema import Dataset, Group
from ...model.tree import DomainModel
from ...model.types import ArrayType, EnumType, FloatType, IntType, resolved
from ...vfile import Literal, VFile
from ...views import chunkserve as cs
from ...views import hdmf
from ...views.gridtree import coord_tree
from . import FORMAT
from .spec import (HINT_AXIS_ATTRS, HINT_COMPRESSION, HINT_ZLIB, META, N5_KEYS, N5_VERSION, block_header,
                   compression_for, data_type_name, declared_compression, group_skip, not_per_axis)
from ...views.base import DirNode, FileNode, Node, ViewContext

log = logging.getLogger(__name__)

SUFFIX = FORMAT.suffix
SKIP_ATTRS = hdmf.RESERVED + N5_KEYS
# -- what a dataset becomes ---------------------------------------------------------------
def element_type(t: Any) -> tuple[np.dtype, tuple[int, ...]] | None:
    """(stored numpy element dtype, extra trailing dims) of an N5-able type, else None."""
    t = resolved(t)
    inner: tuple[int, ...] = ()
    if isinstance(t, ArrayType):
        inner, t = tuple(t.dims), resolved(t.base)
    if isinstance(t, EnumType):
        if not t.is_bool:
            t = t.base
    elif not isinstance(t, (IntType, FloatType)):
        return None
    dt = t.numpy()
    if data_type_name(dt) is None:
        return None
    return dt, inner


def encode_block(compression: dict, raw: bytes, dtype: np.dtype) -> bytes:
    """Encode one block payload with an N5 compression (used for fill blocks only)."""
    kind = compression["type"]
    if kind == "raw":
        return raw
    if kind == "gzip":
        level = compression.get("level", 6)
        level = level if 0 <= level <= 9 else 6
        return zlib.compress(raw, level) if compression.get("useZlib") else gzip.compress(raw, level, mtime=0)
    if kind == "bzip2":
        return bz2.compress(raw, int(compression.get("blockSize", 9)))
    import numcodecs

    if kind == "zstd":
        return bytes(numcodecs.Zstd(level=int(compression.get("level", 3))).encode(raw))
    if kind == "blosc":
        codec = numcodecs.Blosc(cname=compression["cname"], clevel=int(compression["clevel"]),
                                shuffle=int(compression["shuffle"]), blocksize=int(compression.get("blocksize", 0)))
        return bytes(codec.encode(np.frombuffer(raw, dtype=dtype)))
    raise ValueError(f"no encoder for N5 compression {kind!r}")


# N5 compression -> its uncompressed mode (codecs/uncompressed.py): the stream of a payload,
# and its size from the payload's. bzip2 has none.
_PLAIN: dict[str, tuple[Callable[[bytes, dict, int], bytes], Callable[[int, dict], int]]] = {
    "raw": (lambda raw, c, n: raw, lambda size, c: size),
    "zstd": (lambda raw, c, n: plain.zstd_raw(raw), lambda size, c: plain.zstd_raw_size(size)),
    "gzip": (lambda raw, c, n: (plain.zlib_stored if c.get("useZlib") else plain.gzip_stored)(raw),
             lambda size, c: (plain.zlib_stored_size if c.get("useZlib") else plain.gzip_stored_size)(size)),
    "blosc": (lambda raw, c, n: plain.blosc_memcpy(raw, n, c["cname"], int(c["shuffle"])),
              lambda size, c: plain.blosc_memcpy_size(size)),
}


def plain_block(compression: dict, itemsize: int) -> Callable[[bytes], bytes] | None:
    """How a payload the view makes is served under the dataset's N5 compression without
    compressing it (a copy whose size follows from the payload's: :func:`plain_size`).
    None for bzip2, which has no such mode."""
    got = _PLAIN.get(compression["type"])
    return None if got is None else (lambda raw: got[0](raw, compression, itemsize))


def plain_size(compression: dict, n: int) -> int | None:
    """The size of :func:`plain_block`'s stream for an ``n``-byte payload (None for bzip2)."""
    got = _PLAIN.get(compression["type"])
    return None if got is None else got[1](n, compression)


@dataclass
class DatasetPlan:
    ctx: ViewContext
    ds: Dataset
    path: str
    dtype: np.dtype  # stored element dtype
    inner: tuple[int, ...]
    attributes: dict[str, Any]
    _src: cs.ChunkSource | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        dims = tuple(self.ds.shape.array_shape) + self.inner
        return dims if dims else (1,)

    @property
    def block(self) -> tuple[int, ...]:
        dims = (tuple(self.ds.chunks) if self.ds.shape.array_shape else ()) + self.inner
        return dims if dims else (1,)

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-s // b) for s, b in zip(self.shape, self.block))

    @property
    def src(self) -> cs.ChunkSource:
        if self._src is None:
            self._src = cs.ChunkSource.of(self.ctx, self.ds)
        return self._src

    @property
    def hints(self) -> dict:
        """What a writer declared through this view that it is served back (kept with the dataset)."""
        h = self.ds.creation_properties.get("polyfs")
        return h if isinstance(h, dict) else {}

    @property
    def data_type(self) -> str:
        return data_type_name(self.dtype)  # type: ignore[return-value]

    @cached_property
    def recipe_compression(self) -> tuple[cs.Recipe, dict]:
        big = self.dtype.str[0] != "<" or self.dtype.itemsize == 1  # .str spells native order out
        comp = compression_for(self.src.pipeline, self.hints.get(HINT_ZLIB) is True) if big else None
        if comp is not None:
            spliced = comp["type"] == "gzip" and not comp.get("useZlib")
            return (cs.gzip_spliced() if spliced else cs.stored()), comp
        target = self.dtype.newbyteorder(">") if self.dtype.itemsize > 1 else self.dtype
        transform = cs.astype_transform(self.dtype, target) if target != self.dtype else None
        reason = "little-endian" if not big else "filters N5 cannot express"
        if self.src.pipeline.opaque:
            reason = cs.opaque_reason(self.src.pipeline, "N5") + ("" if big else "; little-endian")
        t = cs.Transcoding(("n5-raw-be",), cs.identity, transform, self.src.raw_nbytes)
        return cs.transcoded(t, reason), {"type": "raw"}

    def metadata(self) -> dict[str, Any]:
        _, comp = self.recipe_compression
        # the writer's own spelling of it, where it reads the same blocks (blocks are still
        # encoded by ``comp``, the view's own spelling)
        comp = declared_compression(self.hints.get(HINT_COMPRESSION), comp, self.target, self.block)
        meta = dict(self.attributes)
        meta.update({"dimensions": list(reversed(self.shape)), "blockSize": list(reversed(self.block)),
                     "dataType": self.data_type, "compression": comp})
        return meta

    @cached_property
    def header(self) -> bytes:
        return block_header(tuple(reversed(self.block)))

    @property
    def target(self) -> np.dtype:
        """The served element type: big-endian, as N5 stores numbers."""
        return self.dtype.newbyteorder(">") if self.dtype.itemsize > 1 else self.dtype

    @cached_property
    def fill_block(self) -> bytes | None:
        """Header + encoded fill payload, or None when the fill is zero bytes (absent = 0)."""
        return self.fill_block_of(self.block)

    def fill_block_of(self, dims: tuple[int, ...]) -> bytes | None:
        """A block of ``dims`` (C order) of the fill value, or None when it is zero bytes."""
        fill = values.fill_array(self.ds.type, self.ds.fill_value, ())
        one = np.asarray(fill).tobytes()
        if not any(one):
            return None
        _, comp = self.recipe_compression
        elem = np.frombuffer(one, dtype=self.dtype).astype(self.target)
        raw = np.tile(elem, math.prod(dims) // max(elem.size, 1)).tobytes()
        return block_header(tuple(reversed(dims))) + encode_block(comp, raw, self.target)

    def edge_dims(self, coords: tuple[int, ...]) -> tuple[int, ...] | None:
        """The extent of the block at grid ``coords`` (C order) when it crosses the dataset's
        edge, else None. Such blocks are served cropped, as N5 writers (n5-java, z5py) store
        them: z5py's read-modify-write of part of a block assumes that size."""
        dims = tuple(min(b, s - c * b) for c, b, s in zip(coords, self.block, self.shape))
        return dims if dims != self.block else None

    def edge_recipe(self, dims: tuple[int, ...]) -> cs.Recipe:
        """An edge block: the stored chunk decoded, cropped to ``dims``, and served under the
        dataset's N5 compression in its uncompressed mode (:func:`plain_block`), so its size
        is known without reading it (bzip2, which has none, is compressed again)."""
        _, comp = self.recipe_compression
        block, src, target = self.block, self.dtype, self.target
        crop = tuple(slice(0, d) for d in dims)

        def cropped(raw: bytes) -> bytes:
            return np.ascontiguousarray(np.frombuffer(raw, dtype=src).reshape(block)[crop], dtype=target).tobytes()

        encode = plain_block(comp, target.itemsize) or (lambda raw: encode_block(comp, raw, target))
        t = cs.Transcoding(("n5-edge", dims, json.dumps(comp, sort_keys=True)), encode, cropped,
                           plain_size(comp, math.prod(dims) * target.itemsize))
        return cs.transcoded(t, "edge block cropped")

    def block_vfile(self, linear: int) -> VFile:
        recipe, _ = self.recipe_compression
        coords = tuple(int(c) for c in np.unravel_index(linear, self.grid))
        dims = self.edge_dims(coords)
        if self.src.index.size_of(linear) < 0:
            fill = self.fill_block if dims is None else self.fill_block_of(dims)
            assert fill is not None
            return VFile([Literal(fill)])
        if dims is None:
            items = cs.build_items(self.src, recipe, np.asarray([linear], dtype=np.int64))
            return VFile([Literal(self.header)] + items.segments)
        items = cs.build_items(self.src, self.edge_recipe(dims), np.asarray([linear], dtype=np.int64))
        return VFile([Literal(block_header(tuple(reversed(dims))))] + items.segments)

    def file_entries(self) -> Mapping[str, Node]:
        grid = self.grid  # the stored grid plus 1s for array-type dims: same linear indexes
        if self.fill_block is None:
            linear = self.src.index.linear
        else:
            linear = np.arange(math.prod(grid), dtype=np.int64)
        if linear.size == 0 or 0 in grid:
            return {}
        coords = np.stack(np.unravel_index(linear, grid), axis=-1)
        rev = coords[:, ::-1]
        order = np.lexsort(tuple(rev[:, i] for i in reversed(range(rev.shape[1]))))
        rev, lin_sorted = rev[order], linear[order]
        mtime = self.ctx.catalog.dataset_modified(self.ds)
        # file sizes from chunk sizes alone, so stat never builds a block's segments
        recipe, _ = self.recipe_compression
        stored = self.src.index.sizes_for(lin_sorted)
        served = recipe.item_lengths(np.maximum(stored, 0))
        sizes = None if served is None else np.where(
            stored >= 0, served + len(self.header), len(self.fill_block or b""))
        edge = np.any((coords[order] + 1) * np.asarray(self.block) > np.asarray(self.shape), axis=1)
        if sizes is not None and edge.any():
            sizes = sizes.astype(np.float64)  # NaN: an edge block whose size only encoding tells
            for row in np.flatnonzero(edge):
                sizes[row] = self._edge_size(tuple(int(c) for c in coords[order][row]), int(stored[row]))

        def make_file(name: str, row: int) -> FileNode:
            lin = int(lin_sorted[row])
            known = sizes is not None and not np.isnan(sizes[row])
            hint = (lambda: int(sizes[row])) if known else None  # type: ignore[index]
            return FileNode(name, lambda: self.block_vfile(lin), mtime, size_hint=hint, cheap_hint=True,
                            cheap_build=known)

        first = coord_tree("", rev, np.arange(len(rev)), 0, make_file, mtime)
        return first.entries()


    def _edge_size(self, coords: tuple[int, ...], stored: int) -> float:
        """The served size of the edge block at ``coords`` when known without encoding, else NaN."""
        dims = self.edge_dims(coords)
        assert dims is not None
        if stored < 0:
            return float(len(self.fill_block_of(dims) or b""))
        _, comp = self.recipe_compression
        length = plain_size(comp, math.prod(dims) * self.target.itemsize)
        return float("nan") if length is None else float(length + len(block_header(tuple(reversed(dims)))))


class N5Domain(hdmf.Hierarchy):
    def __init__(self, model: DomainModel, ctx: ViewContext) -> None:
        super().__init__(model, SUFFIX)
        self.ctx = ctx

    meta_name = META

    def group_metadata(self, group: Group, path: str) -> dict[str, Any] | None:
        if is_implicit(group) and path != "/":  # the root: a container has its version (z5py needs it)
            return None
        attrs = self.group_attributes(group, path, skip=hdmf.RESERVED + group_skip(group.attributes))
        if path == "/":
            attrs["n5"] = N5_VERSION
        return attrs

    def plan(self, ds: Dataset, path: str) -> "DatasetPlan | None":
        return self.dataset_plan(ds, path)

    def dataset_plan(self, ds: Dataset, path: str) -> DatasetPlan | None:
        if ds.shape.kind == "null":
            return None
        et = element_type(ds.type)
        if et is None:
            log.info("n5: %s not shown: N5 holds numeric types only", self.where(path))
            return None
        if cs.left_out("n5", self.where(path), ds, self.ctx, log):
            return None
        return DatasetPlan(self.ctx, ds, path, et[0], et[1], self.dataset_attributes(ds, path, et, log.info))

    def shown_attributes(self, obj: Group | Dataset, path: str, skip: tuple[str, ...]) -> dict[str, Any]:
        """A dataset's user attributes as its ``attributes.json`` shows them (a rewrite that
        leaves out what the view left out, such as a CF ``units`` string, removes nothing)."""
        et = element_type(obj.type) if isinstance(obj, Dataset) and obj.shape.kind != "null" else None
        if et is None:
            return super().shown_attributes(obj, path, skip)
        return self.dataset_attributes(obj, path, et, lambda *a: None)

    def dataset_attributes(self, ds: Dataset, path: str, et: tuple[np.dtype, tuple[int, ...]],
                           note: Callable[..., None]) -> dict[str, Any]:
        """The attributes of a shown dataset: ``units``/``axes``/``resolution`` only in N5's
        per-axis form (tensorstore refuses any other) or as a writer of this view put them."""
        attrs = hdmf.attributes_json(ds, self.paths, self.where(path), skip=SKIP_ATTRS)
        rank = max(1, ds.shape.rank + len(et[1]))
        hints = ds.creation_properties.get("polyfs")
        written = hints.get(HINT_AXIS_ATTRS) if isinstance(hints, dict) else None
        for key in not_per_axis(attrs, rank):
            if isinstance(written, list) and key in written:
                continue  # a writer of this view put it there in this form: it reads it back
            note("n5: %s: attribute %r is not N5's per-axis %s; left out", self.where(path), key, key)
            del attrs[key]
        return attrs


def domain_node(model: DomainModel, ctx: ViewContext, name: str) -> DirNode:
    """The N5 container of one domain (lazy: each directory is built when listed)."""
    return N5Domain(model, ctx).group_node(name, model.root, "/")


def describe(ds: Dataset, pipe: Any) -> str:
    """How the N5 view serves a dataset whose effective pipeline is ``pipe``
    ("zero-copy", "zero-copy (gzip spliced)", "transcoded (<why>)", "-" if not shown);
    pure: no store access (``polyfs info``)."""
    et = element_type(ds.type) if ds.shape.kind != "null" else None
    if et is None:
        return "-"
    if pipe.undecodable:
        return f"- ({pipe.undecodable})"
    src = cs.ChunkSource(None, ds, None, pipe, ds.chunk_nbytes)  # type: ignore[arg-type]
    plan = DatasetPlan(None, ds, "", et[0], et[1], {}, src)  # type: ignore[arg-type]
    return plan.recipe_compression[0].describe()


def serving(model: DomainModel, ctx: ViewContext, path: str) -> str:
    """:func:`describe` for a dataset path of a loaded domain."""
    ds = model.resolve(path)
    if not isinstance(ds, Dataset):
        return "-"
    return describe(ds, ctx.catalog.pipeline(ds))
