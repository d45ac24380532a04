"""Zarr v3 spelled once: data types, codec chains, chunk keys, fill values, the shard index.

Every other module of this package (the view that writes ``zarr.json`` and
shards, the ingester that reads what tools wrote, the importer that reads
Zarr directories) uses these declarations in both directions, so the view and
its readers of written files can never disagree. Pure: no I/O. Errors are
``ValueError`` with a cause; callers add where it happened.
"""
from __future__ import annotations

import base64
import math
import zlib
from dataclasses import dataclass, field
from typing import Any

import crc32c
import numpy as np

from ...binfmt import Layout
from ...codecs.registry import BLOSC, BLOSC_CODES, BZIP2, DEFLATE, FLETCHER32, SHUFFLE, ZSTD, Filter
from ...errors import CodecError
from ...model import types as T
from ...model import values

META = "zarr.json"
V2_METADATA = frozenset({".zarray", ".zgroup", ".zattrs", ".zmetadata"})  # Zarr v2: not this view
CHUNK_DIR = "c"

# data_type name -> numpy code without byte order ("|" codes have none)
DTYPES = {"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "i2", "uint16": "u2", "int32": "i4",
          "uint32": "u4", "int64": "i8", "uint64": "u8", "float16": "f2", "float32": "f4", "float64": "f8",
          "complex64": "c8", "complex128": "c16"}
ARRAY_TO_BYTES = ("bytes", "endian", "vlen-utf8", "vlen-bytes")
# bytes-to-bytes codecs of the Zarr v3 core spec: every v3 reader (tensorstore, zarr-python,
# zarrs...) has them; ``numcodecs.*`` names are zarr-python's own
SPEC_BYTES_CODECS = ("gzip", "zstd", "blosc", "crc32c")
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}  # blosc's shuffle names -> numbers


RAW_BYTES = "raw_bytes"  # zarr-python's numpy "V<n>": HDF5 opaque
STRUCTURED = "structured"  # zarr-python's numpy structured dtypes: HDF5 compounds
FIXED_BYTES = "null_terminated_bytes"  # zarr-python's numpy "S<n>": HDF5's null-padded fixed strings
# zarr-python's numpy datetime64/timedelta64: int64 counts of ``scale_factor`` ``unit``s
TIME_TYPES = ("numpy.datetime64", "numpy.timedelta64")
_TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "μs", "ns", "ps", "fs", "as", "generic")


def is_time_type(data_type: Any) -> bool:
    """A well-formed ``numpy.datetime64``/``numpy.timedelta64`` data type (stored as int64)."""
    if not isinstance(data_type, dict) or data_type.get("name") not in TIME_TYPES:
        return False
    cfg = data_type.get("configuration")
    if not isinstance(cfg, dict):
        return False
    scale = cfg.get("scale_factor", 1)
    return cfg.get("unit") in _TIME_UNITS and isinstance(scale, int) and not isinstance(scale, bool) and scale > 0


def _structured(cfg: Any) -> np.dtype | None:
    """zarr-python's ``structured`` data type: its fields packed in order, little-endian
    whatever the ``bytes`` codec says (zarr-python's structured type has no byte order; the
    view shows an HDF5 compound so)."""
    fields = cfg.get("fields") if isinstance(cfg, dict) else None
    if not isinstance(fields, list) or not fields:
        return None
    out = []
    for f in fields:
        if not (isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and f[0]):
            return None
        dt = None if is_time_type(f[1]) else numpy_dtype(f[1], "little")  # time fields: no stored form
        if dt is None:
            return None
        out.append((f[0], dt))
    try:
        return np.dtype(out)
    except (TypeError, ValueError):  # repeated field names
        return None


def numpy_dtype(data_type: Any, endian: str) -> np.dtype | None:
    """The numpy dtype of a core numeric ``data_type`` under a ``bytes`` codec's endian, of
    ``null_terminated_bytes`` (what the view shows for fixed-length strings), ``raw_bytes``
    (opaque) and ``structured`` (compounds), or int64 for a time type (its stored form)."""
    if is_time_type(data_type):
        return np.dtype(">i8" if endian == "big" else "<i8")
    if isinstance(data_type, dict) and data_type.get("name") in (FIXED_BYTES, RAW_BYTES):
        n = (data_type.get("configuration") or {}).get("length_bytes")
        code = "S" if data_type["name"] == FIXED_BYTES else "V"
        return np.dtype(f"{code}{n}") if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    if isinstance(data_type, dict) and data_type.get("name") == STRUCTURED:
        return _structured(data_type.get("configuration"))
    if not isinstance(data_type, str) or data_type not in DTYPES:
        return None
    code = DTYPES[data_type]
    return np.dtype(code if code.startswith("|") else (">" if endian == "big" else "<") + code)


