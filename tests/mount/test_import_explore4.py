"""Tier 3: files imported while a store is mounted read back through the views as made.

- a Zarr v3 hierarchy with numpy ``datetime64``/``timedelta64`` and ``fixed_length_utf32``
  arrays, imported into a mounted store, appears in the mount and zarr-python reads the
  Zarr view with the source's data types and values (the view showed ``int64`` counts and
  ``string`` before); h5py reads the same values in the HDF5 view;
- a Zarr v3 ``variable_length_bytes`` array imports (it failed with ``invalid literal for
  int()``) and h5py reads its values in the HDF5 view;
- an OME-TIFF's physical pixel sizes (OME-XML only, no resolution tags) survive the import:
  the TIFF view's OME-XML gives them back (scaled per pyramid level), read by tifffile.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from polyfs.importers import import_source

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _wait_for(path: Path, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        if time.time() > deadline:
            raise AssertionError(f"{path} did not appear in the mount")
        time.sleep(0.1)


def test_zarr_declared_types_through_views(tmp_path, mount_store):
    store = tmp_path / "store"
    import_source(_tiny_h5(tmp_path), str(store), domain="/first.h5", progress=False)
    m = mount_store(str(store))
    src = tmp_path / "src.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=3)
    dt_values = np.array(["2001-01-01T00:00:00", "NaT", "2020-02-29T12:00:00"], "datetime64[s]")
    td_values = np.array([1, -2, 3000], "timedelta64[ms]")
    g.create_array("dt", shape=(3,), chunks=(2,), dtype="datetime64[s]")[:] = dt_values
    g.create_array("td", shape=(3,), chunks=(3,), dtype="timedelta64[ms]")[:] = td_values
    g.create_array("u", shape=(3,), chunks=(2,), dtype="<U5")[:] = ["ab", "", "hello"]
    g.create_array("vb", shape=(3,), chunks=(2,), dtype="variable_length_bytes")[:] = [b"a", b"", b"x\x00z"]
    import_source(src, str(store), domain="/sub/dir/typed.h5", progress=False)  # while mounted
    root = m.path / "zarr" / "sub" / "dir" / "typed.zarr"
    _wait_for(root / "zarr.json")
    z = zarr.open_group(str(root), mode="r")
    assert z["dt"].dtype == np.dtype("datetime64[s]")
    np.testing.assert_array_equal(z["dt"][...], dt_values)
    assert z["td"].dtype == np.dtype("timedelta64[ms]")
    np.testing.assert_array_equal(z["td"][...], td_values)
    assert z["u"].dtype == np.dtype("<U5")
    assert list(z["u"][...]) == ["ab", "", "hello"]
    with h5py.File(m.path / "hdf5" / "sub" / "dir" / "typed.h5", "r") as f:
        assert f["dt"][()].view("i8").tolist() == dt_values.view("i8").tolist()
        assert f["td"][()].view("i8").tolist() == td_values.view("i8").tolist()
        assert [bytes(x.tobytes()) for x in f["vb"][()]] == [b"a", b"", b"x\x00z"]


def _tiny_h5(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(4, dtype="i2")
    return p


def test_ome_pixel_sizes_through_tiff_view(tmp_path, mount_store):
    rng = np.random.default_rng(3)
    zyx = tmp_path / "zyx.ome.tif"
    tifffile.imwrite(zyx, rng.integers(0, 255, (4, 32, 48), dtype="u1"), ome=True,
                     metadata={"axes": "ZYX", "PhysicalSizeX": 0.25, "PhysicalSizeY": 0.25, "PhysicalSizeZ": 1.5})
    pyr = tmp_path / "pyr.ome.tif"
    with tifffile.TiffWriter(pyr, ome=True) as w:
        d = rng.integers(0, 255, (128, 128), dtype="u1")
        w.write(d, subifds=1, tile=(64, 64),
                metadata={"PhysicalSizeX": 120.0, "PhysicalSizeXUnit": "nm",
                          "PhysicalSizeY": 120.0, "PhysicalSizeYUnit": "nm"})
        w.write(d[::2, ::2], subfiletype=1, tile=(64, 64))
    store = tmp_path / "store"
    import_source(zyx, str(store), domain="/zyx.h5", progress=False)
    import_source(pyr, str(store), domain="/pyr.h5", progress=False)
    m = mount_store(str(store))

    def pixels(path: Path) -> dict:
        with tifffile.TiffFile(path) as t:
            return tifffile.xml2dict(t.ome_metadata)["OME"]["Image"]["Pixels"]

    p = pixels(m.path / "tiff" / "zyx" / "image.tif")
    assert (p["PhysicalSizeX"], p["PhysicalSizeY"], p["PhysicalSizeZ"]) == (0.25, 0.25, 1.5)
    assert p["PhysicalSizeXUnit"] == "µm"
    p0 = pixels(m.path / "tiff" / "pyr" / "image.tif")
    p1 = pixels(m.path / "tiff" / "pyr" / "image_level1.tif")
    assert (p0["PhysicalSizeX"], p0["PhysicalSizeXUnit"]) == (120.0, "nm")
    assert (p1["PhysicalSizeX"], p1["PhysicalSizeY"], p1["PhysicalSizeYUnit"]) == (240.0, 240.0, "nm")
    with h5py.File(m.path / "hdf5" / "zyx.h5", "r") as f:
        assert f["image"].attrs["pixel_size"].tolist() == [1.5, 0.25, 0.25]
        np.testing.assert_array_equal(f["image"][()], tifffile.imread(zyx))


def test_xarray_zarr_v3_store_reads_back_identical(tmp_path, mount_store):
    """xarray writes Zarr v3 dimensions as ``dimension_names`` only (no ``_ARRAY_DIMENSIONS``
    attribute); the import dropped them, so ``xarray.open_zarr`` of the view failed. Time
    coordinates, text, bools, NaN fill values and attributes come back identical."""
    xr = pytest.importorskip("xarray")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(4)
    src = xr.Dataset(
        {"pr": (("time", "y", "x"), rng.random((6, 4, 3)).astype("f4"), {"units": "mm"}),
         "flag": (("time",), np.array([True, False, True, True, False, True])),
         "name": (("x",), np.array(["a", "bb", "ccc"]))},
        coords={"time": pd.date_range("2001-01-01", periods=6, freq="6h"), "y": np.arange(4.0), "x": [10, 20, 30]},
        attrs={"Conventions": "CF-1.8"})
    src["pr"][0, 0, 0] = np.nan
    path = tmp_path / "xr.zarr"
    src.to_zarr(path, zarr_format=3, consolidated=False)
    store = tmp_path / "store"
    import_source(path, str(store), domain="/xr.h5", progress=False)
    m = mount_store(str(store))
    got = xr.open_zarr(m.path / "zarr" / "xr.zarr", consolidated=False).load()
    xr.testing.assert_identical(xr.open_zarr(path, consolidated=False).load(), got)


def test_zarr_view_keeps_the_source_layout(tmp_path, mount_store):
    """The view laid imported arrays out by its own shard rule: an unsharded source came back
    sharded, a sharded one with other shard shapes. Chunks and shards are the source's now."""
    from zarr.codecs import ZstdCodec

    src = tmp_path / "layout.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=3)
    plain = g.create_array("plain", shape=(37, 53), chunks=(10, 16), dtype="i2", fill_value=-1)
    plain[:] = np.arange(37 * 53, dtype="i2").reshape(37, 53)
    sh = g.create_array("sh", shape=(100, 90), chunks=(10, 10), shards=(50, 30), dtype="f4",
                        compressors=ZstdCodec(level=3))
    sh[:] = np.arange(9000, dtype="f4").reshape(100, 90)
    one = g.create_array("one", shape=(64, 64), chunks=(64, 64), shards=(64, 64), dtype="u1")
    one[:] = 7
    store = tmp_path / "store"
    import_source(src, str(store), domain="/layout.h5", progress=False)
    m = mount_store(str(store))
    view = zarr.open_group(str(m.path / "zarr" / "layout.zarr"), mode="r")
    for name in ("plain", "sh", "one"):
        a, b = g[name], view[name]
        assert (b.chunks, b.shards) == (a.chunks, a.shards), name
        np.testing.assert_array_equal(b[...], a[...])
