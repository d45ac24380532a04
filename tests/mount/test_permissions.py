"""Tier 3: domains' HSDS ACLs on a real ``allow_other`` mount, read by a second local user.

The mount is made as root (so /etc/fuse.conf needs no ``user_allow_other``); a local
user is made for the test with ``useradd`` and removed afterwards. That user's reads and
writes run in a child process under its uid with the system Python (stdlib only: the
test's venv lives where the user cannot reach), so what it sees is the kernel's answer.

Refusals are ``EACCES``: the domain's ACLs deny the user (as POSIX does for missing
permission bits); ``EPERM`` stays for what the mount never allows anyone.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import numpy as np
import pytest

from conftest import Mount, fuse_available
from polyfs.codecs.registry import DEFLATE, Filter
from polyfs.model import keys
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

pytestmark = pytest.mark.mount

SYSTEM_PYTHON = "/usr/bin/python3"
ALL = {"create": True, "read": True, "update": True, "delete": True, "readACL": True, "updateACL": True}
NONE = {k: False for k in ALL}
READ = {**NONE, "read": True}
VIEWS = ("hdf5", "zarr", "n5", "tiff", "polyglot")

# Runs as the test user: each request is (op, path[, data]); answers are JSON.
PROBE = r"""
import hashlib, json, os, sys
out = []
for req in json.loads(sys.argv[1]):
    op, path = req[0], req[1]
    try:
        if op == "read":
            with open(path, "rb") as f:
                out.append(["ok", hashlib.sha256(f.read()).hexdigest()])
        elif op == "list":
            out.append(["ok", sorted(os.listdir(path))])
        elif op == "stat":
            st = os.stat(path)
            out.append(["ok", [st.st_mode, st.st_uid, st.st_gid]])
        elif op == "access":
            out.append(["ok", [os.access(path, os.R_OK), os.access(path, os.W_OK)]])
        elif op == "write":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.write(fd, bytes.fromhex(req[2]))
            finally:
                os.close(fd)
            out.append(["ok", None])
        else:
            out.append(["bad op", op])
    except OSError as exc:
        out.append(["errno", exc.errno])
