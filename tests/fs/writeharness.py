"""A small synchronous driver around polyfs's pyfuse3 ``Operations`` (tier 2: no kernel),
and codecs for Zarr v3 / N5 files written and read *independently of polyfs*.

Only stable entry points of polyfs are used: ``polyfs.daemon.build_operations``,
``polyfs.config.MountConfig``, ``polyfs.fs.inodes.ROOT_INODE``, the pyfuse3
``Operations`` methods, ``polyfs.store.open_store`` and (for "the store did not
change" checks only) ``polyfs.model.catalog.Catalog``.

Every path operation walks the path from the root with ``lookup`` the way the
kernel does for a domain written through the mount (its entry timeout is 0, so
each component is looked up again). Errors surface as :class:`FsError`, an
``OSError`` whose ``errno`` is the one the kernel would return to the caller.

The codec half (``zarr_array_meta``, ``encode_chunk``, ``encode_shard``,
``n5_block``, ``read_zarr_array``, ``read_n5_array``...) builds the bytes a
Zarr or N5 writer would write and decodes what the views serve with numpy,
numcodecs and crc32c only, so a test never checks polyfs against itself.
"""
from __future__ import annotations

import errno as _errno
import itertools
import json
import math
import os
import stat as _stat
import struct
import types
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import crc32c as _crc32c
import numcodecs
import numpy as np
import pyfuse3
import trio

from polyfs.config import MountConfig
from polyfs.daemon import build_operations
from polyfs.fs.inodes import ROOT_INODE
from polyfs.store import open_store

MISSING = 2 ** 64 - 1
READ_PIECE = 1 << 20  # bytes per read request
WRITE_PIECE = 128 << 10  # bytes per write request (the kernel's usual maximum)


def _pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 1 << 22  # Linux's upper bound for pid_max


_PID_MAX = _pid_max()


class FsError(OSError):
    """An operation refused with an errno (what the kernel hands the caller)."""


def unique_store_url(tag: str = "w") -> str:
    return f"memory://writeharness-{tag}-{uuid.uuid4().hex}"


class _Token:
    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []


class FS:
    """One ``Operations`` over one store, driven synchronously.

    ``FS()`` makes a fresh memory store; ``FS(url)`` mounts an existing one (a second
    "mount" of the same memory store); ``store=`` hands ``build_operations`` a store
    object (for fault injection)."""

    def __init__(self, url: str | None = None, *, read_only: bool = False, store: Any = None,
                 pid: int | None = None, **options: Any) -> None:
        self.url = url or unique_store_url()
        self.cfg = MountConfig(store=self.url, read_only=read_only, **options)
        self.raw_store = open_store(self.url)  # the same objects, for snapshots
        self.ops = build_operations(self.cfg, store=store)
        self.pid = os.getpid() if pid is None else pid
        self.ctx = types.SimpleNamespace(pid=self.pid, uid=os.getuid(), gid=os.getgid(), umask=0o022)
        self.owner = url is None  # made the store: close() frees it

    def fresh(self, **options: Any) -> FS:
        """Another mount of the same store (its own caches), e.g. a reader after a remount
        (``read_only=True`` for one that only reads: a writable one keeps a daemon thread)."""
        return FS(self.url, **options)

    def as_pid(self, pid: int) -> FS:
        """The same mount as seen by another process (its own read-modify-write bases).

        The daemon keeps bases per thread group, read from ``/proc/<pid>/status``: the number
        given is moved past ``pid_max``, where no task lives. ``os.getpid() + 101`` and
        ``+ 202`` were at times two threads of one busy process (a daemon of a mount test
        in the other xdist worker), so both "processes" were one writer to the daemon."""
        pid = _PID_MAX + pid
        other = object.__new__(FS)
        other.__dict__.update(self.__dict__)
        other.pid = pid
        other.ctx = types.SimpleNamespace(pid=pid, uid=os.getuid(), gid=os.getgid(), umask=0o022)
        return other

    # -- plumbing --------------------------------------------------------------------------
    def call(self, fn, *args: Any, path: str = "") -> Any:
        """Await one operation; a ``FUSEError`` becomes :class:`FsError`."""
        try:
            return trio.run(fn, *args)
        except pyfuse3.FUSEError as exc:
            code = exc.errno
            raise FsError(code, os.strerror(code), path or None) from None

    def errno_of(self, fn, *args: Any) -> int:
        """0 when ``fn(*args)`` (a method of this class) succeeds, else its errno."""
        try:
            fn(*args)
        except OSError as exc:
            return exc.errno
        return 0

    @staticmethod
    def _parts(path: str) -> list[str]:
        return [p for p in path.split("/") if p]

    def lookup(self, path: str) -> pyfuse3.EntryAttributes:
        parts = self._parts(path)
        if not parts:
            return self.call(self.ops.getattr, ROOT_INODE, self.ctx, path="/")
        ino = ROOT_INODE
        attr = None
        walked = ""
        for name in parts:
            walked = f"{walked}/{name}" if walked else name
            attr = self.call(self.ops.lookup, ino, os.fsencode(name), self.ctx, path=walked)
            ino = attr.st_ino
        return attr

    def ino(self, path: str) -> int:
        return self.lookup(path).st_ino if self._parts(path) else ROOT_INODE

    def _parent(self, path: str) -> tuple[int, bytes]:
        parts = self._parts(path)
        if not parts:
            raise ValueError("the root has no parent")
        return self.ino("/".join(parts[:-1])), os.fsencode(parts[-1])

    # -- queries ---------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        try:
            self.lookup(path)
            return True
        except FsError as exc:
            if exc.errno == _errno.ENOENT:
                return False
            raise

    def stat(self, path: str) -> pyfuse3.EntryAttributes:
        ino = self.ino(path)
        return self.call(self.ops.getattr, ino, self.ctx, path=path)

    def is_dir(self, path: str) -> bool:
        return _stat.S_ISDIR(self.stat(path).st_mode)

    def ls(self, path: str = "") -> list[str]:
        ino = self.ino(path)
        fh = self.call(self.ops.opendir, ino, self.ctx, path=path)
        token = _Token()
        orig = pyfuse3.readdir_reply

        def reply(tok, name, attr, next_id):
            if tok is token:
                tok.items.append((os.fsdecode(name), attr))
                return True
            return orig(tok, name, attr, next_id)

        pyfuse3.readdir_reply = reply
        try:
            self.call(self.ops.readdir, fh, 0, token, path=path)
        finally:
            pyfuse3.readdir_reply = orig
            self.call(self.ops.releasedir, fh, path=path)
        return sorted(name for name, _ in token.items)

    def walk_files(self, path: str) -> list[str]:
        """Every file below ``path`` (paths relative to it), like ``find -type f``."""
        out = []
        for name in self.ls(path):
            full = f"{path}/{name}"
            if self.is_dir(full):
                out += [f"{name}/{sub}" for sub in self.walk_files(full)]
            else:
                out.append(name)
        return sorted(out)

    def read_file(self, path: str) -> bytes:
        ino = self.ino(path)
        fi = self.call(self.ops.open, ino, os.O_RDONLY, self.ctx, path=path)
        out = bytearray()
        try:
            while True:
                piece = self.call(self.ops.read, fi.fh, len(out), READ_PIECE, path=path)
                if not piece:
                    break
                out += piece
                if len(piece) < READ_PIECE:
                    break
        finally:
            self.call(self.ops.release, fi.fh, path=path)
        return bytes(out)

    def read_json(self, path: str) -> Any:
        return json.loads(self.read_file(path))

    # -- writing files ---------------------------------------------------------------------
    def open_file(self, path: str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode: int = 0o644) -> Handle:
        """open(2): an existing file is opened, else ``create`` is called (with O_CREAT)."""
        try:
            ino = self.ino(path)
        except FsError as exc:
            if exc.errno != _errno.ENOENT or not flags & os.O_CREAT:
                raise
            parent, name = self._parent(path)
            fi, _attr = self.call(self.ops.create, parent, name, mode, flags, self.ctx, path=path)
            return Handle(self, path, fi.fh)
        if flags & os.O_CREAT and flags & os.O_EXCL:
            raise FsError(_errno.EEXIST, os.strerror(_errno.EEXIST), path)
        fi = self.call(self.ops.open, ino, flags & ~(os.O_CREAT | os.O_EXCL), self.ctx, path=path)
        return Handle(self, path, fi.fh)

    def create_excl(self, path: str) -> Handle:
        """``create`` with O_EXCL sent to the file system itself."""
        parent, name = self._parent(path)
        fi, _ = self.call(self.ops.create, parent, name, 0o644, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.ctx,
                          path=path)
        return Handle(self, path, fi.fh)

    def write_file(self, path: str, data: bytes, truncate: bool = True) -> int:
        """``open(path, "wb" or "r+b"); write; close()``: the error of ``close()`` (the flush)
        is raised; release always follows, as in the kernel."""
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        h = self.open_file(path, flags)
        try:
            h.write(data, 0)
            h.flush()
        finally:
            h.release()
        return len(data)

    def write_json(self, path: str, obj: Any) -> int:
        return self.write_file(path, json.dumps(obj).encode())

    # -- the tree ----------------------------------------------------------------------------
    def mkdir(self, path: str, mode: int = 0o755) -> pyfuse3.EntryAttributes:
        parent, name = self._parent(path)
        return self.call(self.ops.mkdir, parent, name, mode, self.ctx, path=path)

    def makedirs(self, path: str) -> None:
        walked = ""
        for name in self._parts(path):
            walked = f"{walked}/{name}" if walked else name
            if not self.exists(walked):
                self.mkdir(walked)

    # unlink, rmdir and rename resolve their last component first, as the kernel does (a
    # domain written through the mount has entry timeout 0: every name is looked up again)
    def rmdir(self, path: str) -> None:
        parent, name = self._parent(path)
        self.lookup(path)
        self.call(self.ops.rmdir, parent, name, self.ctx, path=path)

    def unlink(self, path: str) -> None:
        parent, name = self._parent(path)
        self.lookup(path)
        self.call(self.ops.unlink, parent, name, self.ctx, path=path)

    def rm_r(self, path: str, force: bool = False) -> None:
        """``rm -r`` (``rm -rf`` with ``force``: a name already gone is no error): files
        first, then each directory once emptied."""
        def gone(exc: FsError) -> bool:
            return force and exc.errno == _errno.ENOENT

        try:
            names = self.ls(path)
        except FsError as exc:
            if gone(exc):
                return
            raise
        for name in names:
            full = f"{path}/{name}"
            try:
                if self.is_dir(full):
                    self.rm_r(full, force)
                else:
                    self.unlink(full)
            except FsError as exc:
                if not gone(exc):
                    raise
        try:
            self.rmdir(path)
        except FsError as exc:
            if not gone(exc):
                raise

    def rename(self, src: str, dst: str, flags: int = 0) -> None:
        p_old, n_old = self._parent(src)
        self.lookup(src)
        p_new, n_new = self._parent(dst)
        self.call(self.ops.rename, p_old, n_old, p_new, n_new, flags, self.ctx, path=src)

    def link(self, src: str, dst: str) -> pyfuse3.EntryAttributes:
        ino = self.ino(src)
        parent, name = self._parent(dst)
        return self.call(self.ops.link, ino, parent, name, self.ctx, path=dst)

    def symlink(self, path: str, target: str) -> None:
        parent, name = self._parent(path)
        self.call(self.ops.symlink, parent, name, os.fsencode(target), self.ctx, path=path)

    def mknod(self, path: str, mode: int = _stat.S_IFIFO | 0o644, rdev: int = 0) -> None:
        parent, name = self._parent(path)
        self.call(self.ops.mknod, parent, name, mode, rdev, self.ctx, path=path)

    def setxattr(self, path: str, name: str, value: bytes) -> None:
        self.call(self.ops.setxattr, self.ino(path), os.fsencode(name), value, self.ctx, path=path)

    def removexattr(self, path: str, name: str) -> None:
        self.call(self.ops.removexattr, self.ino(path), os.fsencode(name), self.ctx, path=path)

    def setattr(self, path: str, fh: int | None = None, **values: Any) -> pyfuse3.EntryAttributes:
        """setattr(2) family: ``size=``, ``mode=``, ``uid=``, ``gid=``, ``atime_ns=``, ``mtime_ns=``."""
        ino = self.ino(path)
        attr = pyfuse3.EntryAttributes()
        fields = types.SimpleNamespace(update_atime=False, update_mtime=False, update_ctime=False,
                                       update_mode=False, update_uid=False, update_gid=False,
                                       update_size=False)
        for key, value in values.items():
            if key == "size":
                attr.st_size, fields.update_size = value, True
            elif key == "mode":
                attr.st_mode, fields.update_mode = value, True
            elif key == "uid":
                attr.st_uid, fields.update_uid = value, True
            elif key == "gid":
                attr.st_gid, fields.update_gid = value, True
            elif key == "atime_ns":
                attr.st_atime_ns, fields.update_atime = value, True
            elif key == "mtime_ns":
                attr.st_mtime_ns, fields.update_mtime = value, True
            else:
                raise TypeError(f"unknown attribute {key}")
        return self.call(self.ops.setattr, ino, attr, fields, fh, self.ctx, path=path)

    def truncate(self, path: str, size: int) -> pyfuse3.EntryAttributes:
        return self.setattr(path, size=size)

    # -- the store underneath -----------------------------------------------------------------
    def snapshot(self) -> dict[str, bytes]:
        """Every object of the store, key -> bytes."""
        return {info.key: self.raw_store.get(info.key) for info in self.raw_store.list("")}

    def domains(self) -> list[str]:
        from polyfs.model.catalog import Catalog

        return sorted(Catalog(open_store(self.url, read_only=True)).list_domains())

    def state(self) -> tuple[dict[str, bytes], list[str]]:
        """What must not change when a write is refused: every object and the domain list."""
        return self.snapshot(), self.domains()

    def close(self) -> None:
        """Free the memory store's objects (memory stores live as long as the process). This
        mount's domain watcher thread lives on: it is told nothing more reaches the kernel, or
        finding its domains gone it would record notifications in a later test's ``sent``."""
        self.ops.kernel.push_entries = lambda *a, **k: None  # type: ignore[method-assign]
        if not self.owner or self.raw_store.read_only:
            return
        for info in list(self.raw_store.list("")):
            self.raw_store.delete(info.key)


