"""Helpers shared by the import tests (not fixtures: plain functions)."""
from __future__ import annotations

from pathlib import Path

from polyfs.importers import import_source
from polyfs.model.catalog import Catalog
from polyfs.store import open_store


def import_all(sources, store_dir: Path, **kw) -> Catalog:
    for src in sources:
        import_source(src, str(store_dir), progress=False, **kw)
    return Catalog(open_store(str(store_dir)))


def listing(store_dir: Path) -> dict[str, int]:
    """Every object of a local store with its size (what 'unchanged' is checked against)."""
    store = open_store(str(store_dir))
    return {o.key: o.size for o in store.list("")}
