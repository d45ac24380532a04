"""HDF5 datatypes as the HDF5/JSON grammar spells them, and their numpy storage.

One table (:data:`_INT_BASES`, :data:`_FLOAT_BASES`) names the predefined
types; every other format's spelling (Zarr, N5, TIFF, HDF5 binary) is derived
from these classes by the views. ``numpy()`` is the dtype of the chunk bytes:
C order, packed fields, in the type's byte order; variable-length types are
numpy object arrays whose chunks use the HSDS length-prefixed encoding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import SchemaError, UnsupportedType

_INT_BASES = {f"H5T_STD_{'I' if s else 'U'}{8 * n}{o}": (n, s, "<" if o == "LE" else ">")
              for n in (1, 2, 4, 8) for s in (True, False) for o in ("LE", "BE")}
_FLOAT_BASES = {f"H5T_IEEE_F{8 * n}{o}": (n, "<" if o == "LE" else ">")
                for n in (2, 4, 8) for o in ("LE", "BE")}
_CSETS = {"H5T_CSET_ASCII": "ascii", "H5T_CSET_UTF8": "utf8"}
_PADS = {"H5T_STR_NULLTERM": "nullterm", "H5T_STR_NULLPAD": "nullpad", "H5T_STR_SPACEPAD": "spacepad"}
_REFS = {"H5T_STD_REF_OBJ": "object", "H5T_STD_REF_DSETREG": "region"}
REF_ITEMSIZE = 48  # HSDS stores an object reference as "groups/<id>" in S48


def _order_suffix(order: str) -> str:
    return "LE" if order in ("<", "|", "=") else "BE"


class DType:
    """Base of the datatype classes."""

    committed_id: str | None = None

    def to_json(self) -> Any:
        raise NotImplementedError

    def numpy(self) -> np.dtype:
        raise NotImplementedError

    @property
    def itemsize(self) -> int:
        return self.numpy().itemsize

    @property
    def is_vlen(self) -> bool:
        """True when chunks use the variable-length (length-prefixed) encoding."""
        return False

    @property
    def is_numeric(self) -> bool:
        """Integers and floats (and bool): what N5 and TIFF can hold."""
        return False

    @property
    def order(self) -> str:
        """``<`` or ``>`` for types whose bytes have an order, ``|`` otherwise."""
        return "|"

    def with_order(self, order: str) -> "DType":
        return self


@dataclass(frozen=True)
class IntType(DType):
    size: int
    signed: bool
    byteorder: str = "<"

    @property
    def base(self) -> str:
        return f"H5T_STD_{'I' if self.signed else 'U'}{8 * self.size}{_order_suffix(self.byteorder)}"

    def to_json(self) -> Any:
        return {"class": "H5T_INTEGER", "base": self.base}

    def numpy(self) -> np.dtype:
        return np.dtype(f"{self.byteorder if self.size > 1 else '|'}{'i' if self.signed else 'u'}{self.size}")

    @property
    def is_numeric(self) -> bool:
        return True

    @property
    def order(self) -> str:
        return self.byteorder if self.size > 1 else "|"

    def with_order(self, order: str) -> "IntType":
        return IntType(self.size, self.signed, order)


@dataclass(frozen=True)
class FloatType(DType):
    size: int
    byteorder: str = "<"

    @property
    def base(self) -> str:
        return f"H5T_IEEE_F{8 * self.size}{_order_suffix(self.byteorder)}"

    def to_json(self) -> Any:
        return {"class": "H5T_FLOAT", "base": self.base}

    def numpy(self) -> np.dtype:
        return np.dtype(f"{self.byteorder}f{self.size}")

    @property
    def is_numeric(self) -> bool:
        return True

    @property
    def order(self) -> str:
        return self.byteorder

    def with_order(self, order: str) -> "FloatType":
        return FloatType(self.size, order)


@dataclass(frozen=True)
class StringType(DType):
    length: int | None  # None: variable length
    charset: str = "ascii"  # ascii | utf8
    pad: str = "nullpad"  # nullterm | nullpad | spacepad

    def to_json(self) -> Any:
        cset = {v: k for k, v in _CSETS.items()}[self.charset]
        pad = {v: k for k, v in _PADS.items()}[self.pad]
        length = "H5T_VARIABLE" if self.length is None else self.length
        return {"class": "H5T_STRING", "charSet": cset, "strPad": pad, "length": length}

    def numpy(self) -> np.dtype:
        return np.dtype(object) if self.length is None else np.dtype(f"S{self.length}")

    @property
    def is_vlen(self) -> bool:
        return self.length is None


@dataclass(frozen=True)
class CompoundType(DType):
    fields: tuple[tuple[str, DType], ...]

    def to_json(self) -> Any:
        return {"class": "H5T_COMPOUND", "fields": [{"name": n, "type": t.to_json()} for n, t in self.fields]}

    def numpy(self) -> np.dtype:
        return np.dtype([(n, t.numpy()) for n, t in self.fields])

    @property
    def is_vlen(self) -> bool:
        return any(t.is_vlen for _, t in self.fields)

    @property
    def order(self) -> str:
        orders = {t.order for _, t in self.fields} - {"|"}
        return orders.pop() if len(orders) == 1 else "|"

    def with_order(self, order: str) -> "CompoundType":
        return CompoundType(tuple((n, t.with_order(order)) for n, t in self.fields))


@dataclass(frozen=True)
class EnumType(DType):
    base: IntType
    members: tuple[tuple[str, int], ...]

    def to_json(self) -> Any:
        # the HDF5/JSON spelling HSDS reads and writes (a list of members is read too)
        return {"class": "H5T_ENUM", "base": self.base.to_json(), "mapping": dict(self.members)}

    @property
    def is_bool(self) -> bool:
        """h5py's convention: an int8 enum FALSE=0, TRUE=1 is a numpy bool."""
        return (self.base.size == 1 and self.base.signed
                and dict(self.members) == {"FALSE": 0, "TRUE": 1})

    def numpy(self) -> np.dtype:
        return np.dtype(bool) if self.is_bool else self.base.numpy()

    @property
    def is_numeric(self) -> bool:
        return self.is_bool

    @property
    def order(self) -> str:
        return self.base.order

    def with_order(self, order: str) -> "EnumType":
        return EnumType(self.base.with_order(order), self.members)


