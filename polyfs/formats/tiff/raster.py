"""Which datasets are TIFF images, and as what: pages of (height, width) pixels of one or more samples.

A dataset with at least two non-empty dimensions of a numeric type is an image:
its last two dimensions are the plane, the leading ones pages. Two cases differ:

- **samples per pixel** (RGB, RGBA, any ``(..., H, W, S)`` image a TIFF with
  SamplesPerPixel > 1 and PlanarConfiguration 1 makes): the last dimension is
  the pixel's samples when the dataset says so, with the attribute ``axes``
  ending in ``S`` (what the TIFF importer and the view's writes store, tifffile's
  axes), ``photometric`` ``RGB`` (any case) with 3 or 4 of them, or dimension
  names (xarray's, h5py's labels) ``(..., y, x, band)`` (or ``rgb``, ``channel``...:
  :data:`SAMPLE_NAMES`; else GDAL showed an xarray RGB image as 300x3 pages), and one chunk
  holds all of a pixel's samples (so a chunk's plane is a contiguous TIFF tile).
  The file then has SamplesPerPixel S, PlanarConfiguration 1 (contig), and
  PhotometricInterpretation RGB for 3 or 4 samples (the 4th an unassociated
  alpha, ExtraSamples 2) unless ``photometric`` names another; else
  MinIsBlack with S-1 unspecified ExtraSamples; the ExtraSamples a written file had
  (attribute ``extrasamples``) replace these when there are as many.
- **the photometric a written file had** (attribute ``photometric``, tifffile's
  name): MinIsWhite (1-bit masks, scanned documents: a viewer would show them
  inverted as MinIsBlack), Palette with the attribute ``colormap`` ((3, 2**bits)
  uint16, the ColorMap tag, 8- and 16-bit unsigned samples only; a shorter map, of
  a 1- to 4-bit palette file, padded; a MinIsBlack page carrying a ColorMap, as GDAL
  writes a colour table set after the pixels, is taken as Palette, as GDAL reads it), Separated
  (CMYK, 4 samples or more) and YCbCr of 3 samples (stored as written: served
  with YCbCrSubSampling 1, 1, since libtiff's default is 2, 2) are served as
  they were written; the stored values are the file's, so only this tag tells
  a reader what they mean.
- **samples in separate planes** (a TIFF with PlanarConfiguration 2: GDAL's
  ``INTERLEAVE=BAND``, tifffile's ``planarconfig="separate"``; stored as
  ``(..., S, H, W)`` with ``axes`` ``...SYX``, or named ``(..., band, y, x)``, rioxarray's
  layout, so GDAL sees the bands): every S consecutive planes are
  one page of S samples, PlanarConfiguration 2, its tiles those of the planes
  in order (so GDAL sees S bands, not S pages). ``planes`` is S; the planes stay
  pages of ``shape`` for everything that places tiles.
- **HDF5 images** (the HDF5 Image and Palette Specification, what ``H5IMmake_image_24bit``,
  HDFView and IDL write: attribute ``CLASS`` ``IMAGE``): an ``IMAGE_TRUECOLOR`` of 3 (or 4)
  samples is an RGB image, its samples contig for ``INTERLACE_MODE`` ``INTERLACE_PIXEL`` (the
  default, ``(H, W, 3)``) and separate planes for ``INTERLACE_PLANE`` (``(3, H, W)``); a
  ``IMAGE_GRAYSCALE``/``IMAGE_BITMAP`` with ``IMAGE_WHITE_IS_ZERO`` 1 is MinIsWhite. Without
  these an ``(H, W, 3)`` array stays H pages of W x 3 (a thin volume is as likely).
- **1-bit images** (bilevel scans, fax pages, masks: a TIFF of BitsPerSample 1, which the
  importer and the view's writes store as booleans with the attribute ``photometric``) are
  served as they were written, BitsPerSample 1 (rows packed most significant bit first): as
  8-bit 0 and 1 they showed black in every viewer (Pillow mode ``L``, OpenCV, GDAL without
  NBITS) and tifffile read uint8, not bool. Their tiles are always transcoded. Other booleans
  (h5py masks) stay 8-bit 0 and 1, their chunks served as they are.
- **complex numbers**, stored as h5py's ``{r, i}`` compound of two floats (the
  same bytes as numpy's complex64/128): SampleFormat 6 (complex IEEE float),
  BitsPerSample 64 or 128, as tifffile and libtiff write them.

Everything planning a file (tiles.py, image.py, the polyglot file) sees a
dataset through its :class:`Raster`: the dims without the samples axis, and a
pixel type of ``S`` samples (a ``V`` dtype of ``S * itemsize`` bytes when S > 1)
whose bytes are exactly the stored element bytes of one pixel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...model import values
from ...model.schema import Dataset
from ...model.types import CompoundType, EnumType, FloatType, IntType, resolved
from ...views.hdmf import complex_name
from .meta import axis_names

MAX_SAMPLES = 16  # a longer last axis with ``axes`` ending in S is shown as pages (ImageJ-like stacks)
# dimension names (xarray's ``_ARRAY_DIMENSIONS``/``dimension_names``, h5py's labels) that make a
# dim the samples: ``(y, x, band)`` is contig samples, ``(band, y, x)`` (rioxarray's) separate planes
Y_NAMES = frozenset({"y", "lat", "latitude", "row", "rows", "northing"})
X_NAMES = frozenset({"x", "lon", "long", "longitude", "col", "cols", "column", "columns", "easting"})
BAND_NAMES = frozenset({"band", "bands"})
SAMPLE_NAMES = BAND_NAMES | {"rgb", "rgba", "channel", "channels", "c", "color", "colour", "colors", "colours",
                             "sample", "samples", "s"}
# PhotometricInterpretation codes the view writes
PHOTOMETRIC = {"MINISWHITE": 0, "MINISBLACK": 1, "RGB": 2, "PALETTE": 3, "SEPARATED": 5, "YCBCR": 6}
EXTRA_UNSPECIFIED, EXTRA_UNASSOCIATED_ALPHA = 0, 2
EXTRA_SAMPLES = {"UNSPECIFIED": 0, "ASSOCALPHA": 1, "UNASSALPHA": 2}  # tifffile's names of ExtraSamples codes


@dataclass(frozen=True)
class Raster:
    """A dataset as TIFF pages: ``shape``/``chunks``/``grid`` without the samples axis."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    grid: tuple[int, ...]
    samples: int  # contig samples per pixel (the dataset's last dim when > 1)
    sample: np.dtype  # one sample (complex for {r, i} compounds), the dataset's byte order
    photometric: int
    extra: tuple[int, ...]  # ExtraSamples (samples beyond the photometric's own)
    # tags the photometric needs (ColorMap, YCbCrSubSampling): (tag name, values)
    tags: tuple[tuple[str, Any], ...] = field(default=(), compare=False)
    planes: int = 1  # samples in separate planes (the third-last dim of shape when > 1)
    bilevel: bool = False  # a 1-bit image as written (module doc): BitsPerSample 1

    @property
    def pixel(self) -> np.dtype:
        """One pixel's bytes as a numpy type (the sample type itself for one sample)."""
        return self.sample if self.samples == 1 else np.dtype((np.void, self.samples * self.sample.itemsize))

    @property
    def bits(self) -> int:
        """BitsPerSample: 1 for a 1-bit image as written (module doc), else whole bytes."""
        if self.bilevel:
            return 1
        return 8 * self.sample.itemsize

    @property
    def pixel_bytes(self) -> int:
        return self.samples * self.sample.itemsize

    @property
    def lead(self) -> tuple[int, ...]:
        return self.shape[:-2]

    @property
    def chunk_nbytes(self) -> int:
        return int(np.prod(self.chunks, dtype=np.int64)) * self.pixel_bytes