# -- text: ``string`` (vlen-utf8) and ``fixed_length_utf32`` -----------------------------------
# numcodecs' vlen-utf8 chunk: a uint32 element count, then per element a uint32 byte count and
# its UTF-8 bytes. Past the count this is HSDS's variable-length chunk encoding itself.
VLEN_STRING = "string"
UTF32 = "fixed_length_utf32"  # zarr-python's numpy "<U<n>": n UTF-32 code units per element
VLEN_COUNT = Layout.of("vlen-utf8 element count", [("count", "I")], "<")


def vlen_count(n: int) -> bytes:
    return VLEN_COUNT.pack(count=n)


def vlen_utf8(items: list[bytes]) -> bytes:
    """numcodecs' vlen-utf8 encoding of a chunk's elements."""
    out = bytearray(vlen_count(len(items)))
    for b in items:
        out += VLEN_COUNT.pack(count=len(b))
        out += b
    return bytes(out)


def vlen_utf8_body(raw: bytes, count: int) -> bytes:
    """The stored (HSDS) form of a decoded vlen-utf8 chunk of ``count`` elements: its bytes
    after the element count, once every element is proven to lie inside the chunk and to be
    UTF-8 text (CodecError naming what is wrong)."""
    return _vlen_body(raw, count, "vlen-utf8")


def vlen_bytes_body(raw: bytes, count: int) -> bytes:
    """As :func:`vlen_utf8_body`, for a vlen-bytes chunk (elements of any bytes): the same
    framing, which HSDS stores for sequences of unsigned bytes too."""
    return _vlen_body(raw, count, "vlen-bytes")


def _vlen_body(raw: bytes, count: int, codec: str) -> bytes:
    view = memoryview(raw)
    if len(view) < VLEN_COUNT.size:
        raise CodecError(f"{codec} chunk of {len(view)} bytes has no element count")
    n = VLEN_COUNT.unpack(view[:VLEN_COUNT.size])["count"]
    if n != count:
        raise CodecError(f"{codec} chunk holds {n} elements; a chunk of this array holds {count}")
    pos = VLEN_COUNT.size
    for i in range(n):
        if pos + VLEN_COUNT.size > len(view):
            raise CodecError(f"{codec} chunk is truncated at element {i}")
        size = VLEN_COUNT.unpack(view[pos:pos + VLEN_COUNT.size])["count"]
        pos += VLEN_COUNT.size
        if pos + size > len(view):
            raise CodecError(f"{codec} element {i} overruns its chunk")
        if codec == "vlen-utf8":
            try:
                str(view[pos:pos + size], "utf-8")
            except UnicodeDecodeError as exc:
                raise CodecError(f"vlen-utf8 element {i} is not UTF-8 text ({exc.reason})") from None
        pos += size
    if pos != len(view):
        raise CodecError(f"{codec} chunk has {len(view) - pos} bytes after its last element")
    return bytes(view[VLEN_COUNT.size:])


def utf32_dtype(data_type: Any, endian: str) -> np.dtype | None:
    """numpy's ``<U<n>``/``>U<n>`` for a well-formed ``fixed_length_utf32`` data type."""
    if not isinstance(data_type, dict) or data_type.get("name") != UTF32:
        return None
    n = (data_type.get("configuration") or {}).get("length_bytes")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0 or n % 4:
        return None
    return np.dtype(f"{'>' if endian == 'big' else '<'}U{n // 4}")


