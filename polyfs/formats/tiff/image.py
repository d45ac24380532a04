"""One TIFF image's IFD chain, packed for tiles wherever the caller puts them.

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
same bytes (``polyglot.file.shared_file``); the others by :func:`compose`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import InvalidInput
from ...model.schema import Dataset, Group
from ...vfile import Literal, VFile
from . import FORMAT
from . import meta as tiffmeta
from .described import descriptive_tags
from .geo import CFGeo, cf_geo_tags, cf_nodata, geo_tags
from .raster import raster
from .structs import (PHOTOMETRIC_MINISBLACK, SAMPLE_FORMAT, Entry, entry, flavor, header, header_size, ifd_chain,
                      row_entries)
from .tiles import TileData

EXTENSION = ".tif"  # what the view shows
WRITTEN_EXTENSIONS = FORMAT.source_suffixes  # what a writer may name a new file (any case): dataset = the stem
BIGTIFF_AT = 1 << 32  # classic TIFF offsets are 32-bit
SOFTWARE = "polyfs"


@dataclass(frozen=True)
class TiffImage:
    """What one TIFF shows: ``npages`` tiled planes of ``samples`` samples per pixel (contig)."""

    height: int
    width: int
    npages: int
    dtype: np.dtype  # sample type; its byte order is the file's ('|' -> little-endian)
    tile: tuple[int, int]  # (TileLength, TileWidth), multiples of 16
    compression: int
    description: str | None = None  # ImageDescription of the first page
    resolution: tuple[tuple[int, int], tuple[int, int], int] = ((1, 1), (1, 1), 1)
    samples: int = 1  # SamplesPerPixel
    photometric: int = PHOTOMETRIC_MINISBLACK
    extra: tuple[int, ...] = ()  # ExtraSamples
    tags: tuple[tuple[str, Any], ...] = field(default=(), compare=False)  # ColorMap, YCbCrSubSampling, GeoTIFF
    planes: int = 1  # samples in separate planes: that many consecutive planes make one page
    bits: int = 0  # BitsPerSample when not the sample's whole bytes (1: booleans, raster.py)

    @property
    def per_pixel(self) -> int:
        """SamplesPerPixel."""
        return self.samples * self.planes

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
            "BitsPerSample": entry("BitsPerSample", [self.bits or 8 * dt.itemsize] * self.per_pixel, e, big),
            "Compression": entry("Compression", self.compression, e, big),
            "PhotometricInterpretation": entry("PhotometricInterpretation", self.photometric, e, big),
            "SamplesPerPixel": entry("SamplesPerPixel", self.per_pixel, e, big),
            "XResolution": entry("XResolution", xres, e, big),
            "YResolution": entry("YResolution", yres, e, big),
            "PlanarConfiguration": entry("PlanarConfiguration", 2 if self.planes > 1 else 1, e, big),
            "ResolutionUnit": entry("ResolutionUnit", unit, e, big),
            "TileWidth": entry("TileWidth", self.tile[1], e, big),
            "TileLength": entry("TileLength", self.tile[0], e, big),
            "SampleFormat": entry("SampleFormat", [SAMPLE_FORMAT[dt.kind]] * self.per_pixel, e, big),
        }
        if self.extra:
            out["ExtraSamples"] = entry("ExtraSamples", list(self.extra), e, big)
        for name, values in self.tags:
            out[name] = entry(name, values, e, big)
        if self.description:
            out["ImageDescription"] = entry("ImageDescription", self.description, e, big)
        out["Software"] = entry("Software", SOFTWARE, e, big)
        return out

    def pages(self, offsets: np.ndarray, counts: np.ndarray, big: bool) -> list[list[Entry]]:
        """The entries of every IFD (tags ascending); ``offsets``/``counts`` per plane, the
        planes of separate samples joined into their page's rows."""
        if self.planes > 1:
            rows = (offsets.shape[0] // self.planes, offsets.shape[1] * self.planes)
            offsets, counts = offsets.reshape(rows), counts.reshape(rows)
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
                  compression: int, cf: CFGeo | None = None) -> TiffImage:
    """The :class:`TiffImage` of one dataset (OME-XML, resolution) for given tiles;
    ``cf``: its CF georeferencing (geo.py), for GeoTIFF tags."""
    r = raster(ds)
    if r is None:
        raise InvalidInput(f"{title}: not an image")
    dims = r.shape
    meta = tiffmeta.describe(ds, parent, name, title, r.sample, r.samples, r.planes, r.bits)
    return TiffImage(dims[-2], dims[-1], int(np.prod(dims[:-2], dtype=np.int64)), r.sample, tuple(tile),
                     compression, meta.description, meta.resolution, r.samples, r.photometric, r.extra,
                     r.tags + geo_tags(ds) + cf_geo_tags(ds, cf) + _nodata(ds, r.sample) + descriptive_tags(ds),
                     r.planes, r.bits)


