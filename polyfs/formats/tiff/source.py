"""Import a TIFF (tiled or stripped, multi-page, BigTIFF, ImageJ, OME...).

Each tifffile series becomes one dataset (``/image``, or ``/image0``,
``/image1``... for several; pyramid levels ``/image_level1``...). Its shape is
the pages as leading dims (the series' shape) followed by the page's own
dims: ``[samples (planar)] [depth] Y X [samples (contig)]``.

Tiles compressed with deflate (a zlib stream) or zstd, without predictor
(and uncompressed tiles when ``--codec none`` is chosen), are copied byte for byte as chunks of shape ``(1.., tile Y, tile X[, S])`` in
the file's byte order (``II``/``MM``); empty tiles stay missing. Strips are
copied the same way when one strip holds at least 64 KiB (else they would
make tiny chunk objects), except the last, shorter strip, which is decoded,
padded and re-encoded. Anything else (uncompressed, LZW, JPEG, predictors,
bit-packed samples...) is decoded by tifffile and written with the chosen
encoding, in the file's byte order too (Pillow misreads big-endian deflate
int16/int32/float32 tiles): tiled pages keep their tile shape as chunks,
stripped ones use the chunk-shape rule of :func:`common.auto_chunks`, made to suit the
TIFF view (:func:`decoded_chunks`: samples whole, planes multiples of 16).

Every tile and strip is checked against the file size first, so a bogus
offset fails with a SourceError instead of importing zeros.
"""
from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...codecs.registry import DEFLATE, ZSTD, Filter
from ...codecs.sniff import sniff
from ...errors import InvalidInput, SourceError, UnsupportedType
from ...model import types as T
from ...model.schema import UNLIMITED, Shape
from ...model.writer import DomainWriter
from ...importers.common import (source_errors, ChunkSink, ImportOptions, Progress, auto_chunks,
                                 chunk_region, chunks_for, padded, stored_pipeline_filters, write_decoded)
from ...model.types import from_numpy_any as dtype_from_numpy
from ...model.values import element_to_json
from ...model.jsonattrs import json_attribute
from ...codecs.sniff import zstd_has_content_size
from .described import descriptive_attributes
from .dropped import IMAGEJ_NOT_KEPT, full_resolution, say_tags_dropped
from .geo import gdal_nodata, geo_attributes
from .mask import MASK_ATTR, add_mask, is_mask, mask_name, mask_of, name_attribute
from .raster import MAX_SAMPLES

log = logging.getLogger(__name__)

HEADERS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
COPY_COMPRESSIONS = {8: DEFLATE, 32946: DEFLATE, 50000: ZSTD}  # TIFF code -> HDF5 filter
MIN_STRIP_BYTES = 64 << 10
DEFAULT_LEVELS = {DEFLATE: 6, ZSTD: 3}
JPEG_COMPRESSIONS = (6, 7, 34892)  # old-style JPEG, JPEG, lossy JPEG (DNG): decoded YCbCr is RGB


class _BrokenPageChain(logging.Handler):
    """Catches tifffile's report of a page chain that leads out of the file (a truncated
    or corrupt file): tifffile logs it and stops at the last good page, so the import
    would succeed with pages missing. Its error that a description does not match the pages
    (GDAL copies its source's ImageDescription into what it writes, tifffile's shaped JSON
    included, whatever the band count) is a warning naming the file: the pages are read as they
    are and nothing is lost, yet ``polyfs import`` printed ``ERROR`` for a good import. Other
    tifffile messages pass on as they are."""

    MARKS = ("invalid page offset", "invalid offset to first page", "invalid offset to page")
    MISMATCH = ("does not match page shape", "invalid shaped series metadata")

    def __init__(self, path: Path | None = None) -> None:
        super().__init__(logging.WARNING)
        self.problem: str | None = None
        self.path = path
        self.mismatch_said = False
        self._log = logging.getLogger("tifffile")

    def __enter__(self) -> "_BrokenPageChain":
        self._log.addFilter(self._claim)
        return self

    def __exit__(self, *exc: object) -> None:
        self._log.removeFilter(self._claim)

    def _claim(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(m in message for m in self.MARKS):
            if self.problem is None:
                self.problem = message.split("> ", 1)[-1]  # without tifffile's object repr
            return False  # reported as the import's error instead
        if any(m in message for m in self.MISMATCH):  # one warning, however many lines tifffile logs
            if self.mismatch_said:
                return False
            self.mismatch_said = True
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
            record.msg, record.args = (f"{self.path}: {message.split('> ', 1)[-1]}: its ImageDescription does not "
                                       f"describe its pages (a copied one); the pages are imported as they are"), ()
        return True


def is_tiff_header(head: bytes) -> bool:
    return head[:4] in HEADERS


def claims(path: Path) -> bool:
    """A file starting with a TIFF or BigTIFF header, either byte order."""
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            return is_tiff_header(f.read(4))
    except OSError as exc:
        raise SourceError(path, exc.strerror or exc) from None


@dataclass
class Geometry:
    """Where a page's chunks sit: the canonical 5-D page shape of tifffile
    (``shaped``: planar samples, depth, Y, X, contig samples) and its chunk."""

    shaped: tuple[int, int, int, int, int]
    chunk: tuple[int, int, int, int, int]
    keep: tuple[bool, bool, bool, bool, bool]  # which of the 5 dims the dataset shows

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shaped, self.chunk))

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(s for s, k in zip(self.shaped, self.keep) if k)

    @property
    def chunk_dims(self) -> tuple[int, ...]:
        return tuple(c for c, k in zip(self.chunk, self.keep) if k)


