"""Writes through the HDF5 view where HDF5 puts a new object at a deleted one's object header
address (operations awaited directly). HDF5 fixes a dataset's type, layout, chunk shape,
filters and fill value at creation, so an object there that differs in one of them is a new
object (the old one deleted, the new one created), never the old one changed; a ``move`` stays
the same object; a change in place HDF5 cannot make (bytes patched) is still refused."""
from __future__ import annotations

import errno
import io
import struct

import h5py
import numpy as np
import pytest

from polyfs.formats.hdf5.structs import lookup3
from polyfs.importers import import_source
from polyfs.store import open_store
from support import make_ctx
from writeharness import FS, FsError, write_changes

netCDF4 = pytest.importorskip("netCDF4")


def _model(store: str, domain: str):
    ctx, _ = make_ctx(open_store(f"file://{store}"))
    return ctx, ctx.catalog.load(domain)


def _addr(f: h5py.File, path: str) -> int:
    return h5py.h5o.get_info(f[path].id).addr


def _nc_store(tmp_path) -> tuple[FS, str]:
    src = tmp_path / "d.nc"
    d = netCDF4.Dataset(src, "w")
    d.createDimension("t", None)
    d.createDimension("x", 4)
    v = d.createVariable("m", "i2", ("t", "x"))
    v[0:2] = np.arange(8, dtype="i2").reshape(2, 4)
    d.close()
    store = str(tmp_path / "store")
    import_source(src, store, domain="/d.nc", progress=False)
    return FS(f"file://{store}"), store


@pytest.mark.parametrize("old, new", [("x", "xx"), ("t", "time")])
def test_netcdf_rename_dimension_without_coordinate_variable(tmp_path, old, new):
    """netCDF-C renames a dimension that has no coordinate variable by deleting its placeholder
    dataset and making another (contiguous, unfiltered) one, which HDF5 puts at the freed
    address: a new dataset, not the old one with another layout or filters."""
    fs, store = _nc_store(tmp_path)
    _, model = _model(store, "/d.nc")
    old_id, m_id = model.resolve(f"/{old}").id, model.resolve("/m").id
    before = fs.read_file("hdf5/d.nc")
    work = tmp_path / "work.nc"
    work.write_bytes(before)
    with h5py.File(work, "r") as f:
        was = _addr(f, f"/{old}")
    d = netCDF4.Dataset(work, "a")
    d.renameDimension(old, new)
    d.close()
    with h5py.File(work, "r") as f:
        assert _addr(f, f"/{new}") == was  # the case at hand: HDF5 reused the address
    write_changes(fs, "hdf5/d.nc", before, work.read_bytes())

    _, model = _model(store, "/d.nc")
    assert model.resolve(f"/{new}").id != old_id  # a new object; the old one is gone
    assert old_id not in {e.obj.id for e in model.walk()}
    assert model.resolve("/m").id == m_id  # the variable is the same, its data kept
    after = tmp_path / "after.nc"
    after.write_bytes(fs.fresh(read_only=True).read_file("hdf5/d.nc"))
    with netCDF4.Dataset(after) as nc:
        want = {"t": 2, "x": 4}
        want[new] = want.pop(old)
        assert {k: len(v) for k, v in nc.dimensions.items()} == want
        assert nc.dimensions["time" if new == "time" else "t"].isunlimited()
        assert nc.variables["m"].dimensions == (("time" if new == "time" else "t"), ("xx" if new == "xx" else "x"))
        np.testing.assert_array_equal(nc.variables["m"][:], np.arange(8).reshape(2, 4))


def _h5_store(tmp_path, make) -> tuple[FS, str]:
    src = tmp_path / "s.h5"
    with h5py.File(src, "w") as f:
        make(f)
        for name in f:
            f[name].attrs["note"] = "x" * 600  # a header a new one fits into: HDF5 reuses its space
    store = str(tmp_path / "store")
    import_source(src, store, progress=False)
    return FS(f"file://{store}"), store


def _rewrite(fs: FS, tmp_path, edit) -> h5py.File:
    before = fs.read_file("hdf5/s.h5")
    buf = io.BytesIO(before)
    with h5py.File(buf, "r+", libver=("v108", "latest")) as f:  # version 2 object headers, as netCDF-C
        edit(f)
    write_changes(fs, "hdf5/s.h5", before, buf.getvalue())
    after = tmp_path / "after.h5"
    after.write_bytes(fs.fresh(read_only=True).read_file("hdf5/s.h5"))
    return h5py.File(after, "r")


