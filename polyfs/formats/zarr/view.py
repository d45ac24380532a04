"""The Zarr v3 view: ``MNT/zarr/<stem>.zarr/``, one hierarchy per domain.

Every HDF5 group is a Zarr group and every dataset a Zarr array, each with
its ``zarr.json`` (attributes, links and references per hdmf.py). Chunk
bytes are served as stored wherever a Zarr codec chain expresses the
stored encoding (chunkserve.py has the recipes):

- inner codecs = ``bytes`` (the stored byte order) then one codec per HDF5
  filter from the translation table (``CodecSpec.zarr``): ``gzip`` (a gzip
  member spliced from the stored zlib stream), ``zstd``, ``blosc`` (Zarr v3
  core codecs, which every v3 reader has).
- **transcoded** (to the plain ``bytes`` codec, whose size is known from the
  shape, so listing and ``stat`` read no chunk): chunks whose filters include
  one without a core codec (HDF5 shuffle, as netCDF's ``zlib=True`` writes,
  fletcher32, bzip2; tensorstore has none of them), chunks whose deflate is
  followed by another filter (fletcher32 over a zlib stream cannot be
  spliced), and structured types with big-endian fields or padding
  (zarr-python reads structured fields little-endian and packed: a padded
  compound, e.g. a netCDF C struct, is served packed). The mount option ``zarr_numcodecs``
  (``ViewOptions.zarr_numcodecs``) serves the first kind as stored instead,
  under ``numcodecs.shuffle``/``numcodecs.fletcher32``/``numcodecs.bz2``,
  which zarr-python alone reads.
- complex numbers (stored as HDF5 ``{r, i}`` compounds) are ``complex64`` /
  ``complex128``: the same bytes.
- variable-length strings use ``vlen-utf8``, whose encoding is HSDS's
  (int32-LE length + bytes per element) behind a uint32 element count: the
  count is served as a literal before the stored chunk, as its own gzip
  member / zstd frame / bzip2 stream (``zarr_numcodecs`` only) before a
  compressed one (gzip, zstd and bz2 decoders read concatenated members as
  one stream). Other encodings (HSDS Blosc frames) are transcoded, and object references become JSON
  text; those outputs are measured once when their file is first sized
  (the one case where sizing reads chunk data).

**Sharding** (default; ``ViewOptions.zarr_sharded``): each array is
``sharding_indexed`` with the stored chunk as inner chunk and the index at
the end (``bytes`` little-endian + ``crc32c``); a missing inner chunk is
``2^64-1`` twice, a shard with no chunk is no file. Shard files are the
inner chunks in C order of the shard's chunk grid, then the index, all
computed from chunk sizes.

Shard shape rule (:func:`shard_factors`): start from one chunk; repeatedly
double (capped at the array's chunk-grid extent) the number of chunks along
the dimension whose shard extent in elements is smallest (ties: the last
dimension), as long as the shard then holds at most
``ViewOptions.shard_max_chunks`` chunks; stop when no dimension can grow.
The shard is therefore roughly cubic in elements, never larger than
``shard_max_chunks`` chunks, and covers the whole array when that fits.
``ViewOptions.shard_shape[<dataset path>]`` (chunks per shard along each
dimension) overrides the rule for one dataset, and so does the layout a
writer chose when it created the array through this view (kept in the
dataset's ``creationProperties.polyfs``: ``zarr_chunks_per_shard`` or
``zarr_sharded: false``), so the writer finds its files where it put them.
The same hints keep the rest of the writer's spelling (spec.Spelling), served
back because zarr-python and tensorstore read with the metadata their open
handle wrote: a trailing ``crc32c`` inner codec (each served chunk, still
zero-copy, gets a computed CRC32C trailer) and the shard index's codecs and
location (``index_location: "start"`` puts the index first; index codecs
with or without ``crc32c``, either byte order), the chunk key encoding (``"."``
separator: files ``c.0.0`` beside ``zarr.json``; ``v2``: ``0.0`` or ``0/0``), and
bytes-to-bytes codec settings that decode alike but are spelled otherwise
(zstd ``checksum``, blosc ``blocksize``/``typesize``...). Arrays without such hints
are served with ``crc32c``-checked indexes at the end and no inner checksum.

**Unsharded** (``zarr_sharded=False``): one file per stored chunk at
``c/i/j/k`` with the codec chain directly. Scalar datasets are always
unsharded (their one chunk is the file ``c``), and so are structured and
``raw_bytes`` arrays: zarr-python 3.1 caches shard specs keyed by the fill
value, which is an unhashable numpy void scalar for those types, so it
cannot read them sharded (its own sharded structured arrays fail the same).

Attributes, dimension names and which netCDF datasets are arrays follow
the netCDF/xarray conventions of cf.py (``xarray.open_zarr`` of a domain
imported from netCDF gives what ``xarray.open_dataset`` of the file gives).

An array written with a ``transpose`` codec (``spec.HINT_TRANSPOSE``) is stored in C
order, as every other view reads it, and its chunks are served transposed again and
compressed as stored (:func:`transposed_recipe`), under the chain its writer declared: the
writer's open handle reads and updates them (their sizes are measured when first listed,
unless they are uncompressed).

Trailing dimensions of HDF5 array types (``H5T_ARRAY``) become extra array
dimensions (one chunk deep); their bytes are identical. Not shown: committed
datatypes, null dataspaces, region references, variable-length sequences (but those of
unsigned bytes: ``variable_length_bytes`` through ``vlen-bytes``, read-only) and
compounds holding variable-length or reference fields (logged).
"""
from __future__ import annotations