def geometry(page) -> Geometry:
    """Where a page's segments (tiles or strips) sit in its 5-D shaped array."""
    shaped = tuple(int(x) for x in page.shaped)
    s_sep, depth, length, width, s_con = shaped
    if page.is_tiled:
        chunk = (1, int(page.tiledepth or 1), int(page.tilelength), int(page.tilewidth), s_con)
    else:
        rps = int(page.rowsperstrip or length) or length
        chunk = (1, 1, min(rps, length), width, s_con)
    keep = (s_sep > 1, depth > 1, True, True, s_con > 1)
    return Geometry(shaped, chunk, keep)


_ROOT = object()  # the writer's root group (the default parent of an imported series)


@dataclass
class SeriesLayout:
    """What one tifffile series is as a dataset: its pages, where their segments sit, the
    dataset's dims (leading page dims, then the page's own), axes and element type."""

    pages: list
    key: Any  # the key frame (a TiffPage: tags, decode)
    geo: Geometry
    lead: tuple[int, ...]
    axes: str
    np_dtype: np.dtype  # in the file's byte order
    source_type: T.DType

    @property
    def dims(self) -> tuple[int, ...]:
        return self.lead + self.geo.dims


def series_layout(tif, series, pages: list | None = None) -> SeriesLayout:
    """The dataset of one series (T.UnsupportedType for sample types the model lacks)."""
    pages = list(series.pages) if pages is None else pages
    key = series.keyframe
    geo = geometry(key)
    npages = len(pages)
    page_axes = "".join(a for a, k in zip("SZYXS", geo.keep) if k)
    sshape = tuple(int(x) for x in series.shape)
    saxes = str(series.axes or "")
    nlead = len(sshape) - len(geo.dims)
    if nlead >= 0 and sshape[nlead:] == geo.dims and math.prod(sshape[:nlead]) == npages:
        lead = sshape[:nlead]
        axes = saxes[:nlead] + page_axes if len(saxes) == len(sshape) else ""
    else:
        lead = (npages,) if npages > 1 else ()
        axes = ("I" if npages > 1 else "") + page_axes
    np_dtype = np.dtype(series.dtype).newbyteorder(tif.byteorder)
    return SeriesLayout(pages, key, geo, lead, axes, np_dtype, dtype_from_numpy(np_dtype))


