"""What writers do to ``tiff/<stem>/<path>.tif``: a whole TIFF is one dataset.

At flush the written file (the view's bytes plus the writer's dirty pages, or a
file made from scratch) is read by tifffile over the overlay, never whole:

- **a new name** (``a/b.tif`` where group ``a`` has no ``b``): a new dataset
  ``/a/b``, made as ``polyfs import`` makes one from a TIFF (source.py: shape
  ``[pages...] [samples] Y X [samples]``, tiles in a codec of the table stored
  as they are, strips and other codecs re-chunked in the default encoding,
  resolution tags and ImageJ hyperstack metadata as attributes). Its chunks are
  stored under its own id before the commit links it; refused files leave none.
- **an existing dataset's file rewritten in place** (libtiff ``r+``, tifffile's
  tag ``overwrite``, bytes written into a tile's range): each page and tile of
  the file is compared with the view's file it was opened over; a tile still at
  its planned offset and size whose bytes the writer never touched is unchanged
  and never read. Every chunk a changed tile overlaps is stored anew: the tile's
  bytes as they are when the tile is the chunk and its codec is the dataset's,
  else the stored chunk decoded, the tiles laid over it, encoded as stored.
- **an existing dataset's file written from scratch** (``tifffile.imwrite``,
  ``tiffcp``, ``gdal_translate`` onto the name): the dataset's data is replaced.
  The element type must stay (byte order may change), the rank too; another
  shape is a resize within the dataset's maximum shape. Chunks keep the
  dataset's shape and encoding; resolution and ImageJ attributes the file
  carries are set.

Everything is validated (offsets inside the file, every changed tile decoded
once) before anything of the existing dataset is committed; a bad file is
refused with InvalidInput (EINVAL) or UnsupportedType (EOPNOTSUPP) naming it.
Only the full-resolution image of the file's one series is taken (pyramid
levels a writer adds are not stored).
"""
from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ...codecs.pipeline import Pipeline
from ...codecs.registry import DEFLATE
from ...errors import (
    CodecError,
    InvalidInput,
    NotFound,
    NotPermitted,
    PolyfsError,
)
from ...importers.common import ImportOptions, Progress, chunk_region, parse_codec
from ...model import types as T
from ...model import values
from ...model.changes import ObjectChange
from ...model.schema import Attribute, Dataset, Group, Link, Shape, now
from ...model.writer import stamp
from ...views.base import ViewContext
from ...writes.chunkin import Incoming, stored_dtype, to_stored
from ...writes.protocol import (
    ByteSource,
    ChunkBytes,
    DocumentChanges,
    WrittenFile,
)
from .described import DESCRIPTIVE_CODES, DESCRIPTIVE_NAMES, descriptive_attributes, descriptive_tags
from .dropped import full_resolution, say_tags_dropped
from .geo import GEO_TAG_NAMES, GEO_TAGS, geo_attributes, geo_tags, unedited_cf_nodata, unedited_cf_tags
from .image import written_stem
from .mask import mask_of, named_mask
from .maskin import external_mask, new_mask, sidecar_image, sidecar_target, with_mask
from .raster import sample_dtype
from .segments import SegmentCache, Segments, segments_of
from .source import SeriesLayout, TiffImporter, extra_samples, geometry, image_attributes
from .written import (
    BaseSource,
    VerifyingWriter,
    check_chain,
    check_complete,
    exact_deflate,
    frames,
    one_series,
    open_tiff,
    pages_beyond,
    reading,
    renamed,
)

log = logging.getLogger(__name__)

VALIDATE_THREADS = 4
# attributes a rewritten file sets on its existing dataset (the rest describe how it was written)
REPLACED_ATTRIBUTES = ("resolution", "resolution_unit")
# the writer's own ImageDescription (source.foreign_description), what its extra samples are, OME
# channel names
KEPT_TEXT = ("image_description", "extrasamples", "channel_names")


def _options(where: str) -> ImportOptions:
    """How data in no codec of the table is stored (the import default)."""
    return ImportOptions(parse_codec(None, None, where), progress=False)


