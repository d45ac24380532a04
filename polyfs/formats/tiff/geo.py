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
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...errors import PolyfsError
from ...model import types as T
from ...model.schema import Dataset, Shape
from .meta import axis_names
from .raster import X_NAMES, Y_NAMES, raster


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


# -- CF nodata -------------------------------------------------------------------------------------
# A netCDF/CF variable says which value means "no data" in ``_FillValue`` (else ``missing_value``);
# GDAL's netCDF driver (and rasterio through it) reads that as the band's nodata. Its TIFF carried no
# GDAL_NODATA, so rasterio/GDAL read the same variable through ``tiff/`` with no nodata: fill values
# averaged into overviews and statistics, masks all valid. Served as GDAL_NODATA when the dataset has
# no GDAL_NODATA of its own; an in-place edit or rewrite that leaves it as served stores nothing.
CF_NODATA = ("_FillValue", "missing_value")


def cf_nodata(ds: Dataset, np_dtype: np.dtype) -> str | None:
    """The GDAL_NODATA text ``ds``'s CF ``_FillValue``/``missing_value`` gives (GDAL's netCDF driver's
    nodata), or None: the dataset has its own GDAL_NODATA, none of them, or no value of its type."""
    if "GDAL_NODATA" in ds.attributes or np.dtype(np_dtype).kind not in "iuf":
        return None
    for name in CF_NODATA:
        a = ds.attributes.get(name)
        if a is not None:
            return _nodata_text(a.value, np.dtype(np_dtype))
    return None


def _nodata_text(value: Any, dt: np.dtype) -> str | None:
    """One attribute value (a number, a 1-element list, HSDS's ``"NaN"``) as GDAL_NODATA text, or
    None when it is no single value of ``dt`` (GDAL's netCDF driver reads it the same way)."""
    if isinstance(value, list):
        if len(value) != 1:
            return None
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    if dt.kind in "iu" and isinstance(value, int):  # exact: float() rounds 64-bit fills (NC_FILL_INT64)
        return str(value) if gdal_nodata(str(value), dt) is not None else None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    if dt.kind in "iu":
        text = str(int(v)) if math.isfinite(v) and v == int(v) else None
    else:
        text = "nan" if math.isnan(v) else format(float(dt.type(v)), ".17g") if math.isfinite(v) else \
            ("inf" if v > 0 else "-inf")
    return text if text is not None and gdal_nodata(text, dt) is not None else None


def unedited_cf_nodata(ds: Dataset, got: dict[str, Any]) -> bool:
    """Whether the GDAL_NODATA of a file written or edited in place (``got``: name -> (type, shape,
    value)) only repeats the one the view derived from ``ds``'s ``_FillValue`` (then it is not
    stored: the netCDF variable keeps its attributes as they were)."""
    r = raster(ds)
    said = got.get("GDAL_NODATA")
    derived = cf_nodata(ds, r.sample) if r is not None else None
    if said is None or derived is None:
        return False
    a, b = gdal_nodata(said[2], r.sample), gdal_nodata(derived, r.sample)
    return a is not None and b is not None and (a == b or (a != a and b != b))


