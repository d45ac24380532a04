"""Dimension scales the HDF5 view shows for xarray's ``_ARRAY_DIMENSIONS``.

Data written through ``zarr/`` by xarray (``dimension_names``, stored as each
dataset's ``_ARRAY_DIMENSIONS`` attribute) has named dimensions but no HDF5
dimension scales, so netCDF readers of ``hdf5/`` would see ``phony_dim_N``. For a
domain holding no dimension scale of its own (no dataset with ``CLASS``,
``DIMENSION_LIST`` or ``REFERENCE_LIST``: no scale is made beside real ones; an array
added to a netCDF-4 file is attached to its scales, below),
the view shows the attributes netCDF-4 (through libhdf5's H5DS) writes, in the
form ``polyfs import`` stores a netCDF-4 file's scales:

- a 1-D dataset of a group whose link name is a dimension name used in that group,
  whose length is that dimension's extent (every array of the group agrees on it) and
  whose own ``_ARRAY_DIMENSIONS`` (if any) is that name, is the dimension's scale:
  ``CLASS="DIMENSION_SCALE"``, ``NAME=<name>`` and, if anything is attached to it,
  ``REFERENCE_LIST`` ({dataset: object reference, dimension: uint32} per attachment);
- a dimension without such a dataset (no link of its name in the group) gets netCDF's
  dimension-only dataset: a link of its name to a 1-D big-endian float32 dataset of
  its length with no data, ``CLASS``, ``NAME="This is a netCDF dimension but not a
  netCDF variable.%10d"`` and ``REFERENCE_LIST`` (what netCDF-C writes; netCDF readers
  show the dimension and no variable). It exists only in this view (``dim_only``);
- a dataset each of whose dimensions has a scale gets ``DIMENSION_LIST`` (one sequence
  of one reference per dimension). A dataset with an unnamed dimension or one whose
  name has conflicting lengths gets none, and is attached to no scale: netCDF-C,
  netCDF4-python and h5netcdf all refuse a variable whose DIMENSION_LIST names some
  axes and not others ("mixing of labeled and unlabeled dimensions"), while one without
  it reads with phony dimensions (netCDF-C reuses a dimension of the same length);
- ``_ARRAY_DIMENSIONS`` is hidden where these attributes say the same (datasets with a
  DIMENSION_LIST, scales), as a netCDF-4 file has no such attribute; it stays stored.

In a domain with scales of its own (a netCDF-4 file), an array added through ``zarr/``
(xarray ``to_zarr(mode="a")``) names its dimensions only in ``_ARRAY_DIMENSIONS``: it is
shown attached to its group's netCDF scales of those names (``CLASS`` and a ``NAME`` that
is the dimension's or netCDF's dimension-only text: ``DIMENSION_LIST``, and each scale's
stored ``REFERENCE_LIST`` shown with it added) when every axis has one of its length (up
to it along an unlimited one), else left as it is. Nothing else is made there: no
dimension-only datasets, no new scales.

Nothing here is stored: the view shows it (render.py), and the ingester compares
a written file with it (diff.py), so a writer that leaves it alone stores nothing,
and one that changes it (or adds a variable with dimensions) stores the file's scales
as real attributes and dimension-only datasets, as a file copied in would be.
"""
from __future__ import annotations

import hashlib
from collections.abc import Container, Iterable
from dataclasses import dataclass, field


from ...model import ids
from ...model import types as T
from ...model.schema import Attribute, Dataset, Group, Link, Shape
from ...model.tree import DomainModel
from ...views.hdmf import (ARRAY_DIMENSIONS, NETCDF_DIM_ONLY, GoneScale, array_dimensions, dimension_refs, fits,
                           gone_key, gone_scales, int_values, is_netcdf, text_attr)

SCALE_ATTRS = ("CLASS", "NAME", "REFERENCE_LIST", "DIMENSION_LIST")
_REF = {"class": "H5T_REFERENCE", "base": "H5T_STD_REF_OBJ", "length": 48}