# -- the ingester ------------------------------------------------------------------------
class TiffIngester:
    """Reads a flushed ``tiff/<stem>/<path>.tif`` (changes validated before anything is committed)."""

    document = True
    meta_name = ""  # no file of this view is a metadata file
    skip_attributes: tuple[str, ...] = ()

    def __init__(self, ctx: ViewContext) -> None:
        self.ctx = ctx
        self.catalog = ctx.catalog

    # -- what a path is ------------------------------------------------------------------
    def is_document(self, t: Any) -> bool:
        """``<group>/<name>.tif`` in an existing group of a domain, or GDAL's external mask
        ``<name>.tif.msk`` of a stored image ``<name>`` (maskin.py)."""
        if t.domain is None or not isinstance(t.obj, Group) or len(t.rest) != 1:
            return False
        return written_stem(t.rest[0]) is not None or sidecar_target(t) is not None

    def sidecar_of(self, name: str) -> str | None:
        """The image file whose external mask ``name`` is (``x.tif.msk`` -> ``x.tif``)."""
        return sidecar_image(name)

    def orphan_sidecar(self, name: str) -> str:
        """Why an external mask is refused when its image is neither stored nor being written."""
        return (f"an external mask needs its image {sidecar_image(name)} stored or being written beside it "
                f"(write the image first, or write masks internal: GDAL_TIFF_INTERNAL_MASK=YES)")

    def refuse_name(self, rest: list[str]) -> str | None:
        """A GDAL virtual raster (``gdalbuildvrt``): a user's product that no dataset can hold, so
        refused when made rather than kept in memory and lost at unmount. GDAL's other sidecars
        (``.aux.xml`` statistics, ``.ovr`` overviews) stay scratch: GDAL rebuilds them."""
        if rest[-1].lower().endswith(".vrt"):
            return (f"{rest[-1]}: a GDAL virtual raster is not stored here (it would vanish at unmount); "
                    f"write it outside the mount, pointing at the view's files")
        return None

    def document_path(self, t: Any) -> str | None:
        """The dataset ``<group>/<name>.tif`` shows (``rm`` deletes it), if there is one."""
        if not self.is_document(t) or written_stem(t.rest[0]) is None:
            return None
        path = t.child_path(written_stem(t.rest[0]))
        try:
            return path if isinstance(t.model.resolve(path), Dataset) else None
        except NotFound:
            return None

    def companion_paths(self, t: Any) -> list[str]:
        """Datasets that go with the one ``<group>/<name>.tif`` shows when ``rm`` deletes it: its
        transparency mask (mask.py), when the image names one that is a dataset."""
        path = self.document_path(t)
        ds = t.model.resolve(path) if path is not None else None
        name = named_mask(ds) if isinstance(ds, Dataset) else None
        if name is None or _mask_shared(t, ds, name):
            return []
        try:
            return [t.child_path(name)] if isinstance(t.model.resolve(t.child_path(name)), Dataset) else []
        except NotFound:
            return []

    def replaces_domain(self, t: Any) -> bool:
        return False  # a TIFF is one dataset, never a domain

    def new_document(self, t: Any, src: ByteSource, where: str) -> None:
        raise NotPermitted(f"{where}: a TIFF file is one dataset; write it inside a domain's directory")

    # -- what a file changes -------------------------------------------------------------
    def document_changes(self, t: Any, src: WrittenFile, where: str) -> DocumentChanges:
        name = written_stem(t.rest[0])
        if name is None:  # GDAL's <image>.tif.msk
            return external_mask(self.catalog, t, src, where)
        parent: Group = t.obj
        existing = self._existing(t, parent, name, where)
        with reading(where):
            check_chain(src, where)
            tif = open_tiff(src)
            try:
                check_complete(tif, src, where)
                appended = pages_beyond(tif, where, existing is not None and src.based) > 0
                if appended:  # pages appended after those its description lists: a longer stack
                    tif.close()
                    tif = open_tiff(src, generic=True)
                one_series(tif, where)  # a file that is refused says nothing about what it drops
                _say_levels_dropped(tif, where)
                if existing is None or not getattr(src, "based", False):
                    say_tags_dropped(tif, where)  # (edits in place: _tags_changed)
                if existing is None:
                    return self._new(t, parent, name, tif, src, where)
                masked = mask_of(tif, one_series(tif, where), where)
                if getattr(src, "based", False):
                    changes = self._in_place(t, existing, tif, src, where)
                    if changes is not None:
                        return with_mask(self.catalog, t, existing, name, masked, changes, where)
                changes = self._replace(t, existing, tif, src, where, appended)
                if any(i == existing.id for i in changes.removed):  # a stack made anew (_new kept its mask)
                    return changes
                return with_mask(self.catalog, t, existing, name, masked, changes, where,
                                 whole=not getattr(src, "based", False))
            finally:
                tif.close()

    def _existing(self, t: Any, parent: Group, name: str, where: str) -> Dataset | None:
        link = parent.links.get(name)
        if link is None:
            return None
        try:
            obj = t.model.resolve(t.child_path(name))
        except NotFound:
            obj = None
        if isinstance(obj, Dataset):
            return obj
        what = "a group" if isinstance(obj, Group) else f"a {link.kind} link that is no dataset"
        raise InvalidInput(f"{where}: {t.child_path(name)} is {what}; a TIFF file can only be a dataset")

    # -- a new dataset -------------------------------------------------------------------
    def _new(self, t: Any, parent: Group, name: str, tif: Any, src: ByteSource, where: str,
             series: Any = None) -> DocumentChanges:
        series = one_series(tif, where) if series is None else series
        writer = VerifyingWriter(self.catalog, t.model.domain)
        imp = TiffImporter(Path(where), writer, _options(where))  # type: ignore[arg-type]
        imp.size = src.size()
        imp.unlimited = True  # a dataset made through the view grows and shrinks freely (as Zarr's)
        links = dict(parent.links)
        try:
            job = imp.plan_series(tif, series, None, parent=None)
            imp.write_series(tif, job, Progress(0, "", False))
            ds: Dataset = job["ds"]
            masked = mask_of(tif, series, where)
            if masked is not None:
                mlink = new_mask(parent, name, writer, ds, masked, where)
                links[mlink.name] = mlink
        except BaseException:
            writer.abort()
            raise
        links[name] = Link(name, "hard", id=ds.id, created=stamp())
        return DocumentChanges(objects=[ObjectChange(parent.id, links=links)], created=writer)

    # -- an existing dataset, rewritten in place -----------------------------------------------
    def _in_place(self, t: Any, ds: Dataset, tif: Any, src: WrittenFile, where: str) -> DocumentChanges | None:
        """Tiles the writer changed in the view's file, or None when the file is no longer laid
        out like the view's (then it replaces the data as a whole)."""
        base = getattr(src, "base", None)
        if base is None:
            return None
        try:
            pages = frames(tif)
        except RuntimeError:  # tifffile: a page laid out unlike the first ("incompatible keyframe")
            return None
        if not pages or any(not hasattr(p, "dataoffsets") for p in pages):
            return None
        key = pages[0]
        geo = geometry(key)
        dims = ds.shape.array_shape
        nplane = len(geo.dims)  # (Y, X), with samples (Y, X, S)
        lead = tuple(dims[:-nplane])
        if len(dims) < nplane or geo.dims != tuple(dims[-nplane:]) or len(pages) != math.prod(lead):
            return None
        dtype = _dtype(key, tif)
        if dtype is None or not _same_type(ds, dtype):
            return None
        try:
            with open_tiff(BaseSource(base)) as old:
                before = [(np.asarray(p.dataoffsets, np.int64), np.asarray(p.databytecounts, np.int64))
                          for p in frames(old)]
                served = _plain_tags(old.pages.first)
                served_extra = extra_samples(old.pages.first)
                served_geo = geo_attributes(old.pages.first)
        except Exception:  # noqa: BLE001 - the view's own file: it parses, unless the model moved meanwhile
            return None
        img = Segments.of(pages, key, geo, lead, dtype, where)
        if len(before) != img.npages or any(o.shape != img.offsets[n].shape for n, (o, _) in enumerate(before)):
            return None
        changed: set[tuple[int, int]] = set()
        for n, (o, c) in enumerate(before):
            for t_ in np.flatnonzero((o != img.offsets[n]) | (c != img.counts[n])):
                changed.add((n, int(t_)))
            for t_ in np.flatnonzero((o == img.offsets[n]) & (c == img.counts[n])):
                if not src.untouched(int(o[t_]), int(c[t_])):
                    changed.add((n, int(t_)))
        img.check_bounds(src.size(), where)
        out = DocumentChanges()
        tags = _geo_change(ds, key, served_extra, served_geo)
        if tags is not None:
            out.objects.append(tags)
        dropped = _tags_changed(served, key)
        if dropped:
            log.warning("%s: %s changed in place %s not kept (the view's file shows the dataset's own; rewrite "
                        "the file to change a resolution or description)", where, ", ".join(dropped),
                        "is" if len(dropped) == 1 else "are")
        if not changed:
            return out
        chunks: dict[tuple[int, ...], set[tuple[int, int]]] = {}
        for n, t_ in changed:
            for coords in _chunks_of(ds, img.segment_box(n, t_)):
                chunks.setdefault(coords, set()).add((n, t_))
        pipe = self.catalog.pipeline(ds)
        whole = img.aligned(ds)

        def check(item: tuple[tuple[int, ...], set[tuple[int, int]]]) -> None:
            coords, segs = item
            if whole:
                _check_segment(ds, img, src, *img.segment_of(coords), where)
                return
            for n, t_ in segs:
                _check_bools(ds, img.segment(src, n, t_, where), where, n, t_)  # decodes, or refuses the file

        _each(check, sorted(chunks.items()))
        idx = self.catalog.chunk_index(ds)
        puts: list[tuple[tuple[int, ...], ChunkBytes]] = []
        for coords, segs in sorted(chunks.items()):
            if whole:
                puts.append((coords, _bind(self._as_stored, ds, pipe, img, src, coords, where)))
            else:
                exists = idx.size_of(idx.linear_of(coords)) >= 0
                puts.append((coords, _bind(self._merged, ds, pipe, img, src, coords, segs, exists, where)))
        out.puts[ds.id] = puts
        return out

    def _as_stored(self, ds: Dataset, pipe: Pipeline, img: Segments, src: ByteSource,
                   coords: tuple[int, ...], where: str) -> bytes:
        """A chunk that is one whole segment: its bytes as they are when they are in the dataset's
        encoding (proved by decoding them), else decoded and encoded as stored (a chunk at the
        image's edge padded to the whole chunk, as every stored chunk is)."""
        n, t_ = img.segment_of(coords)
        if img.filters is not None:
            data = img.raw(src, n, t_, where)
            if data is not None and [f.id for f in img.filters] == [DEFLATE]:
                data = exact_deflate(data)
            if data is not None:
                try:
                    return to_stored(ds, pipe, Incoming(img.dtype, tuple(img.filters)), data)
                except PolyfsError as exc:
                    raise renamed(exc, f"{where}: page {n} segment {t_}: {exc}") from None
        return self._whole_chunk(ds, pipe, img, src, coords, where)

    def _merged(self, ds: Dataset, pipe: Pipeline, img: Segments, src: ByteSource, coords: tuple[int, ...],
                segs: set[tuple[int, int]], exists: bool, where: str) -> bytes:
        """A chunk some changed segments overlap: the stored chunk with those laid over it."""
        dt = stored_dtype(ds)
        if exists:
            key = self.catalog.chunk_index(ds).key_of(coords)
            raw = pipe.decode(self.catalog.store.get(key), ds.chunk_nbytes) if not pipe.is_identity \
                else self.catalog.store.get(key)
            block = np.frombuffer(raw, dtype=dt).reshape(ds.chunks).copy()
        else:
            block = values.fill_array(ds.type, ds.fill_value, tuple(ds.chunks))
        region = chunk_region(ds, coords)
        view = block[tuple(slice(0, s.stop - s.start) for s in region)]
        part = img.read(src, region, where, only=segs, out=_as_values(view, img.dtype))
        view[...] = values.complex_pairs(part)
        return _encode(ds, pipe, block)

    # -- an existing dataset, written anew ---------------------------------------------------
    def _replace(self, t: Any, ds: Dataset, tif: Any, src: ByteSource, where: str,
                 appended: bool = False) -> DocumentChanges:
        series = one_series(tif, where)
        imp = TiffImporter(Path(where), None, _options(where))  # type: ignore[arg-type]
        imp.size = src.size()
        path = t.child_path(written_stem(t.rest[0]))
        lay: SeriesLayout = imp.layout(tif, series, path)
        what = f"dataset {path}"
        if not _same_type(ds, lay.np_dtype):
            raise InvalidInput(f"{where}: the data type of {what} cannot change "
                               f"({stored_dtype(ds)} -> {lay.np_dtype})")
        have = ds.shape.array_shape
        if appended and len(lay.dims) != len(have):  # as many pages appended as the stack has, in another layout
            series = one_series(tif, where, flat=True)
            lay = imp.layout(tif, series, path)
        dims = lay.dims
        free = ds.shape.maxdims is not None and all(m is None for m in ds.shape.maxdims)
        if appended and free and len(dims) == len(have) + 1 and tuple(dims[1:]) == tuple(have):
            return self._stacked(t, ds, tif, series, src, where)
        if len(dims) != len(have):
            hint = (f" (pages appended to the file make a stack of {dims[0]} pages; only a dataset of one "
                    f"page dimension grows so, or a one-page image with no maximum shape, as the files "
                    f"written into this view make)") if appended else ""
            raise InvalidInput(f"{where}: {what} has {len(have)} dimensions {list(have)}; the file's image "
                               f"has {len(dims)} {list(dims)}{hint}")
        maxdims = ds.shape.maxdims or have
        if any(m is not None and d > m for d, m in zip(dims, maxdims)):
            raise InvalidInput(f"{where}: shape {list(dims)} exceeds the maximum shape "
                               f"{['unlimited' if m is None else m for m in maxdims]} of {what}")
        img = segments_of(lay.pages, lay.key, lay.geo, lay.lead, lay.np_dtype, where)
        target = ds if dims == have else _resized(ds, dims)
        pipe = self.catalog.pipeline(ds)
        whole = img.aligned(target)
        fill = values.fill_array(ds.type, ds.fill_value, ())
        missing_is_fill = _same_value(_as_values(fill, img.dtype), getattr(img, "missing", 0))
        cache = SegmentCache()  # a strip or tile spanning several chunks is decoded once

        idx = self.catalog.chunk_index(ds)
        same = whole and img.filters is not None and _same_bytes(img, target, pipe)

        def stored(coords: tuple[int, ...]) -> int:
            """The stored chunk's size (-1: none)."""
            if not all(c < g for c, g in zip(coords, idx.grid)):
                return -1
            return idx.size_of(idx.linear_of(coords))

        def check(coords: tuple[int, ...]) -> tuple[tuple[int, ...], bool | None]:
            """(coords, whether the chunk holds data; None: the stored bytes already); the chunk
            decoded, never kept."""
            if whole:
                n, t_ = img.segment_of(coords)
                data = img.raw(src, n, t_, where)
                if data is None:  # unwritten: its nodata value (or 0); no chunk when that is the fill
                    return coords, not missing_is_fill
                if same and stored(coords) == len(data) and self.catalog.store.get(idx.key_of(coords)) == data:
                    return coords, None  # the tile is the stored chunk (a file written back as read)
                _check_segment(target, img, src, n, t_, where)
                return coords, True
            block = img.read(src, chunk_region(target, coords), where, cache=cache)
            _check_bools(ds, block, where)
            return coords, not bool(np.all(block == _as_values(fill, block.dtype)))

        grid = target.grid
        results = _each(check, itertools.product(*(range(g) for g in grid)))
        out = DocumentChanges()
        puts: list[tuple[tuple[int, ...], ChunkBytes]] = []
        deletes: list[tuple[int, ...]] = []
        for coords, data in results:
            if data is None:
                continue
            if data:
                if whole:
                    puts.append((coords, _bind(self._as_stored, target, pipe, img, src, coords, where)))
                else:
                    puts.append((coords, _bind(self._whole_chunk, target, pipe, img, src, coords, where, cache)))
            elif stored(coords) >= 0:
                deletes.append(coords)
        kept, gone = self._attributes(ds, tif, series, lay)
        change = ObjectChange(ds.id, set_attributes=kept, remove_attributes=gone)
        if dims != have:
            change.resize = dims
        if not change.is_empty():
            out.objects.append(change)
        if puts:
            out.puts[ds.id] = puts
        if deletes:
            out.deletes[ds.id] = deletes
        return out

    def _stacked(self, t: Any, ds: Dataset, tif: Any, series: Any, src: ByteSource, where: str) -> DocumentChanges:
        """Pages appended to the file of a one-page dataset with no maximum shape (one a file written
        into this view made: a time lapse written frame by frame:
        ``tifffile.imwrite(..., append="force")`` per frame, ``tiffcp -a``): the image becomes a
        stack of pages, a new dataset of one more dimension under the same name, keeping the
        old one's attributes the file does not set; the old dataset is removed. Refused as before
        (EINVAL) when the dataset is linked elsewhere too or is a dimension scale or has scales:
        what refers to it would be lost."""
        path = t.child_path(written_stem(t.rest[0]))
        refs = sum(1 for g in t.model.groups.values() for lk in g.links.values()
                   if lk.kind == "hard" and lk.id == ds.id)
        tied = sorted(k for k in _RANK_BOUND_REFS if k in ds.attributes)
        if refs != 1 or tied:
            why = f"it is linked {refs} times" if refs != 1 else f"it has {', '.join(tied)}"
            raise InvalidInput(f"{where}: pages appended to the file of dataset {path} would make it a stack of "
                               f"one more dimension; {why}, so it cannot be replaced by one")
        parent: Group = t.obj
        out = self._new(t, parent, written_stem(t.rest[0]) or "", tif, src, where, series)
        new = next(d for d in out.created.datasets.values())  # type: ignore[union-attr]
        for k, a in ds.attributes.items():
            if k not in new.attributes and k not in _RANK_BOUND:
                new.attributes[k] = a
        out.removed.append(ds.id)
        log.info("%s: %d pages appended to the one-page dataset %s make it a %s stack", where,
                 new.shape.array_shape[0] - 1, path, "x".join(str(d) for d in new.shape.array_shape))
        return out

    def _whole_chunk(self, ds: Dataset, pipe: Pipeline, img: Segments, src: ByteSource,
                     coords: tuple[int, ...], where: str, cache: SegmentCache | None = None) -> bytes:
        region = chunk_region(ds, coords)
        block = values.fill_array(ds.type, ds.fill_value, tuple(ds.chunks))
        block[tuple(slice(0, s.stop - s.start) for s in region)] = \
            values.complex_pairs(img.read(src, region, where, cache=cache))
        return _encode(ds, pipe, block)

    @staticmethod
    def _attributes(ds: Dataset, tif: Any, series: Any, lay: SeriesLayout) -> tuple[dict[str, Attribute], list[str]]:
        """(attributes to set, to remove): resolution (when the file gives a unit), ImageJ metadata, the
        writer's own ImageDescription and GeoTIFF/GDAL tags the file carries, where they differ from
        the dataset's; and, when the file carries GeoTIFF/GDAL tags (a georeferencing writer says all
        it means), those of the dataset it no longer has: a nodata value, CRS or transform the new file
        dropped must not be served with its pixels. A file with none of them (a plain picture written
        back over a map) leaves the dataset's. The descriptive tags (described.py: Make, Artist,
        Orientation...) are one such group too."""
        got = image_attributes(tif, series, lay.key, lay.axes)
        if unedited_cf_nodata(ds, got):
            got.pop("GDAL_NODATA")
        gone: list[str] = []
        for group in (GEO_TAG_NAMES, DESCRIPTIVE_NAMES):
            said = [k for k in got if k in group]
            gone += sorted(k for k in group if said and k in ds.attributes and k not in said)
        unit = got.get("resolution_unit")
        keep = {k: v for k, v in got.items() if k.startswith("imagej_") or k in GEO_TAG_NAMES or k in KEPT_TEXT
                or k in DESCRIPTIVE_NAMES or (k in REPLACED_ATTRIBUTES and unit is not None and unit[2] != "none")}
        out = {}
        for k, (typ, shape, value) in keep.items():
            old = ds.attributes.get(k)
            if old is not None and old.value == value and old.shape.to_json() == shape.to_json() and \
                    T.resolved(old.type).to_json() == T.resolved(typ).to_json():
                continue
            out[k] = Attribute(k, typ, shape, value, now())
        return out, gone