class Handle:
    """An open file description."""

    def __init__(self, fs: FS, path: str, fh: int) -> None:
        self.fs, self.path, self.fh = fs, path, fh
        self.released = False

    def write(self, data: bytes, off: int = 0) -> int:
        done = 0
        while done < len(data):
            done += self.fs.call(self.fs.ops.write, self.fh, off + done, bytes(data[done:done + WRITE_PIECE]),
                                 path=self.path)
        return done

    def read(self, off: int, size: int) -> bytes:
        return self.fs.call(self.fs.ops.read, self.fh, off, size, path=self.path)

    def flush(self) -> None:
        self.fs.call(self.fs.ops.flush, self.fh, path=self.path)

    def fsync(self) -> None:
        self.fs.call(self.fs.ops.fsync, self.fh, False, path=self.path)

    def ftruncate(self, size: int) -> None:
        self.fs.setattr(self.path, fh=self.fh, size=size)

    def release(self) -> None:
        if not self.released:
            self.released = True
            try:
                self.fs.call(self.fs.ops.release, self.fh, path=self.path)
            except FsError:
                pass  # the kernel ignores release errors

    def close(self) -> None:
        """close(2): flush (its error is close's error), then release."""
        try:
            self.flush()
        finally:
            self.release()


# =============================================================================================
# Zarr v3, built and decoded by hand
# =============================================================================================
ZARR_DTYPES = {"bool": "?", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "uint8": "u1",
               "uint16": "u2", "uint32": "u4", "uint64": "u8", "float32": "f4", "float64": "f8"}
SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def zarr_dtype_name(dt: np.dtype) -> str:
    dt = np.dtype(dt)
    for name, code in ZARR_DTYPES.items():
        if np.dtype(code).kind == dt.kind and np.dtype(code).itemsize == dt.itemsize:
            return name
    raise ValueError(dt)


def zarr_codec(name: str, dtype: np.dtype | None = None) -> dict:
    """The JSON of one bytes->bytes codec by short name: gzip, zstd, blosc, crc32c."""
    if name == "gzip":
        return {"name": "gzip", "configuration": {"level": 5}}
    if name == "zstd":
        return {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
    if name == "blosc":
        return {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                    "typesize": np.dtype(dtype).itemsize if dtype else 1,
                                                    "blocksize": 0}}
    if name == "crc32c":
        return {"name": "crc32c"}
    raise ValueError(name)


def zarr_array_meta(shape: Iterable[int], dtype: Any, chunks: Iterable[int], *, shards: Iterable[int] | None = None,
                    codecs: Iterable[str] = ("zstd",), fill: Any = 0, attributes: dict | None = None,
                    dimension_names: list | None = None) -> dict:
    """A Zarr v3 array ``zarr.json`` (sharded when ``shards`` is given: ``chunks`` are then the
    inner chunks); the ``bytes`` codec's endianness is ``dtype``'s."""
    dt = np.dtype(dtype)
    bytes_codec: dict = {"name": "bytes"}
    if dt.itemsize > 1:
        bytes_codec["configuration"] = {"endian": "big" if dt.byteorder == ">" or (
            dt.byteorder == "=" and not np.little_endian) else "little"}
    chain = [bytes_codec] + [zarr_codec(c, dt) for c in codecs]
    if shards is not None:
        outer = list(shards)
        chain = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(chunks), "codecs": chain,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}]
    else:
        outer = list(chunks)
    meta = {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": zarr_dtype_name(dt),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": outer}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill_json(fill, dt), "codecs": chain, "attributes": dict(attributes or {})}
    if dimension_names is not None:
        meta["dimension_names"] = list(dimension_names)
    return meta