@dataclass(frozen=True)
class ArrayType(DType):
    base: DType
    dims: tuple[int, ...]

    def to_json(self) -> Any:
        return {"class": "H5T_ARRAY", "base": self.base.to_json(), "dims": list(self.dims)}

    def numpy(self) -> np.dtype:
        return np.dtype((self.base.numpy(), self.dims))

    @property
    def is_vlen(self) -> bool:
        return self.base.is_vlen

    @property
    def order(self) -> str:
        return self.base.order

    def with_order(self, order: str) -> "ArrayType":
        return ArrayType(self.base.with_order(order), self.dims)


@dataclass(frozen=True)
class ReferenceType(DType):
    kind: str = "object"  # object | region

    def to_json(self) -> Any:
        base = {v: k for k, v in _REFS.items()}[self.kind]
        out: dict[str, Any] = {"class": "H5T_REFERENCE", "base": base}
        if self.kind == "object":
            out["length"] = REF_ITEMSIZE
        return out

    def numpy(self) -> np.dtype:
        return np.dtype(object) if self.kind == "region" else np.dtype(f"S{REF_ITEMSIZE}")

    @property
    def is_vlen(self) -> bool:
        return self.kind == "region"


@dataclass(frozen=True)
class OpaqueType(DType):
    size: int
    tag: str = ""

    def to_json(self) -> Any:
        out: dict[str, Any] = {"class": "H5T_OPAQUE", "size": self.size}
        if self.tag:
            out["tag"] = self.tag
        return out

    def numpy(self) -> np.dtype:
        return np.dtype(f"V{self.size}")


@dataclass(frozen=True)
class VlenType(DType):
    base: DType

    def to_json(self) -> Any:
        return {"class": "H5T_VLEN", "base": self.base.to_json(), "size": "H5T_VARIABLE"}

    def numpy(self) -> np.dtype:
        return np.dtype(object)

    @property
    def is_vlen(self) -> bool:
        return True


@dataclass(frozen=True)
class Committed(DType):
    """A type shared through a committed datatype object (``t-...``)."""

    id: str
    type: DType

    def to_json(self) -> Any:
        body = self.type.to_json()
        body = dict(body) if isinstance(body, dict) else {"class": body}
        body["id"] = self.id
        return body

    def numpy(self) -> np.dtype:
        return self.type.numpy()

    @property
    def is_vlen(self) -> bool:
        return self.type.is_vlen

    @property
    def is_numeric(self) -> bool:
        return self.type.is_numeric

    @property
    def order(self) -> str:
        return self.type.order

    @property
    def committed_id(self) -> str | None:  # type: ignore[override]
        return self.id


def resolved(t: DType) -> DType:
    """The type behind a committed-type reference."""
    return t.type if isinstance(t, Committed) else t


def has_reference(t: DType) -> bool:
    """True when an element of ``t`` holds an object or region reference anywhere."""
    t = resolved(t)
    if isinstance(t, ReferenceType):
        return True
    if isinstance(t, CompoundType):
        return any(has_reference(ft) for _, ft in t.fields)
    if isinstance(t, (ArrayType, VlenType)):
        return has_reference(t.base)
    return False


Resolver = Callable[[str], DType]


