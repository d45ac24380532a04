"""Tier 3: the kernel caches names and attributes for ``entry_timeout`` (60 s by default),
and every change the daemon learns of reaches it at once instead (fs/kernelcache.py).

Each test first makes the kernel hold the names and attributes it then changes (a stat
through the mount), so with the default 60 s timeout only the daemon's invalidations can
make the change show within the few seconds allowed here.
"""
from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from polyfs.codecs.registry import ZSTD, Filter
from polyfs.model import keys
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.editor import DomainEditor
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

pytestmark = [pytest.mark.mount]

TTL = 1.0
SOON = 20.0  # seconds a change may take to show (polled): a few domain_ttl passes on a loaded
# machine, far below the 60 s timeout


def build(root: Path) -> None:
    """Domain /k.h5: three small 2-D uint16 arrays a, b, c (zstd, 4 chunks each)."""
    cat = Catalog(open_store(str(root), create=True))
    with DomainWriter(cat, "/k.h5") as w:
        for i, name in enumerate("abc"):
            ds = w.add_dataset(w.root, name, T.IntType(2, False, ">"), Shape("simple", (32, 32)), (16, 16),
                               [Filter(ZSTD, (3,))])
            for cy in range(2):
                for cx in range(2):
                    block = np.full((16, 16), i * 100 + cy * 2 + cx, dtype=">u2")
                    stored, _ = w.encode_chunk(ds, block)
                    w.write_chunk(ds, (cy, cx), stored)


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "store"
    build(root)
    return root


