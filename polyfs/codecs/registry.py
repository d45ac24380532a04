"""The codec and filter translation table (DESIGN.md section 2) as data.

One :class:`CodecSpec` row per HDF5 filter says how its parameters read and
write in the store's JSON (HSDS filter dicts), which numcodecs codec decodes
it, and how the Zarr v3, N5 and TIFF views spell it, or ``None`` where a view
cannot express it and must transcode. Views never hard-code a codec: they
look it up here.

A filter outside the table is *opaque*: its id, parameters, optional flag and
HDF5 name are carried exactly (stored as HSDS spells a user filter,
``{"class": "H5Z_FILTER_USER", "id": N, "name": ..., "parameters": [...]}``),
so its chunks are kept as they are and the HDF5 view serves them unchanged.
Decoding such chunks is :mod:`polyfs.codecs.opaque`'s business; ``spec_for``
(the ``--codec`` check) still refuses ids polyfs cannot encode by itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import UnknownFilter

DEFLATE, SHUFFLE, FLETCHER32, SZIP, BZIP2, BLOSC, LZ4, ZSTD = 1, 2, 3, 4, 307, 32001, 32004, 32015

BLOSC_CNAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}
BLOSC_CODES = {v: k for k, v in BLOSC_CNAMES.items()}
BLOSC_SHUFFLES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


@dataclass(frozen=True)
class Filter:
    """One HDF5 filter with its client data (``cd_values``), in write order."""

    id: int
    cd_values: tuple[int, ...] = ()
    optional: bool = False
    label: str = field(default="", compare=False)  # the HDF5 filter name (kept for opaque filters)

    @property
    def known(self) -> bool:
        """In the translation table (else opaque: carried, decoded only through HDF5)."""
        return self.id in _BY_ID

    @property
    def spec(self) -> "CodecSpec":
        return _BY_ID.get(self.id) or opaque_spec(self.id, self.label)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def level(self) -> int | None:
        return self.cd_values[0] if self.id in (DEFLATE, ZSTD, BZIP2) and self.cd_values else None

    # blosc's cd_values: [version, version_lz, typesize, bufsize, clevel, shuffle, compcode]
    @property
    def blosc(self) -> dict[str, Any]:
        cd = list(self.cd_values) + [0] * (7 - len(self.cd_values))
        return {"typesize": cd[2], "clevel": cd[4] if len(self.cd_values) > 4 else 5,
                "shuffle": cd[5] if len(self.cd_values) > 5 else 1,
                "cname": BLOSC_CNAMES.get(cd[6] if len(self.cd_values) > 6 else 0, "blosclz")}


def _level(cd: tuple[int, ...], default: int) -> int:
    return int(cd[0]) if cd else default


@dataclass(frozen=True)
class CodecSpec:
    """How one HDF5 filter is spelled by each format (None = not expressible)."""

    id: int
    name: str
    json_class: str
    json_name: str
    numcodec: Callable[[Filter, int], Any]  # (filter, itemsize) -> numcodecs codec
    zarr: Callable[[Filter, int], dict] | None = None  # a Zarr v3 bytes->bytes codec
    n5: Callable[[Filter], dict] | None = None  # N5 "compression" object
    tiff: int | None = None  # TIFF Compression tag value
    json_params: Callable[[Filter], dict] = field(default=lambda f: {})
    compressor: bool = True
    opaque: bool = False  # outside the table: no numcodecs codec, no view spelling


def _nc(name: str, **kw):
    import numcodecs

    return getattr(numcodecs, name)(**kw)


TABLE: tuple[CodecSpec, ...] = (
    CodecSpec(
        DEFLATE, "deflate", "H5Z_FILTER_DEFLATE", "gzip",
        numcodec=lambda f, n: _nc("Zlib", level=_level(f.cd_values, 6)),
        zarr=lambda f, n: {"name": "gzip", "configuration": {"level": _level(f.cd_values, 6)}},
        n5=lambda f: {"type": "gzip", "level": _level(f.cd_values, 6), "useZlib": True},
        tiff=8,
        json_params=lambda f: {"level": _level(f.cd_values, 6)},
    ),
    CodecSpec(
        SHUFFLE, "shuffle", "H5Z_FILTER_SHUFFLE", "shuffle",
        numcodec=lambda f, n: _nc("Shuffle", elementsize=int(f.cd_values[0]) if f.cd_values else n),
        zarr=lambda f, n: {"name": "numcodecs.shuffle",
                           "configuration": {"elementsize": int(f.cd_values[0]) if f.cd_values else n}},
        compressor=False,
    ),
    CodecSpec(
        FLETCHER32, "fletcher32", "H5Z_FILTER_FLETCHER32", "fletcher32",
        numcodec=lambda f, n: _nc("Fletcher32"),
        zarr=lambda f, n: {"name": "numcodecs.fletcher32", "configuration": {}},
        compressor=False,
    ),
    CodecSpec(
        ZSTD, "zstd", "H5Z_FILTER_ZSTD", "zstd",
        numcodec=lambda f, n: _nc("Zstd", level=_level(f.cd_values, 3)),
        zarr=lambda f, n: {"name": "zstd", "configuration": {"level": _level(f.cd_values, 3), "checksum": False}},
        n5=lambda f: {"type": "zstd", "level": _level(f.cd_values, 3)},
        tiff=50000,
        json_params=lambda f: {"level": _level(f.cd_values, 3)},
    ),
    CodecSpec(
        BLOSC, "blosc", "H5Z_FILTER_BLOSC", "blosclz",
        numcodec=lambda f, n: _nc("Blosc", cname=f.blosc["cname"], clevel=f.blosc["clevel"],
                                  shuffle=f.blosc["shuffle"], typesize=f.blosc["typesize"] or n),
        zarr=lambda f, n: {"name": "blosc", "configuration": {
            "cname": f.blosc["cname"], "clevel": f.blosc["clevel"],
            "shuffle": BLOSC_SHUFFLES.get(f.blosc["shuffle"], "shuffle"),
            "typesize": f.blosc["typesize"] or n, "blocksize": 0}},
        n5=lambda f: {"type": "blosc", "cname": f.blosc["cname"], "clevel": f.blosc["clevel"],
                      "shuffle": f.blosc["shuffle"], "blocksize": 0},
        json_params=lambda f: {"parameters": list(f.cd_values)},
    ),
    CodecSpec(
        BZIP2, "bzip2", "H5Z_FILTER_USER", "bzip2",
        numcodec=lambda f, n: _nc("BZ2", level=_level(f.cd_values, 9)),
        zarr=lambda f, n: {"name": "numcodecs.bz2", "configuration": {"level": _level(f.cd_values, 9)}},
        n5=lambda f: {"type": "bzip2", "blockSize": _level(f.cd_values, 9)},
        json_params=lambda f: {"parameters": [_level(f.cd_values, 9)]},
    ),
)


def _no_numcodec(f: Filter, itemsize: int) -> Any:
    raise UnknownFilter(f.id)


def opaque_spec(filter_id: int, label: str = "") -> CodecSpec:
    """The row of a filter outside the table: carried as is, spelled by no view but HDF5.

    Counted as a compressor: its output is not the raw chunk bytes.
    """
    short = label.split(";")[0].strip() if label else ""
    if len(short) > 24:  # "SZ compressor/decompressor for floating-point data." -> "SZ"
        short = short.split()[0]
    name = f"{short or 'filter'} ({filter_id})" if short != str(filter_id) else f"filter {filter_id}"
    return CodecSpec(int(filter_id), name, "H5Z_FILTER_USER", label, numcodec=_no_numcodec, opaque=True)


# HDF5/JSON classes of filters outside the table that may come without an id
JSON_CLASS_IDS = {"H5Z_FILTER_SZIP": SZIP, "H5Z_FILTER_LZF": 32000}

_BY_ID = {s.id: s for s in TABLE}
_BY_NAME = {s.name: s for s in TABLE} | {"gzip": _BY_ID[DEFLATE], "zlib": _BY_ID[DEFLATE],
                                         "bz2": _BY_ID[BZIP2], "blosclz": _BY_ID[BLOSC]}
# HSDS stores every compressor other than deflate as a Blosc frame with that cname.
HSDS_BLOSC_CLASSES = {"H5Z_FILTER_BLOSC": "blosclz", "H5Z_FILTER_LZ4": "lz4", "H5Z_FILTER_LZ4HC": "lz4hc",
                      "H5Z_FILTER_SNAPPY": "snappy"}
# Filters HSDS declares but never applies to the bytes.
HSDS_NOOP_CLASSES = {"H5Z_FILTER_NBIT", "H5Z_FILTER_SCALEOFFSET", "H5Z_FILTER_NONE"}


def spec_for(filter_id: int) -> CodecSpec:
    try:
        return _BY_ID[int(filter_id)]
    except (KeyError, TypeError, ValueError):
        raise UnknownFilter(filter_id) from None


def spec_by_name(name: str) -> CodecSpec:
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise UnknownFilter(name) from None


def filter_to_json(f: Filter) -> dict[str, Any]:
    """The HSDS filter dict for one filter."""
    if not f.known:
        out = {"class": "H5Z_FILTER_USER", "id": int(f.id), "name": f.label,
               "parameters": [int(c) for c in f.cd_values]}
        return out | {"optional": True} if f.optional else out
    s = f.spec
    name = s.json_name
    if f.id == BLOSC:
        cname = f.blosc["cname"]
        name = "gzip" if cname == "zlib" else cname
    out: dict[str, Any] = {"class": s.json_class, "id": s.id, "name": name}
    out.update(s.json_params(f))
    return out


def filter_from_json(obj: Mapping[str, Any], itemsize: int) -> Filter | None:
    """Parse an HSDS/HDF5-JSON filter dict; None for filters HSDS never applies."""
    cls = obj.get("class", "")
    if cls in HSDS_NOOP_CLASSES:
        return None
    fid = obj.get("id")
    if cls in HSDS_BLOSC_CLASSES:
        cname = obj.get("name") if cls == "H5Z_FILTER_BLOSC" else HSDS_BLOSC_CLASSES[cls]
        params = obj.get("parameters")
        if isinstance(params, list) and len(params) >= 7:
            return Filter(BLOSC, tuple(int(p) for p in params))
        cname = "zlib" if cname in ("gzip", "deflate") else (cname or "blosclz")
        level = int(obj.get("level", 5))
        return Filter(BLOSC, (2, 2, itemsize, 0, level, 1, BLOSC_CODES.get(cname, 0)))
    if fid is None:
        by_class = {s.json_class: s for s in TABLE if s.json_class != "H5Z_FILTER_USER"}
        if cls in by_class:
            fid = by_class[cls].id
        elif cls in JSON_CLASS_IDS:
            fid = JSON_CLASS_IDS[cls]
        elif obj.get("name"):
            fid = spec_by_name(str(obj["name"])).id
        else:
            raise UnknownFilter(cls or obj)
    try:
        fid = int(fid)
    except (TypeError, ValueError):
        raise UnknownFilter(fid) from None
    if fid not in _BY_ID:  # opaque: carried exactly
        params = obj.get("parameters")
        cd = tuple(int(p) for p in params) if isinstance(params, list) else ()
        return Filter(fid, cd, bool(obj.get("optional", False)), str(obj.get("name") or ""))
    spec = spec_for(fid)
    if "parameters" in obj and isinstance(obj["parameters"], list):
        cd = tuple(int(p) for p in obj["parameters"])
    elif "level" in obj:
        cd = (int(obj["level"]),)
    elif spec.id == SHUFFLE:
        cd = (itemsize,)
    else:
        cd = ()
    return Filter(spec.id, cd)
