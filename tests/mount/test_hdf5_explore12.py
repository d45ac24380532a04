"""The HDF5 view as users use it, twelfth round (real mount).

What this module pins:

- ``del f["t"]`` through ``hdf5/`` of a committed type a dataset and an attribute still use
  leaves an anonymous committed type (h5dump's ``DATATYPE "/#..."``). The store kept the
  datatype, but a remount read the dataset's type inline without fetching it, so the file
  showed an ordinary (not committed) type: h5py's ``.id.get_type().committed()`` was False and
  ``h5dump -H`` differed from the same session on a local file.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from test_hdf5_tools_explore import check_deep, seeded_store  # noqa: F401

h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.mount

DELETE_TYPE = """
    import sys, h5py, numpy as np
    p = sys.argv[1]
    pair = np.dtype([("x", "<f4"), ("y", "<i2")])
    with h5py.File(p, "w") as f:
        f["t"] = pair
        f.create_dataset("d", data=np.array([(1.5, 2), (3.0, 4)], dtype=pair), dtype=f["t"])
        f["d"].attrs.create("a", data=np.zeros(1, dtype=pair), dtype=f["t"])
    with h5py.File(p, "a") as f:
        del f["t"]
"""


def _python(code: str, *args) -> None:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]


def _committed(path) -> tuple[bool, bool]:
    with h5py.File(path, "r") as f:
        d = f["d"]
        return d.id.get_type().committed(), h5py.h5a.open(d.id, b"a").get_type().committed()


def _header(path) -> str:
    """``h5dump -H`` with the file name and the anonymous type's address (``#1234``) left out."""
    res = subprocess.run(["h5dump", "-H", str(path)], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    return re.sub(r'"(/?)#\d+"', r'"\1#N"', "\n".join(res.stdout.splitlines()[1:]))


def test_an_anonymous_committed_type_survives_a_remount(mount_store, seeded_store, tmp_path):
    local = tmp_path / "local.h5"
    _python(DELETE_TYPE, local)
    m = mount_store(str(seeded_store))
    _python(DELETE_TYPE, m.path / "hdf5" / "t.h5")
    m.stop()
    m = mount_store(str(seeded_store))
    view = m.path / "hdf5" / "t.h5"
    assert _committed(view) == _committed(local) == (True, True)
    with h5py.File(view, "r") as f, h5py.File(local, "r") as g:
        assert list(f) == list(g) == ["d"]
        np.testing.assert_array_equal(f["d"][...], g["d"][...])
    if shutil.which("h5dump"):
        assert '"/#N"' in _header(view)
        assert _header(view) == _header(local)
    if shutil.which("h5diff"):
        res = subprocess.run(["h5diff", str(local), str(view)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
    m.stop()
    check_deep(seeded_store)
