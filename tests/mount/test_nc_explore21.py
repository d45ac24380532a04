"""netCDF-C tools and netcdf4-python on ``hdf5/`` of a real mount, exploratory round 21
(kernel-free tests of the fixes are in tests/fs/test_nc_explore21_fs.py).

- ``ncgen -k nc4`` straight into ``hdf5/``: a string variable's ``_FillValue`` was lost from
  the HDF5 fill value (``ncdump -s`` showed ``_NoFill = "true"``), so netCDF4 ``"a"``
  extending it read ``""`` in the gap where a disk file reads the ``_FillValue``.
- equal strings of a variable shared one heap object in the view: overwriting one of them
  (netCDF4 ``"a"``, h5py ``r+``) freed it under the others (bad heap pointer / wrong text).
- ``ncgen -k nc3``/``nc6`` into ``hdf5/``: refused at the first write, nothing stored.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from support import quiet_local_mount as _mounted

netCDF4 = pytest.importorskip("netCDF4")

pytestmark = pytest.mark.skipif(not (shutil.which("ncgen") and shutil.which("ncdump")), reason="no ncgen/ncdump")

CDL = r"""netcdf strs {
dimensions:
  time = UNLIMITED ;
  n = 4 ;
variables:
  string station(time) ;
    station:_FillValue = "missing" ;
  string code(n) ;
  int v(time) ;
data:
  station = "A", "B" ;
  code = "x", "x", "x", "y" ;
  v = 1, 2 ;
}
"""

CLASSIC_CDL = r"""netcdf classic {
dimensions:
  t = UNLIMITED ;
  x = 3 ;
variables:
  float f(t, x) ;
    f:units = "K" ;
data:
  f = 1, 2, 3, 4, 5, 6 ;
}
"""

EDIT = """import sys, netCDF4
with netCDF4.Dataset(sys.argv[1], "a") as nc:
    nc["station"][4] = "E"
    nc["code"][0] = "z"
    nc["v"][4] = 5
with netCDF4.Dataset(sys.argv[1]) as nc:
    print(list(nc["station"][:]), list(nc["code"][:]))
"""


def _snapshot(store) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def _dump(path, *opts: str) -> str:
    got = subprocess.run(["ncdump", *opts, str(path)], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    return got.stdout.split("\n", 1)[1]  # the first line names the file


def test_ncgen_string_fill_value_and_equal_strings_edited_in_place(mount_store, tmp_path):
    (tmp_path / "s.cdl").write_text(CDL)
    disk = tmp_path / "disk.nc"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(disk), str(tmp_path / "s.cdl")], check=True, timeout=120)
    store, m = _mounted(mount_store, tmp_path)
    view = m.path / "hdf5" / "s.nc"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(view), str(tmp_path / "s.cdl")], check=True, timeout=120)
    header = _dump(view, "-s", "-h")
    assert 'station:_FillValue = "missing"' in header and "station:_NoFill" not in header, header
    # in a child: a freed heap object can crash the HDF5 library
    for path in (disk, view):
        got = subprocess.run([sys.executable, "-c", EDIT, str(path)], capture_output=True, text=True, timeout=120)
        assert got.returncode == 0, got.stderr[-2000:]
        assert got.stdout.strip() == "['A', 'B', 'missing', 'missing', 'E'] ['z', 'x', 'x', 'y']", got.stdout
    assert _dump(view, "-v", "station,code,v") == _dump(disk, "-v", "station,code,v")
    assert " ERROR " not in m.log_text() and " WARNING " not in m.log_text()


@pytest.mark.parametrize("kind", ["nc3", "nc6"])
def test_ncgen_classic_into_the_view_is_refused_and_stores_nothing(mount_store, tmp_path, kind):
    (tmp_path / "c.cdl").write_text(CLASSIC_CDL)
    store, m = _mounted(mount_store, tmp_path)
    before = _snapshot(store)
    got = subprocess.run(["ncgen", "-k", kind, "-o", str(m.path / "hdf5" / "c.nc"), str(tmp_path / "c.cdl")],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode != 0 and "Invalid argument" in got.stderr, got.stderr
    assert _snapshot(store) == before and "c.nc" not in [p.name for p in (m.path / "hdf5").iterdir()]
    said = [line for line in m.log_text().splitlines() if "c.nc" in line and ("WARNING" in line or "ERROR" in line)]
    assert len(said) == 1 and "netCDF-3" in said[0], said  # once: not again at the close of the rest
