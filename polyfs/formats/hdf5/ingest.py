"""What writers (h5py, netCDF4) do to ``hdf5/<stem>.h5``, as store changes.

The HDF5 view is one document per domain. At flush the written file (the
view's bytes plus the writer's dirty pages) is opened read-only by h5py's
file-object driver and read by the HDF5 library itself:

- a file opened over the view's file (``"r+"``, ``"a"``) is compared with the
  model (diff.py): new, changed and deleted objects, links, attributes,
  extents and chunks;
- a file written from scratch (``"w"``: created, or truncated and rewritten) is
  the whole domain: it is imported as ``polyfs import`` would, all or nothing,
  into a new domain or in place of the old one (whose objects are deleted
  once the new ``.domain.json`` is in the store).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ...errors import InvalidInput, PolyfsError, UnsupportedType
from ...model import keys
from ...model.tree import DomainModel
from ...model.writer import DomainWriter
from ...views.base import ViewContext
from ...writes.protocol import ByteSource, DocumentChanges, SourceReader, WrittenFile
from .diff import DocumentDiff, default_options
from .render import Planner
from .view import OpenedFile
from .filters import h5py_with_plugins
from .source import HDF5Importer

log = logging.getLogger(__name__)

# what the HDF5 library (through h5py) raises reading a damaged file: a corrupt written file is bad
# input (EINVAL, one log line), not an internal error
H5_DAMAGE = (OSError, RuntimeError, ValueError, KeyError, TypeError, IndexError, OverflowError)


def _damaged(where: str, exc: BaseException) -> InvalidInput:
    return InvalidInput(f"{where}: not a readable HDF5 file ({type(exc).__name__}: {' '.join(str(exc).split())})")


class Hdf5Ingester:
    """Reads a flushed ``hdf5/<stem>.h5`` (changes validated before anything is committed)."""

    document = True

    def __init__(self, ctx: ViewContext) -> None:
        self.ctx = ctx
        self.catalog = ctx.catalog

    def is_document(self, t: Any) -> bool:
        return t.rest == []

    def refuse_head(self, head: bytes) -> str | None:
        """A netCDF-3 (classic) file is refused at its first write, not at close: netCDF-C's
        classic layer ignores the error close() returns, and the file would vanish unseen."""
        if head[:3] == b"CDF" and head[3:4] in (b"\x01", b"\x02", b"\x05"):
            return ("a netCDF-3 (classic) file: this view stores HDF5 files only "
                    "(write format NETCDF4 or NETCDF4_CLASSIC)")
        return None

    def document_path(self, t: Any) -> str | None:
        return "/" if t.rest == [] else None  # the file is the domain

    def replaces_domain(self, t: Any) -> bool:
        """A file written from scratch here is a whole domain."""
        return t.rest == []

    def _open(self, src: ByteSource, where: str) -> Any:
        h5py = h5py_with_plugins()
        try:
            return h5py.File(SourceReader(src), "r")
        except (OSError, ValueError, RuntimeError) as exc:
            raise InvalidInput(f"{where}: not a readable HDF5 file ({' '.join(str(exc).split())})") from None

    def document_changes(self, t: Any, src: WrittenFile, where: str) -> DocumentChanges:
        model: DomainModel = t.model
        opened = _opened(src, model)
        if opened is not None:  # compared with what the writer opened, applied to what is there now
            planner, hf, base_model = opened.planner, opened.file, opened.model
        else:
            planner, base_model = Planner(model, self.ctx), model
            try:
                hf = planner.build()
            except (ValueError, KeyError, OverflowError) as exc:
                raise UnsupportedType(f"{where}: the view of {model.path} cannot be planned: {exc}") from exc
        try:
            return self._diff(src, where, planner, hf, base_model, model)
        except H5_DAMAGE as exc:
            raise _damaged(where, exc) from None

    def _diff(self, src: WrittenFile, where: str, planner: Planner, hf: Any, model: DomainModel,
              current: DomainModel) -> DocumentChanges:
        with self._open(src, where) as f:
            ub = hf.plan.base  # bytes before the superblock: none in this view (superblock at 0)
            if ub and not src.untouched(0, ub) and any(src.read(0, ub)):
                raise UnsupportedType(f"{where}: the {ub}-byte user block cannot be written")
            # planned chunk and header positions describe the writer's base file when they are its
            # plan (or one of the same size from the same model)
            base = getattr(src, "base", None)
            trusted = base is not None and getattr(base, "size", -1) == hf.size
            return DocumentDiff(self.catalog, model, planner, hf, f, src, where, trusted, current).run()

    def new_document(self, t: Any, src: ByteSource, where: str) -> None:
        dom = t.domain or t.new_domain_path()
        if dom is None:
            raise InvalidInput(f"{where}: not a domain's file")
        old: DomainModel | None = t.model
        with self._open(src, where) as f:
            _refuse_user_block(f, src, where)
            writer = DomainWriter(self.catalog, dom, overwrite=old is not None)
            try:
                imp = HDF5Importer(Path(where), writer, default_options(where))
                imp.files_dir = None  # a file written here has no directory of its own files
                imp.run_file(f)
                writer.commit()  # the new .domain.json last: the domain (or its new version) appears at once
            except H5_DAMAGE as exc:
                writer.abort()
                raise _damaged(where, exc) from None
            except BaseException:
                writer.abort()
                raise
        self.catalog.invalidate(dom)
        self.catalog.touch(dom)
        if old is not None and old.domain.root and old.domain.root != writer.root_id:
            for prefix in (keys.domain_db_prefix(old.domain.root), *keys.derived_prefixes(old.domain.root)):
                try:
                    self.catalog.store.delete_prefix(prefix)
                except PolyfsError as exc:  # unreachable now: polyfs check --repair removes them
                    log.warning("%s: objects of the replaced domain are left in the store: %s", where, exc)


def _opened(src: WrittenFile, now: DomainModel) -> OpenedFile | None:
    """The plan of the view's file the writer opened (its base), when it is of this version
    of the domain (the same root group: not replaced since) and the file the writer opened."""
    base = getattr(src, "base", None)
    opened = getattr(getattr(base, "node", None), "opened", None)
    if opened is None:
        return None
    got = opened()
    if not isinstance(got, OpenedFile) or got.model.domain.root != now.domain.root or got.file.size != base.size:
        return None
    return got


TIFF_HEADERS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")


def _refuse_user_block(f: Any, src: ByteSource, where: str) -> None:
    """A user block holding data (``h5jam``'s text, a polyglot header) has no place in the
    store: the view's file starts with its superblock, so it would be lost without a word.
    One of zeros (h5py ``userblock_size=`` alone) holds nothing and is dropped, and so is a
    TIFF header: a polyglot file's (``polyglot/<stem>/<path>.h5`` copied in), which describes
    the file's own data and is made again by the views."""
    size = int(f.userblock_size or 0)
    if not size or src.read(0, 4) in TIFF_HEADERS:
        return
    for at in range(0, size, 1 << 20):
        if any(src.read(at, min(1 << 20, size - at))):
            raise UnsupportedType(f"{where}: its {size}-byte user block holds data, which the store cannot "
                                  f"keep (nothing was stored; h5unjam removes it)")


def make_ingester(ctx: ViewContext) -> Hdf5Ingester:
    return Hdf5Ingester(ctx)
