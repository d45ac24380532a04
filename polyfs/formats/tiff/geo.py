"""GeoTIFF and GDAL tags: kept as dataset attributes, served back as the same tags.

A raster GDAL (``gdal_translate -of GTiff``, ``-of COG``), rasterio or tifffile writes
says where it lies on Earth only in these tags: the CRS (GeoKeyDirectory and its
double/ASCII parameters), the pixel-to-model transform (ModelPixelScale with
ModelTiepoint, or ModelTransformation), and GDAL's own nodata value and band metadata
(scale, offset, descriptions, ``AREA_OR_POINT``); an unorthorectified satellite scene
says it in its RPC coefficients (``RPCCoefficientTag``, GDAL's RPC metadata). Dropping
them turns a map into a bare picture, so the importer keeps each one as an attribute named like the tag
(tifffile's names: ``GeoKeyDirectoryTag``, ``ModelPixelScaleTag``, ...; numbers as
arrays, text as strings) that the other views show too, and the view writes them back
onto every page of the dataset's file, so ``gdalinfo`` of ``tiff/`` shows the CRS,
geotransform and nodata the file was written with. An attribute of the wrong kind
(made elsewhere) is left out of the file rather than served as a broken tag.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...model import types as T
from ...model.schema import Dataset, Shape


@dataclass(frozen=True)
class GeoTag:
    code: int
    name: str  # tifffile's tag name: the attribute's name too
    kind: str  # "u16" (SHORT array), "f64" (DOUBLE array) or "text" (ASCII)
    count: tuple[int, int] = (1, 1 << 16)  # allowed number of values: (multiple of, at most)


GEO_TAGS: tuple[GeoTag, ...] = (
    GeoTag(33550, "ModelPixelScaleTag", "f64", (3, 3)),
    GeoTag(33922, "ModelTiepointTag", "f64", (6, 6 << 12)),
    GeoTag(34264, "ModelTransformationTag", "f64", (16, 16)),
    GeoTag(34735, "GeoKeyDirectoryTag", "u16", (4, 4 << 12)),
    GeoTag(34736, "GeoDoubleParamsTag", "f64"),
    GeoTag(34737, "GeoAsciiParamsTag", "text"),
    GeoTag(42112, "GDAL_METADATA", "text"),
    GeoTag(42113, "GDAL_NODATA", "text"),
    GeoTag(50844, "RPCCoefficientTag", "f64", (92, 92)),  # a satellite scene's rational polynomial camera
)
GEO_TAG_NAMES = tuple(t.name for t in GEO_TAGS)


def _ok_count(tag: GeoTag, n: int) -> bool:
    step, most = tag.count
    return 0 < n <= most and n % step == 0


def geo_attributes(key: Any) -> dict[str, tuple[T.DType, Shape, Any]]:
    """The attributes (name -> type, shape, JSON value) a page's GeoTIFF/GDAL tags make."""
    tags = key.tags if hasattr(key, "tags") else {}
    out: dict[str, tuple[T.DType, Shape, Any]] = {}
    for g in GEO_TAGS:
        tag = tags.get(g.code)
        if tag is None:
            continue
        value = tag.value
        if g.kind == "text":
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if not isinstance(value, str):
                continue
            out[g.name] = (T.StringType(None, "utf8", "nullterm"), Shape("scalar"), value.rstrip("\0"))
            continue
        try:
            arr = np.atleast_1d(np.asarray(value, dtype=np.float64 if g.kind == "f64" else np.int64)).reshape(-1)
        except (TypeError, ValueError):
            continue
        if not _ok_count(g, arr.size):
            continue
        if g.kind == "u16":
            if arr.min() < 0 or arr.max() > 0xFFFF:
                continue
            out[g.name] = (T.IntType(2, False), Shape("simple", (arr.size,)), [int(x) for x in arr])
        else:
            out[g.name] = (T.FloatType(8), Shape("simple", (arr.size,)), [float(x) for x in arr])
    return out


def geo_tags(ds: Dataset) -> tuple[tuple[str, Any], ...]:
    """(tag name, values) of the GeoTIFF/GDAL tags ``ds``'s attributes hold (module doc)."""
    out: list[tuple[str, Any]] = []
    for g in GEO_TAGS:
        a = ds.attributes.get(g.name)
        if a is None:
            continue
        v = a.value
        if g.kind == "text":
            if isinstance(v, str) and "\0" not in v:
                out.append((g.name, v))
            continue
        if isinstance(v, (str, bytes, dict)):
            continue
        try:
            arr = np.atleast_1d(np.asarray(v, dtype=np.float64)).reshape(-1)
        except (TypeError, ValueError):
            continue
        if not _ok_count(g, arr.size):
            continue
        if g.kind == "u16":
            if not all(math.isfinite(x) and x == int(x) and 0 <= x <= 0xFFFF for x in arr.tolist()):
                continue
            out.append((g.name, arr.astype(np.uint16)))
        else:
            out.append((g.name, arr))
    return tuple(out)


def gdal_nodata(text: Any, np_dtype: np.dtype) -> Any:
    """GDAL's nodata value (the ``GDAL_NODATA`` text) as an element of ``np_dtype``, read as GDAL
    reads it; None when it is no value of that type. tifffile refuses ``-3.4028234663852886e+38``
    (``-FLT_MAX``, ESRI's nodata for float rasters) for float32 samples; GDAL takes it, and fills
    unwritten blocks with a float beyond the type's range clamped to its largest (GDALCopyWords)."""
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    if not isinstance(text, str):
        return None
    s = text.strip().strip("\0").strip()
    dt = np.dtype(np_dtype).newbyteorder("=")
    try:
        if dt.kind == "f":
            v = float(s)
            top = float(np.finfo(dt).max)
            return dt.type(math.copysign(top, v) if math.isfinite(v) and abs(v) > top else v)
        if dt.kind in "iub":
            f = float(s)
            if not math.isfinite(f) or f != int(f):
                return None
            v = int(s) if s.lstrip("+-").isdigit() else int(f)  # exact for 64-bit integers
            info = np.iinfo(np.uint8 if dt.kind == "b" else dt)
            if not info.min <= v <= (1 if dt.kind == "b" else info.max):
                return None
            return dt.type(v)
    except (ValueError, OverflowError):
        return None
    return None
