"""Who may do what under a domain: its HSDS ACLs mapped onto local users.

A domain's ``.domain.json`` names an ``owner`` and ``acls``: per user name the six
HSDS actions (create, read, update, delete, readACL, updateACL), plus the special name
``default`` for everyone not listed. HSDS decides a request from the requesting user's
own entry if the domain has one, otherwise from ``default``, otherwise refuses; owning a
domain grants nothing beyond the owner's entry. polyfs applies the same rule to the
local user a FUSE request comes from (``ctx.uid`` -> user name with ``pwd``), so a mount
made with ``allow_other`` gives other local users what HSDS would give the same names.

The rest of this module is format-free arithmetic on that rule:

* modes: owner bits from the owner's entry, *other* bits from ``default``, and group
  bits equal to the other bits (HSDS has no groups of its own: members of the owner's
  group who are not listed get ``default``, so that is what ``ls -l`` shows them).
  ``r`` is read, ``w`` update (only on a writable mount), ``x`` on directories read.
  Users named in the ACL other than the owner are not expressible in mode bits; the
  daemon enforces their entries itself.
* owner: the owner's name looked up with ``pwd``; a name without a local account (HSDS
  user names often have none) shows as the daemon's own user.
* privileged: root and the daemon's own user may do everything (root bypasses POSIX
  permissions; the daemon's user can reach the store directly anyway, and without
  ``allow_other`` nobody else can reach the mount, so nothing changes for it).
* anything malformed fails closed: an entry value counts only when it is JSON ``true``.
"""
from __future__ import annotations

import pwd
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import NotFound
from ..model import keys

ACTIONS = ("create", "read", "update", "delete", "readACL", "updateACL")
DEFAULT = "default"


def entry_for(acls: Mapping[str, Any], user: str | None) -> dict[str, bool]:
    """The ACL entry HSDS applies to ``user`` (None: a user with no name, i.e. ``default``)."""
    entry: Any = None
    if user is not None and user != DEFAULT:
        entry = acls.get(user)
    if not isinstance(entry, Mapping):
        entry = acls.get(DEFAULT)
    if not isinstance(entry, Mapping):
        entry = {}
    return {a: entry.get(a) is True for a in ACTIONS}


def permits(acls: Mapping[str, Any], user: str | None, action: str) -> bool:
    """True when ``user`` may do ``action`` (one of :data:`ACTIONS`) under these ACLs."""
    if action not in ACTIONS:
        raise ValueError(f"unknown ACL action {action!r}")
    return entry_for(acls, user)[action]


def triplet(entry: Mapping[str, bool], is_dir: bool, writable: bool) -> int:
    """``rwx`` bits (0-7) of one ACL entry."""
    bits = 0
    if entry.get("read"):
        bits |= 0o5 if is_dir else 0o4
    if writable and entry.get("update"):
        bits |= 0o2
    return bits


def mode_bits(owner: str, acls: Mapping[str, Any], is_dir: bool, writable: bool) -> int:
    """Permission bits (no file type) of every node under a domain."""
    own = triplet(entry_for(acls, owner), is_dir, writable)
    other = triplet(entry_for(acls, None), is_dir, writable)
    return (own << 6) | (other << 3) | other


class LocalUsers:
    """Local user names and ids (``pwd``), cached for ``ttl`` seconds: a request names
    a uid, an ACL names users."""

    def __init__(self, daemon_uid: int, daemon_gid: int, ttl: float = 60.0,
                 getpwnam: Callable[[str], Any] = pwd.getpwnam,
                 getpwuid: Callable[[int], Any] = pwd.getpwuid) -> None:
        self.daemon_uid, self.daemon_gid, self.ttl = daemon_uid, daemon_gid, ttl
        self._getpwnam, self._getpwuid = getpwnam, getpwuid
        self._names: dict[int, tuple[float, str | None]] = {}
        self._ids: dict[str, tuple[float, tuple[int, int]]] = {}

    def privileged(self, uid: int) -> bool:
        """Root and the daemon's own user: every action allowed."""
        return uid == 0 or uid == self.daemon_uid

    def name_of(self, uid: int) -> str | None:
        """The local user name of ``uid``; None for a uid without an account (gets ``default``)."""
        hit = self._names.get(uid)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        try:
            name: str | None = self._getpwuid(uid).pw_name
        except KeyError:
            name = None
        self._names[uid] = (now, name)
        return name

    def ids_of(self, name: str) -> tuple[int, int]:
        """(uid, gid) of the local account ``name``; the daemon's own for unknown names."""
        hit = self._ids.get(name)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        try:
            pw = self._getpwnam(name) if name else None
            ids = (pw.pw_uid, pw.pw_gid) if pw is not None else (self.daemon_uid, self.daemon_gid)
        except KeyError:
            ids = (self.daemon_uid, self.daemon_gid)
        self._ids[name] = (now, ids)
        return ids