class TiffImporter:
    # datasets made with no maximum shape (those a file written into the view makes, like the
    # Zarr and N5 views' new arrays); ``polyfs import`` keeps the file's extent as the maximum
    unlimited = False

    def __init__(self, path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
        self.path = Path(path)
        self.writer = writer
        self.opts = opts

    def err(self, what: str, cause: object) -> SourceError:
        cause = " ".join(str(cause).split())
        return SourceError(self.path, f"{what}: {cause}" if what else cause)

    def run(self) -> None:
        import tifffile

        with _BrokenPageChain(self.path) as chain:
            try:
                tif = tifffile.TiffFile(self.path)
            except Exception as exc:  # tifffile raises many kinds for broken headers
                raise self.err("", f"not a readable TIFF file ({type(exc).__name__}: {exc})") from None
            with source_errors(lambda cause: self.err("", cause)), tif:
                self.size = os.fstat(tif.filehandle.fileno()).st_size if hasattr(tif.filehandle, "fileno") \
                    else self.path.stat().st_size
                npages = len(tif.pages)  # walks the whole page chain
                if chain.problem:
                    raise self.err("", f"truncated or corrupt: {chain.problem} (after {npages} "
                                       f"readable pages); the pages past it would be missing")
                self._import(tif)

    # -- planning ---------------------------------------------------------------------
    def _import(self, tif) -> None:
        jobs = []
        series = [s for s in tif.series if s is not None and len(s.pages) and not is_mask(s)]
        if not series:
            raise self.err("", "the file holds no image")
        series = full_resolution(series)  # levels tifffile made series of (a description libvips copied)
        say_tags_dropped(tif, str(self.path))
        with source_errors(lambda cause: self.err("", cause)):
            masked = mask_of(tif, series[0], str(self.path)) if len(series) == 1 else None
        for i, s in enumerate(series):
            base = "image" if len(series) == 1 else f"image{i}"
            levels = list(getattr(s, "levels", None) or [s])
            for j, level in enumerate(levels):
                name = base if j == 0 else f"{base}_level{j}"
                jobs.append(self.plan_series(tif, level, name))
        bar = Progress(sum(j["nchunks"] for j in jobs), self.path.name, self.opts.progress)
        try:
            for job in jobs:
                self.write_series(tif, job, bar)
        finally:
            bar.close()
        if masked is not None:  # mask.py: kept beside the image, named by its attribute
            image = jobs[0]["ds"]
            mds = add_mask(self.writer, image, masked, self.unlimited)
            self.writer.link_hard(self.writer.root, mask_name("image"), mds)
            self.writer.set_attr(image, MASK_ATTR, *name_attribute(mask_name("image")))

    def _pages(self, series) -> list:
        pages = list(series.pages)
        if any(p is None for p in pages):
            raise self.err(f"series {series.name or ''}".strip(), "has missing pages")
        return pages

    def layout(self, tif, series, name: str) -> SeriesLayout:
        """The dataset a series makes (every page's segments checked against the file size)."""
        pages = self._pages(series)
        for n, p in enumerate(pages):
            self._check_offsets(p, n)
        try:
            return series_layout(tif, series, pages)
        except T.UnsupportedType as exc:
            raise self.err(f"series {name}", exc) from None

    def plan_series(self, tif, series, name: str | None, parent: Any = _ROOT) -> dict[str, Any]:
        """Plan one series as a dataset ``name`` of ``parent`` (default: the root; None: unlinked)."""
        lay = self.layout(tif, series, name or "image")
        pages, key, geo, lead, dims, axes, np_dtype = (lay.pages, lay.key, lay.geo, lay.lead, lay.dims, lay.axes,
                                                      lay.np_dtype)
        source_type = lay.source_type
        copy_filters = self._copy_filters(key, pages, geo, np_dtype)
        if copy_filters is not None:
            chunks = (1,) * len(lead) + geo.chunk_dims
            dtype = source_type
            filters = copy_filters
        else:
            # Decoded pixels keep the file's byte order (not the importers' big-endian, which
            # only saves N5 a transcode): as big-endian deflate tiles, every little-endian
            # int16/int32/float32 picture written in strips (Pillow, OpenCV, imageio, ImageJ)
            # was misread by Pillow from tiff/, even the file Pillow had just written there:
            # its libtiff path unpacks those types byte-swapped (I;16BS, I;32BS, F;32BF).
            dtype = source_type
            chunks = ((1,) * len(lead) + geo.chunk_dims) if key.is_tiled else \
                decoded_chunks(dims, dtype.itemsize, self.opts.chunks, geo.keep[-1])
            filters = stored_pipeline_filters(self.opts, dtype, chunks)
        if parent is _ROOT:
            parent = self.writer.root
        maxdims = tuple(UNLIMITED for _ in dims) if self.unlimited else None
        ds = self.writer.add_dataset(parent, name if parent is not None else None, dtype,
                                     Shape("simple", dims, maxdims), chunks, filters,
                                     fill_value=nodata_fill(key, dtype, np_dtype))
        self._attrs(tif, series, key, ds, axes)
        nchunks = len(pages) * math.prod(geo.grid) if copy_filters is not None else ds.nchunks
        return {"ds": ds, "pages": pages, "geo": geo, "lead": lead, "copy": copy_filters is not None,
                "nchunks": nchunks, "np_dtype": np_dtype}

    def _check_offsets(self, page, n: int) -> None:
        for i, (off, count) in enumerate(zip(page.dataoffsets, page.databytecounts)):
            if count and (off < 8 or off + count > self.size):
                kind = "tile" if page.keyframe.is_tiled else "strip"
                raise self.err(f"page {n} {kind} {i}",
                               f"bytes {off}..{off + count} lie outside the file ({self.size} bytes): "
                               f"bogus offset or truncated file")

    def _copy_filters(self, key, pages, geo: Geometry, np_dtype: np.dtype) -> list[Filter] | None:
        """The HDF5 filters the stored tiles are already in ([] for uncompressed
        tiles when the chosen encoding is none too), or None to decode them."""
        return copy_filters(key, pages, geo, np_dtype, raw_ok=not self.opts.encoding.filters)

    def _attrs(self, tif, series, key, ds, axes: str) -> None:
        for name, (t, shape, value) in image_attributes(tif, series, key, axes).items():
            self.writer.set_attr(ds, name, t, shape, value)

    # -- writing ------------------------------------------------------------------------
    def write_series(self, tif, job: dict[str, Any], bar: Progress) -> None:
        if job["copy"]:
            self._copy(tif, job, bar)
        else:
            self._decode(tif, job, bar)

    def _copy(self, tif, job: dict[str, Any], bar: Progress) -> None:
        w = self.writer
        ds, geo, lead, pages = job["ds"], job["geo"], job["lead"], job["pages"]
        grid = geo.grid
        keep_idx = [i for i, k in enumerate(geo.keep) if k]
        fh = tif.filehandle
        filters = w.pipeline(ds).filters
        fid = filters[0].id if filters else None
        tiled = bool(pages[0].keyframe.is_tiled)
        segs = self._segments(tif, job)
        with ChunkSink(w) as sink:
            for n, page in enumerate(pages):
                lead_coords = tuple(int(c) for c in np.unravel_index(n, lead)) if lead else ()
                for t, (off, count) in enumerate(zip(page.dataoffsets, page.databytecounts)):
                    bar(1)
                    if not count:
                        continue  # an empty tile: missing chunk
                    local = np.unravel_index(t, grid)
                    coords = lead_coords + tuple(int(local[i]) for i in keep_idx)
                    fh.seek(off)
                    data = fh.read(count)
                    if len(data) != count:
                        raise self.err(f"page {n} chunk {t}", f"short read at offset {off}")
                    full = tiled or self._is_full(geo, local)  # TIFF tiles are always stored full size
                    if full and ((fid is None and count == ds.chunk_nbytes)
                                 or (fid == DEFLATE and sniff(data[:16]) == "zlib")
                                 or (fid == ZSTD and zstd_has_content_size(data))):
                        sink.stored(ds, coords, data)
                        continue
                    # a short last strip, or a tile the filter cannot take as is: decode it
                    part = self._region(segs, chunk_region(ds, coords))
                    sink.encoded(ds, coords, padded(ds, part.astype(ds.type.numpy())))

    @staticmethod
    def _is_full(geo: Geometry, local) -> bool:
        return all((int(c) + 1) * n <= s for c, n, s in zip(local, geo.chunk, geo.shaped))

    def _segments(self, tif, job: dict[str, Any]):
        """The series' pages as segments read from the file (a region at a time)."""
        from .segments import FileSource, SegmentCache, segments_of

        try:
            segs = segments_of(job["pages"], job["pages"][0].keyframe, job["geo"], job["lead"], job["np_dtype"],
                               str(self.path))
        except UnsupportedType:  # pages of several dims tiled or stripped unlike each other: a page at a time
            return _PageArrays(self, job), None, None
        except InvalidInput as exc:  # short strips
            raise SourceError(self.path, str(exc).removeprefix(f"{self.path}: ")) from None
        return segs, FileSource(tif.filehandle, self.size), SegmentCache()

    def _region(self, segs, region) -> np.ndarray:
        """A region of the dataset, decoding only the segments it overlaps."""
        img, src, cache = segs
        try:
            return img.read(src, tuple(region), str(self.path), cache=cache)
        except SourceError:
            raise
        except InvalidInput as exc:  # names the file already
            raise SourceError(self.path, str(exc).removeprefix(f"{self.path}: ")) from None

    def _decode(self, tif, job: dict[str, Any], bar: Progress) -> None:
        segs = self._segments(tif, job)
        write_decoded(self.writer, job["ds"], lambda region: self._region(segs, region), None, skip_fill=True,
                      progress=bar)


class _PageArrays:
    """Regions of a series whose pages are laid out unlike each other: whole pages decoded by
    tifffile (the last one kept)."""

    def __init__(self, imp: TiffImporter, job: dict[str, Any]) -> None:
        self.imp, self.pages, self.geo, self.lead = imp, job["pages"], job["geo"], job["lead"]
        self._last: dict[int, np.ndarray] = {}

    def page(self, i: int) -> np.ndarray:
        if i not in self._last:
            self._last.clear()
            try:
                arr = self.pages[i].asarray()
            except Exception as exc:  # codec errors of all kinds from imagecodecs
                raise self.imp.err(f"page {i}", f"cannot decode ({type(exc).__name__}: {exc})") from None
            self._last[i] = np.asarray(arr).reshape(self.geo.dims)
        return self._last[i]

    def read(self, src: Any, region: tuple[slice, ...], where: str, cache: Any = None) -> np.ndarray:
        nlead = len(self.lead)
        lead_sl, page_sl = region[:nlead], tuple(region[nlead:])
        if not nlead:
            return self.page(0)[page_sl]
        sizes = tuple(s.stop - s.start for s in lead_sl)
        out = None
        for idx in np.ndindex(*sizes):
            at = tuple(s.start + i for s, i in zip(lead_sl, idx))
            part = self.page(int(np.ravel_multi_index(at, self.lead)))[page_sl]
            if out is None:
                out = np.empty(sizes + part.shape, dtype=part.dtype)
            out[idx] = part
        assert out is not None
        return out


def image_attributes(tif, series, key, axes: str) -> dict[str, tuple[T.DType, Shape, Any]]:
    """The attributes an image's tags make (name -> type, shape, JSON value): ``axes``,
    ``name``, ``photometric`` (a palette's ``colormap`` too), ``extrasamples`` (what the samples past the
    photometric's own are), ``resolution`` (X, Y per unit) with ``resolution_unit``, the
    ImageJ hyperstack metadata as ``imagej_<key>``, the writer's own ImageDescription (not
    tifffile's, ImageJ's or OME metadata) as ``image_description``, an OME-TIFF's pixel sizes and
    channel names; GeoTIFF and
    GDAL tags under their own names (geo.py)."""
    out: dict[str, tuple[T.DType, Shape, Any]] = {}
    vl = T.StringType(None, "utf8", "nullterm")
    if axes:
        out["axes"] = (vl, Shape("scalar"), axes)
    if series.name:
        out["name"] = (vl, Shape("scalar"), str(series.name))
    try:
        photometric = key.photometric.name
    except AttributeError:
        photometric = None
    if photometric == "YCBCR" and int(getattr(key, "compression", 1)) in JPEG_COMPRESSIONS:
        photometric = "RGB"  # the JPEG codec hands YCbCr data over as RGB: what is stored
    if photometric == "MINISBLACK" and _grey_with_colormap(key):
        photometric = "PALETTE"  # GDAL's colour table set after the pixels (module doc of raster.py)
    if photometric is not None:
        out["photometric"] = (vl, Shape("scalar"), photometric)
    extra = extra_samples(key)
    if extra:  # served back (raster.py): an alpha or a plain band (RGBN) stays what it was
        out["extrasamples"] = (vl, Shape("simple", (len(extra),)), extra)
    cmap = getattr(key, "colormap", None) if photometric == "PALETTE" else None
    if cmap is not None and np.ndim(cmap) == 2 and np.shape(cmap)[0] == 3:  # served back (raster.py)
        out["colormap"] = (T.IntType(2, False), Shape("simple", tuple(np.shape(cmap))),
                           np.asarray(cmap, dtype=np.uint16).tolist())
    tags = key.tags if hasattr(key, "tags") else {}
    xres, yres = tags.get("XResolution"), tags.get("YResolution")
    if xres is not None and yres is not None:
        res = [_rational(xres.value), _rational(yres.value)]
        out["resolution"] = (T.FloatType(8), Shape("simple", (2,)), res)
        unit = tags.get("ResolutionUnit")
        if unit is not None:
            try:
                import tifffile

                uname = tifffile.RESUNIT(unit.value).name.lower()
            except (ValueError, AttributeError):
                uname = str(unit.value)
            out["resolution_unit"] = (vl, Shape("scalar"), uname)
    meta = tif.imagej_metadata if tif.is_imagej else None
    if meta:
        for k, v in meta.items():
            if k in IMAGEJ_NOT_KEPT:
                continue
            try:
                json.dumps(v)
            except (TypeError, ValueError):
                continue
            t, sh, val = json_attribute(v)
            out[f"imagej_{k}"] = (t, sh, val)
    text = foreign_description(key) or ome_description(tif, series)
    if text:
        out["image_description"] = (vl, Shape("scalar"), text)
    out.update(ome_pixel_sizes(tif, series, axes))
    out.update(ome_time_increment(tif, series, axes))
    out.update(ome_channel_names(tif, series, axes))
    out.update(geo_attributes(key))
    out.update(descriptive_attributes(key))
    return out


def _grey_with_colormap(key: Any) -> bool:
    """Whether a one-sample page of 8- or 16-bit unsigned samples carries a ColorMap under
    PhotometricInterpretation MinIsBlack: what GDAL writes when a colour table is set after pixels
    were written (rasterio's ``write`` then ``write_colormap``), and what GDAL reads back as a palette
    image (it takes the ColorMap whatever the photometric says). Kept as a palette, or the colours
    would be lost."""
    if getattr(key, "colormap", None) is None or int(getattr(key, "samplesperpixel", 0)) != 1:
        return False
    dt = np.dtype(getattr(key, "dtype", None) or "f8")
    return dt.kind == "u" and dt.itemsize in (1, 2)


def extra_samples(key: Any) -> list[str]:
    """The page's ExtraSamples as tifffile's names (``UNSPECIFIED``, ``ASSOCALPHA``,
    ``UNASSALPHA``; an unknown code as its number): whether a band past the photometric's
    own is an alpha (premultiplied or not) or a plain band (the NIR of an RGBN image).
    Samples past the photometric's own with no ExtraSamples tag are unspecified, as libtiff
    reads them: OpenCV writes BGRA that way, and an alpha served in their place changed what
    OpenCV reads back."""
    out = []
    for e in getattr(key, "extrasamples", None) or ():
        name = getattr(e, "name", None)
        out.append(str(name) if name else str(int(e)))
    if not out:
        try:
            own = _COLOUR_SAMPLES.get(key.photometric.name)
        except AttributeError:
            own = None
        spare = int(getattr(key, "samplesperpixel", 0) or 0) - (own or 0)
        if own is not None and spare > 0:
            out = ["UNSPECIFIED"] * spare
    return out


# samples each PhotometricInterpretation is made of (the rest are ExtraSamples)
_COLOUR_SAMPLES = {"MINISWHITE": 1, "MINISBLACK": 1, "PALETTE": 1, "RGB": 3, "YCBCR": 3,
                   "CIELAB": 3, "ICCLAB": 3, "ITULAB": 3, "SEPARATED": 4}


def foreign_description(key: Any) -> str | None:
    """The page's ImageDescription that is not metadata a reader parses (tifffile's shaped JSON,
    ImageJ's, OME-XML): the writer's own text. tifffile writes ``description=`` as a first
    ImageDescription and its shaped JSON as a second one, so a file that is shaped may carry one."""
    shaped = getattr(key, "shaped_description", None)
    imagej = getattr(key, "imagej_description", None)
    for text in (getattr(key, "description", ""), getattr(key, "description1", "")):
        if not text or text == shaped or text == imagej or text.rstrip().endswith("OME>"):
            continue
        return str(text)
    return None


def _ome_pixels(tif, series) -> tuple[Any, dict] | None:
    """(the series whose level ``series`` is, its OME ``Pixels`` element as tifffile's dict), or
    None for files that are no OME-TIFF."""
    if not getattr(tif, "is_ome", False) or not tif.ome_metadata:
        return None
    import tifffile

    found = next(((i, s) for i, s in enumerate(tif.series)
                  if s is series or any(lv is series for lv in (getattr(s, "levels", None) or ()))), None)
    if found is None:
        return None
    index, base = found
    try:
        images = tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]
        image = (images if isinstance(images, list) else [images])[index]
        pixels = image["Pixels"]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return (base, pixels) if isinstance(pixels, dict) else None