# -- helpers ------------------------------------------------------------------------------
# attributes that say something per dimension: not carried to a dataset of one more (_stacked)
_RANK_BOUND = frozenset({"axes", "_ARRAY_DIMENSIONS", "DIMENSION_LABELS", "_Netcdf4Coordinates", "_Netcdf4Dimid",
                         "element_size_um", "scale", "pixel_size"})
# attributes by which other objects refer to a dataset (HDF5 dimension scales): it is never replaced
_RANK_BOUND_REFS = ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS")


def _geo_change(ds: Dataset, key: Any, served_extra: list[str],
                served_geo: dict[str, Any] | None = None) -> ObjectChange | None:
    """GeoTIFF/GDAL tags edited in place (``gdal_edit.py -a_srs/-a_ullr/-a_nodata/-mo``,
    ``-unsetnodata``): the attributes whose tag now says something else, and those whose tag
    the view's file served and the file no longer has; ExtraSamples set in place (``gdal_edit.py
    -colorinterp_2 alpha``) as the ``extrasamples`` attribute; the descriptive tags (described.py:
    ``tiffset -s 315``, ``gdal_edit.py -mo TIFFTAG_ARTIST=...``) as theirs. Georeferencing the
    view derived from CF attributes and the editor left as served stays derived (geo.py)."""
    got = {**geo_attributes(key), **descriptive_attributes(key)}
    for name in unedited_cf_tags(ds, got, served_geo or {}):
        got.pop(name, None)
    if unedited_cf_nodata(ds, got):
        got.pop("GDAL_NODATA")
    extra = extra_samples(key)
    if extra != served_extra and len(extra) == len(served_extra):
        got["extrasamples"] = (T.StringType(None, "utf8", "nullterm"), Shape("simple", (len(extra),)), extra)
    served = {name for name, _ in geo_tags(ds) + descriptive_tags(ds)}
    change = ObjectChange(ds.id)
    for k, (typ, shape, value) in got.items():
        old = ds.attributes.get(k)
        if old is not None and old.value == value and old.shape.to_json() == shape.to_json() and \
                T.resolved(old.type).to_json() == T.resolved(typ).to_json():
            continue
        change.set_attributes[k] = Attribute(k, typ, shape, value, now())
    change.remove_attributes = sorted(served - set(got))
    return None if change.is_empty() else change


