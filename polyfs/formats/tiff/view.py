"""The TIFF view: ``MNT/tiff/<stem>/<dataset path>.tif``, one tiled TIFF per image.

Every dataset with at least two dimensions and a numeric type (u/int 8-64,
float 16/32/64, complex, bool as uint8) is a TIFF: the last two dimensions are the
image plane (before a samples axis: RGB and other contig samples, raster.py),
the leading ones become pages (one IFD per plane, C order),
described by OME-XML (or tifffile's shaped JSON; see tiffmeta.py for the axes,
pixel sizes and why). The file's byte order is the dataset's (``MM`` for
big-endian data, ``II`` otherwise); it is BigTIFF when it would reach
:data:`BIGTIFF_AT` bytes. Where tiles come from (zero-copy stored chunks or
transcoded, cached tiles) is tifftiles.py.

Metadata (details and reasons in tiffmeta.py): OME-XML in the first page's
ImageDescription (ImageJ's own reader cannot open tiled TIFFs, so Fiji reads
these through Bio-Formats, whose format OME-TIFF is); axes from
``DIMENSION_LABELS``, ``_ARRAY_DIMENSIONS``, ``axes`` or the parent group's NGFF
``multiscales``; physical pixel sizes from, first found: NGFF ``multiscales``
scale transforms, ``element_size_um`` (micrometers), ``scale``,
``pixel_size``, ``resolution`` (units from ``unit``/``units``, default
micrometers), also written as XResolution/YResolution in pixels per cm.

File layout: header, every IFD, their out-of-line values (tile offsets and
byte counts included), the shared fill tile (if any tile is missing), then
the tile data. The metadata's size never depends on the tile offsets, so the
whole file is planned from chunk sizes (zero-copy) or measured tile sizes.

The IFD chain itself is image.py.
"""
from __future__ import annotations

import logging
import math
from typing import Any

from ...codecs.pipeline import Pipeline
from ...errors import NotFound
from ...model.schema import Dataset, Group
from ...model.tree import DomainModel
from ...vfile import VFile
from ...views import chunkserve as cs
from ...views.base import DirNode, FileNode, Node, ViewContext
from ..polyglot import file as polyglot
from .coords import coordinate_reader
from .geo import CFGeo, find_cf_geo
from .image import EXTENSION, compose, dataset_image, image_like
from .mask import mask_image, served_mask
from .raster import raster
from .tiles import plan_tiles, served_as_stored, tiff_code

log = logging.getLogger(__name__)


def describe(ds: Dataset, pipe: Pipeline, level: int = 0) -> str:
    """How the TIFF view serves a dataset whose effective pipeline is ``pipe``
    ("zero-copy", "transcoded (<why>) to deflate/uncompressed", "-" if not shown);
    pure: no store access (``polyfs info``)."""
    if not image_like(ds):
        return "-"
    if pipe.undecodable:
        return f"- ({pipe.undecodable})"
    if served_as_stored(ds, pipe):
        return "zero-copy"
    why = []
    ras = raster(ds)
    chunks = ras.chunks  # type: ignore[union-attr]
    if tiff_code(pipe) is None:
        why.append(f"{'+'.join(f.name for f in pipe.filters)} has no TIFF compression code")
    if any(c != 1 for c in chunks[:-2]) and not pipe.is_identity:
        why.append(f"chunks are {math.prod(chunks[:-2])} planes deep")
    if chunks[-1] % 16 or chunks[-2] % 16:
        why.append(f"chunk plane {chunks[-2]}x{chunks[-1]} is not a multiple of 16")
    elif ras.bits < 8:  # type: ignore[union-attr]
        why.append("1-bit samples are packed")
    elif pipe.is_identity and (plane := chunks[-2] * chunks[-1] * ras.pixel_bytes) % 1024:  # type: ignore[union-attr]
        why.append(f"uncompressed chunk plane of {plane} bytes is not a whole number of KiB")
    target = "uncompressed tiles" if level == 0 else f"deflate level {level}"
    return f"transcoded ({'; '.join(why)}) to {target}"


def serving(model: DomainModel, ctx: ViewContext, path: str) -> str:
    """:func:`describe` for a dataset path of a loaded domain."""
    ds = model.resolve(path)
    if not isinstance(ds, Dataset):
        return "-"
    return describe(ds, ctx.catalog.pipeline(ds), ctx.options.tiff_deflate_level)


