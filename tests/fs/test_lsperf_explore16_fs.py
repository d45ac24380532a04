"""Listing many domains, kernel-free: ``ls -l hdf5/`` plans each domain's file for its size
but renders none of it (the size is the plan's), that size is exactly the bytes a reader
gets, and the store operations a listing does are bounded per dataset (counted, never timed)."""
from __future__ import annotations

import threading

import h5py
import numpy as np
import pytest

from polyfs.formats.hdf5.render import HDF5File
from polyfs.store import open_store

from writeharness import FS

N_DOMAINS = 3
N_DATASETS = 12


class CountingStore:
    """Delegates to a store and counts every call by method name."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def counted(*args, **kwargs):
            with self._lock:
                self.calls[name] = self.calls.get(name, 0) + 1
            return attr(*args, **kwargs)

        return counted

    def total(self) -> int:
        return sum(self.calls.values())


def _h5(path, i: int) -> None:
    with h5py.File(path, "w") as f:
        for j in range(N_DATASETS):
            f.create_dataset(f"v{j:02d}", data=np.arange(64, dtype="f4").reshape(8, 8) + i * 100 + j,
                             chunks=(4, 8), compression="gzip" if j % 2 else None)
        f.create_dataset("s", data=np.float64(i))
        f.attrs["title"] = f"domain {i}"


@pytest.fixture(scope="module")
def store_url(tmp_path_factory):
    from polyfs.cli import main as cli

    tmp = tmp_path_factory.mktemp("lsperf")
    store = tmp / "store"
    for i in range(N_DOMAINS):
        src = tmp / f"d{i}.h5"
        _h5(src, i)
        assert cli(["import", str(src), str(store), "--no-progress"]) in (0, None)
    return f"file://{store}"


def _files(fs: FS, view: str) -> list[str]:
    out = []
    for name in fs.ls(view):
        path = f"{view}/{name}"
        out += [f"{path}/{p}" for p in fs.walk_files(path)] if fs.is_dir(path) else [path]
    return out


@pytest.mark.parametrize("view", ["hdf5", "zarr", "n5", "tiff"])
def test_every_listed_size_is_the_bytes_read(store_url, view):
    fs = FS(store_url, read_only=True)
    try:
        files = _files(fs, view)
        assert files
        sizes = {p: fs.stat(p).st_size for p in files}
        for p in files:
            assert len(fs.read_file(p)) == sizes[p], p
    finally:
        fs.close()


def test_ls_l_of_the_hdf5_view_renders_no_file(store_url, monkeypatch):
    renders = []
    orig = HDF5File.vfile.fget
    monkeypatch.setattr(HDF5File, "vfile", property(lambda self: renders.append(1) or orig(self)))
    fs = FS(store_url, read_only=True)
    try:
        names = fs.ls("hdf5")
        assert len(names) == N_DOMAINS
        sizes = [fs.stat(f"hdf5/{n}").st_size for n in names]
        assert renders == []  # the size is the plan's
        data = fs.read_file(f"hdf5/{names[0]}")
        assert len(data) == sizes[0] and renders
        with h5py.File(__import__("io").BytesIO(data), "r") as f:
            assert f["v03"][...].tolist() == (np.arange(64, dtype="f4").reshape(8, 8) + 3).tolist()
    finally:
        fs.close()


def test_the_planned_size_is_the_rendered_size(store_url):
    from polyfs.formats.hdf5.render import plan_domain
    from polyfs.model.catalog import Catalog
    from polyfs.views.base import ViewContext

    cat = Catalog(open_store(store_url))
    paths = cat.list_tree()[0]
    assert len(paths) == N_DOMAINS
    for path in paths:
        _, hf = plan_domain(cat.load(path), ViewContext(catalog=cat))
        assert not hf.rendered
        planned = hf.size
        assert hf.vfile.size == planned and hf.rendered


def test_store_operations_of_a_listing_are_bounded(store_url):
    counting = CountingStore(open_store(store_url))
    fs = FS(store_url, read_only=True, store=counting)
    try:
        fs.ls("")
        before = counting.total()
        names = fs.ls("hdf5")
        for n in names:
            fs.stat(f"hdf5/{n}")
        objects = N_DOMAINS * (N_DATASETS + 2)  # datasets, the scalar, the root group
        used = counting.total() - before
        # per object: its JSON (get + tagged get), its chunk directory token, a 16-byte sniff per
        # filtered dataset; per domain a bulk chunk listing (not one listing per dataset)
        assert used <= 4 * objects + 10 * N_DOMAINS, counting.calls  # 166 when written
        again = counting.total()
        fs.ls("hdf5")  # listed again: nothing planned again
        for n in names:
            fs.stat(f"hdf5/{n}")
        assert counting.total() - again <= 2 * N_DOMAINS + 5, counting.calls
    finally:
        fs.close()