@dataclass
class Synthesized:
    """What the view adds to (``extra``) and hides from (``hidden``) each object's attributes."""

    extra: dict[str, dict[str, Attribute]] = field(default_factory=dict)
    hidden: dict[str, set[str]] = field(default_factory=dict)
    dim_only: dict[str, tuple[str, str, Dataset]] = field(default_factory=dict)  # id -> (group path, name, ds)

    def shown(self, obj_id: str, attributes: dict[str, Attribute],
              in_file: set[str] | None = None) -> dict[str, Attribute]:
        """An object's attributes as the view shows them (stored ones first, in their order);
        references to datasets the file leaves out (``in_file``) are dropped."""
        hide = self.hidden.get(obj_id, set())
        out = {n: a for n, a in attributes.items() if n not in hide}
        for name, attr in self.extra.get(obj_id, {}).items():
            if in_file is not None:
                attr = _pruned(attr, in_file)
            if attr is not None:
                out[name] = attr
            else:
                out.pop(name, None)  # not the stored one it stood for either (it names gone datasets too)
        return out

    def links(self, group_path: str) -> list[Link]:
        """The links of one group to its dimension-only datasets (made last)."""
        return [Link(name, "hard", id=oid, created=float("inf"))
                for oid, (gpath, name, _) in self.dim_only.items() if gpath == group_path]

    def paths(self) -> dict[str, str]:
        """Path in the file -> id of each dimension-only dataset."""
        return {(gpath.rstrip("/") + "/" + name): oid for oid, (gpath, name, _) in self.dim_only.items()}

    def __bool__(self) -> bool:
        return bool(self.extra)


def has_real_scales(datasets: Iterable[Dataset]) -> bool:
    """Whether any dataset carries dimension scale attributes of its own."""
    for ds in datasets:
        if "DIMENSION_LIST" in ds.attributes or "REFERENCE_LIST" in ds.attributes:
            return True
        if text_attr(ds, "CLASS") == "DIMENSION_SCALE":
            return True
    return False


def _rank(ds: Dataset) -> int:
    return ds.shape.rank if ds.shape.kind == "simple" else 0


def _ref(obj_id: str) -> str:
    return f"datasets/{obj_id}"


def _text(name: str, value: str) -> Attribute:
    """A scalar null-terminated string, as H5DS writes CLASS and NAME."""
    raw = value.encode("utf-8")
    cset = "H5T_CSET_ASCII" if raw.isascii() else "H5T_CSET_UTF8"
    return Attribute.from_json(name, {"type": {"class": "H5T_STRING", "charSet": cset, "strPad": "H5T_STR_NULLTERM",
                                               "length": len(raw) + 1},
                                      "shape": {"class": "H5S_SCALAR"}, "value": value})


def dimension_list(scale_ids: list[str | None]) -> Attribute:
    """netCDF's DIMENSION_LIST: one sequence of one scale reference per dimension (an empty
    one for None: an axis with no scale attached, as H5DS leaves a detached one)."""
    return Attribute.from_json("DIMENSION_LIST", {
        "type": {"class": "H5T_VLEN", "base": dict(_REF), "size": "H5T_VARIABLE"},
        "shape": {"class": "H5S_SIMPLE", "dims": [len(scale_ids)]},
        "value": [[_ref(i)] if i else [] for i in scale_ids]})


def reference_list(attached: list[tuple[str, int]]) -> Attribute:
    """H5DS's REFERENCE_LIST: (dataset, dimension) per attachment, as netCDF-C's libhdf5 lays it out."""
    return Attribute.from_json("REFERENCE_LIST", {
        "type": {"class": "H5T_COMPOUND",
                 "fields": [{"name": "dataset", "type": dict(_REF)},
                            {"name": "dimension", "type": {"class": "H5T_INTEGER", "base": "H5T_STD_U32LE"}}],
                 "polyfs": {"offsets": [0, 8], "size": 16}},
        "shape": {"class": "H5S_SIMPLE", "dims": [len(attached)]},
        "value": [[_ref(i), axis] for i, axis in attached]})


def _pruned(attr: Attribute, in_file: set[str]) -> Attribute | None:
    """A shown REFERENCE_LIST without the datasets the file leaves out; a DIMENSION_LIST
    naming one is not shown at all (None)."""
    if attr.name == "REFERENCE_LIST":
        keep = [(v[0][len("datasets/"):], v[1]) for v in attr.value if v[0][len("datasets/"):] in in_file]
        return attr if len(keep) == len(attr.value) else (reference_list(keep) if keep else None)
    if attr.name == "DIMENSION_LIST" and any(r[len("datasets/"):] not in in_file for row in attr.value for r in row):
        return None
    return attr


