"""``polyfs check``: verify a store, and rebuild what polyfs derives from it.

The chunk objects and JSON are the truth; polyfs's own data under
``polyfs/`` (the deflate CRC32 tables, the persisted chunk indexes) must always be
rebuildable from them, and an import that crashed before its ``.domain.json`` was
written leaves an unreachable ``db/<uuid1>/`` prefix behind. ``check`` finds both;
``--repair`` rebuilds the derived data and deletes unreachable prefixes (never
anything a domain refers to, nor a prefix still being written: a running import's
objects are unreachable until it commits). An unreachable prefix that holds a whole
domain (its root group, and every object that names, loads) is a domain whose
``.domain.json`` was lost, not a crash's leftovers: ``--repair`` names it again, as
``/lost+found/<uuid1>.h5``, and deletes none of it (deleting it would lose the data of
a domain a stray ``rm`` of one small file took out of the listing). Derived data is judged as its users judge it: a
persisted index is a fault only if the loader would use it and it is wrong.
"""
from __future__ import annotations

import math
import struct
import time
import zlib
from dataclasses import dataclass, field

from .codecs.pipeline import adler32_of_zlib
from .codecs.registry import DEFLATE
from .errors import AlreadyExists, CodecError, PolyfsError, ReadOnly, one_line
from .model import ids, keys
from .model.catalog import Catalog
from .model.schema import Domain
from .store import open_store

LOST_FOUND = "/lost+found"  # where --repair names again the domains whose .domain.json was lost


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
    from .importers import check_store_path

    check_store_path(str(url))  # a file named as the store: not "does not exist"
    store = open_store(url, read_only=not repair)
    refusal = store.write_refusal() if repair else None
    if refusal:  # else every rebuild fails with a warning and is still reported as repaired
        raise ReadOnly(f"cannot --repair store {store.url}: {refusal}")
    catalog = Catalog(store)
    report = Report()
    if domain is None:  # first: removing a killed writer's temporary changes its chunk directory,
        _check_leftovers(store, repair, report)  # which the persisted chunk indexes checked below record
    domains = _domains_to_check(catalog, domain) if domain else catalog.list_domains()
    unloadable = 0
    for path in domains:
        try:
            model = catalog.load(path)
        except PolyfsError as exc:
            report.problems.append(f"{path}: {one_line(exc)}")
            unloadable += 1
            continue
        report.checked["domains"] += 1
        for ds in model.datasets.values():
            report.checked["datasets"] += 1
            _check_dataset(catalog, path, ds, deep, repair, report)
    if domain is None:
        roots = _all_roots(catalog, report)
        live = None if roots is None else _live_prefixes(roots, report)
        if live is not None:
            # a domain that does not load may name its objects wrongly (a hand-edited root id):
            # what looks unreachable then may be its data, so nothing is deleted until it loads
            keep = repair and unloadable > 0
            _check_orphans(catalog, live, repair and not keep, report)
            if keep:
                report.notes.append(f"unreachable objects not deleted: {unloadable} domain(s) do not load "
                                    "(fix or remove them, then --repair again)")
    return report


def _live_prefixes(roots: set[str], report: Report) -> set[str] | None:
    """The ``db/`` prefixes the roots name, or None when one is malformed (then which
    objects that domain holds is unknown, and nothing may be called unreachable)."""
    out = set()
    for root in roots:
        try:
            out.add(keys.domain_db_prefix(root))
        except PolyfsError as exc:
            report.problems.append(f"root {root!r}: {one_line(exc)}; not looking for unreachable objects")
            return None
    return out


def _domains_to_check(catalog: Catalog, domain: str) -> list[str]:
    """``domain``, or the domains inside it when it is a folder (a missing one is reported)."""
    from .inspect import domains_under

    path = keys.normalize_domain(domain)
    if catalog.store.exists(keys.domain_key(path)):
        return [path]
    return domains_under(catalog, path) or [path]


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
        if not isinstance(body, dict):  # damaged: which objects it names is unknown (was: none,
            # and --repair deleted the whole domain's data as unreachable)
            report.problems.append(f"{path}: its .domain.json is {type(body).__name__}, not an object; "
                                   "not looking for unreachable objects")
            return None
        root = body.get("root")
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
    elif deep:
        for linear in idx.linear:
            key = idx.key(int(linear))
            try:
                _decode_chunk(pipeline, ds, catalog.store.get(key))
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