EXTRA_SAMPLES_TAG = 338  # kept as the attribute ``extrasamples`` (_geo_change)
# tags an in-place edit changes with the tiles (where they are), that geo.py and described.py keep
# (_geo_change), or that writers set for themselves (Software)
_LAYOUT_TAGS = frozenset({273, 279, 305, 324, 325, EXTRA_SAMPLES_TAG, *(g.code for g in GEO_TAGS),
                          *DESCRIPTIVE_CODES})


def _plain_tags(page: Any) -> dict[int, tuple[str, Any]]:
    """A page's tags other than its tiles' offsets and byte counts and the GeoTIFF/GDAL ones."""
    return {t.code: (t.name, t.value) for t in page.tags.values() if t.code not in _LAYOUT_TAGS}


def _tags_changed(served: dict[int, tuple[str, Any]], key: Any) -> list[str]:
    """Names of the tags (other than layout and geo ones) a file edited in place added, removed or
    changed from those the view's file served (``tiffset``, tifffile's ``TiffTag.overwrite``)."""
    now_ = _plain_tags(key)
    if 270 in now_ and getattr(key, "description", None) == getattr(key, "shaped_description", None):
        now_.pop(270)  # tifffile's shaped JSON (gdalwarp copies a source's into the file it updates): no edit
        served.pop(270, None)
    out = []
    for code in sorted(set(served) | set(now_)):
        a, b = served.get(code), now_.get(code)
        if a is None or b is None:
            out.append((a or b)[0])  # type: ignore[index]
            continue
        try:
            same = bool(np.array_equal(np.asarray(a[1], dtype=object), np.asarray(b[1], dtype=object))) \
                if not isinstance(a[1], (str, bytes)) else a[1] == b[1]
        except Exception:  # noqa: BLE001 - values numpy cannot compare: as text
            same = repr(a[1]) == repr(b[1])
        if not same:
            out.append(a[0])
    return out


