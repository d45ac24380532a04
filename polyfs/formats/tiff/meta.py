"""What a TIFF view says about its pages: axes, pixel sizes, OME-XML.

**Why OME-XML, not ImageJ hyperstack metadata.** ImageJ's own TIFF reader
refuses tiled TIFFs ("ImageJ cannot open tiled TIFFs. Try using the
Bio-Formats plugin") and BigTIFF, so Fiji opens every file of this view
through Bio-Formats, whose native format is OME-TIFF. OME-XML also covers
more: int8/int16/int32/uint32/float64 pixels (ImageJ: uint8, uint16, float32
only) and any order of the T, C, Z axes (``DimensionOrder``), so the pages
can stay in the dataset's C order whatever the axis names are. tifffile,
napari and GDAL read it as well.

**Beyond OME.** A dataset OME cannot describe (64-bit integers, float16, or
more than three leading dimensions, i.e. rank > 5) gets tifffile's "shaped"
JSON description ``{"shape": [...], "axes": "..."}`` instead: tifffile and
napari still see the N-D array; other readers see a plain stack of pages.

**Axes.** The last two dimensions are always Y (rows) and X (columns). The
leading ones are named from, in this order: the dataset attribute
``DIMENSION_LABELS`` (h5py dimension labels), ``_ARRAY_DIMENSIONS`` (xarray),
``axes`` (a string such as ``"tczyx"``, or a list of names or of NGFF axis
objects), or the NGFF ``multiscales`` attribute of the parent group that
lists this dataset. ``t``/``time``/``frame`` -> T, ``c``/``channel`` -> C,
``z``/``depth``/``slice``/``plane`` -> Z (case-insensitive). Unnamed or
unrecognised leading dims take, from the last leading dim backwards, the first
unused of Z, C, T (NGFF's ``t, c, z, y, x`` order: a 3-D array is ZYX, 4-D
CZYX, 5-D TCZYX).

**Channel names.** The OME ``Channel`` elements are named from the attribute
``channel_names`` (what an OME-TIFF written or imported said: DAPI, GFP...), else the
``label`` of each channel of the NGFF ``omero`` metadata of the parent group.

**Pixel sizes.** The first of these that is present and valid is used:

1. NGFF ``multiscales`` on the parent group: the ``scale`` transforms of the
   dataset entry (times the multiscale-level ``scale``, if any), with each
   axis' ``unit``;
2. ``element_size_um`` on the dataset (ilastik/Vigra/BigDataViewer HDF5),
   micrometers;
3. ``scale`` on the dataset (NGFF-style list);
4. ``pixel_size``, then ``resolution`` on the dataset.

Values are listed slowest-first like the dimensions (C order); a list of the
dataset's rank gives one size per dimension, a list of two the (Y, X) sizes,
a list of one per spatial axis (Z, Y, X of a CZYX image) those, a scalar the
size of every spatial axis. Units come from the NGFF axes, else
from a ``unit``/``units`` attribute (one string, or a list per dimension),
else micrometers (``element_size_um`` is always micrometers). The X/Y sizes
also become the TIFF XResolution/YResolution tags (pixels per centimeter)
when their unit is a length; the Z size is OME ``PhysicalSizeZ`` and the T
size ``TimeIncrement``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from ...model.schema import Dataset, Group

LEADING_LETTERS = ("Z", "C", "T")  # default assignment, from the last leading dim backwards
_NAME_TO_LETTER = {
    **{n: "T" for n in ("t", "time", "times", "frame", "frames", "timepoint", "timepoints")},
    **{n: "C" for n in ("c", "ch", "channel", "channels", "wavelength", "lambda")},
    **{n: "Z" for n in ("z", "depth", "slice", "slices", "plane", "planes", "focal")},
    **{n: "Y" for n in ("y", "row", "rows")},
    **{n: "X" for n in ("x", "col", "cols", "column", "columns")},
}
# unit spellings (NGFF/UDUNITS names, symbols) -> (OME symbol, meters or seconds per unit)
_LENGTH_UNITS = {
    "angstrom": ("Å", 1e-10), "å": ("Å", 1e-10),
    "picometer": ("pm", 1e-12), "pm": ("pm", 1e-12),
    "nanometer": ("nm", 1e-9), "nm": ("nm", 1e-9),
    "micrometer": ("µm", 1e-6), "micron": ("µm", 1e-6), "microns": ("µm", 1e-6), "um": ("µm", 1e-6),
    "µm": ("µm", 1e-6), "μm": ("µm", 1e-6),
    "millimeter": ("mm", 1e-3), "mm": ("mm", 1e-3),
    "centimeter": ("cm", 1e-2), "cm": ("cm", 1e-2),
    "meter": ("m", 1.0), "m": ("m", 1.0),
    "kilometer": ("km", 1e3), "km": ("km", 1e3),
    "inch": ("in", 0.0254), "in": ("in", 0.0254),
}
_TIME_UNITS = {
    "nanosecond": ("ns", 1e-9), "ns": ("ns", 1e-9),
    "microsecond": ("µs", 1e-6), "us": ("µs", 1e-6), "µs": ("µs", 1e-6),
    "millisecond": ("ms", 1e-3), "ms": ("ms", 1e-3),
    "second": ("s", 1.0), "s": ("s", 1.0), "sec": ("s", 1.0), "seconds": ("s", 1.0), "msec": ("ms", 1e-3),
    "minute": ("min", 60.0), "min": ("min", 60.0),
    "hour": ("h", 3600.0), "h": ("h", 3600.0),
}
OME_PIXEL_TYPES = {"u1": "uint8", "u2": "uint16", "u4": "uint32", "i1": "int8", "i2": "int16",
                   "i4": "int32", "f4": "float", "f8": "double", "b1": "uint8",
                   "c8": "complex", "c16": "double-complex"}
OME_NS = "http://www.openmicroscopy.org/Schemas/OME/2016-06"


@dataclass(frozen=True)
class Axis:
    letter: str  # T, C, Z, Y, X; Q when unknown (shaped files only)
    size: int
    scale: float | None = None  # physical size of one step
    unit: str | None = None  # OME symbol of ``scale`` (length or time)


@dataclass(frozen=True)
class ImageMeta:
    axes: tuple[Axis, ...]
    kind: str  # "ome" or "shaped"
    description: str
    resolution: tuple[tuple[int, int], tuple[int, int], int]  # XResolution, YResolution, ResolutionUnit


# -- attributes -------------------------------------------------------------
def _attr(obj: Dataset | Group | None, name: str) -> Any:
    """An attribute's JSON value, JSON text decoded; None when absent."""
    if obj is None or name not in obj.attributes:
        return None
    v = obj.attributes[name].value
    if isinstance(v, str) and v[:1] in "[{":
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _texts(v: Any, rank: int) -> list[str | None] | None:
    """Axis names from a string (``"tczyx"``, ``"t,c,z,y,x"``) or a list (of names or NGFF axes)."""
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, str):
        if len(v) == rank and v.isalpha():
            return list(v)
        parts = [p for p in v.replace(",", " ").split() if p]
        return parts if len(parts) == rank else None
    if isinstance(v, (list, tuple)):
        out: list[str | None] = []
        for x in v:
            if isinstance(x, dict):
                out.append(str(x["name"]) if x.get("name") is not None else None)
            elif isinstance(x, bytes):
                out.append(x.decode("utf-8", "replace"))
            elif isinstance(x, str):
                out.append(x)
            else:
                out.append(None)
        return out if len(out) == rank else None
    return None


