"""What a TIFF written into the view, or imported, carries that the dataset does not keep: said.

The dataset keeps a file's pixels, its resolution, description and name, OME pixel sizes, frame
interval and channel names, ImageJ's hyperstack metadata, the GeoTIFF/GDAL tags (geo.py) and the
descriptive tags (described.py). Anything else would vanish unseen, so :func:`say_tags_dropped`
names it in a log line per kind: private tags (an instrument's metadata, EXIF, an ICC profile),
other public tags (colorimetry, XMP), Fiji's slice labels, LUTs and Info, OME-XML beyond what is
kept (an instrument, per-plane positions, channel colours), packed samples widened to whole bytes
(GDAL ``NBITS=12``) and complex integers stored as complex floats.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .described import DESCRIPTIVE_CODES
from .geo import GEO_TAGS

log = logging.getLogger(__name__)


# private tags (32768 and up) a file's image keeps: GeoTIFF/GDAL ones (attributes), ImageJ's
# metadata and its byte counts (attributes), SGI's ImageDepth and TileDepth (the layout), LERC's
# parameters (how its tiles decode: the data is kept)
_KEPT_PRIVATE = frozenset({*(g.code for g in GEO_TAGS), *DESCRIPTIVE_CODES, 50838, 50839, 32997, 32998, 50674})
# ImageJ metadata not kept as ``imagej_*`` attributes (display, annotations, binary blobs): named when dropped
IMAGEJ_NOT_KEPT = ("LUTs", "Ranges", "Labels", "Overlays", "ROI", "Properties", "Info", "Plot")
# public tags a file's image is fully described by without them being kept as such: its layout and
# coding (sizes, samples, compression, strips/tiles, predictor, fill order, JPEG and YCbCr
# parameters, pages, sample ranges), what is kept or served (description, resolution, colour map,
# extra samples, the descriptive tags of described.py) and the writer's name. Any other (WhitePoint,
# PrimaryChromaticities, XMP, TransferFunction, InkNames...) is named when dropped.
_CONSUMED_PUBLIC = frozenset({254, 255, 256, 257, 258, 259, 262, 263, 266, 270, 273, 277, 278, 279, 280, 281, 282,
                              283, 284, 292, 293, 296, 297, 305, 317, 320, 322, 323, 324, 325, 330, 338, 339, 340,
                              341, 347, *range(512, 522), 529, 530, 531, 532, *DESCRIPTIVE_CODES})


def say_tags_dropped(tif: Any, where: str) -> None:
    """Log lines naming the tags of a file's first page that are not kept (a file written into the
    view, or imported): private ones (an instrument's metadata: Micro-Manager, LSM, ScanImage...;
    EXIF, an ICC profile, a writer's own ``extratags``), public ones that say more than the layout
    and are not kept (colorimetry: WhitePoint, PrimaryChromaticities; XMP; InkNames), Fiji's
    metadata beyond the hyperstack's (slice labels, Info, LUTs, ranges, ROIs), OME metadata beyond
    what the dataset keeps (an instrument, plane positions, channel wavelengths), packed samples of
    fewer bits (12-bit) widened to whole bytes and complex integer samples stored as complex
    floats: all would otherwise change unseen."""
    page = tif.pages.first
    tags = page.tags.values() if hasattr(page, "tags") else ()
    dropped = [_tag_name(t) for t in tags if t.code >= 32768 and t.code not in _KEPT_PRIVATE]
    if dropped:
        log.warning("%s: private tag(s) %s dropped (the dataset keeps the image, its resolution, description, "
                    "GeoTIFF/GDAL and ImageJ metadata)", where, ", ".join(dropped))
    public = [_tag_name(t) for t in tags if t.code < 32768 and t.code not in _CONSUMED_PUBLIC]
    if public:
        log.warning("%s: tag(s) %s dropped (the dataset keeps the image, its resolution and description; the "
                    "view's file does not have them)", where, ", ".join(public))
    lost_ome = ome_not_kept(tif)
    if lost_ome:  # a microscope's instrument, plane positions and times, channel wavelengths and colours
        log.warning("%s: OME metadata %s not kept (the dataset keeps the image name and description, pixel "
                    "sizes, frame interval and channel names)", where, ", ".join(lost_ome))
    meta = tif.imagej_metadata if getattr(tif, "is_imagej", False) else None
    lost = [k for k in IMAGEJ_NOT_KEPT if meta and k in meta]
    if lost:  # Fiji's slice labels, Info text, display ranges, channel LUTs, ROIs
        log.warning("%s: ImageJ metadata %s dropped (the dataset keeps its hyperstack dimensions, spacing, "
                    "units and frame interval)", where, ", ".join(lost))
    bits, dtype = getattr(page, "bitspersample", None), getattr(page, "dtype", None)
    complex_int = int(getattr(page, "sampleformat", 1)) == 5  # its own line below, no NBITS of GDAL's
    if isinstance(bits, int) and dtype is not None and 1 < bits < 8 * np.dtype(dtype).itemsize and not complex_int:
        log.warning("%s: %d-bit samples are stored and served as %d-bit (the same values; GDAL's NBITS is not "
                    "kept)", where, bits, 8 * np.dtype(dtype).itemsize)
    if complex_int:  # SampleFormat COMPLEXINT: tifffile decodes it as complex float
        log.warning("%s: complex integer samples are stored as complex floats (%s: the same values)", where,
                    getattr(page, "dtype", "complex"))


def _tag_name(t: Any) -> str:
    return f"{t.name} ({t.code})" if t.name != str(t.code) else str(t.code)


# OME-XML the dataset keeps (as attributes or the layout) or the view writes itself; any other
# element or attribute of a written or imported OME-TIFF is named when dropped (ome_not_kept)
_OME_KEPT = {
    "OME": {"Image", "UUID", "Creator"},
    "Image": {"Pixels", "ID", "Name", "Description"},
    "Pixels": {"Channel", "TiffData", "ID", "DimensionOrder", "Type", "SizeX", "SizeY", "SizeZ", "SizeC", "SizeT",
               "BigEndian", "Interleaved", "SignificantBits", "MetadataOnly", "TimeIncrement", "TimeIncrementUnit",
               *(f"PhysicalSize{x}{u}" for x in "XYZ" for u in ("", "Unit"))},
    "Channel": {"ID", "Name", "SamplesPerPixel", "LightPath"},
}


def ome_not_kept(tif) -> list[str]:
    """Names (``Image/AcquisitionDate``, ``Pixels/Plane``, ``Channel/EmissionWavelength``,
    ``Instrument``...) of an OME-TIFF's metadata that no attribute keeps: an instrument, per-plane
    positions and times, channel colours and wavelengths. A 12-bit camera's ``SignificantBits``
    too (the samples are its 16 bits)."""
    if not getattr(tif, "is_ome", False) or not tif.ome_metadata:
        return []
    import tifffile

    try:
        ome = tifffile.xml2dict(tif.ome_metadata)["OME"]
    except Exception:  # noqa: BLE001 - broken XML: tifffile reads the pages as a plain stack
        return []
    out: list[str] = []

    def note(where: str, element: Any, bits: int | None = None) -> None:
        if not isinstance(element, dict):
            return
        for k, v in element.items():
            if k.endswith("schemaLocation") or k.startswith("xmlns"):
                continue
            said = (k == "SignificantBits" and bits is not None and v not in (bits, str(bits))) \
                or (k == "LightPath" and v) or k not in _OME_KEPT.get(where, ())  # an empty LightPath says nothing
            if said:
                out.append(k if where == "OME" else f"{where}/{k}")

    note("OME", ome)
    images = ome.get("Image")
    dtype = np.dtype(tif.series[0].dtype) if tif.series else None
    bits = None if dtype is None else 1 if dtype.kind == "b" else 8 * dtype.itemsize  # booleans: 1-bit
    for image in images if isinstance(images, list) else [images]:
        note("Image", image)
        pixels = image.get("Pixels") if isinstance(image, dict) else None
        note("Pixels", pixels, bits)
        channels = pixels.get("Channel") if isinstance(pixels, dict) else None
        for c in channels if isinstance(channels, list) else [channels]:
            note("Channel", c)
    return list(dict.fromkeys(out))


def is_reduced(series: Any) -> bool:
    """A tifffile series of reduced-resolution pages (NewSubfileType bit 0): a pyramid level
    tifffile made a series of its own. libvips copies a stack's ImageDescription (tifffile's
    shaped JSON) onto every page and SubIFD level of a pyramid it writes (``vips tiffsave
    stack.tif[n=-1] out.tif --pyramid --subifd``), and tifffile's shaped parser then makes a
    series of each level instead of listing it among the stack's levels."""
    key = getattr(series, "keyframe", None)
    return bool(int(getattr(key, "subfiletype", 0) or 0) & 1)


def full_resolution(series: list) -> list:
    """``series`` without the reduced-resolution ones (:func:`is_reduced`; levels are not kept),
    unless every one is: such a file's image is what it holds."""
    return [s for s in series if not is_reduced(s)] or series
