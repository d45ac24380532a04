"""Inode numbers for view nodes, with the kernel's lookup counts.

A node is identified by its path in the mount; the table hands out an inode
number the first time a path is looked up and forgets it when the kernel has
forgotten every lookup (so a million N5 block files do not pin memory). The
number a path had is given back to it when it is looked up again soon after
(the last RECENT forgotten paths): a write's commit makes the kernel drop the
domain's names, and a tool that checks a directory is the same between ``lstat``
and ``open`` (``shutil.rmtree``: "Cannot call rmtree on a symbolic link") must
not see it renumbered in between. Numbers are never handed to another path.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import NotFound
from ..views.base import Node

ROOT_INODE = 1
RECENT = 65536  # forgotten paths whose inode numbers are kept for them


@dataclass
class InodeEntry:
    ino: int
    path: str
    node: Node
    lookups: int = 0
    served: object = None  # the VFile last opened through this inode (page-cache decisions)
    version: int = 0  # the write version of the tree ``node`` was resolved at
    replaced_at: float | None = None  # another file was renamed over this one's path (its bytes are older)
    unlinked: bool = False  # its name was removed (detach): it is no longer the file at ``path``
    # file handles open for reading -> the size of the layout each reads (see Operations.open)
    reading: dict[int, int] = field(default_factory=dict)
    # what the kernel may hold (kernelcache.py): until when (monotonic) its name and its
    # attributes were handed out with a timeout, and the domain the path is in
    name_until: float = 0.0
    attr_until: float = 0.0
    domain: str | None = None


class _PathTree:
    """The table's inode numbers arranged by path components, so the entries at or below a
    path are found in the time of what is there (a write's commit pushes its domain's entries
    to the kernel: a scan of every inode known to the mount, tens of thousands after an
    ``ls -lR``, made each commit cost that).

    A node is a dict (component -> child; the key None holds its inode numbers: an int, or a
    set when an unlinked file shares the path) or, for a path with one inode and nothing
    below it (most files), that inode number itself: a leaf costs a dict slot."""

    def __init__(self) -> None:
        self._root: dict = {}

    def add(self, path: str, ino: int) -> None:
        parts = path.split("/") if path else []
        node = self._root
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {} if child is None else {None: child}
            node = child
        if not parts:
            _put(node, ino)
            return
        last = parts[-1]
        child = node.get(last)
        if child is None:
            node[last] = ino
        elif isinstance(child, dict):
            _put(child, ino)
        elif child != ino:
            node[last] = {None: {child, ino}}

    def discard(self, path: str, ino: int) -> None:
        parts = path.split("/") if path else []
        trail = [self._root]
        for part in parts[:-1]:
            child = trail[-1].get(part)
            if not isinstance(child, dict):
                return
            trail.append(child)
        if not parts:
            _take(self._root, ino)
            return
        here, last = trail[-1], parts[-1]
        child = here.get(last)
        if child == ino and not isinstance(child, dict):
            del here[last]
        elif isinstance(child, dict):
            _take(child, ino)
            if not child:
                del here[last]
            elif list(child) == [None] and isinstance(child[None], int):
                here[last] = child[None]  # a leaf again
        for i in range(len(parts) - 1, 0, -1):  # drop the directories this left empty
            if trail[i]:
                break
            del trail[i - 1][parts[i - 1]]

    def below(self, path: str) -> list[int]:
        """Inode numbers at ``path`` or below it."""
        node: dict | int | None = self._root
        for part in path.split("/") if path else ():
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                return []
        out: list[int] = []
        stack = [node]
        while stack:
            here = stack.pop()
            if not isinstance(here, dict):
                out.append(here)
                continue
            for key, child in here.items():
                if key is None:
                    out.extend(child) if isinstance(child, set) else out.append(child)
                else:
                    stack.append(child)
        return out


def _put(node: dict, ino: int) -> None:
    have = node.get(None)
    if have is None:
        node[None] = ino
    elif isinstance(have, set):
        have.add(ino)
    elif have != ino:
        node[None] = {have, ino}


def _take(node: dict, ino: int) -> None:
    have = node.get(None)
    if have == ino and not isinstance(have, set):
        del node[None]
    elif isinstance(have, set):
        have.discard(ino)
        if len(have) == 1:
            node[None] = next(iter(have))


class InodeTable:
    def __init__(self, root: Node) -> None:
        self._lock = threading.Lock()
        self._by_ino: dict[int, InodeEntry] = {ROOT_INODE: InodeEntry(ROOT_INODE, "", root, 1)}
        self._tree = _PathTree()
        self._tree.add("", ROOT_INODE)
        self._by_path: dict[str, int] = {"": ROOT_INODE}
        self._next = ROOT_INODE + 1
        self._recent: OrderedDict[str, int] = OrderedDict()  # path -> its number, forgotten lately

    def get(self, ino: int) -> InodeEntry:
        try:
            return self._by_ino[ino]
        except KeyError:
            raise NotFound(f"stale inode {ino}") from None

    def child_path(self, parent: InodeEntry, name: str) -> str:
        return f"{parent.path}/{name}" if parent.path else name

    def remember(self, path: str, node: Node, count_lookup: bool = True) -> InodeEntry:
        """The entry for ``path`` (created if new); counts one kernel lookup."""
        with self._lock:
            ino = self._by_path.get(path)
            if ino is not None:
                entry = self._by_ino[ino]
                entry.node = node  # the view may have re-rendered it
            else:
                ino = self._recent.pop(path, None)
                if ino is None or ino in self._by_ino:
                    ino = self._next
                    self._next += 1
                entry = InodeEntry(ino, path, node)
                self._by_ino[ino] = entry
                self._tree.add(path, ino)
                self._by_path[path] = ino
            if count_lookup:
                entry.lookups += 1
            return entry

    def peek_ino(self, ino: int) -> InodeEntry | None:
        return self._by_ino.get(ino)

    def peek(self, path: str) -> InodeEntry | None:
        with self._lock:
            ino = self._by_path.get(path)
            return self._by_ino.get(ino) if ino is not None else None

    def forget(self, ino: int, n: int) -> None:
        if ino == ROOT_INODE:
            return
        with self._lock:
            entry = self._by_ino.get(ino)
            if entry is None:
                return
            entry.lookups -= n
            if entry.lookups <= 0:
                del self._by_ino[ino]
                self._tree.discard(entry.path, ino)
                if self._by_path.get(entry.path) == ino:
                    del self._by_path[entry.path]
                    self._recent[entry.path] = ino  # still the path's file: its number if looked up again
                    while len(self._recent) > RECENT:
                        self._recent.popitem(last=False)

    def entries(self) -> list[InodeEntry]:
        with self._lock:
            return list(self._by_ino.values())

    def below(self, prefixes: Iterable[str]) -> list[InodeEntry]:
        """The entries (unlinked ones too) whose path is one of ``prefixes`` or lies below one."""
        with self._lock:
            # "" is the root's own path, never a prefix (no path below it starts with "/")
            inos = {ino for p in set(prefixes) for ino in (self._tree.below(p) if p else [ROOT_INODE])}
            return [self._by_ino[i] for i in inos if i in self._by_ino]

    def rename(self, old: str, new: str, replaced_at: float) -> None:
        """A file renamed through the mount keeps its inode under the new path. The inode it
        replaced keeps the path too (an open through a path walk that raced the rename gets
        the file there now) and remembers when it was replaced: whatever was read through it
        is at most that new."""
        with self._lock:
            self._recent.pop(old, None)
            self._recent.pop(new, None)
            ino = self._by_path.pop(old, None)
            if ino is None:
                return
            stale = self._by_path.pop(new, None)
            if stale is not None and stale in self._by_ino:
                self._by_ino[stale].replaced_at = replaced_at
            self._by_path[new] = ino
            if ino in self._by_ino:
                self._tree.discard(old, ino)
                self._tree.add(new, ino)
                self._by_ino[ino].path = new

    def detach(self, path: str) -> None:
        """``path`` was unlinked or removed: the next file made there gets an inode of its own,
        as on a disk. A descriptor still open on the old one keeps *its* file (tensorstore's
        lock protocol tells a lock file unlinked under it from its successor by inode number:
        given the same number it wrote a shard into the unlinked file and renamed the new,
        empty one onto the shard, which deleted every chunk it held)."""
        with self._lock:
            self._recent.pop(path, None)  # a new file there is another file
            ino = self._by_path.pop(path, None)
            if ino is not None and ino in self._by_ino:
                self._by_ino[ino].unlinked = True

    def __len__(self) -> int:
        return len(self._by_ino)
