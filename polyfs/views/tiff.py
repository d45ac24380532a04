"""The TIFF view: ``MNT/tiff/<stem>/<dataset path>.tif``, one tiled TIFF per image.

Every dataset with at least two dimensions and a numeric type (u/int 8-64,
float 16/32/64, bool as uint8) is a TIFF: the last two dimensions are the
image plane, the leading ones become pages (one IFD per plane, C order),
described by OME-XML (or tifffile's shaped JSON; see tiffmeta.py for the axes,
pixel sizes and why). The file's byte order is the dataset's (``MM`` for
big-endian data, ``II`` otherwise); it is BigTIFF when it would reach
:data:`BIGTIFF_AT` bytes. Where tiles come from (zero-copy stored chunks or
transcoded, cached tiles) is tifftiles.py.

Metadata (details and reasons in tiffmeta.py): OME-XML in the first page's
ImageDescription (ImageJ's own reader cannot open tiled TIFFs, so Fiji reads
these through Bio-Formats, whose format OME-TIFF is); axes from
``DIMENSION_LABELS``, ``_ARRAY_DIMENSIONS``, ``axes`` or the parent group's NGFF
``multiscales``; physical pixel sizes from, first found: NGFF ``multiscales``
scale transforms, ``element_size_um`` (micrometers), ``scale``,
``pixel_size``, ``resolution`` (units from ``unit``/``units``, default
micrometers), also written as XResolution/YResolution in pixels per cm.

File layout: header, every IFD, their out-of-line values (tile offsets and
byte counts included), the shared fill tile (if any tile is missing), then
the tile data. The metadata's size never depends on the tile offsets, so the
whole file is planned from chunk sizes (zero-copy) or measured tile sizes.

**Sharing a layout (polyglot files).** The synthesizer does not decide where
tiles are: :func:`tiff_metadata` packs the IFD chain for tiles at any
caller-given absolute offsets, placed at any caller-given (aligned) offset,
and :func:`tiff_header` is the 8/16 bytes for offset 0 that point at it. A
file that is also HDF5 and a Zarr shard (TIFF header at 0, the rest of a
512-byte HDF5 user block free, chunk bytes once, shard index last) does::

    image = dataset_image(ds, parent, name, title, tile=(cy, cx), compression=50000)
    big = needs_bigtiff(total_size)
    n = tiff_metadata_size(image, big)          # reserve n bytes at `base`
    offsets, counts = ...                       # (npages, ntiles) where the caller put each chunk
    blob = tiff_metadata(image, base, offsets, counts, big)
    head = tiff_header(image, big, first_ifd=base)   # bytes 0..7 (or 0..15)

``base`` may be inside the user block (if ``n`` fits), after the HDF5
metadata, or at the end of the file; a missing tile is pointed at any
caller-placed fill tile. Images the polyglot view serves (zstd or
uncompressed, zero-copy tiles) are that polyglot file here too, the very
same bytes (``polyglot.shared_file``); the others are laid out below.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidInput, NotFound
from ..codecs.pipeline import Pipeline
from ..model.schema import Dataset, Group
from ..model.tree import DomainModel
from ..model.types import EnumType, FloatType, IntType, resolved
from ..vfile import Literal, VFile
from . import tiffmeta
from .base import DirNode, FileNode, Node, ViewContext
from .tiffstructs import (PHOTOMETRIC_MINISBLACK, SAMPLE_FORMAT, Entry, entry, flavor, header, header_size,
                          ifd_chain, row_entries)
from .tifftiles import Geometry, TileData, plan_tiles, tiff_code, zero_copy

log = logging.getLogger(__name__)

SUFFIX = ""
KIND = "dir"
EXTENSION = ".tif"
BIGTIFF_AT = 1 << 32  # classic TIFF offsets are 32-bit
SOFTWARE = "polyfs"


# -- the synthesizer ---------------------------------------------------------
@dataclass(frozen=True)
class TiffImage:
    """What one TIFF shows: ``npages`` tiled planes of one sample per pixel."""

    height: int
    width: int
    npages: int
    dtype: np.dtype  # sample type; its byte order is the file's ('|' -> little-endian)
    tile: tuple[int, int]  # (TileLength, TileWidth), multiples of 16
    compression: int
    description: str | None = None  # ImageDescription of the first page
    resolution: tuple[tuple[int, int], tuple[int, int], int] = ((1, 1), (1, 1), 1)

    @property
    def endian(self) -> str:
        return ">" if self.dtype.byteorder == ">" else "<"

    @property
    def tiles_down(self) -> int:
        return -(-self.height // self.tile[0])

    @property
    def tiles_across(self) -> int:
        return -(-self.width // self.tile[1])

    @property
    def tiles_per_page(self) -> int:
        return self.tiles_down * self.tiles_across

    def _common(self, big: bool) -> dict[str, Entry]:
        e, dt = self.endian, self.dtype
        xres, yres, unit = self.resolution
        out = {
            "ImageWidth": entry("ImageWidth", self.width, e, big),
            "ImageLength": entry("ImageLength", self.height, e, big),
            "BitsPerSample": entry("BitsPerSample", 8 * dt.itemsize, e, big),
            "Compression": entry("Compression", self.compression, e, big),
            "PhotometricInterpretation": entry("PhotometricInterpretation", PHOTOMETRIC_MINISBLACK, e, big),
            "SamplesPerPixel": entry("SamplesPerPixel", 1, e, big),
            "XResolution": entry("XResolution", xres, e, big),
            "YResolution": entry("YResolution", yres, e, big),
            "PlanarConfiguration": entry("PlanarConfiguration", 1, e, big),
            "ResolutionUnit": entry("ResolutionUnit", unit, e, big),
            "TileWidth": entry("TileWidth", self.tile[1], e, big),
            "TileLength": entry("TileLength", self.tile[0], e, big),
            "SampleFormat": entry("SampleFormat", SAMPLE_FORMAT[dt.kind], e, big),
        }
        if self.description:
            out["ImageDescription"] = entry("ImageDescription", self.description, e, big)
        out["Software"] = entry("Software", SOFTWARE, e, big)
        return out

    def pages(self, offsets: np.ndarray, counts: np.ndarray, big: bool) -> list[list[Entry]]:
        """The entries of every IFD (tags ascending)."""
        common = sorted(self._common(big).items(), key=lambda kv: kv[1].tag)
        first = [v for _, v in common]
        rest = [v for k, v in common if k not in ("ImageDescription", "Software")]
        tile_offsets = row_entries("TileOffsets", offsets, self.endian, big)
        tile_counts = row_entries("TileByteCounts", counts, self.endian, big)
        code = tile_offsets[0].tag
        at0 = next(i for i, x in enumerate(first) if x.tag > code)
        at = next(i for i, x in enumerate(rest) if x.tag > code)
        out = [first[:at0] + [tile_offsets[0], tile_counts[0]] + first[at0:]]
        head, tail = rest[:at], rest[at:]
        out.extend(head + [o, c] + tail for o, c in zip(tile_offsets[1:], tile_counts[1:]))
        return out

    def check(self) -> None:
        if self.tile[0] % 16 or self.tile[1] % 16 or min(self.tile) <= 0:
            raise InvalidInput(f"TIFF tiles must be multiples of 16, not {self.tile}")


def tiff_metadata_size(image: TiffImage, big: bool) -> int:
    """Bytes of the IFD chain (with all out-of-line values) for ``image``."""
    shape = (image.npages, image.tiles_per_page)
    z = np.zeros(shape, dtype=np.int64)
    return ifd_chain(image.pages(z, z, big), 16, image.endian, big, size_only=True)  # type: ignore[return-value]


def tiff_metadata(image: TiffImage, base: int, offsets: np.ndarray, counts: np.ndarray, big: bool) -> bytes:
    """The IFD chain of ``image`` to place at absolute offset ``base`` (first IFD at ``base``).

    ``offsets``/``counts`` are ``(npages, tiles_per_page)`` absolute tile
    offsets and byte counts (tiles in row-major order within a page).
    """
    image.check()
    shape = (image.npages, image.tiles_per_page)
    offsets = np.asarray(offsets, dtype=np.int64).reshape(shape)
    counts = np.asarray(counts, dtype=np.int64).reshape(shape)
    return ifd_chain(image.pages(offsets, counts, big), base, image.endian, big)  # type: ignore[return-value]


def tiff_header(image: TiffImage, big: bool, first_ifd: int) -> bytes:
    return header(image.endian, big, first_ifd)


def needs_bigtiff(file_size: int) -> bool:
    return file_size >= BIGTIFF_AT


def dataset_image(ds: Dataset, parent: Group | None, name: str, title: str, tile: tuple[int, int],
                  compression: int) -> TiffImage:
    """The :class:`TiffImage` of one dataset (OME-XML, resolution) for given tiles."""
    dims = ds.shape.array_shape
    dtype = tiff_dtype(ds)
    meta = tiffmeta.describe(ds, parent, name, title, dtype)
    return TiffImage(dims[-2], dims[-1], int(np.prod(dims[:-2], dtype=np.int64)), dtype, tuple(tile),
                     compression, meta.description, meta.resolution)


def compose(image: TiffImage, tiles: TileData) -> VFile:
    """A standalone TIFF: header, IFD chain, fill tile (if used), tile data."""
    use_fill = bool(np.any(tiles.rel < 0))
    fill = tiles.fill_tile if use_fill else b""
    for big in (False, True):
        base = header_size(big)
        base += -base % flavor(image.endian, big).align
        meta_len = tiff_metadata_size(image, big)
        fill_at = base + meta_len
        data_start = fill_at + len(fill)
        if not big and needs_bigtiff(data_start + tiles.length):
            continue
        offsets, counts = tiles.absolute(data_start, fill_at)
        meta = tiff_metadata(image, base, offsets, counts, big)
        assert len(meta) == meta_len
        head = tiff_header(image, big, base).ljust(base, b"\0")
        return VFile([Literal(head), Literal(meta), Literal(fill), *tiles.segments])
    raise AssertionError("unreachable")


# -- which datasets ---------------------------------------------------------------
def tiff_dtype(ds: Dataset) -> np.dtype:
    return ds.type.numpy()


def image_like(ds: Dataset) -> bool:
    """At least two non-empty dimensions of a numeric type TIFF can hold."""
    t = resolved(ds.type)
    dims = ds.shape.array_shape
    if ds.shape.kind != "simple" or len(dims) < 2 or any(d == 0 for d in dims):
        return False
    if isinstance(t, EnumType):
        return t.is_bool
    return isinstance(t, (IntType, FloatType))


def describe(ds: Dataset, pipe: Pipeline, level: int = 6) -> str:
    """How the TIFF view serves a dataset whose effective pipeline is ``pipe``
    ("zero-copy", "transcoded (<why>) to deflate/uncompressed", "-" if not shown);
    pure: no store access (``polyfs info``)."""
    if not image_like(ds):
        return "-"
    if zero_copy(ds, None, pipe):
        return "zero-copy"
    why = []
    if tiff_code(pipe) is None:
        why.append(f"{'+'.join(f.name for f in pipe.filters)} has no TIFF compression code")
    if any(c != 1 for c in ds.chunks[:-2]) and not pipe.is_identity:
        why.append(f"chunks are {math.prod(ds.chunks[:-2])} planes deep")
    if ds.chunks[-1] % 16 or ds.chunks[-2] % 16:
        why.append(f"chunk plane {ds.chunks[-2]}x{ds.chunks[-1]} is not a multiple of 16")
    target = "uncompressed tiles" if level == 0 else f"deflate level {level}"
    return f"transcoded ({'; '.join(why)}) to {target}"


def serving(model: DomainModel, ctx: ViewContext, path: str) -> str:
    """:func:`describe` for a dataset path of a loaded domain."""
    ds = model.resolve(path)
    if not isinstance(ds, Dataset):
        return "-"
    return describe(ds, ctx.catalog.pipeline(ds), ctx.options.tiff_deflate_level)


def build_vfile(ds: Dataset, parent: Group | None, name: str, title: str, ctx: ViewContext) -> VFile:
    """Plan the tiles (measuring transcoded ones), describe the image, lay the file out."""
    idx = ctx.catalog.chunk_index(ds)
    pipe = ctx.catalog.pipeline(ds)
    geo, code, tiles = plan_tiles(ds, idx, pipe, ctx.options.tiff_deflate_level, ctx)
    image = dataset_image(ds, parent, name, title, geo.tile, code)
    return compose(image, tiles)


def _file_node(model: DomainModel, ds: Dataset, parent: Group | None, name: str, path: str,
               ctx: ViewContext, filename: str) -> FileNode:
    title = f"{model.path}{path}"
    mtime = ds.last_modified or ds.created or None

    def build() -> VFile:
        from . import polyglot  # zstd/uncompressed zero-copy images: the polyglot file (also HDF5, a Zarr shard)

        shared = polyglot.shared_file(model, ds, parent, path, ctx)
        return shared.vfile if shared is not None else build_vfile(ds, parent, name, title, ctx)

    return FileNode(filename, build, mtime=mtime)


def domain_node(model: DomainModel, ctx: ViewContext, name: str) -> DirNode:
    """``tiff/<stem>/``: a directory per group that holds images, a ``.tif`` per image."""
    return DirNode(name, lambda: _tree(model, ctx), mtime=model.domain.last_modified or None)


def _tree(model: DomainModel, ctx: ViewContext) -> dict[str, Node]:
    root: dict[str, Any] = {}
    nodes: dict[str, FileNode] = {}  # dataset id -> its node (aliases share it)

    def place(path: str, node: FileNode) -> None:
        parts = [p for p in path.split("/") if p]
        d = root
        for part in parts[:-1]:
            sub = d.setdefault(part, {})
            if not isinstance(sub, dict):
                log.warning("tiff view of %s: %s hides group %s", model.path, part, path)
                return
            d = sub
        leaf = parts[-1] + EXTENSION
        if leaf in d:
            log.warning("tiff view of %s: %s is shown once (name taken)", model.path, path)
            return
        d[leaf] = node

    for e in model.walk():
        ds = e.obj
        if not isinstance(ds, Dataset) or not image_like(ds):
            continue
        parent = e.parent.obj if e.parent is not None and isinstance(e.parent.obj, Group) else None
        name = e.path.rsplit("/", 1)[-1]
        node = _file_node(model, ds, parent, name, e.path, ctx, name + EXTENSION)
        nodes[ds.id] = node
        place(e.path, node)
    for gpath, link in model.aliases():
        if link.kind == "external":
            continue
        path = (gpath.rstrip("/") + "/" + link.name)
        try:
            target = model.resolve(path)
        except NotFound:  # dangling soft link: nothing to show
            continue
        if isinstance(target, Dataset) and target.id in nodes:
            place(path, nodes[target.id])

    def to_nodes(d: dict[str, Any]) -> dict[str, Node]:
        out: dict[str, Node] = {}
        for k, v in d.items():
            out[k] = DirNode(k, to_nodes(v)) if isinstance(v, dict) else v
        return out

    return to_nodes(root)


__all__ = ["SUFFIX", "KIND", "TiffImage", "tiff_metadata", "tiff_metadata_size", "tiff_header",
           "needs_bigtiff", "dataset_image", "compose", "domain_node", "image_like", "describe", "serving",
           "Geometry"]
