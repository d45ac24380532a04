"""Domain, group, dataset and committed-type objects of the HSDS schema v2.

Each class parses the JSON body HSDS writes and serialises it back. Keys this
module does not interpret are kept in ``extra`` and written back unchanged,
so a round trip through polyfs never loses what HSDS (or a newer HSDS) put
there. Dataset layout: the schema's top-level ``layout`` (always
``H5D_CHUNKED`` with the stored chunk dims, which HSDS 0.9 requires) gives the
chunk shape, ``creationProperties.layout`` (HSDS 1.0.2's copy) the declared
class; either alone is enough to load a dataset. Contiguous and compact
datasets are stored as a single chunk covering the whole shape.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, Callable, Mapping, TypeVar

from ..errors import SchemaError
from . import fillvalue, ids, limits
from .types import DType, Resolver, from_json as type_from_json

UNLIMITED = None  # a maxdims entry with no limit

DEFAULT_ACL = {"create": True, "read": True, "update": True, "delete": True, "readACL": True, "updateACL": True}
PUBLIC_READ_ACL = {"create": False, "read": True, "update": False, "delete": False, "readACL": False, "updateACL": False}


_F = TypeVar("_F", bound=Callable[..., Any])
# what Python raises reading JSON of the wrong shape (a list for an object, a string for a number,
# a number too large for a float, nesting too deep to walk)
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, RecursionError)


def _schema_errors(what: str) -> Callable[[_F], _F]:
    """Make ``from_json`` raise SchemaError (never a bare Python error) for a malformed body."""

    def wrap(fn: _F) -> _F:
        @wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except MALFORMED as exc:
                if isinstance(exc, SchemaError):
                    raise
                name = f" {args[1]}" if what == "domain" and len(args) > 1 else ""
                raise SchemaError(f"{what}{name} is malformed ({type(exc).__name__}: {exc})") from None

        return inner  # type: ignore[return-value]

    return wrap


def now() -> float:
    return time.time()


# --------------------------------------------------------------------------
def _extent(value: Any, what: str) -> int:
    """One extent of a record: a whole number in 0..2**63-1 (what HSDS and numpy hold). A
    record another writer made may say anything; it is refused here, not at every read."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limits.MAX_EXTENT:
        raise SchemaError(f"{what}: {value!r:.40} is not an extent (a whole number in 0..2**63-1)")
    return value


def _extents(values: Any, what: str) -> tuple[int, ...]:
    if not isinstance(values, (list, tuple)):
        raise SchemaError(f"{what}: {values!r:.60} is not a list of extents")
    return tuple(_extent(v, what) for v in values)


@dataclass
class Shape:
    """A dataspace: ``scalar`` (dims ()), ``simple`` or ``null``."""

    kind: str = "simple"
    dims: tuple[int, ...] = ()
    maxdims: tuple[int | None, ...] | None = None

    @classmethod
    def from_json(cls, obj: Any) -> "Shape":
        if obj is None:
            return cls("scalar")
        if isinstance(obj, list):  # a bare list of dims
            return cls("simple", _extents(obj, "shape"))
        kind = obj.get("class", "H5S_SIMPLE")
        if kind == "H5S_SCALAR":
            return cls("scalar")
        if kind == "H5S_NULL":
            return cls("null")
        if kind != "H5S_SIMPLE":
            raise SchemaError(f"unknown dataspace class {kind!r}")
        dims = _extents(obj.get("dims", ()), "shape dims")
        maxdims = None
        if "maxdims" in obj and obj["maxdims"] is not None:
            md = obj["maxdims"]
            if not isinstance(md, (list, tuple)) or len(md) != len(dims):
                raise SchemaError(f"maxdims {md!r:.60} does not match dims {list(dims)}")
            maxdims = tuple(UNLIMITED if (m == "H5S_UNLIMITED" or m == 0 and d != 0) else _extent(m, "shape maxdims")
                            for m, d in zip(md, dims))
            if any(m is not UNLIMITED and m < d for m, d in zip(maxdims, dims)):
                raise SchemaError(f"maxdims {list(md)} are below dims {list(dims)}")
        return cls("simple", dims, maxdims)

    def to_json(self) -> dict[str, Any]:
        if self.kind == "scalar":
            return {"class": "H5S_SCALAR"}
        if self.kind == "null":
            return {"class": "H5S_NULL"}
        out: dict[str, Any] = {"class": "H5S_SIMPLE", "dims": list(self.dims)}
        if self.maxdims is not None:
            out["maxdims"] = ["H5S_UNLIMITED" if m is UNLIMITED else int(m) for m in self.maxdims]
        return out

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        return 0 if self.kind == "null" else math.prod(self.dims)

    @property
    def array_shape(self) -> tuple[int, ...]:
        """The numpy shape of the data (``()`` for scalar)."""
        return () if self.kind != "simple" else self.dims


