"""``polyfs check``: verify a store, and rebuild what polyfs derives from it.

The chunk objects and JSON are the truth; polyfs's own data under
``polyfs/`` (the deflate CRC32 tables, the persisted chunk indexes) must always be
rebuildable from them, and an import that crashed before its ``.domain.json`` was
written leaves an unreachable ``db/<uuid1>/`` prefix behind. ``check`` finds both;
``--repair`` rebuilds the derived data and deletes unreachable prefixes (never
anything a domain refers to). Derived data is judged as its users judge it: a
persisted index is a fault only if the loader would use it and it is wrong.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from .codecs.pipeline import adler32_of_zlib
from .codecs.registry import DEFLATE
from .errors import PolyfsError, one_line
from .model import keys
from .model.catalog import Catalog
from .store import open_store


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be verified here (not a fault)
    checked: dict[str, int] = field(default_factory=lambda: {"domains": 0, "datasets": 0, "chunks": 0})

    def text(self) -> str:
        lines = [f"checked {self.checked['domains']} domains, {self.checked['datasets']} datasets, "
                 f"{self.checked['chunks']} chunks"]
        lines += [f"problem: {p}" for p in self.problems]
        lines += [f"repaired: {r}" for r in self.repaired]
        lines += [f"note: {n}" for n in self.notes]
        if not self.problems:
            lines.append("store is consistent")
        return "\n".join(lines) + "\n"


def _deflate_only(pipeline) -> bool:
    return bool(pipeline.filters) and pipeline.filters[-1].id == DEFLATE


def check_store(url: str, domain: str | None = None, deep: bool = False, repair: bool = False) -> Report:
    store = open_store(url, read_only=not repair)
    catalog = Catalog(store)
    report = Report()
    domains = [keys.normalize_domain(domain)] if domain else catalog.list_domains()
    for path in domains:
        try:
            model = catalog.load(path)
        except PolyfsError as exc:
            report.problems.append(f"{path}: {one_line(exc)}")
            continue
        report.checked["domains"] += 1
        for ds in model.datasets.values():
            report.checked["datasets"] += 1
            _check_dataset(catalog, path, ds, deep, repair, report)
    if domain is None:
        roots = _all_roots(catalog, report)
        if roots is not None:
            _check_orphans(catalog, {keys.domain_db_prefix(r) for r in roots}, repair, report)
        _check_leftovers(store, repair, report)
    return report


LEFTOVER_AGE = 600.0  # a write stages and renames within seconds: older temporaries are a killed writer's


def _check_leftovers(store, repair: bool, report: Report) -> None:
    names = store.leftovers(LEFTOVER_AGE)
    if not names:
        return
    if repair:
        for name in names:
            store.remove_leftover(name)
        report.repaired.append(f"removed {len(names)} temporary files a killed writer left")
    else:
        report.problems.append(f"{len(names)} temporary files a killed writer left (e.g. {names[0]}); "
                               "run --repair")


def _all_roots(catalog: Catalog, report: Report) -> set[str] | None:
    """Root ids named by every ``.domain.json``, or None if any cannot be read
    (then nothing may be called unreachable, let alone deleted)."""
    roots: set[str] = set()
    for path in catalog.list_domains(include_folders=True):
        try:
            body = catalog.get_json(keys.domain_key(path))
        except PolyfsError as exc:
            report.problems.append(f"{path}: {one_line(exc)}; not looking for unreachable objects")
            return None
        root = body.get("root") if isinstance(body, dict) else None
        if root and not isinstance(root, str):
            report.problems.append(f"{path}: its root is {root!r}, not a group id; not looking for unreachable objects")
            return None
        if root:
            roots.add(root)
    return roots


def _check_dataset(catalog: Catalog, path: str, ds, deep: bool, repair: bool, report: Report) -> None:
    where = f"{path} dataset {ds.id}"
    try:
        pipeline = catalog.pipeline(ds)
    except PolyfsError as exc:
        report.problems.append(f"{where}: {one_line(exc)}")
        return
    idx = catalog.chunk_index(ds)
    # the loader's own test (model/indexcache.py): an index in force that a listing contradicts
    # is stale, a fault; one whose directory changed since is not used, only listed afresh
    persisted = catalog.persisted_index_state(ds)
    if persisted in ("stale", "outdated") and repair:
        catalog.chunk_changed(keys.chunk_key(ds.id, (0,) * len(ds.grid or (0,))))
        idx = catalog.chunk_index(ds)  # listed again, and persisted afresh
        report.repaired.append(f"{where}: rebuilt its {persisted} persisted chunk index")
    elif persisted == "stale":
        report.problems.append(f"{where}: persisted chunk index disagrees with the store (run --repair)")
    elif persisted == "outdated":
        report.notes.append(f"{where}: persisted chunk index is out of date (its directory changed since; "
                            "not used, --repair rebuilds it)")
    report.checked["chunks"] += len(idx)
    why = pipeline.undecodable if deep and len(idx) else None
    if why is not None:  # carried as stored; only a reader with the plugin can decode them
        report.notes.append(f"{where}: chunks not decoded ({why})")
    elif deep and not ds.type.is_vlen:
        for linear in idx.linear:
            key = idx.key(int(linear))
            try:
                pipeline.decode(catalog.store.get(key), ds.chunk_nbytes)
            except PolyfsError as exc:
                report.problems.append(f"{where}: chunk {key}: {one_line(exc)}")
    if not _deflate_only(pipeline):
        return
    table = catalog.crc_table(ds)
    stale: list[tuple[int, int, int]] = []
    for linear in idx.linear:
        key = idx.key(int(linear))
        size = idx.size_of(int(linear))
        if size < 6:
            report.problems.append(f"{where}: chunk {key} is {size} bytes, too short for a zlib stream")
            continue
        adler = int.from_bytes(catalog.store.get_range(key, size - 4, 4), "big")
        if table.lookup(int(linear), adler) is None:
            if not repair:
                report.problems.append(f"{where}: CRC32 of chunk {key} is missing or stale (run --repair)")
                continue
            stream = catalog.store.get(key)
            try:
                stale.append((int(linear), adler32_of_zlib(stream), zlib.crc32(zlib.decompress(stream))))
            except zlib.error as exc:
                report.problems.append(f"{where}: chunk {key} is not a valid zlib stream ({exc})")
    if stale:
        catalog.save_crcs(ds.id, stale, grid=idx.grid)
        report.repaired.append(f"{where}: rebuilt {len(stale)} CRC32 entries")
    # entries for chunks that no longer exist
    present = set(int(x) for x in idx.linear)
    table = catalog.crc_table(ds)
    if len(table) and not set(int(x) for x in table.entries["linear"]) <= present:
        if repair:
            catalog.prune_crcs(ds.id, present, grid=idx.grid)
            report.repaired.append(f"{where}: dropped CRC32 entries of deleted chunks")
        else:
            report.problems.append(f"{where}: CRC32 table lists deleted chunks (run --repair)")


def _check_orphans(catalog: Catalog, live: set[str], repair: bool, report: Report) -> None:
    store = catalog.store
    derived = [keys.DERIVED + kind + "/" for kind in keys.DERIVED_KINDS]
    for sub, base in [(keys.DB, keys.DB)] + [(d, d) for d in derived]:
        for prefix in store.list_dir(sub).prefixes:
            uuid1 = prefix[len(base):]
            if keys.DB + uuid1 in live:
                continue
            if repair:
                n = store.delete_prefix(prefix)
                report.repaired.append(f"deleted {n} objects under {prefix} (no domain refers to them)")
            else:
                report.problems.append(f"{prefix}: objects no domain refers to (a crashed import?); run --repair")
