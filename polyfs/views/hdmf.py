"""HDF5 semantics in JSON-attribute formats, per the hdmf-zarr conventions.

Zarr and N5 have no links, object references, committed types or
dimension scales; hdmf-zarr (seed ``001``) fixed a spelling for the first
two, which polyfs follows so NWB tools read the view:

- **Attributes** become JSON values: numbers, ``true``/``false`` for bool
  enums, text for strings (fixed-length ones without their padding), a dict
  per compound element (field name -> value), nested lists for arrays,
  base64 text for opaque data. Non-finite floats are written as the strings
  ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (Zarr v3's rule for fill
  values; strict JSON, which tensorstore requires).
- **Object references** are ``{"source": ".", "path": "/a/b"}`` (the path is
  the target's canonical path in the view; a null or dangling reference is
  ``null``). An attribute holding references is wrapped as
  ``{"zarr_dtype": "object", "value": ...}``; a dataset of references is a
  ``string`` array whose elements are that dict as JSON text, with the
  dataset attribute ``zarr_dtype: "object"``.
- **Links** that are not the canonical edge to their target (soft and
  external links, extra hard links; see ``DomainModel.aliases``) are listed
  in the group's ``zarr_link`` attribute: ``{"name", "source", "path"}``
  plus ``"h5_link"`` (``soft``/``hard``/``external``, which hdmf-zarr
  ignores) so a write back can restore the HDF5 link kind. ``source`` is
  ``"."`` inside the domain; for an external link it is the relative path
  from this domain's view root to the target domain's view root (e.g.
  ``../other.zarr``), which resolves inside the mount.
- **Dimension scales** (``CLASS=DIMENSION_SCALE``, ``NAME``,
  ``DIMENSION_LIST``) give Zarr ``dimension_names`` (a scale's NAME, or its
  link name when NAME is netCDF's "This is a netCDF dimension but not a
  netCDF variable" placeholder); without scales, xarray's
  ``_ARRAY_DIMENSIONS`` attribute does. The attributes themselves are kept
  (references mapped as above), except in the Zarr view of a netCDF-4
  domain, which shows what netCDF shows (``formats/zarr/cf.py``).

The Zarr v3 data type of each HDF5 type (what zarr-python 3.1 reads) is
decided here too (:func:`zarr_type`), with its fill value encoding; the
``{r, i}`` compounds complex numbers are stored as are ``complex64`` /
``complex128`` (the same bytes).
"""
from __future__ import annotations

import base64
import json
import logging
import math
import posixpath
from collections import ChainMap
from dataclasses import dataclass
from typing import Any, Callable, Container, Mapping

import numpy as np

from ..errors import PolyfsError, UnsupportedType
from ..model import values
from ..model.jsonattrs import json_of
from ..model.schema import Attribute, Dataset, Group, Link
from ..model.tree import DomainModel, Entry
from ..model.types import (ArrayType, CompoundType, DType, EnumType, FloatType, IntType, OpaqueType,
                           ReferenceType, StringType, VlenType, has_reference, is_raw, resolved)
from .base import DirNode, Node, entry_name_problem, literal_file
from .root import domain_stem

log = logging.getLogger(__name__)

ZARR_LINK = "zarr_link"
ZARR_DTYPE = "zarr_dtype"
RESERVED = (ZARR_LINK, ZARR_DTYPE)
NETCDF_DIM_ONLY = "This is a netCDF dimension but not a netCDF variable"
ARRAY_DIMENSIONS = "_ARRAY_DIMENSIONS"


_HIDDEN_SAID: set[str] = set()  # objects already logged as hidden by their name (bounded below)


def _say_hidden(where: str, why: str) -> None:
    """One log line per object the view cannot show by its name, not one per listing: a
    group's directory is rendered again after every change to its domain (``rm -r``, ``ls``)."""
    if where in _HIDDEN_SAID:
        return
    if len(_HIDDEN_SAID) > 10_000:
        _HIDDEN_SAID.clear()
    _HIDDEN_SAID.add(where)
    log.warning("%s %s; not shown (it is in the hdf5/ view)", where, why)


