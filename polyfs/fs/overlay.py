"""Files and directories being written, before (or instead of) the store.

A file opened for writing gets a private buffer holding what the writer
sees: empty for a new or truncated file, else the view file's bytes. At
flush/fsync the buffer is handed to the write service (which validates and
ingests it); files the service does not recognise (lock files, temporaries)
stay here as scratch files until renamed onto a real name or unlinked.
Directories made inside an array (``c/0/``) exist here until the view shows
them. Nothing in the overlay survives the daemon (documented in SEMANTICS.md).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..vfile import Literal, VFile
from ..views.base import DirNode, FileNode, Node


class PendingFile(FileNode):
    """A file's bytes as its writers left them."""

    def __init__(self, path: str, data: bytes | bytearray, ingest: bool, base_time: float) -> None:
        super().__init__(path.rsplit("/", 1)[-1], self._snapshot, mtime=time.time())
        self.path = path
        self.data = bytearray(data)
        self.ingest = ingest  # flush hands it to the write service (else: scratch)
        self.dirty = False
        self.opens = 0
        self.base_time = base_time
        self.lock = threading.Lock()

    def _snapshot(self) -> VFile:
        return VFile([Literal(bytes(self.data))])

    def vfile(self) -> VFile:
        with self.lock:
            return self._snapshot()

    def size(self) -> int:
        return len(self.data)

    def ready(self) -> bool:
        return True

    @property
    def built(self) -> bool:
        return True

    def write(self, off: int, buf: bytes) -> int:
        with self.lock:
            end = off + len(buf)
            if end > len(self.data):
                self.data.extend(b"\0" * (end - len(self.data)))
            self.data[off:end] = buf
            self.dirty = True
            self.mtime = time.time()
        return len(buf)

    def read(self, off: int, size: int) -> bytes:
        with self.lock:
            return bytes(self.data[off:off + size])

    def truncate(self, size: int) -> None:
        with self.lock:
            if size < len(self.data):
                del self.data[size:]
            else:
                self.data.extend(b"\0" * (size - len(self.data)))
            self.dirty = True
            self.mtime = time.time()

    def contents(self) -> bytes:
        with self.lock:
            return bytes(self.data)


class PendingDir(DirNode):
    """A directory made through a view that the store does not (yet) show."""

    def __init__(self, path: str) -> None:
        super().__init__(path.rsplit("/", 1)[-1], {}, cheap=True)
        self.path = path


@dataclass
class Overlay:
    files: dict[str, PendingFile] = field(default_factory=dict)
    dirs: dict[str, PendingDir] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, path: str) -> Node | None:
        with self.lock:
            return self.files.get(path) or self.dirs.get(path)

    def children(self, path: str) -> dict[str, Node]:
        """Overlay entries directly inside directory ``path``."""
        prefix = path + "/" if path else ""
        with self.lock:
            out: dict[str, Node] = {}
            for table in (self.dirs, self.files):
                for p, node in table.items():
                    if p.startswith(prefix) and "/" not in p[len(prefix):]:
                        out[p[len(prefix):]] = node
            return out

    def add_file(self, f: PendingFile) -> None:
        with self.lock:
            self.files[f.path] = f

    def add_dir(self, path: str) -> PendingDir:
        with self.lock:
            return self.dirs.setdefault(path, PendingDir(path))

    def drop(self, path: str) -> None:
        with self.lock:
            self.files.pop(path, None)
            self.dirs.pop(path, None)

    def has_below(self, path: str) -> bool:
        prefix = path + "/"
        with self.lock:
            return any(p.startswith(prefix) for p in self.files) or any(p.startswith(prefix) for p in self.dirs)