def _ngff_entry(parent: Group | None, name: str) -> tuple[dict, dict] | None:
    """(multiscale, dataset entry) of an NGFF ``multiscales`` attribute naming ``name``."""
    ms = _attr(parent, "multiscales")
    if ms is None:
        ome = _attr(parent, "ome")
        ms = ome.get("multiscales") if isinstance(ome, dict) else None
    if not isinstance(ms, list):
        return None
    for m in ms:
        if not isinstance(m, dict):
            continue
        for d in m.get("datasets") or ():
            if isinstance(d, dict) and str(d.get("path", "")).strip("/") == name:
                return m, d
    return None


def axis_names(ds: Dataset, parent: Group | None, name: str) -> list[str | None]:
    rank = ds.rank
    for key in ("DIMENSION_LABELS", "_ARRAY_DIMENSIONS", "axes"):
        names = _texts(_attr(ds, key), rank)
        if names is not None and any(names):
            return names
    ngff = _ngff_entry(parent, name)
    if ngff is not None:
        names = _texts(ngff[0].get("axes"), rank)
        if names is not None:
            return names
    return [None] * rank


def assign_letters(names: Sequence[str | None]) -> list[str] | None:
    """One letter per dimension (leading from names or defaults, then Y, X); None if impossible."""
    lead = [(_NAME_TO_LETTER.get((n or "").strip().lower())) for n in names[:-2]]
    lead = [x if x in LEADING_LETTERS else None for x in lead]
    for letter in LEADING_LETTERS:  # a letter claimed twice is claimed by none
        if lead.count(letter) > 1:
            lead = [None if x == letter else x for x in lead]
    free = [x for x in LEADING_LETTERS if x not in lead]
    for i in range(len(lead) - 1, -1, -1):
        if lead[i] is None:
            if not free:
                return None
            lead[i] = free.pop(0)
    return [*lead, "Y", "X"]  # type: ignore[list-item]