# -- CF / rioxarray georeferencing -----------------------------------------------------------------
# An array xarray/rioxarray wrote (``to_zarr``, ``to_netcdf``) or GDAL's netCDF driver made says
# where it lies only in CF terms: its attribute ``grid_mapping`` names a variable whose
# attributes hold the CRS (``crs_wkt``/``spatial_ref``: WKT) and GDAL's ``GeoTransform`` (six
# numbers: x0, dx, row rotation, y0, column rotation, dy) or, without it (rioxarray's
# ``write_crs`` alone, most CF files), the evenly spaced pixel centres of its x/y coordinate
# variables (read through the view's reader, coords.py). Without tags, ``gdalinfo`` of its TIFF
# showed no CRS and no origin. Served as GeoTIFF tags when the array has none of its own: the
# transform (ModelPixelScale + ModelTiepoint north up, else ModelTransformation) and, from the
# WKT's top-level EPSG code, GTModelType, GTRasterType (area) and ProjectedCSType/GeographicType.
GT_MODEL_TYPE, GT_RASTER_TYPE, GEOGRAPHIC_TYPE, PROJECTED_CS_TYPE = 1024, 1025, 2048, 3072
MODEL_PROJECTED, MODEL_GEOGRAPHIC, RASTER_PIXEL_IS_AREA = 1, 2, 1
_OWN_GEO = ("ModelPixelScaleTag", "ModelTiepointTag", "ModelTransformationTag", "GeoKeyDirectoryTag")
_WKT1_EPSG = re.compile(r'AUTHORITY\[\s*"EPSG"\s*,\s*"?(\d+)"?\s*\]\s*\]\s*$', re.I)
_WKT2_EPSG = re.compile(r'ID\[\s*"EPSG"\s*,\s*(\d+)\s*(?:,[^\[\]]*)?\]\s*\]\s*$', re.I)
_WKT_KIND = {"PROJCS": MODEL_PROJECTED, "PROJCRS": MODEL_PROJECTED, "PROJECTEDCRS": MODEL_PROJECTED,
             "GEOGCS": MODEL_GEOGRAPHIC, "GEOGCRS": MODEL_GEOGRAPHIC, "GEOGRAPHICCRS": MODEL_GEOGRAPHIC}


def grid_mapping_name(ds: Dataset) -> str | None:
    """The variable CF's ``grid_mapping`` attribute names (the first of its extended form
    ``"crs: x y ..."``), or None."""
    a = ds.attributes.get("grid_mapping")
    v = a.value if a is not None else None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if not isinstance(v, str) or not v.strip():
        return None
    name = v.split(":", 1)[0].split()[0].strip() if v.strip() else ""
    return name or None


def _attr_text(obj: Dataset, name: str) -> str | None:
    a = obj.attributes.get(name)
    v = a.value if a is not None else None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return v if isinstance(v, str) and v.strip() else None


def geo_transform(gm: Dataset) -> tuple[float, ...] | None:
    """GDAL's ``GeoTransform`` attribute (text of six numbers, or a list of six), or None."""
    a = gm.attributes.get("GeoTransform")
    v = a.value if a is not None else None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    try:
        nums = [float(x) for x in (v.replace(",", " ").split() if isinstance(v, str) else v)]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return None
    if len(nums) != 6 or not all(math.isfinite(x) for x in nums) or nums[1] == 0 or nums[5] == 0:
        return None
    return tuple(nums)


def wkt_crs(wkt: str | None) -> tuple[int, int | None] | None:
    """(GTModelType, EPSG code or None) of a WKT 1 or 2 CRS; None for another kind (compound,
    engineering...) or no WKT."""
    if wkt is None:
        return None
    text = wkt.strip()
    kind = _WKT_KIND.get(text.split("[", 1)[0].strip().upper())
    if kind is None:
        return None
    m = _WKT1_EPSG.search(text) or _WKT2_EPSG.search(text)
    return kind, (int(m.group(1)) if m and 0 < int(m.group(1)) < 0xFFFF else None)


def _transposed(ds: Dataset) -> bool:
    """Do the dataset's dimension names put x before y (rows along x)? Its GeoTransform,
    GDAL's (columns along x), would then place the image wrongly."""
    names = [str(n).strip().lower() if isinstance(n, str) else "" for n in axis_names(ds, None, "")]
    xs = [i for i, n in enumerate(names) if n in X_NAMES]
    ys = [i for i, n in enumerate(names) if n in Y_NAMES]
    return bool(xs and ys and xs[0] < ys[0])


@dataclass(frozen=True)
class CFGeo:
    """A dataset's CF georeferencing: its grid mapping variable, and the GeoTransform of its
    ``GeoTransform`` attribute, else of its regularly spaced x/y coordinate variables."""

    gm: Dataset
    transform: tuple[float, ...] | None


