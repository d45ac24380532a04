"""Tier 1: HSDS ACLs -> local owners, modes and decisions (polyfs.fs.access), no FUSE."""
from __future__ import annotations

import itertools
import types

import pytest

from polyfs.fs.access import (ACTIONS, AccessGate, DomainAccess, LocalUsers, entry_for, mode_bits,
                              permits)

DAEMON_UID, DAEMON_GID = 4242, 4343
ACCOUNTS = {"alice": (1001, 100), "bob": (1002, 100), "carol": (1003, 200)}


def users() -> LocalUsers:
    def getpwnam(name: str):
        if name not in ACCOUNTS:
            raise KeyError(name)
        uid, gid = ACCOUNTS[name]
        return types.SimpleNamespace(pw_name=name, pw_uid=uid, pw_gid=gid)

    def getpwuid(uid: int):
        for name, (u, g) in ACCOUNTS.items():
            if u == uid:
                return types.SimpleNamespace(pw_name=name, pw_uid=u, pw_gid=g)
        raise KeyError(uid)

    return LocalUsers(DAEMON_UID, DAEMON_GID, getpwnam=getpwnam, getpwuid=getpwuid)


def acl(bits: tuple[bool, ...]) -> dict[str, bool]:
    return dict(zip(ACTIONS, bits))


ALL = list(itertools.product([False, True], repeat=len(ACTIONS)))


def expected_triplet(entry: dict[str, bool], is_dir: bool, writable: bool) -> int:
    r = 4 if entry["read"] else 0
    w = 2 if entry["update"] and writable else 0
    x = 1 if entry["read"] and is_dir else 0
    return r | w | x


@pytest.mark.parametrize("bits", ALL)
def test_user_entry_decides_every_action(bits):
    """A listed user gets exactly its own entry, whatever ``default`` says (HSDS rule)."""
    mine = acl(bits)
    for other in (ALL[0], ALL[-1]):
        acls = {"alice": mine, "default": acl(other)}
        for action in ACTIONS:
            assert permits(acls, "alice", action) is mine[action]


@pytest.mark.parametrize("bits", ALL)
def test_default_applies_to_everyone_unlisted(bits):
    acls = {"alice": acl(ALL[-1]), "default": acl(bits)}
    for who in ("bob", "nosuchuser", None):
        assert entry_for(acls, who) == acl(bits)


def test_no_entry_and_no_default_is_nothing():
    assert not any(entry_for({"alice": acl(ALL[-1])}, "bob").values())
    assert not any(entry_for({}, "alice").values())
    assert not any(entry_for({}, None).values())


def test_malformed_entries_fail_closed():
    acls = {"alice": {"read": "yes", "update": 1}, "default": "rw", "bob": None}
    assert not any(entry_for(acls, "alice").values())  # only JSON true counts
    assert not any(entry_for(acls, "bob").values())  # not a mapping: default, itself malformed
    acls2 = {"bob": ["read"], "default": {"read": True}}
    assert entry_for(acls2, "bob")["read"] is True  # a non-mapping entry falls back to default
    with pytest.raises(ValueError):
        permits({}, "alice", "write")


def test_a_user_named_default_gets_default():
    acls = {"default": {"read": True}}
    assert permits(acls, "default", "read")


@pytest.mark.parametrize("own_bits,default_bits", [(a, b) for a in ALL[::7] for b in ALL[::5]])
def test_mode_bits(own_bits, default_bits):
    acls = {"alice": acl(own_bits), "default": acl(default_bits)}
    for is_dir, writable in itertools.product([False, True], repeat=2):
        own = expected_triplet(acl(own_bits), is_dir, writable)
        other = expected_triplet(acl(default_bits), is_dir, writable)
        assert mode_bits("alice", acls, is_dir, writable) == (own << 6) | (other << 3) | other


def test_owner_without_entry_shows_default():
    acls = {"default": {"read": True, "update": False}}
    assert mode_bits("alice", acls, False, True) == 0o444
    assert mode_bits("alice", acls, True, True) == 0o555


def test_every_combination_of_modes_matches_decisions():
    """What ``ls -l`` shows the owner and the others is what the daemon decides for them."""
    u = users()
    for own_bits, default_bits in itertools.product(ALL[::3], ALL[::3]):
        acls = {"alice": acl(own_bits), "default": acl(default_bits)}
        d = DomainAccess.of("/x.h5", "alice", acls, u)
        fm = d.mode(False, True)
        assert bool(fm & 0o400) == d.allows(u, 1001, "read")
        assert bool(fm & 0o200) == d.allows(u, 1001, "update")
        assert bool(fm & 0o004) == d.allows(u, 1003, "read")  # carol: unlisted
        assert bool(fm & 0o002) == d.allows(u, 1003, "update")
        assert bool(fm & 0o040) == bool(fm & 0o004)


def test_owner_ids_and_unknown_names():
    u = users()
    d = DomainAccess.of("/x.h5", "alice", {"alice": acl(ALL[-1])}, u)
    assert (d.uid, d.gid) == (1001, 100)
    d = DomainAccess.of("/x.h5", "test_user1", {"test_user1": acl(ALL[-1])}, u)
    assert (d.uid, d.gid) == (DAEMON_UID, DAEMON_GID)  # no local account: the daemon's user
    d = DomainAccess.of("/x.h5", "", {}, u)
    assert (d.uid, d.gid) == (DAEMON_UID, DAEMON_GID)
    assert d.mode(True, True) == 0 and d.mode(False, False) == 0


def test_requests_by_uid():
    u = users()
    acls = {"alice": acl(ALL[-1]), "bob": {"read": True}, "default": {"read": False}}
    d = DomainAccess.of("/x.h5", "alice", acls, u)
    assert d.allows(u, 1001, "delete")
    assert d.allows(u, 1002, "read") and not d.allows(u, 1002, "update")
    assert not d.allows(u, 1003, "read")  # carol: default
    assert not d.allows(u, 5555, "read")  # a uid without an account: default
    assert d.allows(u, 0, "delete") and d.allows(u, DAEMON_UID, "updateACL")  # root, the daemon's user
    assert u.name_of(5555) is None and u.name_of(1002) == "bob"


def test_read_only_mount_has_no_w_bits():
    d = DomainAccess.of("/x.h5", "alice", {"alice": acl(ALL[-1]), "default": acl(ALL[-1])}, users())
    assert d.mode(False, False) == 0o444 and d.mode(True, False) == 0o555
    assert d.mode(False, True) == 0o666 and d.mode(True, True) == 0o777


def test_gate_caches_and_drops_on_change():
    calls = []
    gens = {"/x.h5": 0}
    acls = {"alice": {"read": True}}

    def load(domain):
        calls.append(domain)
        return "alice", dict(acls)

    gate = AccessGate(load, lambda d: gens[d], users(), ttl=60)
    assert gate.peek("/x.h5") is None
    first = gate.get("/x.h5")
    assert gate.get("/x.h5") is first and gate.peek("/x.h5") is first and calls == ["/x.h5"]
    acls["alice"] = {"read": False}
    gens["/x.h5"] += 1  # the domain changed through the mount
    assert gate.peek("/x.h5") is None
    assert not gate.get("/x.h5").allows(gate.users, 1001, "read") and len(calls) == 2
    gate.drop("/x.h5")
    gate.get("/x.h5")
    assert len(calls) == 3
    expiring = AccessGate(load, lambda d: 0, users(), ttl=0.0)
    expiring.get("/x.h5")
    assert expiring.peek("/x.h5") is None  # past its ttl: read again (ACLs changed behind polyfs)
