"""HDF5 datatypes as the HDF5/JSON grammar spells them, and their numpy storage.

One table (:data:`_INT_BASES`, :data:`_FLOAT_BASES`) names the predefined
types; every other format's spelling (Zarr, N5, TIFF, HDF5 binary) is derived
from these classes by the views. ``numpy()`` is the dtype of the chunk bytes:
C order, packed fields (HSDS's layout, padded compounds too: the HDF5 view
places their members at the recorded offsets), in the type's byte order; variable-length types are
numpy object arrays whose chunks use the HSDS length-prefixed encoding.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
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
# any size: the grammar's pattern, extended to sizes it has no predefined name for (H5T_STD_I24LE)
_INT_NAME = re.compile(r"H5T_STD_([IUB])(\d+)(LE|BE)$")
_FLOAT_NAME = re.compile(r"H5T_IEEE_F(\d+)(LE|BE)$")
_TIME_NAME = re.compile(r"H5T_UNIX_D(\d+)(LE|BE)$")
EXT = "polyfs"  # the key of polyfs's extensions inside an HDF5/JSON type (bit layouts HSDS has no spelling for)
_NORMS = ("implied", "msbset", "none")  # HDF5's mantissa normalizations (H5T_NORM_* order)


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
    """An HDF5 integer. ``precision``/``offset`` (bits) and ``pad`` (low, high pad bits
    are ones) keep HDF5's exact layout, e.g. 12-bit camera data in 16 bits or a
    3-byte integer; such a type's chunks hold its HDF5 bytes (numpy ``V<size>``)."""

    size: int
    signed: bool
    byteorder: str = "<"
    precision: int | None = None  # None: every bit of ``size``
    offset: int = 0
    pad: tuple[int, int] = (0, 0)
    bitfield: bool = False  # HDF5's bitfield class (PyTables' and pandas' bool): unsigned bits

    @property
    def base(self) -> str:
        letter = "B" if self.bitfield else "I" if self.signed else "U"
        return f"H5T_STD_{letter}{8 * self.size}{_order_suffix(self.byteorder)}"

    @property
    def bits(self) -> int:
        """The number of value bits."""
        return self.precision if self.precision is not None else 8 * self.size

    @property
    def exact(self) -> bool:
        """True when numpy has this type (every bit used, a power-of-two size)."""
        return self.size in (1, 2, 4, 8) and self.precision is None and self.offset == 0 and self.pad == (0, 0)

    def to_json(self) -> Any:
        out: dict[str, Any] = {"class": "H5T_BITFIELD" if self.bitfield else "H5T_INTEGER", "base": self.base}
        if self.precision is not None or self.offset or self.pad != (0, 0):
            out[EXT] = {"precision": self.bits, "offset": self.offset, "pad": list(self.pad)}
        return out

    def numpy(self) -> np.dtype:
        if not self.exact:
            return np.dtype(f"V{self.size}")
        return np.dtype(f"{self.byteorder if self.size > 1 else '|'}{'i' if self.signed else 'u'}{self.size}")

    @property
    def is_numeric(self) -> bool:
        return self.exact

    @property
    def order(self) -> str:
        return self.byteorder if self.size > 1 else "|"

    def with_order(self, order: str) -> "IntType":
        return replace(self, byteorder=order)


@dataclass(frozen=True)
class FloatBits:
    """HDF5's floating-point bit fields (the datatype message's properties)."""

    precision: int
    offset: int
    sign: int  # sign bit location
    exp_location: int
    exp_size: int
    mant_location: int
    mant_size: int
    exp_bias: int
    norm: str = "implied"  # implied | msbset | none
    pad: tuple[int, int, int] = (0, 0, 0)  # low, high, internal pad bits are ones

    def to_json(self) -> dict:
        return {"precision": self.precision, "offset": self.offset, "signLocation": self.sign,
                "exponentLocation": self.exp_location, "exponentSize": self.exp_size,
                "mantissaLocation": self.mant_location, "mantissaSize": self.mant_size,
                "exponentBias": self.exp_bias, "normalization": self.norm, "pad": list(self.pad)}

    @classmethod
    def from_json(cls, obj: Mapping) -> "FloatBits":
        norm = str(obj.get("normalization", "implied"))
        if norm not in _NORMS:
            raise SchemaError(f"unknown mantissa normalization {norm!r}")
        return cls(int(obj["precision"]), int(obj.get("offset", 0)), int(obj["signLocation"]),
                   int(obj["exponentLocation"]), int(obj["exponentSize"]), int(obj["mantissaLocation"]),
                   int(obj["mantissaSize"]), int(obj["exponentBias"]), norm,
                   tuple(int(x) for x in obj.get("pad", (0, 0, 0))))  # type: ignore[arg-type]


