"""Tier 2: domains' HSDS ACLs enforced by the operations (``allow_other``), no kernel.

Requests come as the daemon's own user (who made the domains) and as ``nobody``; the
domains' ACLs are set in the store by hand, as HSDS would."""
from __future__ import annotations

import errno
import json
import os
import pwd
import stat
import types

import numpy as np
import pytest

from writeharness import FS, FsError, zarr_array_meta

try:
    NOBODY = pwd.getpwnam("nobody")
except KeyError:  # pragma: no cover
    NOBODY = None

pytestmark = pytest.mark.skipif(NOBODY is None or os.getuid() == getattr(NOBODY, "pw_uid", -1),
                                reason="needs a local 'nobody' account other than the test's user")

ALLOW = {"create": True, "read": True, "update": True, "delete": True, "readACL": True, "updateACL": True}
NONE = {k: False for k in ALLOW}
READ = {**NONE, "read": True}


def set_acls(fs: FS, domain: str, owner: str, acls: dict) -> None:
    key = f"{domain.strip('/')}/.domain.json"
    body = json.loads(fs.raw_store.get(key))
    body["owner"], body["acls"] = owner, acls
    fs.raw_store.put(key, json.dumps(body).encode())


def as_uid(fs: FS, uid: int, gid: int) -> FS:
    other = fs.as_pid(fs.pid + 1)
    other.ctx = types.SimpleNamespace(pid=other.pid, uid=uid, gid=gid, umask=0o022)
    return other


def errno_of(fn, *args) -> int:
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno
    return 0


@pytest.fixture
def acl_fs():
    fs = FS(fuse_options=["allow_other"], domain_ttl=0.0)
    data = np.arange(30, dtype="<u2").reshape(5, 6)
    for name in ("pub", "priv"):
        fs.makedirs(f"zarr/{name}.zarr/a")
        fs.write_json(f"zarr/{name}.zarr/a/zarr.json", zarr_array_meta((5, 6), "<u2", (8, 8), codecs=()))
        fs.makedirs(f"zarr/{name}.zarr/a/c/0")
        fs.write_file(f"zarr/{name}.zarr/a/c/0/0", np.pad(data, ((0, 3), (0, 2))).tobytes())
    set_acls(fs, "/pub.h5", "nobody", {"nobody": READ, "default": NONE})
    set_acls(fs, "/priv.h5", "root", {"root": ALLOW, "default": NONE})
    yield fs
    fs.close()


def test_reader_with_read_sees_data_in_every_view(acl_fs):
    other = as_uid(acl_fs, NOBODY.pw_uid, NOBODY.pw_gid)
    assert other.read_file("zarr/pub.zarr/a/c/0/0") == acl_fs.read_file("zarr/pub.zarr/a/c/0/0")
    assert other.read_file("hdf5/pub.h5") == acl_fs.read_file("hdf5/pub.h5")
    assert sorted(other.ls("n5/pub.n5")) == sorted(acl_fs.ls("n5/pub.n5"))
    assert other.ls("zarr") == ["priv.zarr", "pub.zarr"]  # view directories list every domain


def test_reader_without_read_gets_eacces_everywhere(acl_fs):
    other = as_uid(acl_fs, NOBODY.pw_uid, NOBODY.pw_gid)
    acl_fs.read_file("zarr/priv.zarr/a/c/0/0")  # the daemon's user: everything
    assert errno_of(other.ls, "zarr/priv.zarr") == errno.EACCES
    assert errno_of(other.ls, "n5/priv.n5") == errno.EACCES
    assert errno_of(other.read_file, "hdf5/priv.h5") == errno.EACCES
    assert errno_of(other.lookup, "zarr/priv.zarr/a") == errno.EACCES
    # a path the kernel already knows (cached dentry): open itself refuses
    ino = acl_fs.ino("zarr/priv.zarr/a/c/0/0")
    with pytest.raises(FsError) as e:
        other.call(other.ops.open, ino, os.O_RDONLY, other.ctx)
    assert e.value.errno == errno.EACCES
    assert not other.call(other.ops.access, ino, os.R_OK, other.ctx)
    assert acl_fs.call(acl_fs.ops.access, ino, os.R_OK | os.W_OK, acl_fs.ctx)


def test_writer_without_update_gets_eacces(acl_fs):
    other = as_uid(acl_fs, NOBODY.pw_uid, NOBODY.pw_gid)
    before = acl_fs.snapshot()
    blob = np.zeros((8, 8), "<u2").tobytes()
    assert errno_of(other.write_file, "zarr/pub.zarr/a/c/0/0", blob) == errno.EACCES
    assert errno_of(other.write_file, "zarr/pub.zarr/a/c/0/x.partial", blob) == errno.EACCES
    assert errno_of(other.unlink, "zarr/pub.zarr/a/c/0/0") == errno.EACCES
    assert errno_of(other.mkdir, "zarr/pub.zarr/g") == errno.EACCES
    assert errno_of(other.mkdir, "zarr/new.zarr") == errno.EACCES  # new domains: the daemon's user only
    assert errno_of(other.truncate, "zarr/pub.zarr/a/c/0/0", 0) == errno.EACCES
    ino = acl_fs.ino("zarr/pub.zarr/a/c/0/0")
    assert not other.call(other.ops.access, ino, os.W_OK, other.ctx)
    assert acl_fs.snapshot() == before


def test_update_allows_writing(acl_fs):
    set_acls(acl_fs, "/pub.h5", "nobody", {"nobody": {**READ, "update": True}, "default": NONE})
    other = as_uid(acl_fs, NOBODY.pw_uid, NOBODY.pw_gid)
    blob = np.full((8, 8), 3, "<u2").tobytes()
    other.write_file("zarr/pub.zarr/a/c/0/0", blob)
    assert acl_fs.read_file("zarr/pub.zarr/a/c/0/0") == blob
    assert errno_of(other.unlink, "zarr/pub.zarr/a/c/0/0") == errno.EACCES  # delete is its own


def test_modes_and_owners(acl_fs):
    other = as_uid(acl_fs, NOBODY.pw_uid, NOBODY.pw_gid)
    for path in ("zarr/pub.zarr", "n5/pub.n5", "zarr/pub.zarr/a"):
        a = other.stat(path)
        assert stat.S_IMODE(a.st_mode) == 0o500 and a.st_uid == NOBODY.pw_uid and a.st_gid == NOBODY.pw_gid
    for path in ("hdf5/pub.h5", "zarr/pub.zarr/a/zarr.json", "zarr/pub.zarr/a/c/0/0"):
        a = other.stat(path)
        assert stat.S_IMODE(a.st_mode) == 0o400 and a.st_uid == NOBODY.pw_uid
    a = acl_fs.stat("hdf5/priv.h5")
    assert stat.S_IMODE(a.st_mode) == 0o600 and a.st_uid == 0
    # view directories and the root keep the daemon's user and modes
    a = other.stat("zarr")
    assert a.st_uid == os.getuid() and stat.S_IMODE(a.st_mode) == 0o755


def test_without_allow_other_nothing_changes():
    fs = FS()
    try:
        fs.mkdir("zarr/x.zarr")
        set_acls(fs, "/x.h5", "nobody", {"default": NONE})
        a = fs.stat("zarr/x.zarr")
        assert a.st_uid == os.getuid() and stat.S_IMODE(a.st_mode) == 0o755
        other = as_uid(fs, NOBODY.pw_uid, NOBODY.pw_gid)
        other.ls("zarr/x.zarr")  # only the kernel keeps others out (no allow_other)
    finally:
        fs.close()