def same_as_shown(shown: Attribute, got: Attribute, removed: set[str]) -> bool | None:
    """A REFERENCE_LIST read back against the one shown, when the writer deleted datasets:
    HDF5 leaves their entries in it (null or dangling references), which the view would
    no longer show either. None: not that case (compare as usual)."""
    if shown.name != "REFERENCE_LIST" or not removed or got.type.to_json() != shown.type.to_json():
        return None
    try:
        want = [[r, int(i)] for r, i in shown.value if r[len("datasets/"):] not in removed]
        have = [[r, int(i)] for r, i in got.value if r]
    except (TypeError, ValueError):
        return None
    return want == have


def dim_only_id(group_id: str, name: str) -> str:
    """A stable id for a group's dimension-only dataset (in the domain's id space, never stored)."""
    first, _ = ids.halves(group_id)
    h = hashlib.sha256(f"{group_id}/{name}".encode("utf-8", "surrogateescape")).hexdigest()
    return f"d-{first}-{h[:4]}-{h[4:10]}-{h[10:16]}"


def dim_only_dataset(group: Group, name: str, length: int, root: str) -> Dataset:
    """netCDF-C's dataset for a dimension without a variable: big-endian float32, no data."""
    return Dataset(dim_only_id(group.id, name), root, T.FloatType(4, ">"), Shape("simple", (length,)), (length,),
                   layout_class="H5D_CONTIGUOUS")


def synthesize(model: DomainModel, in_file: set[str] | None = None) -> Synthesized:
    """The scale attributes the HDF5 view shows for ``model`` (datasets outside ``in_file``,
    left out of the file, take no part)."""
    out = Synthesized()
    members, groups = _members(model, in_file)
    if has_real_scales(model.datasets.values()):
        live: set[str] | dict[str, Dataset] = model.datasets if in_file is None else in_file
        attached: dict[str, list[tuple[str, int]]] = {}
        made = _reattach(model, groups, live, attached, out)
        for gpath, items in members.items():
            _attach_to_real(items, made.get(gpath, {}), attached, out)
        _reference_lists(model, live, attached, out)
        return out
    for gpath, items in members.items():
        _group(gpath, groups[gpath], model.domain.root, items, out)
    return out


def _members(model: DomainModel, in_file: set[str] | None
             ) -> tuple[dict[str, list[tuple[str, Dataset, list[str | None]]]], dict[str, Group]]:
    """Per group path, (link name, dataset, dimension names) of its datasets; the groups."""
    members: dict[str, list[tuple[str, Dataset, list[str | None]]]] = {}  # group path -> (name, ds, dims)
    groups: dict[str, Group] = {}
    for entry in model.walk():
        ds = entry.obj
        if isinstance(ds, Group):
            groups[entry.path] = ds
        if not isinstance(ds, Dataset) or entry.parent is None or not isinstance(entry.parent.obj, Group):
            continue
        if in_file is not None and ds.id not in in_file:
            continue
        rank = _rank(ds)
        dims = array_dimensions(ds, rank) if rank else None
        members.setdefault(entry.parent.path, []).append(
            (entry.path.rsplit("/", 1)[1], ds, [d or None for d in dims] if dims else []))
    return members, groups


def _reattach(model: DomainModel, groups: dict[str, Group], live: Container[str],
              attached: dict[str, list[tuple[str, int]]], out: Synthesized) -> dict[str, dict[str, Dataset]]:
    """Datasets whose stored ``DIMENSION_LIST`` names a scale that is gone (deleted through
    ``zarr/``, ``n5/`` or by another process; nothing rewrote them) are shown attached to
    the dimension they keep (hdmf.gone_scales): its scale in the group if there is one (a
    netCDF scale, or the dataset that replaced the deleted one, then shown as a scale), else
    netCDF's dimension-only dataset of its name, as netCDF-C writes a dimension without a
    variable. An axis that fits none is shown with no ``DIMENSION_LIST`` at all (netCDF
    readers then make phony dimensions; a dangling reference fails them: "NetCDF: HDF error").
    Returns the scales made, per group path and dimension name."""
    made: dict[str, dict[str, Dataset]] = {}
    target: dict[str, Dataset | None] = {}
    gone = gone_scales(model, live)
    netcdf = is_netcdf(model)
    for gone_id, dim in gone.items():
        group = groups.get(dim.group)
        scale = None if group is None else _scale_for(model, group, dim, live, out, netcdf)
        target[gone_id] = scale
        if scale is not None and dim.name is not None:
            made.setdefault(dim.group, {})[dim.name] = scale
    made_ids = {t.id for t in target.values() if t is not None}
    for gone_id, scale in target.items():
        if scale is not None:
            _dimension_id(model, gone[gone_id], scale, live, out)
    for ds_id in dict.fromkeys(ds_id for dim in gone.values() for ds_id, _ in dim.uses):
        _show_reattached(model.datasets[ds_id], target, made_ids, live, attached, out, netcdf)
    return made


