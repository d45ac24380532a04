"""The one write protocol: what a format's ingester tells the format-free write service.

A writable view's package provides ``ingest.make_ingester(ctx)`` returning an
:class:`Ingester`. The ingester only *reads*: it parses a written metadata
file into a :class:`GroupWrite` or :class:`ArrayWrite`, says which chunks a
chunk file covers, and splits a chunk file's bytes into encoded chunks. The
service (service.py) decides what that means for the store (create, resize,
attribute diff, chunk merge) and commits it; nothing outside the format's
package knows its file names, headers or codec spellings.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, runtime_checkable

import numpy as np

from ..codecs.registry import Filter
from ..model import types as T
from .chunkin import Incoming

if TYPE_CHECKING:  # pragma: no cover
    from ..model.schema import Dataset, Group
    from .router import Target


class ByteSource(Protocol):
    """The bytes of a flushed file, read piecewise (a file being written: base + dirty extents)."""

    def size(self) -> int: ...

    def read(self, off: int, n: int) -> bytes: ...


class BytesSource:
    """A ByteSource over bytes in memory (tests, small files)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def size(self) -> int:
        return len(self.data)

    def read(self, off: int, n: int) -> bytes:
        return self.data[off:off + n]


class SourceReader(io.RawIOBase):
    """A ByteSource as a read-only, seekable raw file (format libraries read flushed files so:
    h5py's file-object driver, tifffile), one read at a time, never the whole file."""

    def __init__(self, src: ByteSource) -> None:
        super().__init__()
        self._src = src
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = max(0, min(len(view), self._src.size() - self._pos))
        data = self._src.read(self._pos, n) if n else b""
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def seek(self, off: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._src.size()}[whence]
        if base + off < 0:
            raise ValueError("negative seek position")
        self._pos = base + off
        return self._pos

    def tell(self) -> int:
        return self._pos


@dataclass
class GroupWrite:
    """A group's metadata as written: its user attributes (JSON), and how the view is to
    present the group (view hints under the ingester's ``hint_prefix``)."""

    attributes: dict[str, Any]
    hints: dict[str, Any] = field(default_factory=dict)


@dataclass
class ArrayWrite:
    """An array's metadata as written (or as the view shows it), in canonical terms."""

    shape: tuple[int, ...]
    dtype: T.DType  # the element type as written (byte order of the writer's encoding)
    chunks: tuple[int, ...]  # canonical (inner) chunk shape
    filters: tuple[Filter, ...]  # HDF5 filters of the written encoding
    incoming: Incoming  # how one written chunk is encoded
    fill: Any
    attributes: dict[str, Any]
    per_file: tuple[int, ...]  # chunks per chunk file along each dimension (shards; 1s unsharded)
    dimension_names: list[str | None] | None = None
    hints: dict[str, Any] = field(default_factory=dict)  # how the view should lay the array out
    layout: Any = None  # the format's own file layout (key encoding, shard index codec)
    fill_declared: bool = True  # False: the format has no fill value (N5): nothing to compare


@dataclass(frozen=True)
class WrittenChunk:
    """One encoded chunk found in a chunk file. ``dims``: the block's own extent when a writer
    sends less than a full chunk (N5 edge blocks), else None."""

    coords: tuple[int, ...]
    data: bytes
    dims: tuple[int, ...] | None = None