# -- physical sizes -----------------------------------------------------------
def _numbers(v: Any) -> list[float] | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [float(v)]
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return [float(x) for x in v]
    return None


def _per_dim(values: list[Any], rank: int, spatial: list[bool]) -> list[Any] | None:
    """Values of some dims spread over all ``rank`` (None where none is given): one per dim, the
    (Y, X) pair, one per spatial dim in order (Z, Y, X of a TCZYX image), or one for every
    spatial dim."""
    if len(values) == rank:
        return list(values)
    if len(values) == 2:
        return [None] * (rank - 2) + list(values)
    if len(values) == sum(spatial) and len(values) > 1:
        it = iter(values)
        return [next(it) if s else None for s in spatial]
    if len(values) == 1:
        return [values[0] if s else None for s in spatial]
    return None


def _tiff_resolution(ds: Dataset, letters: Sequence[str]) -> tuple[list[float | None], list[str | None]] | None:
    """``resolution`` as TIFF tags give it (pixels per ``resolution_unit``, X then Y) as the
    sizes of the last two dimensions; None without a physical unit. An ImageJ file's tags say
    no unit (ResolutionUnit 1): its unit is ImageJ's ``unit`` (``imagej_unit``), and its
    ``spacing`` the Z size."""
    rank = len(letters)
    vals = _numbers(_attr(ds, "resolution"))
    unit = _attr(ds, "resolution_unit")
    if vals is None or len(vals) != 2 or rank < 2 or not isinstance(unit, str):
        return None
    unit = unit.strip().lower()
    imagej = _imagej_unit(ds) if unit == "none" else None
    if imagej is not None:
        unit = imagej
    if unit not in _LENGTH_UNITS or any(not math.isfinite(v) or v <= 0 for v in vals):
        return None  # "none": pixels have no physical size
    x, y = vals
    sizes: list[float | None] = [None] * (rank - 2) + [1.0 / y, 1.0 / x]
    spacing = _numbers(_attr(ds, "imagej_spacing")) if imagej is not None else None
    if spacing is not None and len(spacing) == 1 and "Z" in letters[:-2]:
        sizes[list(letters).index("Z")] = spacing[0]
    return sizes, [unit] * rank


def _imagej_unit(ds: Dataset) -> str | None:
    """ImageJ's length unit (``imagej_unit``: ``micron``, ``um``, ``\\u00B5m`` as Fiji escapes it)."""
    u = _attr(ds, "imagej_unit")
    if not isinstance(u, str):
        return None
    if "\\u" in u:
        try:
            u = u.encode("ascii").decode("unicode_escape")
        except (UnicodeError, ValueError):
            return None
    u = u.strip().lower()
    return u if u in _LENGTH_UNITS else None


def _units(v: Any, rank: int, spatial: list[bool] | None = None) -> list[str | None]:
    """One unit per dim from one string or a list (one per dim, or spread like the sizes)."""
    if isinstance(v, str):
        return [v] * rank
    if isinstance(v, (list, tuple)):
        spread = _per_dim(list(v), rank, spatial) if spatial is not None else (list(v) if len(v) == rank else None)
        if spread is not None:
            return [x if isinstance(x, str) else None for x in spread]
    return [None] * rank


