"""One domain exercising the Zarr v3 and N5 views (shared by test_zarr3_* and test_n5_*).

Every case is written with ``DomainWriter`` (``write_chunk`` of chunks encoded
here, not by polyfs's view code) and keeps its source numpy array, so readers
are compared against the data as generated, never against polyfs's decoding.
``skip`` lists chunk coordinates that are not written (missing chunks -> fill).
"""
from __future__ import annotations

import itertools
import json
import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numcodecs
import numpy as np

from polyfs.codecs.registry import BLOSC, BZIP2, DEFLATE, FLETCHER32, SHUFFLE, ZSTD, Filter
from polyfs.model import types as T
from polyfs.model import values
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter, iter_chunks

DOMAIN = "/lab/run1.h5"
BLOSC_LZ4_4 = Filter(BLOSC, (2, 2, 4, 0, 5, 1, 1))  # lz4, clevel 5, byte shuffle, typesize 4


@dataclass
class Case:
    name: str
    dtype: T.DType
    shape: tuple
    chunks: tuple
    filters: list = field(default_factory=list)
    fill: Any = None  # JSON fill value
    skip: tuple = ()  # chunk coords not written
    zarr_mode: str = "zero-copy"  # expected Zarr recipe (prefix of Recipe.describe())
    n5_mode: str | None = "zero-copy"  # expected N5 recipe; None: not in the N5 view
    tensorstore: bool = True  # tensorstore's zarr3 driver can read it
    zarr_n5: bool = True  # zarr-n5 can read it (it has no bzip2 and refuses 0-length dims)
    encode: Callable | None = None  # (array block) -> stored bytes, instead of the declared pipeline
    group: str = ""

    @property
    def path(self) -> str:
        return f"/{self.group}/{self.name}" if self.group else f"/{self.name}"


def _hsds_blosc(block: np.ndarray) -> bytes:
    """What HSDS 1.0.2 stores for a 'gzip' dataset: a Blosc frame with zlib inside."""
    return bytes(numcodecs.Blosc(cname="zlib", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE).encode(
        np.ascontiguousarray(block)))


def _hsds_blosc_vlen(block: np.ndarray) -> bytes:
    from polyfs.codecs import vlen

    raw = vlen.encode(T.StringType(None, "utf8", "nullterm"), block)
    return bytes(numcodecs.Blosc(cname="zlib", clevel=5, shuffle=numcodecs.Blosc.NOSHUFFLE).encode(raw))


VSTR = T.StringType(None, "utf8", "nullterm")
CMPD_LE = T.CompoundType((("a", T.IntType(4, True, "<")), ("b", T.FloatType(8, "<")), ("s", T.StringType(3))))
CMPD_BE = T.CompoundType((("a", T.IntType(4, True, ">")), ("b", T.FloatType(8, ">")), ("c", T.BOOL)))

