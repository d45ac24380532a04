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
from ..formats import by_name, formats
from ..model import keys
from ..model.catalog import Catalog
from ..model.writer import DomainWriter
from ..store import open_store
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
        raise SourceError(source, "a directory that is neither a Zarr v3 hierarchy (zarr.json) "
                                  "nor an N5 container (attributes.json)")
    raise SourceError(source, "not an HDF5 or TIFF file (unrecognised signature)")


def default_domain(source: Path) -> str:
    """``/<source name without its format suffix>.h5``."""
    name = source.resolve().name
    for suffix in (sfx for fmt in formats() for sfx in fmt.source_suffixes):
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
    module = by_name(kind).source()  # type: ignore[union-attr]
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
