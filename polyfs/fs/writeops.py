"""The write half of the FUSE operations: buffers, flush-time ingest, tree changes.

:class:`WriteSide` is held by :class:`~polyfs.fs.operations.Operations` (composition: it
reaches the FUSE core only through the :class:`FsCore` protocol).

Format knowledge stays in :mod:`polyfs.writes`; this module only moves bytes
between the kernel and :class:`~polyfs.fs.overlay.PendingFile` buffers and
calls the write service at the moments POSIX tools expect: flush/fsync of a
written file (so ``close()`` returns the error), ``rename`` of a temporary
onto a real name (tensorstore's ``X.__lock`` -> ``X``), ``truncate`` without
an open file, ``mkdir``/``unlink``/``rmdir``.
"""
from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

import pyfuse3

from .. import memory
from ..errors import (CrossDevice, Incomplete, InvalidInput, IsADirectory, NotFound, NotPermitted, PolyfsError,
                      UnsupportedType, one_line)
from ..model.schema import Dataset, Group
from ..views.root import domain_leaf_paths
from ..writes.protocol import Sidecars
from ..writes.router import Target
from ..views.base import FileNode, Node
from .inodes import InodeEntry, InodeTable
from .kernelcache import KernelNotifier, entries_below
from ..reader import Reader
from ..vfile import VFile
from .overlay import Overlay, PendingDir, PendingFile, WriteBudget

if TYPE_CHECKING:  # pragma: no cover
    from ..writes.service import WriteService

log = logging.getLogger(__name__)
NAME_MAX = 255  # bytes of one path component, as statfs reports it (and a disk refuses beyond)
SEEN_LAYOUTS = 4  # layouts of one file kept per process for a later write's merge (note_read_file)


def check_name_length(path: str) -> None:
    """A name made in a view is at most ``NAME_MAX`` bytes, as on a disk (statfs says so):
    the kernel passes FUSE names of up to 1024 bytes, and a group or dataset made under a
    longer name could be neither copied out of the mount nor made again on any disk."""
    name = path.rsplit("/", 1)[-1]
    size = len(os.fsencode(name))
    if size > NAME_MAX:
        raise OSError(errno.ENAMETOOLONG, f"{path[:80]}...: a name made in the views is at most "
                                          f"{NAME_MAX} bytes (this one is {size})")


class WriteHandle:
    """An open file description that may write. Who opened it, and the base of its
    read-modify-write, belong to the open, not to the file: two processes may open one
    chunk file in turn while the first one's release is still on its way."""

    def __init__(self, entry: InodeEntry, pending: PendingFile, writer: int, base_time: float) -> None:
        self.entry = entry
        self.pending = pending
        self.writer = writer
        self.base_time = base_time
        # bytes put through this open (a write, a truncation to a non-zero size); an open that
        # only emptied the file stores nothing at FLUSH, see ``flush_handle``
        self.wrote = False
        # its first bytes were refused by the format's head check (a netCDF-3 header in hdf5/):
        # the writer heard it at write(); its close and release store, and log, nothing more
        self.head_refused = False


@dataclass
class _CreatePlan:
    """What ``create`` learned of a new name in one worker-thread call: a refusal by the
    view's format, the file already there, or what a new file there would be."""
    refused: str | None = None
    existing: Node | None = None
    target: Target | None = None
    ingest: bool = False  # stored at flush (else scratch, or refused)
    scratch: bool = False  # a tool's temporary above the domains (ScratchNames)
    sidecar: tuple[str, str] | None = None  # see WriteSide._sidecar_of
    head_check: Callable[[bytes], str | None] | None = None


class ViewFile:
    """The view's own file under a file opened for writing without ``O_TRUNC`` (the overlay's base).
    ``node`` is the view's node it came from: a view's ingester may read what it planned there
    (the HDF5 view compares a written file with the plan its writer opened)."""

    def __init__(self, reader: Reader, vfile: VFile, node: FileNode | None = None) -> None:
        self.reader, self.vfile, self.size, self.node = reader, vfile, vfile.size, node

    def read(self, off: int, n: int) -> bytes:
        return bytes(self.reader.read(self.vfile, off, n))


