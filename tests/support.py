"""Test helpers shared by the tiers: build a view context, and materialize
virtual nodes into real files so independent readers (h5py, zarr-python,
tensorstore, tifffile, ...) can be pointed at them without a FUSE mount."""
from __future__ import annotations

import os
from pathlib import Path

from polyfs.model.catalog import Catalog
from polyfs.reader import Reader
from polyfs.store.base import Store
from polyfs.views.base import DirNode, FileNode, Node, ViewContext, ViewOptions


def make_ctx(store: Store, **options) -> tuple[ViewContext, Reader]:
    ctx = ViewContext(Catalog(store), ViewOptions(**options))
    return ctx, Reader(ctx)


def read_node(node: FileNode, reader: Reader, chunk: int = 1 << 20) -> bytes:
    """All bytes of a virtual file, read in ``chunk``-sized requests like the kernel would."""
    vf = node.vfile()
    out = bytearray()
    for off in range(0, vf.size, chunk):
        out += reader.read(vf, off, chunk)
    assert len(out) == vf.size == node.size()
    return bytes(out)


def materialize(node: Node, dest: Path, reader: Reader) -> Path:
    """Write a virtual node (file or directory tree) to ``dest``."""
    dest = Path(dest)
    if isinstance(node, FileNode):
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(read_node(node, reader))
    else:
        assert isinstance(node, DirNode)
        dest.mkdir(parents=True, exist_ok=True)
        for name, child in node.entries().items():
            materialize(child, dest / name, reader)
    return dest


def drop_page_cache(top: Path | str) -> None:
    """Have the kernel forget the cached pages of every file below ``top``: the next
    reads of them go to the disk (or, through a mount, to the daemon)."""
    for dirpath, _, files in os.walk(top):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def deep_check(store) -> None:
    """``polyfs check --deep`` of a store, as a user runs it: exit 0 or the test fails with its output."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "polyfs", "check", str(store), "--deep"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def quiet_local_mount(mount_store, tmp_path: Path):
    """A new local store and its mount (``mount_store`` fixture); the Zarr tools' warnings
    about v3 extension types are silenced. Returns (store directory, mount)."""
    import warnings

    store = tmp_path / "store"
    store.mkdir()
    warnings.filterwarnings("ignore")
    return store, mount_store(str(store))


def seeded_store(tmp_path: Path, name: str = "exp.h5") -> Path:
    """A store holding domain ``/<name>``, imported from an h5py file with one 32x32 uint16
    dataset ``seed`` in 16x16 chunks: a domain the TIFF tests write new files into."""
    import h5py
    import numpy as np

    from polyfs.importers import import_source

    src = tmp_path / name
    with h5py.File(src, "w") as f:
        f.create_dataset("seed", data=np.arange(32 * 32, dtype="u2").reshape(32, 32), chunks=(16, 16))
    out = tmp_path / "store"
    assert import_source(src, str(out), progress=False) == "/" + name
    return out


def pytables_nodes(path) -> dict:
    """Every PyTables node of a file: (class, values, user and PyTables attributes); PyTables
    is imported here, so only tests that need it (and skip without it) call this."""
    import warnings

    import tables

    out = {}
    with warnings.catch_warnings(), tables.open_file(str(path), "r") as f:
        warnings.simplefilter("ignore")
        for n in f.walk_nodes("/"):
            attrs = {k: n._v_attrs[k] for k in n._v_attrs._f_list("all")}
            data = n.read() if isinstance(n, tables.Leaf) else None
            out[n._v_pathname] = (type(n).__name__, data, attrs)
    return out


def same_nested(a, b) -> bool:
    """Equality of nested dicts, sequences and numpy arrays (arrays compared by value)."""
    import numpy as np

    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_nested(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same_nested(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return bool(a == b)


def assert_same_pytables_nodes(expected, got) -> None:
    """Two HDF5 files hold the same PyTables nodes, values and attributes."""
    want, have = pytables_nodes(expected), pytables_nodes(got)
    assert sorted(want) == sorted(have)
    bad = [k for k in want if not same_nested(want[k], have[k])]
    assert not bad, bad


def fill_time_file(path: Path) -> None:
    """An h5py file of three chunked int32 datasets of 16 with fill value 7, one per HDF5 fill
    time (``never``, ``alloc``, ``ifset``), each with its first chunk written."""
    import h5py
    import numpy as np
    from h5py import h5d

    with h5py.File(path, "w") as f:
        for name, when in (("never", h5d.FILL_TIME_NEVER), ("alloc", h5d.FILL_TIME_ALLOC),
                           ("ifset", h5d.FILL_TIME_IFSET)):
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((4,))
            dcpl.set_fill_time(when)
            dcpl.set_fill_value(np.array([7], "<i4"))
            h5d.create(f.id, name.encode(), h5py.h5t.STD_I32LE, h5py.h5s.create_simple((16,)), dcpl=dcpl)
            f[name][:4] = np.arange(4)
