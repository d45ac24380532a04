"""What a written file's transparency mask changes (mask.py): a new mask dataset beside a new
image, or the existing mask's chunks, a mask linked beside an existing image, or an image
written anew without one no longer naming its mask.

GDAL's external mask ``<image>.tif.msk`` (GDAL 3.6's default outside ``GDAL_TIFF_INTERNAL_MASK=YES``)
changes the image's mask the same way (``external_mask``). GDAL makes it while the image is open
and closes the image first: a ``.msk`` whose image is stored is ingested at its close; one made
while its image is still being written is kept as scratch and stored when the image is
(``fs.writeops._adopt_below``); one beside no image is refused when made (``orphan_sidecar``). The
view lists no ``.msk``: GDAL reads the image's internal mask IFD, one mask."""
from __future__ import annotations

import itertools
import logging
from typing import Any

import numpy as np

from ...errors import InvalidInput, NotFound, UnsupportedType
from ...importers.common import chunk_region
from ...model import values
from ...model.changes import ObjectChange
from ...model.schema import Attribute, Dataset, Group, Link, Shape, now
from ...model.writer import stamp
from ...writes.chunkin import stored_dtype
from ...writes.protocol import ChunkBytes, DocumentChanges
from .image import written_stem
from .mask import (MASK_ATTR, TRANSPARENT, UNSERVED_ATTR, VALID, add_mask, free_mask_name, name_attribute, named_mask,
                   plane)
from .written import VerifyingWriter, check_chain, open_tiff, reading

log = logging.getLogger(__name__)


def new_mask(parent: Group, name: str, writer: Any, ds: Dataset, masked: np.ndarray, where: str) -> Link:
    """A new mask dataset beside a new image (mask.py), named by the image's attribute."""
    mname = free_mask_name(parent.links, name)
    mds = add_mask(writer, ds, masked, unlimited=True)
    writer.set_attr(ds, MASK_ATTR, *name_attribute(mname))
    return Link(mname, "hard", id=mds.id, created=stamp())


def with_mask(catalog: Any, t: Any, ds: Dataset, name: str, masked: np.ndarray | None, out: DocumentChanges,
                where: str, whole: bool = False) -> DocumentChanges:
    """``out`` with what the file's transparency mask changes (mask.py): the mask dataset's
    chunks that differ, a new mask dataset linked beside the image, or, for a file written
    anew without a mask, the image no longer naming one (the mask's data stays)."""
    parent: Group = t.obj
    named = named_mask(ds)
    if masked is None:
        if whole and named is not None:
            change = _object_change(out, ds.id)
            change.remove_attributes.append(MASK_ATTR)
            change.set_attributes[UNSERVED_ATTR] = Attribute(UNSERVED_ATTR, *name_attribute(named), now())
            log.warning("%s: the file has no transparency mask; %s is no longer served as its mask (its data "
                        "stays)", where, named)
        return out
    if named is None:
        named = _former(t, parent, ds, out)
    mds = _usable(t, parent, named)
    if mds is None:  # none named, or what it names is gone or no mask (replaced through zarr/, hdf5/)
        mname = named if named is not None and named not in parent.links else free_mask_name(parent.links, name)
        if mname != named:
            _object_change(out, ds.id).set_attributes[MASK_ATTR] = Attribute(MASK_ATTR, *name_attribute(mname),
                                                                              now())
        writer = out.created if out.created is not None else VerifyingWriter(catalog, t.model.domain)
        try:
            new = add_mask(writer, ds, masked, unlimited=True)
        except BaseException:
            writer.abort()
            raise
        out.created = writer
        links = dict(parent.links)
        links[mname] = Link(mname, "hard", id=new.id, created=stamp())
        out.objects.append(ObjectChange(parent.id, links=links))
        return out
    mname = named
    dims = tuple(masked.shape)
    target = mds
    if tuple(mds.shape.array_shape) != dims:
        maxdims = mds.shape.maxdims or mds.shape.array_shape
        if any(m is not None and d > m for d, m in zip(dims, maxdims)):
            raise InvalidInput(f"{where}: the transparency mask {list(dims)} exceeds the maximum shape of {mname}")
        _object_change(out, mds.id).resize = dims
        target = _resized(mds, dims)
    pipe = catalog.pipeline(mds)
    idx = catalog.chunk_index(mds)
    puts: list[tuple[tuple[int, ...], ChunkBytes]] = []
    for coords in itertools.product(*(range(g) for g in target.grid)):
        block = values.fill_array(mds.type, mds.fill_value, tuple(mds.chunks))
        region = chunk_region(target, coords)
        block[tuple(slice(0, r.stop - r.start) for r in region)] = masked[region]
        inside = all(c < g for c, g in zip(coords, idx.grid))
        if inside and idx.size_of(idx.linear_of(coords)) >= 0 and target is mds:
            stored = catalog.store.get(idx.key_of(coords))
            raw = pipe.decode(stored, mds.chunk_nbytes) if not pipe.is_identity else stored
            if raw == block.tobytes():
                continue
        puts.append((coords, _encoded(pipe, block)))
    if puts:
        out.puts[mds.id] = puts
    return out