# -- JSON ---------------------------------------------------------------------------
def json_float(x: float) -> float | str:
    """A float as Zarr v3 JSON: non-finite values as strings."""
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def json_safe(obj: Any) -> Any:
    """Strict JSON (no NaN/Infinity literals) of a JSON-like value."""
    if isinstance(obj, float):
        return json_float(obj)
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return json_safe(obj.item())
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return obj


def dumps(obj: Any) -> bytes:
    """The bytes of a metadata document (strict JSON, UTF-8, indented). Text that is no
    valid Unicode (an HDF5 "UTF-8" string holding other bytes, kept as surrogates) is
    written with ASCII escapes instead, which every JSON reader parses back."""
    safe = json_safe(obj)
    try:
        return (json.dumps(safe, indent=2, allow_nan=False, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(safe, indent=2, allow_nan=False, ensure_ascii=True) + "\n").encode("ascii")


# -- references -----------------------------------------------------------------------
def ref_json(obj_id: str | None, paths: Mapping[str, str]) -> dict | None:
    """hdmf-zarr's reference dict for an object id (None if null or dangling)."""
    if not obj_id or obj_id not in paths:
        return None
    return {"source": ".", "path": paths[obj_id]}


# -- attribute values -------------------------------------------------------------------
def element_json(t: DType, x: Any, paths: Mapping[str, str]) -> Any:
    """One element (as numpy holds it for ``t.numpy()``) as JSON."""
    t = resolved(t)
    if is_raw(t):
        return values.element_to_json(t, x)  # integers, or base64 of a float's HDF5 bytes
    if isinstance(t, EnumType):
        return bool(x) if t.is_bool else int(x)
    if isinstance(t, IntType):
        return int(x)
    if isinstance(t, FloatType):
        return json_float(x)
    if isinstance(t, StringType):
        return values.element_to_json(t, x)
    if isinstance(t, ReferenceType):
        if t.kind != "object":
            return values.element_to_json(t, x)  # region references: HSDS's text, unmapped
        return ref_json(values.ref_from_json(x), paths)
    if isinstance(t, CompoundType):
        return {name: element_json(ft, x[i], paths) for i, (name, ft) in enumerate(t.fields)}
    if isinstance(t, ArrayType):
        arr = np.asarray(x)
        return _nest(arr, arr.ndim, lambda e: element_json(t.base, e, paths))
    if isinstance(t, VlenType):
        return [element_json(t.base, e, paths) for e in np.asarray(x, dtype=object).reshape(-1)]
    if isinstance(t, OpaqueType):
        return base64.b64encode(bytes(x)).decode("ascii")
    raise UnsupportedType(f"no JSON form for type {t}")


def _nest(arr: np.ndarray, depth: int, fn) -> Any:
    if depth == 0:
        return fn(arr[()] if isinstance(arr, np.ndarray) and arr.ndim == 0 else arr)
    return [_nest(arr[i], depth - 1, fn) for i in range(arr.shape[0])]


def attribute_json(attr: Attribute, paths: Mapping[str, str]) -> Any:
    """An HDF5 attribute's value as JSON (references in hdmf-zarr's wrapper)."""
    if attr.shape.kind == "null":
        return None
    arr = values.to_numpy(attr.type, attr.shape, attr.value)
    value = _nest(arr, attr.shape.rank if attr.shape.kind == "simple" else 0,
                  lambda e: element_json(attr.type, e, paths))
    if has_reference(attr.type) and not isinstance(resolved(attr.type), CompoundType):
        return {ZARR_DTYPE: "object", "value": value}
    if isinstance(value, str):
        return json_of(attr, value)  # a JSON value that had no HDF5 type, stored as its text
    return value


def attributes_json(obj: Group | Dataset, paths: Mapping[str, str], where: str,
                    skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """All attributes of an object as one JSON object (a bad one is logged and left out)."""
    out: dict[str, Any] = {}
    for name, attr in obj.attributes.items():
        if name in skip:
            log.warning("%s: attribute %r hides a reserved name; left out of the view", where, name)
            continue
        try:
            out[name] = attribute_json(attr, paths)
        except (PolyfsError, ValueError, TypeError) as exc:
            log.warning("%s: attribute %r cannot be shown (%s)", where, name, exc)
    return out


# -- links -----------------------------------------------------------------------------
def view_root(domain_path: str, suffix: str) -> str:
    """A domain's directory in a view, as an absolute path below the view directory."""
    parts = domain_stem(domain_path)
    if parts:
        parts[-1] += suffix
    return "/" + "/".join(parts)


def external_source(domain_path: str, target_domain: str, suffix: str) -> str:
    """Relative path from this domain's view root to another domain's (HDF5 external
    link file names that are not absolute are relative to the linking file's folder)."""
    here = view_root(domain_path, suffix)
    target = target_domain if target_domain.startswith("/") else \
        posixpath.join(posixpath.dirname(domain_path), target_domain)
    target = posixpath.normpath(target)
    return posixpath.relpath(view_root(target, suffix), here)


def _link_path(group_path: str, h5path: str) -> str:
    if h5path.startswith("/"):
        return posixpath.normpath(h5path)
    return posixpath.normpath(posixpath.join(group_path, h5path))


def links_json(model: DomainModel, group_path: str, links: list[Link], paths: Mapping[str, str],
               suffix: str) -> list[dict[str, Any]]:
    """The ``zarr_link`` records of one group's non-canonical links."""
    out: list[dict[str, Any]] = []
    for link in links:
        if link.kind == "soft":
            out.append({"name": link.name, "source": ".", "path": _link_path(group_path, link.h5path or ""),
                        "h5_link": "soft"})
        elif link.kind == "external":
            out.append({"name": link.name, "source": external_source(model.path, link.domain or "", suffix),
                        "path": _link_path("/", link.h5path or "/"), "h5_link": "external"})
        else:
            target = paths.get(link.id or "")
            if target is None or (link.id or "") in model.datatypes:
                continue  # dangling, or a committed type (not shown in these views)
            out.append({"name": link.name, "source": ".", "path": target, "h5_link": "hard"})
    return out


# -- dimension scales ---------------------------------------------------------------------
def text_attr(obj: Any, name: str) -> str | None:
    attr = obj.attributes.get(name)
    if attr is None:
        return None
    try:
        v = attribute_json(attr, {})
    except (PolyfsError, ValueError, TypeError):
        return None
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    return v if isinstance(v, str) else None


def scale_name(obj: Dataset, path: str) -> str:
    """A dimension scale's dimension name: its NAME, else its link name."""
    name = text_attr(obj, "NAME")
    if name and not name.startswith(NETCDF_DIM_ONLY):
        return name
    return posixpath.basename(path)


def dimension_names(model: DomainModel, ds: Dataset, path: str, paths: Mapping[str, str],
                    gone_of: Callable[[], dict[str, "GoneScale"]] | None = None) -> list[str | None] | None:
    """Zarr ``dimension_names`` from HDF5 dimension scales (None when there are none).
    ``gone_of``: the domain's gone scales, worked out once per model by the caller (else here,
    once per call: a domain walk each)."""
    rank = ds.shape.rank if ds.shape.kind == "simple" else 0
    if rank == 0:
        return None
    if text_attr(ds, "CLASS") == "DIMENSION_SCALE":
        return [scale_name(ds, path)] if rank == 1 else netcdf_dimensions(model, ds, rank, paths)
    attr = ds.attributes.get("DIMENSION_LIST")
    if attr is None:
        return array_dimensions(ds, rank)
    try:
        arr = values.to_numpy(attr.type, attr.shape, attr.value)
    except (PolyfsError, ValueError, TypeError):
        return None
    names: list[str | None] = []
    gone: dict[str, GoneScale] | None = None
    for i in range(rank):
        name = None
        if i < arr.size:
            row = [values.ref_from_json(ref) for ref in np.asarray(arr.reshape(-1)[i], dtype=object).reshape(-1)]
            for target_id in row:
                target = model.datasets.get(target_id or "")
                if target is not None and target_id in paths:
                    name = scale_name(target, paths[target_id])
                    break
            if name is None and _dangling(row, model.datasets):  # its scale was deleted: the name it keeps
                gone = (gone_of() if gone_of is not None else gone_scales(model)) if gone is None else gone
                found = gone.get(gone_key(ds, i, row))
                name = found.name if found is not None else None
        names.append(name)
    xr_names = array_dimensions(ds, rank)  # an axis no scale names (detached): xarray's name, if any
    if xr_names is not None:
        names = [n if n is not None else (x or None) for n, x in zip(names, xr_names)]
    return names if any(n is not None for n in names) else None


NC_MARKS = ("_Netcdf4Dimid", "_Netcdf4Coordinates")


def is_netcdf(model: DomainModel) -> bool:
    """A domain written by netCDF-4 (netCDF4-python, xarray, h5netcdf)."""
    if "_NCProperties" in model.root.attributes:
        return True
    return any(m in ds.attributes for ds in model.datasets.values() for m in NC_MARKS)


def dimension_refs(ds: Dataset) -> list[list[str | None]] | None:
    """Per axis, the scale ids ``ds``'s stored ``DIMENSION_LIST`` names (None: none, or unreadable)."""
    attr = ds.attributes.get("DIMENSION_LIST")
    if attr is None:
        return None
    try:
        arr = values.to_numpy(attr.type, attr.shape, attr.value)
        return [[values.ref_from_json(r) for r in np.asarray(row, dtype=object).reshape(-1)]
                for row in arr.reshape(-1)]
    except (PolyfsError, ValueError, TypeError):
        return None


def _dangling(row: list[str | None], live: Container[str]) -> bool:
    """An axis whose scales are all gone (deleted, or left out of the file; libhdf5 deleting
    one leaves a null reference, stored as such): not one that never had a scale (an empty
    row), nor one with a scale still there."""
    return bool(row) and not any(r in live for r in row if r)


def gone_key(ds: Dataset, axis: int, row: list[str | None]) -> str:
    """What the axes naming one gone scale share: its id; for null references, the netCDF
    dimension id the axis has (``_Netcdf4Coordinates``, unique in a file), else the axis alone."""
    if row[0]:
        return row[0]
    dimids = int_values(ds.attributes.get("_Netcdf4Coordinates"))
    dimid = dimids[axis] if dimids is not None and axis < len(dimids) else None
    return f"null:dimid:{dimid}" if dimid is not None else f"null:{ds.id}:{axis}"


def int_values(attr: Attribute | None) -> list[int] | None:
    """An integer attribute's values, flat (netCDF's ``_Netcdf4Coordinates``, ``_Netcdf4Dimid``);
    None when there is none or it does not read as integers."""
    if attr is None:
        return None
    try:
        return [int(x) for x in np.asarray(attr.value).reshape(-1)]
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class GoneScale:
    """A dimension scale deleted (through ``zarr/``, ``n5/`` or another process) while datasets
    still name it in their stored ``DIMENSION_LIST``: the dimension they keep. ``group``: the
    path of the group of the first of them (where netCDF would have it), ``uses``: (dataset
    id, axis) of each."""

    group: str
    name: str | None
    uses: tuple[tuple[str, int], ...]


def gone_scales(model: DomainModel, live: Container[str] | None = None) -> dict[str, GoneScale]:
    """Gone scale id -> the dimension its datasets keep, read from what is left (nothing is
    rewritten when a scale goes: the store may be changed by HSDS or other processes too).

    The name is, first, one the datasets recorded themselves (``_ARRAY_DIMENSIONS``, which a
    Zarr writer's ``dimension_names`` store); else the link name of the one dataset of the
    group that replaced the scale (made through ``zarr/`` with ``dimension_names`` its own
    name, not a scale, of a length every use fits: zarr-python ``create_array(...,
    overwrite=True)`` deletes, then makes the array again); else netCDF's name for a
    dimension without one, ``phony_dim_<n>`` (unused in the group), in a netCDF-4 domain
    (elsewhere None: the axis is shown detached, unnamed)."""
    live = model.datasets if live is None else live
    uses: dict[str, list[tuple[str, Dataset, int]]] = {}
    groups: dict[str, Group] = {}
    members: dict[str, dict[str, Dataset]] = {}
    for entry in model.walk():
        obj, parent = entry.obj, entry.parent
        if isinstance(obj, Group):
            groups[entry.path] = obj
        if not isinstance(obj, Dataset) or parent is None or obj.id not in live:
            continue
        members.setdefault(parent.path, {})[entry.path.rsplit("/", 1)[1]] = obj
        for axis, row in enumerate(dimension_refs(obj) or []):
            if axis < _rank(obj) and _dangling(row, live):
                uses.setdefault(gone_key(obj, axis, row), []).append((parent.path, obj, axis))
    out: dict[str, GoneScale] = {}
    taken: dict[str, set[str]] = {}
    netcdf = is_netcdf(model)
    for gone_id, refs in uses.items():
        gpath = refs[0][0]
        used = taken.setdefault(gpath, set())
        name = _recorded_name(refs) or _replacement(members.get(gpath, {}), refs, used)
        if name is None and netcdf:
            name = _phony(set(groups[gpath].links) | used)
        if name is not None:
            used.add(name)
        out[gone_id] = GoneScale(gpath, name, tuple((ds.id, axis) for _, ds, axis in refs))
    return out


def dimension_records(model: DomainModel, doomed: Container[str]) -> dict[str, list[str]]:
    """For a write about to delete datasets ``doomed`` (``rm -r`` of a Zarr array, zarr-python
    ``del group[name]``): dataset id -> the dimension names to record as its
    ``_ARRAY_DIMENSIONS``, for each dataset a doomed scale is attached to that records none
    yet. Deleted, a scale takes its name with it; recorded, gone_scales finds it again, and
    the views show it (hidden where DIMENSION_LIST says it)."""
    paths = model.canonical_paths()
    out: dict[str, list[str]] = {}
    gone: list[dict[str, GoneScale]] = []

    def gone_of() -> dict[str, GoneScale]:  # once for all the datasets below
        if not gone:
            gone.append(gone_scales(model))
        return gone[0]

    for oid, path in paths.items():
        ds = model.datasets.get(oid)
        if ds is None or oid in doomed or ARRAY_DIMENSIONS in ds.attributes:
            continue
        if not any(r in doomed for row in dimension_refs(ds) or [] for r in row if r):
            continue
        names = dimension_names(model, ds, path, paths, gone_of)
        if names and all(names):
            out[oid] = [str(n) for n in names]
    return out


def _rank(ds: Dataset) -> int:
    return ds.shape.rank if ds.shape.kind == "simple" else 0


def _recorded_name(refs: list[tuple[str, Dataset, int]]) -> str | None:
    for _, ds, axis in refs:
        names = array_dimensions(ds, _rank(ds))
        if names and names[axis]:
            return names[axis]
    return None


def _replacement(members: dict[str, Dataset], refs: list[tuple[str, Dataset, int]], used: set[str]) -> str | None:
    found = [link for link, ds in members.items()
             if link not in used and _rank(ds) == 1 and array_dimensions(ds, 1) == [link]
             and not any(a in ds.attributes for a in ("CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST"))
             and all(fits(int(d.shape.dims[axis]), ds) for _, d, axis in refs)]
    return found[0] if len(found) == 1 else None


def _phony(names: set[str]) -> str:
    n = 0
    while f"phony_dim_{n}" in names:
        n += 1
    return f"phony_dim_{n}"


def fits(length: int, scale: Dataset) -> bool:
    """An axis of this length can use the scale: its length, or up to it along an unlimited
    dimension (netCDF variables may be shorter than their unlimited dimension)."""
    n = int(scale.shape.dims[0])
    maxdims = scale.shape.maxdims
    return length == n or (length < n and maxdims is not None and maxdims[0] is None)


def netcdf_dimensions(model: DomainModel, ds: Dataset, rank: int,
                      paths: Mapping[str, str]) -> list[str | None] | None:
    """A multidimensional netCDF coordinate variable's dimensions (a scale, so HDF5 gives it no
    DIMENSION_LIST): netCDF-4 lists their ids in ``_Netcdf4Coordinates``, each the
    ``_Netcdf4Dimid`` of a dimension scale (ids are unique in the file)."""
    attr = ds.attributes.get("_Netcdf4Coordinates")
    if attr is None:
        return None
    try:
        dimids = [int(x) for x in np.asarray(attribute_json(attr, {})).reshape(-1)]
    except (PolyfsError, ValueError, TypeError):
        return None
    if len(dimids) != rank:
        return None
    names: dict[int, str] = {}
    for oid, other in model.datasets.items():
        dimid = other.attributes.get("_Netcdf4Dimid")
        if dimid is None or oid not in paths or text_attr(other, "CLASS") != "DIMENSION_SCALE":
            continue
        try:
            names[int(np.asarray(attribute_json(dimid, {})).reshape(-1)[0])] = scale_name(other, paths[oid])
        except (PolyfsError, ValueError, TypeError, IndexError):
            continue
    got = [names.get(d) for d in dimids]
    return got if all(n is not None for n in got) else None


def array_dimensions(ds: Dataset, rank: int) -> list[str | None] | None:
    """xarray's ``_ARRAY_DIMENSIONS`` attribute (Zarr v2 data imported as is), if well formed."""
    attr = ds.attributes.get(ARRAY_DIMENSIONS)
    if attr is None:
        return None
    try:
        v = attribute_json(attr, {})
    except (PolyfsError, ValueError, TypeError):
        return None
    if isinstance(v, str):
        v = [v]
    if isinstance(v, list) and len(v) == rank and all(isinstance(x, str) for x in v):
        return list(v)
    return None


# -- Zarr v3 data types -------------------------------------------------------------------
@dataclass(frozen=True)
class ZarrType:
    """How a dataset's elements look in Zarr v3 (zarr-python 3.1 spellings).

    ``kind``: ``fixed`` (chunk bytes are the array bytes), ``vlen`` (HSDS
    variable-length strings, served through the ``vlen-utf8`` codec, or byte sequences,
    zarr-python's ``variable_length_bytes``, through ``vlen-bytes``: the same framing) or
    ``reference`` (object references, served as JSON text in ``string``).
    ``inner`` are trailing dimensions an HDF5 array type adds to the shape;
    ``stored``/``served`` are the numpy element layouts of the stored bytes
    and of what Zarr decodes (they differ only for structured types with
    big-endian fields or padding: Zarr structured fields are little-endian and
    packed, so a padded compound is served packed, transcoded).
    """

    data_type: Any
    kind: str
    endian: str | None  # "little"/"big" for the bytes codec, None if not a multi-byte scalar
    inner: tuple[int, ...] = ()
    stored: np.dtype | None = None
    served: np.dtype | None = None
    space_padded: bool = False  # fixed strings whose trailing spaces are padding (served as NULs)
    vlen_codec: str = "vlen-utf8"  # the array-to-bytes codec of a ``vlen`` kind

    @property
    def needs_swap(self) -> bool:
        return self.stored is not None and self.served is not None and self.stored != self.served


def _numeric_name(t: DType) -> str | None:
    t = resolved(t)
    if not t.is_numeric and not isinstance(t, EnumType):
        return None  # bit layouts numpy has no type for (odd sizes, partial precision, long double)
    if isinstance(t, EnumType):
        return "bool" if t.is_bool else _numeric_name(t.base)
    if isinstance(t, IntType):
        return f"{'int' if t.signed else 'uint'}{8 * t.size}"
    if isinstance(t, FloatType):
        return f"float{8 * t.size}"
    return None


def _endian(t: DType) -> str | None:
    order = resolved(t).order
    return {"<": "little", ">": "big"}.get(order)


def _field_type(t: DType) -> tuple[Any, np.dtype]:
    """A structured field's Zarr JSON and its little-endian numpy layout."""
    t = resolved(t)
    name = _numeric_name(t)
    if name is not None:
        dt = np.dtype(bool) if name == "bool" else t.numpy().newbyteorder("<")
        return name, dt
    if isinstance(t, StringType) and t.length is not None:
        return {"name": "null_terminated_bytes", "configuration": {"length_bytes": t.length}}, t.numpy()
    if isinstance(t, OpaqueType):
        return {"name": "raw_bytes", "configuration": {"length_bytes": t.size}}, t.numpy()
    if isinstance(t, CompoundType) and complex_name(t) is not None:
        # Zarr's complex field; served as the same bytes, little-endian (the {r, i} layout of them)
        return complex_name(t), np.dtype([(n, ft.numpy().newbyteorder("<")) for n, ft in t.fields])
    if isinstance(t, CompoundType):
        fields = [(n, _field_type(ft)) for n, ft in t.fields]
        return ({"name": "structured", "configuration": {"fields": [[n, j] for n, (j, _) in fields]}},
                np.dtype([(n, dt) for n, (_, dt) in fields]))
    raise UnsupportedType(f"compound field type {type(t).__name__} has no Zarr structured form")


COMPLEX_FIELDS = (("r", "i"), ("real", "imag"))  # h5py's default names, and the other common ones


def complex_name(t: CompoundType) -> str | None:
    """``complex64``/``complex128`` for the ``{r, i}`` compound complex numbers are stored as
    (two floats of one size and byte order: the same bytes as numpy's complex)."""
    names = tuple(n for n, _ in t.fields)
    kinds = [resolved(ft) for _, ft in t.fields]
    if t.offsets is not None or names not in COMPLEX_FIELDS or not all(isinstance(k, FloatType) for k in kinds):
        return None
    a, b = kinds
    if a.size != b.size or a.order != b.order or a.size not in (4, 8):
        return None
    return f"complex{16 * a.size}"


def zarr_type(t: DType) -> ZarrType:
    """The Zarr v3 form of an HDF5 dataset type; UnsupportedType if there is none."""
    t = resolved(t)
    inner: tuple[int, ...] = ()
    if isinstance(t, ArrayType) and not t.is_vlen:
        inner, t = tuple(t.dims), resolved(t.base)
        if isinstance(t, ArrayType):
            raise UnsupportedType("nested array types have no Zarr form")
    name = _numeric_name(t)
    if name is not None:
        size = t.numpy().itemsize
        return ZarrType(name, "fixed", _endian(t) if size > 1 else None, inner)
    if isinstance(t, StringType):
        if t.length is None:
            if inner:
                raise UnsupportedType("arrays of variable-length strings have no Zarr form")
            return ZarrType("string", "vlen", None)
        return ZarrType({"name": "null_terminated_bytes", "configuration": {"length_bytes": t.length}},
                        "fixed", None, inner, space_padded=t.pad == "spacepad")
    if isinstance(t, OpaqueType):
        return ZarrType({"name": "raw_bytes", "configuration": {"length_bytes": t.size}}, "fixed", None, inner)
    if isinstance(t, ReferenceType):
        if t.kind != "object" or inner:
            raise UnsupportedType("region references have no Zarr form")
        return ZarrType("string", "reference", None)
    if isinstance(t, CompoundType):
        cplx = complex_name(t)
        if cplx is not None:
            return ZarrType(cplx, "fixed", _endian(t), inner)
        if t.is_vlen or has_reference(t):
            raise UnsupportedType("compound types with variable-length or reference fields have no Zarr form")
        data_type, served = _field_type(t)
        return ZarrType(data_type, "fixed", None, inner, t.numpy(), served)
    if is_byte_sequence(t) and not inner:
        return ZarrType(VLEN_BYTES, "vlen", None, vlen_codec="vlen-bytes")
    raise UnsupportedType(f"{type(t).__name__} datasets have no Zarr form")


VLEN_BYTES = "variable_length_bytes"


def is_byte_sequence(t: DType) -> bool:
    """A variable-length sequence of unsigned bytes (h5py's ``vlen_dtype(uint8)``,
    zarr-python's ``variable_length_bytes``): its HSDS chunk framing (a 32-bit length, then
    the bytes, per element) is numcodecs' ``vlen-bytes`` past the element count."""
    t = resolved(t)
    if not isinstance(t, VlenType):
        return False
    base = resolved(t.base)
    return isinstance(base, IntType) and base.size == 1 and not base.signed


def zarr_fill(zt: ZarrType, t: DType, fill_json: Any) -> Any:
    """The Zarr v3 ``fill_value`` for a dataset's fill value (JSON as HSDS stores it)."""
    if zt.kind == "reference":
        return ""
    if zt.kind == "vlen" and zt.data_type == VLEN_BYTES:
        raw = b"" if fill_json is None else np.asarray(values.element_from_json(t, fill_json), np.uint8).tobytes()
        return base64.standard_b64encode(raw).decode("ascii")
    if zt.kind == "vlen":
        if fill_json is None:
            return ""
        v = values.element_from_json(t, fill_json)
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    arr = values.fill_array(t, fill_json, ())
    if zt.inner:
        arr = np.asarray(arr).reshape(-1)
        if arr.size and np.any(arr != arr[0]):
            log.warning("array-type fill value %s is not uniform; its first element is used", fill_json)
        arr = arr[0] if arr.size else np.zeros((), dtype=arr.dtype)
    x = np.asarray(arr)[()]
    if zt.data_type == "bool":
        return bool(x)
    if isinstance(zt.data_type, str) and zt.data_type.startswith(("int", "uint")):
        return int(x)
    if isinstance(zt.data_type, str) and zt.data_type.startswith("float"):
        return json_float(float(x))
    if isinstance(zt.data_type, str) and zt.data_type.startswith("complex"):
        return [json_float(float(x[0])), json_float(float(x[1]))]  # Zarr v3: [real, imag]
    # bytes-like types: base64 of the served element bytes
    served = zt.served if zt.served is not None else np.asarray(arr).dtype
    raw = np.asarray(arr).astype(served).tobytes() if zt.served is not None else np.asarray(arr).tobytes()
    return base64.standard_b64encode(raw).decode("ascii")


# -- the canonical tree, as JSON-metadata views see it ----------------------------------
class Hierarchy:
    """A domain's canonical tree as the JSON-metadata views see it (shared with N5)."""

    def __init__(self, model: DomainModel, suffix: str) -> None:
        self.model = model
        self.suffix = suffix
        self.entries = list(model.walk())
        self.paths = {e.obj.id: e.path for e in self.entries}
        self.children: dict[str, list[tuple[str, Entry]]] = {}
        for e in self.entries:
            if e.parent is not None and isinstance(e.obj, (Group, Dataset)):
                self.children.setdefault(e.parent.path, []).append((e.path.rsplit("/", 1)[1], e))
        self.aliases: dict[str, list] = {}
        for gpath, link in model.aliases():
            self.aliases.setdefault(gpath, []).append(link)

    def where(self, path: str) -> str:
        return f"{self.model.path}:{path}"

    # -- the directory tree (one directory per group and array, each with its metadata file) --
    meta_name = ""  # the metadata file of a group or array directory (set by the view)

    def group_metadata(self, group: Group, path: str) -> dict[str, Any] | None:
        """A group's metadata file as JSON; None: hidden (an implicit group)."""
        raise NotImplementedError

    def plan(self, ds: Dataset, path: str) -> Any:
        """The view's plan of one array (``metadata()``, ``file_entries()``); None: not shown."""
        raise NotImplementedError

    def group_node(self, name: str, group: Group, path: str) -> DirNode:
        def load() -> dict[str, Node]:
            meta = self.group_metadata(group, path)
            out: dict[str, Node] = {} if meta is None else {
                self.meta_name: literal_file(self.meta_name, dumps(meta), group.last_modified or None)}
            for child, entry in self.children.get(path, []):
                if child == self.meta_name:
                    _say_hidden(self.where(entry.path), "is named like the view's metadata file")
                    continue
                why = entry_name_problem(child)
                if why:
                    _say_hidden(self.where(entry.path), f"is not a file name: {why}")
                    continue
                node = self.node(child, entry)
                if node is not None:
                    out[child] = node
            return out

        return DirNode(name, load, group.last_modified or None)

    def node(self, name: str, entry: Entry) -> Node | None:
        if isinstance(entry.obj, Group):
            return self.group_node(name, entry.obj, entry.path)
        ds = entry.obj
        assert isinstance(ds, Dataset)
        plan = self.plan(ds, entry.path)
        if plan is None:
            return None

        def load() -> Mapping[str, Node]:
            meta = {self.meta_name: literal_file(self.meta_name, dumps(plan.metadata()), ds.last_modified or None)}
            return ChainMap(meta, plan.file_entries())  # chunk files stay lazy (gridtree.py)

        return DirNode(name, load, ds.last_modified or None)

    def shown_metadata(self, ds: Dataset, path: str) -> bytes:
        """The array's metadata file as this view serves it (what a later writer reads)."""
        plan = self.plan(ds, path)
        if plan is None:
            raise UnsupportedType(f"{self.where(path)} is not shown in this view")
        return dumps(plan.metadata())

    def shown_attributes(self, obj: Group | Dataset, path: str, skip: tuple[str, ...]) -> dict[str, Any]:
        """The user attributes this view shows for ``obj``."""
        return attributes_json(obj, self.paths, self.where(path), skip=skip)

    def group_attributes(self, group: Group, path: str, skip: tuple[str, ...] = RESERVED) -> dict[str, Any]:
        attrs = attributes_json(group, self.paths, self.where(path), skip=skip)
        links = links_json(self.model, path, self.aliases.get(path, []), self.paths, self.suffix)
        if links:
            attrs[ZARR_LINK] = links
        return attrs