def zarr_group_meta(attributes: dict | None = None) -> dict:
    return {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes or {})}


def fill_json(fill: Any, dt: np.dtype) -> Any:
    if dt.kind == "b":
        return bool(fill)
    if dt.kind == "f":
        f = float(fill)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return f
    return int(fill)


def fill_from_json(value: Any, dt: np.dtype) -> Any:
    if isinstance(value, str):
        if value == "NaN":
            return np.nan
        if value == "Infinity":
            return np.inf
        if value == "-Infinity":
            return -np.inf
        if value.startswith("0x"):
            return np.frombuffer(int(value, 16).to_bytes(dt.itemsize, "big"), dtype=dt.newbyteorder(">"))[0]
        raise ValueError(value)
    return value


def _bytes_dtype(meta: dict, chain: list[dict]) -> np.dtype:
    code = ZARR_DTYPES[meta["data_type"]]
    dt = np.dtype(code)
    for c in chain:
        if c["name"] == "bytes":
            endian = (c.get("configuration") or {}).get("endian", "little")
            return dt.newbyteorder(">" if endian == "big" else "<") if dt.itemsize > 1 else dt
    raise ValueError(f"no bytes codec in {chain}")


def encode_with(chain: list[dict], arr: np.ndarray) -> bytes:
    """Encode one chunk with a Zarr v3 codec chain (bytes + bytes->bytes codecs)."""
    out: bytes | None = None
    for c in chain:
        name, cfg = c["name"], c.get("configuration") or {}
        if name == "bytes":
            endian = cfg.get("endian", "little")
            dt = arr.dtype.newbyteorder(">" if endian == "big" else "<") if arr.dtype.itemsize > 1 else arr.dtype
            arr = np.ascontiguousarray(arr, dtype=dt)
            out = arr.tobytes()
        elif name == "gzip":
            out = bytes(numcodecs.GZip(level=cfg.get("level", 5)).encode(out))
        elif name == "zstd":
            out = bytes(numcodecs.Zstd(level=cfg.get("level", 3), checksum=cfg.get("checksum", False)).encode(out))
        elif name == "blosc":
            codec = numcodecs.Blosc(cname=cfg.get("cname", "lz4"), clevel=cfg.get("clevel", 5),
                                    shuffle=SHUFFLE[cfg.get("shuffle", "noshuffle")],
                                    blocksize=cfg.get("blocksize", 0))
            typesize = cfg.get("typesize", 1)
            out = bytes(codec.encode(np.frombuffer(out, dtype=f"u{typesize}" if typesize in (2, 4, 8) else "u1")))
        elif name == "crc32c":
            out = out + struct.pack("<I", _crc32c.crc32c(out))
        else:
            raise ValueError(f"cannot encode {name}")
    assert out is not None
    return out