def utf32_body(raw: bytes, count: int, dt: np.dtype) -> bytes:
    """The stored (variable-length UTF-8) form of a decoded ``fixed_length_utf32`` chunk."""
    if len(raw) != count * dt.itemsize:
        raise CodecError(f"fixed_length_utf32 chunk decodes to {len(raw)} bytes; {count} elements "
                         f"of {dt.itemsize} need {count * dt.itemsize}")
    units = np.frombuffer(raw, dtype=dt.str[0] + "u4")
    bad = (units > 0x10FFFF) | ((units >= 0xD800) & (units <= 0xDFFF))  # numpy passes them on as str
    if bad.any():
        raise CodecError(f"fixed_length_utf32 chunk holds U+{int(units[bad][0]):X}, which is no character")
    items = [s.encode("utf-8") for s in np.frombuffer(raw, dtype=dt).tolist()]
    return vlen_utf8(items)[VLEN_COUNT.size:]


def gunzip_members(data: bytes) -> bytes:
    """The bytes of every gzip member of ``data``, each checked (CRC32, size): the view serves
    a text chunk as two members (its element count, then the stored stream), which gzip
    readers take as one stream; a writer copying the view's files sends them back so."""
    out, rest = bytearray(), memoryview(data)
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(rest)
        except zlib.error as exc:
            raise CodecError(f"corrupt gzip member: {exc}") from None
        if not d.eof:
            raise CodecError("truncated gzip member")
        rest = memoryview(d.unused_data)
        if not len(rest):
            return bytes(out)