def _dtype(page: Any, tif: Any) -> np.dtype | None:
    try:
        return np.dtype(page.dtype).newbyteorder(tif.byteorder)
    except TypeError:
        return None


def _same_type(ds: Dataset, dtype: np.dtype) -> bool:
    if dtype.kind == "c":  # complex: stored as the {r, i} compound
        have_c = sample_dtype(ds)
        return have_c is not None and have_c.kind == "c" and have_c.itemsize == dtype.itemsize
    have = stored_dtype(ds)
    if have.kind == dtype.kind and have.itemsize == dtype.itemsize:
        return True
    return have.itemsize == dtype.itemsize == 1 and {have.kind, dtype.kind} <= {"b", "u"}


def _same_value(a: np.ndarray, b: Any) -> bool:
    """One element equal to another (NaN equal to NaN)."""
    x, y = np.asarray(a), np.asarray(b)
    if x.dtype.kind in "fc" or y.dtype.kind in "fc":
        return bool(np.all((x == y) | (np.isnan(x) & np.isnan(y))))
    return bool(np.all(x == y))


def _resized(ds: Dataset, dims: tuple[int, ...]) -> Dataset:
    """A copy of ``ds`` with another extent (its chunk grid; nothing stored)."""
    import copy

    out = copy.copy(ds)
    out.shape = Shape("simple", tuple(dims), ds.shape.maxdims)
    return out