def decode_with(chain: list[dict], blob: bytes, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Decode one chunk encoded with a Zarr v3 codec chain."""
    data = blob
    for c in reversed(chain):
        name, cfg = c["name"], c.get("configuration") or {}
        if name == "bytes":
            arr = np.frombuffer(data, dtype=dtype)
            assert arr.size == math.prod(shape), (arr.size, shape)
            return arr.reshape(shape)
        if name == "crc32c":
            body, tail = data[:-4], data[-4:]
            assert struct.unpack("<I", tail)[0] == _crc32c.crc32c(body), "chunk crc32c mismatch"
            data = body
        elif name == "gzip":
            data = bytes(numcodecs.GZip().decode(data))
        elif name == "zstd":
            data = bytes(numcodecs.Zstd().decode(data))
        elif name == "blosc":
            data = bytes(numcodecs.Blosc().decode(data))
        elif name == "numcodecs.zlib":
            data = bytes(numcodecs.Zlib().decode(data))
        elif name == "numcodecs.bz2":
            data = bytes(numcodecs.BZ2().decode(data))
        elif name == "numcodecs.shuffle":
            data = bytes(numcodecs.Shuffle(elementsize=cfg.get("elementsize", dtype.itemsize)).decode(data))
        else:
            raise ValueError(f"cannot decode {name}")
    raise ValueError("no bytes codec")


def encode_shard(inner: dict[int, bytes], n_inner: int, index_location: str = "end",
                 corrupt_crc: bool = False) -> bytes:
    """A ``sharding_indexed`` shard: inner chunks (local C-order index -> bytes), then (or first)
    the index of (offset, nbytes) little-endian uint64 pairs and its crc32c."""
    index = np.full((n_inner, 2), MISSING, dtype="<u8")
    head = 16 * n_inner + 4 if index_location == "start" else 0
    body = bytearray()
    for local in sorted(inner):
        index[local] = (head + len(body), len(inner[local]))
        body += inner[local]
    raw = index.tobytes()
    crc = _crc32c.crc32c(raw) ^ (0xFFFFFFFF if corrupt_crc else 0)
    idx = raw + struct.pack("<I", crc)
    return idx + bytes(body) if index_location == "start" else bytes(body) + idx


def decode_shard(blob: bytes, n_inner: int, index_location: str = "end") -> dict[int, bytes]:
    size = 16 * n_inner + 4
    assert len(blob) >= size, "shard shorter than its index"
    idx = blob[:size] if index_location == "start" else blob[-size:]
    raw, crc = idx[:-4], struct.unpack("<I", idx[-4:])[0]
    assert crc == _crc32c.crc32c(raw), "shard index crc32c mismatch"
    table = np.frombuffer(raw, dtype="<u8").reshape(n_inner, 2)
    out = {}
    for local in range(n_inner):
        off, nb = int(table[local, 0]), int(table[local, 1])
        if off == MISSING and nb == MISSING:
            continue
        assert off + nb <= len(blob), "inner chunk outside the shard"
        out[local] = blob[off:off + nb]
    return out


class ZarrLayout:
    """Geometry and codecs of a Zarr v3 array from its ``zarr.json``."""

    def __init__(self, meta: dict) -> None:
        assert meta["zarr_format"] == 3 and meta["node_type"] == "array"
        self.meta = meta
        self.shape = tuple(meta["shape"])
        self.outer = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        codecs = meta["codecs"]
        if codecs[0]["name"] == "sharding_indexed":
            cfg = codecs[0]["configuration"]
            self.sharded = True
            self.inner = tuple(cfg["chunk_shape"])
            self.chain = cfg["codecs"]
            self.index_location = cfg.get("index_location", "end")
            assert cfg.get("index_codecs", [{"name": "bytes", "configuration": {"endian": "little"}},
                                            {"name": "crc32c"}]) == [
                {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
        else:
            self.sharded = False
            self.inner = self.outer
            self.chain = codecs
            self.index_location = "end"
        self.dtype = _bytes_dtype(meta, self.chain)
        self.fill = fill_from_json(meta["fill_value"], self.dtype)
        enc = meta.get("chunk_key_encoding", {"name": "default"})
        assert enc["name"] == "default"
        self.sep = (enc.get("configuration") or {}).get("separator", "/")

    @property
    def per_shard(self) -> tuple[int, ...]:
        return tuple(o // i for o, i in zip(self.outer, self.inner))

    @property
    def file_grid(self) -> tuple[int, ...]:
        return tuple(-(-s // o) for s, o in zip(self.shape, self.outer))

    def key(self, pos: Iterable[int]) -> str:
        return "c" + "".join(self.sep + str(int(p)) for p in pos)

    def encode_chunk(self, arr: np.ndarray) -> bytes:
        return encode_with(self.chain, np.asarray(arr))

    def decode_chunk(self, blob: bytes) -> np.ndarray:
        return decode_with(self.chain, blob, self.dtype, self.inner)

    def encode_file(self, block: np.ndarray, keep: Iterable[int] | None = None) -> bytes:
        """The chunk or shard file holding ``block`` (a full outer chunk); ``keep`` lists the
        inner chunks (local C-order) to put in a shard (default: all)."""
        if not self.sharded:
            return self.encode_chunk(block)
        per = self.per_shard
        n = math.prod(per)
        keep = range(n) if keep is None else keep
        inner = {}
        for local in keep:
            lc = np.unravel_index(local, per)
            sl = tuple(slice(c * i, (c + 1) * i) for c, i in zip(lc, self.inner))
            inner[int(local)] = self.encode_chunk(block[sl])
        return encode_shard(inner, n, self.index_location)

    def decode_file(self, blob: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(values of the outer chunk, mask of what the file holds)."""
        out = np.full(self.outer, self.fill, dtype=self.dtype)
        mask = np.zeros(self.outer, dtype=bool)
        if not self.sharded:
            out[...] = self.decode_chunk(blob)
            mask[...] = True
            return out, mask
        per = self.per_shard
        for local, part in decode_shard(blob, math.prod(per), self.index_location).items():
            lc = np.unravel_index(local, per)
            sl = tuple(slice(c * i, (c + 1) * i) for c, i in zip(lc, self.inner))
            out[sl] = self.decode_chunk(part)
            mask[sl] = True
        return out, mask


def read_zarr_array(fs: FS, path: str) -> tuple[dict, np.ndarray]:
    """``zarr.json`` and the whole array of a Zarr view directory, decoded by hand (missing
    chunk/shard files are the fill value)."""
    meta = fs.read_json(f"{path}/zarr.json")
    lay = ZarrLayout(meta)
    padded = tuple(g * o for g, o in zip(lay.file_grid, lay.outer))
    out = np.full(padded, lay.fill, dtype=lay.dtype)
    for pos in itertools.product(*(range(g) for g in lay.file_grid)):
        try:
            blob = fs.read_file(f"{path}/{lay.key(pos)}")
        except FsError as exc:
            if exc.errno == _errno.ENOENT:
                continue
            raise
        vals, _ = lay.decode_file(blob)
        out[tuple(slice(p * o, (p + 1) * o) for p, o in zip(pos, lay.outer))] = vals
    return meta, out[tuple(slice(0, s) for s in lay.shape)]


# =============================================================================================
# N5, built and decoded by hand
# =============================================================================================
N5_DTYPES = {"uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "int8": "i1", "int16": "i2",
             "int32": "i4", "int64": "i8", "float32": "f4", "float64": "f8"}


def n5_dtype_name(dt: np.dtype) -> str:
    dt = np.dtype(dt)
    for name, code in N5_DTYPES.items():
        if np.dtype(code).kind == dt.kind and np.dtype(code).itemsize == dt.itemsize:
            return name
    raise ValueError(dt)


def n5_compression(kind: str) -> dict:
    return {"raw": {"type": "raw"}, "gzip": {"type": "gzip", "level": 5},
            "zlib": {"type": "gzip", "level": 5, "useZlib": True}, "zstd": {"type": "zstd", "level": 3},
            "bzip2": {"type": "bzip2", "blockSize": 9},
            "blosc": {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}}[kind]


def n5_attrs(shape: Iterable[int], dtype: Any, block: Iterable[int], compression: str | dict = "raw",
             **attributes: Any) -> dict:
    """An N5 dataset ``attributes.json`` for a C-order ``shape``/``block``."""
    comp = n5_compression(compression) if isinstance(compression, str) else compression
    return {"dimensions": list(reversed(list(shape))), "blockSize": list(reversed(list(block))),
            "dataType": n5_dtype_name(dtype), "compression": comp, **attributes}


def n5_compress(comp: dict, raw: bytes, dt: np.dtype) -> bytes:
    kind = comp["type"]
    if kind == "raw":
        return raw
    if kind == "gzip":
        codec = numcodecs.Zlib(level=comp.get("level", 5)) if comp.get("useZlib") else numcodecs.GZip(
            level=comp.get("level", 5))
        return bytes(codec.encode(raw))
    if kind == "zstd":
        return bytes(numcodecs.Zstd(level=comp.get("level", 3)).encode(raw))
    if kind == "bzip2":
        return bytes(numcodecs.BZ2(level=comp.get("blockSize", 9)).encode(raw))
    if kind == "blosc":
        codec = numcodecs.Blosc(cname=comp.get("cname", "lz4"), clevel=comp.get("clevel", 5),
                                shuffle=comp.get("shuffle", 1), blocksize=comp.get("blocksize", 0))
        return bytes(codec.encode(np.frombuffer(raw, dtype=dt)))
    raise ValueError(kind)


def n5_decompress(comp: dict, payload: bytes) -> bytes:
    kind = comp["type"]
    if kind == "raw":
        return payload
    if kind == "gzip":
        return bytes((numcodecs.Zlib() if comp.get("useZlib") else numcodecs.GZip()).decode(payload))
    if kind == "zstd":
        return bytes(numcodecs.Zstd().decode(payload))
    if kind == "bzip2":
        return bytes(numcodecs.BZ2().decode(payload))
    if kind == "blosc":
        return bytes(numcodecs.Blosc().decode(payload))
    if kind == "xz":
        return bytes(numcodecs.LZMA().decode(payload))
    raise ValueError(kind)


def n5_header(dims_c: Iterable[int], mode: int = 0, ndim: int | None = None) -> bytes:
    dims = list(reversed(list(dims_c)))
    return struct.pack(">HH", mode, len(dims) if ndim is None else ndim) + b"".join(
        struct.pack(">I", int(d)) for d in dims)


def n5_block(arr: np.ndarray, comp: str | dict = "raw") -> bytes:
    """One default-mode N5 block holding ``arr`` (C order; its shape is the header's extent)."""
    comp = n5_compression(comp) if isinstance(comp, str) else comp
    arr = np.asarray(arr)
    be = arr.dtype.newbyteorder(">") if arr.dtype.itemsize > 1 else arr.dtype
    raw = np.ascontiguousarray(arr, dtype=be).tobytes()
    return n5_header(arr.shape) + n5_compress(comp, raw, be)


def n5_parse_block(blob: bytes, comp: dict, dt: np.dtype) -> np.ndarray:
    mode, ndim = struct.unpack(">HH", blob[:4])
    assert mode == 0, f"block mode {mode}"
    dims = struct.unpack(f">{ndim}I", blob[4:4 + 4 * ndim])
    shape = tuple(reversed(dims))
    raw = n5_decompress(comp, blob[4 + 4 * ndim:])
    be = np.dtype(dt).newbyteorder(">") if np.dtype(dt).itemsize > 1 else np.dtype(dt)
    arr = np.frombuffer(raw, dtype=be)
    assert arr.size == math.prod(shape), (arr.size, shape)
    return arr.reshape(shape)


def n5_block_path(pos_c: Iterable[int]) -> str:
    return "/".join(str(int(p)) for p in reversed(list(pos_c)))


def read_n5_array(fs: FS, path: str) -> tuple[dict, np.ndarray]:
    """``attributes.json`` and the whole dataset of an N5 view directory, decoded by hand
    (missing blocks are zeros, as N5 readers make them)."""
    attrs = fs.read_json(f"{path}/attributes.json")
    shape = tuple(reversed(attrs["dimensions"]))
    block = tuple(reversed(attrs["blockSize"]))
    dt = np.dtype(">" + N5_DTYPES[attrs["dataType"]])
    comp = attrs.get("compression") or {"type": attrs.get("compressionType", "raw")}
    grid = tuple(-(-s // b) for s, b in zip(shape, block))
    out = np.zeros(tuple(g * b for g, b in zip(grid, block)), dtype=dt)
    for pos in itertools.product(*(range(g) for g in grid)):
        try:
            blob = fs.read_file(f"{path}/{n5_block_path(pos)}")
        except FsError as exc:
            if exc.errno == _errno.ENOENT:
                continue
            raise
        arr = n5_parse_block(blob, comp, dt)
        out[tuple(slice(p * b, p * b + s) for p, b, s in zip(pos, block, arr.shape))] = arr
    return attrs, out[tuple(slice(0, s) for s in shape)]


N5_DATASET_KEYS = ("dimensions", "blockSize", "dataType", "compression", "n5")


def n5_user_attrs(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if k not in N5_DATASET_KEYS}


# =============================================================================================
# copies for third-party readers
# =============================================================================================
def copy_tree(fs: FS, path: str, dest: Path) -> Path:
    """Copy every file of a view directory into ``dest`` (to open it with zarr-python)."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in fs.walk_files(path):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(fs.read_file(f"{path}/{rel}"))
    return dest


def write_changes(fs: FS, path: str, before: bytes, after: bytes) -> None:
    """``r+`` as the kernel sees it: only the pages that changed (or grew) are written."""
    page = 4096
    h = fs.open_file(path, os.O_RDWR)
    try:
        for at in range(0, len(after), page):
            if after[at:at + page] != before[at:at + page]:
                h.write(after[at:at + page], at)
        h.flush()
    finally:
        h.release()