import bz2
import gzip
import json
import logging
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from ...codecs import vlen
from ...codecs.pipeline import Pipeline
from ...codecs.registry import BZIP2, DEFLATE, ZSTD
from ...errors import PolyfsError, UnsupportedType
from ...model import values
from ...model.editor import group_hints, is_implicit
from ...model.schema import Dataset, Group
from ...model.tree import DomainModel
from ...model.types import resolved
from ...vfile import Literal, VFile
from ...views import chunkserve as cs
from ...views import hdmf
from ...views.gridtree import coord_tree
from . import FORMAT, cf, spec
from .numcodecs_chain import HINT_NUMCODECS, NumcodecsChain
from .spec import CHUNK_DIR, META
from ...views.base import DirNode, FileNode, Node, ViewContext

log = logging.getLogger(__name__)

SUFFIX = FORMAT.suffix


# -- geometry ------------------------------------------------------------------------
def shard_factors(grid: tuple[int, ...], chunks: tuple[int, ...], max_chunks: int) -> tuple[int, ...]:
    """Chunks per shard along each dimension (the rule in the module docstring)."""
    k = [1] * len(grid)
    max_chunks = max(1, int(max_chunks))
    while True:
        best, best_ext = None, None
        total = math.prod(k)
        for d in reversed(range(len(grid))):
            if k[d] >= grid[d]:
                continue
            grown = min(2 * k[d], grid[d])
            if total // k[d] * grown > max_chunks:
                continue
            ext = k[d] * chunks[d]
            if best_ext is None or ext < best_ext:
                best, best_ext = d, ext
        if best is None:
            return tuple(k)
        k[best] = min(2 * k[best], grid[best])


# -- codecs and recipes -----------------------------------------------------------------
def filter_codecs(pipe: Pipeline) -> list[dict]:
    return spec.filter_codecs(pipe.filters, pipe.itemsize)


# zarr-python's numcodecs codecs that read what a Zarr v3 core codec reads (the view shows the core one)
SAME_BYTES = {"numcodecs.zstd": "zstd", "numcodecs.gzip": "gzip", "numcodecs.blosc": "blosc"}


def plain_bytes_codec(zt: hdmf.ZarrType) -> dict:
    if zt.kind in ("vlen", "reference"):
        return {"name": zt.vlen_codec, "configuration": {}}
    if zt.endian is None:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": zt.endian}}