def until(cond, within: float = SOON) -> float:
    """Seconds until ``cond()`` held; fails after ``within``."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < within, f"not seen within {within} s"
        time.sleep(0.1)
    return time.monotonic() - t0


def gone(path: Path) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    return False


def cache(paths: list[Path]) -> None:
    """Make the kernel hold these names and attributes (and their directories')."""
    for p in paths:
        os.stat(p)
    for d in {p.parent for p in paths}:
        os.listdir(d)


def test_a_change_another_daemon_makes_shows_within_domain_ttl(store, mount_store):
    import zarr

    a = mount_store(str(store), f"domain_ttl={TTL}")
    b = mount_store(str(store), f"domain_ttl={TTL}")
    n5 = a.path / "n5/k.n5"
    meta = n5 / "a/attributes.json"
    cache([meta, n5 / "b/attributes.json", n5 / "b/0/0", a.path / "hdf5/k.h5"])
    size0 = os.stat(meta).st_size
    h5size0 = os.stat(a.path / "hdf5/k.h5").st_size

    zarr.open_array(str(b.path / "zarr/k.zarr/a"), mode="r+").attrs["note"] = "x" * 200  # attributes grow
    assert not os.system(f"rm -r '{b.path / 'zarr/k.zarr/b'}'")  # an array goes

    until(lambda: gone(n5 / "b"))
    assert gone(n5 / "b/0/0") and "b" not in os.listdir(n5)
    until(lambda: os.stat(meta).st_size != size0)
    assert json.loads(meta.read_bytes())["note"] == "x" * 200  # the size and the bytes agree
    assert os.stat(a.path / "hdf5/k.h5").st_size != h5size0  # every view, not just the one looked at
    assert "Traceback" not in a.log_text() + b.log_text()


def test_a_domain_deleted_in_the_store_disappears_within_domain_ttl(store, mount_store):
    m = mount_store(str(store), f"domain_ttl={TTL}")
    cache([m.path / "n5/k.n5/c/0/0", m.path / "zarr/k.zarr/c/zarr.json", m.path / "hdf5/k.h5"])
    DomainEditor(Catalog(open_store(str(store)))).delete_domain("/k.h5")  # behind the daemon's back
    until(lambda: gone(m.path / "n5/k.n5"))
    for p in ("n5/k.n5/c/0/0", "zarr/k.zarr/c/zarr.json", "zarr/k.zarr", "hdf5/k.h5"):
        with pytest.raises(OSError) as exc:
            os.stat(m.path / p)
        assert exc.value.errno == errno.ENOENT, p


def test_a_change_through_one_view_drops_names_the_kernel_holds_in_the_others(store, mount_store):
    m = mount_store(str(store), "domain_ttl=3600")  # no watcher pass: the write path alone must do it
    n5 = m.path / "n5/k.n5"
    cache([n5 / "c/attributes.json", n5 / "c/1/1", m.path / "tiff/k/c.tif"])
    assert not os.system(f"rm -r '{m.path / 'zarr/k.zarr/c'}'")
    until(lambda: gone(n5 / "c"))
    assert gone(n5 / "c/1/1") and gone(m.path / "tiff/k/c.tif")


def test_a_domain_deleted_through_the_mount_leaves_every_view_at_once(store, mount_store):
    """``rm hdf5/k.h5`` deletes the domain: its names the kernel holds in the other views go
    with it, not when their 60 s run out (the domain no longer routes after the delete)."""
    m = mount_store(str(store), "domain_ttl=3600")  # no watcher pass: the write path alone must do it
    cache([m.path / "n5/k.n5/c/0/0", m.path / "zarr/k.zarr/c/zarr.json", m.path / "tiff/k/a.tif"])
    os.unlink(m.path / "hdf5/k.h5")
    until(lambda: gone(m.path / "zarr/k.zarr"))
    for p in ("n5/k.n5/c/0/0", "zarr/k.zarr/c/zarr.json", "tiff/k/a.tif", "n5/k.n5"):
        assert gone(m.path / p), p
    assert "k.zarr" not in os.listdir(m.path / "zarr")


def test_a_refused_file_is_not_remembered_by_the_kernel(store, mount_store):
    """A file being written changes under the kernel and may be refused at close: its size
    is handed out with no caching time, even in a domain nothing was stored into yet, so
    after the refusal a stat shows the stored file again, not the refused bytes."""
    m = mount_store(str(store), "domain_ttl=3600")
    shard = m.path / "zarr/k.zarr/a/c/0/0"
    size0 = os.stat(shard).st_size
    with pytest.raises(OSError) as exc:
        with open(shard, "wb") as f:
            f.write(b"not a shard" * 7)
            f.flush()
            assert os.fstat(f.fileno()).st_size == 77
            assert os.stat(shard).st_size == 77  # looked up while being written
    assert exc.value.errno == errno.EINVAL
    assert os.stat(shard).st_size == size0
    assert len(shard.read_bytes()) == size0


def test_unchanged_files_read_back_from_the_kernel_after_a_change_elsewhere(store, mount_store):
    """Another domain's change leaves this one's cached names and pages alone, and what is
    read is right either way."""
    other = Catalog(open_store(str(store)))
    with DomainWriter(other, "/other.h5") as w:
        w.add_dataset(w.root, "z", T.IntType(1, False, "<"), Shape("simple", (4,)), (4,), [])
    m = mount_store(str(store), f"domain_ttl={TTL}")
    block = m.path / "n5/k.n5/a/1/0"
    first = block.read_bytes()
    os.stat(m.path / "n5/other.n5/z/attributes.json")
    DomainEditor(Catalog(open_store(str(store)))).delete("/other.h5", "z")
    until(lambda: gone(m.path / "n5/other.n5/z"))
    assert block.read_bytes() == first
    cat = Catalog(open_store(str(store)))
    ds = cat.load("/k.h5").resolve("a")
    assert first.endswith(cat.store.get(keys.chunk_key(ds.id, (0, 1))))  # N5 a/1/0 is chunk (0, 1)


def test_an_idle_domain_overwritten_in_the_store_is_read_anew_at_its_next_use(tmp_path, mount_store):
    """Found by exploratory testing: a domain nobody used for longer than ``domain_ttl`` is not
    re-read by the watcher; ``polyfs import --overwrite`` by another process then left the
    daemon serving the old model at the next read (old values, or EIO for its vanished chunks)."""
    import subprocess
    import sys

    h5py = pytest.importorskip("h5py")
    store = tmp_path / "store"
    srcs = []
    for v in (1, 2):
        src = tmp_path / f"v{v}.h5"
        with h5py.File(src, "w") as f:
            f.create_dataset("x", data=np.full((64, 64), v, dtype="i4"), chunks=(32, 32), compression="gzip")
        srcs.append(src)

    def imp(src, *extra):
        res = subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(store), "--domain", "/d.h5",
                              *extra], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr

    imp(srcs[0])
    m = mount_store(str(store), "entry_timeout=1", f"domain_ttl={TTL}")
    with h5py.File(m.path / "hdf5" / "d.h5", "r") as f:
        assert int(f["x"][0, 0]) == 1
    time.sleep(3 * TTL + 1.5)  # idle: the kernel's entries expire, the watcher stops re-reading it
    imp(srcs[1], "--overwrite")
    time.sleep(3 * TTL + 1.5)
    with h5py.File(m.path / "hdf5" / "d.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][...], np.full((64, 64), 2, dtype="i4"))