class FsCore(Protocol):
    """What the write side needs of the FUSE operations it serves (operations.py)."""

    kernel: KernelNotifier  # tells the kernel to drop what it caches of changed files

    inodes: InodeTable
    reader: Reader

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread."""
        ...

    def new_fh(self, handle: Any) -> int: ...

    def handle(self, fh: int) -> Any: ...

    def node_attr(self, node: Node, ino: int, path: str = "") -> pyfuse3.EntryAttributes: ...

    def child(self, parent: InodeEntry, name: str) -> tuple[str, Node]: ...

    def resolve(self, path: str) -> Node: ...

    async def permit(self, path: str, action: str, ctx: Any) -> None:
        """Raise ``AccessDenied`` unless the request's user may do ``action`` (an HSDS ACL
        action) to the domain of ``path`` (access.py)."""
        ...

    def bump(self) -> None:
        """Views may have re-rendered: nodes looked up before must be resolved again."""
        ...

    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes: ...


class WriteSide:
    """Everything a writable mount adds to reading: files being written, flush-time ingest,
    tree changes. :class:`~polyfs.fs.operations.Operations` holds one and delegates to it."""

    def __init__(self, fs: FsCore, service: "WriteService", budget: WriteBudget | None = None) -> None:
        self.fs = fs
        self.inodes = fs.inodes
        self.service = service
        service.on_change = fs.bump
        self.overlay = Overlay()
        self.budget = budget or WriteBudget()
        self._read_at: dict[tuple[int, str], float] = {}
        # (process, path) -> the layouts it read there (by identity: re-reading an unchanged file
        # adds nothing; a new layout only comes with a write)
        self._seen: dict[tuple[int, str], dict[int, VFile]] = {}
        self._tgids: dict[int, int] = {}
        self._volatile: tuple[str, ...] = ()  # view paths of domains written through this mount

    # -- helpers ------------------------------------------------------------------------
    def _writable(self, path: str, new: bool = False) -> None:
        """``path`` is in a writable view; ``new``: a name being made, which must be text (the
        Zarr, N5 and HDF5 link names of the store's JSON are Unicode: a latin-1 byte name
        made here could not be written back through ``hdf5/``)."""
        self.service.router.view_of(path)
        if new:
            try:
                path.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInput(f"{os.fsencode(path)!r}: a name made in the views must be UTF-8") from None
            check_name_length(path)

    def _changed(self, path: str, domain: str | None = None) -> None:
        """The store changed under ``path``'s domain (``domain``, when the caller routed it
        before the change: a deleted domain no longer routes): re-resolve nodes, and have the
        kernel drop what it cached of that domain's files in every view. The domain turns
        volatile before nodes are re-resolved, so no lookup in between is cached for long."""
        try:
            prefixes = set(self.service.view_prefixes(path))
        except Exception:  # noqa: BLE001 - a domain just deleted: its routed paths follow
            prefixes = set()
        if domain:
            prefixes |= set(domain_leaf_paths(domain))
        if prefixes and not prefixes.issubset(self._volatile):
            self._volatile = tuple(sorted(set(self._volatile) | prefixes))
        self.fs.bump()
        self.fs.kernel.push_entries(entries_below(self.inodes, prefixes))

    def volatile(self, path: str) -> bool:
        """True for paths of domains written through this mount (kernel caches stay off)."""
        return bool(self._volatile) and any(path == p or path.startswith(p + "/") for p in self._volatile)

    def process_of(self, tid: int) -> int:
        """FUSE names the calling *thread*; a read-modify-write may read in one thread and
        write in another, so bases are kept per process (thread group)."""
        tgid = self._tgids.get(tid)
        if tgid is None:
            tgid = tid
            try:
                with open(f"/proc/{tid}/status", "rb") as f:
                    for line in f:
                        if line.startswith(b"Tgid:"):
                            tgid = int(line.split()[1])
                            break
            except OSError:
                pass
            if len(self._tgids) > 65536:
                self._tgids.clear()
            self._tgids[tid] = tgid
        return tgid

    def note_read_file(self, pid: int, path: str, vfile: VFile) -> None:
        """The stored objects a process saw in a file it read (since it last wrote it): a
        chunk it leaves out of what it writes back is deleted only if it had seen it."""
        if len(self._seen) > 10_000:
            self._seen.clear()
        seen = self._seen.setdefault((self.process_of(pid), path), {})
        seen.pop(id(vfile), None)
        seen[id(vfile)] = vfile  # keys listed at ingest
        if len(seen) > SEEN_LAYOUTS:
            # A process that reads a file others keep rewriting, and never writes it, would
            # otherwise hold every layout it ever read. The oldest go: a chunk only they
            # showed was replaced or deleted since, and one missing here is never deleted.
            del seen[next(iter(seen))]

    def _misses_above(self, writer: int, path: str) -> list[str]:
        """The directories above ``path`` that ``writer`` looked up and found missing (``c``
        before any ``c/0/0`` existed), nearest first."""
        parts = path.split("/")
        out = []
        for k in range(len(parts) - 1, 0, -1):
            above = "/".join(parts[:k])
            read = self._seen.get((writer, above))
            if read is not None and not any(vf.object_keys() for vf in read.values()):
                out.append(above)
        return out

    def _missed_above(self, writer: int, path: str) -> float | None:
        """When ``writer`` found no directory above ``path``: it read "no file" there, which no
        record of ``path`` itself says. A writer that then writes a shard it could not read
        must not have the chunks another process stored meanwhile deleted as ones it dropped."""
        times = [self._read_at[(writer, p)] for p in self._misses_above(writer, path) if (writer, p) in self._read_at]
        return min(times) if times else None

    def note_read_open(self, pid: int, path: str, at: float) -> None:
        """When a process first read a chunk file since it last wrote it: the base of its
        read-modify-write. The *first* read, because a tool may read a shard's index and its
        chunks in several opens: what it writes back reflects the oldest of them."""
        if len(self._read_at) > 100_000:
            self._read_at.clear()
        pending = self.overlay.get(path)
        if isinstance(pending, PendingFile) and pending.ingest:
            # another process is writing it: what this one reads is that file, which shows the
            # store as it was when *that* writer read it
            at = min(at, pending.base_time)
        self._read_at.setdefault((self.process_of(pid), path), at)

    def _pending_nowait(self, entry: InodeEntry, flags: int) -> PendingFile | None:
        """:meth:`_pending_for` on the FUSE loop when it needs no I/O: the file is being written
        here already (a create's own open) and nothing is to be truncated; else None."""
        return None if entry.unlinked else self._reopen(entry.path, flags, emptied_only=True)

    def _reopen(self, path: str, flags: int, emptied_only: bool = False) -> PendingFile | None:
        """The file being written at ``path``, opened once more (``opens`` counts under the
        overlay's lock, so a release racing this open never discards what is being opened),
        truncated for ``O_TRUNC``; None if none is. ``emptied_only``: None also when
        ``O_TRUNC`` would drop bytes (spilled pages: I/O, not for the FUSE loop)."""
        with self.overlay.lock:
            node = self.overlay.files.get(path)
            if not isinstance(node, PendingFile) or (emptied_only and flags & os.O_TRUNC and node.size() > 0):
                return None
            node.opens += 1
        if flags & os.O_TRUNC:
            node.truncate(0)
        return node

    def _pending_for(self, entry: InodeEntry, flags: int, pid: int) -> PendingFile:
        """The file's pending state, opened once more (see :meth:`_reopen`)."""
        path = entry.path
        if entry.unlinked:
            return self._orphan_for(entry, flags, pid)
        node = self._reopen(path, flags)
        if node is not None:
            return node
        base_time = self._read_at.get((self.process_of(pid), path), time.time())
        if isinstance(entry.node, PendingFile):  # retired since (stored, or refused): the view's file now
            entry.node = self.fs.resolve(path)
        ingest = self.service.is_ingestible(path)
        if not ingest and isinstance(entry.node, FileNode):
            # a file the view shows for a stored object (a TIFF image whose name starts with '.')
            # whose name the view's writes do not take: what is written would be kept nowhere
            # and the object left as it was, so the open is refused instead of the write lost
            why = NotPermitted(f"{path}: this view's file cannot be written back under this name "
                               f"(its writes are not stored); write the object through another view")
            log.warning("open refused (EPERM): %s", why)  # (errmap logs refused opens at debug only)
            raise why
        base = None
        if not flags & os.O_TRUNC and isinstance(entry.node, FileNode):
            node = entry.node.resolved()  # its file and its plan, of one version of the domain
            base = ViewFile(self.fs.reader, node.vfile(), node)  # read on demand, never copied whole
        pending = PendingFile(path, ingest, base_time, self.budget, base)
        pending.head_check = self.service.head_check(path) if pending.ingest else None
        pending.writer = self.process_of(pid)
        if flags & os.O_TRUNC:
            pending.dirty = True  # an emptied file is a change even if nothing is written
        pending.opens = 1
        self.overlay.add_file(pending)
        entry.node = pending
        return pending

    def _orphan_for(self, entry: InodeEntry, flags: int, pid: int) -> PendingFile:
        """An open of a file unlinked after the kernel looked its name up (``open(O_CREAT)``
        racing another process's ``unlink``: the kernel sends the open after dropping the
        directory's lock). As on a disk it opens that unlinked file, whose bytes are stored
        nowhere; tensorstore then finds it is not the file at the name and retries (ENOENT
        here failed its write)."""
        node = entry.node
        with self.overlay.lock:
            if isinstance(node, PendingFile) and not node.gone:
                node.opens += 1
                alive = True
            else:
                alive = False
        if alive:
            assert isinstance(node, PendingFile)
            if flags & os.O_TRUNC:
                node.truncate(0)
            return node
        orphan = PendingFile(entry.path, False, time.time(), self.budget)
        orphan.unlinked, orphan.opens, orphan.writer = True, 1, self.process_of(pid)
        entry.node = orphan
        return orphan

    def _close_one(self, p: PendingFile) -> bool:
        """One open of ``p`` ends; True if it was the last."""
        with self.overlay.lock:
            p.opens -= 1
            return p.opens <= 0

    def _retire(self, p: PendingFile) -> None:
        """A stored (or refused) file leaves the overlay and frees its pages, unless someone
        opened it meanwhile. One the overlay no longer holds (renamed onto its final name,
        replaced, unlinked while open) is freed too: nothing else would free it."""
        with self.overlay.lock:
            if p.opens > 0:
                return
            if self.overlay.files.get(p.path) is p:
                del self.overlay.files[p.path]
        p.discard()
        memory.trim()  # its pages are free: give them back
        self.fs.bump()

    def _ingest(self, pending: PendingFile, path: str | None = None, writer: int | None = None,
                base_time: float | None = None) -> None:
        """Hand a dirty file to the write service (in a worker thread), as written by ``writer``
        (default: the process that made the file) whose read-modify-write began at ``base_time``."""
        target = path or pending.path
        if not pending.dirty or not (pending.ingest or path is not None):
            return
        writer = pending.writer if writer is None else writer
        base_time = pending.base_time if base_time is None else base_time
        try:
            read = self._seen.get((writer, target))
            if read is None:
                missed = self._missed_above(writer, target)
                if missed is not None:  # it looked for the file and found no directory: saw no chunks
                    read, base_time = {}, min(base_time, missed)
            seen = set().union(*(vf.object_keys() for vf in read.values())) if read is not None else None
            made = self._dirs_of_group(target)
            self.service.ingest(target, pending, base_time, writer, seen)
        except Exception as exc:
            pending.dirty = False  # refused: the writer hears it from this flush, not again at release
            pending.incomplete = one_line(exc) if isinstance(exc, Incomplete) else None
            raise
        pending.dirty = False
        pending.incomplete = None
        if made and isinstance(self.service.route(target).obj, Dataset):
            for d in made:  # the group is an array now: its directories are its chunk directories
                self.overlay.add_dir(d)
        self._read_at.pop((writer, target), None)  # its next read-modify-write starts anew
        self._seen.pop((writer, target), None)
        for above in self._misses_above(writer, target):  # it knows what is there now: it wrote it
            self._read_at.pop((writer, above), None)
            self._seen.pop((writer, above), None)
        self._changed(target)

    def _dirs_of_group(self, path: str) -> list[str]:
        """The directories below the group whose metadata file ``path`` is (an array's metadata
        written there turns it into that array). rsync makes every directory of a tree
        (``x/c/0``) before it writes a file, and writes ``x/zarr.json`` first: the group and the
        empty groups ``mkdir`` made below it went, and rsync's next file in ``x/c/0`` got ENOENT
        (its chunks were never stored). They stay, as directories of the array, until removed."""
        if not self.service.is_metadata_file(path):
            return []
        t = self.service.route(path)
        if not isinstance(t.obj, Group) or not t.obj.links or t.model is None:
            return []
        out: list[str] = []
        todo = [(path.rsplit("/", 1)[0], t.obj)]
        while todo and len(out) < 100_000:  # groups only: an array's chunks are never walked
            where, group = todo.pop()
            for name, link in group.links.items():
                child = t.model.groups.get(link.id) if link.kind == "hard" else None
                if child is not None:
                    out.append(f"{where}/{name}")
                    todo.append((f"{where}/{name}", child))
        return out

    # -- opening for write ------------------------------------------------------------------
    async def open_write(self, entry: InodeEntry, flags: int, ctx) -> pyfuse3.FileInfo:
        self._writable(entry.path)
        if entry.node.is_dir:
            raise IsADirectory(entry.path)
        writer = self.process_of(ctx.pid)
        base_time = self._read_at.get((writer, entry.path), time.time())
        pending = self._pending_nowait(entry, flags)
        if pending is None:
            pending = await self.fs.run(self._pending_for, entry, flags, ctx.pid)
        pending.base_time = min(pending.base_time, base_time)  # its bytes are as old as its oldest writer's view
        fh = self.fs.new_fh(WriteHandle(entry, pending, writer, base_time))
        return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=True)

    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx):
        parent = self.inodes.get(parent_inode)
        text = os.fsdecode(name)
        path = self.inodes.child_path(parent, text)
        self._writable(path, new=True)
        await self.fs.permit(path, "update", ctx)  # a file's bytes, new or not, are data
        # one hand-off for every check: a create holds its directory locked in the kernel, so
        # each hand-off more delays every other create and rename there (a chunk per file)
        plan = await self.fs.run(self._plan_create, parent, text, path)
        if plan.refused:
            raise UnsupportedType(f"{path}: {plan.refused}")
        if plan.existing is not None:
            if flags & os.O_EXCL:
                raise FileExistsError(errno.EEXIST, path)
            entry = self.inodes.remember(path, plan.existing)
        else:
            target, ingest = plan.target, plan.ingest
            assert target is not None
            if (target.domain is None or not target.rest) and not ingest and not plan.scratch:
                names = sorted({target.suffix, *target.view.keeps_names} - {""})
                new = f", or a new domain here as <name>{' or <name>'.join(names)}" \
                    if target.domain is None and target.view.kind == "file" and names else ""
                raise NotPermitted(f"{path}: files can only be made inside a domain's directory{new} "
                                   f"(names are case-sensitive)" if new else
                                   f"{path}: files can only be made inside a domain's directory")
            if not ingest:
                self._refuse_orphan(path, plan.sidecar)
            pending = PendingFile(path, ingest, self._read_at.get((self.process_of(ctx.pid), path), time.time()),
                                  self.budget)
            pending.head_check = plan.head_check
            pending.writer = self.process_of(ctx.pid)
            pending.dirty = True
            pending.created = True
            self.overlay.add_file(pending)
            entry = self.inodes.remember(path, pending)
        info = await self.open_write(entry, flags | os.O_TRUNC if plan.existing is None else flags, ctx)
        return info, self.fs.node_attr(entry.node, entry.ino, entry.path)

    async def _refuse_name(self, path: str) -> None:
        """A name the view's format can never take is refused when made (EOPNOTSUPP, one log
        line), not kept as a scratch file that is gone at unmount."""
        why = await self.fs.run(self.service.refused_name, path)
        if why:
            raise UnsupportedType(f"{path}: {why}")

    def _plan_create(self, parent: InodeEntry, name: str, path: str) -> _CreatePlan:
        """What a new file at ``path`` is, from the store (call from a thread); checked in this
        order: a name the format refuses, an existing file, then what the new file would be."""
        why = self.service.refused_name(path)
        if why:
            return _CreatePlan(refused=why)
        existing = self._lookup_node(parent, name)
        if existing is not None:
            return _CreatePlan(existing=existing)
        target = self.service.route(path)
        ingest = self.service.is_ingestible(path)
        scratch = (target.domain is None or not target.rest) and not ingest and self.service.is_scratch(path)
        return _CreatePlan(target=target, ingest=ingest, scratch=scratch,
                           sidecar=None if ingest else self._sidecar_of(path),
                           head_check=self.service.head_check(path) if ingest else None)

    def _refuse_orphan(self, path: str, side: tuple[str, str] | None) -> None:
        """A sidecar (GDAL's ``x.tif.msk``) whose document is not stored (else it is ingestible)
        is kept as scratch only while that document is being written here: it is stored when the
        document is (``_adopt_below``). Beside no document it would vanish at unmount: refused
        (EOPNOTSUPP, one log line). ``side``: what :meth:`_sidecar_of` says of ``path``."""
        if side is not None and not isinstance(self.overlay.files.get(side[0]), PendingFile):
            raise UnsupportedType(f"{path}: {side[1]}")

    def _sidecar_of(self, path: str) -> tuple[str, str] | None:
        """For a sidecar file at ``path`` (see ``Sidecars``): its document's path, and why it is
        refused when that document is neither stored nor being written; else None."""
        t = self.service.route(path)
        ing = self.service.ingester(t)
        if t.domain is None or not t.rest or not isinstance(ing, Sidecars):
            return None
        doc = ing.sidecar_of(t.rest[-1])
        return (f"{path.rsplit('/', 1)[0]}/{doc}", ing.orphan_sidecar(t.rest[-1])) if doc else None

    def _lookup_node(self, parent: InodeEntry, name: str):
        try:
            return self.fs.child(parent, name)[1]
        except NotFound:
            return None

    # -- data ----------------------------------------------------------------------------------
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        handle = self.fs.handle(fh)
        if not isinstance(handle, WriteHandle):
            raise pyfuse3.FUSEError(errno.EBADF)
        if off == 0 and handle.pending.head_check is not None:
            why = handle.pending.head_check(bytes(buf[:16]))
            if why:
                handle.head_refused = True
                raise InvalidInput(f"{handle.pending.path}: {why}")
            handle.head_refused = False
        elif handle.head_refused:  # the rest of a file whose head was refused (said then, once)
            raise pyfuse3.FUSEError(errno.EINVAL)
        handle.wrote = True
        if handle.pending.needs_base(off, len(buf)):
            return await self.fs.run(handle.pending.write, off, buf)  # reads the view file first
        n = handle.pending.write(off, buf, relieve=False)
        if self.budget.over():  # spilling is file I/O: in a worker, this write waiting for it
            await self.fs.run(self.budget.relieve, handle.pending)
        return n

    async def flush_handle(self, handle: Any, closing: bool = False) -> None:
        """Store what ``handle``'s file holds. ``closing``: a FLUSH, sent at every close() of a
        descriptor. A chunk file that an open only emptied is stored at its release, not then: a
        shell's ``> file`` opens with O_TRUNC, dup2()s and closes the first descriptor before
        anything is written, and storing that empty file would delete the chunks the bytes
        written next were meant to replace, even when those bytes are then refused. Other files
        emptied are refused, so their error still reaches this close; a metadata file's quietly
        (logged at release if nothing is written after it: else ``echo ... > zarr.json`` logged
        a refusal for a write that was taken)."""
        if not isinstance(handle, WriteHandle) or not (handle.pending.dirty and handle.pending.ingest):
            return
        if handle.pending.unlinked:
            return  # unlinked while open: as on a disk, what is written to it is gone with it
        if handle.head_refused:
            return  # its head was refused (logged then): nothing of it is stored
        emptied = closing and not handle.wrote
        if emptied and await self.fs.run(self.service.holds_chunks, handle.pending.path):
            return
        try:
            await self.fs.run(self._ingest, handle.pending, None, handle.writer, handle.base_time)
        except InvalidInput as exc:
            if emptied and not isinstance(exc, Incomplete) and \
                    await self.fs.run(self.service.is_metadata_file, handle.pending.path):
                handle.pending.incomplete = one_line(exc)  # said at release if nothing follows
                raise Incomplete(str(exc)) from None
            if emptied and not isinstance(exc, Incomplete) and handle.pending.created \
                    and handle.pending.size() == 0:
                # made here and never written (ImageMagick creates its output and closes it before
                # writing it; `touch`): refused quietly, and nothing is said at release either
                raise Incomplete(str(exc)) from None
            raise
        await self._adopt_below(handle.pending.path)

    def _ingest_and_look_below(self, node: PendingFile, path: str) -> list[tuple[PendingFile, bool]]:
        """Store ``node`` as the file at ``path``, then say which scratch files beside it are
        ingestible now (see :meth:`_adopt_below`): one hand-off for a rename, which the kernel
        runs with its directories locked."""
        self._ingest(node, path)
        return [(p, ok) for p, ok in self._look_below(path) if p is not node]

    def _look_below(self, path: str) -> list[tuple[PendingFile, bool]]:
        """The scratch files below ``path``'s directory, each with whether it is ingestible now."""
        return [(p, self.service.is_ingestible(p.path)) for p in self.overlay.scratch_below(path.rsplit("/", 1)[0])]

    async def _adopt_below(self, path: str, checked: list[tuple[PendingFile, bool]] | None = None) -> None:
        """Files written into a directory before it was an array: ``cp -r`` and rsync write
        chunk files before the array's metadata when the directory lists them first. They
        were kept as scratch; now that ``path`` (stored) made the array, they are its chunk
        files, and are stored as such (one refused is logged: its writer has closed it)."""
        if checked is None:
            checked = await self.fs.run(self._look_below, path) if self.overlay.scratch_below(
                path.rsplit("/", 1)[0]) else []
        for p, ingestible in checked:
            if not ingestible or not self.overlay.holds(p):
                continue  # not a chunk file of it, or unlinked or renamed meanwhile
            p.ingest = p.dirty = True
            if p.opens > 0:
                continue  # stored at its writer's close
            try:
                await self.fs.run(self._ingest, p)
            except Exception as exc:  # noqa: BLE001 - its writer closed it long ago
                log.error("%s: written before the file it belongs to (its array's metadata, its image), "
                          "not stored: %s", p.path, exc)
            self._retire(p)

    async def release_handle(self, handle: Any) -> None:
        if not isinstance(handle, WriteHandle):
            return
        p = handle.pending
        if not self._close_one(p):
            return
        try:
            await self.flush_handle(handle)
        except Exception as exc:  # noqa: BLE001 - release has no one to report to
            log.error("%s: not stored at release: %s", p.path, exc)
        else:
            if p.incomplete:  # its flushes were refused quietly: still so at the last close, say it once
                log.warning("%s: not stored at release: %s", p.path, p.incomplete)
        if p.ingest or self.overlay.files.get(p.path) is not p:
            self._retire(p)  # the view shows the stored file from now on (or it was unlinked)

    async def setattr(self, inode: int, attr, fields, fh, ctx) -> pyfuse3.EntryAttributes:
        entry = self.inodes.get(inode)
        if fields.update_size:
            self._writable(entry.path)
            await self.fs.permit(entry.path, "update", ctx)
            if entry.node.is_dir:
                raise IsADirectory(entry.path)
            handle = self.fs.handle(fh) if fh is not None else None
            if isinstance(handle, WriteHandle):
                handle.pending.truncate(attr.st_size)
                handle.wrote = handle.wrote or attr.st_size > 0
            else:  # truncate(2) on a path: a write of its own
                pending = await self.fs.run(self._pending_for, entry, 0, ctx.pid)
                pending.truncate(attr.st_size)
                if self._close_one(pending):
                    try:
                        await self.fs.run(self._ingest, pending)
                    finally:
                        if pending.ingest:
                            self._retire(pending)
        # modes and times are not stored: accepted so cp -p and touch work
        return await self.fs.getattr(inode, ctx)

    # -- the tree ---------------------------------------------------------------------------------
    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx) -> pyfuse3.EntryAttributes:
        parent = self.inodes.get(parent_inode)
        text = os.fsdecode(name)
        path = self.inodes.child_path(parent, text)
        self._writable(path, new=True)
        await self.fs.permit(path, "create", ctx)
        if await self.fs.run(self._lookup_node, parent, text) is not None:
            raise FileExistsError(errno.EEXIST, path)
        await self.fs.run(self.service.mkdir, path)
        # a directory that did not exist has nothing in it: directories kept below its path for
        # an array since deleted through another view (h5py del, a tiff/ unlink) must not reappear
        self.overlay.drop_dirs_below(path)
        self._changed(path)
        parent.node = await self.fs.run(self.fs.resolve, parent.path)
        node = await self.fs.run(self._lookup_node, parent, text)
        if node is None:
            node = self.overlay.add_dir(path)
            target = await self.fs.run(self.service.route, path)
            self._keep_parents(target, path)  # its parents too: listable even once the view drops them
        entry = self.inodes.remember(path, node)
        return self.fs.node_attr(node, entry.ino, path)

    async def rmdir(self, parent_inode: int, name: bytes, ctx) -> None:
        parent = self.inodes.get(parent_inode)
        path = self.inodes.child_path(parent, os.fsdecode(name))
        self._writable(path)
        await self.fs.permit(path, "delete", ctx)
        if self.overlay.has_below(path):
            raise OSError(errno.ENOTEMPTY, path)
        known = isinstance(self.overlay.get(path), PendingDir)
        target = await self.fs.run(self.service.route, path)
        try:
            await self.fs.run(self.service.rmdir, path)
        except NotFound:
            if not known:
                raise
        self.overlay.drop(path)
        self.inodes.detach(path)
        if target.domain is not None and not target.rest:
            self._drop_dirs_of(target, path, here=True)  # the group or array is gone from every view
            self._keep_folders(target, path)
        self._changed(path, target.domain)

    def _drop_dirs_of(self, target: Target, path: str, here: bool) -> None:
        """Directories made (mkdir) below an object, in every view that shows it (``here``: also
        in the view of ``path``), once the object is gone: they must not outlive it."""
        assert target.domain is not None
        rel = target.h5path.strip("/")
        for leaf in domain_leaf_paths(target.domain):
            where = f"{leaf}/{rel}" if rel else leaf
            if here or not (path == where or path.startswith(where + "/")):
                self.overlay.drop_dirs_below(where)

    async def unlink(self, parent_inode: int, name: bytes, ctx) -> None:
        parent = self.inodes.get(parent_inode)
        path = self.inodes.child_path(parent, os.fsdecode(name))
        self._writable(path)
        await self.fs.permit(path, "delete", ctx)
        node = self.overlay.get(path)
        if isinstance(node, PendingFile):
            self.overlay.drop(path)
            node.dirty = False
            node.unlinked = True  # bytes written through a descriptor still open are stored nowhere
            if node.opens == 0:
                node.discard()
            if not node.ingest:
                self.inodes.detach(path)
                return  # a scratch file: never reached the store
        if isinstance(node, PendingDir):
            raise IsADirectory(path)
        target, found = await self.fs.run(self._route_and_unlink, path, self.process_of(ctx.pid))
        if not found:
            # gone already (its array was removed with its metadata): the kernel still
            # knew the name, so the unlink that removes it succeeds
            if node is None and self.inodes.peek(path) is None:
                raise NotFound(path)
            if await self.fs.run(self._still_shown, path):  # not gone: this name deletes nothing
                raise NotPermitted(f"{path}: the view shows this file, but its writes do not take "
                                   f"this name, so it cannot be removed here; remove it through "
                                   f"another view") from None
        else:
            self._keep_parents(target, path)
            self._keep_folders(target, path)
            if target.domain is not None and isinstance(target.obj, Dataset) and \
                    target.rest == [self.service.ingester(target).meta_name]:
                self._drop_dirs_of(target, path, here=False)  # no array any more: its chunk dirs elsewhere go
        self.inodes.detach(path)
        self._changed(path, target.domain)

    def _route_and_unlink(self, path: str, writer: int) -> tuple[Target, bool]:
        """One hand-off (the kernel holds the directory locked): ``path``'s target, routed before
        the change (a deleted domain no longer routes), and whether the store had it."""
        target = self.service.route(path)
        try:
            self.service.unlink(path, writer)
        except NotFound:
            return target, False
        return target, True

    def _still_shown(self, path: str) -> bool:
        """Whether the view shows a stored file at ``path``: after an ``unlink`` the write
        service found nothing to delete for, ``rm`` must not report success; a scratch file
        renamed over it would hide it while stored nowhere."""
        try:
            node = self.fs.resolve(path)
        except (PolyfsError, OSError):  # gone, or its domain with it
            return False
        return isinstance(node, FileNode) and not isinstance(node, PendingFile)

    def _keep_parents(self, t: Target, path: str) -> None:
        """The directories between an array and ``path`` (a chunk file just unlinked, a directory
        just made) stay until they are removed: the view shows a chunk directory only while it
        holds a chunk, and ``rm -r`` finds and removes directories by listing them."""
        if t.domain is None or len(t.rest) < 2 or not isinstance(t.obj, Dataset):
            return
        top = path[: len(path) - len("/".join(t.rest))].rstrip("/")
        for k in range(1, len(t.rest)):
            self.overlay.add_dir(f"{top}/{'/'.join(t.rest[:k])}")

    def _keep_folders(self, t: Target, path: str) -> None:
        """A domain just removed (``path`` was its leaf): the directories above it in this view
        stay until they are removed, as on a disk, though no domain implies them any more
        (``rm -r`` lists them again and removes them next)."""
        if t.domain is None or t.h5path != "/" or t.rest:
            return
        parts = path.split("/")
        for k in range(2, len(parts)):
            self.overlay.add_dir("/".join(parts[:k]))

    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes,
                     flags: int, ctx) -> None:
        old_parent = self.inodes.get(parent_inode_old)
        new_parent = self.inodes.get(parent_inode_new)
        src = self.inodes.child_path(old_parent, os.fsdecode(name_old))
        dst = self.inodes.child_path(new_parent, os.fsdecode(name_new))
        self._writable(src)
        self._writable(dst, new=True)
        await self.fs.permit(src, "update", ctx)  # a file being written, published under its name
        await self.fs.permit(dst, "update", ctx)
        why, ingest = await self.fs.run(lambda: (self.service.refused_name(dst), self.service.is_ingestible(dst)))
        if why:
            raise UnsupportedType(f"{dst}: {why}")
        node = self.overlay.get(src)
        if not isinstance(node, PendingFile):
            raise CrossDevice(f"{src} -> {dst}: only files being written can be renamed; tools copy instead")
        started = time.time()
        if ingest:
            node.dirty = True
            # the writer's read-modify-write began when it last read the target, not the temporary
            node.base_time = self._read_at.get((self.process_of(ctx.pid), dst), node.base_time)
            checked = await self.fs.run(self._ingest_and_look_below, node, dst)
            self.overlay.drop(src)
            self.inodes.rename(src, dst, started)
            old = self.overlay.get(dst)
            if isinstance(old, PendingFile):
                self.overlay.drop(dst)
                self._replaced(old)
                self._retire(old)
            node.path, node.ingest = dst, True
            self._retire(node)  # stored: its pages go now (at its last close if still open)
            await self._adopt_below(dst, checked)
            self.fs.bump()
            return
        if await self.fs.run(self._still_shown, dst):  # would hide a stored file, and be kept nowhere
            raise NotPermitted(f"{src} -> {dst}: the view's file at this name cannot be written back "
                               f"(its writes are not stored); write the object through another view")
        self.overlay.drop(src)
        old = self.overlay.get(dst)
        if isinstance(old, PendingFile) and old is not node:
            self._replaced(old)
        node.path = dst
        self.overlay.add_file(node)
        self.inodes.rename(src, dst, started)

    @staticmethod
    def _replaced(old: PendingFile) -> None:
        """A file renamed over ``old`` while ``old`` was open for writing: as on a disk, ``old``
        is unlinked, and what its writers write and close is stored nowhere. (Its last close
        stored it over the renamed file: the last closer won, not the rename.)"""
        old.dirty = False
        old.unlinked = True

    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx) -> pyfuse3.EntryAttributes:
        """A second name for a file being written (zarr-python publishes a temporary this
        way): the target is ingested from the same bytes; an existing target is EEXIST."""
        entry = self.inodes.get(inode)
        parent = self.inodes.get(new_parent_inode)
        text = os.fsdecode(new_name)
        dst = self.inodes.child_path(parent, text)
        self._writable(dst, new=True)
        await self.fs.permit(dst, "update", ctx)
        await self._refuse_name(dst)
        node = self.overlay.get(entry.path)
        if not isinstance(node, PendingFile):
            raise CrossDevice(f"{entry.path} -> {dst}: only files being written can be linked")
        if await self.fs.run(self._lookup_node, parent, text) is not None:
            raise FileExistsError(errno.EEXIST, dst)
        if not await self.fs.run(self.service.is_ingestible, dst):
            raise NotPermitted(f"{dst}: links are only made to metadata and chunk files")
        copy = await self.fs.run(node.clone, dst)
        copy.ingest, copy.dirty = True, True
        copy.base_time = self._read_at.get((self.process_of(ctx.pid), dst), node.base_time)
        copy.writer = self.process_of(ctx.pid)
        try:
            await self.fs.run(self._ingest, copy)
        finally:
            copy.discard()
        self.fs.bump()
        new = await self.fs.run(self.fs.resolve, dst)
        e = self.inodes.remember(dst, new)
        return self.fs.node_attr(new, e.ino, dst)