def _decode_chunk(pipeline, ds, data: bytes) -> None:
    """Decode one stored chunk as a reader would; a CodecError if it does not.
    Variable-length chunks (strings, sequences) are decoded element by element too: their
    decoded size is not fixed, so only parsing them shows a corrupt or truncated chunk."""
    if not ds.type.is_vlen:
        pipeline.decode(data, ds.chunk_nbytes)
        return
    from .codecs import vlen

    count = math.prod(ds.chunks) if ds.chunks else 1
    try:
        vlen.decode(ds.type, pipeline.decode(data), count)
    except PolyfsError:
        raise
    except (ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:  # a corrupt length or body
        raise CodecError(f"variable-length chunk does not parse ({type(exc).__name__}: {exc})") from None


ORPHAN_SETTLE = 2.0  # seconds an unreachable prefix must stay unchanged before --repair deletes it


def _check_orphans(catalog: Catalog, live: set[str], repair: bool, report: Report) -> None:
    store = catalog.store
    derived = [keys.DERIVED + kind + "/" for kind in keys.DERIVED_KINDS]
    orphans: dict[str, list[str]] = {}  # uuid1 -> its unreachable prefixes (db/ and derived)
    for sub, base in [(keys.DB, keys.DB)] + [(d, d) for d in derived]:
        for prefix in store.list_dir(sub).prefixes:
            uuid1 = prefix[len(base):]
            if keys.DB + uuid1 not in live:
                orphans.setdefault(uuid1, []).append(prefix)
    if not repair:
        for uuid1, prefixes in orphans.items():
            root = _lost_root(catalog, uuid1)
            for prefix in prefixes:
                report.problems.append(
                    f"{prefix}: objects no domain refers to (a crashed import?); run --repair" if root is None else
                    f"{prefix}: objects of root group {root}, which no .domain.json names (lost?); --repair names "
                    f"the domain {_lost_path(uuid1)} if it loads, else deletes them")
        return
    if not orphans:
        return
    # A running import (or a new domain being written into a mount) is unreachable too until
    # it commits: deleting its objects would make it commit a domain without chunks. What is
    # still being written is left alone (the import also checks its chunks before committing).
    before = {u: [_snapshot(store, p) for p in ps] for u, ps in orphans.items()}
    time.sleep(ORPHAN_SETTLE)
    roots = _all_roots(catalog, Report())  # an import may have committed meanwhile
    committed = None if roots is None else {keys.domain_db_prefix(r) for r in roots}
    for uuid1, prefixes in orphans.items():
        busy = [_snapshot(store, p) for p in prefixes] != before[uuid1]
        if busy or committed is None or keys.DB + uuid1 in committed:
            for prefix in prefixes:
                report.notes.append(f"{prefix}: objects no domain refers to yet, still being written (an import "
                                    "in progress?); left alone")
            continue
        root = _lost_root(catalog, uuid1)
        found = _recover(catalog, uuid1, root) if root is not None else None
        if found:
            report.repaired.append(f"{keys.DB}{uuid1}: root group {root}, which no .domain.json named, "
                                   f"is the domain {found} again (nothing deleted)")
            continue
        if found == "":  # loads, but every name in /lost+found is taken: never deleted
            report.problems.append(f"{keys.DB}{uuid1}: root group {root} loads as a domain, but "
                                   f"{_lost_path(uuid1)} and its alternatives are taken; left alone")
            continue
        for prefix in prefixes:
            n = store.delete_prefix(prefix)
            report.repaired.append(f"deleted {n} objects under {prefix} (no domain refers to them)")


def _lost_path(uuid1: str) -> str:
    return f"{LOST_FOUND}/{uuid1.rstrip('/')}.h5"


def _lost_root(catalog: Catalog, uuid1: str) -> str | None:
    """The id of the root group an unreachable ``db/<uuid1>/`` holds, or None (no root group
    there: an import killed before its commit wrote one)."""
    prefix = f"{keys.DB}{uuid1.rstrip('/')}/"
    try:
        body = catalog.get_json(f"{prefix}.group.json")
        rid = body.get("id") if isinstance(body, dict) else None
        if isinstance(rid, str) and ids.is_root(rid) and keys.domain_db_prefix(rid) == prefix:
            return rid
    except PolyfsError:
        pass
    return None


def _recover(catalog: Catalog, uuid1: str, root: str) -> str | None:
    """Name the domain of ``root`` at ``/lost+found/<uuid1>.h5`` (``<uuid1>-2.h5``... when that
    name is taken); its path if it loads there, else None with no domain file left (a commit
    cut short: some objects missing); "" when it loads but every name tried is taken."""
    base = _lost_path(uuid1)[: -len(".h5")]
    for path in [f"{base}.h5"] + [f"{base}-{k}.h5" for k in range(2, 10)]:
        try:
            catalog.put_domain(Domain.new(path, root), new=True)
        except AlreadyExists:
            continue
        try:
            catalog.load(path)
        except PolyfsError:
            catalog.store.delete(keys.domain_key(path))
            return None
        return path
    return ""


def _snapshot(store, prefix: str) -> frozenset:
    return frozenset((o.key, o.size, o.mtime) for o in store.list(prefix))