def physical_sizes(ds: Dataset, parent: Group | None, name: str,
                   letters: Sequence[str]) -> list[tuple[float, str] | None]:
    """(size, OME unit symbol) per dimension of the image (``letters``: the dataset's dims, or
    all but a last samples dim) where known."""
    rank = len(letters)
    spatial = [x in ("Z", "Y", "X") for x in letters]
    sizes: list[float | None] | None = None
    units: list[str | None] = [None] * rank
    ngff = _ngff_entry(parent, name)
    if ngff is not None:
        ms, entry = ngff
        scale = [1.0] * rank
        found = False
        for transforms in (entry.get("coordinateTransformations"), ms.get("coordinateTransformations")):
            for t in transforms or ():
                if isinstance(t, dict) and t.get("type") == "scale":
                    vals = _numbers(t.get("scale"))
                    if vals is not None and len(vals) == rank:
                        scale = [a * b for a, b in zip(scale, vals)]
                        found = True
        if found:
            sizes = scale
            axes = ms.get("axes") or ()
            units = [a.get("unit") if isinstance(a, dict) else None for a in axes] if len(axes) == rank else units
    default_unit = "micrometer"
    if sizes is None:
        for key in ("element_size_um", "scale", "pixel_size", "resolution"):
            if key == "resolution" and _attr(ds, "resolution_unit") is not None:
                found_tiff = _tiff_resolution(ds, letters)  # the TIFF importer's pixels per unit
                if found_tiff is not None:
                    sizes, units = found_tiff
                break
            vals = _numbers(_attr(ds, key))
            if vals is None:
                continue
            sizes = _per_dim(vals, rank, spatial)
            if sizes is not None:
                if key != "element_size_um":
                    u = _attr(ds, "unit")
                    units = _units(u if u is not None else _attr(ds, "units"), rank, spatial)
                break
    step = _time_increment(ds)
    if step is not None and "T" in letters and (sizes is None or sizes[list(letters).index("T")] is None):
        at = list(letters).index("T")  # a time-lapse OME-TIFF's frame interval (written or imported)
        sizes, units = list(sizes) if sizes is not None else [None] * rank, list(units)
        sizes[at], units[at] = step
    if sizes is None:
        return [None] * rank
    out: list[tuple[float, str] | None] = []
    for s, u, letter in zip(sizes, units, letters):
        if s is None or not math.isfinite(s) or s <= 0:
            out.append(None)
            continue
        key = (u or ("second" if letter == "T" else default_unit)).strip().lower()
        table = _TIME_UNITS if letter == "T" else _LENGTH_UNITS
        if letter == "C" or key not in table:
            out.append(None)
            continue
        out.append((float(s), table[key][0]))
    return out