def utf32_chunk(texts: list[str], dt: np.dtype) -> tuple[bytes, int]:
    """The ``fixed_length_utf32`` bytes of a chunk's texts, and how many were cut to fit."""
    arr = np.array(texts, dtype=object)
    cut = sum(1 for t in texts if len(t) > dt.itemsize // 4)
    return np.asarray(arr.astype(dt), dtype=dt).tobytes(), cut


# -- the shard index (sharding_indexed) ----------------------------------------------------
MISSING = 2 ** 64 - 1  # offset and nbytes of an absent inner chunk
INDEX_ENTRY = np.dtype([("offset", "<u8"), ("nbytes", "<u8")])
INDEX_CRC = Layout.of("shard index crc32c", [("crc", "I")], "<")
INDEX_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
CRC32C_CODEC = {"name": "crc32c"}


@dataclass(frozen=True)
class ShardIndex:
    """How a shard's index is encoded and where it sits (``index_codecs``, ``index_location``)."""

    at_start: bool = False
    crc32c: bool = True
    big: bool = False

    @classmethod
    def from_config(cls, cfg: dict) -> "ShardIndex":
        at_start = cfg.get("index_location", "end") == "start"
        crc, big = False, False
        for c in cfg.get("index_codecs") or INDEX_CODECS:
            if c.get("name") == "bytes":
                big = (c.get("configuration") or {}).get("endian") == "big"
            elif c.get("name") == "crc32c":
                crc = True
            else:
                raise ValueError(f"shard index codec {c.get('name')!r} is not supported")
        return cls(at_start, crc, big)

    def config(self) -> dict[str, Any]:
        """``index_codecs`` and ``index_location`` of a ``sharding_indexed`` configuration."""
        codecs: list[dict] = [{"name": "bytes", "configuration": {"endian": "big" if self.big else "little"}}]
        if self.crc32c:
            codecs.append({"name": "crc32c"})
        return {"index_codecs": codecs, "index_location": "start" if self.at_start else "end"}

    def nbytes(self, nentries: int) -> int:
        return INDEX_ENTRY.itemsize * nentries + (INDEX_CRC.size if self.crc32c else 0)

    def region(self, file_size: int, nentries: int) -> tuple[int, int]:
        """(start, length) of the index in a shard file of ``file_size`` bytes."""
        n = self.nbytes(nentries)
        if file_size < n:
            raise ValueError(f"shard of {file_size} bytes is shorter than its index ({n} bytes)")
        return (0 if self.at_start else file_size - n), n

    def encode(self, table: np.ndarray) -> bytes:
        """``table``: (n, 2) offsets and lengths, :data:`MISSING` for absent chunks."""
        raw = np.ascontiguousarray(table, dtype=">u8" if self.big else "<u8").tobytes()
        return raw + INDEX_CRC.pack(crc=crc32c.crc32c(raw)) if self.crc32c else raw

    def decode(self, raw: bytes, nentries: int) -> np.ndarray:
        """(n, 2) uint64 offsets and lengths; a wrong checksum is a CodecError."""
        if self.crc32c:
            body, tail = raw[:-INDEX_CRC.size], raw[-INDEX_CRC.size:]
            if INDEX_CRC.unpack(tail)["crc"] != crc32c.crc32c(body):
                raise CodecError("shard index crc32c checksum mismatch")
            raw = body
        return np.frombuffer(raw, dtype=">u8" if self.big else "<u8").reshape(nentries, 2)


DEFAULT_INDEX = ShardIndex()


def index_table(nentries: int, positions: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    table = np.full((nentries, 2), MISSING, dtype=np.uint64)
    table[positions, 0] = offsets
    table[positions, 1] = lengths
    return table


def shard_index_bytes(nentries: int, positions: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> bytes:
    """The index polyfs writes: little-endian (offset, nbytes) per inner chunk, C order, then CRC32C."""
    return DEFAULT_INDEX.encode(index_table(nentries, positions, offsets, lengths))


# -- what a writer declared, kept with the dataset (its view hints) -----------------------------
# A writer's zarr.json is served back as written for the spellings below (else its open handle,
# which keeps its own metadata, misreads the files the view serves): the inner chain's trailing
# crc32c (appended to each served chunk) and the shard index's codecs and location.
HINT_PREFIX = "zarr_"  # every hint the Zarr view keeps starts so (a rewrite replaces only these)
HINT_CRC32C = HINT_PREFIX + "crc32c"
HINT_SHARD_INDEX = HINT_PREFIX + "shard_index"
HINT_PER_SHARD = HINT_PREFIX + "chunks_per_shard"  # the writer's shard shape, in inner chunks
HINT_SHARDED = HINT_PREFIX + "sharded"  # False: the writer wrote one file per chunk
HINT_DATA_TYPE = HINT_PREFIX + "data_type"  # a time data type declared for an int64 array (TIME_TYPES)
HINT_SHAPE = HINT_PREFIX + "shape"  # the shape the last zarr.json written declared (cf.unlimited_shapes)
HINT_KEYS = HINT_PREFIX + "chunk_key_encoding"  # the writer's chunk file names ("." separator, "v2")
HINT_CODECS = HINT_PREFIX + "codecs"  # the writer's bytes-to-bytes codecs, where spelled otherwise than shown
HINT_FILTERS = HINT_PREFIX + "filters"  # the writer's array-to-array codecs that decode to their input
HINT_TRANSPOSE = HINT_PREFIX + "transpose"  # the writer's transpose codec: chunks served in its order
HINT_FILL = HINT_PREFIX + "fill_value"  # a float fill spelled in hex (a NaN's payload: JSON has no number for it)
# groups: the writer consolidated the metadata below it (zarr.consolidate_metadata, xarray's
# default); the view then serves it, built from the hierarchy as it is at each read
HINT_CONSOLIDATED = HINT_PREFIX + "consolidated"


def consolidated(metadata: dict[str, dict]) -> dict[str, Any]:
    """A group's ``consolidated_metadata``: every node below it by relative path (zarr-python's
    inline form; a group in it carries an empty one of its own)."""
    return {"kind": "inline", "must_understand": False, "metadata": metadata}


# -- chunk keys ----------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyEncoding:
    name: str = "default"
    separator: str = "/"

    @classmethod
    def from_json(cls, enc: dict | None) -> "KeyEncoding":
        enc = enc or {"name": "default"}
        name = enc.get("name", "default")
        sep = (enc.get("configuration") or {}).get("separator")
        if name not in ("default", "v2"):
            raise ValueError(f"chunk_key_encoding {name!r} is not supported")
        sep = sep or ("/" if name == "default" else ".")
        if sep not in ("/", "."):
            raise ValueError(f"chunk key separator {sep!r}")
        return cls(name, sep)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"separator": self.separator}}

    def key(self, coords: tuple[int, ...]) -> str:
        if self.name == "default":
            return "c" + "".join(self.separator + str(i) for i in coords) if coords else "c"
        return self.separator.join(str(i) for i in coords) if coords else "0"

    def position(self, rel: list[str], rank: int) -> tuple[int, ...] | None:
        """Chunk-file grid coordinates of a path below the array (``["c", "0", "1"]``), or None."""
        if not rel:
            return None
        if not rank:  # a 0-d array's one file: ``c``, or ``0`` under the v2 encoding (:meth:`key`)
            return () if rel == [self.key(())] else None
        parts = rel if self.separator == "/" else (rel[0].split(".") if len(rel) == 1 else [])
        if self.name == "default":
            if not parts or parts[0] != "c":
                return None
            parts = parts[1:]
        if len(parts) != rank or not all(p.isdigit() for p in parts):
            return None
        return tuple(int(p) for p in parts)

    def dir_position(self, rel: list[str], rank: int) -> list[int] | None:
        """The leading chunk-file coordinates a directory below the array stands for
        (``["c", "0"]``: ``[0]``; ``[]`` for ``c`` itself), or None: no chunk directory."""
        if self.separator != "/" or not rel:
            return None  # "." keys: every chunk file lies in the array's own directory
        parts = rel
        if self.name == "default":
            if parts[0] != "c":
                return None
            parts = parts[1:]
        if not all(p.isdigit() for p in parts) or len(parts) > rank:
            return None
        return [int(p) for p in parts]


@dataclass(frozen=True)
class Spelling:
    """How the view spells an array's chunks beyond what the stored encoding fixes."""

    crc32c: bool = False  # a crc32c codec closes the inner chain
    index: ShardIndex = DEFAULT_INDEX
    keys: KeyEncoding = KeyEncoding()

    @classmethod
    def from_hints(cls, hints: dict) -> Spelling:
        """The spelling kept in a dataset's view hints (the default where none or malformed)."""
        index = DEFAULT_INDEX
        cfg = hints.get(HINT_SHARD_INDEX)
        if isinstance(cfg, dict):
            try:
                index = ShardIndex.from_config(cfg)
            except (ValueError, TypeError, AttributeError):
                index = DEFAULT_INDEX
        keys = KeyEncoding()
        enc = hints.get(HINT_KEYS)
        if isinstance(enc, dict):
            try:
                keys = KeyEncoding.from_json(enc)
            except (ValueError, TypeError, AttributeError):
                keys = KeyEncoding()
        return cls(hints.get(HINT_CRC32C) is True, index, keys)

    def hints(self) -> dict[str, Any]:
        """What to keep with the dataset (nothing for the default spelling)."""
        out: dict[str, Any] = {}
        if self.crc32c:
            out[HINT_CRC32C] = True
        if self.index != DEFAULT_INDEX:
            out[HINT_SHARD_INDEX] = self.index.config()
        if self.keys != KeyEncoding():
            out[HINT_KEYS] = self.keys.to_json()
        return out


DEFAULT_SPELLING = Spelling()


# -- codec chains ------------------------------------------------------------------------------
@dataclass
class Chain:
    """A chain of bytes-to-bytes codecs as HDF5 filters (write order)."""

    filters: list[Filter] = field(default_factory=list)
    strip_crc32c: bool = False
    gzip: bool = False  # the last filter is a gzip member: splice to zlib
    zstd: bool = False  # the last filter is zstd: frames need their content size
    reason: str = ""  # why the chain has no HDF5 form ("" = it has one)

    def copyable(self, raw_ok: bool) -> bool:
        """Copy when there is a compressor, or no filter at all and ``raw_ok`` (--codec none)."""
        if self.reason:
            return False
        return any(f.spec.compressor for f in self.filters) or (raw_ok and not self.filters)


def bytes_codecs(codecs: list[dict], itemsize: int) -> Chain:
    """Map a chain of bytes-to-bytes codecs onto HDF5 filters (write order)."""
    chain = Chain()
    for i, c in enumerate(codecs):
        name = c.get("name", "")
        cfg = c.get("configuration") or {}
        if name == "crc32c":
            if i != len(codecs) - 1:
                return Chain(reason="crc32c before another codec")
            chain.strip_crc32c = True
            continue
        if chain.gzip:
            return Chain(reason=f"{name} after gzip")
        if name in ("gzip", "numcodecs.gzip"):
            level = int(cfg.get("level", 6))
            chain.filters.append(Filter(DEFLATE, (level if level >= 0 else 6,)))
            chain.gzip = True
        elif name == "numcodecs.zlib":
            chain.filters.append(Filter(DEFLATE, (int(cfg.get("level", 6)),)))
        elif name in ("zstd", "numcodecs.zstd"):
            chain.filters.append(Filter(ZSTD, (int(cfg.get("level", 3)),)))
            chain.zstd = True
        elif name in ("blosc", "numcodecs.blosc"):
            shuffle = cfg.get("shuffle", 1)
            shuffle = SHUFFLES.get(shuffle, 1) if isinstance(shuffle, str) else int(shuffle)
            cname = str(cfg.get("cname", "lz4"))
            if cname not in BLOSC_CODES:
                return Chain(reason=f"blosc cname {cname}")
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
            return Chain(reason=f"codec {name!r}")
        if name not in ("zstd", "numcodecs.zstd"):
            chain.zstd = False  # zstd is no longer the outermost encoding
    return chain


def filter_codecs(filters: tuple[Filter, ...] | list[Filter], itemsize: int) -> list[dict]:
    """The bytes-to-bytes codecs that read chunks encoded by ``filters`` (the other direction)."""
    return [f.spec.zarr(f, itemsize) for f in filters]


def non_spec(codecs: list[dict]) -> list[str]:
    """Names of the bytes-to-bytes codecs of a chain that are not Zarr v3 core codecs."""
    return [str(c.get("name")) for c in codecs if c.get("name") not in SPEC_BYTES_CODECS]


def transpose_order(codec: dict, rank: int) -> tuple[int, ...] | None:
    """The permutation a ``transpose`` codec applies (a list, or tensorstore's ``"C"``/``"F"``),
    None if it is none of ``rank`` dimensions."""
    order = (codec.get("configuration") or {}).get("order")
    if order == "C":
        return tuple(range(rank))
    if order == "F":
        return tuple(reversed(range(rank)))
    if not isinstance(order, list) or not all(isinstance(o, int) and not isinstance(o, bool) for o in order):
        return None
    return tuple(order) if sorted(order) == list(range(rank)) else None


def is_real_transpose(codec: dict, rank: int) -> bool:
    """An array-to-array codec that changes the bytes (an identity transpose does not)."""
    if codec.get("name") != "transpose":
        return True  # an unknown array-to-array codec
    return transpose_order(codec, rank) != tuple(range(rank))


# numcodecs filters whose decode hands back its input (the loss is at the encode): chunks under
# them are the values themselves, so they are stored as such and the codec shown as declared
SELF_DECODING = ("numcodecs.bitround", "numcodecs.quantize")


def decodes_to_itself(codec: dict, data_type: Any) -> bool:
    """True for an array-to-array codec whose decode is the identity on ``data_type``
    (bitround; quantize when it keeps the array's type: its ``astype`` would change the
    bytes)."""
    name, cfg = codec.get("name"), codec.get("configuration") or {}
    if name not in SELF_DECODING or not isinstance(data_type, str) or data_type not in ("float32", "float64"):
        return False
    if name == "numcodecs.quantize":
        want = np.dtype(data_type)
        for key in ("dtype", "astype"):
            if key in cfg:
                try:
                    if np.dtype(cfg[key]) != want:
                        return False
                except TypeError:
                    return False
    return True


def array_to_bytes_at(codecs: list[dict]) -> int | None:
    """Index of the array-to-bytes codec of a chain, or None."""
    for i, c in enumerate(codecs):
        if c.get("name") in ARRAY_TO_BYTES:
            return i
    return None


def implied_bytes(codecs: list[dict], data_type: Any) -> list[dict]:
    """The chain with the little-endian ``bytes`` codec the v3 drafts implied where none is named.

    GDAL up to 3.10 writes Zarr v3 arrays that way (no ``codecs`` at all, or only ``gzip`` /
    ``blosc``): its chunks are the elements' raw little-endian bytes under those codecs. Only a
    chain of bytes-to-bytes codecs over a fixed-size type is read so; any other chain lacking an
    array-to-bytes codec stays refused."""
    if array_to_bytes_at(codecs) is not None or not isinstance(data_type, str):
        return codecs
    if numpy_dtype(data_type, "little") is None or utf32_dtype(data_type, "little") is not None:
        return codecs
    if not all(isinstance(c, dict) and c.get("name") in SPEC_BYTES_CODECS for c in codecs):
        return codecs
    return [{"name": "bytes", "configuration": {"endian": "little"}}, *codecs]


# -- fill values -------------------------------------------------------------------------------
def _element_bytes(fill: Any, size: int) -> bytes:
    """The bytes of one element spelled as zarr-python spells a bytes-like fill (base64)."""
    raw = base64.b64decode(fill, validate=True) if isinstance(fill, str) else b""
    if len(raw) not in (0, size):
        raise ValueError(f"{len(raw)} bytes are no element of {size}")
    return raw or bytes(size)


def fill_json(fill: Any, dtype: T.DType) -> Any:
    """A Zarr ``fill_value`` as the dataset's HSDS ``fillValue`` (None = zeros); ValueError if it
    does not fit the type."""
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
            if fill == "NaT" and base.size == 8 and base.signed:  # a time type's "not a time"
                fill = -(1 << 63)
            v = int(fill, 16) if isinstance(fill, str) and fill.startswith("0x") else int(fill)
            bits = 8 * base.size
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if base.signed else (0, (1 << bits) - 1)
            if not lo <= v <= hi:
                raise ValueError(f"{v} is out of range")
            return None if v == 0 else v
        if isinstance(base, T.OpaqueType):
            b = bytes(int(x) for x in fill) if isinstance(fill, list) else _element_bytes(fill, base.size)
            return None if not any(b) else values.element_to_json(base, b)
        if isinstance(base, T.CompoundType):  # structured: base64 of the element's (packed) bytes
            raw = _element_bytes(fill, base.numpy().itemsize)
            return None if not any(raw) else values.element_to_json(base, np.frombuffer(raw, base.numpy())[0])
        if isinstance(base, T.StringType) and base.length is not None:
            # fixed-length: base64 of the element's bytes (zarr-python's null_terminated_bytes)
            raw = base64.b64decode(fill, validate=True) if isinstance(fill, str) else b""
            if len(raw) > base.length:
                raise ValueError(f"{len(raw)} bytes do not fit {base.length}")
            raw = raw.rstrip(b"\0")
            return values.element_to_json(base, raw) if raw else None
        if isinstance(base, T.StringType):
            return fill if fill else None
        if isinstance(base, T.VlenType):  # variable_length_bytes: base64 of the bytes
            raw = base64.b64decode(fill, validate=True) if isinstance(fill, str) else bytes(fill)
            return list(raw) if raw else None
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"fill_value {fill!r} does not fit {base}: {exc}") from None
    return None