def _same_bytes(img: Segments, ds: Dataset, pipe: Pipeline) -> bool:
    """Are the segments' bytes, as they are, what the dataset stores (same codec, byte order)?"""
    return [f.id for f in img.filters or ()] == list(pipe.ids) and img.dtype.str == stored_dtype(ds).str \
        and (not pipe.is_identity or not img.filters)


def _check_segment(ds: Dataset, img: Segments, src: ByteSource, n: int, t: int, where: str) -> None:
    """A segment that is a whole chunk decodes to exactly one chunk (else the file is refused)."""
    data = img.raw(src, n, t, where)
    if data is None:
        return
    if img.filters is None:
        _check_bools(ds, img.segment(src, n, t, where), where, n, t)
        return
    inc = Incoming(img.dtype, tuple(img.filters))
    try:
        raw = inc.pipeline().decode(data, ds.chunk_nbytes) if img.filters else data
    except Exception as exc:  # noqa: BLE001 - zlib.error, zstd errors, CodecError
        raise CodecError(f"{where}: page {n} segment {t} does not decode ({' '.join(str(exc).split())})") from None
    if len(raw) != ds.chunk_nbytes:
        raise InvalidInput(f"{where}: page {n} segment {t} decodes to {len(raw)} bytes, not {ds.chunk_nbytes}")
    _check_bools(ds, np.frombuffer(raw, dtype=img.dtype), where, n, t)


