"""A minimal read-only pyfuse3 pass-through file system: the ceiling a pyfuse3
daemon can reach on this machine, measured beside polyfs in the same run.

    .venv/bin/python scripts/fuse_ceiling.py SOURCE_DIR MOUNTPOINT   (foreground; umount to stop)

It does the least a pyfuse3 file system can do: inodes are paths, every reply
is computed on the trio loop with no worker thread, reads are one ``os.pread``
on a descriptor opened at ``open``, and the kernel may keep its page cache
(``keep_cache``) and cache entries and attributes for a minute. Benchmarks
(``bench_read.py``) mount it over a local copy of the same bytes a view serves,
so polyfs's figures can be printed as ratios to it.
"""
from __future__ import annotations

import errno
import os
import stat
import sys

import pyfuse3
import trio

TIMEOUT = 60.0


class Passthrough(pyfuse3.Operations):
    """Read-only mirror of one directory tree."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.paths: dict[int, str] = {pyfuse3.ROOT_INODE: source}
        self.inodes: dict[str, int] = {source: pyfuse3.ROOT_INODE}
        self.fds: dict[int, int] = {}

    def _ino(self, path: str) -> int:
        ino = self.inodes.get(path)
        if ino is None:
            ino = len(self.paths) + pyfuse3.ROOT_INODE
            self.paths[ino] = path
            self.inodes[path] = ino
        return ino

    def _attr(self, path: str, ino: int) -> pyfuse3.EntryAttributes:
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.st_mode = (st.st_mode & ~0o222) if stat.S_ISREG(st.st_mode) else st.st_mode
        a.st_nlink = st.st_nlink
        a.st_size = st.st_size
        a.st_uid, a.st_gid = st.st_uid, st.st_gid
        a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
        a.st_blksize = 1 << 20
        a.st_blocks = st.st_blocks
        a.entry_timeout = a.attr_timeout = TIMEOUT
        return a

    async def lookup(self, parent_inode: int, name: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        path = os.path.join(self.paths[parent_inode], os.fsdecode(name))
        return self._attr(path, self._ino(path))

    async def getattr(self, inode: int, ctx=None) -> pyfuse3.EntryAttributes:
        return self._attr(self.paths[inode], inode)

    async def opendir(self, inode: int, ctx) -> int:
        return inode

    async def readdir(self, fh: int, start_id: int, token) -> None:
        base = self.paths[fh]
        names = sorted(os.listdir(base))
        for i, name in enumerate(names[start_id:], start_id):
            path = os.path.join(base, name)
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._attr(path, self._ino(path)), i + 1):
                return

    async def open(self, inode: int, flags: int, ctx) -> pyfuse3.FileInfo:
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise pyfuse3.FUSEError(errno.EROFS)
        fd = os.open(self.paths[inode], os.O_RDONLY)
        self.fds[fd] = inode
        return pyfuse3.FileInfo(fh=fd, keep_cache=True)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return os.pread(fh, size, off)

    async def release(self, fh: int) -> None:
        self.fds.pop(fh, None)
        os.close(fh)


def main() -> None:
    source, mountpoint = os.path.abspath(sys.argv[1]), sys.argv[2]
    opts = set(pyfuse3.default_options)
    opts.discard("default_permissions")
    opts |= {"fsname=fuse_ceiling", "ro"}
    pyfuse3.init(Passthrough(source), mountpoint, opts)
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
