"""Import a Zarr v3 hierarchy: groups, arrays and attributes, from ``zarr.json``.

A Zarr v2 hierarchy (``.zgroup``/``.zarray``/``.zattrs``, as zarr-python
``zarr_format=2``, xarray and OME-Zarr 0.4 write it) is imported too: each
``.zarray`` is restated as the Zarr v3 metadata it stands for (shape, chunk
shape, data type, fill value, ``.zattrs``) and its chunks are read with
zarr-python (any v2 filter or compressor it knows, C or F order, either
dimension separator) and written with the chosen encoding.

The metadata is parsed here (no library decides what is copied). An array's
codec chain ``bytes(endian)`` + bytes-to-bytes codecs of the translation
table (``gzip``, ``zstd``, ``blosc``, ``numcodecs.zlib/bz2/shuffle/
fletcher32``, and ``crc32c``, whose checksum is verified and dropped) is
copied chunk by chunk: gzip members become zlib streams without recompressing
(:func:`~polyfs.codecs.pipeline.gzip_to_zlib`), zstd frames are kept when they
carry their decoded size. Sharded arrays (``sharding_indexed``) are read
shard by shard: each shard's index gives the inner chunks, which become the
canonical chunks (inner chunk shape). Anything else (transpose, variable-
length strings, uncompressed chunks unless ``--codec none``, unknown codecs)
is read with zarr-python and written with the chosen encoding in big-endian order.

JSON attributes become HDF5 attributes (see :func:`common.json_attribute`);
the array's fill value is kept as the dataset's fill value.
"""
from __future__ import annotations

import logging
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...codecs.pipeline import gzip_to_zlib, strip_crc32c
from ...codecs.registry import DEFLATE
from ...errors import CodecError, PolyfsError, SourceError
from ...model import types as T
from ...model.schema import UNLIMITED, Shape
from ...model.writer import DomainWriter
from ...importers.common import (dir_below, source_errors, write_plans, ChunkSink, ImportOptions, Progress,
                                 read_json_object, set_json_attrs, stored_pipeline_filters,
                                 write_decoded)
from ...model.types import from_numpy_any as dtype_from_numpy
from ...codecs.sniff import zstd_has_content_size
from . import cf
from .spec import (ARRAY_TO_BYTES, HINT_DATA_TYPE, HINT_PER_SHARD, HINT_SHARDED, META, MISSING, Chain,
                   KeyEncoding, ShardIndex, bytes_codecs, fill_hints, fill_json, implied_bytes, is_real_transpose,
                   is_time_type, numpy_dtype, per_shard, utf32_dtype)

log = logging.getLogger(__name__)


def _growable(shape: tuple[int, ...]) -> tuple[None, ...]:
    """A Zarr array has no maximum shape: writers resize it through the view (append,
    ``resize``) as they would on disk, so it is stored as an HDF5 dataset unlimited along
    every axis, as an array written through the view is."""
    return tuple(UNLIMITED for _ in shape)


@dataclass
class _ArrayPlan:
    path: Path
    name: str
    meta: dict
    shape: tuple[int, ...]
    dtype: T.DType  # as stored in the source chunks
    chunks: tuple[int, ...]  # canonical chunk shape (inner chunks if sharded)
    chain: Chain | None  # None: decode with zarr-python
    sharding: dict | None = None
    shard_shape: tuple[int, ...] = ()
    keys: KeyEncoding = KeyEncoding()
    fill: Any = None
    nchunks: int = 0