# IEEE 754 binary16/32/64/128 as HDF5 describes them
IEEE_BITS = {2: FloatBits(16, 0, 15, 10, 5, 0, 10, 15), 4: FloatBits(32, 0, 31, 23, 8, 0, 23, 127),
             8: FloatBits(64, 0, 63, 52, 11, 0, 52, 1023), 16: FloatBits(128, 0, 127, 112, 15, 0, 112, 16383)}


@dataclass(frozen=True)
class FloatType(DType):
    """An HDF5 float; ``layout`` is set for anything but IEEE 754 binary16/32/64/128
    (x87 long doubles: 80 bits in 16 bytes); numpy ``V<size>`` holds what numpy cannot."""

    size: int
    byteorder: str = "<"
    layout: FloatBits | None = None  # None: IEEE 754 of this size

    @property
    def base(self) -> str:
        return f"H5T_IEEE_F{8 * self.size}{_order_suffix(self.byteorder)}"

    @property
    def bits(self) -> FloatBits:
        if self.layout is not None:
            return self.layout
        if self.size not in IEEE_BITS:
            raise UnsupportedType(f"no IEEE layout for {8 * self.size}-bit floats")
        return IEEE_BITS[self.size]

    @property
    def exact(self) -> bool:
        """True when numpy has this type (IEEE binary16/32/64)."""
        return self.layout is None and self.size in (2, 4, 8)

    def to_json(self) -> Any:
        out: dict[str, Any] = {"class": "H5T_FLOAT", "base": self.base}
        if self.layout is not None:
            out[EXT] = self.layout.to_json()
        return out

    def numpy(self) -> np.dtype:
        return np.dtype(f"{self.byteorder}f{self.size}") if self.exact else np.dtype(f"V{self.size}")

    @property
    def is_numeric(self) -> bool:
        return self.exact

    @property
    def order(self) -> str:
        return self.byteorder

    def with_order(self, order: str) -> "FloatType":
        return replace(self, byteorder=order)


@dataclass(frozen=True)
class TimeType(DType):
    """HDF5's time class (``H5T_UNIX_D32LE``...): kept as its bytes (numpy ``V<size>``);
    values are integers."""

    size: int
    byteorder: str = "<"
    precision: int | None = None  # None: every bit

    @property
    def base(self) -> str:
        return f"H5T_UNIX_D{8 * self.size}{_order_suffix(self.byteorder)}"

    @property
    def bits(self) -> int:
        return self.precision if self.precision is not None else 8 * self.size

    def to_json(self) -> Any:
        out: dict[str, Any] = {"class": "H5T_TIME", "base": self.base}
        if self.precision is not None:
            out[EXT] = {"precision": self.precision}
        return out

    def numpy(self) -> np.dtype:
        return np.dtype(f"V{self.size}")

    @property
    def order(self) -> str:
        return self.byteorder

    def with_order(self, order: str) -> "TimeType":
        return replace(self, byteorder=order)


@dataclass(frozen=True)
class StringType(DType):
    length: int | None  # None: variable length
    charset: str = "ascii"  # ascii | utf8
    pad: str = "nullpad"  # nullterm | nullpad | spacepad
    char_order: str = "<"  # variable length: the byte order HDF5 records for its characters (">" on s390x...)

    def to_json(self) -> Any:
        cset = {v: k for k, v in _CSETS.items()}[self.charset]
        pad = {v: k for k, v in _PADS.items()}[self.pad]
        length = "H5T_VARIABLE" if self.length is None else self.length
        out: dict[str, Any] = {"class": "H5T_STRING", "charSet": cset, "strPad": pad, "length": length}
        if self.char_order == ">":
            out[EXT] = {"charOrder": "BE"}
        return out

    def numpy(self) -> np.dtype:
        return np.dtype(object) if self.length is None else np.dtype(f"S{self.length}")

    @property
    def is_vlen(self) -> bool:
        return self.length is None