def _time_increment(ds: Dataset) -> tuple[float, str] | None:
    """(interval, unit) of the attributes ``time_increment`` and ``time_increment_unit`` (seconds
    when absent) the TIFF importer keeps from an OME-TIFF's ``TimeIncrement``, else of an ImageJ
    hyperstack's ``finterval`` and ``tunit`` (``imagej_finterval``, ``imagej_tunit``)."""
    for key, unit_key in (("time_increment", "time_increment_unit"), ("imagej_finterval", "imagej_tunit")):
        v = _attr(ds, key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            unit = _attr(ds, unit_key)
            return float(v), unit if isinstance(unit, str) and unit else "s"
    return None


def _per_cm(size: float, unit: str) -> float:
    meters = next(m for sym, m in _LENGTH_UNITS.values() if sym == unit)
    return 0.01 / (size * meters)


def _rational(x: float) -> tuple[int, int]:
    f = Fraction(x).limit_denominator(1 << 20)
    while f.numerator >= 1 << 32 or f.denominator >= 1 << 32:
        f = Fraction(f.numerator >> 1, max(1, f.denominator >> 1))
    if f.numerator == 0:
        f = Fraction(1, (1 << 32) - 1)
    return f.numerator, f.denominator


def resolution_tags(axes: Sequence[Axis]) -> tuple[tuple[int, int], tuple[int, int], int]:
    """XResolution, YResolution and ResolutionUnit: pixels per inch (2) for sizes in inches (a
    300 dpi scan stays 300 dpi, not 118.11 per cm), else per cm (3); 1 (none) when unknown."""
    ax = {a.letter: a for a in axes}
    y, x = ax.get("Y"), ax.get("X")
    if x and y and x.scale and y.scale and x.unit == y.unit == "in":
        return _rational(1.0 / x.scale), _rational(1.0 / y.scale), 2
    if x and y and x.scale and y.scale and x.unit in _SYMBOLS_LENGTH and y.unit in _SYMBOLS_LENGTH:
        return _rational(_per_cm(x.scale, x.unit)), _rational(_per_cm(y.scale, y.unit)), 3
    return (1, 1), (1, 1), 1


_SYMBOLS_LENGTH = {sym for sym, _ in _LENGTH_UNITS.values()}


# -- descriptions -------------------------------------------------------------
def _xml_num(x: float) -> str:
    return repr(float(x))


def _xml_unit(sym: str) -> str:
    return sym.encode("ascii", "xmlcharrefreplace").decode("ascii")


def channel_names(ds: Dataset, parent: Group | None, name: str, size: int) -> list[str] | None:
    """Names of the ``size`` channels of the C axis: the attribute ``channel_names`` (an
    OME-TIFF's ``Channel Name``, kept by import and writes), else the ``label`` of each channel
    of the NGFF ``omero`` metadata of a parent group whose ``multiscales`` lists the dataset."""
    names = _channel_texts(_attr(ds, "channel_names"), size)
    if names is not None or _ngff_entry(parent, name) is None:
        return names
    omero = _attr(parent, "omero")
    if omero is None:
        ome = _attr(parent, "ome")
        omero = ome.get("omero") if isinstance(ome, dict) else None
    chans = omero.get("channels") if isinstance(omero, dict) else None
    if not isinstance(chans, list):
        return None
    return _channel_texts([c.get("label") if isinstance(c, dict) else None for c in chans], size)


def _channel_texts(v: Any, size: int) -> list[str] | None:
    """``size`` names (None/absent ones empty), or None unless one is given at least."""
    if isinstance(v, str) and size == 1:
        v = [v]
    if not isinstance(v, (list, tuple)) or len(v) != size:
        return None
    out = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x if isinstance(x, str) else "" for x in v]
    return out if any(out) else None


def ome_xml(name: str | None, axes: Sequence[Axis], dtype: np.dtype, channels: Sequence[str] | None = None,
            description: str | None = None, bits: int | None = None) -> str:
    """OME-XML (2016-06) for one image whose planes are the file's IFDs in C order; ``name``: the
    image's (none: no Name, which is optional); ``channels``: the C axis's channel names;
    ``description``: the image's ``Description``."""
    lead = [a for a in axes[:-2]]
    by = {a.letter: a for a in axes}
    order = "XY" + "".join(a.letter for a in reversed(lead))
    order += "".join(x for x in "ZCT" if x not in order)
    sizes = {x: (by[x].size if x in by else 1) for x in "XYZCT"}
    ptype = "bit" if bits == 1 else OME_PIXEL_TYPES[dtype.kind + str(dtype.itemsize)]  # 1-bit: raster.py
    attrs = [f'ID="Pixels:0" DimensionOrder="{order}" Type="{ptype}"',
             " ".join(f'Size{x}="{sizes[x]}"' for x in "XYZCT"),
             f'BigEndian="{"true" if dtype.byteorder == ">" else "false"}" Interleaved="false"'
             f' SignificantBits="{bits or 8 * dtype.itemsize}"']
    for x in "XYZ":
        a = by.get(x)
        if a is not None and a.scale:
            attrs.append(f'PhysicalSize{x}="{_xml_num(a.scale)}" PhysicalSize{x}Unit="{_xml_unit(a.unit or "µm")}"')
    t = by.get("T")
    if t is not None and t.scale:
        attrs.append(f'TimeIncrement="{_xml_num(t.scale)}" TimeIncrementUnit="{_xml_unit(t.unit or "s")}"')
    nplanes = sizes["Z"] * sizes["C"] * sizes["T"]
    named = channels if channels is not None and len(channels) == sizes["C"] else [""] * sizes["C"]
    chans = "".join(f'<Channel ID="Channel:0:{c}"{f" Name={quoteattr(n)}" if n else ""} SamplesPerPixel="1">'
                    f'<LightPath/></Channel>' for c, n in enumerate(named))
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<OME xmlns="{OME_NS}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        f'xsi:schemaLocation="{OME_NS} {OME_NS}/ome.xsd" Creator="polyfs">'
        f'<Image ID="Image:0"{f" Name={quoteattr(name)}" if name else ""}>'
        f'{f"<Description>{escape(description)}</Description>" if description else ""}'
        f'<Pixels {" ".join(attrs)}>{chans}<TiffData IFD="0" PlaneCount="{nplanes}"/></Pixels>'
        "</Image></OME>"
    )


