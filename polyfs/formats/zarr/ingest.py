"""What tools write into the Zarr view: ``zarr.json`` files and chunk or shard files.

:class:`ZarrIngester` implements the write protocol (:mod:`polyfs.writes.protocol`):
a written ``zarr.json`` is validated as Zarr v3 metadata and read as the
dataset it describes (type, shape, canonical chunk shape, filters, fill value,
how chunk files are laid out and each chunk encoded); a shard is read index
first, then one inner chunk at a time. Anything the store cannot hold is an
:class:`InvalidInput` or :class:`UnsupportedType` naming the cause.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import numpy as np

from ...codecs.pipeline import Pipeline
from ...errors import CodecError, InvalidInput, UnsupportedType
from ...model.schema import Dataset, Group
from ...model import types as T
from ...model.types import ArrayType, from_numpy_any, resolved
from ...views import hdmf
from ...views.base import ViewContext
from ...writes.chunkin import Incoming, unwrapped
from ...writes.protocol import ArrayWrite, ByteSource, GroupWrite, WrittenChunk
from ..base import json_object
from . import cf
from .numcodecs_chain import HINT_NUMCODECS, STORED, NumcodecsChain, needs_numcodecs
from .spec import (DEFAULT_INDEX, HINT_CODECS, HINT_CONSOLIDATED, HINT_DATA_TYPE, HINT_FILTERS, HINT_PER_SHARD,
                   HINT_PREFIX, HINT_SHAPE, HINT_SHARDED, HINT_TRANSPOSE, META, MISSING, V2_METADATA, VLEN_STRING,
                   KeyEncoding, ShardIndex, Spelling, array_to_bytes_at, bytes_codecs, decodes_to_itself, fill_hints,
                   fill_json, filter_codecs, gunzip_members, implied_bytes, is_real_transpose, is_time_type, non_spec,
                   numpy_dtype, per_shard, transpose_order, utf32_body, utf32_dtype, vlen_bytes_body, vlen_utf8_body)

N5_METADATA = "attributes.json"
TEXT = T.StringType(None, "utf8", "nullterm")  # how text written through the view is stored
BYTE_SEQUENCE = T.VlenType(T.IntType(1, False))  # variable_length_bytes, as HSDS stores h5py's vlen uint8
DRAFT_V3_METADATA = (".array.json", ".group.json")  # a draft of Zarr v3: meta/root.group.json, ...
VLEN_BYTES_TYPES = ("variable_length_bytes", "bytes")  # zarr-python's name, and the v3 spec's


def _err(where: str, cause: object) -> InvalidInput:
    return InvalidInput(f"{where}: {cause}")


def element_dims(ds: Dataset) -> int:
    """How many trailing dimensions the views add for a dataset of HDF5 array elements."""
    t = resolved(ds.type)
    return len(t.dims) if isinstance(t, ArrayType) else 0


def dataset_position(pos: tuple[int, ...], inner: int) -> tuple[int, ...] | None:
    """The dataset's chunk of a chunk file at ``pos`` (C order): the element dimensions,
    whole in every chunk, add coordinates that are always 0."""
    if not inner:
        return pos
    return (pos[:-inner] or (0,)) if not any(pos[-inner:]) else None  # a scalar's: its chunk ``0``


def element_dims_refused(where: str) -> UnsupportedType:
    return UnsupportedType(f"{where}: chunks of a dataset of HDF5 array elements cannot be written through this "
                           f"view (write them through hdf5/)")


def parse(data: bytes, where: str) -> GroupWrite | ArrayWrite:
    try:
        meta = json_object(data)
    except ValueError as exc:
        raise _err(where, exc) from None
    except RecursionError:
        raise _err(where, "not valid JSON (nested too deeply)") from None
    if isinstance(meta.get("zarr_format"), str) and "protocol/core/3.0" in meta["zarr_format"]:
        raise _err(where, f"zarr_format {meta['zarr_format']!r} is a draft of Zarr v3 (GDAL before 3.8 writes it; "
                          f"only Zarr v3 as released can be written)")
    if meta.get("zarr_format") != 3:
        raise _err(where, f"zarr_format {meta.get('zarr_format')!r} (only Zarr v3 metadata can be written)")
    attrs = meta.get("attributes", {})
    if not isinstance(attrs, dict):
        raise _err(where, "attributes is not a JSON object")
    kind = meta.get("node_type")
    if kind == "group":
        cons = meta.get("consolidated_metadata")
        if cons is not None and not (isinstance(cons, dict) and isinstance(cons.get("metadata"), dict)):
            raise _err(where, "consolidated_metadata is neither null nor an object with metadata")
        return GroupWrite(attrs, {HINT_CONSOLIDATED: True} if cons is not None else {})
    if kind != "array":
        raise _err(where, f"node_type {kind!r} is neither group nor array")
    try:
        return _array(meta, attrs, where)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as exc:
        raise _err(where, f"malformed array metadata ({type(exc).__name__}: {exc})") from None


def _array(meta: dict, attrs: dict, where: str) -> ArrayWrite:
    if meta.get("storage_transformers"):
        raise _err(where, "storage_transformers are not supported")
    shape = tuple(int(x) for x in meta["shape"])
    if any(d < 0 for d in shape):
        raise _err(where, f"negative shape {list(shape)}")
    grid = meta["chunk_grid"]
    if grid.get("name") != "regular":
        raise _err(where, f"chunk_grid {grid.get('name')!r} (only regular grids are supported)")
    outer = tuple(int(x) for x in grid["configuration"]["chunk_shape"])
    if len(outer) != len(shape) or any(c <= 0 for c in outer):
        raise _err(where, f"chunk_shape {list(outer)} does not fit shape {list(shape)}")
    codecs = list(meta.get("codecs") or [])
    chunks, inner_codecs, index = outer, codecs, None
    if codecs and codecs[0].get("name") == "sharding_indexed":
        if not shape:  # the view serves a scalar as its one chunk file, never a shard
            raise UnsupportedType(f"{where}: a 0-d array cannot be sharded (write it unsharded)")
        if len(codecs) != 1:
            raise _err(where, "codecs after sharding_indexed are not supported")
        cfg = codecs[0].get("configuration") or {}
        chunks = tuple(int(x) for x in cfg["chunk_shape"])
        if len(chunks) != len(shape) or any(c <= 0 for c in chunks) or any(o % c for o, c in zip(outer, chunks)):
            raise _err(where, f"inner chunk_shape {list(chunks)} does not divide the shard shape {list(outer)}")
        inner_codecs = list(cfg.get("codecs") or [])
        index = ShardIndex.from_config(cfg)
    elif any(c.get("name") == "sharding_indexed" for c in codecs):  # tensorstore's transposed shards
        at = next(i for i, c in enumerate(codecs) if c.get("name") == "sharding_indexed")
        raise UnsupportedType(f"{where}: {', '.join(str(c.get('name')) for c in codecs[:at])} before "
                              f"sharding_indexed (codecs applied to whole shards) cannot be written through "
                              f"the view (put them inside the shard's codecs)")
    inner_codecs = implied_bytes(inner_codecs, meta.get("data_type"))
    ab = array_to_bytes_at(inner_codecs)
    if ab is None and any(c.get("name") == "sharding_indexed" for c in inner_codecs):
        raise UnsupportedType(f"{where}: nested sharding (sharding_indexed inside a shard) cannot be written "
                              f"through the view (one level of sharding can)")
    if ab is None:
        raise _err(where, "the codec chain has no bytes codec")
    data_type = meta.get("data_type")
    a2a = [c for c in inner_codecs[:ab] if is_real_transpose(c, len(shape))]  # an identity transpose is none
    order = _transpose(a2a, len(shape), where)
    other = [str(c.get("name")) for c in a2a if not decodes_to_itself(c, data_type) and order is None]
    head = inner_codecs[ab]
    npdt, dtype, unframe = _element(head, data_type, where)
    if order is not None and unframe is not None:
        raise UnsupportedType(f"{where}: a transposed array of text cannot be written through the view")
    chain = bytes_codecs(inner_codecs[ab + 1:], npdt.itemsize)
    coded = _numcodecs_chain(a2a if other or chain.reason else [], chain.reason, inner_codecs[ab + 1:], npdt, chunks,
                             unframe is None and order is None, where)
    if other and coded is None:
        raise UnsupportedType(f"{where}: array-to-array codec {', '.join(other)} cannot be written through the "
                              f"view (transpose, numcodecs.bitround and numcodecs.quantize can)")
    if chain.reason and coded is None:
        raise UnsupportedType(f"{where}: {chain.reason} is not supported")
    fill = fill_json(meta.get("fill_value"), dtype)
    dims = meta.get("dimension_names")
    if dims is not None and (not isinstance(dims, list) or len(dims) != len(shape)
                             or not all(d is None or isinstance(d, str) for d in dims)):
        raise _err(where, f"dimension_names {dims!r} must list one name or null per dimension")
    keys = KeyEncoding.from_json(meta.get("chunk_key_encoding"))
    # a 0-d array is stored as a scalar dataset: one chunk, at (0,) of a grid of one
    per = per_shard(outer, chunks) if index is not None else (1,) * max(len(shape), 1)
    hints: dict[str, Any] = {HINT_PER_SHARD: list(per)} if index is not None else {HINT_SHARDED: False}
    if is_time_type(data_type) or unframe is not None and data_type != VLEN_STRING:
        hints[HINT_DATA_TYPE] = data_type  # stored as int64 (time) or text (utf32), shown back as declared
    hints[HINT_SHAPE] = list(shape)  # sized by this writer (cf.unlimited_shapes) while the stored shape is this
    hints.update(fill_hints(meta))  # a NaN payload the stored fill (a JSON number) loses
    attrs = cf.decode_attributes(attrs, meta.get("data_type"))  # xarray's base64 _FillValue: a number
    if coded is not None:  # chunks decoded with numcodecs when written (numcodecs_chain.py)
        crc = bool(inner_codecs) and inner_codecs[-1].get("name") == "crc32c"
        hints.update(Spelling(crc, index or DEFAULT_INDEX, keys).hints())
        hints[HINT_NUMCODECS] = coded.hint()
        table = not chain.reason and any(f.spec.compressor for f in chain.filters)
        decoded = NumcodecsDecoded(coded, Incoming(npdt, (), False, crc))
        return ArrayWrite(shape, dtype, chunks, tuple(chain.filters) if table else STORED, Incoming(npdt), fill,
                          attrs, per, dims, hints, (keys, index, 0, decoded))
    filters = tuple(chain.filters)
    # served back as declared: the writer's open handle keeps reading with its own metadata
    hints.update(Spelling(chain.strip_crc32c, index or DEFAULT_INDEX, keys).hints())
    if order is not None:  # stored in C order; served in the writer's
        hints[HINT_TRANSPOSE] = list(order)
    elif a2a:  # they decode to their input: the chunks hold the values; shown back as declared
        hints[HINT_FILTERS] = a2a
    declared = inner_codecs[ab + 1:len(inner_codecs) - (1 if chain.strip_crc32c else 0)]
    if declared != filter_codecs(chain.filters, npdt.itemsize) or non_spec(declared):  # zstd checksum, numcodecs.*
        hints[HINT_CODECS] = declared
    elem = dtype.numpy() if npdt.kind == "c" else npdt  # complex: the stored {r, i} compound, same bytes
    inc = _incoming(elem, filters, chain.gzip, chain.strip_crc32c, unframe)
    untranspose = None
    if order is not None:  # chunks_in hands on the elements in C order: plain bytes
        untranspose, inc = Untransposed(order, chunks, inc), Incoming(elem)
    return ArrayWrite(shape, dtype, chunks, filters, inc, fill, attrs, per, dims, hints,
                      (keys, index, 0, untranspose))


def _numcodecs_chain(a2a: list[dict], reason: str, declared: list[dict], npdt: np.dtype, chunks: tuple[int, ...],
                     plain: bool, where: str) -> NumcodecsChain | None:
    """The declared chain when only numcodecs codes it (numcodecs_chain.py), else None."""
    if not plain or not needs_numcodecs(a2a, reason, declared):
        return None
    if declared and declared[-1].get("name") == "crc32c":
        declared = declared[:-1]
    if a2a and npdt.byteorder == ">":
        raise UnsupportedType(f"{where}: array-to-array codecs over big-endian bytes cannot be written through "
                              f"the view")
    coded = NumcodecsChain(tuple(a2a), tuple(declared), npdt, tuple(chunks))
    try:
        coded.check()  # naming a codec numcodecs does not have, or that cannot code the elements
    except UnsupportedType as exc:
        raise UnsupportedType(f"{where}: {exc}") from None
    return coded


@dataclass(frozen=True)
class NumcodecsDecoded:
    """A chunk a writer encoded with a numcodecs chain -> its elements in C order."""

    chain: NumcodecsChain
    writer: Incoming  # its crc32c trailer, if any

    def __call__(self, data: bytes) -> bytes:
        return self.chain.decode(unwrapped(self.writer, data))


def _transpose(a2a: list[dict], rank: int, where: str) -> tuple[int, ...] | None:
    """The permutation of the one ``transpose`` codec of an array (None if it has none)."""
    named = [c for c in a2a if c.get("name") == "transpose"]
    if not named:
        return None
    if len(a2a) > 1:
        raise UnsupportedType(f"{where}: a transpose with other array-to-array codecs "
                              f"({', '.join(str(c.get('name')) for c in a2a)}) cannot be written through the view")
    order = transpose_order(named[0], rank)
    if order is None:
        raise _err(where, f"transpose order {named[0].get('configuration')!r} is no permutation of {rank} "
                          f"dimensions")
    return order


@dataclass(frozen=True)
class Untransposed:
    """A chunk a writer encoded after a ``transpose`` -> its elements in C order (what the
    store holds; chunks reach ``to_stored`` as plain bytes, encoded there as stored)."""

    order: tuple[int, ...]
    chunks: tuple[int, ...]
    writer: Incoming  # the writer's own encoding

    def __call__(self, data: bytes) -> bytes:
        inc = self.writer
        data = unwrapped(inc, data)
        nbytes = math.prod(self.chunks) * inc.dtype.itemsize
        pipe = inc.pipeline()  # table filters only: its decode raises CodecError for bad bytes
        raw = data if pipe.is_identity else pipe.decode(data, nbytes)
        if len(raw) != nbytes:
            raise CodecError(f"chunk decodes to {len(raw)} bytes; a {list(self.chunks)} chunk needs {nbytes}")
        arr = np.frombuffer(raw, dtype=inc.dtype).reshape([self.chunks[o] for o in self.order])
        return np.ascontiguousarray(arr.transpose(np.argsort(self.order))).tobytes()


def _incoming(elem: np.dtype, filters: tuple, gzip: bool, crc: bool,
              unframe: Callable[[bytes, int], bytes] | None) -> Incoming:
    """How chunks are read. Text behind gzip is gunzipped member by member before its
    unframing (it is always encoded again): the view serves such chunks as two gzip members,
    so ``cp -r`` of the view, or zarr-python rewriting one inner chunk of a shard (it sends
    the others back as it read them), writes them so."""
    if not (gzip and unframe is not None):
        return Incoming(elem, filters, gzip, crc, unframe)
    inner, body = Pipeline(filters[:-1], elem.itemsize), unframe

    def gunzipped(raw: bytes, count: int) -> bytes:
        data = gunzip_members(raw)
        return body(data if inner.is_identity else inner.decode(data), count)

    return Incoming(elem, (), False, crc, gunzipped)


def _element(head: dict, data_type: Any, where: str) -> tuple[np.dtype, T.DType, Callable[[bytes, int], bytes] | None]:
    """The numpy element a writer encodes, the stored type, and the framing of text chunks."""
    if head["name"] == "vlen-utf8":
        if data_type != VLEN_STRING:
            raise UnsupportedType(f"{where}: vlen-utf8 holds data_type 'string', not {data_type!r}")
        return np.dtype("u1"), TEXT, vlen_utf8_body
    if head["name"] == "vlen-bytes":
        if data_type not in VLEN_BYTES_TYPES:
            raise UnsupportedType(f"{where}: vlen-bytes holds data_type 'variable_length_bytes', not {data_type!r}")
        return np.dtype("u1"), BYTE_SEQUENCE, vlen_bytes_body
    if head["name"] not in ("bytes", "endian"):
        raise UnsupportedType(f"{where}: {head['name']} arrays cannot be written through the view")
    endian = (head.get("configuration") or {}).get("endian", "little")
    u32 = utf32_dtype(data_type, endian)
    if u32 is not None:  # stored as variable-length UTF-8: the text HDF5 and netCDF readers expect
        return u32, TEXT, functools.partial(utf32_body, dt=u32)
    npdt = numpy_dtype(data_type, endian)
    if npdt is None:
        raise UnsupportedType(f"{where}: data_type {data_type!r} cannot be written through the view "
                              f"(numeric, bool, complex, string, fixed_length_utf32, numpy.datetime64/"
                              f"timedelta64 and null_terminated_bytes arrays can)")
    return npdt, from_numpy_any(npdt), None


def scale_dimensions(ds: Dataset, dims: list[str | None] | None) -> dict[str, Any]:
    """``_ARRAY_DIMENSIONS`` as a rewrite of ``ds``'s ``zarr.json`` spells the ``dimension_names``
    the view shows from HDF5 dimension scales (a netCDF-4 variable): the write service keeps
    written ``dimension_names`` as that attribute, so a rewrite that leaves them as shown
    (zarr-python ``attrs[...] =``, xarray ``to_zarr(mode="a")``) must compare equal and store
    nothing; stored, it would show in ``hdf5/`` beside the variable's ``DIMENSION_LIST``
    (h5netcdf and h5py list it; netCDF-C hides it). Empty where the dataset has the attribute."""
    if not dims or cf.ARRAY_DIMENSIONS in ds.attributes or all(d is None for d in dims):
        return {}
    return {cf.ARRAY_DIMENSIONS: [d or "" for d in dims]}


class ZarrIngester:
    meta_name = META
    skip_attributes = hdmf.RESERVED
    hint_prefix = HINT_PREFIX
    absent_is_zero = False  # an absent chunk is the fill value

    def __init__(self, ctx: ViewContext) -> None:
        self.ctx = ctx

    def parse_metadata(self, data: bytes, where: str) -> GroupWrite | ArrayWrite:
        return parse(data, where)

    def refuse_name(self, rest: list[str]) -> str | None:
        """Zarr v2 metadata: a v2 array written here would live only in the daemon's memory."""
        if rest[-1] in V2_METADATA:
            return f"Zarr v2 metadata ({rest[-1]}) cannot be written: this view is Zarr v3 (write with zarr_format=3)"
        if rest[-1].endswith(DRAFT_V3_METADATA):  # GDAL < 3.8's ZARR_V3: meta/root/<name>.array.json
            return ("metadata of a draft of Zarr v3 (meta/, data/) cannot be written: this view is Zarr v3 as "
                    "released (zarr.json; GDAL 3.8 and later write it)")
        if rest[-1] == N5_METADATA:  # an N5 writer (tensorstore's n5 driver) pointed here: its data would vanish
            return f"N5 metadata ({N5_METADATA}) cannot be written in the Zarr view (write N5 through n5/)"
        return None

    def shown(self, t: Any, ds: Dataset) -> ArrayWrite:
        from .view import ZarrDomain

        got = parse(ZarrDomain(t.model, self.ctx).shown_metadata(ds, t.h5path), f"{t.domain}:{t.h5path}")
        assert isinstance(got, ArrayWrite)
        inner = element_dims(ds)
        if inner:  # HDF5 array elements: shown as trailing dimensions of one chunk each
            keys, index, _, untranspose = got.layout
            return replace(got, layout=(keys, index, inner, untranspose))
        return got

    def hidden_members(self, t: Any, group: Group) -> list[str]:
        """Members of ``group`` this view does not show (netCDF dimensions without a variable):
        ``rm -r``, ``to_zarr(mode="w")`` and ``open_group(mode="w")`` remove all a user sees, so
        these must not keep the directory non-empty; they go with the group."""
        conventions = cf.Conventions(t.model)
        out = []
        for name, link in group.links.items():
            obj = t.model.get(link.id) if link.kind == "hard" and link.id else None
            if isinstance(obj, Dataset) and not conventions.shows(obj):
                out.append(name)
        return out

    def shown_attributes(self, t: Any, obj: Group | Dataset) -> dict[str, Any]:
        from .view import ZarrDomain

        domain = ZarrDomain(t.model, self.ctx)
        shown = domain.shown_attributes(obj, t.h5path, self.skip_attributes)
        if not isinstance(obj, Dataset):
            return shown
        shown = {**shown, **scale_dimensions(obj, domain.dimension_names_of(obj, t.h5path))}
        try:  # compared with what parse_metadata reads from a rewrite: spelled the same way
            return cf.decode_attributes(shown, hdmf.zarr_type(obj.type).data_type)
        except UnsupportedType:
            return shown

    def file_position(self, rest: list[str], decl: ArrayWrite) -> tuple[int, ...] | None:
        keys, _, inner, _ = decl.layout
        pos = keys.position(rest, len(decl.shape))
        if pos is None or not decl.shape:
            return None if pos is None else (0,)  # a 0-d array's one file (``c``): the scalar's chunk ``0``
        return dataset_position(pos, inner)

    def dir_position(self, rest: list[str], decl: ArrayWrite) -> tuple[list[int], int] | None:
        keys, _, _, _ = decl.layout
        want = keys.dir_position(rest, len(decl.shape))
        return None if want is None else (want, 0)

    def chunks_in(self, src: ByteSource, decl: ArrayWrite, members: dict[int, tuple[int, ...]],
                  where: str) -> Iterator[WrittenChunk]:
        _, index, inner, untranspose = decl.layout
        if inner:
            raise element_dims_refused(where)
        for w in self._chunks_in(src, decl, index, members, where):
            if untranspose is None:
                yield w
                continue
            try:
                yield replace(w, data=untranspose(w.data))
            except CodecError as exc:
                raise CodecError(f"{where}: chunk {list(w.coords)}: {exc}") from None

    def _chunks_in(self, src: ByteSource, decl: ArrayWrite, index: ShardIndex | None,
                   members: dict[int, tuple[int, ...]], where: str) -> Iterator[WrittenChunk]:
        size = src.size()
        if index is None:
            if size and 0 in members:
                yield WrittenChunk(members[0], src.read(0, size))
            return
        if not size:
            return
        n = math.prod(decl.per_file)
        try:
            start, length = index.region(size, n)
            entries = index.decode(src.read(start, length), n)
        except ValueError as exc:
            raise _err(where, exc) from None
        except CodecError as exc:
            raise CodecError(f"{where}: {exc}") from None
        for local in range(n):
            off, nb = int(entries[local, 0]), int(entries[local, 1])
            if off == MISSING and nb == MISSING:
                continue
            if off + nb > size:
                raise _err(where, f"inner chunk {local} ({off}+{nb}) lies outside the shard of {size} bytes")
            if local in members:
                yield WrittenChunk(members[local], src.read(off, nb))


def make_ingester(ctx: ViewContext) -> ZarrIngester:
    return ZarrIngester(ctx)