def _show_reattached(ds: Dataset, target: dict[str, Dataset | None], made_ids: set[str], live: Container[str],
                     attached: dict[str, list[tuple[str, int]]], out: Synthesized, netcdf: bool) -> None:
    """One dataset's DIMENSION_LIST with its gone scales replaced (see _reattach); an axis with
    none is shown detached outside netCDF (an empty row, as H5DS detaches), and in a netCDF
    file takes the whole list with it (netCDF readers refuse "mixing of labeled and
    unlabeled dimensions")."""
    rows = dimension_refs(ds) or []
    scale_ids: list[str | None] = []
    for axis, row in enumerate(rows[:_rank(ds)]):
        keep = next((r for r in row if r and r in live), None)
        key = gone_key(ds, axis, row) if keep is None and row else None
        if key is not None and key in target:
            scale = target[key]
            keep = scale.id if scale is not None and fits(int(ds.shape.dims[axis]), scale) else None
        if keep is None and netcdf:
            out.hidden.setdefault(ds.id, set()).add("DIMENSION_LIST")
            return
        scale_ids.append(keep)
    scale_ids += [None] * (_rank(ds) - len(scale_ids))
    if netcdf and None in scale_ids:
        out.hidden.setdefault(ds.id, set()).add("DIMENSION_LIST")
        return
    out.extra.setdefault(ds.id, {})["DIMENSION_LIST"] = dimension_list(scale_ids)
    if array_dimensions(ds, _rank(ds)) is not None:
        out.hidden.setdefault(ds.id, set()).add(ARRAY_DIMENSIONS)  # the dimensions' record: said there now
    for axis, sid in enumerate(scale_ids):
        if sid in made_ids:
            attached.setdefault(sid, []).append((ds.id, axis))


def _dimension_id(model: DomainModel, gone: GoneScale, scale: Dataset, live: Container[str],
                  out: Synthesized) -> None:
    """netCDF-C reads a variable's dimensions from its ``_Netcdf4Coordinates`` (dimension ids,
    each a scale's ``_Netcdf4Dimid``): the scale shown for a gone one gets the gone one's id
    (the one its uses name at that axis, if they agree and no other scale has it); else the
    uses are shown without ``_Netcdf4Coordinates`` (netCDF-C then goes by DIMENSION_LIST)."""
    if "_Netcdf4Dimid" in scale.attributes:
        return
    ids_: set[int | None] = set()
    for ds_id, axis in gone.uses:
        coords = int_values(model.datasets[ds_id].attributes.get("_Netcdf4Coordinates"))
        ids_.add(coords[axis] if coords is not None and len(coords) > axis else None)
    dimid = next(iter(ids_)) if len(ids_) == 1 else None
    taken = {d for oid, ds in model.datasets.items() if oid in live and text_attr(ds, "CLASS") == "DIMENSION_SCALE"
             for d in (int_values(ds.attributes.get("_Netcdf4Dimid")) or [])[:1]}
    if dimid is not None and dimid not in taken:
        out.extra.setdefault(scale.id, {})["_Netcdf4Dimid"] = Attribute.from_json("_Netcdf4Dimid", {
            "type": {"class": "H5T_INTEGER", "base": "H5T_STD_I32LE"}, "shape": {"class": "H5S_SCALAR"},
            "value": dimid})
        return
    for ds_id, _ in gone.uses:
        if "_Netcdf4Coordinates" in model.datasets[ds_id].attributes:
            out.hidden.setdefault(ds_id, set()).add("_Netcdf4Coordinates")