def from_json(obj: Any, resolve: Resolver | None = None) -> DType:
    """Parse an HDF5/JSON type (dict, predefined name, or committed ``t-`` id)."""
    if isinstance(obj, str):
        if obj in _INT_BASES:
            n, s, o = _INT_BASES[obj]
            return IntType(n, s, o)
        if obj in _FLOAT_BASES:
            n, o = _FLOAT_BASES[obj]
            return FloatType(n, o)
        ref = obj[len("datatypes/"):] if obj.startswith("datatypes/") else obj
        if ref.startswith("t-"):
            if resolve is None:
                raise SchemaError(f"committed type {ref} cannot be resolved here")
            return Committed(ref, resolved(resolve(ref)))
        raise SchemaError(f"unknown predefined type {obj!r}")
    if not isinstance(obj, Mapping) or "class" not in obj:
        raise SchemaError(f"type must be an object with a class: {obj!r}")
    cls = obj["class"]
    if "id" in obj and isinstance(obj["id"], str) and obj["id"].startswith("t-"):
        inner = {k: v for k, v in obj.items() if k != "id"}
        return Committed(obj["id"], from_json(inner, resolve))
    try:
        if cls == "H5T_INTEGER":
            return from_json(obj["base"], resolve)
        if cls == "H5T_FLOAT":
            return from_json(obj["base"], resolve)
        if cls == "H5T_STRING":
            length = obj.get("length", "H5T_VARIABLE")
            return StringType(
                None if length == "H5T_VARIABLE" else int(length),
                _CSETS.get(obj.get("charSet", "H5T_CSET_ASCII"), "ascii"),
                _PADS.get(obj.get("strPad", "H5T_STR_NULLPAD" if length != "H5T_VARIABLE" else "H5T_STR_NULLTERM"), "nullpad"),
            )
        if cls == "H5T_COMPOUND":
            return CompoundType(tuple((f["name"], from_json(f["type"], resolve)) for f in obj["fields"]))
        if cls == "H5T_ENUM":
            base = from_json(obj["base"], resolve)
            if not isinstance(base, IntType):
                raise SchemaError("enum base must be an integer type")
            mapping = obj.get("members", obj.get("mapping"))
            if isinstance(mapping, Mapping):
                members = tuple((str(k), int(v)) for k, v in mapping.items())
            else:
                members = tuple((m["name"], int(m["value"])) for m in mapping)
            return EnumType(base, members)
        if cls == "H5T_ARRAY":
            dims = obj["dims"]
            dims = (dims,) if isinstance(dims, int) else tuple(int(d) for d in dims)
            return ArrayType(from_json(obj["base"], resolve), dims)
        if cls == "H5T_REFERENCE":
            return ReferenceType(_REFS[obj["base"]])
        if cls == "H5T_OPAQUE":
            return OpaqueType(int(obj["size"]), obj.get("tag", ""))
        if cls == "H5T_VLEN":
            return VlenType(from_json(obj["base"], resolve))
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"malformed {cls} type {obj!r}: {exc}") from None
    raise UnsupportedType(f"unsupported type class {cls!r}")


BOOL = EnumType(IntType(1, True), (("FALSE", 0), ("TRUE", 1)))


def from_numpy(dt: np.dtype, charset: str = "ascii") -> DType:
    """The natural HDF5 type of a plain numpy dtype (import of Zarr/N5/TIFF data)."""
    dt = np.dtype(dt)
    if dt.names:
        return CompoundType(tuple((n, from_numpy(dt.fields[n][0])) for n in dt.names))
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return ArrayType(from_numpy(base), tuple(shape))
    order = ">" if dt.byteorder == ">" else "<"
    if dt.kind == "b":
        return BOOL
    if dt.kind in "iu":
        return IntType(dt.itemsize, dt.kind == "i", order)
    if dt.kind == "f" and dt.itemsize in (2, 4, 8):
        return FloatType(dt.itemsize, order)
    if dt.kind == "S":
        return StringType(dt.itemsize, charset, "nullpad")
    if dt.kind == "U":
        return StringType(None, "utf8", "nullterm")
    if dt.kind == "V":
        return OpaqueType(dt.itemsize)
    if dt.kind in "OT":
        return StringType(None, "utf8", "nullterm")
    raise UnsupportedType(f"numpy dtype {dt} has no HDF5 equivalent here")


def from_numpy_any(dt: np.dtype) -> DType:
    """The HDF5 type of a numpy dtype; complex numbers become h5py's ``{r, i}`` compound."""
    dt = np.dtype(dt)
    if dt.kind == "c":
        half = FloatType(dt.itemsize // 2, ">" if dt.byteorder == ">" else "<")
        return CompoundType((("r", half), ("i", half)))
    if dt.names:
        return CompoundType(tuple((n, from_numpy_any(dt.fields[n][0])) for n in dt.names))
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return ArrayType(from_numpy_any(base), tuple(shape))
    return from_numpy(dt)
