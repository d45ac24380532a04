"""The polyglot view's test corpus (tier 2 and the real mount share it) and checks
that parse every format's index by hand."""
from __future__ import annotations

import os
import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import crc32c
import numpy as np

from polyfs.codecs.registry import DEFLATE, ZSTD, Filter
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

DOMAIN = "/lab/poly.h5"
STEM = ("lab", "poly")  # MNT/<view>/lab/poly/...
ZSTD3 = [Filter(ZSTD, (3,))]
MISSING = 2 ** 64 - 1


@dataclass(frozen=True)
class Case:
    path: str  # dataset path in the domain
    dtype: T.DType
    shape: tuple
    chunks: tuple
    filters: list
    polyglot: bool  # expected in the polyglot view
    fill: object = None
    hole: tuple | None = None  # left at the fill value: missing chunks

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def np_dtype(self) -> np.dtype:
        return self.dtype.numpy()

    @property
    def grid(self) -> tuple:
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunks))


CASES = [
    # 2-D, zstd, big-endian, edge chunks both ways, a missing chunk, non-zero fill value
    Case("/u16be_zstd", T.IntType(2, False, ">"), (100, 130), (32, 48), ZSTD3, True, fill=7,
         hole=(slice(32, 64), slice(48, 96))),
    # pages (3-D), uncompressed, little-endian floats, a whole page of chunks missing
    Case("/f32le_raw", T.FloatType(4, "<"), (3, 70, 64), (1, 32, 32), [], True,
         hole=(slice(1, 2), slice(0, 70), slice(0, 64))),
    # 4-D pages in a group, zstd, little-endian signed
    Case("/g/i32le_zstd_4d", T.IntType(4, True, "<"), (2, 3, 40, 50), (1, 1, 16, 32), ZSTD3, True,
         hole=(slice(0, 1), slice(1, 2), slice(0, 16), slice(0, 32))),
    # uncompressed chunks two planes deep (tiles are planes of chunks), big-endian, edges everywhere
    Case("/i16be_raw_deep", T.IntType(2, True, ">"), (5, 48, 40), (2, 16, 32), [], True,
         hole=(slice(2, 4), slice(16, 32), slice(0, 32))),
    # every chunk present (pyfive cannot read missing chunks), uncompressed, both byte orders
    Case("/u8_raw_full", T.IntType(1, False), (64, 80), (32, 32), [], True),
    Case("/f64be_raw_full", T.FloatType(8, ">"), (48, 40), (16, 16), [], True),
    # 650 chunks: a chunk B-tree of several levels (packed when first read), every chunk present
    Case("/u8_raw_many", T.IntType(1, False), (400, 416), (16, 16), [], True),
    # no chunk at all: every tile is the fill tile, HDF5 has no chunk index, the shard index is empty
    Case("/u16le_zstd_empty", T.IntType(2, False, "<"), (40, 50), (16, 16), ZSTD3, True, fill=3,
         hole=(slice(None), slice(None))),
    # not polyglot: deflate, 3-D chunks with zstd, 1-D
    Case("/u16_deflate", T.IntType(2, False, "<"), (64, 64), (32, 32), [Filter(DEFLATE, (6,))], False),
    Case("/cube_zstd", T.IntType(2, False, "<"), (8, 64, 64), (4, 32, 32), ZSTD3, False),
    Case("/line_zstd", T.IntType(2, False, "<"), (500,), (100,), ZSTD3, False),
]
BY_PATH = {c.path: c for c in CASES}
ALIASES = {"/alias": "/u16be_zstd", "/g/again": "/f32le_raw"}  # a soft and an extra hard link
POLYGLOT = [c for c in CASES if c.polyglot]


def make_array(case: Case) -> np.ndarray:
    rng = np.random.default_rng(len(case.path))
    dt = case.np_dtype
    base = np.indices(case.shape).sum(axis=0) % 97
    if dt.kind == "f":
        arr = (base + rng.random(case.shape)).astype(dt)
    else:
        arr = (base + rng.integers(0, 100, case.shape)).astype(dt)
    if case.hole is not None:
        arr[case.hole] = case.fill or 0
    return arr


def build_store(path: Path) -> Path:
    store = open_store(str(path), create=True)
    with DomainWriter(Catalog(store), DOMAIN) as w:
        groups, made = {}, {}
        for c in CASES:
            parent = w.root
            for g in c.path.strip("/").split("/")[:-1]:
                if g not in groups:
                    groups[g] = w.add_group(parent, g)
                parent = groups[g]
            ds = w.add_dataset(parent, c.name, c.dtype, Shape("simple", c.shape), c.chunks, c.filters,
                               fill_value=c.fill)
            if c.path == "/u16be_zstd":
                w.set_attr_array(ds, "element_size_um", T.FloatType(8), np.array([0.25, 0.5]))
            w.write_array(ds, make_array(c), skip_fill=True)
            made[c.path] = ds
        w.link_hard(groups["g"], "again", made[ALIASES["/g/again"]])
        w.link_soft(w.root, "alias", ALIASES["/alias"])
    return path


def existing_chunks(store, case: Case) -> dict[int, bytes]:
    """C-order chunk number -> stored chunk object, straight from the store."""
    cat = Catalog(store)
    ds = cat.load(DOMAIN).resolve(case.path)
    idx = cat.chunk_index(ds)
    return {int(lin): store.get(idx.key(int(lin))) for lin in idx.linear}