class Ingester(Protocol):
    """A writable view's reading of what tools write into it (pure: no store writes)."""

    meta_name: str  # the metadata file of a group or array ("zarr.json", "attributes.json")
    skip_attributes: tuple[str, ...]  # attribute names the view writes itself (not user attributes)
    hint_prefix: str  # the view hints its metadata files set: a rewrite replaces these, keeps others'
    # what a chunk file removed by a writer means: False, the fill value (Zarr: absent chunk = fill);
    # True, zeros (N5 has no fill value: tensorstore and z5py delete a block they wrote all zero)
    absent_is_zero: bool

    def parse_metadata(self, data: bytes, where: str) -> GroupWrite | ArrayWrite:
        """A written metadata file; InvalidInput/UnsupportedType naming the cause."""
        ...

    def shown(self, t: "Target", ds: "Dataset") -> ArrayWrite:
        """The array as this view shows it now (what chunk files written later are read as)."""
        ...

    def shown_attributes(self, t: "Target", obj: "Group | Dataset") -> dict[str, Any]:
        """The user attributes this view shows for ``obj`` (a rewrite is diffed against them)."""
        ...

    def file_position(self, rest: list[str], decl: ArrayWrite) -> tuple[int, ...] | None:
        """Chunk-file grid coordinates of a path below an array, or None if it is no chunk file."""
        ...

    def chunks_in(self, src: ByteSource, decl: ArrayWrite, members: dict[int, tuple[int, ...]],
                  where: str) -> Iterator[WrittenChunk]:
        """The chunks a flushed chunk file holds; ``members`` maps the file's local (C-order)
        chunk number to grid coordinates (chunks outside the grid are absent). Reads ``src``
        piecewise: a chunk at a time, never the whole file."""
        ...

    def hidden_members(self, t: "Target", group: "Group") -> list[str]:
        """Link names of ``group`` this view does not show (``zarr/``: netCDF dimensions without
        a variable): they do not keep the group's directory from ``rmdir`` and go with it."""
        ...

    def dir_position(self, rest: list[str], decl: ArrayWrite) -> tuple[list[int], int] | None:
        """For a directory below an array (``c/0`` in Zarr, ``3/1`` in N5): the leading
        chunk-file coordinates it fixes and the first dimension it fixes, or None."""
        ...


class WrittenFile(ByteSource, Protocol):
    """A flushed file being written over its view file: which ranges still read the view's bytes."""

    @property
    def based(self) -> bool:
        """False when the writer made the file from scratch (created, or truncated to nothing)."""
        ...

    def untouched(self, off: int, n: int) -> bool:
        """True iff ``[off, off+n)`` still reads exactly the view file's bytes."""
        ...


ChunkBytes = Callable[[], bytes]  # one chunk's stored bytes, produced when the commit stores it


@dataclass(frozen=True)
class KnownChunk:
    """A chunk's fetch whose inflated bytes' CRC32 validation already computed (deflate datasets
    keep a CRC table; the commit then never inflates the chunk a second time)."""

    fetch: ChunkBytes
    crc32: int

    def __call__(self) -> bytes:
        return self.fetch()


class NewObjects(Protocol):
    """Objects a document adds to an existing domain, their chunks already stored under their
    own (still unreachable) ids: committed after validation, or rolled back."""

    def objects(self) -> list[Any]:
        """The new Group/Dataset/Datatype objects (links and attributes set)."""
        ...

    def commit(self) -> Any:
        """Their derived data (chunk indexes, CRC tables) and JSON, not yet linked."""
        ...

    def abort(self) -> None:
        """Delete every chunk and object stored for them."""
        ...


@dataclass
class DocumentChanges:
    """What a flushed document file (a whole-domain HDF5 file, a TIFF image) changes in the store.
    Everything is validated by the ingester before it is returned; the service commits it.
    Chunk bytes are produced lazily (``puts``), so a change set never holds the data it writes."""

    objects: list[Any] = field(default_factory=list)  # model.changes.ObjectChange, one per changed object
    puts: dict[str, list[tuple[tuple[int, ...], ChunkBytes]]] = field(default_factory=dict)  # dataset id -> chunks
    deletes: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)  # dataset id -> chunk coords
    created: NewObjects | None = None  # objects the changed groups link (stored, unreachable until then)
    removed: list[str] = field(default_factory=list)  # ids of objects no link reaches any more

    def is_empty(self) -> bool:
        return not (self.objects or any(self.puts.values()) or any(self.deletes.values())
                    or (self.created is not None and self.created.objects()) or self.removed)

    def abort(self) -> None:
        """Roll back what validation stored (the new objects' chunks)."""
        if self.created is not None:
            self.created.abort()


