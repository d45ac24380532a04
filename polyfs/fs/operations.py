"""pyfuse3 operations over the view tree. No format knowledge lives here.

Every handler runs the view's lazy work (listings, layout, reads) in a
worker thread, maps polyfs errors to errno through ``errors.errno_of``, and
turns any unexpected exception into EIO after logging it once, so no request
can take the daemon down. What the kernel may cache, for how long, and how it
is told of changes: kernelcache.py.
"""
from __future__ import annotations

import errno
import gc
import logging
import os
import stat
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Callable

import pyfuse3
import trio

from ..errors import AccessDenied, ChunkChanged, IsADirectory, NotADirectory, NotFound, ReadOnly
from .access import AccessGate, DomainAccess
from .errmap import fuse_errors
from .kernelcache import KernelHeld, KernelNotifier, entries_below
from .overlay import Discarded, PendingDir, PendingFile
from .writeops import NAME_MAX, WriteHandle, WriteSide
from ..reader import Reader
from ..vfile import VFile
from ..views.base import DirNode, FileNode, Node
from ..views.root import DomainLocator, domain_leaf_paths
from .inodes import ROOT_INODE, InodeEntry, InodeTable

log = logging.getLogger(__name__)

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND | os.O_CREAT
# Python's cyclic GC while serving: every request makes short-lived containers (attributes,
# coroutines, tuples), and with the default thresholds (700, 10, 10) collections that walk
# the daemon's large, long-lived heap (modules, domain models, view trees) cost a third of
# the CPU of a directory walk (bench_read (c): 72 -> 49 us of daemon CPU per entry).
GC_THRESHOLDS = (20000, 20, 20)
_LOOKUP = object()  # _node_attr: find the node's domain from its path
# Directories of domains written through this mount: the kernel may keep them this long. Their
# attributes never change and every removal is pushed to the kernel, while each path a writer
# walks (``arr.zarr/c/0/1/0``) costs one LOOKUP per directory without it (zarr-python: ~90
# LOOKUP/GETATTR per shard written); files stay at 0, their sizes change with every write.
VOLATILE_DIR_TIMEOUT = 1.0
# How long a change waits for the kernel to be told of the names it removed (kernelcache.py)
TOLD_TIMEOUT = 0.5
UNBOUNDED_SPACE = 1 << 50  # statfs of a writable store that cannot tell its size (S3): 1 PiB free


@dataclass
class _DirHandle:
    entry: InodeEntry
    names: list[tuple[str, Node]]
    ready: bool = False  # every entry's attributes are cheap (no thread needed)
    version: int = 0  # the views ``names`` were resolved from


@dataclass
class _FileHandle:
    entry: InodeEntry
    vfile: Any
    live: bool = False  # a file being written: reading plans I/O, never on the FUSE loop
    pending: Any = None  # that file (PendingFile): read as it is now, also past its size at open
    as_of: int | None = None  # the reader's rewrite epoch at open: chunks rewritten since read as then


def _held_open(entry: InodeEntry, attr: pyfuse3.EntryAttributes) -> pyfuse3.EntryAttributes:
    """A file's size is at least that of every layout still open through its inode: the
    kernel cuts reads at the size it was last told (one inode per path), so a rewrite that
    made the file smaller cut the reads of a descriptor opened before it (h5py holding an
    ``hdf5/`` file while zarr-python writes: "filter returned failure"). A disk's file renamed
    over keeps its own inode and size; reads past a newer, shorter layout end early."""
    if entry.reading:
        held = max(entry.reading.values())
        if held > attr.st_size:
            attr.st_size = held
            attr.st_blocks = (held + 511) // 512
    return attr