# -- each format's index, parsed by independent code ---------------------------------------
def tiff_tiles(path: Path) -> tuple[bool, np.ndarray, np.ndarray]:
    """(BigTIFF?, tile offsets, byte counts) per (page, tile), via tifffile."""
    import tifffile

    with tifffile.TiffFile(path) as t:
        offs = np.array([p.dataoffsets for p in t.pages], dtype=np.int64)
        counts = np.array([p.databytecounts for p in t.pages], dtype=np.int64)
        return t.is_bigtiff, offs, counts


def hdf5_chunks(path: Path, name: str) -> dict[int, tuple[int, int]]:
    """C-order chunk number -> (offset, size), via h5py's ``get_chunk_info``."""
    import h5py

    with h5py.File(path, "r") as f:
        d = f[name]
        grid = tuple(-(-n // c) for n, c in zip(d.shape, d.chunks))
        out = {}
        for i in range(d.id.get_num_chunks()):
            info = d.id.get_chunk_info(i)
            coords = tuple(o // c for o, c in zip(info.chunk_offset, d.chunks))
            out[int(np.ravel_multi_index(coords, grid))] = (info.byte_offset, info.size)
        return out


def shard_index(data: bytes, nentries: int) -> np.ndarray:
    """The shard index at the end of ``data`` (CRC32C checked): (nentries, 2) uint64."""
    n = nentries * 16
    raw, crc = data[-n - 4:-4], struct.unpack("<I", data[-4:])[0]
    assert crc32c.crc32c(raw) == crc, "shard index CRC32C mismatch"
    return np.frombuffer(raw, dtype="<u8").reshape(nentries, 2)


def tile_chunk_numbers(case: Case) -> np.ndarray:
    """(npages, ntiles) chunk number holding each tile, computed independently of polyfs."""
    lead, (h, w) = case.shape[:-2], case.shape[-2:]
    cy, cx = case.chunks[-2:]
    rows = []
    for page in np.ndindex(*lead) if lead else [()]:
        lc = tuple(p // c for p, c in zip(page, case.chunks[:-2]))
        rows.append([int(np.ravel_multi_index(lc + (r, c), case.grid))
                     for r in range(-(-h // cy)) for c in range(-(-w // cx))])
    return np.array(rows, dtype=np.int64)


def plane_within(case: Case) -> np.ndarray:
    """Index of each page's plane inside its chunk (uncompressed deep chunks)."""
    lead = case.shape[:-2]
    out = []
    for page in np.ndindex(*lead) if lead else [()]:
        k = tuple(p % c for p, c in zip(page, case.chunks[:-2]))
        out.append(int(np.ravel_multi_index(k, case.chunks[:-2])) if k else 0)
    return np.array(out, dtype=np.int64)


def check_shared_bytes(path: Path, store, case: Case, bigtiff: bool = False) -> None:
    """The TIFF tiles, HDF5 chunk index and Zarr shard index point at the same offsets,
    whose bytes are the stored chunk objects; missing chunks are the fill tile / absent /
    2^64-1."""
    data = path.read_bytes()
    chunks = existing_chunks(store, case)
    nentries = int(np.prod(case.grid))
    index = shard_index(data, nentries)
    h5 = hdf5_chunks(path, case.name)
    big, toffs, tcounts = tiff_tiles(path)
    assert big == bigtiff
    assert set(h5) == set(chunks)
    for lin in range(nentries):
        off, n = (int(x) for x in index[lin])
        if lin not in chunks:
            assert off == n == MISSING
            continue
        assert h5[lin] == (off, n) and n == len(chunks[lin])
        assert data[off:off + n] == chunks[lin]
    # TIFF: tiles of existing chunks are those chunks (or their planes); the others one fill tile
    numbers = tile_chunk_numbers(case)
    within = plane_within(case)
    raw = not case.filters
    plane_bytes = case.chunks[-1] * case.chunks[-2] * case.np_dtype.itemsize
    fill_offsets = set()
    for p in range(numbers.shape[0]):
        for t in range(numbers.shape[1]):
            lin = int(numbers[p, t])
            if lin in chunks:
                off = int(index[lin][0])
                if raw:
                    assert (toffs[p, t], tcounts[p, t]) == (off + within[p] * plane_bytes, plane_bytes)
                else:
                    assert (toffs[p, t], tcounts[p, t]) == (off, len(chunks[lin]))
            else:
                fill_offsets.add((int(toffs[p, t]), int(tcounts[p, t])))
    assert len(fill_offsets) <= 1  # one shared fill tile
    if fill_offsets:
        (off, n), = fill_offsets
        assert all(off < int(index[lin][0]) for lin in chunks)  # placed once, before the chunks
        assert bool(case.hole)
    # every chunk's bytes appear once: chunks back to back, no copies
    starts = sorted(int(index[lin][0]) for lin in chunks)
    ends = sorted(int(index[lin][0] + index[lin][1]) for lin in chunks)
    assert all(e <= s for e, s in zip(ends[:-1], starts[1:]))
    if ends:
        assert len(data) == ends[-1] + nentries * 16 + 4  # the shard index is the last bytes


def h5dump_values(path: Path, name: str, dtype: np.dtype) -> np.ndarray:
    """All values of a dataset as h5dump (Debian's HDF5 1.10) prints them."""
    import hdf5plugin

    env = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
    fmt = ["-m", "%.17g"] if dtype.kind == "f" else []
    res = subprocess.run(["h5dump", "-y", "-w", "0", *fmt, "-d", name, str(path)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert "DATA {" in res.stdout, res.stdout + res.stderr
    body = res.stdout.split("DATA {", 1)[1].split("}", 1)[0]
    nums = re.findall(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)", body)
    return np.array([float(x) for x in nums])
