"""The only module that spells store keys (HSDS object storage schema v2).

=================  ==========================================
domain             ``<domain path>/.domain.json``
root group         ``db/<uuid1>/.group.json`` (as HSDS 1.0.2 writes it)
group              ``db/<uuid1>/g/<uuid2>/.group.json``
dataset            ``db/<uuid1>/d/<uuid2>/.dataset.json``
committed type     ``db/<uuid1>/t/<uuid2>/.datatype.json``
chunk              ``db/<uuid1>/d/<uuid2>/<i>_<j>_<k>``
summary            ``db/<uuid1>/.info.json``, ``db/<uuid1>/.summary.json``
polyfs derived     ``polyfs/...`` (never read by HSDS; always rebuildable)
=================  ==========================================
"""
from __future__ import annotations

import re
from typing import Sequence

from ..errors import InvalidInput
from . import ids

DOMAIN_FILE = ".domain.json"
DB = "db/"
DERIVED = "polyfs/"
_CHUNK_RE = re.compile(r"^\d+(?:_\d+)*$")


def normalize_domain(domain: str) -> str:
    """``/home/alice/brain.h5`` (leading slash, no trailing slash)."""
    parts = [p for p in domain.strip().split("/") if p]
    if not parts:
        raise InvalidInput("the domain path is empty")
    for p in parts:
        if p in (".", "..") or p.startswith("."):
            raise InvalidInput(f"invalid domain path component {p!r} in {domain!r}")
    if parts[0] in ("db", "polyfs"):
        raise InvalidInput(f"domain paths may not start with {parts[0]!r}: {domain!r}")
    return "/" + "/".join(parts)


def domain_key(domain: str) -> str:
    return normalize_domain(domain)[1:] + "/" + DOMAIN_FILE


def domain_from_key(key: str) -> str | None:
    """The domain path of a ``.domain.json`` key, else None."""
    if not key.endswith("/" + DOMAIN_FILE):
        return None
    path = key[: -len(DOMAIN_FILE) - 1]
    if not path or path.split("/", 1)[0] in ("db", "polyfs"):
        return None
    return "/" + path


def domain_db_prefix(root_id: str) -> str:
    """``db/<uuid1>/``: every object of the domain lives below it."""
    return f"{DB}{ids.halves(root_id)[0]}/"


def group_key(group_id: str) -> str:
    u1, u2 = ids.halves(group_id)
    if ids.is_root(group_id):
        return f"{DB}{u1}/.group.json"
    return f"{DB}{u1}/g/{u2}/.group.json"


def legacy_root_group_key(group_id: str) -> str:
    """Where the schema document (not HSDS 1.0.2) puts the root group."""
    u1, u2 = ids.halves(group_id)
    return f"{DB}{u1}/g/{u2}/.group.json"


def dataset_prefix(dataset_id: str) -> str:
    u1, u2 = ids.halves(dataset_id)
    return f"{DB}{u1}/d/{u2}/"


def dataset_key(dataset_id: str) -> str:
    return dataset_prefix(dataset_id) + ".dataset.json"


def datatype_key(type_id: str) -> str:
    u1, u2 = ids.halves(type_id)
    return f"{DB}{u1}/t/{u2}/.datatype.json"


def object_key(obj_id: str) -> str:
    kind = ids.kind_of(obj_id)
    if kind == "group":
        return group_key(obj_id)
    if kind == "dataset":
        return dataset_key(obj_id)
    return datatype_key(obj_id)


def chunk_name(coords: Sequence[int]) -> str:
    return "_".join(str(int(c)) for c in coords)


def chunk_key(dataset_id: str, coords: Sequence[int]) -> str:
    return dataset_prefix(dataset_id) + chunk_name(coords)


def parse_chunk_name(name: str) -> tuple[int, ...] | None:
    """Grid coordinates of a chunk object name, None for anything else."""
    if not _CHUNK_RE.match(name):
        return None
    return tuple(int(p) for p in name.split("_"))


def info_key(root_id: str) -> str:
    return domain_db_prefix(root_id) + ".info.json"


def summary_key(root_id: str) -> str:
    return domain_db_prefix(root_id) + ".summary.json"


def crc_table_key(dataset_id: str) -> str:
    """polyfs's per-dataset table of deflate chunk CRC32s (derived data)."""
    u1, u2 = ids.halves(dataset_id)
    return f"{DERIVED}crc32/{u1}/{u2}.npy"


def chunk_index_key(dataset_id: str) -> str:
    """polyfs's persisted listing of a dataset's chunks (derived data, see indexcache)."""
    u1, u2 = ids.halves(dataset_id)
    return f"{DERIVED}chunks/{u1}/{u2}.idx"


DERIVED_KINDS = ("crc32", "chunks")


def derived_prefixes(root_id: str) -> list[str]:
    """Every prefix of derived data belonging to the domain of ``root_id``."""
    u1 = ids.halves(root_id)[0]
    return [f"{DERIVED}{kind}/{u1}/" for kind in DERIVED_KINDS]


def is_chunk_key(key: str) -> bool:
    """Whether ``key`` names a chunk object (``db/<uuid1>/d/<uuid2>/<i>_<j>_<k>``)."""
    return dataset_of_chunk_key(key) is not None and _CHUNK_RE.match(key.rsplit("/", 1)[1]) is not None


def dataset_of_chunk_key(key: str) -> str | None:
    """The dataset id a chunk key belongs to, None for other keys."""
    parts = key.split("/")
    if len(parts) != 5 or parts[0] != "db" or parts[2] != "d":
        return None
    candidate = f"d-{parts[1]}-{parts[3]}"
    return candidate if ids.ID_RE.match(candidate) else None