# --------------------------------------------------------------------------
@dataclass
class Attribute:
    name: str
    type: DType
    shape: Shape
    value: Any  # the JSON value as HSDS stores it
    created: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, name: str, obj: Mapping[str, Any], resolve: Resolver | None = None) -> "Attribute":
        try:
            t = type_from_json(obj["type"], resolve)
            s = Shape.from_json(obj.get("shape"))
        except KeyError as exc:
            raise SchemaError(f"attribute {name!r} lacks {exc}") from None
        extra = {k: v for k, v in obj.items() if k not in ("type", "shape", "value", "created")}
        return cls(name, t, s, obj.get("value"), float(obj.get("created", 0.0)), extra)

    def to_json(self) -> dict[str, Any]:
        out = {"type": self.type.to_json(), "shape": self.shape.to_json(), "value": self.value}
        if self.created:
            out["created"] = self.created
        out.update(self.extra)
        return out


# --------------------------------------------------------------------------
@dataclass
class Link:
    name: str
    kind: str  # hard | soft | external
    id: str | None = None
    h5path: str | None = None
    domain: str | None = None
    created: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    _CLASSES = {"H5L_TYPE_HARD": "hard", "H5L_TYPE_SOFT": "soft", "H5L_TYPE_EXTERNAL": "external"}

    @classmethod
    def from_json(cls, name: str, obj: Mapping[str, Any]) -> "Link":
        kind = cls._CLASSES.get(obj.get("class", ""))
        if kind is None:
            if "id" in obj:
                kind = "hard"
            else:
                raise SchemaError(f"link {name!r} has unknown class {obj.get('class')!r}")
        domain = obj.get("h5domain", obj.get("domain"))
        extra = {k: v for k, v in obj.items() if k not in ("class", "id", "h5path", "h5domain", "domain", "created", "title")}
        if kind == "hard" and not obj.get("id"):
            raise SchemaError(f"hard link {name!r} has no id")
        return cls(name, kind, obj.get("id"), obj.get("h5path"), domain, float(obj.get("created", 0.0)), extra)

    def to_json(self) -> dict[str, Any]:
        cls_name = {v: k for k, v in self._CLASSES.items()}[self.kind]
        out: dict[str, Any] = {"class": cls_name}
        if self.created:
            out["created"] = self.created
        if self.kind == "hard":
            out["id"] = self.id
        else:
            out["h5path"] = self.h5path
        if self.kind == "external":
            out["h5domain"] = self.domain  # the key HSDS 1.0.2 writes
        out.update(self.extra)
        return out


def _attrs_from_json(obj: Mapping[str, Any], resolve: Resolver | None) -> dict[str, Attribute]:
    attrs = obj.get("attributes") or {}
    if not isinstance(attrs, Mapping):
        raise SchemaError("attributes must be an object")
    return {name: Attribute.from_json(name, body, resolve) for name, body in attrs.items()}


def _attrs_to_json(attrs: Mapping[str, Attribute]) -> dict[str, Any]:
    return {name: a.to_json() for name, a in attrs.items()}