@dataclass(frozen=True)
class CompoundType(DType):
    """An HDF5 compound. ``offsets``/``size`` keep HDF5's exact member layout (byte
    offsets, element size) when it is not packed in field order, e.g. C-struct
    alignment as netCDF writes it; None means packed. The HSDS grammar has no
    offsets: they go under the ``"polyfs"`` key, and only for padded compounds (HSDS
    ignores the key). Chunks hold the packed layout, as HSDS reads them (``numpy()``
    is packed in field order); only the HDF5 view places members at ``offsets``
    (``formats/hdf5/dtypes.disk_dtype``), transcoding such chunks."""

    fields: tuple[tuple[str, DType], ...]
    offsets: tuple[int, ...] | None = None  # HDF5 member byte offsets; None: packed
    size: int | None = None  # HDF5 element size; None: packed

    def __post_init__(self) -> None:
        if (self.offsets is None) != (self.size is None):
            raise SchemaError("a compound layout needs both member offsets and size")
        if self.offsets is not None and len(self.offsets) != len(self.fields):
            raise SchemaError(f"compound has {len(self.fields)} members but {len(self.offsets)} offsets")

    @classmethod
    def laid_out(cls, fields: tuple[tuple[str, DType], ...], offsets: tuple[int, ...], size: int,
                 member_sizes: tuple[int, ...]) -> "CompoundType":
        """A compound with members at ``offsets`` in ``size`` bytes; the layout is kept only
        when it differs from packing ``member_sizes`` (HDF5's member sizes) in field order."""
        packed = tuple(int(x) for x in np.cumsum((0,) + tuple(member_sizes))[:-1])
        if tuple(offsets) == packed and size == sum(member_sizes):
            return cls(tuple(fields))
        return cls(tuple(fields), tuple(int(o) for o in offsets), int(size))

    @property
    def padded(self) -> bool:
        return self.offsets is not None

    def to_json(self) -> Any:
        out: dict[str, Any] = {"class": "H5T_COMPOUND",
                               "fields": [{"name": n, "type": t.to_json()} for n, t in self.fields]}
        if self.offsets is not None:
            out[EXT] = {"offsets": list(self.offsets), "size": self.size}
        return out

    def numpy(self) -> np.dtype:
        return np.dtype([(n, t.numpy()) for n, t in self.fields])  # packed, padded or not (HSDS's layout)

    @property
    def is_vlen(self) -> bool:
        return any(t.is_vlen for _, t in self.fields)

    @property
    def order(self) -> str:
        orders = {t.order for _, t in self.fields} - {"|"}
        return orders.pop() if len(orders) == 1 else "|"

    def with_order(self, order: str) -> "CompoundType":
        return CompoundType(tuple((n, t.with_order(order)) for n, t in self.fields), self.offsets, self.size)


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


def is_raw(t: DType) -> bool:
    """True when a fixed-size atomic type has no numpy equivalent: its elements are
    kept as HDF5's bytes (odd-size or partial-precision integers, non-IEEE floats, time)."""
    t = resolved(t)
    if isinstance(t, (IntType, FloatType)):
        return not t.exact
    if isinstance(t, EnumType):
        return is_raw(t.base)
    return isinstance(t, TimeType)


def has_raw(t: DType) -> bool:
    """True when ``t`` holds a raw atomic type (:func:`is_raw`) anywhere."""
    t = resolved(t)
    if is_raw(t):
        return True
    if isinstance(t, CompoundType):
        return any(has_raw(ft) for _, ft in t.fields)
    if isinstance(t, (ArrayType, VlenType)):
        return has_raw(t.base)
    return False


def _named(pattern: re.Pattern, name: str) -> tuple[int, str, str] | None:
    """(size in bytes, byte order, first group) of a generalized predefined name."""
    m = pattern.match(name)
    if m is None:
        return None
    groups = m.groups()
    bits = int(groups[-2])
    if bits % 8 or not bits:
        raise SchemaError(f"type {name!r}: not a whole number of bytes")
    return bits // 8, "<" if groups[-1] == "LE" else ">", groups[0]


def _ext(obj: Mapping) -> Mapping:
    ext = obj.get(EXT) or {}
    if not isinstance(ext, Mapping):
        raise SchemaError(f"{EXT!r} of a type must be an object: {ext!r}")
    return ext