def _former(t: Any, parent: Group, ds: Dataset, out: DocumentChanges) -> str | None:
    """The mask the image stopped naming when its file was written anew without one, named
    again (its chunks are then updated, no ``<name>_mask1`` made): ``cp x.tif x.tif.msk`` or
    rsync again stores the image, unmasked, before its ``.msk``; else None."""
    former = named_mask(ds, UNSERVED_ATTR)
    if former is None or _usable(t, parent, former) is None:
        return None
    change = _object_change(out, ds.id)
    change.set_attributes[MASK_ATTR] = Attribute(MASK_ATTR, *name_attribute(former), now())
    change.remove_attributes.append(UNSERVED_ATTR)
    return former


def _usable(t: Any, parent: Group, named: str | None) -> Dataset | None:
    """The mask dataset the image names, when it is one (2-D uint8); else None."""
    if named is None or named not in parent.links:
        return None
    try:
        mds = t.model.resolve(t.child_path(named))
    except NotFound:
        return None
    if not isinstance(mds, Dataset) or stored_dtype(mds) != np.dtype("u1") or len(mds.shape.array_shape) != 2:
        return None
    return mds


def _object_change(out: DocumentChanges, obj_id: str) -> ObjectChange:
    """The change of ``obj_id`` in ``out`` (one per object), added when there is none."""
    for c in out.objects:
        if c.obj_id == obj_id:
            return c
    c = ObjectChange(obj_id)
    out.objects.append(c)
    return c


def _resized(ds: Dataset, dims: tuple[int, ...]) -> Dataset:
    """A copy of ``ds`` with another extent (its chunk grid; nothing stored)."""
    import copy

    out = copy.copy(ds)
    out.shape = Shape("simple", tuple(dims), ds.shape.maxdims)
    return out


def _encoded(pipe: Any, block: np.ndarray) -> ChunkBytes:
    """A mask chunk's bytes as stored, made when the change is committed."""
    def make() -> bytes:
        raw = block.tobytes()
        return pipe.encode(raw) if not pipe.is_identity else raw
    return make


# -- GDAL's external mask: <image>.tif.msk -------------------------------------------------
MSK = ".msk"


def sidecar_image(name: str) -> str | None:
    """The image file GDAL's external mask ``name`` (``<image>.msk``, ``.MSK``) belongs to, or None.
    GDAL 3.6 writes a per-dataset mask there by default (``gdal_translate -mask``, or a copy of a
    masked file, without ``GDAL_TIFF_INTERNAL_MASK=YES``)."""
    if name.startswith(".") or name[-len(MSK):].lower() != MSK:
        return None
    base = name[: -len(MSK)]
    return base if written_stem(base) is not None else None


def sidecar_target(t: Any) -> tuple[str, Dataset] | None:
    """The image dataset (name, dataset) the external mask file at ``t`` belongs to, when stored."""
    if t.domain is None or not isinstance(t.obj, Group) or len(t.rest) != 1:
        return None
    image = sidecar_image(t.rest[0])
    stem = written_stem(image) if image is not None else None
    if stem is None or stem not in t.obj.links:
        return None
    try:
        ds = t.model.resolve(t.child_path(stem))
    except NotFound:
        return None
    return (stem, ds) if isinstance(ds, Dataset) else None


def external_mask(catalog: Any, t: Any, src: Any, where: str) -> DocumentChanges:
    """What a flushed ``<image>.tif.msk`` changes: the image's mask, as an internal mask page
    would (``with_mask``). Only its full-resolution first page is read (GDAL keeps the mask's
    overviews in it too); another size, several bands or bits are refused, nothing stored."""
    got = sidecar_target(t)
    if got is None:
        raise NotFound(f"{where}: no image {sidecar_image(t.rest[0])} beside this external mask")
    stem, ds = got
    with reading(where):
        check_chain(src, where)
        tif = open_tiff(src, generic=True)
        try:
            masked = _msk_plane(tif, ds, where)
        finally:
            tif.close()
    return with_mask(catalog, t, ds, stem, masked, DocumentChanges(), where)


def _msk_plane(tif: Any, image: Dataset, where: str) -> np.ndarray:
    """The .msk's mask as uint8 0/255 of the image's plane (non-zero is valid, as GDAL reads it)."""
    full = [p.aspage() for p in tif.pages if p is not None and not int(getattr(p, "subfiletype", 0)) & 1]
    if not full:
        raise InvalidInput(f"{where}: an external mask file without a full-resolution page")
    pg = full[0]
    h, w = plane(image)
    if len(full) > 1 or int(pg.samplesperpixel) != 1:
        raise UnsupportedType(f"{where}: an external mask of {int(pg.samplesperpixel)} bands in {len(full)} "
                              f"pages (per-band masks); only a per-dataset mask (one band) is kept")
    if (int(pg.imagelength), int(pg.imagewidth)) != (h, w):
        raise InvalidInput(f"{where}: the external mask is {int(pg.imagewidth)}x{int(pg.imagelength)} pixels, "
                           f"not the image's {w}x{h}")
    if int(pg.bitspersample) not in (1, 8):
        raise InvalidInput(f"{where}: the external mask has samples of {int(pg.bitspersample)} bits; a mask "
                           f"is one sample of 1 or 8 bits")
    arr = np.asarray(pg.asarray()).reshape(h, w)
    return np.where(arr != 0, VALID, TRANSPARENT).astype(np.uint8)
