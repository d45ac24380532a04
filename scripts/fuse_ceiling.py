"""A minimal pyfuse3 pass-through file system: the ceiling a pyfuse3 daemon can
reach on this machine, measured beside polyfs in the same run.

    .venv/bin/python scripts/fuse_ceiling.py SOURCE_DIR MOUNTPOINT [--writable]
        (foreground; umount to stop)

It does the least a pyfuse3 file system can do: inodes are paths, every reply
is computed on the trio loop with no worker thread, reads are one ``os.pread``
on a descriptor opened at ``open``, and the kernel may keep its page cache
(``keep_cache``) and cache entries and attributes for a minute. Benchmarks
(``bench_read.py``) mount it over a local copy of the same bytes a view serves,
so polyfs's figures can be printed as ratios to it.

``--writable`` adds what a writer needs (create, write, fsync, mkdir, rename,
unlink, truncate), each one call on the source directory: ``bench_write.py``
times the same tensorstore or zarr-python write through it, so the share of a
write's time that any pyfuse3 daemon adds on this machine is printed beside
polyfs's. Written files are opened ``direct_io`` as polyfs opens them.
"""
from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pyfuse3
import trio

TIMEOUT = 60.0


class Passthrough(pyfuse3.Operations):
    """Read-only mirror of one directory tree."""

    def __init__(self, source: str, writable: bool = False) -> None:
        super().__init__()
        self.writable = writable
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
        a.st_mode = (st.st_mode & ~0o222) if stat.S_ISREG(st.st_mode) and not self.writable else st.st_mode
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
        writing = bool(flags & (os.O_WRONLY | os.O_RDWR))
        if writing and not self.writable:
            raise pyfuse3.FUSEError(errno.EROFS)
        fd = self._os(os.open, self.paths[inode], os.O_RDWR if writing else os.O_RDONLY)
        if writing and flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
        self.fds[fd] = inode
        return pyfuse3.FileInfo(fh=fd, keep_cache=not writing, direct_io=writing)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return os.pread(fh, size, off)

    async def release(self, fh: int) -> None:
        self.fds.pop(fh, None)
        os.close(fh)

    # -- writes (--writable) ---------------------------------------------------
    @staticmethod
    def _os(fn, *args):  # noqa: ANN001, ANN205 - any os call, its OSError as the FUSE errno
        try:
            return fn(*args)
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None

    def _child(self, parent_inode: int, name: bytes) -> str:
        if not self.writable:
            raise pyfuse3.FUSEError(errno.EROFS)
        return os.path.join(self.paths[parent_inode], os.fsdecode(name))

    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx):
        path = self._child(parent_inode, name)
        fd = self._os(os.open, path, os.O_RDWR | os.O_CREAT | (flags & (os.O_EXCL | os.O_TRUNC)), mode & 0o7777)
        ino = self._ino(path)
        self.fds[fd] = ino
        return pyfuse3.FileInfo(fh=fd, direct_io=True), self._attr(path, ino)

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        return self._os(os.pwrite, fh, buf, off)

    async def fsync(self, fh: int, datasync: bool) -> None:
        self._os(os.fsync, fh)

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        fd = self._os(os.open, self.paths[fh], os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def flush(self, fh: int) -> None:
        return None

    async def setattr(self, inode: int, attr, fields, fh, ctx) -> pyfuse3.EntryAttributes:
        if not self.writable:
            raise pyfuse3.FUSEError(errno.EROFS)
        path = self.paths[inode]
        if fields.update_size:
            self._os(os.truncate, path, attr.st_size)
        if fields.update_mode:
            self._os(os.chmod, path, stat.S_IMODE(attr.st_mode))
        if fields.update_mtime or fields.update_atime:
            st = os.lstat(path)
            times = (attr.st_atime_ns if fields.update_atime else st.st_atime_ns,
                     attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns)
            self._os(lambda: os.utime(path, ns=times))
        return self._attr(path, inode)

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx) -> pyfuse3.EntryAttributes:
        path = self._child(parent_inode, name)
        self._os(os.mkdir, path, mode & 0o7777)
        return self._attr(path, self._ino(path))

    async def unlink(self, parent_inode: int, name: bytes, ctx) -> None:
        path = self._child(parent_inode, name)
        self._os(os.unlink, path)
        self._forget(path)

    async def rmdir(self, parent_inode: int, name: bytes, ctx) -> None:
        path = self._child(parent_inode, name)
        self._os(os.rmdir, path)
        self._forget(path)

    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes,
                     flags: int, ctx) -> None:
        old, new = self._child(parent_inode_old, name_old), self._child(parent_inode_new, name_new)
        if flags:  # RENAME_NOREPLACE / RENAME_EXCHANGE: not needed by the benchmarked writers
            raise pyfuse3.FUSEError(errno.EINVAL)
        self._os(os.rename, old, new)
        self._forget(new)
        moved = {p: i for p, i in self.inodes.items() if p == old or p.startswith(old + os.sep)}
        for p, i in moved.items():
            del self.inodes[p]
            q = new + p[len(old):]
            self.inodes[q], self.paths[i] = i, q

    def _forget(self, path: str) -> None:
        """A name that is gone: its inode number is never handed out again for another file."""
        ino = self.inodes.pop(path, None)
        if ino is not None:
            self.paths[ino] = path + "\0gone"

    async def statfs(self, ctx) -> pyfuse3.StatvfsData:
        st = os.statvfs(self.paths[pyfuse3.ROOT_INODE])
        out = pyfuse3.StatvfsData()
        for f in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
                  "f_namemax"):
            setattr(out, f, getattr(st, f))
        return out


class Ceiling:
    """This file system mounted over ``source`` at ``mountpoint`` in a child process, for
    the length of a ``with`` (the benchmarks' side by side runs)."""

    def __init__(self, source: Path, mountpoint: Path, writable: bool = False) -> None:
        self.source, self.mnt, self.writable = source, mountpoint, writable

    def __enter__(self) -> Path:
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(self.source), str(self.mnt)]
                                     + (["--writable"] if self.writable else []))
        deadline = time.time() + 30
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("fuse_ceiling.py did not mount")
            time.sleep(0.05)
        return self.mnt

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", str(self.mnt)], check=False)
        self.proc.wait(timeout=30)


def main() -> None:
    source, mountpoint = os.path.abspath(sys.argv[1]), sys.argv[2]
    writable = "--writable" in sys.argv[3:]
    opts = set(pyfuse3.default_options)
    opts.discard("default_permissions")
    opts |= {"fsname=fuse_ceiling"} | (set() if writable else {"ro"})
    pyfuse3.init(Passthrough(source, writable), mountpoint, opts)
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