def sample_dtype(ds: Dataset) -> np.dtype | None:
    """The numpy type of one TIFF sample of ``ds``, or None when TIFF cannot hold its type."""
    t = resolved(ds.type)
    if isinstance(t, EnumType):
        return ds.type.numpy() if t.is_bool else None
    if isinstance(t, (IntType, FloatType)):
        return ds.type.numpy() if t.is_numeric else None  # not bit layouts numpy lacks
    if isinstance(t, CompoundType):
        name = complex_name(t)
        if name is None:
            return None
        order = resolved(t.fields[0][1]).order
        return np.dtype(name).newbyteorder(">" if order == ">" else "<")
    return None


def raster(ds: Dataset) -> Raster | None:
    """``ds`` as TIFF pages, or None when it is no image."""
    dims = tuple(ds.shape.array_shape)
    if ds.shape.kind != "simple" or len(dims) < 2 or any(d == 0 for d in dims):
        return None
    sample = sample_dtype(ds)
    if sample is None:
        return None
    chunks, grid = tuple(ds.chunks), tuple(ds.grid)
    samples = _samples(ds, dims, chunks)
    if samples > 1:
        dims, chunks, grid = dims[:-1], chunks[:-1], grid[:-1]
    planes = _planes(ds, dims) if samples == 1 else 1
    photometric, extra, tags = _photometric(ds, samples * planes, sample)
    extra = _extra_samples(ds, extra)
    bilevel = sample.kind == "b" and samples * planes == 1 and _text_attr(ds, "photometric") is not None
    if bilevel and photometric == PHOTOMETRIC["PALETTE"]:
        tags = tuple((k, v[:2].tolist() + v[256:258].tolist() + v[512:514].tolist()) if k == "ColorMap" else (k, v)
                     for k, v in tags)  # 2 colours of the padded map (_colormap)
    return Raster(dims, chunks, grid, samples, sample, photometric, extra, tags, planes, bilevel)