def ome_channel_names(tif, series, axes: str) -> dict[str, tuple[T.DType, Shape, Any]]:
    """An OME-TIFF image's channel names (``Channel Name``: DAPI, GFP...), one per index of its C
    axis, as ``channel_names``; the view's OME-XML names its channels so again (meta.py)."""
    found = _ome_pixels(tif, series)
    if found is None or "C" not in axes:
        return {}
    channels = found[1].get("Channel")
    channels = channels if isinstance(channels, list) else [channels]
    size = int(series.shape[axes.index("C")]) if len(axes) == len(series.shape) else -1
    if len(channels) != size or not all(isinstance(c, dict) for c in channels):
        return {}
    names = [c.get("Name") for c in channels]
    if not any(isinstance(n, str) and n for n in names):
        return {}
    texts = [n if isinstance(n, str) else "" if n is None else str(n) for n in names]
    return {"channel_names": (T.StringType(None, "utf8", "nullterm"), Shape("simple", (len(texts),)), texts)}


def ome_description(tif, series) -> str | None:
    """An OME-TIFF image's ``Description`` (tifffile's ``metadata={"Description": ...}``, Bio-Formats'
    image description): the dataset's ``image_description``, which the view's OME-XML gives back."""
    if not getattr(tif, "is_ome", False) or not tif.ome_metadata:
        return None
    import tifffile

    index = next((i for i, s in enumerate(tif.series)
                  if s is series or any(lv is series for lv in (getattr(s, "levels", None) or ()))), None)
    try:
        images = tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]
        text = (images if isinstance(images, list) else [images])[index or 0].get("Description")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return text if isinstance(text, str) and text.strip() else None