def test_group_at_a_deleted_datasets_address_is_a_new_group(tmp_path):
    """h5py: ``del f["a"]`` then ``create_group``: HDF5 puts the group where the dataset's header
    was; a new group (the dataset deleted with its chunks), not a dataset become a group."""
    fs, store = _h5_store(tmp_path, lambda f: (f.create_dataset("a", data=np.arange(40, dtype="i4"), chunks=(8,),
                                                                compression="gzip"),
                                                f.create_dataset("keep", data=np.arange(6.0))))
    ctx, model = _model(store, "/s.h5")
    old = model.resolve("/a")
    idx = ctx.catalog.chunk_index(old)
    keys = [idx.key(int(lin)) for lin in idx.linear]
    reused = {}

    def edit(f):
        was = _addr(f, "/a")
        del f["a"]
        g = f.create_group("g")
        g.attrs["made"] = 1
        g.create_dataset("inner", data=np.arange(3, dtype="i2"))
        reused["g"] = _addr(f, "/g") == was

    with _rewrite(fs, tmp_path, edit) as f:
        assert set(f) == {"g", "keep"} and f["g"].attrs["made"] == 1
        np.testing.assert_array_equal(f["g/inner"][...], [0, 1, 2])
        np.testing.assert_array_equal(f["keep"][...], np.arange(6.0))
    assert reused["g"], "HDF5 did not reuse the address: the test does not test the case"
    ctx, model = _model(store, "/s.h5")
    assert old.id not in model.datasets and model.resolve("/g").id != old.id
    assert keys and not any(ctx.store.exists(k) for k in keys)  # the old dataset's chunks are deleted


def test_move_is_still_the_same_dataset_and_keeps_its_chunks(tmp_path):
    fs, store = _h5_store(tmp_path, lambda f: f.create_dataset("a", data=np.arange(40, dtype="i4"), chunks=(8,),
                                                               compression="gzip"))
    ctx, model = _model(store, "/s.h5")
    ds = model.resolve("/a")
    idx = ctx.catalog.chunk_index(ds)
    chunks = {idx.key(int(lin)): ctx.store.get(idx.key(int(lin))) for lin in idx.linear}
    assert len(chunks) == 5

    def edit(f):
        f.move("a", "renamed")
        f["renamed"].attrs["note"] = "moved"  # its header is written too

    with _rewrite(fs, tmp_path, edit) as f:
        assert list(f) == ["renamed"]
        np.testing.assert_array_equal(f["renamed"][...], np.arange(40))
    ctx, model = _model(store, "/s.h5")
    assert model.resolve("/renamed").id == ds.id  # the same dataset, its chunks neither read nor rewritten
    for k, v in chunks.items():
        assert ctx.store.get(k) == v


def _patch_signed_flag(data: bytes, addr: int) -> bytes:
    """The dataset's 4-byte signed integer type made unsigned in its (version 2) object
    header, checksum fixed: a change in place no HDF5 call makes."""
    buf = bytearray(data)
    assert buf[addr:addr + 4] == b"OHDR"
    flags = buf[addr + 5]
    width = 1 << (flags & 3)
    start = addr + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    size = int.from_bytes(buf[start:start + width], "little")
    end = start + width + size  # the checksum follows the first chunk
    at = buf.index(b"\x10\x08\x00\x00\x04\x00\x00\x00", start, end)
    buf[at + 1] = 0x00
    buf[end:end + 4] = struct.pack("<I", lookup3(bytes(buf[addr:end])))
    return bytes(buf)


def test_type_changed_in_place_is_still_refused(tmp_path):
    fs, _ = _h5_store(tmp_path, lambda f: f.create_dataset("a", data=np.arange(16, dtype="<i4"), chunks=(4,),
                                                               compression="gzip"))
    before = fs.read_file("hdf5/s.h5")
    with h5py.File(io.BytesIO(before), "r") as f:
        addr = _addr(f, "/a")
    after = _patch_signed_flag(before, addr)
    with h5py.File(io.BytesIO(after), "r") as f:
        assert f["a"].dtype == np.dtype("<u4")
    snapshot = fs.snapshot()
    with pytest.raises(FsError) as ei:
        write_changes(fs, "hdf5/s.h5", before, after)
    assert ei.value.errno == errno.EOPNOTSUPP
    assert fs.snapshot() == snapshot