CASES = [
    Case("u8_1d_none", T.IntType(1, False), (1000,), (128,), skip=((0,), (1,))),
    Case("i16_2d_deflate_le", T.IntType(2, True, "<"), (100, 130), (32, 48), [Filter(DEFLATE, (4,))],
         zarr_mode="zero-copy (gzip", n5_mode="transcoded (little-endian)"),
    Case("u16_3d_zstd_be", T.IntType(2, False, ">"), (20, 30, 40), (8, 16, 16), [Filter(ZSTD, (3,))], fill=7,
         skip=((0, 0, 0), (2, 1, 2))),
    Case("i32_4d_blosc_le", T.IntType(4, True, "<"), (5, 6, 7, 8), (2, 3, 4, 4), [BLOSC_LZ4_4],
         n5_mode="transcoded (little-endian)", skip=((0, 0, 0, 0),)),
    Case("i32_4d_blosc_be", T.IntType(4, True, ">"), (5, 6, 7, 8), (2, 3, 4, 4), [BLOSC_LZ4_4]),
    Case("u64_5d_deflate_be", T.IntType(8, False, ">"), (3, 4, 5, 6, 7), (2, 2, 3, 4, 4), [Filter(DEFLATE, (6,))],
         zarr_mode="zero-copy (gzip", n5_mode="zero-copy (gzip", skip=((1, 1, 1, 1, 1),), group="deep/er"),
    Case("f32_2d_shuffle_deflate", T.FloatType(4, "<"), (90, 70), (32, 32), [Filter(SHUFFLE, (4,)), Filter(DEFLATE, (5,))],
         fill="NaN", skip=((1, 1),), zarr_mode="transcoded (numcodecs.shuffle", n5_mode="transcoded (little-endian)"),
    Case("f64_3d_zstd_be", T.FloatType(8, ">"), (30, 40, 50), (16, 16, 16), [Filter(ZSTD, (5,))],
         skip=((0, 1, 2), (1, 0, 0)), group="deep"),
    Case("f64_2d_bzip2_be", T.FloatType(8, ">"), (40, 50), (16, 16), [Filter(BZIP2, (9,))],
         zarr_mode="transcoded (numcodecs.bz2", zarr_n5=False),
    Case("f32_hsds_blosc", T.FloatType(4, "<"), (60, 50), (32, 32), [Filter(DEFLATE, (5,))],
         encode=_hsds_blosc, n5_mode="transcoded (little-endian)"),
    Case("i16_fletcher_be", T.IntType(2, True, ">"), (50, 40), (16, 16),
         [Filter(SHUFFLE, (2,)), Filter(DEFLATE, (3,)), Filter(FLETCHER32)],
         zarr_mode="transcoded (deflate", n5_mode="transcoded (filters"),
    Case("bool_2d_deflate", T.BOOL, (40, 50), (16, 16), [Filter(DEFLATE, (6,))],
         zarr_mode="zero-copy (gzip", n5_mode="zero-copy (gzip"),
    Case("f16_1d_zstd", T.FloatType(2, "<"), (30,), (8,), [Filter(ZSTD, (3,))], n5_mode=None),
    Case("u32_scalar_be", T.IntType(4, False, ">"), (), ()),
    Case("f32_arraytype", T.ArrayType(T.FloatType(4, ">"), (3,)), (20,), (8,), [Filter(DEFLATE, (6,))],
         zarr_mode="zero-copy (gzip", n5_mode="zero-copy (gzip"),
    Case("i8_empty", T.IntType(1, True), (0, 5), (4, 5), zarr_n5=False),  # zarr-n5 refuses 0-length dims
    # zarr-python only from here
    Case("s_fixed", T.StringType(6), (25,), (8,), [Filter(DEFLATE, (4,))], zarr_mode="zero-copy (gzip",
         n5_mode=None, tensorstore=False),
    Case("s_vlen_deflate", VSTR, (23,), (5,), [Filter(DEFLATE, (4,))], skip=((2,),), zarr_mode="zero-copy (gzip",
         n5_mode=None, tensorstore=False),
    Case("s_vlen_zstd", VSTR, (23,), (5,), [Filter(ZSTD, (3,))], n5_mode=None, tensorstore=False),
    Case("s_vlen_none", VSTR, (23,), (5,), [], fill="none", skip=((0,),), n5_mode=None, tensorstore=False),
    Case("s_vlen_bzip2", VSTR, (23,), (5,), [Filter(BZIP2, (9,))], zarr_mode="transcoded", n5_mode=None,
         tensorstore=False),
    Case("s_vlen_hsds", VSTR, (23,), (5,), [Filter(DEFLATE, (5,))], encode=_hsds_blosc_vlen,
         zarr_mode="transcoded", n5_mode=None, tensorstore=False),
    Case("cmpd_le", CMPD_LE, (30,), (8,), [Filter(ZSTD, (3,))], n5_mode=None, tensorstore=False),
    Case("cmpd_be", CMPD_BE, (30,), (8,), [Filter(DEFLATE, (3,))], zarr_mode="transcoded (structured",
         n5_mode=None, tensorstore=False),
]
BY_NAME = {c.name: c for c in CASES}
WORDS = ["", "a", "bé", "ccc", "δδδδ", "hello world", "x" * 40]