class Operations(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, root: DirNode, reader: Reader, read_only: bool = True, entry_timeout: float = 60.0,
                 threads: int = 16, service: Any = None, budget: Any = None,
                 access: AccessGate | None = None, tree_timeout: float | None = None) -> None:
        """``access``: enforce domains' HSDS ACLs for other local users (``allow_other``
        mounts; see access.py). None: every node is the daemon user's, as before.
        ``entry_timeout``: how long the kernel may keep names and attributes of domains not
        written through this mount; ``tree_timeout``: the same for the directories above
        domains (the domain list, re-read every ``domain_ttl``; default ``entry_timeout``)."""
        super().__init__()
        self.inodes = InodeTable(root)
        self.reader = reader
        self.read_only = read_only
        self.entry_timeout = entry_timeout
        self.tree_timeout = entry_timeout if tree_timeout is None else min(tree_timeout, entry_timeout)
        self.held = KernelHeld()  # domains the kernel may answer for itself (the watcher re-reads them)
        self.kernel = KernelNotifier(self.inodes)
        self.domains = DomainLocator(root)
        self.limiter = trio.CapacityLimiter(threads)
        self.uid = os.getuid()
        self.gid = os.getgid()
        self._handles: dict[int, Any] = {}
        self._next_fh = 1
        self._fh_lock = threading.Lock()
        self._logged: set[tuple] = set()
        self.version = 0  # bumped when views may have re-rendered (nodes are resolved again)
        self.acl = access
        self.locator = self.domains if access is not None else None
        self.writes: WriteSide | None = None if read_only or service is None else WriteSide(self, service, budget)

    def init(self) -> None:
        """The mount is live (pyfuse3 calls this once, before the first request): what exists
        now lives as long as the daemon, so the GC stops walking it (``gc.freeze``), and
        collects the young less often (``GC_THRESHOLDS``)."""
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        log.debug("serving: %d objects frozen for the GC, thresholds %s", gc.get_freeze_count(), GC_THRESHOLDS)

    # -- helpers ----------------------------------------------------------
    def _log_unexpected(self, op: str, exc: BaseException) -> None:
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = (type(exc).__name__, tb.tb_frame.f_code.co_filename if tb else "", tb.tb_lineno if tb else 0)
        if where in self._logged:
            log.error("%s failed: %s", op, exc)
            return
        self._logged.add(where)
        log.error("%s failed: %s", op, exc, exc_info=(type(exc), exc, exc.__traceback__))

    async def _thread(self, fn: Callable, *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    def _new_fh(self, handle: Any) -> int:
        with self._fh_lock:
            fh = self._next_fh
            self._next_fh += 1
            self._handles[fh] = handle
            return fh

    # -- what the write side uses (writeops.FsCore) ---------------------------
    async def run(self, fn: Callable, *args: Any) -> Any:
        return await self._thread(fn, *args)

    def new_fh(self, handle: Any) -> int:
        return self._new_fh(handle)

    def handle(self, fh: int) -> Any:
        return self._handles.get(fh)

    def node_attr(self, node: Node, ino: int, path: str = "") -> pyfuse3.EntryAttributes:
        """Attributes the write side replies with: never cached by the kernel (what it made or
        changed may be refused at flush, or change again at once)."""
        return self._node_attr(node, ino, path, timeout=0.0)

    def child(self, parent: InodeEntry, name: str) -> tuple[str, Node]:
        return self._child(parent, name)

    def bump(self) -> None:
        self.version += 1

    # -- what the kernel caches (kernelcache.py) -------------------------------------------
    def _domain_below(self, parent: InodeEntry | None, path: str) -> str:
        """The domain ``path`` is in ("" above every domain), from its parent's when known."""
        if parent is not None and parent.domain:
            return parent.domain
        return self.domains.locate(path)[0] or ""

    def _entry_domain(self, entry: InodeEntry) -> str:
        if entry.domain is None:
            entry.domain = self._domain_below(None, entry.path)
        return entry.domain

    def _timeout(self, path: str, domain: str, node: Node | None = None) -> float:
        """How long the kernel may keep a name and its attributes: 0 for files in domains
        written through this mount (their directories: VOLATILE_DIR_TIMEOUT) and for files and
        directories being made (not stored yet, or refused), the domain list's time above
        domains, else ``entry_timeout``."""
        if isinstance(node, (PendingFile, PendingDir)):
            return 0.0
        if self.volatile(path):
            return VOLATILE_DIR_TIMEOUT if node is not None and node.is_dir else 0.0
        return self.entry_timeout if domain else self.tree_timeout

    def _handed(self, entry: InodeEntry, timeout: float, name: bool, since: int) -> None:
        """Note that the kernel got ``entry``'s attributes (and its name) for ``timeout`` s,
        computed from nodes of view version ``since``. If the views changed meanwhile, a push
        of that change may have missed this entry (it was not held yet): push it now."""
        if timeout <= 0:
            return
        until = time.monotonic() + timeout
        entry.attr_until = until
        if name:
            entry.name_until = until
        self.held.note(entry.domain, until)
        if self.version != since:
            self.kernel.push_entries([entry])

    def kernel_domains(self) -> list[str]:
        """Domains the kernel may answer for from its caches now: the watcher re-reads them
        every ``domain_ttl`` (the kernel no longer asks, so nothing else marks them in use)."""
        return self.held.domains()

    def domains_changed(self, domains: list[str]) -> None:
        """The store changed under these domains (another writer, found by the watcher; or a
        chunk rewritten behind polyfs's back): nodes are resolved again, and the kernel drops
        the names, attributes and pages it holds of them in every view. Any thread. The domain
        list is read again first: a lookup after the push must not find a deleted domain in
        the list as last read, and hand the kernel its name again for ``entry_timeout``."""
        if self.domains.domains is not None:
            self.domains.domains.refresh(force=True)
        self.bump()
        prefixes = [p for d in domains for p in domain_leaf_paths(d)]
        if not prefixes:
            return
        above: set[str] = set()  # directories that may have lost a domain
        for p in prefixes:
            while p:
                p = p.rpartition("/")[0]
                above.add(p)
        hit = entries_below(self.inodes, prefixes) + [e for e in map(self.inodes.peek, above) if e is not None]
        self.kernel.push_entries(hit)

    # -- permissions (access.py has the rules) -------------------------------------
    def _domain_access(self, path: str) -> DomainAccess | None:
        """The ACL-derived access of the domain ``path`` is under (None: no ACLs apply).
        May read the domain's ``.domain.json``: on the FUSE loop only after ``_acl_warm``."""
        if self.acl is None or self.locator is None:
            return None
        domain, _ = self.locator.locate(path)
        return self.acl.get(domain) if domain is not None else None

    def _acl_warm(self, path: str) -> bool:
        """True when the attributes of ``path`` need no I/O for its domain's ACLs."""
        if self.acl is None or self.locator is None:
            return True
        domain, _ = self.locator.locate(path)
        return domain is None or self.acl.peek(domain) is not None

    async def permit(self, path: str, action: str, ctx: Any) -> None:
        """Raise :class:`AccessDenied` unless the requesting user may do ``action`` (an HSDS
        ACL action) to the domain ``path`` is under. Outside every domain reading is free
        and changes (making a new domain) are for root and the daemon's user only: a new
        domain's ACLs would not name the user who made it."""
        if self.acl is None or self.locator is None or ctx is None:
            return  # no ACLs enforced (no allow_other), or the daemon itself asking
        users = self.acl.users
        if users.privileged(ctx.uid):
            return
        domain, _ = self.locator.locate(path)
        if domain is None:
            if action == "read":
                return
            raise AccessDenied(f"{path or '/'}: only the daemon's user makes new domains (uid {ctx.uid})")
        acc = self.acl.peek(domain) or await self._thread(self.acl.get, domain)
        if not acc.allows(users, ctx.uid, action):
            who = users.name_of(ctx.uid) or f"uid {ctx.uid}"
            raise AccessDenied(f"{path}: {who} has no {action} permission on domain {domain}")

    def volatile(self, path: str) -> bool:
        return self.writes is not None and self.writes.volatile(path)

    def resolve(self, path: str) -> Node:
        """The node at ``path`` now (views may have re-rendered since it was looked up);
        files being written win over the view's."""
        node = self._walk(path, inline=False)
        assert node is not None
        return node

    def _walk(self, path: str, inline: bool) -> Node | None:
        """:meth:`resolve`; ``inline``: None instead of loading a directory that needs I/O
        (the caller is the FUSE loop, and hands the walk to a thread then)."""
        overlay = self.writes.overlay if self.writes is not None else None
        node = self.inodes.get(ROOT_INODE).node
        walked = ""
        for name in [p for p in path.split("/") if p]:
            walked = f"{walked}/{name}" if walked else name
            pending = overlay.get(walked) if overlay is not None else None
            child = pending if isinstance(pending, PendingFile) else None
            if child is None and isinstance(node, DirNode) and not isinstance(node, PendingDir):
                if inline and not node.ready():
                    return None
                child = node.entries().get(name)
            if child is None:
                child = pending
            if child is None:
                raise NotFound(path)
            node = child
        return node

    def _node_attr(self, node: Node, ino: int, path: str = "", acc: Any = _LOOKUP,
                   timeout: float | None = None) -> pyfuse3.EntryAttributes:
        """``acc``: the DomainAccess of ``path``'s domain when the caller knows it (listings);
        ``timeout``: the kernel's caching time (see ``_timeout``; None: work it out here)."""
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.generation = 0
        if timeout is None:
            timeout = self._timeout(path, self._domain_below(None, path))
        a.entry_timeout = timeout
        a.attr_timeout = timeout
        w = 0 if self.read_only else 0o200
        if acc is _LOOKUP:
            acc = self._domain_access(path) if path else None
        if node.is_dir:
            a.st_mode = stat.S_IFDIR | (acc.mode(True, not self.read_only) if acc else 0o555 | w)
            a.st_nlink = 2
            a.st_size = 0
        else:
            assert isinstance(node, FileNode)
            a.st_mode = stat.S_IFREG | (acc.mode(False, not self.read_only) if acc else 0o444 | w)
            a.st_nlink = 1
            a.st_size = node.size()
        a.st_uid = acc.uid if acc else self.uid
        a.st_gid = acc.gid if acc else self.gid
        ns = int(node.mtime * 1e9)
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = ns
        a.st_blksize = 1 << 20
        a.st_blocks = (a.st_size + 511) // 512
        return a

    def _child(self, parent: InodeEntry, name: str) -> tuple[str, Node]:
        if not isinstance(parent.node, DirNode):
            raise NotADirectory(parent.path)
        path = self.inodes.child_path(parent, name)
        pending = self.writes.overlay.get(path) if self.writes is not None else None
        if isinstance(pending, PendingFile):
            return path, pending  # being written: the writer's bytes win
        pnode = parent.node
        if isinstance(pnode, PendingDir):
            pnode = self.resolve(parent.path)  # the view may show it by now
        node = pnode.entries().get(name) if isinstance(pnode, DirNode) and not isinstance(pnode, PendingDir) else None
        if node is None:
            node = pending
        if node is None:
            raise NotFound(path)
        return path, node

    def _lookup_sync(self, parent_ino: int, name: str) -> pyfuse3.EntryAttributes:
        parent = self.inodes.get(parent_ino)
        version = parent.version  # the views its node was resolved from
        path, node = self._child(parent, name)
        domain = self._domain_below(parent, path)
        timeout = self._timeout(path, domain, node)
        attr = self._node_attr(node, 0, path, timeout=timeout)  # size first: a failure must not count a lookup
        entry = self.inodes.remember(path, node)
        entry.domain = domain
        attr.st_ino = entry.ino
        _held_open(entry, attr)
        if self.version != version:  # views changed meanwhile: what was found may be old already
            attr.entry_timeout = attr.attr_timeout = 0.0
        else:
            self._handed(entry, timeout, name=True, since=version)
        return attr

    def _cheap_child(self, parent_ino: int, name: str) -> bool:
        """True when looking ``name`` up needs no I/O (loaded directory, known size)."""
        entry = self.inodes.get(parent_ino)
        parent = entry.node
        if not isinstance(parent, DirNode) or not parent.ready():
            return False
        child = parent.entries().get(name)
        return (child is None or child.ready()) and self._acl_warm(self.inodes.child_path(entry, name))

    async def _refresh(self, entry: InodeEntry) -> None:
        """Re-resolve a node the views may have re-rendered since it was looked up. An unlinked
        file keeps its node: its path names another file now, or none."""
        version = self.version
        if entry.unlinked:
            entry.version = version
            return
        try:
            # every lookup and getattr after a change comes here: a walk through directories
            # already loaded is answered on the loop, without a thread hand-off
            node = self._walk(entry.path, inline=True)
            entry.node = node if node is not None else await self._thread(self.resolve, entry.path)
        except NotFound:
            pass  # gone from the views: operations on it fail as they should
        entry.version = version

    # -- lookups and attributes ---------------------------------------------
    # A worker-thread hand-off costs ~0.1-0.2 ms here: work that needs no I/O
    # (loaded directories, sizes known from chunk sizes, page-cached data) is
    # answered on the FUSE loop itself; everything else goes to a thread.
    @fuse_errors
    async def lookup(self, parent_inode: int, name: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        text = os.fsdecode(name)
        at = time.time()
        parent = self.inodes.get(parent_inode)
        if self.acl is not None:
            await self.permit(parent.path, "read", ctx)  # searching a domain's directory is reading it
        if parent.version != self.version:
            await self._refresh(parent)  # a directory re-rendered since: look up in the new one
        try:
            if self._cheap_child(parent_inode, text):
                return self._lookup_sync(parent_inode, text)
            return await self._thread(self._lookup_sync, parent_inode, text)
        except NotFound:
            if self.writes is not None and ctx is not None:
                # a writer that found no file has seen "no chunks": the base of what it writes next
                path = self.inodes.child_path(self.inodes.get(parent_inode), text)
                self.writes.note_read_open(ctx.pid, path, at)
                self.writes.note_read_file(ctx.pid, path, VFile([]))
            raise

    @fuse_errors
    async def forget(self, inode_list) -> None:
        for ino, n in inode_list:
            self.inodes.forget(ino, n)

    @fuse_errors
    async def getattr(self, inode: int, ctx=None) -> pyfuse3.EntryAttributes:
        entry = self.inodes.get(inode)
        if entry.version != self.version:
            await self._refresh(entry)
        if entry.node.ready() and self._acl_warm(entry.path):
            return self._attr(entry)
        return await self._thread(self._attr, entry)

    def _attr(self, entry: InodeEntry) -> pyfuse3.EntryAttributes:
        """Attributes of a node (may compute a file's size: call from a thread)."""
        version = entry.version  # the views its node was resolved from
        timeout = self._timeout(entry.path, self._entry_domain(entry), entry.node)
        attr = _held_open(entry, self._node_attr(entry.node, entry.ino, entry.path, timeout=timeout))
        if self.version != version:  # views changed meanwhile: what was found may be old already
            attr.entry_timeout = attr.attr_timeout = 0.0
        else:
            self._handed(entry, timeout, name=False, since=version)
        return attr

    @fuse_errors
    async def access(self, inode: int, mode: int, ctx) -> bool:
        entry = self.inodes.get(inode)
        if mode & os.W_OK and self.read_only:
            return False
        if self.acl is None:
            return True
        if ctx is None or self.acl.users.privileged(ctx.uid):
            return True
        if mode & os.X_OK and not entry.node.is_dir:
            return False  # no view file is executable
        try:
            if mode & (os.R_OK | os.X_OK):
                await self.permit(entry.path, "read", ctx)
            if mode & os.W_OK:
                await self.permit(entry.path, "update", ctx)
        except AccessDenied:
            return False
        return True

    @fuse_errors
    async def statfs(self, ctx) -> pyfuse3.StatvfsData:
        """Sizes are the store's file system's (``df`` showed a 0-byte, full mount, and a tool
        that checks for room before it writes would refuse); a store that cannot tell (an
        object store) has room without end on a writable mount."""
        s = pyfuse3.StatvfsData()
        s.f_bsize = 1 << 20
        s.f_frsize = 4096
        space = await self._thread(self.reader.store.space)
        if space is None:
            space = (0, 0, 0) if self.read_only else (UNBOUNDED_SPACE, UNBOUNDED_SPACE, UNBOUNDED_SPACE)
        s.f_blocks, s.f_bfree, s.f_bavail = (n // s.f_frsize for n in space)
        s.f_files = len(self.inodes)
        s.f_ffree = s.f_favail = 1 << 30
        s.f_namemax = NAME_MAX
        return s

    # -- directories ----------------------------------------------------------
    @fuse_errors
    async def opendir(self, inode: int, ctx) -> int:
        entry = self.inodes.get(inode)
        if not isinstance(entry.node, DirNode):
            raise NotADirectory(entry.path)
        if self.acl is not None:
            await self.permit(entry.path, "read", ctx)
        if entry.version != self.version:
            await self._refresh(entry)
        version = entry.version
        entries = entry.node.entries() if entry.node.ready() else await self._thread(entry.node.entries)
        if self.writes is not None:
            extra = self.writes.overlay.children(entry.path)
            if extra:
                entries = {**{k: v for k, v in extra.items() if k not in entries or isinstance(v, PendingFile)},
                           **{k: v for k, v in entries.items() if not isinstance(extra.get(k), PendingFile)}}
        names = sorted(entries.items())
        ready = all(node.ready() for _, node in names) and self._acl_warm_below(entry, names)
        return self._new_fh(_DirHandle(entry, names, ready, version))

    def _acl_warm_below(self, entry: InodeEntry, names: list[tuple[str, Node]]) -> bool:
        """``_acl_warm`` for every entry of a directory (once when the directory is in a domain)."""
        if self.acl is None or self.locator is None:
            return True
        if self.locator.locate(entry.path)[0] is not None:
            return self._acl_warm(entry.path)
        return all(self._acl_warm(self.inodes.child_path(entry, name)) for name, _ in names)

    def _readdir_attrs(self, handle: _DirHandle, start: int, count: int) -> list:
        out = []
        acc: Any = _LOOKUP
        parent = handle.entry
        inside = self._entry_domain(parent)  # every entry is in the same domain, if any
        if self.locator is not None and inside:
            try:
                acc = self._domain_access(parent.path)
            except Exception:  # noqa: BLE001 - each entry then reports its own failure below
                acc = _LOOKUP
        volatile = self.volatile(parent.path)
        for name, node in handle.names[start:start + count]:
            path = f"{parent.path}/{name}" if parent.path else name
            domain = inside or self._domain_below(parent, path)
            timeout = 0.0 if volatile else self._timeout(path, domain, node)
            try:
                attr = self._node_attr(node, 0, path, acc, timeout)
            except Exception as exc:  # an unreadable entry is still listed
                log.error("cannot stat %s/%s: %s", parent.path, name, exc)
                attr = None
            out.append((name, path, node, attr, domain, timeout))
        return out

    @fuse_errors
    async def readdir(self, fh: int, start_id: int, token) -> None:
        handle = self._handles[fh]
        assert isinstance(handle, _DirHandle)
        pos = start_id
        while pos < len(handle.names):
            if handle.ready:
                batch = self._readdir_attrs(handle, pos, 256)
            else:
                batch = await self._thread(self._readdir_attrs, handle, pos, 256)
            # views changed since the directory was opened: its names may be old already,
            # so the kernel keeps none of them, and known inodes keep their newer nodes
            stale = self.version != handle.version
            for name, path, node, attr, domain, timeout in batch:
                if attr is None:
                    pos += 1
                    continue
                entry = self.inodes.peek(path) if stale else None
                if entry is None:
                    entry = self.inodes.remember(path, node, count_lookup=False)
                entry.domain = domain
                attr.st_ino = entry.ino
                _held_open(entry, attr)
                if stale:
                    attr.entry_timeout = attr.attr_timeout = 0.0
                if not pyfuse3.readdir_reply(token, os.fsencode(name), attr, pos + 1):
                    return
                entry.lookups += 1
                if not stale:
                    self._handed(entry, timeout, name=True, since=handle.version)
                pos += 1

    @fuse_errors
    async def releasedir(self, fh: int) -> None:
        self._handles.pop(fh, None)

    # -- files ------------------------------------------------------------------
    @fuse_errors
    async def open(self, inode: int, flags: int, ctx) -> pyfuse3.FileInfo:
        entry = self.inodes.get(inode)
        opened_at = time.time()  # before resolving: a read-modify-write's base (writeops.py)
        if entry.replaced_at is not None:  # a file another was renamed over: its bytes are that old
            opened_at = min(opened_at, entry.replaced_at)
        if entry.version != self.version or (self.volatile(entry.path) and not flags & _WRITE_FLAGS):
            await self._refresh(entry)  # a domain being written: always the newest layout
        if entry.node.is_dir:
            raise IsADirectory(entry.path)
        if flags & os.O_ACCMODE != os.O_WRONLY and self.acl is not None:
            await self.permit(entry.path, "read", ctx)
        if flags & _WRITE_FLAGS:
            await self.permit(entry.path, "update", ctx)
            return await self._writer().open_write(entry, flags, ctx)
        assert isinstance(entry.node, FileNode)
        if self.writes is not None:
            self.writes.note_read_open(ctx.pid, entry.path, opened_at)
        live = isinstance(entry.node, PendingFile)
        as_of = self.reader.rewrites.epoch  # before the layout: what it lays out is at least this new
        vfile = entry.node.vfile() if entry.node.built and not live else await self._thread(entry.node.vfile)
        if self.writes is not None and not live:
            self.writes.note_read_file(ctx.pid, entry.path, vfile)
        fh = self._new_fh(_FileHandle(entry, vfile, live, entry.node if live else None, as_of))
        if not live:
            entry.reading[fh] = vfile.size
        # The kernel keeps its page cache across opens while the file is unchanged;
        # a re-planned file (new VFile) drops it, so nobody sees the old layout. Files of a
        # domain written through this mount bypass it: the page cache is one per inode, and a
        # reader still on the old layout would fill it with old bytes under a new reader's feet
        # (whose read-modify-write would then write them back).
        unchanged = entry.served is vfile
        entry.served = vfile
        if self.volatile(entry.path):
            return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=True)
        return pyfuse3.FileInfo(fh=fh, keep_cache=unchanged, direct_io=False)

    @fuse_errors
    async def read(self, fh: int, off: int, size: int) -> bytes:
        handle = self._handles[fh]
        if isinstance(handle, WriteHandle):
            return await self._thread(handle.pending.read, off, size)  # may read the view file
        if handle.pending is not None:  # an SWMR reader follows a writer appending past its open size
            try:
                return await self._thread(handle.pending.read, off, size)
            except Discarded:  # its writer closed it: from now on read as stored, as a disk's inode
                await self._read_as_stored(handle)
        pieces = None
        if not handle.live:
            got = self.reader.read_nowait(handle.vfile, off, size, handle.as_of)  # page-cached: no hand-off
            if not isinstance(got, list):
                return got
            pieces = got  # planned once: the worker thread executes this plan
        try:
            return await self._thread(self.reader.read, handle.vfile, off, size, pieces, handle.as_of)
        except ChunkChanged:
            # the domain's files are re-planned (catalog.chunk_changed): sizes the kernel
            # holds may be wrong now, for every file of the domain in every view
            domain = self._entry_domain(handle.entry)
            if domain:
                self.domains_changed([domain])
            raise

    async def _read_as_stored(self, handle: _FileHandle) -> None:
        """A descriptor opened while another process wrote the file reads it as written once
        that writer closed it (stored: the file being written is gone)."""
        entry = handle.entry
        await self._refresh(entry)
        if isinstance(entry.node, PendingFile) or not isinstance(entry.node, FileNode):
            raise Discarded(f"{entry.path}: the file being written was discarded")
        handle.as_of = self.reader.rewrites.epoch
        handle.vfile = await self._thread(entry.node.vfile)
        handle.live, handle.pending = False, None

    @fuse_errors
    async def release(self, fh: int) -> None:
        handle = self._handles.pop(fh, None)
        if isinstance(handle, _FileHandle):
            handle.entry.reading.pop(fh, None)
        if self.writes is not None and isinstance(handle, WriteHandle):
            async with self._told():
                await self.writes.release_handle(handle)

    @fuse_errors
    async def flush(self, fh: int) -> None:
        if self.writes is None:
            # nothing is ever written: ENOSYS tells the kernel to stop sending FLUSH at all,
            # which saves every close() of a read-only mount one round trip
            raise pyfuse3.FUSEError(errno.ENOSYS)
        handle = self._handles.get(fh)
        if isinstance(handle, WriteHandle):  # a file opened for reading has nothing to store
            async with self._told():
                await self.writes.flush_handle(handle, closing=True)

    @fuse_errors
    async def fsync(self, fh: int, datasync: bool) -> None:
        if self.writes is not None:
            async with self._told():
                await self.writes.flush_handle(self._handles.get(fh))

    # -- extended attributes -----------------------------------------------------
    @fuse_errors
    async def getxattr(self, inode: int, name: bytes, ctx) -> bytes:
        self.inodes.get(inode)
        raise pyfuse3.FUSEError(pyfuse3.ENOATTR)

    @fuse_errors
    async def listxattr(self, inode: int, ctx) -> list:
        self.inodes.get(inode)
        return []

    # -- changes (writeops.WriteSide does the work) ----------------------------------
    def _writer(self) -> WriteSide:
        if self.writes is None:
            raise ReadOnly("this mount is read-only")
        return self.writes

    @asynccontextmanager
    async def _told(self, *locked: int) -> AsyncIterator[None]:
        """The names a change made here invalidated are sent before its request returns: ``rm``
        in ``tiff/`` then a look in ``zarr/`` found the array's directory for a moment more.
        ``locked``: inodes the kernel holds locked for this request (names in them go after)."""
        with self.kernel.locked(locked):
            yield
            upto = self.kernel.named()
            if not self.kernel.names_sent(upto):
                await self._thread(self.kernel.wait_named, upto, TOLD_TIMEOUT)

    def _ino_of(self, parent_inode: int, name: bytes) -> int:
        """The inode of ``name`` in ``parent_inode`` if the mount knows it (0 if not)."""
        parent = self.inodes.peek_ino(parent_inode)
        entry = None if parent is None else self.inodes.peek(self.inodes.child_path(parent, os.fsdecode(name)))
        return 0 if entry is None else entry.ino

    @fuse_errors
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx):
        return await self._writer().create(parent_inode, name, mode, flags, ctx)

    @fuse_errors
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        return await self._writer().write(fh, off, buf)

    @fuse_errors
    async def setattr(self, inode: int, attr, fields, fh, ctx) -> pyfuse3.EntryAttributes:
        async with self._told(inode):
            return await self._writer().setattr(inode, attr, fields, fh, ctx)

    @fuse_errors
    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx) -> pyfuse3.EntryAttributes:
        async with self._told(parent_inode):
            return await self._writer().mkdir(parent_inode, name, mode, ctx)

    @fuse_errors
    async def rmdir(self, parent_inode: int, name: bytes, ctx) -> None:
        async with self._told(parent_inode, self._ino_of(parent_inode, name)):
            await self._writer().rmdir(parent_inode, name, ctx)

    @fuse_errors
    async def unlink(self, parent_inode: int, name: bytes, ctx) -> None:
        async with self._told(parent_inode, self._ino_of(parent_inode, name)):
            await self._writer().unlink(parent_inode, name, ctx)

    @fuse_errors
    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes,
                     flags: int, ctx) -> None:
        async with self._told(parent_inode_old, parent_inode_new, self._ino_of(parent_inode_old, name_old),
                              self._ino_of(parent_inode_new, name_new)):
            await self._writer().rename(parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx)

    @fuse_errors
    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx) -> pyfuse3.EntryAttributes:
        async with self._told(new_parent_inode, inode):
            return await self._writer().link(inode, new_parent_inode, new_name, ctx)

    async def _refuse(self, *args: Any) -> Any:
        raise pyfuse3.FUSEError(errno.EROFS if self.read_only else errno.EPERM)

    mknod = symlink = _refuse

    @fuse_errors
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx) -> None:
        """No extended attributes are kept: ENOTSUP, which ``cp -a``, ``cp -p`` and ``mv``
        (copying ACLs and ``user.*`` attributes) take as "not supported here" and skip."""
        self.inodes.get(inode)
        raise pyfuse3.FUSEError(errno.EROFS if self.read_only else errno.ENOTSUP)

    @fuse_errors
    async def removexattr(self, inode: int, name: bytes, ctx) -> None:
        self.inodes.get(inode)
        raise pyfuse3.FUSEError(errno.EROFS if self.read_only else pyfuse3.ENOATTR)