def cf_geo_tags(ds: Dataset, cf: CFGeo | None) -> tuple[tuple[str, Any], ...]:
    """GeoTIFF tags for ``ds`` from its CF georeferencing (section doc); none when ``ds`` has
    GeoTIFF tags of its own, its rows run along x, or no transform is known."""
    if cf is None or any(n in ds.attributes for n in _OWN_GEO) or _transposed(ds):
        return ()
    gm, gt = cf.gm, cf.transform
    if gt is None:
        return ()
    x0, dx, rx, y0, ry, dy = gt
    out: list[tuple[str, Any]] = []
    if rx == 0 and ry == 0 and dx > 0 and dy < 0:  # north up: what GDAL itself writes
        out.append(("ModelPixelScaleTag", np.array([dx, -dy, 0.0])))
        out.append(("ModelTiepointTag", np.array([0.0, 0.0, 0.0, x0, y0, 0.0])))
    else:
        out.append(("ModelTransformationTag", np.array([dx, rx, 0, x0, ry, dy, 0, y0, 0, 0, 0, 0, 0, 0, 0, 1],
                                                       dtype=np.float64)))
    crs = wkt_crs(_attr_text(gm, "crs_wkt") or _attr_text(gm, "spatial_ref"))
    keys = [(GT_MODEL_TYPE, crs[0] if crs else MODEL_PROJECTED), (GT_RASTER_TYPE, RASTER_PIXEL_IS_AREA)]
    if crs is not None and crs[1] is not None:
        keys.append((PROJECTED_CS_TYPE if crs[0] == MODEL_PROJECTED else GEOGRAPHIC_TYPE, crs[1]))
    if crs is not None:
        directory = [1, 1, 0, len(keys)]
        for key, value in keys:
            directory += [key, 0, 1, value]
        out.append(("GeoKeyDirectoryTag", np.array(directory, dtype=np.uint16)))
    return tuple(out)


def unedited_cf_tags(ds: Dataset, got: dict[str, Any], served: dict[str, Any]) -> set[str]:
    """The georeferencing tags of a file edited in place (``got``: name -> (type, shape, value))
    that only repeat what the view served from ``ds``'s CF georeferencing (``served``, the same
    of the view's own file): ``gdal_edit.py -a_nodata`` of a netCDF variable's file had them
    stored as GeoTIFF attributes of the variable, which then hid later changes of its grid
    mapping. Empty when ``ds`` has GeoTIFF tags of its own or the editor changed any of them
    (then they are all its own now: stored, cf_geo_tags serves no CF one beside them)."""
    if any(n in ds.attributes for n in _OWN_GEO):
        return set()
    names = {n for n in _OWN_GEO if n in got or n in served}
    if any((got[n][2] if n in got else None) != (served[n][2] if n in served else None) for n in names):
        return set()
    return names


def _sibling(model: Any, path: str, name: str) -> Dataset | None:
    """The dataset ``name`` beside ``path`` (CF), else at the root; None when there is none."""
    parent = path.rstrip("/").rsplit("/", 1)[0]
    for where in dict.fromkeys((f"{parent}/{name}", f"/{name}")):
        try:
            obj = model.resolve(where)
        except PolyfsError:
            continue
        if isinstance(obj, Dataset):
            return obj
    return None


def find_cf_geo(model: Any, path: str, ds: Dataset,
                read: Callable[[Dataset], np.ndarray | None] | None = None) -> CFGeo | None:
    """The CF georeferencing of ``ds`` (at ``path`` of ``model``), or None without a grid mapping
    variable. ``read`` gives a small 1-D dataset's values (coordinates; I/O, the caller's)."""
    name = grid_mapping_name(ds)
    gm = _sibling(model, path, name) if name is not None else None
    if gm is None:
        return None
    gt = geo_transform(gm)
    if gt is None and read is not None:
        gt = _coordinate_transform(model, path, ds, read)
    elif gt is not None and read is not None:
        gt = _rows_as_stored(model, path, ds, read, gt)
    return CFGeo(gm, gt)