@dataclass(frozen=True)
class DomainAccess:
    """One domain's owner and ACLs, resolved to what node attributes need."""

    domain: str
    owner: str
    acls: Mapping[str, Any]
    uid: int
    gid: int
    file_mode: int  # permission bits of files (writable mount)
    dir_mode: int
    file_mode_ro: int  # the same on a read-only mount (no w bits)
    dir_mode_ro: int

    @classmethod
    def of(cls, domain: str, owner: str, acls: Mapping[str, Any], users: LocalUsers) -> "DomainAccess":
        acls = acls if isinstance(acls, Mapping) else {}
        owner = owner if isinstance(owner, str) else ""
        uid, gid = users.ids_of(owner)
        return cls(domain, owner, acls, uid, gid,
                   mode_bits(owner, acls, False, True), mode_bits(owner, acls, True, True),
                   mode_bits(owner, acls, False, False), mode_bits(owner, acls, True, False))

    def mode(self, is_dir: bool, writable: bool) -> int:
        if writable:
            return self.dir_mode if is_dir else self.file_mode
        return self.dir_mode_ro if is_dir else self.file_mode_ro

    def allows(self, users: LocalUsers, uid: int, action: str) -> bool:
        """The decision for a request from ``uid``."""
        if users.privileged(uid):
            return True
        return permits(self.acls, users.name_of(uid), action)


class AccessGate:
    """Per-domain :class:`DomainAccess`, cached; dropped when the domain changes (the
    catalog's generation moved: written through this mount) or after ``ttl`` seconds
    (ACLs changed behind polyfs's back, e.g. by HSDS)."""

    def __init__(self, load: Callable[[str], tuple[str, Mapping[str, Any]]],
                 generation: Callable[[str], int], users: LocalUsers, ttl: float = 5.0) -> None:
        self._load, self._generation, self.users, self.ttl = load, generation, users, ttl
        self._cache: dict[str, tuple[float, int, DomainAccess]] = {}
        self._lock = threading.Lock()

    def peek(self, domain: str) -> DomainAccess | None:
        """The cached access of ``domain`` if still valid (never I/O), else None."""
        hit = self._cache.get(domain)
        if hit is None or time.monotonic() - hit[0] >= self.ttl or hit[1] != self._generation(domain):
            return None
        return hit[2]

    def get(self, domain: str) -> DomainAccess:
        """The access of ``domain``, loading its ``.domain.json`` when not cached (I/O)."""
        hit = self.peek(domain)
        if hit is not None:
            return hit
        gen = self._generation(domain)
        owner, acls = self._load(domain)
        access = DomainAccess.of(domain, owner, acls, self.users)
        with self._lock:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[domain] = (time.monotonic(), gen, access)
        return access

    def drop(self, domain: str | None = None) -> None:
        with self._lock:
            if domain is None:
                self._cache.clear()
            else:
                self._cache.pop(domain, None)


def catalog_loader(catalog: Any) -> Callable[[str], tuple[str, Mapping[str, Any]]]:
    """Reads a domain's owner and ACLs from its ``.domain.json`` (one small GET, not the
    whole object graph: listing a view directory must not load every domain)."""
    def load(domain: str) -> tuple[str, Mapping[str, Any]]:
        body = catalog.get_json(keys.domain_key(domain))
        if not isinstance(body, Mapping):
            raise NotFound(f"domain {domain}: no domain object")
        acls = body.get("acls")
        return str(body.get("owner") or ""), acls if isinstance(acls, Mapping) else {}

    return load