def ome_time_increment(tif, series, axes: str) -> dict[str, tuple[T.DType, Shape, Any]]:
    """A time-lapse OME-TIFF's frame interval (``TimeIncrement``, ``TimeIncrementUnit``, default
    seconds) as ``time_increment`` and ``time_increment_unit``: the view's OME-XML gives it back
    (meta.physical_sizes). Without it a copy through the view lost it silently."""
    found = _ome_pixels(tif, series)
    if found is None or "T" not in axes:
        return {}
    v = found[1].get("TimeIncrement")
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        return {}
    vl = T.StringType(None, "utf8", "nullterm")
    return {"time_increment": (T.FloatType(8), Shape("scalar"), float(v)),
            "time_increment_unit": (vl, Shape("scalar"), str(found[1].get("TimeIncrementUnit") or "s"))}


def ome_pixel_sizes(tif, series, axes: str) -> dict[str, tuple[T.DType, Shape, Any]]:
    """An OME-TIFF image's ``PhysicalSizeX/Y/Z`` (and units) as ``pixel_size`` and ``unit``.

    OME writers (Bio-Formats, tifffile) keep pixel sizes in the OME-XML only, not in the
    resolution tags, so without this an import dropped them silently. The attributes are the
    ones the TIFF view (meta.physical_sizes), ilastik-style readers and users read: one size
    per dimension when every dimension is Z, Y or X (a last samples axis aside), else one per
    spatial dimension (Z, Y, X of a TCZYX image; meta.py spreads them), else the (Y, X) pair.
    Pyramid levels get the base sizes scaled by the level's downsampling."""
    found = _ome_pixels(tif, series)
    if found is None:
        return {}
    base, pixels = found
    letters = axes[:-1] if axes.endswith("S") else axes
    sizes: dict[str, tuple[float, str]] = {}
    for letter in "XYZ":
        v = pixels.get(f"PhysicalSize{letter}")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            sizes[letter] = (float(v), str(pixels.get(f"PhysicalSize{letter}Unit") or "µm"))
    for letter in "YX":  # a pyramid level: pixels are larger by the downsampling factor
        if letter in sizes and letter in letters and letter in base.axes:
            n_base, n_level = base.shape[base.axes.index(letter)], series.shape[axes.index(letter)]
            if n_level:
                sizes[letter] = (sizes[letter][0] * n_base / n_level, sizes[letter][1])
    spatial = [x for x in letters if x in "ZYX"]
    if letters and set(letters) <= set(sizes):
        chosen = [sizes[x] for x in letters]
    elif len(spatial) > 2 and letters[-2:] == "YX" and set(spatial) <= set(sizes):
        chosen = [sizes[x] for x in spatial]  # one per spatial dim (Z, Y, X of a CZYX image)
    elif letters[-2:] == "YX" and {"Y", "X"} <= set(sizes) and sizes["Y"][1] == sizes["X"][1]:
        chosen = [sizes["Y"], sizes["X"]]
    else:
        return {}
    vl = T.StringType(None, "utf8", "nullterm")
    units = [u for _, u in chosen]
    out: dict[str, tuple[T.DType, Shape, Any]] = {
        "pixel_size": (T.FloatType(8), Shape("simple", (len(chosen),)), [v for v, _ in chosen])}
    if len(set(units)) == 1:
        out["unit"] = (vl, Shape("scalar"), units[0])
    else:
        out["unit"] = (vl, Shape("simple", (len(units),)), units)
    return out


