"""Tier 2: attributes over the 64 KiB an object header message holds.

The HDF5 view keeps every attribute of such an object in dense storage (a fractal heap
and two v2 B-trees, formats/hdf5/dense.py). Sources are written by libhdf5 itself
(h5py ``libver="latest"``, which also uses dense storage); the view is read by h5py,
h5dump, h5diff and pyfive, and libhdf5 then adds attributes to it (``r+``) as a writer
through the view would. Too-large attributes are still left out with a log line.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess

import h5py
import hdf5plugin
import numpy as np
import pytest
from h5py import h5a

from polyfs.formats.hdf5 import dense
from polyfs.formats.hdf5 import structs
from polyfs.formats.hdf5 import view as hdf5
from polyfs.importers import import_source
from polyfs.store import open_store
from support import make_ctx, materialize

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
BIG = np.arange(20_000, dtype="f8")  # a 160 kB attribute
TEXT = "x" * 100_000  # a 100 kB fixed-length string


def _source(path, **extra) -> None:
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["title"] = "root"
        d = f.create_dataset("x", data=np.arange(12.0).reshape(3, 4), chunks=(3, 2))
        d.attrs["small"] = 7
        d.attrs["big"] = BIG
        d.attrs.create("text", np.bytes_(TEXT))
        d.attrs["ref"] = f.ref
        for i in range(20):
            d.attrs[f"a{i}"] = np.arange(i + 1)
        g = f.create_group("g")
        g.attrs["vlen"] = ["one", "two" * 30_000]  # variable-length: small in the header, data in the heap
        for name, value in extra.items():
            d.attrs[name] = value


def _view(tmp_path, src):
    domain = import_source(src, str(tmp_path / "store"), progress=False)
    ctx, reader = make_ctx(open_store(str(tmp_path / "store")))
    model = ctx.catalog.load(domain)
    return materialize(hdf5.domain_node(model, ctx, "v.h5"), tmp_path / "v.h5", reader)


def test_big_attributes_read_back_in_every_reader(tmp_path):
    src = tmp_path / "src.h5"
    _source(src)
    view = _view(tmp_path, src)
    raw = view.read_bytes()
    assert b"FRHP" in raw and b"BTHD" in raw and b"BTLF" in raw  # dense storage, not left out
    with h5py.File(view) as b:
        x = b["x"]
        np.testing.assert_array_equal(x.attrs["big"], BIG)
        assert x.attrs["text"] == TEXT.encode()
        assert x.attrs["small"] == 7
        assert b[x.attrs["ref"]] == b["/"]
        for i in range(20):
            np.testing.assert_array_equal(x.attrs[f"a{i}"], np.arange(i + 1))
        with h5py.File(src) as a:  # the source's order (by name: h5py tracked no creation order)
            assert list(x.attrs) == list(a["x"].attrs)
        assert [h5a.get_info(x.id, name=n.encode()).corder for n in x.attrs] == list(range(24))
        assert list(b["g"].attrs["vlen"]) == ["one", "two" * 30_000]
        assert b.attrs["title"] == "root"
    assert subprocess.run(["h5diff", "-r", str(src), str(view)], env=ENV, capture_output=True).returncode == 0
    dump = subprocess.run(["h5dump", "-A", "-d", "/x", str(view)], env=ENV, capture_output=True, text=True)
    assert dump.returncode == 0 and 'ATTRIBUTE "big"' in dump.stdout and "19999" in dump.stdout


def test_pyfive_reads_dense_attributes(tmp_path):
    pyfive = pytest.importorskip("pyfive")
    src = tmp_path / "src.h5"
    _source(src)
    view = _view(tmp_path, src)
    with pyfive.File(str(view)) as f:
        attrs = f["x"].attrs
        np.testing.assert_array_equal(attrs["big"], BIG)
        assert attrs["small"] == 7 and len(attrs) == 24


def test_libhdf5_adds_and_deletes_attributes_of_a_dense_view(tmp_path):
    """What a writer through hdf5/ does: libhdf5 grows the view's heap and B-trees."""
    src = tmp_path / "src.h5"
    _source(src)
    view = _view(tmp_path, src)
    with h5py.File(view, "r+") as f:
        x = f["x"]
        for i in range(40):
            x.attrs[f"new{i}"] = np.full(i + 1, i)
        x.attrs["big2"] = np.ones(30_000)
        del x.attrs["a3"]
        x.attrs["small"] = 8
    with h5py.File(view) as f:
        x = f["x"]
        assert x.attrs["small"] == 8 and "a3" not in x.attrs
        np.testing.assert_array_equal(x.attrs["big"], BIG)
        np.testing.assert_array_equal(x.attrs["big2"], np.ones(30_000))
        for i in range(40):
            np.testing.assert_array_equal(x.attrs[f"new{i}"], np.full(i + 1, i))
    assert subprocess.run(["h5dump", "-H", str(view)], env=ENV, capture_output=True).returncode == 0


