"""``polyfs import``: bring an HDF5 file, a TIFF, a Zarr v3 hierarchy or an N5
container into the store as ONE domain, all-or-nothing.

The source kind is recognised from its bytes and layout, not its name: an
HDF5 superblock signature, a TIFF header, a directory with ``zarr.json``, a
directory with ``attributes.json`` (N5). Each format module builds the domain
through one :class:`~polyfs.model.writer.DomainWriter`, so a failure at any
point deletes what was written and the store is left as it was.

Progress: a tqdm bar (chunks written) is drawn when ``progress`` is true and
stderr is a terminal; pipes, logs and tests get none.
"""
from __future__ import annotations

import logging
from pathlib import Path

from ..errors import NotFound, SourceError
from ..model import keys
from ..model.catalog import Catalog
from ..model.writer import DomainWriter
from ..store import open_store
from .common import ImportOptions, parse_chunks, parse_codec

log = logging.getLogger(__name__)

KINDS = ("hdf5", "tiff", "zarr", "n5")
_SOURCE_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5", ".nc", ".tif", ".tiff", ".btf", ".zarr", ".n5")


def detect_kind(source: Path) -> str:
    """``hdf5``, ``tiff``, ``zarr`` or ``n5``; SourceError for anything else."""
    if not source.exists():
        raise SourceError(source, "no such file or directory")
    if source.is_dir():
        if (source / "zarr.json").is_file():
            return "zarr"
        if (source / "attributes.json").is_file():
            return "n5"
        if (source / ".zgroup").exists() or (source / ".zarray").exists():
            raise SourceError(source, "a Zarr v2 hierarchy (only Zarr v3, with zarr.json, is supported)")
        raise SourceError(source, "a directory that is neither a Zarr v3 hierarchy (zarr.json) "
                                  "nor an N5 container (attributes.json)")
    try:
        with open(source, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise SourceError(source, exc.strerror or exc) from None
    from ..formats.tiff.source import is_tiff_header
    from ..formats.hdf5.source import is_hdf5

    if is_hdf5(source):  # first: a polyglot file (TIFF header, HDF5 after a user block) is richer as HDF5
        return "hdf5"
    if is_tiff_header(head):
        return "tiff"
    if not head:
        raise SourceError(source, "empty file")
    raise SourceError(source, "not an HDF5 or TIFF file (unrecognised signature)")


def default_domain(source: Path) -> str:
    """``/<source name without its format suffix>.h5``."""
    name = source.resolve().name
    for suffix in _SOURCE_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
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
    store = open_store(str(store_url), create=True)
    catalog = Catalog(store)
    old_root = _old_root(catalog, path) if overwrite else None
    module = _module(kind)
    with DomainWriter(catalog, path, owner=owner, overwrite=overwrite) as writer:
        module.import_into(src, writer, opts)
    if old_root and old_root != writer.root_id:
        for prefix in (keys.domain_db_prefix(old_root), *keys.derived_prefixes(old_root)):
            try:
                store.delete_prefix(prefix)
            except Exception as exc:  # the new domain is in place; leftovers are garbage only
                log.warning("could not delete the replaced domain's objects under %s: %s", prefix, exc)
    return writer.path


def _old_root(catalog: Catalog, path: str) -> str | None:
    try:
        body = catalog.get_json(keys.domain_key(path))
    except NotFound:
        return None
    return body.get("root") if isinstance(body, dict) else None


def _module(kind: str):
    if kind == "hdf5":
        from ..formats.hdf5 import source as m
    elif kind == "tiff":
        from ..formats.tiff import source as m
    elif kind == "zarr":
        from ..formats.zarr import source as m
    else:
        from ..formats.n5 import source as m
    return m
