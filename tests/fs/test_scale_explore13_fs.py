"""Large hierarchies, kernel-free: listing the directories above thousands of domains costs
what each directory holds, not (directories x domains); a domain is found for a path by
dictionary lookups; a write's commit finds the inodes of its domain through a path index, not
a pass over every inode the mount knows (tens of thousands after ``ls -lR``). Work is counted
(calls naming a domain's place in a view, passes over the inode table), never timed."""
from __future__ import annotations

import json

import pytest

from polyfs.model import keys
from polyfs.model.catalog import Catalog
from polyfs.views import root as root_mod
from polyfs.views.root import DomainList, view_parts

from writeharness import FS

N_FOLDERS = 40
PER_FOLDER = 25  # 1000 domains


def _domains() -> list[str]:
    return [f"/proj/f{i:02d}/run{i % 3}/d{j:02d}.h5" for i in range(N_FOLDERS) for j in range(PER_FOLDER)]


@pytest.fixture
def fs():
    f = FS()
    for path in _domains():  # a domain is a .domain.json naming a root group (only listed here)
        f.raw_store.put(keys.domain_key(path), json.dumps({"root": "g-00000000-00000000-0000-000000-000000"}).encode())
    f.raw_store.put(keys.domain_key("/proj/empty/"), json.dumps({"owner": "x"}).encode())  # an HSDS folder
    yield f
    f.close()


def _count_view_parts(monkeypatch) -> list[int]:
    calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return view_parts(*args, **kwargs)

    monkeypatch.setattr(root_mod, "view_parts", counted)
    return calls


def test_listing_every_folder_goes_over_the_domains_once_per_view(fs, monkeypatch):
    calls = _count_view_parts(monkeypatch)
    folders = sorted({p.rsplit("/", 2)[0] for p in _domains()})
    assert fs.ls("zarr/proj") == sorted([p.split("/")[2] for p in folders] + ["empty"])
    for folder in folders:
        run = f"run{int(folder.split('/')[2][1:]) % 3}"
        assert fs.ls(f"zarr{folder}") == [run]
        inner = f"zarr{folder}/{run}"
        assert fs.ls(inner) == [f"d{j:02d}.zarr" for j in range(PER_FOLDER)]
        assert fs.ls(inner.replace("zarr/", "n5/", 1)) == [f"d{j:02d}.n5" for j in range(PER_FOLDER)]
    # linear: once per view listed and once per view for the path -> domain index (5 views);
    # the old code went over all 1000 domains per directory listed (~160 listings: ~160000)
    assert calls[0] <= 10 * len(_domains()), calls[0]


def test_no_domain_is_loaded_to_list_the_folders_above_it(fs, monkeypatch):
    loads = []
    orig = Catalog.load
    monkeypatch.setattr(Catalog, "load", lambda self, *a, **k: loads.append(a) or orig(self, *a, **k))
    assert len(fs.ls("zarr/proj/f07/run1")) == PER_FOLDER
    fs.stat("zarr/proj/f07/run1/d03.zarr")  # a directory's stat needs no domain either
    assert loads == []


def _tree(paths, folders=()):
    class Cat:
        def list_tree(self):
            return sorted(paths), sorted(folders)

    return DomainList(Cat(), ttl=1e9)


def test_domain_at_finds_the_leaf_a_path_starts_with():
    dl = _tree(["/a/b.h5", "/a/c/d.nc", "/top.h5"], ["/a/empty/"])
    assert dl.domain_at(".zarr", (), ["a", "b.zarr", "g", "x", "zarr.json"]) == ("/a/b.h5", 2)
    assert dl.domain_at(".h5", (".nc",), ["a", "c", "d.nc"]) == ("/a/c/d.nc", 3)
    assert dl.domain_at(".zarr", (), ["top.zarr"]) == ("/top.h5", 1)
    assert dl.domain_at(".zarr", (), ["a", "empty", "x.zarr"]) is None
    assert dl.domain_at(".zarr", (), ["a"]) is None
    assert dl.domain_at(".zarr", (), []) is None


def test_the_view_tree_is_built_once_per_version_of_the_list(monkeypatch):
    calls = _count_view_parts(monkeypatch)
    paths = [f"/x/y{i}.h5" for i in range(500)]
    dl = _tree(paths)
    for _ in range(20):
        dl.domain_at(".zarr", (), ["x", "y7.zarr"])
        dl.tree(".zarr", ())
    assert calls[0] == len(paths)


def test_a_leaf_wins_over_a_directory_of_its_name():
    # /a (a domain: tiff-like view name "a") and /a/b.h5 (directory "a") in a view without suffix
    dl = _tree(["/a", "/a/b.h5"])
    _, tree = dl.tree("", ())
    assert tree[()] == {"a": "/a"}
    _, tree = dl.tree(".zarr", ())
    assert tree[()] == {"a": None, "a.zarr": "/a"}
    assert tree[("a",)] == {"b.zarr": "/a/b.h5"}


# -- the kernel's caches dropped at a commit: entries found by path, not by a scan of all ---------
def _scan(table, prefixes):
    """What entries_below returned before the index: a pass over every known inode."""
    exact = set(prefixes)
    inside = tuple(p + "/" for p in exact)
    return {e.ino for e in table.entries() if e.path in exact or e.path.startswith(inside)}


def test_entries_below_match_a_scan_through_lookups_forgets_renames_and_unlinks():
    import random

    from polyfs.fs.inodes import InodeTable
    from polyfs.fs.kernelcache import entries_below
    from polyfs.views.base import DirNode

    rng = random.Random(13)
    table = InodeTable(DirNode("", {}))
    names = ["zarr", "zarr/a.zarr", "zarr/a.zarr/g", "zarr/a.zarr/g/x", "zarr/a.zarrx", "zarr/b.zarr/c/0",
             "n5/a.n5/g/x/0/0", "n5/a.n5", "hdf5/a.h5", "tiff/a/x.tif", "zarr/a.zarr/g/y/zarr.json"]
    for _ in range(3000):
        op = rng.random()
        path = rng.choice(names)
        if op < 0.5:
            table.remember(path, None)
        elif op < 0.75:
            e = table.peek(path)
            if e is not None:
                table.forget(e.ino, rng.choice([1, e.lookups]))
        elif op < 0.9:
            table.rename(path, rng.choice(names), 0.0)
        else:
            table.detach(path)
        prefixes = rng.sample(["zarr/a.zarr", "n5/a.n5", "zarr", "", "hdf5/a.h5", "tiff/a", "zarr/b.zarr/c"], 2)
        assert {e.ino for e in entries_below(table, prefixes)} == _scan(table, prefixes)


def test_a_commit_does_not_go_over_every_inode_the_mount_knows(fs, monkeypatch):
    from polyfs.fs.inodes import InodeTable

    for i in range(PER_FOLDER):  # thousands of names the kernel holds in other domains' folders
        fs.ls(f"zarr/proj/f{i:02d}/run{i % 3}")
    scans = [0]
    orig = InodeTable.entries
    monkeypatch.setattr(InodeTable, "entries", lambda self: scans.__setitem__(0, scans[0] + 1) or orig(self))
    fs.mkdir("zarr/made.zarr")  # a write: its domain's entries are pushed to the kernel
    fs.write_json("zarr/made.zarr/zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {"a": 1}})
    assert fs.read_json("zarr/made.zarr/zarr.json")["attributes"] == {"a": 1}
    assert scans[0] == 0
