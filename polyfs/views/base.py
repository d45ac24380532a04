"""The view protocol: a view turns a domain model into a tree of virtual nodes.

Nodes are lazy: a directory computes its entries, a file its :class:`VFile`,
the first time someone asks, and keeps them. Both may do store I/O (chunk
listings, a sniff), so the FUSE layer calls ``entries()``/``vfile()`` from a
worker thread. Views know formats; they know nothing of FUSE.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..vfile import Literal, VFile

if TYPE_CHECKING:  # pragma: no cover
    from ..model.catalog import Catalog


@dataclass
class ViewOptions:
    """Mount options the views read (see config.py for where they come from)."""

    shard_max_chunks: int = 512  # Zarr: most inner chunks per shard (rule in zarr3.shard_shape)
    shard_shape: dict[str, list[int]] = field(default_factory=dict)  # per dataset path override
    zarr_sharded: bool = True  # False: one file per chunk (c/i/j/k)
    zarr_numcodecs: bool = False  # True: serve shuffle/fletcher32/bz2 chunks as stored, as numcodecs.* codecs
    tiff_deflate_level: int = 0  # transcoded TIFF tiles: 0 = uncompressed (stat and first read need no encoding)
    transcode_cache_bytes: int = 256 << 20


@dataclass
class ViewContext:
    """What views may consult besides the model: chunk sizes, pipelines, CRCs."""

    catalog: "Catalog"
    options: ViewOptions = field(default_factory=ViewOptions)
    domains: Any = None  # the mount's DomainList (root.py), once built

    @property
    def store(self):
        return self.catalog.store


class Node:
    name: str
    mtime: float

    @property
    def is_dir(self) -> bool:
        raise NotImplementedError

    def ready(self) -> bool:
        """True when ``entries()`` (directories) or ``size()`` (files) would do no I/O,
        so the FUSE loop may answer itself instead of handing off to a thread."""
        return False


class DirNode(Node):
    """A directory whose entries are computed once by ``loader``."""

    def __init__(self, name: str, loader: Callable[[], Mapping[str, Node]] | dict[str, Node],
                 mtime: float | None = None, cheap: bool = False) -> None:
        """``cheap``: the loader only arranges data already in memory (no I/O)."""
        self.name = name
        self.cheap = cheap
        self.mtime = mtime if mtime is not None else time.time()
        self._loader = loader
        self._entries: Mapping[str, Node] | None = loader if isinstance(loader, dict) else None
        self._lock = threading.Lock()

    @property
    def is_dir(self) -> bool:
        return True

    def entries(self) -> Mapping[str, Node]:
        if self._entries is None:
            with self._lock:
                if self._entries is None:
                    assert callable(self._loader)
                    self._entries = self._loader()
        return self._entries

    @property
    def loaded(self) -> bool:
        return self._entries is not None

    def ready(self) -> bool:
        return self._entries is not None or self.cheap

    def reset(self) -> None:
        """Forget the entries so the next ``entries()`` recomputes them."""
        if callable(self._loader):
            with self._lock:
                self._entries = None


class FileNode(Node):
    """A file whose :class:`VFile` is built once by ``builder``.

    ``size_hint`` lets a view give the size without building the whole file
    (it must equal ``vfile().size``).
    """

    def __init__(self, name: str, builder: Callable[[], VFile] | VFile, mtime: float | None = None,
                 size_hint: Callable[[], int] | None = None, cheap_hint: bool = False,
                 cheap_build: bool = False) -> None:
        """``cheap_hint``: the size hint is arithmetic on data already in memory;
        ``cheap_build``: so is building the VFile (segments from known sizes, no I/O)."""
        self.name = name
        self.cheap_hint = cheap_hint and size_hint is not None
        self.cheap_build = cheap_build
        self.mtime = mtime if mtime is not None else time.time()
        self._builder = builder
        self._vfile: VFile | None = builder if isinstance(builder, VFile) else None
        self._size_hint = size_hint
        self._lock = threading.Lock()

    @property
    def is_dir(self) -> bool:
        return False

    def ready(self) -> bool:
        return self._vfile is not None or self.cheap_hint

    def resolved(self) -> "FileNode":
        """The node that builds this file now (a stand-in that follows its domain's versions
        gives the current version's own node): its VFile and what its view planned belong
        together."""
        return self

    @property
    def built(self) -> bool:
        """Opening needs no I/O: the VFile exists or is cheap to make."""
        return self._vfile is not None or self.cheap_build

    def vfile(self) -> VFile:
        if self._vfile is None:
            with self._lock:
                if self._vfile is None:
                    assert callable(self._builder)
                    self._vfile = self._builder()
        return self._vfile

    def size(self) -> int:
        if self._vfile is None and self._size_hint is not None:
            return self._size_hint()
        return self.vfile().size


def entry_name_problem(name: str) -> str | None:
    """Why ``name`` (an object's name in the store) cannot be a directory entry, else None.
    HDF5 takes ``..`` as a link name and the HSDS schema any text: listed, such an entry would
    be the parent directory to every tool (``find``, ``rm -r``) and its object unreachable."""
    if name in ("", ".", ".."):
        return f"{name!r} names a directory itself in every file system"
    if "/" in name or "\0" in name:
        return f"{name!r} holds a character no file name may hold ('/' or NUL)"
    return None


def literal_file(name: str, data: bytes, mtime: float | None = None) -> FileNode:
    """A small file of known bytes (metadata JSON)."""
    return FileNode(name, VFile([Literal(data)]), mtime)


def json_file(name: str, obj: Any, mtime: float | None = None) -> FileNode:
    import json

    return literal_file(name, (json.dumps(obj, indent=2, allow_nan=True) + "\n").encode("utf-8"), mtime)