def test_structures_parse_back_with_their_declarations(tmp_path):
    src = tmp_path / "src.h5"
    _source(src)
    raw = _view(tmp_path, src).read_bytes()
    at = raw.index(b"FRHP")
    heap = structs.FRACTAL_HEAP_HEADER.unpack(raw, at)
    end = at + structs.FRACTAL_HEAP_HEADER.size
    assert int.from_bytes(raw[end:end + 4], "little") == structs.lookup3(raw[at:end])
    assert heap["managed_objects"] == 24 and heap["root_rows"] == 0
    assert heap["start_block_size"] == heap["max_direct_block_size"] == heap["managed_space"]
    block = structs.FRACTAL_HEAP_DIRECT.unpack(raw, heap["root_address"])
    assert block["signature"] == b"FHDB" and block["heap_address"] == at
    names = []
    for tree in (i for i in range(len(raw)) if raw.startswith(b"BTHD", i)):
        head = structs.BTREE2_HEADER.unpack(raw, tree)
        assert head["root_records"] == head["total_records"] == 24 and head["depth"] == 0
        leaf = head["root_address"] + structs.BTREE2_LEAF.size
        if head["type"] == structs.BTREE2_ATTR_NAME:
            recs = [structs.ATTR_NAME_RECORD.unpack(raw, leaf + i * head["record_size"]) for i in range(24)]
            hashes = [r["name_hash"] for r in recs]
            assert hashes == sorted(hashes)
            names = recs
        else:
            orders = [structs.ATTR_ORDER_RECORD.unpack(raw, leaf + i * head["record_size"])["creation_order"]
                      for i in range(24)]
            assert orders == list(range(24))
    assert len(names) == 24


def test_attribute_too_large_for_dense_storage_is_left_out_alone(tmp_path, caplog):
    src = tmp_path / "src.h5"
    _source(src, huge=np.zeros(dense.MAX_BLOCK // 8 + 1))  # over half the largest block
    caplog.set_level(logging.ERROR)
    view = _view(tmp_path, src)
    with h5py.File(view) as b:
        assert "huge" not in b["x"].attrs
        np.testing.assert_array_equal(b["x"].attrs["big"], BIG)
    assert "attribute 'huge' of /x left out" in caplog.text


def test_block_size_limits():
    assert dense.block_size([10, 20]) == dense.MIN_BLOCK
    assert dense.block_size([70_000]) == 1 << 18  # at most half a block each
    with pytest.raises(dense.DenseTooLarge):
        dense.block_size([dense.MAX_BLOCK // 2 + 1])
    with pytest.raises(dense.DenseTooLarge):
        dense.block_size([100] * (structs.MAX_CREATION_INDEX + 1))
    with pytest.raises(dense.DenseTooLarge):
        dense.block_size([dense.MAX_BLOCK // 4] * 5)


def test_netcdf_reads_and_appends_to_a_dense_variable(tmp_path):
    netCDF4 = pytest.importorskip("netCDF4")
    src = tmp_path / "src.nc"
    with netCDF4.Dataset(src, "w") as d:
        d.createDimension("x", 5)
        v = d.createVariable("v", "f4", ("x",))
        v[:] = np.arange(5)
        v.units = "m"
        v.setncattr("history", "h" * 100_000)
        v.setncattr("table", np.arange(9000.0))
    view = _view(tmp_path, src)
    with netCDF4.Dataset(view) as d:
        v = d["v"]
        assert v.ncattrs() == ["units", "history", "table"]  # netCDF-C's creation order
        assert v.history == "h" * 100_000 and v.table[-1] == 8999.0 and v.units == "m"
    with netCDF4.Dataset(view, "a") as d:
        d["v"].comment = "added"
    with netCDF4.Dataset(view) as d:
        assert d["v"].ncattrs() == ["units", "history", "table", "comment"]


def test_large_attributes_past_the_heap_total_leave_out_only_those_that_do_not_fit(tmp_path, caplog):
    """Three 6 MB attributes: two fit the 16 MiB of dense storage and are shown, the third
    alone is left out (all three were left out)."""
    src = tmp_path / "src.h5"
    parts = {f"m{i}": np.full(750_000, i, dtype="f8") for i in range(3)}
    _source(src, **parts)
    caplog.set_level(logging.ERROR)
    view = _view(tmp_path, src)
    with h5py.File(view) as b:
        attrs = b["x"].attrs
        shown = sorted(n for n in parts if n in attrs)
        assert len(shown) == 2, sorted(attrs)
        for n in shown:
            np.testing.assert_array_equal(attrs[n], parts[n])
        np.testing.assert_array_equal(attrs["big"], BIG)
        assert attrs["small"] == 7
    left = [n for n in parts if f"attribute {n!r} of /x left out" in caplog.text]
    assert left == sorted(set(parts) - set(shown))