def missing_value(key: Any, np_dtype: np.dtype) -> Any:
    """What a segment the file never wrote (byte count 0: GDAL's ``SPARSE_OK``) holds: the page's
    nodata value (``GDAL_NODATA``), else 0, as GDAL and tifffile read it."""
    tags = key.tags if hasattr(key, "tags") else {}
    v = gdal_nodata(tags[42113].value, np_dtype) if 42113 in tags else None
    return np_dtype.newbyteorder("=").type(0) if v is None else v


def nodata_fill(key: Any, dtype: T.DType, np_dtype: np.dtype) -> Any:
    """The fill value (JSON) of a new dataset made from a page with a non-zero nodata value, so the
    chunks of its unwritten segments, left missing, read as that value; None otherwise."""
    tags = key.tags if hasattr(key, "tags") else {}
    if 42113 not in tags:  # GDAL_NODATA
        return None
    v = missing_value(key, np_dtype)
    if v == 0:  # NaN is not
        return None
    return element_to_json(dtype, v)


def copy_filters(key, pages, geo: Geometry, np_dtype: np.dtype, raw_ok: bool = False) -> list[Filter] | None:
    """The HDF5 filters a page's segments are already in, so they can be stored as they are
    (``[]``: uncompressed, when ``raw_ok``), or None when they must be decoded: deflate or zstd
    without predictor, whole bytes per sample, every page laid out like ``key``; strips only
    when one holds at least :data:`MIN_STRIP_BYTES`."""
    comp = int(key.compression)
    raw_ok = comp == 1 and raw_ok
    if (comp not in COPY_COMPRESSIONS and not raw_ok) or int(key.predictor) != 1 or int(key.fillorder) != 1:
        return None
    if int(key.sampleformat) not in (1, 2, 3) or np_dtype.kind not in "uif":
        return None
    bps = key.bitspersample
    if isinstance(bps, tuple):
        bps = bps[0]
    if int(bps) != 8 * np_dtype.itemsize or getattr(key, "subsampling", None) not in (None, (1, 1)):
        return None
    if not key.is_tiled and math.prod(geo.chunk) * np_dtype.itemsize < MIN_STRIP_BYTES:
        return None  # small strips would make tiny chunk objects: decode and use the chunk rule
    for p in pages:  # every page must be laid out like the key page (frames share it)
        if len(p.dataoffsets) != math.prod(geo.grid):
            return None
        if p is key or not hasattr(p, "tags"):
            continue
        if int(p.compression) != comp or tuple(p.shaped) != geo.shaped or bool(p.is_tiled) != bool(key.is_tiled) \
                or int(p.predictor) != 1 or geometry(p).chunk != geo.chunk:
            return None
    if raw_ok:
        return []
    fid = COPY_COMPRESSIONS[comp]
    return [Filter(fid, (DEFAULT_LEVELS[fid],))]


