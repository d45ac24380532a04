"""The HDF5 view as users use it, seventh round (real mount).

What this module pins:

- SWMR: a file written into ``hdf5/`` with ``libver="latest"`` (superblock 3) came back with
  superblock 0, so the usual SWMR workflow, reopening it ``r+`` to append while readers
  follow (``f.swmr_mode = True``), failed: "Unable to start swmr writing (file superblock
  version - should be at least 3)". The view keeps the superblock version the file was
  written with (netCDF-C's 2 too, ``ncdump -s`` prints it): the writer appends, another
  process reading with ``swmr=True`` sees each flushed step, and every view has the data.
- NWB: ``NWBHDF5IO("hdf5/session.nwb", "w")`` (pynwb) was refused with EPERM (a new file
  here had to be named ``.h5``, ``.nc``...): a ``.nwb`` file is a domain that keeps its name;
  pynwb writes it, appends to it (``"a"``) and reads it back, and the Zarr view has its data.
- Attribute order: xarray's ``to_netcdf(path, mode="a", group="sub")`` (netCDF-C in an ``"a"``
  session) makes objects that track no attribute creation order; ``ncdump`` lists their
  attributes in header order (``units`` before ``calendar``), h5py by name. The view tracked
  name order for them, so ``ncdump`` of the view differed from the same steps on a local
  disk. Such objects keep their header order and the view's headers track none either.
- Names that are not UTF-8 (a latin-1 file): ``cp`` into ``hdf5/`` failed with EINVAL and
  "TypeError: can only concatenate str (not "bytes") to str"; it is refused with EOPNOTSUPP
  and a log line naming the link and why. A directory made in ``zarr/`` with such a name
  (``mkdir $'caf\\xe9'``) made the domain's file vanish from ``hdf5/`` (ERROR "cannot stat",
  ``ls`` failing with EOPNOTSUPP); it is there, the group named by those bytes.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
netCDF4 = pytest.importorskip("netCDF4")
zarr = pytest.importorskip("zarr")

from test_hdf5_tools_explore import check_deep, seeded_store, write_with_h5py  # noqa: F401

pytestmark = pytest.mark.mount


def _python(code: str, *args) -> str:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True, check=False,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


SWMR_FILE = """
    d = None
    with h5py.File(path, "w", libver="latest") as f:
        d = f.create_dataset("d", shape=(0, 4), maxshape=(None, 4), chunks=(2, 4), dtype="f8")
        f.attrs["title"] = "swmr"
        d.resize((2, 4))
        d[:] = 1.0
"""

SWMR_APPEND = """
    import subprocess, sys, h5py, numpy as np
    path = sys.argv[1]
    reader = "import h5py, sys; f = h5py.File(sys.argv[1], 'r', libver='latest', swmr=True); print(f['d'].shape[0], f['d'][-1, 0])"
    with h5py.File(path, "r+", libver="latest") as f:
        f.swmr_mode = True
        d = f["d"]
        for step in range(3):
            d.resize((d.shape[0] + 2, 4))
            d[-2:] = 10 + step
            d.flush()
            out = subprocess.run([sys.executable, "-c", reader, path], capture_output=True, text=True, check=True)
            print(out.stdout.strip())
"""


def test_an_swmr_writer_appends_to_a_file_it_wrote_with_libver_latest(mount_store, seeded_store):
    m = mount_store(str(seeded_store))
    path = m.path / "hdf5" / "sw.h5"
    write_with_h5py(SWMR_FILE, path)
    assert path.read_bytes()[8] == 3  # the superblock version the file was written with
    seen = _python(SWMR_APPEND, path).split("\n")
    assert [s for s in seen if s] == ["4 10.0", "6 11.0", "8 12.0"]  # a reader follows each flushed step
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["d"][:, 0], [1, 1, 10, 10, 11, 11, 12, 12])
        assert f.id.get_create_plist().get_version()[0] == 3
    z = zarr.open_array(str(m.path / "zarr" / "sw.zarr" / "d"), mode="r")
    np.testing.assert_array_equal(z[:, 3], [1, 1, 10, 10, 11, 11, 12, 12])
    m.stop()
    check_deep(seeded_store)


def test_ncdump_s_prints_the_superblock_version_netcdf_wrote(mount_store, seeded_store, tmp_path):
    m = mount_store(str(seeded_store))
    local, mounted = tmp_path / "n.nc", m.path / "hdf5" / "n.nc"
    for p in (local, mounted):
        with netCDF4.Dataset(p, "w") as nc:
            nc.createDimension("t", None)
            nc.createVariable("v", "f4", ("t",), zlib=True)[:] = np.arange(5, dtype="f4")
        with netCDF4.Dataset(p, "a") as nc:  # a later session appends
            nc["v"][5:8] = [5, 6, 7]
    dumps = [subprocess.run(["ncdump", "-s", str(p)], capture_output=True, text=True, timeout=60, check=False)
             for p in (local, mounted)]
    assert all(d.returncode == 0 for d in dumps), dumps[1].stderr
    assert "_SuperblockVersion = 2" in dumps[0].stdout
    assert dumps[0].stdout.split("\n", 1)[1] == dumps[1].stdout.split("\n", 1)[1]


NWB = """
    import sys, warnings
    warnings.simplefilter("ignore")
    from datetime import datetime, timezone
    import numpy as np
    from pynwb import NWBFile, NWBHDF5IO, TimeSeries
    path = sys.argv[1]
    nwb = NWBFile(session_description="s", identifier="id1",
                  session_start_time=datetime(2020, 1, 1, tzinfo=timezone.utc))
    nwb.add_acquisition(TimeSeries(name="ts", data=np.arange(100.0).reshape(50, 2), unit="V", rate=10.0))
    nwb.add_trial_column("label", "a label")
    for i in range(3):
        nwb.add_trial(start_time=float(i), stop_time=i + 0.5, label=f"L{i}")
    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)
    with NWBHDF5IO(path, "a") as io:
        nwb = io.read()
        nwb.add_acquisition(TimeSeries(name="ts2", data=np.ones(5), unit="A", rate=1.0))
        io.write(nwb)
    with NWBHDF5IO(path, "r") as io:
        nwb = io.read()
        print(sorted(nwb.acquisition), list(nwb.trials.to_dataframe()["label"]))
