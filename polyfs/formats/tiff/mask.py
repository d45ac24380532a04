"""A TIFF's internal transparency mask (NewSubfileType 4): kept as a sibling dataset.

GDAL writes a per-dataset mask (``gdal_translate -mask``, rasterio's ``write_mask``,
``GDAL_TIFF_INTERNAL_MASK=YES``, the default since GDAL 3.x for GeoTIFF) as one more IFD
after the image, 1-bit, of the image's size. A file of this view is one dataset, so the
mask is kept as data every view can show: the sibling dataset ``<name>_mask`` (uint8, the
image's height and width, 0 = transparent, 255 = valid, deflate, chunked like the image's
plane), named by the image's attribute :data:`MASK_ATTR`. The TIFF view serves the image's
file with that mask as its last IFD again (8-bit, Photometric MASK), so GDAL reports
``Mask Flags: PER_DATASET`` and rasterio's ``read_masks`` gives it back; tifffile and
libtiff read the image as before (a mask page is no image page).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codecs.registry import DEFLATE, Filter
from ...errors import InvalidInput, NotFound, UnsupportedType
from ...importers.common import write_decoded
from ...model import types as T
from ...model.schema import Dataset, Shape
from .image import TiffImage

MASK_ATTR = "tiff_mask"  # on the image: the name of its mask dataset in the same group
UNSERVED_ATTR = "tiff_mask_unserved"  # on the image: the mask it named before a rewrite without one
SUFFIX = "_mask"
VALID, TRANSPARENT = 255, 0
MASK_LEVEL = 6  # deflate level of stored mask chunks (0/255 planes compress to almost nothing)
PHOTOMETRIC_MASK = 4
FILETYPE_MASK = 4


def mask_name(image_name: str) -> str:
    """The mask dataset's name beside an image ``image_name``."""
    return image_name + SUFFIX


def free_mask_name(links: Any, image_name: str) -> str:
    """A name for a new mask beside ``image_name`` that no link of the group has: ``<name>_mask``,
    else ``<name>_mask1``, ``<name>_mask2``... The image's attribute names it, so the name is
    only a default: a dataset already there (the user's own, or a mask its image left behind) is
    neither taken over nor a reason to refuse the file."""
    base = mask_name(image_name)
    if base not in links:
        return base
    return next(f"{base}{i}" for i in range(1, len(links) + 2) if f"{base}{i}" not in links)


def is_mask(series: Any) -> bool:
    """A tifffile series of transparency-mask pages (NewSubfileType bit 2, not a reduced level)."""
    sub = int(getattr(series.keyframe, "subfiletype", 0))
    return bool(sub & FILETYPE_MASK) and not sub & 1


def mask_of(tif: Any, image: Any, where: str) -> np.ndarray | None:
    """The file's mask for ``image`` (its one series) as uint8 0/255 of the image's plane, or None.
    A mask of another size, of several samples or bits, or beside a stack of pages is refused:
    kept, it would not be the image's."""
    masks = _mask_pages(tif)
    if not masks:
        return None
    mk, key = masks[0], image.keyframe
    page = getattr(mk, "index", "?")
    if len(image.pages) != 1 or len(masks) > 1:
        raise UnsupportedType(f"{where}: the transparency mask (page {page}) belongs to a stack of "
                              f"{len(image.pages)} pages; only a one-page image's mask is kept")
    h, w = int(key.imagelength), int(key.imagewidth)
    mh, mw = int(mk.imagelength), int(mk.imagewidth)
    if (mh, mw) != (h, w):
        raise InvalidInput(f"{where}: the transparency mask (page {page}) is {mw}x{mh} pixels, not the "
                           f"image's {w}x{h}")
    if int(mk.samplesperpixel) != 1 or int(mk.bitspersample) not in (1, 8):
        raise InvalidInput(f"{where}: the transparency mask (page {page}) has {int(mk.samplesperpixel)} samples "
                           f"of {int(mk.bitspersample)} bits; a mask is one sample of 1 or 8 bits")
    arr = np.asarray(mk.asarray()).reshape(h, w)
    return np.where(arr != 0, VALID, TRANSPARENT).astype(np.uint8)


