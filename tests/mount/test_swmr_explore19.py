"""HDF5 files with library features beyond the defaults, through a real mount (round 19).

What this module pins:

- SWMR as its users run it: a writer opens ``hdf5/x.h5`` ``"a"`` with ``libver="latest"``,
  sets ``f.swmr_mode = True``, then starts a reader process that keeps the file open
  (``h5py.File(p, "r", swmr=True)``) and polls ``d.refresh()`` after each ``flush()``. The
  reader saw the first step, then every read failed with "filter returned failure during
  read": its handle on the file being written had the length the file had when it opened,
  and the chunks the writer appended past it read as zeros. It follows every step, as on a
  local disk, and ``zarr/`` and ``n5/`` have the data after the writer closes.
- ``create_dataset(..., external=[("raw.bin", 0, size)])`` in a new file: the daemon looked
  for ``raw.bin`` itself (its own working directory: EINVAL, "unable to open external raw
  data file"; an absolute name: it read any file the writer named). Refused at close with
  EOPNOTSUPP and one log line naming the dataset and its raw files; nothing is stored.
"""
from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

from test_hdf5_tools_explore import check_deep, seeded_store, snapshot  # noqa: F401

pytestmark = pytest.mark.mount

READER = """
import h5py, sys
f = h5py.File(sys.argv[1], "r", libver="latest", swmr=True)
d, t = f["d"], f["t"]
for line in sys.stdin:
    try:
        d.refresh(); t.refresh()
        print(d.shape[0], d[-1], t[-1], flush=True)
    except Exception as exc:
        print("ERR", " ".join(str(exc).split()), flush=True)
f.close()
"""

SWMR_FOLLOW = """
    import subprocess, sys, h5py, numpy as np
    path, reader = sys.argv[1], sys.argv[2]
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("d", shape=(0,), maxshape=(None,), chunks=(4,), dtype="f8")
        f.create_dataset("t", shape=(0,), maxshape=(None,), chunks=(8,), dtype="i8")
    with h5py.File(path, "a", libver="latest") as f:
        f.swmr_mode = True  # then the reader starts, as SWMR readers do
        p = subprocess.Popen([sys.executable, "-c", reader, path], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        d, t = f["d"], f["t"]
        for step in range(5):
            n = d.shape[0]
            d.resize((n + 3,)); d[n:] = step + 0.5
            t.resize((step + 1,)); t[step] = step
            d.flush(); t.flush()
            p.stdin.write("next\\n"); p.stdin.flush()
            print(p.stdout.readline().strip())
        p.stdin.close(); p.wait()
"""


def _python(code: str, *args) -> str:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         check=False, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_an_swmr_reader_holding_the_file_open_follows_every_flushed_append(mount_store, seeded_store, tmp_path):
    m = mount_store(str(seeded_store))
    want = ["3 0.5 0", "6 1.5 1", "9 2.5 2", "12 3.5 3", "15 4.5 4"]
    local = [s for s in _python(SWMR_FOLLOW, tmp_path / "sw.h5", READER).split("\n") if s]
    assert local == want  # what a local disk gives
    seen = [s for s in _python(SWMR_FOLLOW, m.path / "hdf5" / "sw.h5", READER).split("\n") if s]
    assert seen == want
    expect = np.repeat(np.arange(5) + 0.5, 3)
    with h5py.File(m.path / "hdf5" / "sw.h5", "r") as f:
        np.testing.assert_array_equal(f["d"][:], expect)
        np.testing.assert_array_equal(f["t"][:], np.arange(5))
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "sw.zarr" / "d"), mode="r")[:], expect)
    z5py = pytest.importorskip("z5py")
    n5 = z5py.File(str(m.path / "n5" / "sw.n5"), "r")
    np.testing.assert_array_equal(n5["d"][:], expect)
    np.testing.assert_array_equal(n5["t"][:], np.arange(5))
    m.stop()
    check_deep(seeded_store)


EXTERNAL = """
    import os
    os.chdir(sys.argv[2])  # HDF5 writes a relative raw file beside the writer's cwd
    f = h5py.File(path, "w")
    f.create_dataset("inside", data=np.arange(4))
    f.create_dataset("e", shape=(10,), dtype="<i4", external=[("raw.bin", 0, 40)])
    f["e"][:] = np.arange(10, dtype="<i4")
    try:
        f.close()
    except RuntimeError as exc:
        print(exc)
"""


def test_a_new_file_with_external_raw_storage_is_refused_at_close(mount_store, seeded_store, tmp_path):
    m = mount_store(str(seeded_store))
    before = snapshot(seeded_store)
    prog = "import h5py, numpy as np, sys\npath = sys.argv[1]\n" + textwrap.dedent(EXTERNAL)
    res = subprocess.run([sys.executable, "-c", prog, str(m.path / "hdf5" / "ext.h5"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"errno = {errno.EOPNOTSUPP}" in res.stdout, res.stdout + res.stderr
    assert (tmp_path / "raw.bin").stat().st_size == 40  # HDF5 wrote it beside the writer
    lines = [ln for ln in m.log_text().splitlines() if "ext.h5" in ln and "dataset /e" in ln]
    assert len(lines) == 1 and "external raw files" in lines[0] and "raw.bin" in lines[0], lines
    assert not (m.path / "hdf5" / "ext.h5").exists()
    m.stop()
    assert snapshot(seeded_store) == before
