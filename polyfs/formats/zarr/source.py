"""Import a Zarr v3 hierarchy: groups, arrays and attributes, from ``zarr.json``.

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

import json
import logging
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...codecs.pipeline import gzip_to_zlib, strip_crc32c
from ...codecs.registry import BLOSC, BLOSC_CODES, BZIP2, DEFLATE, FLETCHER32, SHUFFLE, ZSTD, Filter
from ...errors import CodecError, PolyfsError, SourceError
from ...model import types as T
from ...model import values
from ...model.schema import Shape
from ...model.writer import DomainWriter
from ...importers.common import (ChunkSink, ImportOptions, Progress, big_endian, dtype_from_numpy, set_json_attrs, stored_pipeline_filters, write_decoded, zstd_has_content_size)

log = logging.getLogger(__name__)

DTYPES = {"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "i2", "uint16": "u2", "int32": "i4",
           "uint32": "u4", "int64": "i8", "uint64": "u8", "float16": "f2", "float32": "f4", "float64": "f8",
           "complex64": "c8", "complex128": "c16"}
_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
EMPTY = 2 ** 64 - 1


@dataclass
class _Chain:
    """How stored chunk bytes become the canonical chunk bytes."""

    filters: list[Filter] = field(default_factory=list)
    strip_crc32c: bool = False
    gzip: bool = False  # the last filter is a gzip member: splice to zlib
    zstd: bool = False  # the last filter is zstd: frames need their content size
    reason: str = ""  # why the chain cannot be copied ("" = it can)

    def copyable(self, raw_ok: bool) -> bool:
        """Copy when there is a compressor, or no filter at all and ``raw_ok`` (--codec none)."""
        if self.reason:
            return False
        return any(f.spec.compressor for f in self.filters) or (raw_ok and not self.filters)


def bytes_codecs(codecs: list[dict], itemsize: int) -> _Chain:
    """Map a chain of bytes-to-bytes codecs onto HDF5 filters (write order)."""
    chain = _Chain()
    for i, c in enumerate(codecs):
        name = c.get("name", "")
        cfg = c.get("configuration") or {}
        last = i == len(codecs) - 1
        if name == "crc32c":
            if not last:
                return _Chain(reason="crc32c before another codec")
            chain.strip_crc32c = True
            continue
        if chain.gzip:
            return _Chain(reason=f"{name} after gzip")
        if name in ("gzip", "numcodecs.gzip"):
            chain.filters.append(Filter(DEFLATE, (int(cfg.get("level", 6)) if int(cfg.get("level", 6)) >= 0 else 6,)))
            chain.gzip = True
        elif name == "numcodecs.zlib":
            chain.filters.append(Filter(DEFLATE, (int(cfg.get("level", 6)),)))
        elif name in ("zstd", "numcodecs.zstd"):
            chain.filters.append(Filter(ZSTD, (int(cfg.get("level", 3)),)))
            chain.zstd = True
        elif name in ("blosc", "numcodecs.blosc"):
            shuffle = cfg.get("shuffle", 1)
            shuffle = _SHUFFLES.get(shuffle, 1) if isinstance(shuffle, str) else int(shuffle)
            cname = str(cfg.get("cname", "lz4"))
            if cname not in BLOSC_CODES:
                return _Chain(reason=f"blosc cname {cname}")
            typesize = int(cfg.get("typesize") or itemsize)
            chain.filters.append(Filter(BLOSC, (2, 2, typesize, 0, int(cfg.get("clevel", 5)), shuffle,
                                                BLOSC_CODES[cname])))
        elif name in ("numcodecs.bz2", "bz2"):
            chain.filters.append(Filter(BZIP2, (int(cfg.get("level", 9)),)))
        elif name == "numcodecs.shuffle":
            chain.filters.append(Filter(SHUFFLE, (int(cfg.get("elementsize", itemsize)),)))
        elif name == "numcodecs.fletcher32":
            chain.filters.append(Filter(FLETCHER32, ()))
        else:
            return _Chain(reason=f"codec {name!r}")
        if name not in ("zstd", "numcodecs.zstd"):
            chain.zstd = False  # zstd is no longer the outermost encoding
    return chain


@dataclass
class _ArrayPlan:
    path: Path
    name: str
    meta: dict
    shape: tuple[int, ...]
    dtype: T.DType  # as stored in the source chunks
    chunks: tuple[int, ...]  # canonical chunk shape (inner chunks if sharded)
    chain: _Chain | None  # None: decode with zarr-python
    sharding: dict | None = None
    shard_shape: tuple[int, ...] = ()
    key_of: Callable[[tuple[int, ...]], str] | None = None
    fill: Any = None
    nchunks: int = 0


class ZarrImporter:
    def __init__(self, path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
        self.path = Path(path)
        self.writer = writer
        self.opts = opts

    def err(self, where: Path | str, cause: object) -> SourceError:
        return SourceError(where, " ".join(str(cause).split()))

    def load_meta(self, node: Path) -> dict:
        f = node / "zarr.json"
        try:
            text = f.read_bytes()
        except OSError as exc:
            raise self.err(f, exc.strerror or exc) from None
        try:
            meta = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self.err(f, f"not valid JSON ({exc})") from None
        if not isinstance(meta, dict):
            raise self.err(f, "not a JSON object")
        if meta.get("zarr_format") != 3:
            raise self.err(f, f"zarr_format {meta.get('zarr_format')!r} (only Zarr v3 is supported)")
        if meta.get("node_type") not in ("group", "array"):
            raise self.err(f, f"node_type {meta.get('node_type')!r} is neither group nor array")
        return meta

    # -- walk -------------------------------------------------------------------------
    def run(self) -> None:
        try:
            plans: list[_ArrayPlan] = []
            root = self.load_meta(self.path)
            if root["node_type"] == "array":
                plans.append(self._plan_array(self.path, "data", root, self.writer.root))
            else:
                self._attrs(self.writer.root, root, self.path)
                self._walk(self.path, self.writer.root, plans)
            bar = Progress(sum(p.nchunks for p in plans), self.path.name, self.opts.progress)
            try:
                for p in plans:
                    self._write(p, bar)
            finally:
                bar.close()
        except SourceError:
            raise
        except PolyfsError as exc:
            raise self.err(self.path, exc) from None
        except Exception as exc:  # library errors (numcodecs, zlib, tensorstore, zarr-python)
            raise self.err(self.path, f"{type(exc).__name__}: {exc}") from None

    def _attrs(self, obj, meta: dict, node: Path) -> None:
        attrs = meta.get("attributes") or {}
        if not isinstance(attrs, dict):
            raise self.err(node / "zarr.json", "attributes is not a JSON object")
        set_json_attrs(self.writer, obj, attrs)

    def _walk(self, node: Path, group, plans: list[_ArrayPlan]) -> None:
        for child in sorted(p for p in node.iterdir() if p.is_dir()):
            if not (child / "zarr.json").is_file():
                continue
            meta = self.load_meta(child)
            if meta["node_type"] == "group":
                g = self.writer.add_group(group, child.name)
                self._attrs(g, meta, child)
                self._walk(child, g, plans)
            else:
                plans.append(self._plan_array(child, child.name, meta, group))

    # -- arrays -----------------------------------------------------------------------------
    def _dtype(self, meta: dict, endian: str, where: Path) -> T.DType:
        dt = meta.get("data_type")
        if isinstance(dt, str) and dt in DTYPES:
            code = DTYPES[dt]
            npdt = np.dtype(code if code.startswith("|") else ("<" if endian == "little" else ">") + code)
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
            raise self.err(where / "zarr.json", f"data_type {dt!r} is not supported ({exc})") from None

    def _zarr_array(self, where: Path):
        import zarr
        from zarr.storage import LocalStore

        try:
            return zarr.open_array(store=LocalStore(str(where), read_only=True), mode="r", zarr_format=3)
        except Exception as exc:  # zarr-python raises many kinds
            raise self.err(where, f"zarr-python cannot open the array ({type(exc).__name__}: {exc})") from None

    def _plan_array(self, where: Path, name: str, meta: dict, group) -> _ArrayPlan:
        mf = where / "zarr.json"
        try:
            shape = tuple(int(x) for x in meta["shape"])
            grid = meta["chunk_grid"]
            if grid.get("name") != "regular":
                raise ValueError(f"chunk_grid {grid.get('name')!r} (only regular grids are supported)")
            outer = tuple(int(x) for x in grid["configuration"]["chunk_shape"])
            codecs = list(meta.get("codecs") or [])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self.err(mf, f"malformed array metadata: {exc}") from None
        if len(outer) != len(shape):
            raise self.err(mf, f"chunk_shape {list(outer)} does not match shape {list(shape)}")
        endian, chain, sharding, chunks = "little", None, None, outer
        ab = [i for i, c in enumerate(codecs) if c.get("name") in ("bytes", "sharding_indexed", "vlen-utf8",
                                                                    "vlen-bytes", "endian")]
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
        plan.key_of = key_encoder(meta.get("chunk_key_encoding") or {"name": "default"}, mf, self.err)
        plan.fill = fill_json(meta.get("fill_value"), dtype, mf, self.err)
        stored = dtype if plan.chain is not None else (dtype if dtype.is_vlen else big_endian(dtype))
        filters = plan.chain.filters if plan.chain is not None else stored_pipeline_filters(
            self.opts, stored, chunks if shape else ())
        fill = plan.fill
        if shape:
            ds = self.writer.add_dataset(group, name, stored, Shape("simple", shape), chunks, filters, fill)
        else:
            ds = self.writer.add_dataset(group, name, stored, Shape("scalar"), None, [], fill,
                                         layout_class="H5D_CONTIGUOUS")
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
                data = np.asarray(data)
                if ds.type.is_vlen:
                    data = data.astype(object)
                return data

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
            f = plan.path / plan.key_of(tuple(int(c) for c in coords))
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
        cfg = plan.sharding
        per = tuple(o // c for o, c in zip(plan.shard_shape, plan.chunks))
        n = math.prod(per)
        index_codecs = list(cfg.get("index_codecs") or [{"name": "bytes", "configuration": {"endian": "little"}},
                                                         {"name": "crc32c"}])
        idx_endian = "<"
        idx_crc = False
        for c in index_codecs:
            if c.get("name") == "bytes":
                idx_endian = ">" if (c.get("configuration") or {}).get("endian") == "big" else "<"
            elif c.get("name") == "crc32c":
                idx_crc = True
            else:
                raise self.err(plan.path / "zarr.json", f"shard index codec {c.get('name')!r} is not supported")
        isize = 16 * n + (4 if idx_crc else 0)
        at_start = cfg.get("index_location", "end") == "start"
        grid = ds.grid
        for shard, f in self._chunk_files(plan):
            blob = f.read_bytes()
            if len(blob) < isize:
                raise self.err(f, f"shard of {len(blob)} bytes is shorter than its index ({isize} bytes)")
            raw_index = blob[:isize] if at_start else blob[-isize:]
            if idx_crc:
                try:
                    raw_index = strip_crc32c(raw_index)
                except CodecError as exc:
                    raise self.err(f, f"shard index: {exc}") from None
            entries = np.frombuffer(raw_index, dtype=f"{idx_endian}u8").reshape(n, 2)
            for local in range(n):
                off, nb = (int(x) for x in entries[local])
                if off == EMPTY and nb == EMPTY:
                    continue
                inner = np.unravel_index(local, per)
                coords = tuple(int(s) * p + int(i) for s, p, i in zip(shard, per, inner))
                if any(c >= g for c, g in zip(coords, grid)):
                    continue
                if off + nb > len(blob):
                    raise self.err(f, f"inner chunk {list(coords)} lies outside the shard")
                sink.job(ds, coords, self._convert, plan, ds, blob[off:off + nb])
                bar(1)


def is_real_transpose(codec: dict, rank: int) -> bool:
    if codec.get("name") != "transpose":
        return True  # an unknown array-to-array codec: decode with zarr-python
    order = (codec.get("configuration") or {}).get("order")
    return list(order or []) != list(range(rank))


def key_encoder(enc: dict, where: Path, err) -> Callable[[tuple[int, ...]], str]:
    name = enc.get("name", "default")
    sep = (enc.get("configuration") or {}).get("separator")
    if name == "default":
        sep = sep or "/"
        return lambda c: "c" + "".join(sep + str(i) for i in c) if c else "c"
    if name == "v2":
        sep = sep or "."
        return lambda c: sep.join(str(i) for i in c) if c else "0"
    raise err(where, f"chunk_key_encoding {name!r} is not supported")


def fill_json(fill: Any, dtype: T.DType, where: Path, err) -> Any:
    """The Zarr fill value as the dataset's HSDS ``fillValue`` (None = zeros)."""
    if fill is None:
        return None
    base = T.resolved(dtype)
    try:
        if isinstance(base, T.CompoundType) and len(base.fields) == 2 and isinstance(fill, list):
            parts = [_float_fill(x, base.fields[0][1]) for x in fill]
            return None if all(p == 0 and not np.signbit(p) for p in parts) else parts
        if isinstance(base, T.FloatType):
            v = _float_fill(fill, base)
            return None if v == 0 and not np.signbit(v) else v
        if isinstance(base, T.EnumType) and base.is_bool:
            return True if fill else None
        if isinstance(base, T.IntType):
            v = int(fill, 16) if isinstance(fill, str) and fill.startswith("0x") else int(fill)
            return None if v == 0 else v
        if isinstance(base, T.OpaqueType):
            b = bytes(int(x) for x in fill) if isinstance(fill, list) else b""
            return None if not any(b) else values.element_to_json(base, b)
        if isinstance(base, T.StringType):
            return fill if fill else None
    except (TypeError, ValueError) as exc:
        raise err(where, f"fill_value {fill!r} does not fit {base}: {exc}") from None
    return None


def _float_fill(v: Any, t: T.DType) -> float:
    if isinstance(v, str):
        if v.startswith("0x"):
            size = t.itemsize
            raw = int(v, 16).to_bytes(size, "big")
            return float(np.frombuffer(raw, dtype=f">f{size}")[0])
        return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(v, v))
    return float(v)


def import_into(path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
    ZarrImporter(path, writer, opts).run()
