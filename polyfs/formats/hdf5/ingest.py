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
  once the new ``.domain.json`` is in the store). Its user block (a MAT-file's header)
  is kept with the domain, and a writer's change to it in place too (userblock.py).
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from ...errors import InvalidInput, PolyfsError, UnsupportedType
from ...model.changes import ObjectChange
from ...model.tree import DomainModel
from ...model.writer import DomainWriter, delete_root
from ...views.base import ViewContext
from ...writes.protocol import ByteSource, DocumentChanges, SourceReader, WrittenFile
from . import drivers
from .diff import DocumentDiff, default_options
from .render import Planner
from .view import OpenedFile
from .filters import h5py_with_plugins
from .source import HDF5Importer
from .userblock import USER_BLOCK_HINT, changed_hints, of_bytes, read_user_block

log = logging.getLogger(__name__)

# what the HDF5 library (through h5py) raises reading a damaged file: a corrupt written file is bad
# input (EINVAL, one log line), not an internal error
H5_DAMAGE = (OSError, RuntimeError, ValueError, KeyError, TypeError, IndexError, OverflowError)


MAT5_HEADER = b"MATLAB 5.0 MAT-file"  # v5 (also -v6, -v7) MAT-files' header text: not HDF5

# the temporaries tools write beside a file and rename over it: NCO's ``x.nc.pid123.ncks.tmp``
# (every operator but ncatted/ncrename without -o), rsync's ``.x.nc.AbC123``
SCRATCH_NAMES = (re.compile(r"(?P<stem>.+)\.pid\d+\.[A-Za-z0-9_]+\.tmp"),
                 re.compile(r"\.(?P<stem>.+)\.[A-Za-z0-9]{6}"))


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
        if head[:16] == MAT5_HEADER[:16]:  # MATLAB -v6/-v7, scipy.io.savemat
            return ("a MATLAB 5.0 (v6/v7) MAT-file, not HDF5: this view stores HDF5 files only "
                    "(save with -v7.3, or hdf5storage.savemat(..., format='7.3'))")
        return None

    def scratch_for(self, name: str) -> str | None:
        """The file name whose writer's temporary ``name`` is (kept in memory until renamed
        over it, which stores it), or None. NCO writes every output this way."""
        for pattern in SCRATCH_NAMES:
            hit = pattern.fullmatch(name)
            if hit is not None:
                return hit.group("stem")
        return None

    def document_path(self, t: Any) -> str | None:
        return "/" if t.rest == [] else None  # the file is the domain

    def companion_paths(self, t: Any) -> list[str]:
        return []  # the domain is all there is

    def replaces_domain(self, t: Any) -> bool:
        """A file written from scratch here is a whole domain."""
        return t.rest == []

    def _open(self, src: ByteSource, where: str) -> Any:
        h5py = h5py_with_plugins()
        try:
            return h5py.File(SourceReader(drivers.single_member(src)), "r")  # a whole family: one file
        except (OSError, ValueError, RuntimeError) as exc:
            why = drivers.refusal(where, src.size(), src.read)  # a family or split member: say so
            if why is not None:
                raise (UnsupportedType if why[1] else InvalidInput)(f"{where}: {why[0]}") from None
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
            hint = _user_block_change(f, src, where, hf.plan, current)
            # planned chunk and header positions describe the writer's base file when they are its
            # plan (or one of the same size from the same model)
            base = getattr(src, "base", None)
            trusted = base is not None and getattr(base, "size", -1) == hf.size
            changes = DocumentDiff(self.catalog, model, planner, hf, f, src, where, trusted, current).run()
        if hint is not None:  # with the root group's other changes, if any: one write of its JSON
            same = next((c for c in changes.objects if c.obj_id == hint.obj_id), None)
            if same is None:
                changes.objects.append(hint)
            elif same.view_hints is None:
                same.view_hints = hint.view_hints
            else:  # the diff's new hint record, with the user block's entry as the file has it
                assert hint.view_hints is not None
                merged = {k: v for k, v in same.view_hints.items() if k != USER_BLOCK_HINT}
                if USER_BLOCK_HINT in hint.view_hints:
                    merged[USER_BLOCK_HINT] = hint.view_hints[USER_BLOCK_HINT]
                same.view_hints = merged
        return changes

    def new_document(self, t: Any, src: ByteSource, where: str) -> None:
        dom = t.domain or t.new_domain_path()
        if dom is None:
            raise InvalidInput(f"{where}: not a domain's file")
        old: DomainModel | None = t.model
        with self._open(src, where) as f:
            block = read_user_block(int(f.userblock_size or 0), src.read, where)  # before anything is stored
            writer = DomainWriter(self.catalog, dom, overwrite=old is not None)
            try:
                imp = HDF5Importer(Path(where), writer, default_options(where))
                imp.user_block = block  # a MAT-file's header: served again (userblock.py)
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
            def left(what: str, exc: Exception) -> None:  # unreachable now: polyfs check --repair removes them
                if not isinstance(exc, PolyfsError):
                    raise exc
                log.warning("%s: objects of the replaced domain are left in the store (%s): %s", where, what, exc)

            delete_root(self.catalog.store, old.domain.root, left)


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


def _user_block_change(f: Any, src: WrittenFile, where: str, plan: Any, model: DomainModel) -> ObjectChange | None:
    """The root group's new hints when the writer changed the user block in place (``r+b``
    over a MAT-file's header, as ``hdf5storage`` writes it after h5py closed the file).
    HDF5 cannot move the superblock of an open file: another size is bad input."""
    size = int(f.userblock_size or 0)
    if size != plan.base:
        raise InvalidInput(f"{where}: the superblock moved from offset {plan.base} to {size}")
    if not size or src.untouched(0, size):
        return None
    block = of_bytes(bytes(src.read(0, size)), where, new_file=False)  # the writer's own bytes, kept
    root = model.groups.get(model.domain.root or "")
    new = changed_hints(root, block) if root is not None else None
    return None if new is None else ObjectChange(root.id, view_hints=new)


def make_ingester(ctx: ViewContext) -> Hdf5Ingester:
    return Hdf5Ingester(ctx)