print(json.dumps(out))
"""


@pytest.fixture
def local_user():
    """A throwaway local account (removed afterwards)."""
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root (the mount is made as root with allow_other)")
    if os.geteuid() != 0:
        pytest.skip("needs root to add a local user")
    useradd, userdel = shutil.which("useradd"), shutil.which("userdel")
    if useradd is None or userdel is None:
        pytest.skip("useradd/userdel are not installed")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is needed to run probes as the test user")
    name = "pfs" + uuid.uuid4().hex[:8]
    res = subprocess.run([useradd, "-M", "-N", "-s", "/usr/sbin/nologin", name], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"useradd failed: {res.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run([userdel, name], capture_output=True)


def make_store(path: Path, user: str) -> None:
    """Three domains holding the same image: readable by ``user`` (who owns it), private
    to root, and readable by everyone through ``default`` (owner unknown locally)."""
    cat = Catalog(open_store(str(path), create=True))
    acls = {
        "/mine.h5": (user, {user: READ, "default": NONE}),
        "/private.h5": ("root", {"root": ALL, "default": NONE}),
        "/shared.h5": ("hsds_user_without_account", {"hsds_user_without_account": ALL, "default": READ}),
    }
    data = np.arange(48 * 64, dtype="u2").reshape(48, 64)
    for domain, (owner, acl) in acls.items():
        with DomainWriter(cat, domain, owner=owner) as w:
            filters = [Filter(DEFLATE, (4,))] if domain == "/mine.h5" else []  # uncompressed: polyglot too
            d = w.add_dataset(w.root, "img", T.IntType(2, False, "<"), Shape("simple", data.shape), (16, 32),
                              filters)
            w.write_array(d, data)
        key = path / keys.domain_key(domain)
        body = json.loads(key.read_bytes())
        body["acls"] = acl
        key.write_text(json.dumps(body))


@pytest.fixture
def acl_mount(local_user, tmp_path):
    store = tmp_path / "store"
    make_store(store, local_user.pw_name)
    base = Path(tempfile.mkdtemp(prefix="polyfs-acl-", dir="/tmp"))
    base.chmod(0o755)  # the test user must reach the mountpoint
    mp = base / "mnt"
    mp.mkdir()
    mp.chmod(0o755)
    m = Mount(str(store), mp, tmp_path / "polyfs.log", ["allow_other", "domain_ttl=0.5"]).start()
    try:
        yield m, local_user
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)


def probe(user, requests: list) -> list:
    res = subprocess.run([SYSTEM_PYTHON, "-c", PROBE, json.dumps(requests)], user=user.pw_uid,
                         group=user.pw_gid, extra_groups=[], capture_output=True, text=True, timeout=120,
                         cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def leaves(mnt: Path, stem: str) -> dict[str, Path]:
    """Where a domain is in each view that shows it."""
    out = {}
    for view in VIEWS:
        for cand in (mnt / view / f"{stem}.h5", mnt / view / f"{stem}.zarr", mnt / view / f"{stem}.n5",
                     mnt / view / stem):
            if cand.exists():
                out[view] = cand
                break
    return out


def files_under(leaf: Path) -> list[Path]:
    if leaf.is_file():
        return [leaf]
    return sorted(p for p in leaf.rglob("*") if p.is_file())


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reader_with_read_permission_reads_every_view(acl_mount):
    m, user = acl_mount
    for stem in ("mine", "shared"):  # its own entry; the default entry
        where = leaves(m.path, stem)
        assert {"hdf5", "zarr", "n5", "tiff"} <= set(where), where
        files = [f for leaf in where.values() for f in files_under(leaf)]
        shown = ("hdf5", "zarr", "n5", "tiff") + (("polyglot",) if stem == "shared" else ())  # not for deflate
        assert all(files_under(where[v]) for v in shown), where
        got = probe(user, [["read", str(f)] for f in files])
        assert got == [["ok", sha(f)] for f in files]
        dirs = [leaf for leaf in where.values() if leaf.is_dir()]
        got = probe(user, [["list", str(d)] for d in dirs])
        assert got == [["ok", sorted(os.listdir(d))] for d in dirs]


def test_reader_without_read_permission_gets_eacces(acl_mount):
    m, user = acl_mount
    where = leaves(m.path, "private")
    assert set(VIEWS) <= set(where), where
    files = [f for leaf in where.values() for f in files_under(leaf)]  # root lists them all
    reqs = [["read", str(f)] for f in files] + [["list", str(leaf)] for leaf in where.values() if leaf.is_dir()]
    got = probe(user, reqs)
    assert got == [["errno", errno.EACCES]] * len(reqs)
    # the view directories still list the domain (its name is not secret; its contents are)
    assert probe(user, [["list", str(m.path / "hdf5")]])[0][1] == sorted(os.listdir(m.path / "hdf5"))
    assert probe(user, [["access", str(where["hdf5"])]]) == [["ok", [False, False]]]


def test_writer_without_update_permission_gets_eacces(acl_mount):
    m, user = acl_mount
    store_before = {p: p.read_bytes() for p in sorted(Path(m.store).rglob("*")) if p.is_file()}
    arr = m.path / "zarr" / "mine.zarr" / "img"
    chunk = next(p for p in files_under(arr) if p.name != "zarr.json")
    reqs = [["write", str(chunk), "00" * 16],  # an existing shard or chunk file
            ["write", str(arr / "zarr.json"), "7b7d"],  # the array's metadata
            ["write", str(m.path / "zarr" / "shared.zarr" / "img" / "x.partial"), "00"],  # a new file
            ["access", str(chunk)]]
    assert probe(user, reqs) == [["errno", errno.EACCES]] * 3 + [["ok", [True, False]]]
    after = {p: p.read_bytes() for p in sorted(Path(m.store).rglob("*")) if p.is_file()}
    assert after == store_before


def test_modes_and_owners_follow_the_acls(acl_mount):
    m, user = acl_mount
    expect = {  # (dir mode, file mode, uid): owner bits from the owner's entry, group/other from default
        "mine": (0o500, 0o400, user.pw_uid),
        "private": (0o700, 0o600, 0),
        "shared": (0o755, 0o644, os.getuid()),  # an owner without a local account: the daemon's user
    }
    for stem, (dmode, fmode, uid) in expect.items():
        for view, leaf in leaves(m.path, stem).items():
            paths = [leaf] + ([p for p in leaf.rglob("*")][:20] if leaf.is_dir() else [])
            got = probe(user, [["stat", str(p)] for p in paths]) if stem != "private" else None
            for i, p in enumerate(paths):
                st = os.stat(p)  # as root
                want = dmode if stat.S_ISDIR(st.st_mode) else fmode
                assert (stat.S_IMODE(st.st_mode), st.st_uid) == (want, uid), (view, p)
                if got is not None:  # the test user sees the same
                    assert got[i] == ["ok", [st.st_mode, st.st_uid, st.st_gid]], (view, p)
    # view directories stay the daemon's
    st = os.stat(m.path / "zarr")
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o755