def hex_fill(fill: Any) -> bool:
    """Whether a ``fill_value`` spells a float (or a complex part) as its hex bit pattern, which
    the stored fill, a JSON number, does not keep (``"0x7fc00001"``: a NaN with a payload)."""
    parts = fill if isinstance(fill, list) else [fill]
    return any(isinstance(x, str) and x.startswith("0x") for x in parts)


def fill_hints(meta: dict) -> dict[str, Any]:
    """The view hint keeping a hex-spelled fill value (a NaN payload) a ``zarr.json`` declares:
    served back as written (:func:`declared_fill`), at a write through the view and at import."""
    fill = meta.get("fill_value")
    return {HINT_FILL: fill} if hex_fill(fill) else {}


def declared_fill(declared: Any, shown: Any, dtype: T.DType) -> Any:
    """The writer's hex spelling of the fill value where it is still the stored one (NaN equal
    to NaN), else the view's: tensorstore compares a re-read ``zarr.json`` at a resize, and a
    zarr reader fills absent chunks with the payload written."""
    if declared is None or not hex_fill(declared):
        return shown
    try:
        a, b = fill_json(declared, dtype), fill_json(shown, dtype)
        same = np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float), equal_nan=True)
    except (ValueError, TypeError):
        return shown
    return declared if same else shown


def _float_fill(v: Any, t: T.DType) -> float:
    if isinstance(v, str):
        if v.startswith("0x"):
            raw = int(v, 16).to_bytes(t.itemsize, "big")
            return float(np.frombuffer(raw, dtype=f">f{t.itemsize}")[0])
        return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(v, v))
    return float(v)


def per_shard(outer: tuple[int, ...], inner: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(o // c for o, c in zip(outer, inner))


def nentries(outer: tuple[int, ...], inner: tuple[int, ...]) -> int:
    return math.prod(per_shard(outer, inner))