def _check_bools(ds: Dataset, values_: np.ndarray | None, where: str, n: int | None = None,
                 t: int | None = None) -> None:
    """A boolean dataset (shown as 8-bit 0 and 1) takes 8-bit pixels of 0 and 1 only: others
    (a viewer's 255 for "on") would all be stored as 1."""
    if values_ is None or stored_dtype(ds).kind != "b" or values_.dtype.kind == "b" or not values_.size:
        return
    if bool(np.any(values_ > 1)):
        at = f"page {n} segment {t}" if n is not None else "the image"
        raise InvalidInput(f"{where}: {at} holds values other than 0 and 1; the dataset is boolean")


def _chunks_of(ds: Dataset, box: tuple[slice, ...]) -> Iterator[tuple[int, ...]]:
    ranges = [range(s.start // c, -(-s.stop // c)) for s, c in zip(box, ds.chunks)]
    return itertools.product(*ranges)


def _as_values(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Stored elements as values of ``dtype`` (a copy): ``{r, i}`` compounds as complex."""
    if dtype.kind == "c" and block.dtype.names:
        half = block.dtype[0]
        order = half.byteorder if half.byteorder in "<>" else "="
        block = np.ascontiguousarray(block).view(np.dtype(f"{order}c{2 * half.itemsize}")).reshape(block.shape)
    return block.astype(dtype)


def _encode(ds: Dataset, pipe: Pipeline, block: np.ndarray) -> bytes:
    raw = values.as_layout(block, stored_dtype(ds)).tobytes()
    return pipe.encode(raw) if not pipe.is_identity else raw


def _bind(fn: Callable[..., bytes], *args: Any) -> ChunkBytes:
    return lambda: fn(*args)


def _each(fn: Callable[[Any], Any], items: Any) -> list[Any]:
    """``fn`` over ``items`` in a few threads (decoding releases the GIL), at most a window
    ahead; the first error is raised."""
    out: list[Any] = []
    window = VALIDATE_THREADS * 2
    with ThreadPoolExecutor(VALIDATE_THREADS, thread_name_prefix="polyfs-tiff-check") as pool:
        pending: list[Any] = []
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                out.append(pending.pop(0).result())
        for fut in pending:
            out.append(fut.result())
    return out


def make_ingester(ctx: ViewContext) -> TiffIngester:
    return TiffIngester(ctx)


def _say_levels_dropped(tif: Any, where: str) -> None:
    """One log line when the file holds reduced-resolution levels (``gdaladdo`` overviews
    appended after the pages its description lists, OME/tifffile pyramids): the view's file
    is one dataset, its full-resolution image."""
    series = [s for s in tif.series if s is not None and len(s.pages)]
    full = full_resolution(series)  # the others are levels too (dropped.is_reduced)
    levels = max((len(getattr(s, "levels", None) or [s]) for s in full), default=1) - 1 + len(series) - len(full)
    appended = 0
    for i in range(sum(len(s.pages) for s in series), len(tif.pages)):
        p = tif.pages[i]
        p = p.aspage() if p is not None else None
        if p is not None and int(getattr(p, "subfiletype", 0)) & 1:
            appended += 1
    dropped = max(levels, appended)
    if dropped:
        log.warning("%s: %d reduced-resolution level(s) (overviews, pyramid levels) are not kept; the "
                    "full-resolution image is", where, dropped)


def _mask_shared(t: Any, image: Dataset, name: str) -> bool:
    """Whether the mask ``name`` must outlive ``rm`` of this link to ``image``: the image is linked
    elsewhere too (an h5py hard link: the image stays) or another dataset of the group names the
    same mask (a copy made through h5py, ``h5copy`` or xarray keeps the attribute)."""
    links = sum(1 for g in t.model.groups.values() for lk in g.links.values()
                if lk.kind == "hard" and lk.id == image.id)
    if links > 1:
        return True
    for other in t.obj.links:
        try:
            obj = t.model.resolve(t.child_path(other))
        except NotFound:
            continue
        if isinstance(obj, Dataset) and obj.id != image.id and named_mask(obj) == name:
            return True
    return False
