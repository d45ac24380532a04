"""The one exception tree of polyfs, and the one place that maps it to errno.

Every layer raises a ``PolyfsError`` subclass; the FUSE operations and the CLI
translate with :func:`errno_of` / :func:`one_line` and nowhere else.
"""
from __future__ import annotations

import errno as _errno


class PolyfsError(Exception):
    """Base of every error polyfs raises on purpose."""


class NotFound(PolyfsError):
    """A key, object, path or domain that does not exist."""


class AlreadyExists(PolyfsError):
    """Creating something that is already there."""


class StoreError(PolyfsError):
    """The backend failed (I/O error, network, permission)."""


class ChunkMissing(StoreError):
    """A chunk object that a listing promised has vanished from the store."""


class ChunkChanged(ChunkMissing):
    """A chunk object whose size differs from the listing a file was laid out from."""


class PreconditionFailed(StoreError):
    """A conditional write lost a race."""


class ReadOnly(PolyfsError):
    """A write through a read-only mount or store."""


class InvalidInput(PolyfsError):
    """Bad data from outside: a file, a JSON body, a parameter."""


class Incomplete(InvalidInput):
    """A file its writer is still writing (a stack tifffile flushes page by page): refused at
    that flush like bad input, but logged only if it is still so when the file is released
    (a writer flushing per page would otherwise log once per page)."""


class SchemaError(InvalidInput):
    """A store object that does not follow the HSDS object storage schema."""


class UnsupportedType(InvalidInput):
    """A datatype polyfs cannot represent (or a view cannot express)."""


class UnknownFilter(InvalidInput):
    """A filter id that is not in the translation table."""

    def __init__(self, filter_id: object, where: str = "") -> None:
        self.filter_id = filter_id
        msg = f"unknown filter id {filter_id}"
        super().__init__(f"{msg} ({where})" if where else msg)


class NoCodec(UnsupportedType):
    """Chunks under a filter no library here decodes (or encodes): EOPNOTSUPP."""


class CodecError(InvalidInput):
    """A chunk whose bytes do not decode with the encoding it claims."""


class SourceError(InvalidInput):
    """An import source that cannot be read; names the file and the cause."""

    def __init__(self, path: object, cause: object) -> None:
        self.path = str(path)
        self.cause = str(cause)
        super().__init__(f"{self.path}: {self.cause}")


class UnsupportedSource(SourceError, UnsupportedType):
    """An import source holding what polyfs cannot represent (a type, a filter no one decodes)."""


class MountError(PolyfsError):
    """The mount could not be set up."""


class NotADirectory(PolyfsError):
    """A path component that is a file."""


class IsADirectory(PolyfsError):
    """A file operation on a directory."""


class NotEmpty(PolyfsError):
    """Removing a group or directory that still has members."""


class NotPermitted(PolyfsError):
    """An operation a view cannot express (e.g. a directory where only files can be)."""


class CrossDevice(PolyfsError):
    """A rename the store cannot do in place (tools then copy and delete)."""


class AccessDenied(PolyfsError):
    """A request the domain's HSDS ACLs do not allow its user (``allow_other`` mounts)."""


class NoSpace(StoreError):
    """The store's file system is full (or over quota): the write is refused whole."""


# The one errno table. Order matters: the first matching class wins, so
# subclasses come before their bases.
_ERRNO_TABLE: tuple[tuple[type[BaseException], int], ...] = (
    (NotFound, _errno.ENOENT),
    (AlreadyExists, _errno.EEXIST),
    (ReadOnly, _errno.EROFS),
    (NotADirectory, _errno.ENOTDIR),
    (IsADirectory, _errno.EISDIR),
    (NotEmpty, _errno.ENOTEMPTY),
    (NotPermitted, _errno.EPERM),
    (CrossDevice, _errno.EXDEV),
    (AccessDenied, _errno.EACCES),
    (NoSpace, _errno.ENOSPC),
    (PreconditionFailed, _errno.EAGAIN),
    (ChunkMissing, _errno.EIO),
    (StoreError, _errno.EIO),
    (UnsupportedType, _errno.EOPNOTSUPP),
    (InvalidInput, _errno.EINVAL),
    (PolyfsError, _errno.EIO),
    (FileNotFoundError, _errno.ENOENT),
    (PermissionError, _errno.EACCES),
)


def errno_of(exc: BaseException) -> int:
    """The errno a FUSE reply carries for ``exc`` (EIO for anything unexpected)."""
    for cls, code in _ERRNO_TABLE:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    return _errno.EIO


def one_line(exc: BaseException) -> str:
    """A single-line message for the CLI and logs."""
    text = str(exc) or exc.__class__.__name__
    return " ".join(text.split())