def shaped_json(axes: Sequence[Axis], name: str | None = None) -> str:
    """tifffile's shaped description; ``name``: the series name (tifffile reads it back)."""
    letters = "".join(a.letter for a in axes)
    meta: dict[str, Any] = {"shape": [a.size for a in axes]}
    if len(set(letters.replace("Q", ""))) == len(letters.replace("Q", "")):
        meta["axes"] = letters
    if name:
        meta["name"] = name
    return json.dumps(meta)


def image_name(ds: Dataset) -> str | None:
    """The dataset's ``name`` attribute (the series name an OME-TIFF or tifffile file was written
    with, kept by import and writes): served back, so a copy of the view's file keeps it. A
    dataset without one has no image name (not its path: a copy would store that as its ``name``)."""
    return _xml_text(ds, "name")


def _xml_text(ds: Dataset, key: str) -> str | None:
    """A text attribute the view's description can hold (none that is not text, or is empty)."""
    v = ds.attributes[key].value if key in ds.attributes else None
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if not isinstance(v, str) or not v.strip() or any(ord(c) < 32 and c not in "\t\n\r" for c in v):
        return None  # NUL would end the tag's text, other control characters are no XML
    return v


def describe(ds: Dataset, parent: Group | None, name: str, title: str, dtype: np.dtype,
             samples: int = 1, planes: int = 1, bits: int | None = None) -> ImageMeta:
    """Axes, pixel sizes and the first page's ImageDescription of one dataset. An image of
    several samples per pixel (the dataset's last dim) gets tifffile's shaped description
    with axes ``...YXS`` (what tifffile writes for RGB), its pixel sizes those of the rest;
    one of samples in separate planes (``planes``, the third-last dim) ``...SYX``. The image is
    named by the dataset's ``name`` attribute (image_name), never by ``title``, its path; an OME
    one is described by its ``image_description``."""
    dims = ds.shape.array_shape
    if samples > 1:
        dims = dims[:-1]
    names = axis_names(ds, parent, name)[:len(dims)]
    letters = assign_letters(names)
    ome_ok = letters is not None and (dtype.kind + str(dtype.itemsize)) in OME_PIXEL_TYPES and samples == 1 \
        and planes == 1
    if letters is None:
        letters = ["Q"] * (len(dims) - 2) + ["Y", "X"]
    if planes > 1:
        letters = [("Q" if x == "S" else x) for x in letters[:-3]] + ["S", "Y", "X"]
    phys = physical_sizes(ds, parent, name, letters)
    axes = tuple(Axis(letter, int(n), p[0] if p else None, p[1] if p else None)
                 for letter, n, p in zip(letters, dims, phys))
    own = image_name(ds)
    if samples > 1:
        return ImageMeta(axes, "shaped", shaped_json((*axes, Axis("S", samples)), own), resolution_tags(axes))
    if planes > 1:
        return ImageMeta(axes, "shaped", shaped_json(axes, own), resolution_tags(axes))
    if ome_ok:
        c = next((a.size for a in axes if a.letter == "C"), 1)
        names = channel_names(ds, parent, name, c)
        return ImageMeta(axes, "ome", ome_xml(own, axes, dtype, names, _xml_text(ds, "image_description"), bits),
                         resolution_tags(axes))
    return ImageMeta(axes, "shaped", shaped_json(axes, own), resolution_tags(axes))