# --------------------------------------------------------------------------
@dataclass
class Domain:
    path: str
    owner: str
    acls: dict[str, Any]
    root: str | None = None
    created: float = 0.0
    last_modified: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(cls, path: str, root: str | None, owner: str = "admin") -> "Domain":
        """``root`` None: an HSDS folder."""
        t = now()
        return cls(path, owner, {owner: dict(DEFAULT_ACL), "default": dict(PUBLIC_READ_ACL)}, root, t, t)

    @classmethod
    @_schema_errors("domain")
    def from_json(cls, path: str, obj: Mapping[str, Any]) -> "Domain":
        if not isinstance(obj, Mapping):
            raise SchemaError(f"domain {path}: body is not an object")
        root = obj.get("root")
        if root is not None:
            if not ids.is_root(root):
                raise SchemaError(f"domain {path}: root id {root} breaks the root-id rotation rule")
        extra = {k: v for k, v in obj.items() if k not in ("owner", "acls", "root", "created", "lastModified")}
        return cls(path, obj.get("owner", ""), dict(obj.get("acls") or {}), root,
                   float(obj.get("created", 0.0)), float(obj.get("lastModified", 0.0)), extra)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.root:
            out["root"] = self.root
        out.update({"owner": self.owner, "acls": self.acls, "created": self.created,
                    "lastModified": self.last_modified})
        out.update(self.extra)
        return out


# --------------------------------------------------------------------------
@dataclass
class Group:
    id: str
    root: str
    links: dict[str, Link] = field(default_factory=dict)
    attributes: dict[str, Attribute] = field(default_factory=dict)
    created: float = 0.0
    last_modified: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    @_schema_errors("group")
    def from_json(cls, obj: Mapping[str, Any], resolve: Resolver | None = None) -> "Group":
        gid = obj.get("id")
        ids.parse(gid or "")
        links = {name: Link.from_json(name, body) for name, body in (obj.get("links") or {}).items()}
        extra = {k: v for k, v in obj.items()
                 if k not in ("id", "root", "links", "attributes", "created", "lastModified")}
        return cls(gid, obj.get("root", ids.root_of(gid)), links, _attrs_from_json(obj, resolve),
                   float(obj.get("created", 0.0)), float(obj.get("lastModified", 0.0)), extra)

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "root": self.root, "created": self.created, "lastModified": self.last_modified,
               "links": {n: l.to_json() for n, l in self.links.items()},
               "attributes": _attrs_to_json(self.attributes)}
        out.update(self.extra)
        return out


# --------------------------------------------------------------------------
@dataclass
class Datatype:
    id: str
    root: str
    type: DType
    attributes: dict[str, Attribute] = field(default_factory=dict)
    created: float = 0.0
    last_modified: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    @_schema_errors("datatype")
    def from_json(cls, obj: Mapping[str, Any], resolve: Resolver | None = None) -> "Datatype":
        tid = obj.get("id")
        ids.parse(tid or "")
        extra = {k: v for k, v in obj.items()
                 if k not in ("id", "root", "type", "attributes", "created", "lastModified")}
        return cls(tid, obj.get("root", ids.root_of(tid)), type_from_json(obj["type"], resolve),
                   _attrs_from_json(obj, resolve), float(obj.get("created", 0.0)),
                   float(obj.get("lastModified", 0.0)), extra)

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "root": self.root, "created": self.created, "lastModified": self.last_modified,
               "type": self.type.to_json(), "attributes": _attrs_to_json(self.attributes)}
        out.update(self.extra)
        return out


# --------------------------------------------------------------------------
def _layout_class(layout: Mapping[str, Any]) -> str:
    return str(layout.get("class", "H5D_CHUNKED" if "dims" in layout else "H5D_CONTIGUOUS"))