def choose_recipe(zt: hdmf.ZarrType, src: cs.ChunkSource, paths: dict[str, str],
                  numcodecs: bool = False) -> tuple[cs.Recipe, list[dict]]:
    """How a dataset's chunks are served, and the inner codec chain that reads them.

    ``numcodecs``: filters without a Zarr v3 core codec (shuffle, fletcher32, bzip2) are
    served as stored under zarr-python's ``numcodecs.*`` codecs; else (the default, so
    every v3 reader opens the array) such chunks are decoded to the plain ``bytes`` codec,
    whose size is known from the shape (no chunk is read to list or ``stat`` a file).
    """
    pipe = src.pipeline
    head = [plain_bytes_codec(zt)]
    count = math.prod(src.dataset.chunks) if src.dataset.chunks else 1
    if zt.kind == "reference":
        return _reference_recipe(src, paths, count), head
    if zt.kind == "vlen":
        prefix = spec.vlen_count(count)
        if pipe.is_identity:
            return cs.stored(prefix), head
        if pipe.only(DEFLATE):
            return cs.gzip_spliced(gzip.compress(prefix, mtime=0), vlen=True), head + filter_codecs(pipe)
        if pipe.only(ZSTD):
            import numcodecs

            return cs.stored(numcodecs.Zstd(level=1).encode(prefix)), head + filter_codecs(pipe)
        if pipe.only(BZIP2) and numcodecs:
            return cs.stored(bz2.compress(prefix)), head + filter_codecs(pipe)
        t = cs.Transcoding(("zarr-vlen-utf8",), cs.identity, lambda raw, p=prefix: p + raw, None)
        return cs.transcoded(t, "variable-length chunk re-framed"), head
    raw = src.raw_nbytes
    if zt.needs_swap:  # little-endian fields; a padded compound also loses its padding (Zarr's are packed)
        length = raw // zt.stored.itemsize * zt.served.itemsize if raw is not None else None
        t = cs.Transcoding(("zarr-structured-le",), cs.identity, cs.astype_transform(zt.stored, zt.served), length)
        packs = zt.stored.itemsize != zt.served.itemsize
        why = "padded compound packed" if packs else "structured fields to little-endian"
        return cs.transcoded(t, why), head
    if zt.space_padded:  # Zarr pads with NULs: the value HDF5 reads has no trailing spaces
        length = zt.data_type["configuration"]["length_bytes"]
        t = cs.Transcoding(("zarr-spacepad",), cs.identity, space_to_null(length), raw)
        return cs.transcoded(t, "space padding to null padding"), head
    if DEFLATE in pipe.ids and not cs.deflate_last(pipe):
        t = cs.Transcoding(("zarr-raw",), cs.identity, None, raw)
        return cs.transcoded(t, "deflate is not the last filter"), head
    if pipe.opaque:  # filters outside the table: decoded by HDF5's own filters, served as plain bytes
        t = cs.Transcoding(("zarr-raw",), cs.identity, None, raw)
        return cs.transcoded(t, cs.opaque_reason(pipe, "Zarr")), head
    codecs = filter_codecs(pipe)
    others = spec.non_spec(codecs)
    if others and not numcodecs:
        t = cs.Transcoding(("zarr-raw",), cs.identity, None, raw)
        return cs.transcoded(t, f"{'+'.join(others)}: not Zarr v3 codecs"), head
    recipe = cs.gzip_spliced() if cs.deflate_last(pipe) else cs.stored()
    return recipe, head + codecs