def build_vfile(ds: Dataset, parent: Group | None, name: str, title: str, ctx: ViewContext,
                cf: CFGeo | None = None, mask: Dataset | None = None) -> VFile:
    """Plan the tiles (measuring transcoded ones), describe the image, lay the file out;
    ``mask``: the image's transparency mask dataset (mask.py), served as its last IFD."""
    idx = ctx.catalog.chunk_index(ds)
    pipe = ctx.catalog.pipeline(ds)
    geo, code, tiles = plan_tiles(ds, idx, pipe, ctx.options.tiff_deflate_level, ctx)
    image = dataset_image(ds, parent, name, title, geo.tile, code, cf)
    served = None
    if mask is not None:
        mpipe = ctx.catalog.pipeline(mask)
        mgeo, mcode, mtiles = plan_tiles(mask, ctx.catalog.chunk_index(mask), mpipe,
                                         ctx.options.tiff_deflate_level, ctx)
        served = (mask_image(image.height, image.width, mgeo.tile, mcode, image.endian), mtiles)
    return compose(image, tiles, served)


def _file_node(model: DomainModel, ds: Dataset, parent: Group | None, name: str, path: str,
               ctx: ViewContext, filename: str) -> FileNode:
    title = f"{model.path}{path}"
    mtime = ctx.catalog.dataset_modified(ds) or ds.created or None

    def build() -> VFile:  # zstd/uncompressed zero-copy images: the polyglot file (also HDF5, a Zarr shard)
        mask = served_mask(model, ds, path)
        # not when its uncompressed tiles are not whole KiB (served_as_stored): re-tiled here
        shared = polyglot.shared_file(model, ds, parent, path, ctx) \
            if mask is None and served_as_stored(ds, ctx.catalog.pipeline(ds)) else None
        if shared is not None:
            return shared.vfile
        return build_vfile(ds, parent, name, title, ctx, find_cf_geo(model, path, ds, coordinate_reader(ctx)), mask)

    return FileNode(filename, build, mtime=mtime)


def domain_node(model: DomainModel, ctx: ViewContext, name: str) -> DirNode:
    """``tiff/<stem>/``: a directory per group that holds images (or nothing), a ``.tif`` per image."""
    return DirNode(name, lambda: _tree(model, ctx), mtime=model.domain.last_modified or None)


def _tree(model: DomainModel, ctx: ViewContext) -> dict[str, Node]:
    root: dict[str, Any] = {}
    nodes: dict[str, FileNode] = {}  # dataset id -> its node (aliases share it)

    def place(path: str, node: FileNode) -> None:
        parts = [p for p in path.split("/") if p]
        d = root
        for part in parts[:-1]:
            sub = d.setdefault(part, {})
            if not isinstance(sub, dict):
                log.warning("tiff view of %s: %s hides group %s", model.path, part, path)
                return
            d = sub
        leaf = parts[-1] + EXTENSION
        if leaf in d:
            log.warning("tiff view of %s: %s is shown once (name taken)", model.path, path)
            return
        d[leaf] = node

    def place_dir(path: str) -> None:
        """An empty group (made by ``mkdir``, or left by ``rm`` of its images) is a directory, as
        in the other views: else ``rm -r`` of a group's directory after a remount removed its
        files, then its ``rmdir`` found no directory (ENOENT) and the empty group stayed."""
        d = root
        for part in [p for p in path.split("/") if p]:
            sub = d.setdefault(part, {})
            if not isinstance(sub, dict):
                return
            d = sub

    for e in model.walk():
        ds = e.obj
        if isinstance(ds, Group) and not ds.links and e.path.strip("/"):
            place_dir(e.path)
        if not isinstance(ds, Dataset) or not image_like(ds):
            continue
        if cs.left_out("tiff", f"{model.path}{e.path}", ds, ctx, log):
            continue
        parent = e.parent.obj if e.parent is not None and isinstance(e.parent.obj, Group) else None
        name = e.path.rsplit("/", 1)[-1]
        node = _file_node(model, ds, parent, name, e.path, ctx, name + EXTENSION)
        nodes[ds.id] = node
        place(e.path, node)
    for gpath, link in model.aliases():
        if link.kind == "external":
            continue
        path = (gpath.rstrip("/") + "/" + link.name)
        try:
            target = model.resolve(path)
        except NotFound:  # dangling soft link: nothing to show
            continue
        if isinstance(target, Dataset) and target.id in nodes:
            place(path, nodes[target.id])

    def to_nodes(d: dict[str, Any]) -> dict[str, Node]:
        out: dict[str, Node] = {}
        for k, v in d.items():
            out[k] = DirNode(k, to_nodes(v)) if isinstance(v, dict) else v
        return out

    return to_nodes(root)


__all__ = ["domain_node", "describe", "serving", "build_vfile"]