@dataclass
class Dataset:
    id: str
    root: str
    type: DType
    shape: Shape
    chunks: tuple[int, ...]  # the stored chunk shape (() for scalar)
    layout_class: str = "H5D_CHUNKED"  # as declared (contiguous/compact are one chunk)
    filters: list[dict[str, Any]] = field(default_factory=list)
    fill_value: Any = None  # JSON value, None = type default (zeros)
    attributes: dict[str, Attribute] = field(default_factory=dict)
    creation_properties: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    last_modified: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    @_schema_errors("dataset")
    def from_json(cls, obj: Mapping[str, Any], resolve: Resolver | None = None) -> "Dataset":
        did = obj.get("id")
        ids.parse(did or "")
        try:
            t = type_from_json(obj["type"], resolve)
            shape = Shape.from_json(obj.get("shape"))
        except KeyError as exc:
            raise SchemaError(f"dataset {did} lacks {exc}") from None
        except SchemaError as exc:
            raise SchemaError(f"dataset {did}: {exc}") from None
        cpl = dict(obj.get("creationProperties") or {})
        top, declared = obj.get("layout") or {}, cpl.get("layout") or {}
        layout = top or declared  # the chunk shape HSDS uses (the top-level one when both exist)
        layout_class = _layout_class(declared or top)
        for lay in (top, declared):
            cls_ = _layout_class(lay) if lay else ""
            if cls_ in ("H5D_CONTIGUOUS_REF", "H5D_CHUNKED_REF", "H5D_CHUNKED_REF_INDIRECT"):
                raise SchemaError(f"dataset {did}: layout {cls_} (data in an external HDF5 file) is not supported")
        if shape.kind != "simple":
            chunks = ()
        elif "dims" in layout and _layout_class(layout) == "H5D_CHUNKED":
            chunks = _extents(layout["dims"], f"dataset {did}: chunk dims")
        else:
            chunks = tuple(max(1, d) for d in shape.array_shape)
        if layout_class != "H5D_CHUNKED" and chunks != tuple(max(1, d) for d in shape.array_shape):
            layout_class = "H5D_CHUNKED"  # HSDS chunked a contiguous request: its chunks say so
        if shape.kind == "simple" and len(chunks) != shape.rank:
            raise SchemaError(f"dataset {did}: chunk rank {len(chunks)} != shape rank {shape.rank}")
        if any(c <= 0 for c in chunks):
            raise SchemaError(f"dataset {did}: chunk dims must be positive: {list(chunks)}")
        why = limits.extent_problem(shape.dims, chunks) if shape.kind == "simple" else None
        if why:
            raise SchemaError(f"dataset {did}: {why}")
        filters = cpl.get("filters") or []
        if not isinstance(filters, list) or not all(isinstance(f, Mapping) for f in filters):
            raise SchemaError(f"dataset {did}: filters must be a list of objects, not {filters!r:.80}")
        extra = {k: v for k, v in obj.items()
                 if k not in ("id", "root", "type", "shape", "layout", "creationProperties",
                              "attributes", "created", "lastModified")}
        fill = fillvalue.from_stored(t, cpl, f"dataset {did}")  # base64 bytes (the REST VOL's) or JSON
        return cls(did, obj.get("root", ids.root_of(did)), t, shape, chunks, layout_class,
                   list(filters), fill, _attrs_from_json(obj, resolve),
                   cpl, float(obj.get("created", 0.0)), float(obj.get("lastModified", 0.0)), extra)

    def to_json(self) -> dict[str, Any]:
        cpl = dict(self.creation_properties)
        if self.layout_class == "H5D_CHUNKED":
            cpl["layout"] = {"class": "H5D_CHUNKED", "dims": list(self.chunks)}
        else:
            cpl["layout"] = {"class": self.layout_class}
        if self.filters:
            cpl["filters"] = self.filters
        else:
            cpl.pop("filters", None)
        if self.fill_value is not None:
            cpl["fillValue"] = fillvalue.to_stored(self.type, self.fill_value, cpl)  # as it was spelled
        else:
            cpl.pop("fillValue", None)
            cpl.pop(fillvalue.ENCODING_KEY, None)
        out = {"id": self.id, "root": self.root, "created": self.created, "lastModified": self.last_modified,
               "type": self.type.to_json(), "shape": self.shape.to_json(),
               "attributes": _attrs_to_json(self.attributes), "creationProperties": cpl}
        out.update(self.extra)
        out["layout"] = self.stored_layout()
        return out

    def stored_layout(self) -> dict[str, Any]:
        """The schema's top-level ``layout``: how the chunk objects partition the dataspace
        (HSDS 0.9 reads only this; contiguous and compact data is one chunk of the whole
        shape, a scalar one chunk of one element)."""
        return {"class": "H5D_CHUNKED", "dims": list(self.chunks) if self.chunks else [1]}

    # -- chunk grid ------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.chunks)

    @property
    def grid(self) -> tuple[int, ...]:
        """Number of chunks along each dimension (of the current shape)."""
        dims = self.shape.array_shape
        if not dims:
            return ()
        return tuple(-(-d // c) for d, c in zip(dims, self.chunks))

    @property
    def chunk_nbytes(self) -> int:
        """Decoded size of one full chunk (fixed-size types)."""
        return math.prod(self.chunks) * self.type.itemsize

    @property
    def nchunks(self) -> int:
        return math.prod(self.grid) if self.grid else 1