def utf32_recipe(src: cs.ChunkSource, dt: np.dtype) -> tuple[cs.Recipe, list[dict]]:
    """Stored variable-length text served as the ``fixed_length_utf32`` its writer declared,
    compressed with the stored codecs where Zarr v3 has them (so the view shows the chain
    the writer declared, which its later opens encode with; text another writer made longer
    than the declared length is cut to fit, with a log line)."""
    count = math.prod(src.dataset.chunks) if src.dataset.chunks else 1
    stored, pipe = src.dataset.type, src.pipeline
    head = [{"name": "bytes", "configuration": {"endian": "little"}}]
    codecs = filter_codecs(pipe)
    encode: Any = cs.identity
    if pipe.only(DEFLATE):
        level = pipe.filters[0].level
        encode = lambda raw: gzip.compress(raw, 6 if level is None else level, mtime=0)  # noqa: E731
        head = head + codecs
    elif not pipe.is_identity and DEFLATE not in pipe.ids and not pipe.opaque and not spec.non_spec(codecs):
        encode = pipe.encode
        head = head + codecs

    def run(raw: bytes) -> bytes:
        texts = [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)
                 for x in vlen.decode(stored, raw, count).tolist()]
        out, cut = spec.utf32_chunk(texts, dt)
        if cut:
            log.warning("zarr: %d strings of %s are longer than its fixed_length_utf32 of %d characters; "
                        "served cut", cut, src.dataset.id, dt.itemsize // 4)
        return out

    length = count * dt.itemsize if encode is cs.identity else None
    t = cs.Transcoding(("zarr-utf32", dt.str), encode, run, length)
    return cs.transcoded(t, "variable-length text as fixed_length_utf32"), head


def compressed_as_stored(pipe: Pipeline) -> tuple[Any, list[dict]]:
    """How a transcoded chunk is compressed again as its stored filters are, under the Zarr
    v3 codecs that read them (``gzip``: a member; else the pipeline's own encode), or left
    plain (identity, no codec) where Zarr v3 has no codec for them."""
    codecs = filter_codecs(pipe)
    if pipe.only(DEFLATE):
        level = pipe.filters[0].level
        return (lambda raw: gzip.compress(raw, 6 if level is None else level, mtime=0)), codecs  # noqa: E731
    if not pipe.is_identity and DEFLATE not in pipe.ids and not pipe.opaque and not spec.non_spec(codecs):
        return pipe.encode, codecs
    return cs.identity, []


def transposed_recipe(src: cs.ChunkSource, chunk: tuple[int, ...], order: tuple[int, ...],
                      head: list[dict]) -> tuple[cs.Recipe, list[dict]]:
    """Chunks served in the order of the ``transpose`` codec their writer declared (stored in
    C order), compressed as stored: its open handle reads and updates them with its own chain."""
    element = np.dtype(f"V{src.pipeline.itemsize}")
    encode, codecs = compressed_as_stored(src.pipeline)

    def run(raw: bytes) -> bytes:
        return np.ascontiguousarray(np.frombuffer(raw, dtype=element).reshape(chunk).transpose(order)).tobytes()

    length = src.raw_nbytes if encode is cs.identity else None
    t = cs.Transcoding(("zarr-transpose", order), encode, run, length)
    transpose = {"name": "transpose", "configuration": {"order": list(order)}}
    return cs.transcoded(t, "transposed as its writer declared"), [transpose] + head + codecs


def numcodecs_recipe(chain: NumcodecsChain, head: dict) -> tuple[cs.Recipe, list[dict]]:
    """Chunks stored as values, served encoded with the numcodecs chain their writer declared."""
    t = cs.Transcoding(("zarr-numcodecs", json.dumps(chain.hint(), sort_keys=True)), chain.encode, None, None)
    return cs.transcoded(t, f"{chain.names()}: served as its writer declared"), \
        list(chain.filters) + [head] + list(chain.codecs)


def space_to_null(length: int):
    """Chunk bytes of space-padded strings with their padding as NULs (what HDF5 gives
    a reader of a null-padded string: the same text)."""
    def run(raw: bytes) -> bytes:
        arr = np.frombuffer(raw, dtype=f"S{length}")
        return np.char.rstrip(arr, b" ").astype(f"S{length}").tobytes()
    return run


def _reference_recipe(src: cs.ChunkSource, paths: dict[str, str], count: int) -> cs.Recipe:
    itemsize = resolved(src.dataset.type).numpy().itemsize

    def refs_to_json(raw: bytes) -> bytes:
        refs = np.frombuffer(raw, dtype=f"S{itemsize}")
        items = []
        for r in refs:
            ref = hdmf.ref_json(values.ref_from_json(bytes(r)), paths)
            items.append(b"" if ref is None else json.dumps(ref).encode("utf-8"))
        return spec.vlen_utf8(items)

    # the output depends on where the targets are: the paths are part of the cache key
    t = cs.Transcoding(("zarr-refs-json", hash(frozenset(paths.items()))), cs.identity, refs_to_json, None)
    return cs.transcoded(t, "object references as JSON text")


# -- one array ------------------------------------------------------------------------------
@dataclass
class ArrayPlan:
    """Everything the view needs to serve one dataset as a Zarr array."""

    ctx: ViewContext
    ds: Dataset
    path: str
    zt: hdmf.ZarrType
    paths: dict[str, str]
    attributes: dict[str, Any]
    dimension_names: list[str | None] | None
    sharded: bool = True
    # netCDF's longer dims (cf.unlimited_shapes): chunks past the dataset's own extent are missing (fill)
    shown_dims: tuple[int, ...] | None = None
    _src: cs.ChunkSource | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.ds.shape.array_shape) + self.zt.inner

    @property
    def shown_shape(self) -> tuple[int, ...]:
        """The ``shape`` of ``zarr.json``: the dataset's, or netCDF's longer one."""
        return self.shape if self.shown_dims is None else tuple(self.shown_dims) + self.zt.inner

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return tuple(self.ds.chunks if self.ds.shape.array_shape else ()) + self.zt.inner

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(self.ds.grid) + (1,) * len(self.zt.inner)

    @property
    def is_scalar(self) -> bool:
        return not self.shape

    @property
    def src(self) -> cs.ChunkSource:
        if self._src is None:
            self._src = cs.ChunkSource.of(self.ctx, self.ds)
        return self._src

    @cached_property
    def recipe_codecs(self) -> tuple[cs.Recipe, list[dict]]:
        if self.transpose is not None:
            recipe, codecs = transposed_recipe(self.src, self.chunk_shape, self.transpose,
                                               [plain_bytes_codec(self.zt)])
            codecs = self.declared_spelling(codecs)
        elif self.numcodecs_chain is not None:
            recipe, codecs = numcodecs_recipe(self.numcodecs_chain, plain_bytes_codec(self.zt))
        else:
            if self.utf32 is not None:
                recipe, codecs = utf32_recipe(self.src, self.utf32)
            else:
                recipe, codecs = choose_recipe(self.zt, self.src, self.paths, self.ctx.options.zarr_numcodecs)
            recipe, codecs = self.declared_chain(recipe, codecs)
            codecs = self.declared_filters() + codecs
        if self.spelling.crc32c:  # the writer's crc32c: a computed trailer after each served chunk
            return recipe.checksummed(), codecs + [dict(spec.CRC32C_CODEC)]
        return recipe, codecs

    def declared_chain(self, recipe: cs.Recipe, codecs: list[dict]) -> tuple[cs.Recipe, list[dict]]:
        """The bytes-to-bytes codecs as the array's writer declared them, when they stand for
        the stored filters: its open handle reads with its own chain, and tensorstore refuses
        to resize an array whose ``zarr.json`` reads back otherwise. The same codecs spelled
        otherwise (zstd ``checksum``, blosc ``blocksize``) are shown as written; other codecs
        for the same filters (``numcodecs.zlib``: the zlib stream, not a gzip member;
        ``numcodecs.bz2``/``shuffle``, otherwise served decoded) serve the stored bytes as they
        are, as a local disk would. Else (no hint, filters changed since): ``codecs``."""
        declared = self.hints.get(spec.HINT_CODECS)
        if not isinstance(declared, list) or not all(isinstance(c, dict) for c in declared):
            return recipe, codecs
        pipe = self.src.pipeline
        try:
            chain = spec.bytes_codecs(declared, pipe.itemsize)
        except (TypeError, ValueError, AttributeError, OverflowError):
            return recipe, codecs
        if chain.reason or chain.strip_crc32c or \
                spec.filter_codecs(chain.filters, pipe.itemsize) != spec.filter_codecs(pipe.filters, pipe.itemsize):
            return recipe, codecs
        shown = [c.get("name") for c in codecs[1:]]
        if [c.get("name") for c in declared] == shown:
            return recipe, codecs[:1] + declared  # the same codecs, so the same framing
        if [SAME_BYTES.get(c.get("name"), c.get("name")) for c in declared] == shown:
            return recipe, codecs  # zarr-python's numcodecs.zstd reads the bytes the core zstd shown reads
        plain = self.zt.kind == "fixed" and not self.zt.needs_swap and not self.zt.space_padded
        if not plain or self.utf32 is not None or pipe.opaque:
            return recipe, codecs
        return (cs.gzip_spliced() if chain.gzip else cs.stored()), [plain_bytes_codec(self.zt)] + declared

    @cached_property
    def numcodecs_chain(self) -> NumcodecsChain | None:
        """The numcodecs chain the array's writer declared (numcodecs_chain.py), if it still fits."""
        hint = self.hints.get(HINT_NUMCODECS)
        if hint is None or self.zt.kind != "fixed" or self.zt.needs_swap or self.zt.space_padded \
                or self.zt.inner or self.utf32 is not None or not self.chunk_shape or self.src.pipeline.opaque:
            return None
        return NumcodecsChain.from_hint(hint, np.dtype(resolved(self.ds.type).numpy()), tuple(self.chunk_shape))

    @cached_property
    def transpose(self) -> tuple[int, ...] | None:
        """The order of the ``transpose`` codec the array's writer declared (its chunks are
        served so), if it still fits the array."""
        order = self.hints.get(spec.HINT_TRANSPOSE)
        if not isinstance(order, list) or self.zt.kind != "fixed" or self.zt.needs_swap or self.zt.space_padded \
                or self.zt.inner or not self.chunk_shape:
            return None
        return spec.transpose_order({"configuration": {"order": order}}, len(self.chunk_shape))

    def declared_spelling(self, codecs: list[dict]) -> list[dict]:
        """``codecs`` (a transcoded chain: array-to-array codecs, ``bytes``, then the codecs of
        the stored filters) with those last spelled as the writer declared them, when they
        read the same bytes."""
        declared = self.hints.get(spec.HINT_CODECS)
        at = spec.array_to_bytes_at(codecs)
        if not isinstance(declared, list) or not all(isinstance(c, dict) for c in declared) or at is None:
            return codecs
        shown = codecs[at + 1:]
        try:
            chain = spec.bytes_codecs(declared, self.src.pipeline.itemsize)
        except (TypeError, ValueError, AttributeError, OverflowError):
            return codecs
        same = [SAME_BYTES.get(c.get("name"), c.get("name")) for c in declared] == [c.get("name") for c in shown]
        if chain.reason or chain.strip_crc32c or not same or \
                spec.filter_codecs(chain.filters, self.src.pipeline.itemsize) != shown:
            return codecs
        return codecs[:at + 1] + declared

    def declared_filters(self) -> list[dict]:
        """The array-to-array codecs the writer declared that decode to their input
        (``numcodecs.bitround``/``quantize``): the stored chunks are the values, which they
        read as they are, and a writer reopening the array (xarray appending) keeps them."""
        declared = self.hints.get(spec.HINT_FILTERS)
        if not isinstance(declared, list) or self.zt.kind != "fixed" or \
                not all(isinstance(c, dict) and spec.decodes_to_itself(c, self.data_type) for c in declared):
            return []
        return list(declared)

    @cached_property
    def spelling(self) -> spec.Spelling:
        """The spelling a writer declared in its ``zarr.json`` (kept in the view hints), which
        the view serves back so that the writer's open handle reads what it wrote."""
        return spec.Spelling.from_hints(self.hints)

    @cached_property
    def factors(self) -> tuple[int, ...]:
        if not self.use_shards:
            return (1,) * len(self.grid)
        rank = len(self.ds.grid)
        hinted = self.hints.get(spec.HINT_PER_SHARD)
        opt = self.ctx.options.shard_shape.get(self.path) or hinted
        if opt is not None:
            if len(opt) == rank and all(int(k) > 0 for k in opt):
                if opt is hinted:  # the writer's own shard shape, even past the array's edge
                    return tuple(int(k) for k in opt) + (1,) * len(self.zt.inner)
                return tuple(min(int(k), max(g, 1)) for k, g in zip(opt, self.ds.grid)) + (1,) * len(self.zt.inner)
            log.warning("zarr: shard_shape for %s has %d dims, the dataset %d; using the default rule",
                        self.path, len(opt), rank)
        return shard_factors(self.grid, self.chunk_shape, self.ctx.options.shard_max_chunks)

    @property
    def hints(self) -> dict:
        """How a writer laid the array out through this view (kept with the dataset)."""
        h = self.ds.creation_properties.get("polyfs")
        return h if isinstance(h, dict) else {}

    @property
    def use_shards(self) -> bool:
        if spec.HINT_SHARDED in self.hints:
            sharded = bool(self.hints[spec.HINT_SHARDED])
        else:
            sharded = self.sharded or spec.HINT_PER_SHARD in self.hints
        return sharded and not self.is_scalar and not self.void_fill

    @property
    def void_fill(self) -> bool:
        """Structured and raw_bytes arrays: zarr-python 3.1 hashes a shard's fill value
        (a numpy void scalar here, unhashable) and cannot read them sharded."""
        return isinstance(self.zt.data_type, dict) and self.zt.data_type["name"] in ("structured", "raw_bytes")

    @property
    def data_type(self) -> Any:
        """The stored type's, or the time type a writer declared for its int64 array, or the
        ``fixed_length_utf32`` it declared for text (stored as variable-length strings)."""
        declared = self.hints.get(spec.HINT_DATA_TYPE)
        if self.zt.data_type == "int64" and spec.is_time_type(declared) or self.utf32 is not None:
            return declared
        return self.zt.data_type

    @cached_property
    def utf32(self) -> np.dtype | None:
        """The ``<U<n>`` a writer declared for this text array (served as such), else None."""
        if self.zt.kind != "vlen" or self.zt.data_type != spec.VLEN_STRING:
            return None
        return spec.utf32_dtype(self.hints.get(spec.HINT_DATA_TYPE), "little")

    def metadata(self) -> dict[str, Any]:
        recipe, codecs = self.recipe_codecs
        fill = hdmf.zarr_fill(self.zt, self.ds.type, self.ds.fill_value)
        if spec.HINT_FILL in self.hints and not self.zt.inner:
            fill = spec.declared_fill(self.hints[spec.HINT_FILL], fill, self.ds.type)
        if self.use_shards:
            outer = tuple(k * c for k, c in zip(self.factors, self.chunk_shape))
            codecs = [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": list(self.chunk_shape), "codecs": codecs, **self.spelling.index.config()}}]
        else:
            outer = self.chunk_shape
        meta: dict[str, Any] = {
            "zarr_format": 3, "node_type": "array",
            "shape": list(self.shown_shape), "data_type": self.data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(outer)}},
            "chunk_key_encoding": self.spelling.keys.to_json(),
            "fill_value": fill, "codecs": codecs, "attributes": self.attributes,
        }
        if self.dimension_names is not None:
            # a null name is kept as "" in _ARRAY_DIMENSIONS (netCDF and xarray have no unnamed
            # dimension): shown as null again, as written (tensorstore compares them at a resize)
            meta["dimension_names"] = [d or None for d in self.dimension_names] + [None] * len(self.zt.inner)
        return meta

    # -- chunk files ------------------------------------------------------------------------
    @cached_property
    def layout(self) -> "FileLayout":
        return FileLayout(self.src.index.linear, self.grid, self.factors)

    def file_vfile(self, position: int) -> VFile:
        """The shard (or chunk) file at linear position ``position`` of the file grid."""
        recipe, _ = self.recipe_codecs
        linear, inner = self.layout.members(position)
        items = cs.build_items(self.src, recipe, linear)
        if not self.use_shards:
            return VFile(items.segments)
        shard_index = self.spelling.index
        n = math.prod(self.factors)
        if shard_index.at_start:
            offsets = items.offsets + shard_index.nbytes(n)
            return VFile([Literal(shard_index.encode(spec.index_table(n, inner, offsets, items.lengths)))]
                         + items.segments)
        index = shard_index.encode(spec.index_table(n, inner, items.offsets, items.lengths))
        return VFile(items.segments + [Literal(index)])

    def file_sizes(self) -> np.ndarray | None:
        """Size of each file of ``layout.files`` from chunk sizes alone (None: measured outputs)."""
        lay = self.layout
        recipe, _ = self.recipe_codecs
        lengths = recipe.item_lengths(self.src.index.sizes_for(lay.linear))
        if lengths is None or lay.files.size == 0:
            return None
        starts = np.searchsorted(lay.flin, lay.files)
        sizes = np.add.reduceat(lengths, starts)
        if self.use_shards:
            sizes = sizes + self.spelling.index.nbytes(math.prod(self.factors))
        return sizes

    def file_entries(self) -> Mapping[str, Node]:
        """``c`` (a directory tree of shard/chunk files, or the file of a scalar)."""
        lay = self.layout
        if len(lay.files) == 0:
            return {}
        mtime = self.ctx.catalog.dataset_modified(self.ds)
        keys = self.spelling.keys
        if self.is_scalar:
            return {keys.key(()): FileNode(keys.key(()), lambda: self.file_vfile(0), mtime)}
        coords = np.stack(np.unravel_index(lay.files, lay.file_grid), axis=-1) if lay.files.size else \
            np.zeros((0, len(lay.file_grid)), dtype=np.int64)

        sizes = self.file_sizes()

        def make_file(name: str, row: int) -> FileNode:
            pos = int(lay.files[row])
            hint = None if sizes is None else (lambda: int(sizes[row]))
            return FileNode(name, lambda: self.file_vfile(pos), mtime, size_hint=hint, cheap_hint=True,
                            cheap_build=sizes is not None)

        rows = np.arange(len(coords))
        if keys.separator != "/":  # the writer's "c.0.0" (or v2 "0.0"): files beside zarr.json
            names = (keys.key(tuple(int(c) for c in row)) for row in coords.tolist())
            return {name: make_file(name, r) for name, r in zip(names, rows.tolist())}
        if keys.name == "default":
            return {CHUNK_DIR: coord_tree(CHUNK_DIR, coords, rows, 0, make_file, mtime)}
        return coord_tree("", coords, rows, 0, make_file, mtime).entries()  # v2 "0/0": no "c" level