def _int_from_json(obj: Any) -> "IntType":
    base = obj["base"] if isinstance(obj, Mapping) else obj
    if base in _INT_BASES:
        n, sgn, o = _INT_BASES[base]
    else:
        named = _named(_INT_NAME, str(base))
        if named is None:
            raise SchemaError(f"unknown integer type {base!r}")
        n, o, letter = named
        sgn = letter == "I"
    bitfield = str(base).startswith("H5T_STD_B")
    if not isinstance(obj, Mapping) or EXT not in obj:
        return IntType(n, sgn, o, bitfield=bitfield)
    ext = _ext(obj)
    precision = int(ext.get("precision", 8 * n))
    return IntType(n, sgn, o, None if precision == 8 * n else precision, int(ext.get("offset", 0)),
                   tuple(int(x) for x in ext.get("pad", (0, 0))), bitfield)  # type: ignore[arg-type]


def _float_from_json(obj: Any) -> "FloatType":
    base = obj["base"] if isinstance(obj, Mapping) else obj
    if base in _FLOAT_BASES:
        n, o = _FLOAT_BASES[base]
    else:
        named = _named(_FLOAT_NAME, str(base))
        if named is None:
            raise SchemaError(f"unknown float type {base!r}")
        n, o, _ = named
    layout = FloatBits.from_json(_ext(obj)) if isinstance(obj, Mapping) and EXT in obj else None
    if layout is not None and layout == IEEE_BITS.get(n):
        layout = None
    if layout is None and n not in IEEE_BITS:
        raise SchemaError(f"float type {base!r} needs its bit layout ({EXT!r})")
    return FloatType(n, o, layout)


def _time_from_json(obj: Any) -> "TimeType":
    base = obj["base"] if isinstance(obj, Mapping) else obj
    named = _named(_TIME_NAME, str(base))
    if named is None:
        raise SchemaError(f"unknown time type {base!r}")
    n, o, _ = named
    precision = int(_ext(obj).get("precision", 8 * n)) if isinstance(obj, Mapping) else 8 * n
    return TimeType(n, o, None if precision == 8 * n else precision)


Resolver = Callable[[str], DType]


def from_json(obj: Any, resolve: Resolver | None = None) -> DType:
    """Parse an HDF5/JSON type (dict, predefined name, or committed ``t-`` id)."""
    if isinstance(obj, str):
        if _INT_NAME.match(obj):
            return _int_from_json(obj)
        if _FLOAT_NAME.match(obj):
            return _float_from_json(obj)
        if _TIME_NAME.match(obj):
            return _time_from_json(obj)
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
        if cls in ("H5T_INTEGER", "H5T_BITFIELD"):
            return _int_from_json(obj)
        if cls == "H5T_FLOAT":
            return _float_from_json(obj)
        if cls == "H5T_TIME":
            return _time_from_json(obj)
        if cls == "H5T_STRING":
            length = obj.get("length", "H5T_VARIABLE")
            return StringType(
                None if length == "H5T_VARIABLE" else int(length),
                _CSETS.get(obj.get("charSet", "H5T_CSET_ASCII"), "ascii"),
                _PADS.get(obj.get("strPad", "H5T_STR_NULLPAD" if length != "H5T_VARIABLE" else "H5T_STR_NULLTERM"), "nullpad"),
                ">" if _ext(obj).get("charOrder") == "BE" else "<",
            )
        if cls == "H5T_COMPOUND":
            fields = tuple((f["name"], from_json(f["type"], resolve)) for f in obj["fields"])
            ext = _ext(obj)
            if "offsets" not in ext:
                return CompoundType(fields)
            return CompoundType(fields, tuple(int(o) for o in ext["offsets"]), int(ext["size"]))
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
        return _compound_from_numpy(dt, from_numpy)
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
        return _compound_from_numpy(dt, from_numpy_any)
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        return ArrayType(from_numpy_any(base), tuple(shape))
    return from_numpy(dt)


def _compound_from_numpy(dt: np.dtype, member: Callable[[np.dtype], DType]) -> CompoundType:
    """A structured dtype as a compound, its field offsets and itemsize kept when not packed."""
    fields = tuple((n, member(dt.fields[n][0])) for n in dt.names)
    if any(t.is_vlen or has_reference(t) for _, t in fields):
        return CompoundType(fields)  # numpy's object fields say nothing of HDF5's layout
    return CompoundType.laid_out(fields, tuple(dt.fields[n][1] for n in dt.names), dt.itemsize,
                                 tuple(dt.fields[n][0].itemsize for n in dt.names))