def _nodata(ds: Dataset, sample: np.dtype) -> tuple[tuple[str, Any], ...]:
    """GDAL_NODATA from a CF ``_FillValue`` (geo.py, "CF nodata"), when the dataset has none."""
    text = cf_nodata(ds, sample)
    return (("GDAL_NODATA", text),) if text is not None else ()


def compose(image: TiffImage, tiles: TileData, mask: tuple[TiffImage, TileData] | None = None) -> VFile:
    """A standalone TIFF: header, IFD chain, fill tile (if used), tile data; ``mask``: a
    transparency mask's IFD (mask.py) after the image's, its fill tile and tiles after theirs."""
    extra = [mask] if mask is not None else []
    fills = [t.fill_tile if bool(np.any(t.rel < 0)) else b"" for t in [tiles] + [m[1] for m in extra]]
    for big in (False, True):
        base = header_size(big)
        base += -base % flavor(image.endian, big).align
        zero = [(np.zeros((im.npages, im.tiles_per_page), np.int64),) * 2 for im in [image] + [m[0] for m in extra]]
        meta_len = _chain([image] + [m[0] for m in extra], zero, base, big, size_only=True)
        fill_at = base + meta_len
        data_start = fill_at + sum(len(f) for f in fills)
        total = data_start + tiles.length + sum(m[1].length for m in extra)
        if not big and needs_bigtiff(total):
            continue
        where, fat, placed = data_start, fill_at, []
        for t, f in zip([tiles] + [m[1] for m in extra], fills):
            placed.append(t.absolute(where, fat))
            where += t.length
            fat += len(f)
        meta = _chain([image] + [m[0] for m in extra], placed, base, big)
        assert len(meta) == meta_len
        head = tiff_header(image, big, base).ljust(base, b"\0")
        segs = [s for t in [tiles] + [m[1] for m in extra] for s in t.segments]
        return VFile([Literal(head), Literal(meta), *(Literal(f) for f in fills), *segs])
    raise AssertionError("unreachable")


def _chain(images: list[TiffImage], placed: list, base: int, big: bool, size_only: bool = False) -> Any:
    """The IFD chain of several images, one after the other (an image and its mask)."""
    pages = []
    for im, (offsets, counts) in zip(images, placed):
        im.check()
        shape = (im.npages, im.tiles_per_page)
        pages += im.pages(np.asarray(offsets, np.int64).reshape(shape), np.asarray(counts, np.int64).reshape(shape),
                          big)
    return ifd_chain(pages, base, images[0].endian, big, size_only=size_only)


def written_stem(name: str) -> str | None:
    """The dataset a file ``name`` written into the view stands for: its stem when it ends in
    ``.tif`` or ``.tiff`` in any case (``a.TIFF`` -> ``a``, shown back as ``a.tif``), else None."""
    if name.startswith("."):
        return None
    low = name.lower()
    for ext in WRITTEN_EXTENSIONS:
        if low.endswith(ext) and len(name) > len(ext):
            return name[: -len(ext)]
    return None


# -- which datasets ---------------------------------------------------------------
def tiff_dtype(ds: Dataset) -> np.dtype:
    """One sample's numpy type (complex for ``{r, i}`` compounds)."""
    r = raster(ds)
    return r.sample if r is not None else ds.type.numpy()


def image_like(ds: Dataset) -> bool:
    """At least two non-empty dimensions of a numeric type TIFF can hold (raster.py)."""
    return raster(ds) is not None
