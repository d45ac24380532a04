"""netCDF-4 and xarray conventions of the Zarr view.

``xarray.open_zarr(view)`` should give what ``xarray.open_dataset(original)``
gives. xarray reads Zarr v3 by its own rules (``xarray/backends/zarr.py``):
dimensions are ``dimension_names``; the ``_FillValue`` attribute, which
drives CF masking (a v3 array's ``fill_value`` does not), is spelled by
``FillValueCoder``: floats as base64 of a little-endian float64, complex
numbers as two of those, integers and booleans as JSON; every other
attribute is taken as it is. So the view:

- spells ``_FillValue`` of every array that way (any domain: it is CF's name), and
  leaves it out of arrays of any other type (text, fixed-length bytes such as netCDF
  ``char`` variables, variable-length bytes, structured, opaque: xarray fails on any
  value there, for the whole group; the store keeps it);
- in a **netCDF-4 domain** (``_NCProperties`` on the root, or netCDF's
  dimension bookkeeping on a dataset) shows what netCDF-4 shows: the
  dimension-scale and netCDF-internal attributes (:data:`NC_HIDDEN`) are left
  out (``dimension_names`` carry the dimensions), one-element attributes are
  scalars (netCDF attributes are 1-D; netCDF4-python reads one element as a
  scalar), and dimensions without a coordinate variable (netCDF's
  "This is a netCDF dimension but not a netCDF variable" scales) are no arrays;
- leaves out ``_ARRAY_DIMENSIONS`` where ``dimension_names`` come from it;
- in a netCDF-4 domain, shows a variable shorter than an unlimited dimension it uses
  as long as that dimension (:func:`unlimited_shapes`): netCDF reads an unlimited
  dimension as long as its longest variable, and the rest of a shorter one as its fill
  value, which is what a Zarr reader makes of the missing chunks. Variables a Zarr writer
  resized through the view keep their own length (xarray appends one array at a time).

Hidden attributes are kept in the store: a written ``zarr.json`` is compared
with what the view shows (ingest.py), so a rewrite never drops them.
"""
from __future__ import annotations

import base64
import struct
from typing import Any

import numpy as np

from ...errors import PolyfsError, UnsupportedType
from ...model import values
from ...model.schema import UNLIMITED, Dataset, Group
from ...model.tree import DomainModel
from ...views import hdmf
from .spec import HINT_SHAPE

FILL = "_FillValue"
ARRAY_DIMENSIONS = hdmf.ARRAY_DIMENSIONS
# attributes the netCDF-4 library keeps to itself (never listed by ncattrs())
NC_HIDDEN = frozenset({"CLASS", "NAME", "DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Dimid",
                       "_Netcdf4Coordinates", "_NCProperties", "_nc3_strict", "_IsNetcdf4",
                       "_SuperblockVersion"})


def dimension_only(ds: Dataset) -> bool:
    """A netCDF dimension without a coordinate variable (a placeholder dimension scale)."""
    name = hdmf.text_attr(ds, "NAME")
    return bool(name) and name.startswith(hdmf.NETCDF_DIM_ONLY)


def scale_ids(ds: Dataset) -> list[str | None]:
    """The dimension scale attached first to each axis of ``ds`` (from ``DIMENSION_LIST``)."""
    attr = ds.attributes.get("DIMENSION_LIST")
    if attr is None:
        return []
    try:
        arr = values.to_numpy(attr.type, attr.shape, attr.value)
    except (PolyfsError, ValueError, TypeError):
        return []
    out: list[str | None] = []
    for refs in arr.reshape(-1):
        ids = [values.ref_from_json(r) for r in np.asarray(refs, dtype=object).reshape(-1)]
        out.append(next((i for i in ids if i), None))
    return out


def sized_through_zarr(ds: Dataset) -> bool:
    """The dataset has the shape the last ``zarr.json`` written through the view declared."""
    hints = ds.creation_properties.get("polyfs")
    declared = hints.get(HINT_SHAPE) if isinstance(hints, dict) else None
    return ds.shape.kind == "simple" and declared == list(ds.shape.dims)


def unlimited_shapes(model: DomainModel) -> dict[str, tuple[int, ...]]:
    """netCDF's shape of each dataset shorter than an unlimited dimension it uses (by id):
    an unlimited dimension is as long as the longest dataset along it (its scale included).

    Datasets a Zarr writer sized through the view (their stored shape is the one the last
    ``zarr.json`` written declared) take no part (neither lengthen the dimension nor are
    shown longer): Zarr writers resize one array at a time (xarray's ``append_dim`` reads
    each array's length, resizes it and writes past its old end), so an array shown as
    long as the one appended just before would get its records written after a gap of
    fill values. A ``zarr.json`` written back with the shown (longer) shape resizes nothing
    and so keeps the variable shown as before."""
    uses: list[tuple[str, int, str]] = []  # (dataset id, axis, scale id)
    for ds_id, ds in model.datasets.items():
        if ds.shape.kind != "simple" or ds.shape.maxdims is None or sized_through_zarr(ds):
            continue
        if hdmf.text_attr(ds, "CLASS") == "DIMENSION_SCALE":
            if ds.shape.rank == 1 and ds.shape.maxdims[0] is UNLIMITED:
                uses.append((ds_id, 0, ds_id))
            continue
        for axis, scale in enumerate(scale_ids(ds)[:ds.shape.rank]):
            if scale in model.datasets and ds.shape.maxdims[axis] is UNLIMITED:
                uses.append((ds_id, axis, scale))
    length: dict[str, int] = {}
    for ds_id, axis, scale in uses:
        length[scale] = max(length.get(scale, 0), model.datasets[ds_id].shape.dims[axis])
    out: dict[str, tuple[int, ...]] = {}
    for ds_id, axis, scale in uses:
        dims = list(out.get(ds_id, model.datasets[ds_id].shape.dims))
        if dims[axis] < length[scale]:
            dims[axis] = length[scale]
            out[ds_id] = tuple(dims)
    return out