def _text_attr(ds: Dataset, name: str) -> str | None:
    a = ds.attributes.get(name)
    return a.value if a is not None and isinstance(a.value, str) else None


def _spec_text(ds: Dataset, name: str) -> str:
    """An HDF5 Image Specification attribute's text, upper case ('' when absent): the spec's
    writers store fixed-length null-terminated strings, h5py users ``np.bytes_`` or ``str``."""
    a = ds.attributes.get(name)
    v = a.value if a is not None else None
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v[()]
    if isinstance(v, (bytes, np.bytes_)):
        v = bytes(v).decode("ascii", "replace")
    return v.rstrip("\0").strip().upper() if isinstance(v, str) else ""


def _h5_truecolor(ds: Dataset) -> str | None:
    """``INTERLACE_PIXEL``/``INTERLACE_PLANE`` for an HDF5 Image Spec truecolor image, else None."""
    if _spec_text(ds, "CLASS") != "IMAGE" or _spec_text(ds, "IMAGE_SUBCLASS") != "IMAGE_TRUECOLOR":
        return None
    return _spec_text(ds, "INTERLACE_MODE") or "INTERLACE_PIXEL"


def _h5_white_is_zero(ds: Dataset) -> bool:
    """An HDF5 Image Spec grey or bitmap image that says 0 is white (``IMAGE_WHITE_IS_ZERO`` 1)."""
    if _spec_text(ds, "CLASS") != "IMAGE" or \
            _spec_text(ds, "IMAGE_SUBCLASS") not in ("IMAGE_GRAYSCALE", "IMAGE_BITMAP"):
        return False
    a = ds.attributes.get("IMAGE_WHITE_IS_ZERO")
    try:
        return a is not None and int(np.asarray(a.value).reshape(-1)[0]) == 1
    except (TypeError, ValueError, IndexError):
        return False


def _samples(ds: Dataset, dims: tuple[int, ...], chunks: tuple[int, ...]) -> int:
    """The last dim when it is the pixel's samples (module doc), else 1."""
    if len(dims) < 3 or not 2 <= dims[-1] <= MAX_SAMPLES or len(chunks) != len(dims) or chunks[-1] != dims[-1]:
        return 1
    axes = _text_attr(ds, "axes")
    if axes is not None and len(axes) == len(dims) and axes.endswith("S"):
        return dims[-1]
    photometric = (_text_attr(ds, "photometric") or "").upper()
    if photometric == "RGB" and dims[-1] in (3, 4):
        return dims[-1]
    if dims[-1] in (3, 4) and _h5_truecolor(ds) == "INTERLACE_PIXEL":
        return dims[-1]
    names = _dim_names(ds)
    if names is not None and names[-3] in Y_NAMES and names[-2] in X_NAMES and names[-1] in SAMPLE_NAMES:
        return dims[-1]
    return 1


def _dim_names(ds: Dataset) -> list[str] | None:
    """The dataset's dimension names (xarray's, h5py's labels), lower case; None if it has none."""
    names = axis_names(ds, None, "")
    if len(names) != ds.rank or not all(isinstance(n, str) for n in names):
        return None
    return [str(n).strip().lower() for n in names]