def _image_axes(ds: Dataset) -> tuple[int, list[str]] | None:
    """The row axis of ``ds``'s image plane and its dimension names, or None (no raster)."""
    r = raster(ds)
    names = [str(n).strip() if isinstance(n, str) else "" for n in axis_names(ds, None, "")]
    if r is None or len(names) != ds.rank:
        return None
    return ds.rank - (3 if r.samples > 1 else 2), names


def _rows_as_stored(model: Any, path: str, ds: Dataset, read: Callable[[Dataset], np.ndarray | None],
                    gt: tuple[float, ...]) -> tuple[float, ...]:
    """GDAL's ``GeoTransform`` attribute describes the picture GDAL's netCDF driver shows, north
    up, while the rows it writes (``WRITE_BOTTOMUP``, its default) run south to north, as the
    ascending y coordinate variable says: the TIFF, which serves the rows as stored, was upside
    down (``gdallocationinfo`` gave the value of the mirrored row). When the y coordinate runs
    against the transform's row step, the transform is turned to the stored rows' order."""
    axes = _image_axes(ds)
    x0, dx, rx, y0, ry, dy = gt
    if axes is None or rx != 0 or ry != 0:
        return gt
    row, names = axes
    cds = _coordinate(model, path, ds, row, names[row], Y_NAMES)
    v = read(cds) if cds is not None else None
    if v is None or v.size < 2 or not np.all(np.isfinite(v.astype(np.float64))) or v[-1] == v[0]:
        return gt
    if (float(v[-1]) > float(v[0])) == (dy > 0):
        return gt
    rows = int(ds.shape.array_shape[row])
    return (x0, dx, 0.0, y0 + dy * rows, 0.0, -dy)


def _coordinate_transform(model: Any, path: str, ds: Dataset,
                          read: Callable[[Dataset], np.ndarray | None]) -> tuple[float, ...] | None:
    """GDAL's GeoTransform from the coordinate variables (pixel centres, as xarray and CF give
    them) of the image plane's dims named y and x, when both are evenly spaced."""
    axes = _image_axes(ds)
    if axes is None:
        return None
    row, names = axes
    spaced = []
    for axis, kinds in ((row + 1, X_NAMES), (row, Y_NAMES)):
        cds = _coordinate(model, path, ds, axis, names[axis], kinds)
        if cds is None:
            return None
        v = read(cds)
        step = _even_step(v)
        if step is None:
            return None
        spaced.append((float(v[0]) - step / 2, step))
    (x0, dx), (y0, dy) = spaced
    return (x0, dx, 0.0, y0, 0.0, dy)


def _coordinate(model: Any, path: str, ds: Dataset, axis: int, name: str, kinds: frozenset[str]) -> Dataset | None:
    """The 1-D coordinate variable of ``ds``'s dim ``axis``: the one its dimension name
    (xarray's) names, else, for a dim without a name there (netCDF-4 names dims by dimension
    scales), the one dimension scale beside it named like an x (or y) axis of that length."""
    n = ds.shape.array_shape[axis]

    def fits(c: Dataset | None, scale: bool) -> bool:
        return c is not None and c.rank == 1 and tuple(c.shape.array_shape) == (n,) and \
            (not scale or _attr_text(c, "CLASS") == "DIMENSION_SCALE")

    if name:
        c = _sibling(model, path, name) if name.lower() in kinds else None
        return c if fits(c, False) else None
    found = [c for c in (_sibling(model, path, k) for k in sorted(kinds)) if fits(c, True)]
    return found[0] if len(found) == 1 else None


def _even_step(v: np.ndarray | None) -> float | None:
    """The spacing of evenly spaced finite values (two at least), else None."""
    if v is None or v.ndim != 1 or v.size < 2 or v.dtype.kind not in "iuf":
        return None
    v = v.astype(np.float64)
    d = np.diff(v)
    step = float(d[0])
    if not np.all(np.isfinite(v)) or step == 0 or not np.allclose(d, step, rtol=1e-6, atol=abs(step) * 1e-6):
        return None
    return step
