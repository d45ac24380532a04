"""``polyfs import``: bring an HDF5 file, a TIFF, a Zarr (v3 or v2) hierarchy or an N5
container into the store as ONE domain, all-or-nothing.

The source kind is recognised from its bytes and layout, not its name: an
HDF5 superblock signature, a TIFF header, a directory with ``zarr.json`` (or
``.zgroup``/``.zarray``), a directory with ``attributes.json`` (N5). Each format module builds the domain
through one :class:`~polyfs.model.writer.DomainWriter`, so a failure at any
point deletes what was written and the store is left as it was.

Progress: a tqdm bar (chunks written) is drawn when ``progress`` is true and
stderr is a terminal; pipes, logs and tests get none.
"""
from __future__ import annotations

import logging
from pathlib import Path

from ..errors import AlreadyExists, InvalidInput, NotFound, SourceError, StoreError
from ..formats import by_name, formats
from ..model import keys
from ..model.catalog import Catalog
from ..model.writer import DomainWriter, delete_root
from ..store import open_store
from ..views.root import view_conflict
from .common import ImportOptions, parse_chunks, parse_codec

log = logging.getLogger(__name__)

def detect_kind(source: Path) -> str:
    """The name of the format that claims ``source``; SourceError for anything else.

    Formats are asked in :data:`polyfs.formats.PACKAGES` order (HDF5 before
    TIFF: a polyglot file is richer as HDF5)."""
    if not source.exists():
        raise SourceError(source, "no such file or directory")
    if source.is_file() and source.stat().st_size == 0:
        raise SourceError(source, "empty file")
    for fmt in formats():
        if fmt.has_source and fmt.source().claims(source):
            return fmt.name
    if source.is_dir():
        raise SourceError(source, "a directory that is neither a Zarr v3 hierarchy (zarr.json), a Zarr v2 one "
                                  "(.zgroup, .zarray) nor an N5 container (attributes.json), at its top or in a "
                                  "directory below")
    if _head(source, 4)[:3] == b"CDF":
        raise SourceError(source, "a netCDF-3 (classic) file, which is not HDF5: convert it to netCDF-4 first "
                                  "(nccopy -k nc4 in.nc out.nc) and import that")
    raise SourceError(source, "not an HDF5 or TIFF file (unrecognised signature)")


def _head(source: Path, n: int) -> bytes:
    try:
        with open(source, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def check_store_path(store_url: str) -> None:
    """A local store path naming an existing file (not a directory) is refused by name;
    creating the store there would fail with the bare \"File exists\" of mkdir."""
    text = str(store_url)
    if "://" in text and not text.startswith("file://"):
        return
    local = Path(text[len("file://"):] if text.startswith("file://") else text)
    if local.exists() and not local.is_dir():
        raise InvalidInput(f"store {text}: exists and is not a directory (a store is a directory, "
                           f"file://... or s3://...)")


def check_owner(owner: str) -> None:
    """An owner name the domain's ACL can hold: not empty, no control characters (an empty
    one made a domain no user owns, shown by ``polyfs info`` as a blank)."""
    if not isinstance(owner, str) or not owner.strip() or any(ord(c) < 32 or ord(c) == 127 for c in owner):
        raise InvalidInput(f"--owner {owner!r}: expected a user name")


def refuse_view_conflict(catalog: Catalog, path: str) -> None:
    why = view_conflict(catalog, path)
    if why:
        raise AlreadyExists(why + "; choose another --domain")


def default_domain(source: Path) -> str:
    """``/<source name without its format suffix>.h5`` (``x.ome.tif``, ``x.ome.zarr``: ``/x.h5``)."""
    name = source.resolve().name
    for suffix in (sfx for fmt in formats() for sfx in fmt.source_suffixes):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            if name.lower().endswith(".ome") and len(name) > 4:  # OME-TIFF's and OME-Zarr's double suffix
                name = name[:-4]
            break
    return "/" + name + ".h5"


def import_source(source, store_url: str, domain: str | None = None, codec: str = "deflate",
                  level: int | None = None, chunks=None, owner: str = "admin", overwrite: bool = False,
                  progress: bool = True) -> str:
    """Import ``source`` into the store at ``store_url``; returns the domain path.

    ``codec``/``level`` choose the encoding of data that has to be (re)encoded
    (contiguous or uncompressed data, codecs outside the translation table);
    stored chunks in a table codec are copied as they are. ``chunks`` is the
    chunk shape for data without one (see :func:`common.auto_chunks` for the
    rule used otherwise). ``overwrite`` replaces an existing domain (its old
    objects are deleted once the new one is committed).
    """
    src = Path(source)
    opts = ImportOptions(parse_codec(codec, level, src), parse_chunks(chunks, src), progress)
    kind = detect_kind(src)
    path = keys.normalize_domain(domain or default_domain(src))
    check_owner(owner)
    check_store_path(str(store_url))
    store = open_store(str(store_url), create=True)
    catalog = Catalog(store)
    refuse_view_conflict(catalog, path)
    old_root = _old_root(catalog, path) if overwrite else None
    module = by_name(kind).source()  # type: ignore[union-attr]
    with DomainWriter(catalog, path, owner=owner, overwrite=overwrite) as writer:
        module.import_into(src, writer, opts)
        missing_staged_chunks(store, writer)
    if old_root and old_root != writer.root_id:
        # the new domain is in place; leftovers are garbage only
        delete_root(store, old_root, lambda what, exc: log.warning(
            "could not delete the replaced domain's objects under %s: %s", what, exc))
    return writer.path


def missing_staged_chunks(store, writer: DomainWriter) -> None:
    """Fail (so the writer rolls back) if a chunk this import wrote is gone before the domain
    is committed. Until then its objects are unreachable, and a ``polyfs check --repair``
    run meanwhile deletes them as a crashed import's: committing would make a domain whose
    chunks read as errors. One listing of the new domain's prefix."""
    staged = set(writer.staged_chunk_keys())
    if not staged:
        return
    gone = staged - {o.key for o in store.list(keys.domain_db_prefix(writer.root_id))}
    if gone:
        raise StoreError(f"{len(gone)} chunk objects (e.g. {min(gone)}) vanished from the store before the "
                         f"import was committed (a 'polyfs check --repair' run meanwhile?); nothing was "
                         f"imported, run the import again")


def _old_root(catalog: Catalog, path: str) -> str | None:
    try:
        body = catalog.get_json(keys.domain_key(path))
    except NotFound:
        return None
    return body.get("root") if isinstance(body, dict) else None