class ZarrImporter:
    def __init__(self, path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
        self.path = Path(path)
        self.writer = writer
        self.opts = opts
        self.zarr_format = 2 if _v2_hierarchy(self.path) else 3

    def err(self, where: Path | str, cause: object) -> SourceError:
        return SourceError(where, " ".join(str(cause).split()))

    def load_meta(self, node: Path) -> dict:
        f = node / META
        meta = read_json_object(f)
        if meta.get("zarr_format") != 3:
            raise self.err(f, f"zarr_format {meta.get('zarr_format')!r} (only Zarr v3 is supported)")
        if meta.get("node_type") not in ("group", "array"):
            raise self.err(f, f"node_type {meta.get('node_type')!r} is neither group nor array")
        return meta

    # -- walk -------------------------------------------------------------------------
    def run(self) -> None:
        with source_errors(lambda cause: self.err(self.path, cause)):
            plans: list[_ArrayPlan] = []
            if self.zarr_format == 2:
                self._run_v2(plans)
                write_plans(plans, self._write, self.path.name, self.opts.progress)
                return
            root = self.load_meta(self.path) if (self.path / META).is_file() else {"node_type": "group"}
            if root["node_type"] == "array":
                plans.append(self._plan_array(self.path, "data", root, self.writer.root))
            else:
                self._attrs(self.writer.root, root, self.path)
                self._walk(self.path, self.writer.root, plans)
            write_plans(plans, self._write, self.path.name, self.opts.progress)

    def _attrs(self, obj, meta: dict, node: Path) -> None:
        attrs = meta.get("attributes") or {}
        if not isinstance(attrs, dict):
            raise self.err(node / META, "attributes is not a JSON object")
        names = meta.get("dimension_names") if meta.get("node_type") == "array" else None
        if names is not None:
            shape = meta.get("shape")
            if not isinstance(names, list) or not isinstance(shape, list) or len(names) != len(shape) \
                    or not all(d is None or isinstance(d, str) for d in names):
                raise self.err(node / META, f"dimension_names {names!r} must list one name or null per dimension")
            if any(d is not None for d in names) and "_ARRAY_DIMENSIONS" not in attrs:
                # kept as the view's writes keep them: the Zarr view serves them back as
                # dimension_names, and xarray reads the HDF5 and Zarr views with these dims
                attrs = {**attrs, "_ARRAY_DIMENSIONS": [d or "" for d in names]}
        if meta.get("node_type") == "array":  # xarray's base64 _FillValue: the number, as a write stores it
            attrs = cf.decode_attributes(attrs, meta.get("data_type"))
        set_json_attrs(obj, attrs)

    def _walk(self, node: Path, group, plans: list[_ArrayPlan]) -> None:
        for child in sorted(p for p in node.iterdir() if p.is_dir()):
            if not (child / META).is_file():
                if _holds_metadata(child):  # an implicit group (Zarr v3 drafts, hand-made trees)
                    g = self.writer.add_group(group, child.name)
                    self._walk(child, g, plans)
                continue
            meta = self.load_meta(child)
            if meta["node_type"] == "group":
                g = self.writer.add_group(group, child.name)
                self._attrs(g, meta, child)
                self._walk(child, g, plans)
            else:
                plans.append(self._plan_array(child, child.name, meta, group))

    # -- Zarr v2 ---------------------------------------------------------------------------
    def _run_v2(self, plans: list[_ArrayPlan]) -> None:
        if (self.path / V2_ARRAY).is_file():
            plans.append(self._plan_array(self.path, "data", self._v2_array_meta(self.path), self.writer.root))
            return
        set_json_attrs(self.writer.root, self._v2_attrs(self.path))
        self._walk_v2(self.path, self.writer.root, plans)

    def _walk_v2(self, node: Path, group, plans: list[_ArrayPlan]) -> None:
        for child in sorted(p for p in node.iterdir() if p.is_dir()):
            if (child / V2_ARRAY).is_file():
                plans.append(self._plan_array(child, child.name, self._v2_array_meta(child), group))
            elif (child / V2_GROUP).is_file() or dir_below(child, _is_v2_node):
                g = self.writer.add_group(group, child.name)
                set_json_attrs(g, self._v2_attrs(child))
                self._walk_v2(child, g, plans)

    def _v2_attrs(self, node: Path) -> dict:
        f = node / V2_ATTRS
        return read_json_object(f) if f.is_file() else {}

    def _v2_array_meta(self, node: Path) -> dict:
        """``.zarray`` restated as the v3 metadata the rest of this module reads: no codecs
        (so the chunks are read with zarr-python), the v3 name of the data type where one
        exists (else zarr-python's numpy dtype decides), the fill value if it is a number."""
        zmeta = read_json_object(node / V2_ARRAY)
        if zmeta.get("zarr_format") != 2:
            raise self.err(node / V2_ARRAY, f"zarr_format {zmeta.get('zarr_format')!r} (expected 2)")
        arr = self._zarr_array(node)
        npdt = np.dtype(arr.dtype)
        zdt = arr.metadata.dtype  # zarr-python's data type: it spells the v3 name and fill
        if npdt.kind in "biufc" and not npdt.names:
            data_type: Any = npdt.name
            fill = zmeta.get("fill_value")
        elif npdt.kind in "mM":  # numpy.datetime64/timedelta64; the NaT fill is an int64
            data_type = zdt.to_json(zarr_format=3)
            fill = zdt.to_json_scalar(arr.fill_value, zarr_format=3)
        else:
            data_type = _v2_data_type(npdt)
            if data_type == "string" and type(zdt).__name__ == "VariableLengthBytes":
                data_type = "variable_length_bytes"  # VLenBytes: byte strings, not text
            fill = None
            if not _zero_like(arr.fill_value):
                raise self.err(node / V2_ARRAY, f"fill_value {zmeta.get('fill_value')!r} of a {npdt} array "
                                               f"(only numeric fill values are supported)")
        return {"zarr_format": 3, "node_type": "array", "shape": list(arr.shape),
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(arr.chunks)}},
                "data_type": data_type, "codecs": [], "fill_value": fill, "attributes": self._v2_attrs(node),
                V2_ENDIAN: "big" if npdt.byteorder == ">" else "little"}

    # -- arrays -----------------------------------------------------------------------------
    def _dtype(self, meta: dict, endian: str, where: Path) -> T.DType:
        dt = meta.get("data_type")
        npdt = numpy_dtype(dt, endian)
        if npdt is not None:
            return dtype_from_numpy(npdt)
        if isinstance(dt, str) and dt.startswith("r") and dt[1:].isdigit() and int(dt[1:]) % 8 == 0:
            return T.OpaqueType(int(dt[1:]) // 8)
        if dt == "string":
            return T.StringType(None, "utf8", "nullterm")
        if dt in ("bytes", "variable_length_bytes"):
            return T.VlenType(T.IntType(1, False))
        try:  # an extension type: ask zarr-python what numpy makes of it
            return dtype_from_numpy(self._zarr_array(where).dtype)
        except (PolyfsError, TypeError, ValueError) as exc:
            raise self.err(where / META, f"data_type {dt!r} is not supported ({exc})") from None

    def _zarr_array(self, where: Path):
        import zarr
        from zarr.storage import LocalStore

        try:
            return zarr.open_array(store=LocalStore(str(where), read_only=True), mode="r",
                                   zarr_format=self.zarr_format)
        except Exception as exc:  # zarr-python raises many kinds
            raise self.err(where, f"zarr-python cannot open the array ({type(exc).__name__}: {exc})") from None

    def _plan_array(self, where: Path, name: str, meta: dict, group) -> _ArrayPlan:
        mf = where / META
        try:
            shape = tuple(int(x) for x in meta["shape"])
            grid = meta["chunk_grid"]
            if grid.get("name") != "regular":
                raise ValueError(f"chunk_grid {grid.get('name')!r} (only regular grids are supported)")
            outer = tuple(int(x) for x in grid["configuration"]["chunk_shape"])
            codecs = list(meta.get("codecs") or [])
            if V2_ENDIAN not in meta:  # a v2 array restated (no codecs: zarr-python reads it), not GDAL's v3
                codecs = implied_bytes(codecs, meta.get("data_type"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self.err(mf, f"malformed array metadata: {exc}") from None
        if len(outer) != len(shape):
            raise self.err(mf, f"chunk_shape {list(outer)} does not match shape {list(shape)}")
        endian, chain, sharding, chunks = meta.get(V2_ENDIAN, "little"), None, None, outer
        ab = [i for i, c in enumerate(codecs) if c.get("name") in ARRAY_TO_BYTES + ("sharding_indexed",)]
        aa = codecs[:ab[0]] if ab else codecs
        if meta.get("storage_transformers"):
            chain = None
        elif ab and not any(is_real_transpose(c, len(shape)) for c in aa):
            head = codecs[ab[0]]
            cfg = head.get("configuration") or {}
            rest = codecs[ab[0] + 1:]
            if head["name"] in ("bytes", "endian"):
                endian = cfg.get("endian", "little")
                dtype = self._dtype(meta, endian, where)
                chain = bytes_codecs(rest, 1 if dtype.is_vlen else dtype.itemsize)
            elif head["name"] == "sharding_indexed" and not rest:
                chunks = tuple(int(x) for x in cfg.get("chunk_shape", ()))
                inner = list(cfg.get("codecs") or [])
                iab = [i for i, c in enumerate(inner) if c.get("name") in ("bytes", "endian")]
                if len(chunks) == len(shape) and iab and not any(is_real_transpose(c, len(shape))
                                                                 for c in inner[:iab[0]]) \
                        and all(o % c == 0 for o, c in zip(outer, chunks)):
                    endian = (inner[iab[0]].get("configuration") or {}).get("endian", "little")
                    dtype = self._dtype(meta, endian, where)
                    chain = bytes_codecs(inner[iab[0] + 1:], 1 if dtype.is_vlen else dtype.itemsize)
                    sharding = cfg
                else:
                    chunks = chunks if len(chunks) == len(shape) else outer
        dtype = self._dtype(meta, endian, where)
        if dtype.is_vlen or not shape:
            chain = None  # variable-length chunks and 0-d arrays are decoded
        copy = chain is not None and chain.copyable(not self.opts.encoding.filters)
        plan = _ArrayPlan(where, name, meta, shape, dtype, chunks, chain if copy else None,
                          sharding if copy else None, outer)
        try:
            plan.keys = KeyEncoding.from_json(meta.get("chunk_key_encoding"))
            plan.fill = fill_json(meta.get("fill_value"), dtype)
        except ValueError as exc:
            raise self.err(mf, exc) from None
        stored = dtype  # decoded chunks too keep the array's byte order: it is the one readers see
        filters = plan.chain.filters if plan.chain is not None else stored_pipeline_filters(
            self.opts, stored, chunks if shape else ())
        fill = plan.fill
        sharded_source = bool(ab) and codecs[ab[0]].get("name") == "sharding_indexed"
        hints = {**_declared_type_hints(meta.get("data_type"), stored),
                 **_layout_hints(outer, chunks, sharded_source)}
        hints.update(fill_hints(meta))  # a NaN payload: served back as the source spelled it
        hints = {"polyfs": hints} if hints else None
        if shape:
            ds = self.writer.add_dataset(group, name, stored, Shape("simple", shape, _growable(shape)), chunks,
                                         filters, fill, creation_properties=hints)
        else:
            ds = self.writer.add_dataset(group, name, stored, Shape("scalar"), None, [], fill,
                                         layout_class="H5D_CONTIGUOUS", creation_properties=hints)
        plan.ds = ds  # type: ignore[attr-defined]
        self._attrs(ds, meta, where)
        plan.nchunks = ds.nchunks if shape and all(shape) else (0 if shape else 1)
        return plan

    # -- data -------------------------------------------------------------------------------
    def _write(self, plan: _ArrayPlan, bar: Progress) -> None:
        ds = plan.ds  # type: ignore[attr-defined]
        if plan.shape and not all(plan.shape):
            return
        if plan.chain is None:
            arr = self._zarr_array(plan.path)

            def read(region):
                try:
                    data = arr[region] if region else arr[()]
                except Exception as exc:
                    raise self.err(plan.path, f"zarr-python cannot read chunk data ({type(exc).__name__}: {exc})") \
                        from None
                return _vlen_ready(np.asarray(data), ds.type)

            write_decoded(self.writer, ds, read, None, skip_fill=True, progress=bar)
            return
        try:
            with ChunkSink(self.writer) as sink:
                if plan.sharding is not None:
                    self._write_sharded(plan, ds, sink, bar)
                else:
                    for coords, f in self._chunk_files(plan):
                        sink.job(ds, coords or (0,), self._convert, plan, ds, f.read_bytes())
                        bar(1)
        except CodecError as exc:
            raise self.err(plan.path, exc) from None

    def _chunk_files(self, plan: _ArrayPlan):
        grid = tuple(-(-s // c) for s, c in zip(plan.shape, plan.shard_shape))
        for coords in np.ndindex(*grid) if grid else [()]:
            f = plan.path / plan.keys.key(tuple(int(c) for c in coords))
            if f.is_file():
                yield tuple(int(c) for c in coords), f

    def _convert(self, plan: _ArrayPlan, ds, data: bytes) -> tuple[bytes, int | None]:
        """Stored source chunk bytes -> canonical chunk bytes (+ CRC32 for deflate),
        without recompressing (runs in a worker thread)."""
        chain = plan.chain
        if chain.strip_crc32c:
            data = strip_crc32c(data)
        crc = None
        if chain.gzip:
            data, crc = gzip_to_zlib(data)
        elif chain.zstd and not zstd_has_content_size(data):
            # a streamed frame: decode with the chain and encode it single-shot
            pipe = self.writer.pipeline(ds)
            data = pipe.encode(pipe.decode(data))
        elif chain.filters and chain.filters[-1].id == DEFLATE:
            crc = zlib.crc32(zlib.decompress(data))
        return data, crc

    def _write_sharded(self, plan: _ArrayPlan, ds, sink: ChunkSink, bar: Progress) -> None:
        per = per_shard(plan.shard_shape, plan.chunks)
        n = math.prod(per)
        try:
            index = ShardIndex.from_config(plan.sharding or {})
        except ValueError as exc:
            raise self.err(plan.path / META, exc) from None
        grid = ds.grid
        for shard, f in self._chunk_files(plan):
            blob = f.read_bytes()
            try:
                start, length = index.region(len(blob), n)
                entries = index.decode(blob[start:start + length], n)
            except (ValueError, CodecError) as exc:
                raise self.err(f, exc) from None
            for local in range(n):
                off, nb = (int(x) for x in entries[local])
                if off == MISSING and nb == MISSING:
                    continue
                inner = np.unravel_index(local, per)
                coords = tuple(int(s) * p + int(i) for s, p, i in zip(shard, per, inner))
                if any(c >= g for c, g in zip(coords, grid)):
                    continue
                if off + nb > len(blob):
                    raise self.err(f, f"inner chunk {list(coords)} lies outside the shard")
                sink.job(ds, coords, self._convert, plan, ds, blob[off:off + nb])
                bar(1)


def _holds_metadata(node: Path) -> bool:
    """A directory with a ``zarr.json`` somewhere below it (so not an array's chunk
    directory, which holds only chunk files)."""
    return any(True for _ in node.rglob(META))


def _layout_hints(outer: tuple[int, ...], inner: tuple[int, ...], sharded: bool) -> dict[str, Any]:
    """The Zarr view's layout hints for the source's own layout: its shard shape (in inner
    chunks), or one file per chunk for an unsharded array, so the view shows the array as
    the source had it rather than by its own shard rule."""
    if not inner:
        return {}
    if sharded and all(c > 0 and o % c == 0 for o, c in zip(outer, inner)):
        return {HINT_PER_SHARD: list(per_shard(tuple(outer), tuple(inner)))}
    return {HINT_SHARDED: False}


def _declared_type_hints(data_type: Any, stored: T.DType) -> dict[str, Any]:
    """The Zarr view's hint that serves the source's own ``data_type`` back: a numpy
    ``datetime64``/``timedelta64`` is stored as int64 and ``fixed_length_utf32`` as
    variable-length UTF-8, and without the hint the view would show ``int64``/``string``
    (values read as plain counts, or a different numpy type), as it does for a writer's."""
    resolved = T.resolved(stored)
    if is_time_type(data_type) and isinstance(resolved, T.IntType) and resolved.size == 8:
        return {HINT_DATA_TYPE: data_type}
    if utf32_dtype(data_type, "little") is not None and isinstance(resolved, T.StringType) \
            and resolved.length is None:
        return {HINT_DATA_TYPE: data_type}
    return {}


def _vlen_ready(data: np.ndarray, dtype: T.DType) -> np.ndarray:
    """zarr-python's decoded values in the form the model encodes: objects for variable-
    length types, and for ``variable_length_bytes`` (a sequence of uint8 here) each
    ``bytes`` element as a uint8 array (``bytes`` is not a sequence of numbers to numpy)."""
    if not dtype.is_vlen:
        return data
    data = data.astype(object)
    if isinstance(T.resolved(dtype), T.VlenType):
        out = np.empty(data.shape, dtype=object)
        for i, v in np.ndenumerate(data):
            out[i] = np.frombuffer(bytes(v), np.uint8) if isinstance(v, (bytes, bytearray, memoryview)) \
                else np.asarray(v, np.uint8)
        data = out
    return data


V2_ARRAY, V2_GROUP, V2_ATTRS = ".zarray", ".zgroup", ".zattrs"
V2_ENDIAN = "polyfs:v2_endian"  # in a .zarray restated as v3 metadata: the v2 dtype's byte order


def _is_v2_node(path: Path) -> bool:
    return (path / V2_GROUP).is_file() or (path / V2_ARRAY).is_file()


def _v2_hierarchy(path: Path) -> bool:
    """A Zarr v2 hierarchy: ``.zgroup``/``.zarray`` at its top, or (no ``zarr.json``
    anywhere) below it, as tensorstore's ``zarr`` driver writes arrays into plain directories."""
    if _is_v2_node(path):
        return True
    return not (path / META).is_file() and not _metadata_below(path) and dir_below(path, _is_v2_node)


def _v2_data_type(npdt: np.dtype) -> Any:
    """The v3 data type a non-numeric v2 dtype stands for: variable-length strings,
    ``fixed_length_utf32`` (numpy ``U``) or None (zarr-python's numpy dtype is used)."""
    if npdt.kind in "OT":
        return "string"
    if npdt.kind == "U":
        return {"name": "fixed_length_utf32", "configuration": {"length_bytes": npdt.itemsize}}
    return None


def _zero_like(fill: Any) -> bool:
    """Whether a non-numeric fill value is what the store's default fill (zeros) gives."""
    if fill is None:
        return True
    try:
        arr = np.asarray(fill)
        if arr.dtype.kind in "OT":
            return all(not v for v in arr.ravel())
        return not arr.tobytes().strip(b"\0")
    except (TypeError, ValueError):
        return False


def claims(path: Path) -> bool:
    """A directory with a ``zarr.json`` (Zarr v3) or a ``.zgroup``/``.zarray`` (Zarr v2)."""
    if not path.is_dir():
        return False
    if (path / META).is_file():
        return True
    if _is_v2_node(path):
        f = path / (V2_ARRAY if (path / V2_ARRAY).is_file() else V2_GROUP)
        try:
            version = read_json_object(f).get("zarr_format")
        except (SourceError, OSError) as exc:
            raise SourceError(f, f"unreadable Zarr v2 metadata ({exc})") from None
        if version != 2:
            raise SourceError(f, f"Zarr v2 metadata with zarr_format {version!r} (expected 2)")
        return True
    return _metadata_below(path) or dir_below(path, _is_v2_node)


def _metadata_below(root: Path) -> bool:
    """Whether a ``zarr.json`` lies below ``root``: a hierarchy without root metadata
    (tensorstore writes arrays into plain directories and never a group's ``zarr.json``),
    imported as an implicit root group."""
    return dir_below(root, lambda d: (d / META).is_file())


def import_into(path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
    ZarrImporter(path, writer, opts).run()