def decoded_chunks(dims: tuple[int, ...], itemsize: int, requested: tuple[int, ...] | None,
                   contig: bool) -> tuple[int, ...]:
    """The chunks of decoded strips: ``--chunks`` if given, else :func:`common.auto_chunks` made
    to suit the TIFF view, whose tiles are chunks only when a chunk holds every sample of its
    pixels and its plane is a multiple of 16 each way. The common rule sees contig samples
    (RGB) as the plane's last dim: a 3000x4000 RGB photo became (87, 4000, 3) chunks that every
    read of ``tiff/`` had to transcode. So the samples are kept whole (the rule runs on the
    pixels), and a plane dim left at a full extent that is not a multiple of 16 is halved to one
    (only when the data is chunked at all: a dataset of one chunk stays whole)."""
    if requested is not None and len(requested) == len(dims):
        return chunks_for(dims, itemsize, requested)
    samples = dims[-1] if contig and len(dims) >= 3 and 1 < dims[-1] <= MAX_SAMPLES else 1
    pixels = dims[:-1] if samples > 1 else dims
    chunks = list(auto_chunks(pixels, itemsize * samples))
    if len(pixels) >= 2 and tuple(chunks) != tuple(pixels) and all(c == 1 for c in chunks[:-2]):
        for ax in (-2, -1):
            if chunks[ax] == pixels[ax] and pixels[ax] % 16 and pixels[ax] > 16:
                chunks[ax] = -(-pixels[ax] // 32) * 16  # half, rounded up to a multiple of 16
    return tuple(chunks) + ((samples,) if samples > 1 else ())


def _rational(v: Any) -> float:
    if isinstance(v, tuple) and len(v) == 2:
        return float(v[0]) / float(v[1]) if v[1] else 0.0
    return float(v)


def import_into(path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
    TiffImporter(path, writer, opts).run()