"""


def test_pynwb_writes_and_appends_a_nwb_file(mount_store, seeded_store):
    pytest.importorskip("pynwb")
    m = mount_store(str(seeded_store))
    path = m.path / "hdf5" / "session.nwb"
    out = _python(NWB, path)
    assert out.strip() == "['ts', 'ts2'] ['L0', 'L1', 'L2']"
    assert "session.nwb" in os.listdir(m.path / "hdf5")
    z = zarr.open_group(str(m.path / "zarr" / "session.nwb.zarr"), mode="r")
    np.testing.assert_array_equal(z["acquisition/ts/data"][:], np.arange(100.0).reshape(50, 2))
    np.testing.assert_array_equal(z["acquisition/ts2/data"][:], np.ones(5))
    m.stop()
    check_deep(seeded_store)


def test_xarray_appends_groups_and_ncdump_matches_a_local_file(mount_store, seeded_store, tmp_path):
    xr = pytest.importorskip("xarray")
    pd = pytest.importorskip("pandas")
    m = mount_store(str(seeded_store))
    ds = xr.Dataset({"a": (("t", "x"), np.arange(12, dtype="f4").reshape(4, 3))},
                    coords={"t": pd.date_range("2000-01-01", periods=4), "x": [10, 20, 30]})
    ds2 = xr.Dataset({"b": (("y",), np.arange(5))}, coords={"y": list("abcde")})
    ds2["b"].attrs.update({"zeta": "z", "long_name": "b values", "alpha": 1})
    local, mounted = tmp_path / "grp.nc", m.path / "hdf5" / "grp.nc"
    for p in (local, mounted):
        ds.to_netcdf(p)
        ds2.to_netcdf(p, mode="a", group="sub")
        ds.isel(t=[0]).rename({"a": "c"}).to_netcdf(p, mode="a", group="sub")
    dumps = [subprocess.run(["ncdump", str(p)], capture_output=True, text=True, timeout=60, check=False)
             for p in (local, mounted)]
    assert all(d.returncode == 0 for d in dumps), dumps[1].stderr
    assert "t:units" in dumps[0].stdout and "b:zeta" in dumps[0].stdout
    assert dumps[0].stdout.split("\n", 1)[1] == dumps[1].stdout.split("\n", 1)[1]
    with xr.open_dataset(local, group="sub") as a, xr.open_dataset(mounted, group="sub") as b:
        assert list(b["b"].attrs) == list(a["b"].attrs) == ["zeta", "long_name", "alpha"]
        xr.testing.assert_identical(a.load(), b.load())
    m.stop()
    check_deep(seeded_store)


def test_cp_of_a_file_with_a_latin1_name_is_refused_naming_it(mount_store, seeded_store, tmp_path):
    src = tmp_path / "latin.h5"
    with h5py.File(src, "w") as f:
        f["ok"] = np.arange(3)
        f.create_dataset(b"caf\xe9", data=np.arange(3))
    m = mount_store(str(seeded_store))
    res = subprocess.run(["cp", str(src), str(m.path / "hdf5" / "latin.h5")], capture_output=True, text=True, check=False)
    assert res.returncode != 0 and "Operation not supported" in res.stderr
    assert "latin.h5" not in os.listdir(m.path / "hdf5")
    log = m.log_text()
    assert "link b'caf\\xe9' in group /: its name is not UTF-8 text" in log and "TypeError" not in log


def test_a_latin1_directory_made_in_zarr_keeps_the_hdf5_file(mount_store, seeded_store):
    """``mkdir`` of a latin-1 name in ``zarr/`` hid ``hdf5/lat.h5``; such names are refused
    now (``EINVAL``: names made in the views are UTF-8), and the file stays. A group stored
    under such a name before is rendered (tests/fs/test_hdf5_explore7_fs.py)."""
    m = mount_store(str(seeded_store))
    dom = m.path / "zarr" / "lat.zarr"
    dom.mkdir()
    (dom / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {"t": 1}}')
    sub = os.path.join(os.fsencode(dom), b"caf\xe9")
    with pytest.raises(OSError) as err:
        os.mkdir(sub)
    assert err.value.errno == errno.EINVAL
    os.mkdir(dom / "café")  # UTF-8 is a name like any other
    assert "lat.h5" in os.listdir(m.path / "hdf5")
    res = subprocess.run(["h5ls", "-r", str(m.path / "hdf5" / "lat.h5")], capture_output=True, timeout=60, check=False)
    assert res.returncode == 0 and b"caf" in res.stdout, res
    assert "cannot stat" not in m.log_text()
