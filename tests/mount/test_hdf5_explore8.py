"""The HDF5 view as users use it, eighth round (real mount).

What this module pins:

- Sequences of a byte-swapped base type (pyfive's ``attr_datatypes.hdf5`` has a
  ``H5T_VLEN {H5T_STD_U64BE}`` attribute): ``cp`` into ``hdf5/`` stored them byte-swapped (h5py
  reads them as native-labelled arrays of the file's bytes), so ``h5dump`` printed
  ``(72057594037927936, 144115188075855872)`` for ``(1, 2)`` and ``h5diff`` found differences.
- Enum data with values no member names (netCDF's unwritten elements): ``cp`` stored it
  big-endian, and HDF5 converts enums between byte orders by member name, so ``h5diff`` of the
  original and the view found differences and ``h5dump`` printed ``ff:ff:ff:ff`` for ``0``.
- netCDF-C's ``"a"`` session on a CMOR file (global attributes made in name order) that renames
  a variable and appends to ``:history``: ``ncdump -h`` of the view kept ``:history`` in its old
  place, a local file lists it last.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
netCDF4 = pytest.importorskip("netCDF4")

from test_hdf5_tools_explore import check_deep, seeded_store  # noqa: F401

pytestmark = pytest.mark.mount


def _tool(*args: str) -> subprocess.CompletedProcess:
    if shutil.which(args[0]) is None:
        pytest.skip(f"{args[0]} is not installed")
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, check=False)


def _python(code: str, *args) -> None:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         check=False, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


SWAPPED_SEQUENCES = """
    import sys, h5py, numpy as np
    u8 = np.empty(3, dtype=object)
    for i, seq in enumerate(([1, 2], [3, 4, 5], [42])):
        u8[i] = np.array(seq, dtype=">u8")
    with h5py.File(sys.argv[1], "w") as f:
        f.attrs.create("vlen_uint64", u8, dtype=h5py.vlen_dtype(np.dtype(">u8")))
        f.attrs["int32_big"] = np.array([1, 2], dtype=">i4")
        d = f.create_dataset("seqs", shape=(2,), dtype=h5py.vlen_dtype(np.dtype(">f4")))
        d[0] = np.array([1.5, 2.5], dtype=">f4")
        d[1] = np.array([-3], dtype=">f4")
"""


def test_cp_of_sequences_of_a_big_endian_type_keeps_their_values(mount_store, seeded_store, tmp_path):
    src = tmp_path / "attr_datatypes.hdf5"
    _python(SWAPPED_SEQUENCES, src)
    m = mount_store(str(seeded_store))
    dst = m.path / "hdf5" / "attr_datatypes.hdf5"
    shutil.copyfile(src, dst)
    dump = _tool("h5dump", "-a", "/vlen_uint64", str(dst))
    assert dump.returncode == 0, dump.stderr
    assert "(1, 2), (3, 4, 5), (42)" in dump.stdout
    diff = _tool("h5diff", "-v", str(src), str(dst))
    assert diff.returncode == 0, diff.stdout[-2000:]
    original, mounted = (_tool("h5dump", str(p)).stdout.split("\n", 1)[1] for p in (src, dst))
    assert mounted == original
    m.stop()
    check_deep(seeded_store)


def _cmor_like(path) -> None:
    """Global attributes made in name order, as CMOR writes them, and a variable."""
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("lat", 4)
        v = d.createVariable("noy", "f4", ("lat",), zlib=True)
        v[:] = np.arange(4.0)
        v.units = "mol mol-1"
        for name in ("Conventions", "activity_id", "history", "institution", "source", "title"):
            d.setncattr(name, f"{name} value")


EDIT = """
    import sys, netCDF4
    with netCDF4.Dataset(sys.argv[1], "a") as d:
        d.renameVariable("noy", "noy2")
        d.history = d.history + "\\nedited"
        d["noy2"][0] = 42.0
"""


def test_netcdf_rename_and_history_append_match_a_local_file(mount_store, seeded_store, tmp_path):
    local = tmp_path / "cmip.nc"
    _cmor_like(local)
    m = mount_store(str(seeded_store))
    mounted = m.path / "hdf5" / "cmip.nc"
    shutil.copyfile(local, mounted)
    for p in (local, mounted):
        _python(EDIT, p)
    dumps = [_tool("ncdump", str(p)) for p in (local, mounted)]
    assert all(d.returncode == 0 for d in dumps), dumps[1].stderr
    assert dumps[0].stdout.split("\n", 1)[1] == dumps[1].stdout.split("\n", 1)[1]
    assert '\t\t:title = "title value" ;\n\t\t:history = "history value\\nedited" ;\n' in dumps[1].stdout
    m.stop()
    check_deep(seeded_store)


ENUMS = """
    import sys, h5py, numpy as np
    e4 = h5py.enum_dtype({"a": 1, "b": 2}, basetype=np.dtype("<i4"))
    e1 = h5py.enum_dtype({"stratus": 1, "missing": 255}, basetype=np.dtype("u1"))
    with h5py.File(sys.argv[1], "w") as f:
        f.create_dataset("contig", data=np.array([1, 2, 0, 7], "<i4"), dtype=e4)
        f.create_dataset("chunked", data=np.array([1, 2, 0, 7], "<i4"), dtype=e4, chunks=(2,))
        f.create_dataset("cloud", data=np.array([1, 255, 0, 3], "u1"), dtype=e1)
"""


def test_cp_of_enum_data_with_unnamed_values_is_what_h5diff_calls_equal(mount_store, seeded_store, tmp_path):
    src = tmp_path / "enums.h5"
    _python(ENUMS, src)
    m = mount_store(str(seeded_store))
    dst = m.path / "hdf5" / "enums.h5"
    shutil.copyfile(src, dst)
    diff = _tool("h5diff", "-v", str(src), str(dst))
    assert diff.returncode == 0, diff.stdout[-2000:]
    assert "Warning: different storage datatype" not in diff.stdout
    original, mounted = (_tool("h5dump", str(p)).stdout.split("\n", 1)[1] for p in (src, dst))
    assert mounted == original
    m.stop()
    check_deep(seeded_store)