def _scale_for(model: DomainModel, group: Group, gone: GoneScale, live: Container[str],
               out: Synthesized, netcdf: bool) -> Dataset | None:
    """The scale a gone one's dimension is shown with (see _reattach); None: none fits (and
    outside netCDF no dimension-only dataset is made: it is netCDF's)."""
    if gone.name is None:
        return None
    link = group.links.get(gone.name)
    lengths = [int(model.datasets[d].shape.dims[a]) for d, a in gone.uses]
    if link is None and not netcdf:
        return None
    if link is None:
        ds = dim_only_dataset(group, gone.name, max(lengths), model.domain.root)
        out.dim_only[ds.id] = (gone.group, gone.name, ds)
        extra = out.extra.setdefault(ds.id, {})
        extra["CLASS"] = _text("CLASS", "DIMENSION_SCALE")
        extra["NAME"] = _text("NAME", f"{NETCDF_DIM_ONLY}.{max(lengths):10d}")
        return ds
    obj = model.datasets.get(link.id or "") if link.kind == "hard" else None
    if obj is None or obj.id not in live or _rank(obj) != 1:
        return None
    if _netcdf_scale(gone.name, obj):
        return obj
    if any(a in obj.attributes for a in SCALE_ATTRS) or array_dimensions(obj, 1) not in (None, [gone.name]):
        return None  # another dataset of that name: not made a scale of a dimension it is not
    extra = out.extra.setdefault(obj.id, {})
    extra["CLASS"] = _text("CLASS", "DIMENSION_SCALE")
    extra["NAME"] = _text("NAME", gone.name)
    if ARRAY_DIMENSIONS in obj.attributes:
        out.hidden.setdefault(obj.id, set()).add(ARRAY_DIMENSIONS)
    return obj


def _reference_lists(model: DomainModel, live: Container[str], attached: dict[str, list[tuple[str, int]]],
                     out: Synthesized) -> None:
    """Each scale's REFERENCE_LIST as shown: the stored one without the datasets that are gone
    (HDF5 readers that follow it, h5py's and h5netcdf's, would meet dangling references), with
    the attachments shown here added; none when nothing is left."""
    for ds_id, ds in model.datasets.items():
        if ds_id not in live or ("REFERENCE_LIST" not in ds.attributes and ds_id not in attached):
            continue
        have = _references(ds)
        if have is None:
            continue  # a REFERENCE_LIST that does not read: left as it is
        new = [p for p in have if p[0] in live]
        new += [p for p in attached.get(ds_id, []) if p not in new]
        if new == have:
            continue
        if new:
            out.extra.setdefault(ds_id, {})["REFERENCE_LIST"] = reference_list(new)
        else:
            out.hidden.setdefault(ds_id, set()).add("REFERENCE_LIST")
    for oid in out.dim_only:
        if oid in attached:
            out.extra.setdefault(oid, {})["REFERENCE_LIST"] = reference_list(attached[oid])


def _attach_to_real(items: list[tuple[str, Dataset, list[str | None]]], made: dict[str, Dataset],
                    attached: dict[str, list[tuple[str, int]]], out: Synthesized) -> None:
    """A domain with scales of its own (a netCDF-4 file) where an array was added through
    ``zarr/`` (xarray ``to_zarr(mode="a")``), its dimensions named only in
    ``_ARRAY_DIMENSIONS``: it is shown attached to its group's scales of those names (and
    those _reattach made), as netCDF-C attaches a variable it adds (``DIMENSION_LIST``, and
    the scales' ``REFERENCE_LIST`` with it added: _reference_lists), not with phony
    dimensions netCDF readers then drop."""
    scales = {link: ds for link, ds, _ in items if _netcdf_scale(link, ds)}
    scales.update(made)
    for _, ds, dims in items:
        if not dims or ARRAY_DIMENSIONS not in ds.attributes or any(a in ds.attributes for a in SCALE_ATTRS):
            continue
        if any(scales.get(n or "") is ds for n in dims):
            continue  # a scale _reattach made of it
        if not all(n is not None and n in scales and fits(int(ds.shape.dims[i]), scales[n])
                   for i, n in enumerate(dims)):
            continue
        if any(_references(scales[n]) is None for n in dims):
            continue  # a REFERENCE_LIST that does not read: left as it is
        out.extra.setdefault(ds.id, {})["DIMENSION_LIST"] = dimension_list(
            [scales[n].id for n in dims])  # type: ignore[index]
        out.hidden.setdefault(ds.id, set()).add(ARRAY_DIMENSIONS)
        for axis, n in enumerate(dims):
            attached.setdefault(scales[n].id, []).append((ds.id, axis))  # type: ignore[index]