class FileLayout:
    """Which chunks go into which file: a shard grid (or the chunk grid itself)."""

    def __init__(self, linear: np.ndarray, grid: tuple[int, ...], factors: tuple[int, ...]) -> None:
        self.factors = factors
        storage = grid if grid else (1,)
        fac = factors if grid else (1,)
        self.file_grid = tuple(-(-g // k) for g, k in zip(storage, fac))
        linear = np.asarray(linear, dtype=np.int64)
        if all(k == 1 for k in fac) and bool(np.all(linear[1:] > linear[:-1])):
            # a file per chunk, listed in order (the chunk index is): nothing to group or sort,
            # which an array of many chunk files re-rendered at every change paid each time
            self.flin, self.ilin, self.linear = linear, np.zeros(linear.shape, np.int64), linear
            self.files = linear
            return
        if linear.size:
            coords = np.stack(np.unravel_index(linear, storage), axis=-1)
            fac_a = np.asarray(fac, dtype=np.int64)
            flin = np.ravel_multi_index(tuple((coords // fac_a).T), self.file_grid).astype(np.int64)
            ilin = np.ravel_multi_index(tuple((coords % fac_a).T), fac).astype(np.int64)
        else:
            flin = ilin = np.zeros(0, dtype=np.int64)
        order = np.lexsort((ilin, flin))
        self.flin, self.ilin, self.linear = flin[order], ilin[order], np.asarray(linear)[order]
        self.files = np.unique(self.flin)

    def members(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.searchsorted(self.flin, [position, position + 1])
        return self.linear[lo:hi], self.ilin[lo:hi]


# -- the hierarchy -------------------------------------------------------------------------------
class ZarrDomain(hdmf.Hierarchy):
    """A domain's Zarr hierarchy, with the netCDF/xarray conventions of cf.py."""

    def __init__(self, model: DomainModel, ctx: ViewContext) -> None:
        super().__init__(model, SUFFIX)
        self.ctx = ctx
        self.cf = cf.Conventions(model)

    meta_name = META

    def group_metadata(self, group: Group, path: str) -> dict[str, Any] | None:
        if is_implicit(group):
            return None
        meta: dict[str, Any] = {"zarr_format": 3, "node_type": "group",
                                "attributes": self.group_attributes(group, path)}
        if group_hints(group).get(spec.HINT_CONSOLIDATED):
            meta["consolidated_metadata"] = spec.consolidated(self._below(path))
        return meta

    def _below(self, path: str) -> dict[str, dict]:
        """The metadata of every node the view shows below the group at ``path``, by relative
        path (what ``zarr.consolidate_metadata`` would gather from this hierarchy now)."""
        out: dict[str, dict] = {}
        todo = [(path, "")]
        while todo:
            gpath, rel = todo.pop()
            for name, entry in self.children.get(gpath, []):
                if name == META:
                    continue
                key = f"{rel}{name}"
                if isinstance(entry.obj, Group):
                    if is_implicit(entry.obj):
                        continue  # no zarr.json: not a node, nor anything below it
                    out[key] = {"zarr_format": 3, "node_type": "group",
                                "attributes": self.group_attributes(entry.obj, entry.path),
                                "consolidated_metadata": spec.consolidated({})}
                    todo.append((entry.path, key + "/"))
                elif isinstance(entry.obj, Dataset):
                    plan = self.plan(entry.obj, entry.path)
                    if plan is not None:
                        out[key] = plan.metadata()
        return dict(sorted(out.items()))

    def group_attributes(self, group: Group, path: str, skip: tuple[str, ...] = hdmf.RESERVED) -> dict[str, Any]:
        return self.cf.group(super().group_attributes(group, path, skip))

    def shown_attributes(self, obj: Group | Dataset, path: str, skip: tuple[str, ...]) -> dict[str, Any]:
        attrs = super().shown_attributes(obj, path, skip)
        dims = self._dimension_names(obj, path) if isinstance(obj, Dataset) else None
        return self.cf.attributes(obj, attrs, dims)

    def plan(self, ds: Dataset, path: str) -> "ArrayPlan | None":
        if not self.cf.shows(ds):
            return None  # a netCDF dimension without a variable
        return self.array_plan(ds, path)

    def dimension_names_of(self, ds: Dataset, path: str) -> list[str | None] | None:
        """The ``dimension_names`` shown for ``ds`` (None if it has none)."""
        return self._dimension_names(ds, path)

    def _dimension_names(self, ds: Dataset, path: str) -> list[str | None] | None:
        try:
            return hdmf.dimension_names(self.model, ds, path, self.paths, lambda: self._gone_scales)
        except PolyfsError:
            return None

    @cached_property
    def _gone_scales(self) -> dict[str, hdmf.GoneScale]:
        """Deleted dimension scales and the dimensions they leave: one domain walk per model."""
        return hdmf.gone_scales(self.model)

    def array_plan(self, ds: Dataset, path: str) -> ArrayPlan | None:
        if ds.shape.kind == "null":
            log.info("zarr: %s has a null dataspace; not shown", self.where(path))
            return None
        try:
            zt = hdmf.zarr_type(ds.type)
        except UnsupportedType as exc:
            log.info("zarr: %s not shown: %s", self.where(path), exc)
            return None
        if cs.left_out("zarr", self.where(path), ds, self.ctx, log):
            return None
        dims = self._dimension_names(ds, path)
        attrs = self.cf.attributes(ds, hdmf.attributes_json(ds, self.paths, self.where(path), skip=hdmf.RESERVED),
                                   dims)
        if zt.kind == "reference":
            attrs[hdmf.ZARR_DTYPE] = "object"
        return ArrayPlan(self.ctx, ds, path, zt, self.paths, attrs, dims, self.ctx.options.zarr_sharded,
                         self.cf.shape(ds))


def domain_node(model: DomainModel, ctx: ViewContext, name: str) -> DirNode:
    """The Zarr hierarchy of one domain (lazy: each directory is built when listed)."""
    dom = ZarrDomain(model, ctx)
    return dom.group_node(name, model.root, "/")


def describe(ds: Dataset, pipe: Pipeline, numcodecs: bool = False) -> str:
    """How the Zarr view serves a dataset whose effective pipeline is ``pipe``
    ("zero-copy", "zero-copy (gzip spliced)", "transcoded (<why>)", "-" if not shown);
    pure: no store access (``polyfs info``; ``numcodecs``: the mount option)."""
    if ds.shape.kind == "null":
        return "-"
    try:
        zt = hdmf.zarr_type(ds.type)
    except UnsupportedType as exc:
        return f"- ({exc})"
    if cf.dimension_only(ds):  # shown only outside netCDF-4 domains, where no such dataset is made
        return "- (a netCDF dimension without a variable)"
    if pipe.undecodable:
        return f"- ({pipe.undecodable})"
    src = cs.ChunkSource(None, ds, None, pipe, None if ds.type.is_vlen else ds.chunk_nbytes)  # type: ignore[arg-type]
    return choose_recipe(zt, src, {}, numcodecs)[0].describe()


def serving(model: DomainModel, ctx: ViewContext, path: str) -> str:
    """:func:`describe` for a dataset path of a loaded domain."""
    ds = model.resolve(path)
    if not isinstance(ds, Dataset):
        return "-"
    return describe(ds, ctx.catalog.pipeline(ds), ctx.options.zarr_numcodecs)