@runtime_checkable
class NameCheck(Protocol):
    """An ingester that knows names it can never take (another format's metadata, such as
    Zarr v2's ``.zarray`` in a Zarr v3 view): a file of that name is refused when it is made,
    not kept as a scratch file that vanishes at unmount."""

    def refuse_name(self, rest: list[str]) -> str | None:
        """Why a file at ``rest`` (the path below its domain) is refused, or None."""
        ...


@runtime_checkable
class ScratchNames(Protocol):
    """An ingester of whole-file documents that knows the temporaries tools write beside such a
    file and rename over it (NCO's ``x.nc.pid123.ncks.tmp``): made where no other new file may
    be, kept as scratch, stored only by that rename."""

    def scratch_for(self, name: str) -> str | None:
        """The document name whose temporary ``name`` is, or None."""
        ...


@runtime_checkable
class Sidecars(Protocol):
    """An ingester of documents that tools give a second file beside them (GDAL's external mask
    ``x.tif.msk``): such a file is stored into its document's dataset when that is stored, kept
    as scratch until then while the document is being written, and refused when it is made
    beside no document (else it would vanish at unmount)."""

    def sidecar_of(self, name: str) -> str | None:
        """The document file name whose sidecar ``name`` is, or None."""
        ...

    def orphan_sidecar(self, name: str) -> str:
        """Why a sidecar is refused when its document is neither stored nor being written."""
        ...


@runtime_checkable
class HeadCheck(Protocol):
    """An ingester that knows files it can never take by their first bytes (another format's
    signature): such a file is refused at the write that puts them at offset 0."""

    def refuse_head(self, head: bytes) -> str | None:
        """Why a file starting with ``head`` (up to 16 bytes) is refused, or None."""
        ...


class DocumentIngester(Protocol):
    """A view whose files are whole documents (HDF5, TIFF): a flushed file is read as a whole by
    the format's own library and compared with the model (pure: no store writes)."""

    document: bool  # True: the service hands over whole files (no metadata/chunk files)

    def is_document(self, t: "Target") -> bool:
        """Whether a path of this view is a document the ingester reads (else: refused)."""
        ...

    def document_changes(self, t: "Target", src: WrittenFile, where: str) -> DocumentChanges:
        """The changes a flushed document makes; InvalidInput/UnsupportedType naming the cause,
        and nothing is committed, when the store cannot hold what it says."""
        ...

    def document_path(self, t: "Target") -> str | None:
        """What ``rm`` of the document at ``t`` deletes: ``"/"`` (the whole domain), an object's
        path (its dataset), or None when the path names nothing stored."""
        ...

    def companion_paths(self, t: "Target") -> list[str]:
        """Objects ``rm`` of the document deletes with the one at ``document_path`` (a TIFF
        image's transparency mask)."""
        ...

    def replaces_domain(self, t: "Target") -> bool:
        """Whether a document written from scratch at ``t`` is a whole domain (HDF5's file)."""
        ...

    def new_document(self, t: "Target", src: ByteSource, where: str) -> None:
        """A document written from scratch (created, or truncated and rewritten): it becomes the
        whole domain ``t.new_domain_path()`` (new) or ``t.domain`` (replaced), all or nothing."""
        ...


def file_members(pos: tuple[int, ...], per: tuple[int, ...], grid: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """Local C-order number -> grid coordinates of the chunks a chunk file at ``pos`` covers."""
    out = {}
    for local, lc in enumerate(np.ndindex(*per)):
        coords = tuple(p * k + i for p, k, i in zip(pos, per, lc))
        if all(c < g for c, g in zip(coords, grid)):
            out[local] = coords
    return out
