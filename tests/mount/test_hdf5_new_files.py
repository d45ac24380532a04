"""New files through the HDF5 view of a real mount: h5py ``"w"``, netCDF4 ``"w"``, ``rm``.

A file written from scratch in ``hdf5/`` becomes a domain (``x.h5`` -> ``/x.h5``,
``x.nc`` -> ``/x.nc``, shown as ``hdf5/x.nc``); written over an existing
domain's file it replaces that domain; ``rm`` deletes it. Everything is read
back by independent readers (a fresh h5py, netCDF4, h5dump, zarr-python,
tensorstore on N5) and by the store model. Files that are not HDF5 are refused
and leave the store byte-identical.
"""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)


def snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def catalog(store: Path):
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    return Catalog(open_store(str(store), read_only=True))


def model_array(store: Path, domain: str, path: str) -> np.ndarray:
    from corpus import read_dataset

    cat = catalog(store)
    return read_dataset(cat, cat.load(domain).resolve(path))


@pytest.fixture
def empty_store(tmp_path):
    """A store holding one small domain (so the mount has something) and room for more."""
    src = tmp_path / "seed.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.arange(10))
    store = tmp_path / "store"
    import_source(src, str(store), progress=False)
    return store


def test_h5py_w_makes_a_domain_every_view_shows(mount_store, empty_store):
    store = empty_store
    m = mount_store(str(store))
    rng = np.random.default_rng(11)
    want = {
        "img": rng.integers(0, 4000, (64, 80)).astype("uint16"),
        "grp/temps": rng.random((20, 30)).astype("float32"),
        "grp/contig": np.arange(12, dtype=">i8").reshape(3, 4),
    }
    cmp = np.zeros(7, dtype=[("id", "<i4"), ("v", "<f8")])
    cmp["id"], cmp["v"] = np.arange(7), np.linspace(0, 1, 7)
    path = m.path / "hdf5" / "fresh.h5"
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "made by h5py through polyfs"
        f.create_dataset("img", data=want["img"], chunks=(32, 40), compression="gzip", maxshape=(None, 80))
        g = f.create_group("grp")
        g.create_dataset("temps", data=want["grp/temps"], chunks=(10, 10), **hdf5plugin.Zstd())
        g.create_dataset("contig", data=want["grp/contig"])
        g.attrs["n"] = np.int32(5)
        f.create_dataset("cmp", data=cmp, chunks=(4,), compression="gzip")
        f.create_dataset("names", data=np.array(["x", "yy", "zzz"], dtype=h5py.string_dtype()))
        f["alias"] = h5py.SoftLink("/img")
    assert "fresh.h5" in os.listdir(m.path / "hdf5")
    assert "fresh.zarr" in os.listdir(m.path / "zarr")
    for name, data in want.items():
        np.testing.assert_array_equal(model_array(store, "/fresh.h5", name), data)
    np.testing.assert_array_equal(model_array(store, "/fresh.h5", "cmp"), cmp)
    with h5py.File(path, "r") as f:
        for name, data in want.items():
            np.testing.assert_array_equal(f[name][()], data)
        assert f.attrs["title"] == "made by h5py through polyfs" and f["grp"].attrs["n"] == 5
        assert f["img"].maxshape == (None, 80) and f["img"].compression == "gzip"
        assert [s.decode() for s in f["names"][()]] == ["x", "yy", "zzz"]
        assert f.get("alias", getlink=True).path == "/img"
    root = zarr.open_group(str(m.path / "zarr" / "fresh.zarr"), mode="r")
    for name, data in want.items():
        np.testing.assert_array_equal(root[name][:], data)
    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "fresh.n5" / "grp/temps")}})
    np.testing.assert_array_equal(np.asarray(t.result().read().result()).T, want["grp/temps"])
    out = subprocess.run(["h5dump", "-H", str(path)], capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 0 and 'DATASET "img"' in out.stdout, out.stderr

    # the stored chunks of the gzip dataset are the bytes h5py wrote (no recompression)
    with h5py.File(path, "r") as f:
        _, first = f["img"].id.read_direct_chunk((0, 0))
    cat = catalog(store)
    ds = cat.load("/fresh.h5").resolve("img")
    assert cat.store.get(cat.chunk_index(ds).key_of((0, 0))) == bytes(first)


def test_netcdf4_w_makes_a_domain_netcdf_reads_back(mount_store, empty_store):
    netCDF4 = pytest.importorskip("netCDF4")
    store = empty_store
    m = mount_store(str(store))
    path = m.path / "hdf5" / "clim.nc"
    temps = np.random.default_rng(2).random((5, 6, 7)).astype("float32")
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "climate"
        nc.createDimension("time", None)
        nc.createDimension("lat", 6)
        nc.createDimension("lon", 7)
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat[:] = np.linspace(-50, 50, 6)
        lat.units = "degrees_north"
        tv = nc.createVariable("temp", "f4", ("time", "lat", "lon"), zlib=True, complevel=3)
        tv.units = "K"
        tv[0:5] = temps
    assert "clim.nc" in os.listdir(m.path / "hdf5")
    with netCDF4.Dataset(path, "r") as nc:
        assert nc.title == "climate"
        assert nc.dimensions["time"].isunlimited() and len(nc.dimensions["time"]) == 5
        np.testing.assert_array_equal(nc["temp"][:], temps)
        assert nc["temp"].units == "K"
        np.testing.assert_array_equal(nc["lat"][:], np.linspace(-50, 50, 6))
    np.testing.assert_array_equal(model_array(store, "/clim.nc", "temp"), temps)
    root = zarr.open_group(str(m.path / "zarr" / "clim.nc.zarr"), mode="r")
    np.testing.assert_array_equal(root["temp"][:], temps)
    xr = pytest.importorskip("xarray")
    with xr.open_dataset(path, engine="netcdf4") as dset:
        np.testing.assert_array_equal(dset["temp"].values, temps)
        assert dset.attrs["title"] == "climate"

    # netCDF4 "a": append along the unlimited dimension, through the same view file
    with netCDF4.Dataset(path, "a") as nc:
        nc["temp"][5:7] = temps[:2] + 100
    with netCDF4.Dataset(path, "r") as nc:
        assert len(nc.dimensions["time"]) == 7
        np.testing.assert_array_equal(nc["temp"][5:7], temps[:2] + 100)


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET", "NETCDF3_64BIT_DATA"])
def test_a_netcdf3_file_is_refused_where_netcdf_c_sees_it(mount_store, empty_store, fmt):
    """netCDF-C's classic layer ignores close() errors: the refusal comes at the first write."""
    pytest.importorskip("netCDF4")
    store = empty_store
    m = mount_store(str(store))
    before = snapshot(store)
    path = m.path / "hdf5" / "classic.nc"
    # in a child: netCDF-C keeps the descriptor of a file it failed to write open until exit
    script = ("import sys, numpy as np, netCDF4\n"
              "with netCDF4.Dataset(sys.argv[1], 'w', format=sys.argv[2]) as nc:\n"
              "    nc.createDimension('x', 4)\n"
              "    nc.createVariable('v', 'i4', ('x',))[:] = np.arange(4)\n")
    res = subprocess.run([sys.executable, "-c", script, str(path), fmt], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "Invalid argument" in res.stderr, res.stderr[-2000:]
    assert snapshot(store) == before  # no domain made
    assert "classic.nc" not in os.listdir(m.path / "hdf5")
    assert "netCDF-3" in m.log_text()


def test_a_netcdf3_file_copied_in_is_refused_with_one_log_line(mount_store, empty_store, tmp_path):
    """cp gets EINVAL at its first write; its close and the release store and log nothing more."""
    netCDF4 = pytest.importorskip("netCDF4")
    src = tmp_path / "bears.nc"
    with netCDF4.Dataset(src, "w", format="NETCDF3_CLASSIC") as nc:
        nc.createDimension("x", 4)
        nc.createVariable("v", "i4", ("x",))[:] = np.arange(4)
    m = mount_store(str(empty_store))
    before = snapshot(empty_store)
    res = subprocess.run(["cp", str(src), str(m.path / "hdf5" / "bears.nc")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and "Invalid argument" in res.stderr, res.stderr
    m.stop()  # the release is done, and logged, by then
    assert snapshot(empty_store) == before
    lines = [ln for ln in m.log_text().splitlines() if "bears.nc" in ln and (" WARNING " in ln or " ERROR " in ln)]
    assert len(lines) == 1 and "netCDF-3" in lines[0], lines


def test_w_over_an_existing_file_replaces_its_domain_and_rm_deletes_it(mount_store, empty_store):
    store = empty_store
    m = mount_store(str(store))
    from polyfs.model import keys

    old_root = catalog(store).load("/seed.h5").domain.root
    old_prefix = keys.domain_db_prefix(old_root)
    assert any(k.startswith(old_prefix) for k in snapshot(store))
    path = m.path / "hdf5" / "seed.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("y", data=np.arange(5, dtype="int16"))
    with h5py.File(path, "r") as f:
        assert list(f) == ["y"]
        np.testing.assert_array_equal(f["y"][()], np.arange(5))
    new_root = catalog(store).load("/seed.h5").domain.root
    assert new_root != old_root
    assert not any(k.startswith(old_prefix) for k in snapshot(store)), "the replaced domain's objects are deleted"
    os.unlink(path)
    assert "seed.h5" not in os.listdir(m.path / "hdf5")
    assert "seed.zarr" not in os.listdir(m.path / "zarr")
    assert not catalog(store).domain_exists("/seed.h5")


@pytest.mark.parametrize("bad", ["garbage", "truncated"])
def test_a_new_file_that_is_not_hdf5_is_refused(mount_store, empty_store, tmp_path, bad):
    store = empty_store
    m = mount_store(str(store))
    before = snapshot(store)
    local = tmp_path / "local.h5"
    with h5py.File(local, "w") as f:
        f.create_dataset("d", data=np.arange(100000), chunks=(1000,), compression="gzip")
    body = local.read_bytes()
    data = os.urandom(4096) if bad == "garbage" else body[: len(body) // 2]
    with pytest.raises(OSError) as ei:
        with open(m.path / "hdf5" / "broken.h5", "wb") as f:
            f.write(data)
    assert ei.value.errno in (errno.EINVAL, errno.EIO)
    assert snapshot(store) == before
    assert "broken.h5" not in os.listdir(m.path / "hdf5")
    lines = [ln for ln in m.log_text().splitlines() if "broken.h5" in ln and ("ERROR" in ln or "WARNING" in ln)]
    assert len(lines) == 1, m.log_text()[-2000:]


def test_cp_of_an_hdf5_file_into_the_view_imports_it(mount_store, empty_store, tmp_path):
    """``cp`` is a writer too: a local HDF5 file copied in becomes a domain."""
    store = empty_store
    m = mount_store(str(store))
    local = tmp_path / "copied.h5"
    data = np.random.default_rng(5).integers(0, 100, (300, 200)).astype("int32")
    with h5py.File(local, "w") as f:
        f.create_dataset("a/b", data=data, chunks=(100, 100), compression="gzip")
    shutil.copy(local, m.path / "hdf5" / "copied.h5")
    with h5py.File(m.path / "hdf5" / "copied.h5", "r") as f:
        np.testing.assert_array_equal(f["a/b"][()], data)
    np.testing.assert_array_equal(model_array(store, "/copied.h5", "a/b"), data)


def test_cp_a_and_mv_into_the_view_succeed_quietly(mount_store, empty_store, tmp_path):
    """``cp -a`` and ``mv`` copy ACLs and xattrs: the mount answers ENOTSUP, which they skip."""
    store = empty_store
    m = mount_store(str(store))
    local = tmp_path / "kept.h5"
    data = np.arange(60, dtype="<i2").reshape(6, 10)
    with h5py.File(local, "w") as f:
        f.create_dataset("d", data=data, chunks=(3, 5))
    if _user_xattrs(tmp_path):
        os.setxattr(local, "user.origin", b"lab")
    res = subprocess.run(["cp", "-a", str(local), str(m.path / "hdf5" / "a.h5")], capture_output=True, text=True)
    assert res.returncode == 0 and not res.stderr, res.stderr
    res = subprocess.run(["mv", str(local), str(m.path / "hdf5" / "b.h5")], capture_output=True, text=True)
    assert res.returncode == 0 and not res.stderr, res.stderr
    for name in ("a.h5", "b.h5"):
        np.testing.assert_array_equal(model_array(store, f"/{name}", "d"), data)


def _user_xattrs(path) -> bool:
    try:
        os.setxattr(path, "user.probe", b"1")
        os.removexattr(path, "user.probe")
        return True
    except OSError:
        return False


def test_netcdf4_a_adds_variables_dimensions_and_attributes(mount_store, empty_store):
    """netCDF4 ``"a"`` on a view file: new dimensions (dimension scales with references between
    datasets), variables and attributes land in the store and read back through netCDF4."""
    netCDF4 = pytest.importorskip("netCDF4")
    store = empty_store
    m = mount_store(str(store))
    path = m.path / "hdf5" / "obs.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        t = nc.createVariable("time", "f8", ("time",))
        t[:] = np.arange(4.0)
    rng = np.random.default_rng(4)
    rain = rng.random((4, 3)).astype("float32")
    with netCDF4.Dataset(path, "a") as nc:
        nc.createDimension("station", 3)
        st = nc.createVariable("station", "i4", ("station",))
        st[:] = [10, 20, 30]
        v = nc.createVariable("rain", "f4", ("time", "station"), zlib=True, fill_value=-1.0)
        v.units = "mm"
        v[:] = rain
        nc.history = "rain added"
    with netCDF4.Dataset(path, "r") as nc:
        assert list(nc.dimensions) == ["time", "station"] and len(nc.dimensions["station"]) == 3
        assert nc["rain"].dimensions == ("time", "station") and nc["rain"].units == "mm"
        np.testing.assert_array_equal(nc["rain"][:], rain)
        assert nc["rain"]._FillValue == -1.0 and nc.history == "rain added"
        np.testing.assert_array_equal(nc["station"][:], [10, 20, 30])
    np.testing.assert_array_equal(model_array(store, "/obs.nc", "rain"), rain)
    xr = pytest.importorskip("xarray")
    with xr.open_dataset(path, engine="netcdf4") as dset:
        np.testing.assert_array_equal(dset["rain"].values, rain)
        np.testing.assert_array_equal(dset["station"].values, [10, 20, 30])


def test_h5py_r_plus_dimension_scales_and_references(mount_store, empty_store):
    store = empty_store
    m = mount_store(str(store))
    path = m.path / "hdf5" / "seed.h5"
    with h5py.File(path, "r+") as f:
        f.create_dataset("xs", data=np.linspace(0, 1, 10))
        f["xs"].make_scale("x")
        f["x"].dims[0].attach_scale(f["xs"])
        refs = f.create_dataset("refs", (2,), dtype=h5py.ref_dtype)
        refs[0], refs[1] = f["x"].ref, f["xs"].ref
        f.attrs["points_at"] = f["xs"].ref
    with h5py.File(path, "r") as f:
        assert f["x"].dims[0][0].name == "/xs"
        assert f[f["refs"][0]].name == "/x" and f[f["refs"][1]].name == "/xs"
        assert f[f.attrs["points_at"]].name == "/xs"
        np.testing.assert_array_equal(f["x"][()], np.arange(10))
    cat = catalog(store)
    model = cat.load("/seed.h5")
    xs = model.resolve("xs")
    assert model.resolve("x").attributes["DIMENSION_LIST"].value == [["datasets/" + xs.id]]


def test_a_file_with_a_filter_no_one_here_decodes_is_kept(mount_store, empty_store, tmp_path):
    """A file whose chunks use a filter neither polyfs nor HDF5 here can decode (LZO, id 305)
    becomes a domain all the same: its chunks are kept as written under filter 305 (the HDF5
    view serves them unchanged, for readers that have the plugin); the Zarr view leaves that
    dataset out with one log line."""
    store = empty_store
    m = mount_store(str(store))
    local = tmp_path / "lzo.h5"
    with h5py.File(local, "w") as f:
        f.create_dataset("d", data=np.arange(4096, dtype="int32"), chunks=(512,), compression="gzip")
        f.create_dataset("plain", data=np.arange(10, dtype="int16"))
    body = bytearray(local.read_bytes())
    at = body.find(b"deflate\x00")
    assert at > 8 and int.from_bytes(body[at - 8:at - 6], "little") == 1  # the pipeline's filter id
    body[at - 8:at - 6] = (305).to_bytes(2, "little")
    local.write_bytes(bytes(body))
    shutil.copyfile(local, m.path / "hdf5" / "lzo.h5")
    assert "lzo.h5" in os.listdir(m.path / "hdf5")
    with h5py.File(local, "r") as a, h5py.File(m.path / "hdf5" / "lzo.h5", "r") as b:
        plist = b["d"].id.get_create_plist()
        assert [plist.get_filter(i)[0] for i in range(plist.get_nfilters())] == [305]
        for i in range(a["d"].id.get_num_chunks()):
            off = a["d"].id.get_chunk_info(i).chunk_offset
            assert b["d"].id.read_direct_chunk(off) == a["d"].id.read_direct_chunk(off)
        np.testing.assert_array_equal(b["plain"][()], np.arange(10))
    listed = os.listdir(m.path / "zarr" / "lzo.zarr")
    assert "plain" in listed and "d" not in listed
    os.listdir(m.path / "zarr" / "lzo.zarr")
    lines = [ln for ln in m.log_text().splitlines() if "lzo.h5" in ln and "305" in ln]
    assert len(lines) == 1, m.log_text()[-2000:]
