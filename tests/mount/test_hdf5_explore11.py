"""The HDF5 view as users use it, eleventh round (real mount): HDF5 tools writing into ``hdf5/``.

What this module pins (each compared with the same operations on a local file):

- h5py ``"w"`` then ``"a"`` sessions, ``h5repack`` and ``h5copy`` into ``hdf5/``: ``list(f)`` of a
  group that tracks no creation order (h5py's default, h5repack's and h5copy's output) is in
  name order, as on disk; it came back in creation order because the view made every group
  track it.
- ``del f["t"]`` of a committed type a dataset still uses left the dataset's stored type naming
  a deleted datatype object; it is kept (HDF5 keeps it as an anonymous committed type).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from test_hdf5_tools_explore import check_deep, seeded_store  # noqa: F401

h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.mount

SESSIONS = """
    import sys, h5py, numpy as np
    p = sys.argv[1]
    with h5py.File(p, "w") as f:
        f["b"] = np.arange(3)
        f["a"] = np.arange(2.0)
        g = f.create_group("g")
        for n in ["z", "c", "m"]:
            g[n] = np.arange(1)
        t = f.create_group("tracked", track_order=True)
        for n in ["q", "b", "k"]:
            t[n] = np.arange(1)
        d = f.create_dataset("grow", shape=(0, 2), maxshape=(None, 2), chunks=(4, 2), dtype="i4")
    for k in range(3):
        with h5py.File(p, "a") as f:
            d = f["grow"]
            n = d.shape[0]
            d.resize(n + 3, axis=0)
            d[n:] = k
            f.require_dataset("req", shape=(3,), dtype="f4")[k] = k
            f[f"s{k}"] = h5py.SoftLink("/a")
    with h5py.File(p, "a") as f:
        del f["g/c"]
        f["g/aa"] = np.arange(2)
        f.move("b", "bb")
        f["tracked/a"] = np.arange(1)
"""


def _python(code: str, *args) -> None:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]


def _run(*cmd) -> None:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, (cmd, res.stdout[-2000:], res.stderr[-2000:])


def _listing(path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    with h5py.File(path, "r") as f:
        def group(name: str) -> None:  # None: visit goes on
            if isinstance(f[name], h5py.Group):
                out[name] = list(f[name])
        f.visit(group)
        out["/"] = list(f)
    return out


def test_h5py_sessions_h5repack_and_h5copy_list_links_as_local_files(mount_store, seeded_store, tmp_path):
    if not (shutil.which("h5repack") and shutil.which("h5copy") and shutil.which("h5diff")):
        pytest.skip("needs h5repack, h5copy and h5diff")
    m = mount_store(str(seeded_store))
    h5 = m.path / "hdf5"
    local = tmp_path / "local.h5"
    _python(SESSIONS, local)
    _python(SESSIONS, h5 / "s.h5")
    assert _listing(h5 / "s.h5") == _listing(local)
    assert _listing(local)["/"] == ["a", "bb", "g", "grow", "req", "s0", "s1", "s2", "tracked"]
    assert _listing(local)["tracked"] == ["q", "b", "k", "a"]
    _run("h5diff", local, h5 / "s.h5")

    _run("h5repack", "-l", "grow:CHUNK=2x2", "-f", "SHUF", "-f", "GZIP=3", h5 / "s.h5", h5 / "r.h5")
    _run("h5repack", "-l", "grow:CHUNK=2x2", "-f", "SHUF", "-f", "GZIP=3", local, tmp_path / "r.h5")
    assert _listing(h5 / "r.h5") == _listing(tmp_path / "r.h5")
    _run("h5diff", tmp_path / "r.h5", h5 / "r.h5")

    for target in (h5 / "r.h5", tmp_path / "r.h5"):  # objects between two files of the view
        _run("h5copy", "-i", h5 / "s.h5", "-o", target, "-s", "/g", "-d", "/copies/g2", "-p")
        _run("h5copy", "-i", local, "-o", target, "-s", "/tracked", "-d", "/copies/t2", "-p")
    assert _listing(h5 / "r.h5") == _listing(tmp_path / "r.h5")
    _run("h5diff", tmp_path / "r.h5", h5 / "r.h5")
    m.stop()
    check_deep(seeded_store)


DELETE_TYPE = """
    import sys, h5py, numpy as np
    p = sys.argv[1]
    pair = np.dtype([("x", "<f4"), ("y", "<i2")])
    with h5py.File(p, "w") as f:
        f["t"] = pair
        f.create_dataset("d", data=np.array([(1.5, 2), (3.0, 4)], dtype=pair), dtype=f["t"])
    with h5py.File(p, "a") as f:
        del f["t"]
    with h5py.File(p, "a") as f:
        f["d"][1] = (5.0, 6)
"""


def test_deleting_a_committed_type_in_use_keeps_it_in_the_store(mount_store, seeded_store, tmp_path):
    from polyfs.model import keys
    from polyfs.model import types as T
    from polyfs.store import open_store
    from support import make_ctx

    m = mount_store(str(seeded_store))
    local = tmp_path / "local.h5"
    _python(DELETE_TYPE, local)
    _python(DELETE_TYPE, m.path / "hdf5" / "t.h5")
    with h5py.File(m.path / "hdf5" / "t.h5", "r") as f, h5py.File(local, "r") as g:
        assert list(f) == list(g) == ["d"]
        np.testing.assert_array_equal(f["d"][...], g["d"][...])
    if shutil.which("h5diff"):
        _run("h5diff", local, m.path / "hdf5" / "t.h5")
    m.stop()
    ctx, _ = make_ctx(open_store(f"file://{seeded_store}"))
    d = ctx.catalog.load("/t.h5").resolve("/d")
    assert isinstance(d.type, T.Committed)
    assert ctx.store.get(keys.object_key(d.type.id)) is not None
    check_deep(seeded_store)