def _b64_float(x: Any) -> str:
    v = float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(x, x)) if isinstance(x, str) else float(x)
    return base64.standard_b64encode(struct.pack("<d", v)).decode("ascii")


def fill_attribute(value: Any, zt: hdmf.ZarrType) -> Any:
    """``_FillValue`` as xarray's FillValueCoder writes it for the array's data type
    (unchanged when the value does not fit: xarray then says why)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    name = zt.data_type if isinstance(zt.data_type, str) else ""
    try:
        if name.startswith("float"):
            return _b64_float(value)
        if name.startswith("complex"):
            parts = [value.get("r", value.get("real")), value.get("i", value.get("imag"))] \
                if isinstance(value, dict) else list(value)
            return [_b64_float(parts[0]), _b64_float(parts[1])]
        if name.startswith(("int", "uint")) and isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
        if name == "bool":
            return bool(value)
    except (TypeError, ValueError, KeyError, IndexError):
        pass
    return value


def xarray_decodes_fill(zt: hdmf.ZarrType) -> bool:
    """Whether xarray's ``FillValueCoder.decode`` reads a ``_FillValue`` of this data type:
    numbers and booleans only (any value of a text, bytes, structured or opaque array raises,
    and so fails ``open_zarr`` of the group it is in; xarray fails so on its own such arrays)."""
    name = zt.data_type if isinstance(zt.data_type, str) else ""
    return name.startswith(("float", "complex", "int", "uint", "bool"))


def _float_b64(x: Any) -> float | None:
    """A float spelled as xarray's FillValueCoder spells it (base64 of a little-endian float64)."""
    if not isinstance(x, str):
        return None
    try:
        raw = base64.b64decode(x, validate=True)
    except ValueError:
        return None
    return struct.unpack("<d", raw)[0] if len(raw) == 8 else None


def decode_fill_attribute(value: Any, data_type: Any) -> Any:
    """The number a ``_FillValue`` written as xarray spells it (:func:`fill_attribute`) stands
    for, so the store (and so ``hdf5/``, which netCDF reads) holds a number, not base64 text;
    any other value is kept as written."""
    name = data_type if isinstance(data_type, str) else ""
    if name.startswith("float"):
        got = _float_b64(value)
        return value if got is None else got
    if name.startswith("complex") and isinstance(value, list) and len(value) == 2:
        parts = [_float_b64(x) for x in value]
        return value if None in parts else parts
    return value


def decode_attributes(attrs: dict[str, Any], data_type: Any) -> dict[str, Any]:
    """An array's attributes with ``_FillValue`` read back from xarray's spelling."""
    if FILL not in attrs:
        return attrs
    return {**attrs, FILL: decode_fill_attribute(attrs[FILL], data_type)}


class Conventions:
    """What the Zarr view shows of one domain's attributes and datasets."""

    def __init__(self, model: DomainModel) -> None:
        self.netcdf = hdmf.is_netcdf(model)
        self._model = model
        self._shapes: dict[str, tuple[int, ...]] | None = None

    def shape(self, ds: Dataset) -> tuple[int, ...] | None:
        """The shape to show for ``ds`` where it is not its own (see :func:`unlimited_shapes`)."""
        if not self.netcdf:
            return None
        if self._shapes is None:
            self._shapes = unlimited_shapes(self._model)
        return self._shapes.get(ds.id)

    def shows(self, ds: Dataset) -> bool:
        return not (self.netcdf and dimension_only(ds))

    def _common(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not self.netcdf:
            return attrs
        out = {}
        for k, v in attrs.items():
            if k in NC_HIDDEN:
                continue
            out[k] = v[0] if isinstance(v, list) and len(v) == 1 else v
        return out

    def group(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return self._common(attrs)

    def array(self, attrs: dict[str, Any], zt: hdmf.ZarrType | None,
              dims_from_attribute: bool) -> dict[str, Any]:
        out = self._common(attrs)
        if FILL in out and zt is not None and not xarray_decodes_fill(zt):
            del out[FILL]  # xarray's FillValueCoder refuses it: open_zarr of the whole group would fail
        elif FILL in out and zt is not None:
            out[FILL] = fill_attribute(out[FILL], zt)
        if dims_from_attribute:
            out.pop(ARRAY_DIMENSIONS, None)
        return out

    def attributes(self, obj: Group | Dataset, attrs: dict[str, Any], dims: list | None) -> dict[str, Any]:
        """The attributes shown for ``obj`` (``attrs``: its attributes as hdmf.py spells them)."""
        if isinstance(obj, Group):
            return self.group(attrs)
        try:
            zt: hdmf.ZarrType | None = hdmf.zarr_type(obj.type)
        except UnsupportedType:  # not shown as an array: nothing to spell
            zt = None
        rank = obj.shape.rank if obj.shape.kind == "simple" else 0
        return self.array(attrs, zt, dims is not None and dims == hdmf.array_dimensions(obj, rank))