def _netcdf_scale(link: str, ds: Dataset) -> bool:
    """Whether ``ds`` is the scale of dimension ``link`` as netCDF-4 makes one: ``CLASS``, and
    ``NAME`` the link's name (a coordinate variable) or netCDF's dimension-only text."""
    name = text_attr(ds, "NAME")
    return _rank(ds) == 1 and text_attr(ds, "CLASS") == "DIMENSION_SCALE" and name is not None and (
        name == link or name.startswith(NETCDF_DIM_ONLY))


def _references(scale: Dataset) -> list[tuple[str, int]] | None:
    """(dataset id, dimension) of a scale's stored REFERENCE_LIST ([] without one), None if
    it does not read as one."""
    attr = scale.attributes.get("REFERENCE_LIST")
    if attr is None:
        return []
    try:
        return [(str(r)[len("datasets/"):], int(i)) for r, i in attr.value]
    except (TypeError, ValueError):
        return None


def _group(gpath: str, group: Group, root: str, items: list[tuple[str, Dataset, list[str | None]]],
           out: Synthesized) -> None:
    """One group's scales and attachments."""
    extents: dict[str, set[int]] = {}
    for _, ds, dims in items:
        for name, n in zip(dims, ds.shape.dims if dims else ()):
            if name is not None:
                extents.setdefault(name, set()).add(int(n))
    scales: dict[str, Dataset] = {}
    for link, ds, dims in items:
        sizes = extents.get(link)
        if sizes is None or len(sizes) != 1 or _rank(ds) != 1 or int(ds.shape.dims[0]) not in sizes:
            continue  # not a dimension name here, lengths disagree, or not this dimension's length
        if dims and dims != [link]:
            continue  # a 1-D array along another dimension
        if any(a in ds.attributes for a in ("NAME", "CLASS")):
            continue  # an attribute of its own would be overwritten
        scales[link] = ds
    dim_only: set[str] = set()
    for name, sizes in sorted(extents.items()):
        if name in scales or len(sizes) != 1 or name in group.links or "/" in name or name in (".", ".."):
            continue
        ds = dim_only_dataset(group, name, next(iter(sizes)), root)
        out.dim_only[ds.id] = (gpath, name, ds)
        scales[name] = ds
        dim_only.add(name)
    attached: dict[str, list[tuple[str, int]]] = {name: [] for name in scales}
    for link, ds, dims in items:
        if not dims or (scales.get(link) is ds):
            continue
        if not all(name is not None and name in scales for name in dims):
            continue  # some axis has no scale: no DIMENSION_LIST at all (see the module docstring)
        out.extra.setdefault(ds.id, {})["DIMENSION_LIST"] = dimension_list([scales[n].id for n in dims])
        out.hidden.setdefault(ds.id, set()).add(ARRAY_DIMENSIONS)
        for axis, name in enumerate(dims):
            attached[name].append((ds.id, axis))  # type: ignore[index]
    for name, ds in scales.items():
        extra = out.extra.setdefault(ds.id, {})
        extra["CLASS"] = _text("CLASS", "DIMENSION_SCALE")
        extra["NAME"] = _text("NAME", f"{NETCDF_DIM_ONLY}.{int(ds.shape.dims[0]):10d}" if name in dim_only
                              else name)
        if attached[name]:
            extra["REFERENCE_LIST"] = reference_list(attached[name])
        if ARRAY_DIMENSIONS in ds.attributes:
            out.hidden.setdefault(ds.id, set()).add(ARRAY_DIMENSIONS)


__all__ = ["SCALE_ATTRS", "Synthesized", "synthesize", "has_real_scales", "dimension_list", "reference_list",
           "dim_only_dataset", "dim_only_id", "same_as_shown"]
