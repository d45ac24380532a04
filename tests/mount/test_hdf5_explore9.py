"""The HDF5 view as users use it, ninth round (real mount).

What this module pins:

- h5py ``"r+"`` on the ``hdf5/`` file of arrays zarr-python made through ``zarr/`` (zstd, its
  default codec), with the filters found on ``HDF5_PLUGIN_PATH`` as h5dump finds them and no
  ``import hdf5plugin``: it failed ("required filter 32015 is not registered"), because the view
  served zstd as a mandatory filter, which libhdf5 will not write before the filter is
  registered; h5py and netCDF-C write plugin filters optional, and so does the view now.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
hdf5plugin = pytest.importorskip("hdf5plugin")

from test_hdf5_tools_explore import check_deep, seeded_store  # noqa: F401

pytestmark = pytest.mark.mount

MAKE = """
    import sys, os, numpy as np, zarr
    os.mkdir(sys.argv[1])
    g = zarr.open_group(sys.argv[1], mode="a")
    a = g.create_array("a", shape=(40, 50), chunks=(16, 16), dtype="int32", fill_value=-1)
    a[:] = np.arange(2000, dtype="int32").reshape(40, 50)
    b = g.create_array("b", shape=(100,), chunks=(10,), shards=(50,), dtype="float64")
    b[:] = np.linspace(0, 1, 100)
"""

R_PLUS = """
    import sys, h5py, numpy as np
    assert "hdf5plugin" not in sys.modules
    with h5py.File(sys.argv[1], "r+") as f:
        f["a"][0:16, 0:16] = 7       # a whole chunk
        f["a"][20, 30] = -5          # part of one
        f["b"][95:] = 2.5            # the last chunk of the second shard
"""


def _python(code: str, *args, env: dict | None = None) -> None:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         check=False, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]


def test_h5py_r_plus_with_filters_from_the_plugin_path_writes_zarr_made_zstd_arrays(mount_store, seeded_store):
    m = mount_store(str(seeded_store))
    _python(MAKE, m.path / "zarr" / "zz.zarr")
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    env["HDF5_PLUGIN_PATH"] = hdf5plugin.PLUGIN_PATH
    _python(R_PLUS, m.path / "hdf5" / "zz.h5", env=env)
    g = zarr.open_group(str(m.path / "zarr" / "zz.zarr"), mode="r")
    a = np.arange(2000, dtype="int32").reshape(40, 50)
    a[0:16, 0:16] = 7
    a[20, 30] = -5
    np.testing.assert_array_equal(g["a"][...], a)
    b = np.linspace(0, 1, 100)
    b[95:] = 2.5
    np.testing.assert_array_equal(g["b"][...], b)
    assert [c.__class__.__name__ for c in g["a"].compressors] == ["ZstdCodec"]
    m.stop()
    check_deep(seeded_store)
