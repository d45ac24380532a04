"""HDF5 file drivers and unusual write patterns through ``hdf5/`` (real mount), round 20.

What this module pins:

- h5py ``driver="family"`` and ``driver="split"`` into the mount: every member file is
  refused at its close and none is left in ``hdf5/``; the first member (``x0.h5``,
  ``x-m.h5``) now with ``EOPNOTSUPP`` (h5py's close error says "Operation not supported")
  and a log line naming the driver and the way out, where HDF5's "truncated file" or
  "family driver should be used" (``EINVAL``) was all the user got. The store is unchanged.
- What already worked, compared with the same on local disk: ``driver="core"`` with
  ``backing_store=True`` opening the view file ``r+`` (the whole file written at close;
  only the changed group is stored), a Python file object (``io.BufferedRandom`` over
  ``r+b``), ``dd conv=notrunc`` of a locally edited copy over the view file, and ``"w-"``
  on an existing name (``EEXIST``).
"""
from __future__ import annotations

import io
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from test_hdf5_tools_explore import check_deep, seeded_store  # noqa: F401

h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.mount

MULTI = """
    import sys, h5py, numpy as np
    pattern, driver = sys.argv[1], sys.argv[2]
    kw = {"memb_size": 1024} if driver == "family" else {}
    try:
        with h5py.File(pattern, "w", driver=driver, **kw) as f:
            f["d"] = np.arange(1000)
    except Exception as exc:
        print("ERROR", exc)
"""


def _python(code: str, *args) -> str:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def _snapshot(store) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("driver,pattern,first", [("family", "x%d.h5", "x0.h5"), ("split", "x", "x-m.h5")])
def test_family_and_split_files_are_refused_naming_the_driver(mount_store, seeded_store, driver, pattern, first):
    before = _snapshot(seeded_store)
    m = mount_store(str(seeded_store))
    out = _python(MULTI, m.path / "hdf5" / pattern, driver)
    assert out.startswith("ERROR"), out
    assert sorted(p.name for p in (m.path / "hdf5").iterdir()) == ["seed.h5"]
    name = "family" if driver == "family" else "split/multi"
    log = m.log_text()
    line = next(ln for ln in log.splitlines() if f"hdf5/{first}: written by HDF5's {name} driver" in ln)
    assert "(ENOTSUP)" in line or "(EOPNOTSUPP)" in line, line
    if driver == "family":
        assert "Operation not supported" in out  # x0.h5 is the last member HDF5 closes
    m.stop()
    assert _snapshot(seeded_store) == before
    check_deep(seeded_store)


CORE_EDIT = """
    import sys, h5py, numpy as np
    with h5py.File(sys.argv[1], "r+", driver="core", backing_store=True) as f:
        f["x"][2:5] = -1
        f.attrs["via"] = "core"
        f.create_dataset("n", data=np.arange(6, dtype="f4").reshape(2, 3), chunks=(1, 3), compression="gzip")
"""


def _facts(path) -> tuple:
    with h5py.File(path, "r") as f:
        return (sorted(f), f["x"][...].tolist(), {k: str(v) for k, v in f.attrs.items()},
                f["n"][...].tolist() if "n" in f else None)


def _header(path) -> list[str]:
    """``h5dump -H`` without the file name line (storage sizes and filters left out)."""
    res = subprocess.run(["h5dump", "-H", str(path)], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()[1:]


def test_core_driver_fileobj_and_dd_write_back_like_a_local_file(mount_store, seeded_store, tmp_path):
    local = tmp_path / "local.h5"
    m = mount_store(str(seeded_store))
    view = m.path / "hdf5" / "seed.h5"
    shutil.copy(view, local)
    _python(CORE_EDIT, local)
    _python(CORE_EDIT, view)
    assert _facts(view) == _facts(local)
    if shutil.which("h5dump"):
        assert _header(view) == _header(local)
    for path in (local, view):  # a Python file object over the file, buffered
        with io.BufferedRandom(io.FileIO(path, "r+"), buffer_size=1 << 16) as fo, h5py.File(fo, "r+") as f:
            f["x"][0] = 42
            f.attrs["fo"] = 1
    assert _facts(view) == _facts(local)
    edited = tmp_path / "edited.h5"
    shutil.copy(view, edited)
    with h5py.File(edited, "r+") as f:
        f["x"][9] = 99
        del f["n"]
    res = subprocess.run(["dd", f"if={edited}", f"of={view}", "conv=notrunc", "status=none"], capture_output=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    with pytest.raises(FileExistsError):
        h5py.File(view, "w-")
    m.stop()
    m = mount_store(str(seeded_store))
    got = _facts(m.path / "hdf5" / "seed.h5")
    assert got[0] == ["x"] and got[1][0] == 42 and got[1][9] == 99 and got[2]["via"] == "core"
    m.stop()
    check_deep(seeded_store)


@pytest.mark.skipif(shutil.which("h5repart") is None, reason="h5repart not installed")
def test_h5repart_family_to_sec2_into_the_mount(mount_store, seeded_store, tmp_path):
    """The way out the refusal names: ``h5repart -family_to_sec2 x%d.h5 hdf5/x.h5`` writes the
    joined file (still naming the family driver), closes it, then reopens it to mark it plain.
    The first close was refused, so the reopen found no file; h5repart exits 0 all the same."""
    with h5py.File(tmp_path / "x%d.h5", "w", driver="family", memb_size=1024) as f:
        f["d"] = np.arange(1000)
    m = mount_store(str(seeded_store))
    res = subprocess.run(["h5repart", "-family_to_sec2", str(tmp_path / "x%d.h5"), str(m.path / "hdf5" / "x.h5")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    m.stop()
    m = mount_store(str(seeded_store))
    with h5py.File(m.path / "hdf5" / "x.h5", "r") as f:
        np.testing.assert_array_equal(f["d"][...], np.arange(1000))
    with h5py.File(m.path / "hdf5" / "x.h5", "a") as f:  # an ordinary file since: default-driver edits
        f["d"][0] = 5
    m.stop()
    check_deep(seeded_store)