def source_array(case: Case) -> np.ndarray:
    """The data written for a case (before missing chunks are taken out)."""
    rng = np.random.default_rng(sum(map(ord, case.name)))
    t = T.resolved(case.dtype)
    shape = case.shape
    if isinstance(t, T.StringType) and t.length is None:
        return np.array([WORDS[i] for i in rng.integers(0, len(WORDS), math.prod(shape))], dtype=object).reshape(shape)
    dt = case.dtype.numpy()
    if dt.names:
        out = np.zeros(shape, dtype=dt)
        for name in dt.names:
            fdt = dt.fields[name][0]
            if fdt.kind == "S":
                out[name] = [b"ab", b"xyz", b"", b"q"] * (out.size // 4) + [b"z"] * (out.size % 4)
            elif fdt.kind == "b":
                out[name] = rng.random(shape) > 0.5
            else:
                out[name] = (rng.random(shape) * 1000).astype(fdt)
        return out
    if dt.kind == "S":
        return np.array([f"s{i % 97}".encode() for i in range(math.prod(shape))], dtype=dt).reshape(shape)
    if dt.kind == "b":
        return rng.random(shape) > 0.4
    if dt.subdtype is not None:
        base, inner = dt.subdtype
        return (rng.random(shape + inner) * 100).astype(base)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(dt)
    info = np.iinfo(dt)
    hi = min(int(info.max), 2 ** 62)
    return rng.integers(max(int(info.min), -(2 ** 62)), hi, size=shape, dtype=np.int64 if dt.kind == "i" else np.uint64,
                        endpoint=True).astype(dt)


def expected_array(case: Case, ds) -> np.ndarray:
    """The array readers must return: the source with skipped chunks at the fill value."""
    arr = source_array(case).copy()
    if not case.skip or not case.shape:
        return arr
    fill = values.fill_array(case.dtype, case.fill, ())
    for coords in case.skip:
        sl = tuple(slice(c * n, min((c + 1) * n, d)) for c, n, d in zip(coords, case.chunks, case.shape))
        arr[sl] = fill
    return arr


def build(catalog) -> dict[str, Any]:
    """Write the corpus domain; returns {case name: dataset} plus extra objects under "_"."""
    out: dict[str, Any] = {}
    with DomainWriter(catalog, DOMAIN) as w:
        groups = {"": w.root}

        def group(path: str):
            if path not in groups:
                parent, _, name = path.rpartition("/")
                groups[path] = w.add_group(group(parent), name)
            return groups[path]

        for case in CASES:
            shape = Shape("scalar") if not case.shape else Shape("simple", case.shape)
            ds = w.add_dataset(group(case.group), case.name, case.dtype, shape, case.chunks or None, case.filters,
                               fill_value=case.fill)
            out[case.name] = ds
            data = source_array(case)
            for coords, block in iter_chunks(ds, data.reshape(()) if not case.shape else data):
                if tuple(coords) in case.skip:
                    continue
                if case.encode is not None:
                    w.write_chunk(ds, coords, case.encode(block), crc32=0)
                else:
                    stored, crc = w.encode_chunk(ds, block)
                    w.write_chunk(ds, coords, stored, crc)
        # references, links, attributes, dimension scales
        tgt = out["f64_3d_zstd_be"]
        refs = w.add_dataset(w.root, "refs", T.ReferenceType("object"), Shape("simple", (4,)), (3,))
        ref_values = [values.ref_to_json(tgt.id), values.ref_to_json(groups["deep"].id), "",
                      values.ref_to_json(out["u8_1d_none"].id)]
        w.write_array(refs, np.array([v.encode() for v in ref_values], dtype="S48"))
        out["refs"] = refs
        x = w.add_dataset(w.root, "x", T.FloatType(8, "<"), Shape("simple", (70,)), (70,))
        w.write_array(x, np.arange(70, dtype="<f8"))
        w.set_attr(x, "CLASS", T.StringType(16, "ascii", "nullterm"), Shape("scalar"), "DIMENSION_SCALE")
        w.set_attr(x, "NAME", T.StringType(2, "ascii", "nullterm"), Shape("scalar"), "x")
        fsd = out["f32_2d_shuffle_deflate"]
        w.set_attr(fsd, "DIMENSION_LIST", T.VlenType(T.ReferenceType("object")), Shape("simple", (2,)),
                   [[], [values.ref_to_json(x.id)]])
        out["x"] = x
        root = w.root
        w.set_attr(root, "title", VSTR, Shape("scalar"), "a run")
        w.set_attr(root, "nan", T.FloatType(8), Shape("simple", (3,)), [1.5, float("nan"), float("-inf")])
        w.set_attr(root, "flag", T.BOOL, Shape("scalar"), True)
        w.set_attr(root, "point", CMPD_LE, Shape("scalar"), [1, 2.5, "ab"])
        w.set_attr(root, "target", T.ReferenceType("object"), Shape("scalar"), values.ref_to_json(tgt.id))
        w.set_attr(root, "matrix", T.IntType(2, True, ">"), Shape("simple", (2, 3)), [[1, 2, 3], [4, 5, 6]])
        w.set_attr(tgt, "units", VSTR, Shape("scalar"), "um")
        w.set_attr(tgt, "resolution", T.FloatType(8), Shape("simple", (3,)), [4.0, 2.0, 1.0])
        vs = w.add_dataset(w.root, "vlen_seq", T.VlenType(T.IntType(4, True, "<")), Shape("simple", (3,)), (3,))
        seq = np.empty(3, dtype=object)
        seq[:] = [np.arange(2, dtype="<i4"), np.arange(0, dtype="<i4"), np.arange(4, dtype="<i4")]
        w.write_array(vs, seq)  # no Zarr/N5 form: not shown
        w.add_datatype(w.root, "mytype", CMPD_LE)  # committed types are not shown either
        w.link_soft(groups["deep"], "soft", "er/u64_5d_deflate_be")
        w.link_hard(groups["deep/er"], "again", out["bool_2d_deflate"])  # canonical: /bool_2d_deflate (DFS order)
        w.link_external(groups["deep"], "ext", "/other/file.h5", "/data")
    return out


def reference_paths(catalog, ds) -> list:
    raw = catalog.pipeline(ds).decode(catalog.store.get(catalog.chunk_index(ds).key(0)))
    return [v.rstrip(b"\0").decode() for v in np.frombuffer(raw, dtype="S48")]


def crc_ok(member: bytes) -> bool:
    return zlib.crc32(zlib.decompress(member, 31)) == int.from_bytes(member[-8:-4], "little")


def chunk_coords(grid: tuple) -> list[tuple]:
    return list(itertools.product(*(range(g) for g in grid)))


def json_load(path) -> Any:
    return json.loads(open(path, "rb").read())


class CountingStore:
    """Delegates to a store and records every read of chunk bytes."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.reads: list[tuple] = []

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def get(self, key, *a, **kw):
        self.reads.append(("get", key))
        return self._inner.get(key, *a, **kw)

    def get_range(self, key, start, length, *a, **kw):
        self.reads.append(("get_range", key, start, length))
        return self._inner.get_range(key, start, length, *a, **kw)


def walk_files(node, out):
    """(file node, size as stat sees it) for every file below ``node``."""
    for name, child in node.entries().items():
        if child.is_dir:
            walk_files(child, out)
        else:
            out.append((child, child.size()))
    return out
