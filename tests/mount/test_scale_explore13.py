"""Real tools over a mount, exploratory round 13: large hierarchies.

Many domains in nested folders (plus an empty HSDS folder), and a domain with 30 levels of
groups. ``ls``, ``find -name``, ``os.walk`` and ``du`` see every domain once in every view
and end; a domain made through the mount shows at once in the other views' listings of its
folder (each view's directory tree is built once per version of the domain list and
rebuilt when it changes: tests/fs/test_scale_explore13_fs.py counts that work).
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from support import quiet_local_mount as _mounted

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")

DEPTH = 30
DOMAINS = [f"/proj/f{i}/run{i % 2}/d{j}.h5" for i in range(6) for j in range(5)]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    base = tmp_path_factory.mktemp("src")
    small, deep = base / "small.h5", base / "deep.h5"
    with h5py.File(small, "w") as f:
        f.create_dataset("img", data=np.arange(64, dtype="u2").reshape(8, 8), chunks=(4, 4))
    with h5py.File(deep, "w") as f:
        f.create_group("/".join(f"l{i}" for i in range(DEPTH))).create_dataset("leaf", data=np.arange(10))
    return small, deep


@pytest.fixture
def mounted(mount_store, tmp_path, sources):
    store, m = _mounted(mount_store, tmp_path)
    small, deep = sources
    for d in DOMAINS:
        import_source(str(small), str(store), domain=d, progress=False)
    import_source(str(deep), str(store), domain="/proj/deep.h5", progress=False)
    return store, m


def _domain_dirs(top: str, suffix: str) -> set[str]:
    """Every domain leaf below ``top`` found by os.walk (not descending into domains)."""
    found = set()
    for here, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            if name.endswith(suffix):
                found.add(os.path.relpath(os.path.join(here, name), top))
        dirs[:] = [d for d in dirs if not d.endswith(suffix)]
    return found


def test_every_domain_shows_once_in_every_view_and_walks_end(mounted):
    _, m = mounted
    expect = {d.lstrip("/") for d in DOMAINS} | {"proj/deep.h5"}
    assert _domain_dirs(str(m.path / "hdf5"), ".h5") == expect
    assert _domain_dirs(str(m.path / "zarr"), ".zarr") == {e[:-3] + ".zarr" for e in expect}
    assert _domain_dirs(str(m.path / "n5"), ".n5") == {e[:-3] + ".n5" for e in expect}
    assert sorted(os.listdir(m.path / "hdf5/proj/f3/run1")) == [f"d{j}.h5" for j in range(5)]
    assert sorted(os.listdir(m.path / "zarr/proj")) == ["deep.zarr"] + [f"f{i}" for i in range(6)]
    out = subprocess.run(["find", str(m.path / "zarr"), "-name", "leaf"], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == [str(m.path / "zarr/proj/deep.zarr" / "/".join(f"l{i}" for i in range(DEPTH)) / "leaf")]
    n = sum(len(f) for _, _, f in os.walk(m.path / "n5"))
    assert n > len(DOMAINS)  # every walk ends (no cycle), and files are there
    du = subprocess.run(["du", "-sk", str(m.path / "hdf5")], capture_output=True, text=True, timeout=120)
    assert du.returncode == 0 and int(du.stdout.split()[0]) > 0
    with h5py.File(m.path / "hdf5/proj/deep.h5", "r") as f:
        assert f["/".join(f"l{i}" for i in range(DEPTH)) + "/leaf"][-1] == 9


def test_a_domain_made_through_the_mount_shows_in_the_other_views_folder(mounted):
    _, m = mounted
    assert sorted(os.listdir(m.path / "n5/proj/f2/run0")) == [f"d{j}.n5" for j in range(5)]  # tree built
    os.mkdir(m.path / "zarr/proj/f2/run0/new.zarr")
    assert "new.n5" in os.listdir(m.path / "n5/proj/f2/run0")
    assert "new.h5" in os.listdir(m.path / "hdf5/proj/f2/run0")
    assert sorted(os.listdir(m.path / "zarr/proj/f2")) == ["run0"]
    os.mkdir(m.path / "hdf5/proj/f2/other")  # an HSDS folder: a directory in every view
    assert "other" in os.listdir(m.path / "n5/proj/f2")