def _planes(ds: Dataset, dims: tuple[int, ...]) -> int:
    """The third-last dim when ``axes`` names it the samples (``...SYX``, module doc), else 1."""
    if len(dims) < 3 or not 2 <= dims[-3] <= MAX_SAMPLES:
        return 1
    axes = _text_attr(ds, "axes")
    if axes is not None and len(axes) == len(dims) and axes.endswith("SYX"):
        return dims[-3]
    if dims[-3] in (3, 4) and _h5_truecolor(ds) == "INTERLACE_PLANE":
        return dims[-3]
    names = _dim_names(ds)
    if names is not None and names[-3] in BAND_NAMES and names[-2] in Y_NAMES and names[-1] in X_NAMES:
        return dims[-3]
    return 1


def _photometric(ds: Dataset, samples: int, sample: np.dtype
                 ) -> tuple[int, tuple[int, ...], tuple[tuple[str, Any], ...]]:
    """(PhotometricInterpretation, ExtraSamples, the tags it needs) for ``ds`` (module doc)."""
    said = (_text_attr(ds, "photometric") or "").upper()
    if samples in (3, 4) and said in ("", "RGB"):
        return PHOTOMETRIC["RGB"], (EXTRA_UNASSOCIATED_ALPHA,) * (samples - 3), ()
    if said == "MINISWHITE" or (not said and samples == 1 and _h5_white_is_zero(ds)):
        return PHOTOMETRIC["MINISWHITE"], (EXTRA_UNSPECIFIED,) * (samples - 1), ()
    if said == "SEPARATED" and samples >= 4:
        return PHOTOMETRIC["SEPARATED"], (EXTRA_UNSPECIFIED,) * (samples - 4), ()
    if said == "YCBCR" and samples == 3 and sample.kind == "u" and sample.itemsize == 1:
        return PHOTOMETRIC["YCBCR"], (), (("YCbCrSubSampling", [1, 1]),)
    if said == "PALETTE" and samples == 1:
        cmap = _colormap(ds, sample)
        if cmap is not None:
            return PHOTOMETRIC["PALETTE"], (), (("ColorMap", cmap),)
    return PHOTOMETRIC["MINISBLACK"], (EXTRA_UNSPECIFIED,) * (samples - 1), ()


def _extra_samples(ds: Dataset, default: tuple[int, ...]) -> tuple[int, ...]:
    """The ExtraSamples a written file had (attribute ``extrasamples``: tifffile's names or the
    codes, one per extra sample), else ``default``: a grey image's alpha (``gdalwarp
    -dstalpha``), a premultiplied alpha and an RGB image's plain fourth band (RGBN) are served
    as written, not as unspecified or unassociated alpha."""
    a = ds.attributes.get("extrasamples")
    if a is None or not default:
        return default
    said = a.value if isinstance(a.value, list) else [a.value]
    if len(said) != len(default):
        return default
    out = []
    for x in said:
        code = EXTRA_SAMPLES.get(x.upper()) if isinstance(x, str) else \
            x if isinstance(x, int) and not isinstance(x, bool) and x in EXTRA_SAMPLES.values() else None
        if code is None:
            return default
        out.append(code)
    return tuple(out)


def _colormap(ds: Dataset, sample: np.dtype) -> np.ndarray | None:
    """The ``colormap`` attribute as a ColorMap tag's values (3 * 2**bits), or None when the
    samples are no palette indices (8- or 16-bit unsigned) or it does not fit them. The map of
    a file of fewer bits per sample (GDAL ``NBITS=4``: 16 colours, 1-bit: 2), whose samples the
    view serves as 8-bit, is padded with black: its indices keep their colours."""
    a = ds.attributes.get("colormap")
    if a is None or sample.kind not in "ub" or sample.itemsize not in (1, 2):
        return None
    try:
        cmap = np.asarray(a.value, dtype=np.int64)
    except (TypeError, ValueError):
        return None
    size = 1 << (8 * sample.itemsize)
    if cmap.ndim != 2 or cmap.shape[0] != 3 or not 0 < cmap.shape[1] <= size or cmap.min() < 0 \
            or cmap.max() > 0xFFFF:
        return None
    if cmap.shape[1] < size:
        cmap = np.concatenate([cmap, np.zeros((3, size - cmap.shape[1]), np.int64)], axis=1)
    return cmap.reshape(-1)


def fill_pixels(ds: Dataset, r: Raster, shape: tuple[int, ...]) -> np.ndarray:
    """An array of ``shape`` pixels holding the dataset's fill value."""
    arr = values.fill_array(ds.type, ds.fill_value, (*shape, r.samples) if r.samples > 1 else shape)
    return np.ascontiguousarray(arr).view(r.pixel).reshape(shape)