def _mask_pages(tif: Any, scan: int = 64) -> list:
    """The full-resolution mask pages: from the page chain when it is short (a described file,
    OME like the view's own, lists only its image pages as series), else from the series."""
    if len(tif.pages) <= scan:
        pages = [p.aspage() if p is not None else None for p in tif.pages]
        return [p for p in pages if p is not None and int(getattr(p, "subfiletype", 0)) & 0b101 == FILETYPE_MASK]
    return [s.keyframe for s in tif.series if s is not None and len(s.pages) and is_mask(s)]


def mask_chunks(image: Dataset) -> tuple[int, int]:
    """The mask's chunks: the image's plane chunks (so the view tiles both alike)."""
    c = tuple(int(x) for x in image.chunks[-2:]) if image.chunks else (256, 256)
    r = image.shape.array_shape
    if len(r) >= 3 and len(image.chunks) == len(r) and r[-1] <= 4 and image.chunks[-1] == r[-1]:
        c = tuple(int(x) for x in image.chunks[-3:-1])  # contig samples last: (Y, X, S)
    return c  # type: ignore[return-value]


def add_mask(writer: Any, image: Dataset, mask: np.ndarray, unlimited: bool) -> Dataset:
    """A new (unlinked) mask dataset holding ``mask``, chunked like ``image``'s plane."""
    maxdims = (None, None) if unlimited else None
    ds = writer.add_dataset(None, None, T.from_numpy(np.dtype("u1")), Shape("simple", mask.shape, maxdims),
                            mask_chunks(image), [Filter(DEFLATE, (MASK_LEVEL,))], fill_value=VALID)
    write_decoded(writer, ds, lambda region: mask[tuple(region)], None, skip_fill=True)
    return ds


def name_attribute(name: str) -> tuple[T.DType, Shape, Any]:
    """The image's :data:`MASK_ATTR` attribute (type, shape, JSON value)."""
    return T.StringType(None, "utf8", "nullterm"), Shape("scalar"), name


def named_mask(image: Dataset, attr: str = MASK_ATTR) -> str | None:
    """The name the image's :data:`MASK_ATTR` (or ``attr``) gives, if any."""
    a = image.attributes.get(attr)
    if a is None:
        return None
    v = a.value[0] if isinstance(a.value, list) and a.value else a.value
    v = v.decode() if isinstance(v, bytes) else v
    return v if isinstance(v, str) and v and "/" not in v else None


def served_mask(model: Any, image: Dataset, path: str) -> Dataset | None:
    """The mask dataset the view serves with ``image`` at ``path``: the sibling its attribute
    names, 2-D uint8 of the image's plane size; else None (the image alone)."""
    name = named_mask(image)
    if name is None:
        return None
    parent = path.rstrip("/").rsplit("/", 1)[0]
    try:
        ds = model.resolve(f"{parent}/{name}")
    except NotFound:
        return None
    dims = image.shape.array_shape
    if not isinstance(ds, Dataset) or len(dims) < 2 or ds.shape.array_shape[:2] != plane(image) \
            or len(ds.shape.array_shape) != 2 or ds.type.numpy() != np.dtype("u1"):
        return None
    return ds


def plane(image: Dataset) -> tuple[int, int]:
    """The image's (height, width)."""
    from .raster import raster

    r = raster(image)
    dims = r.shape if r is not None else image.shape.array_shape
    return int(dims[-2]), int(dims[-1])


@dataclass(frozen=True)
class MaskImage(TiffImage):
    """The mask's IFD: one page, 8-bit, Photometric MASK, NewSubfileType 4, in the image's byte order."""

    order: str = "<"

    @property
    def endian(self) -> str:  # type: ignore[override]
        return self.order


def mask_image(height: int, width: int, tile: tuple[int, int], compression: int, endian: str) -> MaskImage:
    return MaskImage(height, width, 1, np.dtype("u1"), tuple(tile), compression,  # type: ignore[arg-type]
                     photometric=PHOTOMETRIC_MASK, tags=(("NewSubfileType", FILETYPE_MASK),), order=endian)
