"""SEMANTICS.md, row by row: writes through the Zarr and N5 views, and the Errors table.

Tier 2: the pyfuse3 operations of ``build_operations`` are awaited directly (no kernel)
through ``writeharness.FS``. The bytes written are built here with numpy, numcodecs and
crc32c; what the views serve is decoded here the same way (and, where noted, by
zarr-python over a copy of the view's files), never with polyfs's own codecs. A refused
write must give its errno *and* leave every object of the store byte-identical.

Tests are named after the row they check: ``test_zarr_*`` (Zarr view table),
``test_n5_*`` (N5 view table), ``test_error_*`` (Errors table).
"""
from __future__ import annotations

import errno
import io
import itertools
import json
import logging
import os
import time

import numpy as np
import pytest
from writeharness import (
    FS,
    ZarrLayout,
    copy_tree,
    decode_shard,
    encode_shard,
    n5_attrs,
    n5_block,
    n5_header,
    n5_user_attrs,
    read_n5_array,
    read_zarr_array,
    unique_store_url,
    zarr_array_meta,
    zarr_group_meta,
)

from polyfs.store import open_store

E = errno.errorcode


# -- fixtures and helpers ---------------------------------------------------------------------
@pytest.fixture
def fs():
    f = FS()
    yield f
    f.close()


@pytest.fixture
def zfs(fs):
    """A mount with domain ``/t.h5`` made through the Zarr view as zarr-python makes a
    hierarchy: the directory, then the root group's zarr.json."""
    fs.mkdir("zarr/t.zarr")
    fs.write_json("zarr/t.zarr/zarr.json", zarr_group_meta({}))
    return fs


def changed_keys(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def refused(fs: FS, codes, fn, *args, caplog=None, names: str | None = None) -> int:
    """Run ``fn(*args)``, expect an errno in ``codes`` and the store (every object, and the
    domain list) exactly as it was; with ``caplog``, a log line naming ``names``."""
    codes = {codes} if isinstance(codes, int) else set(codes)
    before_objects, before_domains = fs.state()
    if caplog is not None:
        caplog.clear()
    with pytest.raises(OSError) as ei:
        fn(*args)
    got = ei.value.errno
    assert got in codes, f"errno {E.get(got, got)}, expected {sorted(E.get(c, c) for c in codes)}"
    after_objects, after_domains = fs.state()
    assert changed_keys(before_objects, after_objects) == [], "a refused write changed the store"
    assert after_domains == before_domains
    if caplog is not None and names is not None:
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert any(names in line for line in lines), lines
    return got


def unchanged(fs: FS, fn, *args):
    """``fn(*args)`` succeeds and the store's objects stay byte-identical."""
    before = fs.state()
    out = fn(*args)
    after = fs.state()
    assert changed_keys(before[0], after[0]) == [] and before[1] == after[1]
    return out


def outer_block(lay: ZarrLayout, padded: np.ndarray, pos) -> np.ndarray:
    return padded[tuple(slice(p * o, (p + 1) * o) for p, o in zip(pos, lay.outer))]


def padded_to(lay: ZarrLayout, data: np.ndarray) -> np.ndarray:
    out = np.full(tuple(g * o for g, o in zip(lay.file_grid, lay.outer)), lay.fill, dtype=lay.dtype)
    out[tuple(slice(0, s) for s in data.shape)] = data
    return out


def write_zarr_files(fs: FS, path: str, meta: dict, data: np.ndarray) -> None:
    """Every chunk/shard file of ``data`` as a Zarr writer lays them out."""
    lay = ZarrLayout(meta)
    padded = padded_to(lay, data)
    for pos in itertools.product(*(range(g) for g in lay.file_grid)):
        key = lay.key(pos)
        fs.makedirs(f"{path}/{key.rsplit('/', 1)[0]}")
        fs.write_file(f"{path}/{key}", lay.encode_file(outer_block(lay, padded, pos)))


def make_zarr(fs: FS, path: str, meta: dict, data: np.ndarray | None = None) -> ZarrLayout:
    fs.makedirs(path)
    fs.write_json(f"{path}/zarr.json", meta)
    if data is not None:
        write_zarr_files(fs, path, meta, data)
    return ZarrLayout(meta)


def write_n5_blocks(fs: FS, path: str, data: np.ndarray, block, comp="raw", truncate_edges=True) -> None:
    grid = tuple(-(-s // b) for s, b in zip(data.shape, block))
    for pos in itertools.product(*(range(g) for g in grid)):
        sl = tuple(slice(p * b, (p + 1) * b) for p, b in zip(pos, block))
        blk = data[sl]
        if not truncate_edges and blk.shape != tuple(block):
            full = np.zeros(block, dtype=data.dtype)
            full[tuple(slice(0, s) for s in blk.shape)] = blk
            blk = full
        rel = "/".join(str(p) for p in reversed(pos))
        fs.makedirs(f"{path}/{rel.rsplit('/', 1)[0]}")
        fs.write_file(f"{path}/{rel}", n5_block(blk, comp))


def n5_numeric(dt: np.dtype) -> bool:
    return np.dtype(dt).kind in "iuf"


def assert_values(fs: FS, stem: str, name: str, want: np.ndarray) -> None:
    """The array read through the Zarr view and (numeric types) the N5 view, decoded by hand:
    through the writing mount (every view shows a write at once) and through a second mount
    of the same store (what is stored, as a remount or another host sees it)."""
    for reader, mount in ((fs, "the writing mount"), (fs.fresh(read_only=True), "a second mount")):
        _, got = read_zarr_array(reader, f"zarr/{stem}.zarr/{name}")
        assert got.shape == want.shape
        assert got.dtype.kind == want.dtype.kind and got.dtype.itemsize == want.dtype.itemsize
        np.testing.assert_array_equal(got, want, err_msg=f"{name} through the Zarr view of {mount}")
        if n5_numeric(want.dtype) or want.dtype.kind == "b":
            _, n5 = read_n5_array(reader, f"n5/{stem}.n5/{name}")
            np.testing.assert_array_equal(n5, want.astype("u1") if want.dtype.kind == "b" else want,  # bool: uint8
                                          err_msg=f"{name} through the N5 view of {mount}")


def h5_view(fs: FS, stem: str):
    h5py = pytest.importorskip("h5py")
    try:
        import hdf5plugin  # noqa: F401 - registers zstd/blosc/bzip2 for h5py
    except ImportError:
        pass
    return h5py.File(io.BytesIO(fs.read_file(f"hdf5/{stem}.h5")), "r")


def gzip_body(member: bytes) -> bytes:
    """The raw deflate data of one gzip member (RFC 1952), header and trailer removed."""
    assert member[:3] == b"\x1f\x8b\x08", "not a gzip member"
    flg = member[3]
    pos = 10
    if flg & 4:
        pos += 2 + int.from_bytes(member[pos:pos + 2], "little")
    if flg & 8:
        pos = member.index(b"\0", pos) + 1
    if flg & 16:
        pos = member.index(b"\0", pos) + 1
    if flg & 2:
        pos += 2
    return member[pos:-8]


def rng_data(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind == "f":
        return (rng.random(shape) * 1000 - 500).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -30000), min(info.max, 60000), shape, endpoint=True).astype(dt)


# =============================================================================================
# Zarr view
# =============================================================================================
def test_zarr_mkdir_name_zarr_creates_domain(fs):
    """``mkdir zarr/<name>.zarr`` creates domain ``/<name>.h5`` (an empty root group), shown
    as an empty directory until its zarr.json is written, as on any disk."""
    fs.mkdir("zarr/exp.zarr")
    assert fs.domains() == ["/exp.h5"]
    assert "exp.zarr" in fs.ls("zarr") and "exp.n5" in fs.ls("n5") and "exp.h5" in fs.ls("hdf5")
    assert fs.ls("zarr/exp.zarr") == []
    refused(fs, errno.ENOENT, fs.read_json, "zarr/exp.zarr/zarr.json")
    assert fs.ls("n5/exp.n5") == ["attributes.json"]  # an N5 container's root has its version
    fs.write_json("zarr/exp.zarr/zarr.json", zarr_group_meta({}))
    assert fs.read_json("zarr/exp.zarr/zarr.json") == zarr_group_meta({})
    assert fs.ls("zarr/exp.zarr") == ["zarr.json"] and fs.ls("n5/exp.n5") == ["attributes.json"]
    with h5_view(fs, "exp") as f:
        assert list(f.keys()) == [] and dict(f.attrs) == {}
    # another name makes a folder (test_folders.py); a name another view gives domains, none
    refused(fs, errno.EPERM, fs.mkdir, "zarr/plain.n5")
    refused(fs, errno.EEXIST, fs.mkdir, "zarr/exp.zarr")


def test_mkdir_of_a_kept_name_makes_the_domain_the_views_name_so(fs):
    """The inverse of the views' naming: domain ``/x.nc`` is ``zarr/x.nc.zarr`` and
    ``hdf5/x.nc``, so ``mkdir zarr/x.nc.zarr`` (xarray's ``to_zarr(mode="w")`` over a netCDF
    domain removes the directory and makes it again) is ``/x.nc``, not ``/x.nc.h5``: the
    file keeps its name in ``hdf5/``."""
    fs.mkdir("zarr/clim.nc.zarr")
    fs.mkdir("n5/run.hdf5.n5")
    assert fs.domains() == ["/clim.nc", "/run.hdf5"]
    assert fs.ls("hdf5") == ["clim.nc", "run.hdf5"] and "clim.nc.zarr" in fs.ls("zarr")
    fs.rmdir("zarr/clim.nc.zarr")
    assert fs.domains() == ["/run.hdf5"]
    fs.mkdir("zarr/clim.nc.zarr")
    assert fs.domains() == ["/clim.nc", "/run.hdf5"] and "clim.nc" in fs.ls("hdf5")
    refused(fs, errno.EEXIST, fs.mkdir, "n5/clim.nc.n5")


def test_zarr_mkdir_inside_domain_creates_group(zfs):
    """A new directory is a group whose metadata is hidden until its zarr.json is written
    (members or not); an array can still be made there."""
    fs = zfs
    fs.mkdir("zarr/t.zarr/g")
    assert "g" in fs.ls("zarr/t.zarr") and "g" in fs.ls("n5/t.n5")
    assert fs.ls("zarr/t.zarr/g") == [] and fs.ls("n5/t.n5/g") == []
    with h5_view(fs, "t") as f:
        assert "g" in f
    # a member does not make metadata appear: nobody wrote any
    fs.mkdir("zarr/t.zarr/g/sub")
    assert fs.ls("zarr/t.zarr/g") == ["sub"]
    refused(fs, errno.ENOENT, fs.read_json, "zarr/t.zarr/g/zarr.json")
    assert fs.ls("zarr/t.zarr/g/sub") == []
    # the still-empty directory becomes an array when an array's zarr.json is written
    meta = zarr_array_meta((5, 6), "<u2", (4, 4))
    fs.write_json("zarr/t.zarr/g/sub/zarr.json", meta)
    assert fs.read_json("zarr/t.zarr/g/sub/zarr.json")["node_type"] == "array"
    assert_values(fs, "t", "g/sub", np.zeros((5, 6), "<u2"))
    # writing a group's zarr.json makes an empty group's metadata visible
    fs.mkdir("zarr/t.zarr/h")
    fs.write_json("zarr/t.zarr/h/zarr.json", zarr_group_meta({"a": 1}))
    assert fs.ls("zarr/t.zarr/h") == ["zarr.json"]
    assert fs.read_json("n5/t.n5/h/attributes.json") == {"a": 1}


GROUP_ATTRS = {"i": 3, "neg": -7, "f": 2.5, "s": "hello", "b": True, "li": [1, 2, 3], "lf": [1.5, 2.5],
               "ls": ["x", "y"], "lb": [True, False]}
GROUP_TEXT_ATTRS = {"nested": {"a": [1, {"b": 2}]}, "mixed": [1, "a"], "deep": [[1, 2], [3, 4]], "none": None,
                    "empty": [], "looks_json": "[1, 2]", "null_text": "null"}


def test_zarr_write_group_zarr_json_sets_attributes(zfs):
    """Numbers, strings, booleans and flat lists become typed attributes; other JSON is kept
    as its text (HDF5 shows the text; the JSON views give back the value written: a string
    that looks like JSON stays a string). Every view shows them."""
    fs = zfs
    fs.mkdir("zarr/t.zarr/g")
    for path in ("zarr/t.zarr/zarr.json", "zarr/t.zarr/g/zarr.json"):
        fs.write_json(path, zarr_group_meta({**GROUP_ATTRS, **GROUP_TEXT_ATTRS}))
    want = {**GROUP_ATTRS, **GROUP_TEXT_ATTRS}
    for zpath, npath in (("zarr/t.zarr", "n5/t.n5"), ("zarr/t.zarr/g", "n5/t.n5/g")):
        got = fs.read_json(f"{zpath}/zarr.json")
        assert got["node_type"] == "group"
        assert got["attributes"] == want
        assert n5_user_attrs(fs.read_json(f"{npath}/attributes.json")) == want
    with h5_view(fs, "t") as f:
        for obj in (f, f["g"]):
            assert obj.attrs["i"] == 3 and obj.attrs["f"] == 2.5 and obj.attrs["b"]
            assert obj.attrs["s"] in ("hello", b"hello")
            assert list(obj.attrs["li"]) == [1, 2, 3] and list(obj.attrs["lf"]) == [1.5, 2.5]
            assert np.issubdtype(np.asarray(obj.attrs["li"]).dtype, np.integer)
            assert np.issubdtype(np.asarray(obj.attrs["lf"]).dtype, np.floating)
            text = obj.attrs["nested"]
            assert json.loads(text.decode() if isinstance(text, bytes) else text) == GROUP_TEXT_ATTRS["nested"]
    # a rewrite replaces the attributes: changed, added, removed
    fs.write_json("zarr/t.zarr/g/zarr.json", zarr_group_meta({"i": 4, "new": "x"}))
    assert fs.read_json("zarr/t.zarr/g/zarr.json")["attributes"] == {"i": 4, "new": "x"}
    assert n5_user_attrs(fs.read_json("n5/t.n5/g/attributes.json")) == {"i": 4, "new": "x"}


# (dtype, codecs, shards (None: unsharded), shape, inner chunks)
ARRAY_CASES = {
    "u2-zstd-sharded": ("<u2", ("zstd",), (8, 8), (10, 13), (4, 4)),
    "i4be-gzip-unsharded": (">i4", ("gzip",), None, (9, 7), (4, 4)),
    "f4-blosc-sharded": ("<f4", ("blosc",), (8, 4), (11, 9), (4, 4)),
    "i8-crc32c-unsharded": ("<i8", ("crc32c",), None, (5, 6), (2, 4)),
    "u1-bytes-sharded": ("|u1", (), (4, 8), (9, 17), (4, 4)),
    "f8-gzip-crc32c-sharded": ("<f8", ("gzip", "crc32c"), (4, 4), (6, 7), (2, 2)),
    "u2be-zstd-unsharded": (">u2", ("zstd",), None, (7, 5), (3, 3)),
    "i2-bytes-unsharded-3d": ("<i2", (), None, (5, 6, 7), (2, 3, 4)),
    "f4be-zstd-sharded-3d": (">f4", ("zstd",), (4, 6, 4), (6, 8, 10), (2, 3, 4)),
    "bool-zstd-unsharded": ("bool", ("zstd",), None, (6, 9), (4, 4)),
    "i1-blosc-crc32c-sharded": ("|i1", ("blosc", "crc32c"), (8, 8), (12, 12), (4, 4)),
}


@pytest.mark.parametrize("case", sorted(ARRAY_CASES))
def test_zarr_write_array_zarr_json_creates_dataset(zfs, tmp_path, case):
    """An array's zarr.json in a new directory creates a dataset with its data type, shape,
    chunks, codecs, fill value, attributes and dimension names; the writer's shard shape
    (or no sharding) is kept, so the chunk files are where it put them."""
    fs = zfs
    dt, codecs, shards, shape, chunks = ARRAY_CASES[case]
    fill = True if np.dtype(dt).kind == "b" else 3
    dims = [f"d{i}" for i in range(len(shape))]
    meta = zarr_array_meta(shape, dt, chunks, shards=shards, codecs=codecs, fill=fill,
                           attributes={"unit": "um", "scale": 0.5}, dimension_names=dims)
    path = f"zarr/t.zarr/{case}"
    fs.mkdir(path)
    fs.write_json(f"{path}/zarr.json", meta)
    got = fs.read_json(f"{path}/zarr.json")
    assert got["node_type"] == "array" and got["shape"] == list(shape)
    assert got["data_type"] == meta["data_type"] and got["fill_value"] == meta["fill_value"]
    assert got["chunk_grid"] == meta["chunk_grid"]
    assert got["chunk_key_encoding"] == meta["chunk_key_encoding"]
    assert got.get("dimension_names") == dims
    assert {k: v for k, v in got["attributes"].items() if k != "_ARRAY_DIMENSIONS"} == {"unit": "um", "scale": 0.5}
    glay, wlay = ZarrLayout(got), ZarrLayout(meta)
    assert glay.sharded == wlay.sharded and glay.inner == wlay.inner and glay.outer == wlay.outer
    assert glay.dtype.str == wlay.dtype.str  # the bytes codec's byte order is kept
    want_chain = wlay.chain  # as declared: a crc32c is served back (checked and computed, not stored)
    assert [c["name"] for c in glay.chain] == [c["name"] for c in want_chain]
    for g, w in zip(glay.chain[1:], want_chain[1:]):
        assert g == w
    # nothing written yet: the fill value everywhere, no chunk files
    assert fs.ls(path) == ["zarr.json"]
    assert_values(fs, "t", case, np.full(shape, fill, dtype=dt))
    # the chunk files of a writer, read back through every view
    data = rng_data(shape, dt, seed=len(case))
    write_zarr_files(fs, path, meta, data)
    assert fs.walk_files(path) == sorted(["zarr.json"] + [
        wlay.key(p) for p in itertools.product(*(range(g) for g in wlay.file_grid))])
    assert_values(fs, "t", case, data)
    zarr = pytest.importorskip("zarr")
    copy = copy_tree(fs, "zarr/t.zarr", tmp_path / "t.zarr")
    np.testing.assert_array_equal(zarr.open_array(str(copy / case), mode="r")[...], data)
    with h5_view(fs, "t") as f:
        np.testing.assert_array_equal(f[case][()], data)
        assert f[case].attrs["unit"] in ("um", b"um")


def test_zarr_rewrite_array_zarr_json_applies_attribute_changes(zfs):
    fs = zfs
    data = rng_data((6, 7), "<i2")
    meta = zarr_array_meta((6, 7), "<i2", (4, 4), shards=(4, 8), attributes={"keep": 1, "change": "a", "drop": True})
    make_zarr(fs, "zarr/t.zarr/a", meta, data)
    snap_chunks = {k: fs.read_file(f"zarr/t.zarr/a/{k}") for k in fs.walk_files("zarr/t.zarr/a") if k.startswith("c/")}
    meta["attributes"] = {"keep": 1, "change": "b", "added": [1.5, 2.5]}
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    want = {"keep": 1, "change": "b", "added": [1.5, 2.5]}
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["attributes"] == want
    assert n5_user_attrs(fs.read_json("n5/t.n5/a/attributes.json")) == want
    assert_values(fs, "t", "a", data)
    assert {k: fs.read_file(f"zarr/t.zarr/a/{k}") for k in snap_chunks} == snap_chunks


def test_zarr_rewrite_array_zarr_json_keeps_dimension_names(zfs):
    """What zarr-python does on ``a.attrs['k'] = 1`` after creating an array with
    dimension_names: the rewritten zarr.json carries the same dimension_names."""
    fs = zfs
    meta = zarr_array_meta((4, 5), "<f4", (2, 2), dimension_names=["y", "x"])
    make_zarr(fs, "zarr/t.zarr/a", meta)
    meta["attributes"] = {"k": 1}
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    got = fs.read_json("zarr/t.zarr/a/zarr.json")
    assert got.get("dimension_names") == ["y", "x"]
    assert got["attributes"].get("k") == 1


@pytest.mark.parametrize("sharded", [False, True], ids=["unsharded", "sharded"])
def test_zarr_rewrite_array_zarr_json_shape_resizes(zfs, sharded):
    """A new shape resizes; chunks wholly outside it are deleted (a later grow shows the fill
    value there), chunks partly inside keep their data."""
    fs = zfs
    shape = (12, 10)
    meta = zarr_array_meta(shape, "<u2", (4, 4), shards=(8, 8) if sharded else None, fill=9)
    data = rng_data(shape, "<u2")
    make_zarr(fs, "zarr/t.zarr/a", meta, data)
    before_keys = set(fs.snapshot())
    meta["shape"] = [5, 10]  # rows 8..11 (chunk row 2) lie wholly outside; chunk row 1 partly
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["shape"] == [5, 10]
    assert fs.read_json("n5/t.n5/a/attributes.json")["dimensions"] == [10, 5]
    assert_values(fs, "t", "a", data[:5])
    gone = before_keys - set(fs.snapshot())
    assert len(gone) == 3, sorted(gone)  # the chunk objects of chunk row 2 (3 chunks across)
    n5_rows = {int(p.split("/")[1]) for p in fs.walk_files("n5/t.n5/a") if p != "attributes.json"}
    assert n5_rows == {0, 1}
    # growing again: the deleted chunks are the fill value, kept ones keep their data
    meta["shape"] = [12, 10]
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    want = data.copy()
    want[8:] = 9
    _, got = read_zarr_array(fs, "zarr/t.zarr/a")
    np.testing.assert_array_equal(got[:5], data[:5])
    np.testing.assert_array_equal(got[8:], 9)
    np.testing.assert_array_equal(got[:8], data[:8])  # inside the kept chunks, nothing was cleared


def _rewritten(meta: dict, change: str) -> dict:
    m = json.loads(json.dumps(meta))
    if change == "dtype":
        m["data_type"] = "float32"
    elif change == "signedness":
        m["data_type"] = "uint32"
    elif change == "chunk shape":
        m["codecs"][0]["configuration"]["chunk_shape"] = [2, 4]
    elif change == "fill value":
        m["fill_value"] = 8
    return m


@pytest.mark.parametrize("change", ["dtype", "signedness", "chunk shape", "fill value"])
def test_zarr_rewrite_array_zarr_json_type_chunk_fill_change_is_einval(zfs, caplog, change):
    fs = zfs
    meta = zarr_array_meta((8, 8), "<i4", (4, 4), shards=(8, 8), fill=7)
    data = rng_data((8, 8), "<i4")
    make_zarr(fs, "zarr/t.zarr/a", meta, data)
    refused(fs, errno.EINVAL, fs.write_json, "zarr/t.zarr/a/zarr.json", _rewritten(meta, change),
            caplog=caplog, names="zarr/t.zarr/a/zarr.json")
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["data_type"] == "int32"
    assert_values(fs, "t", "a", data)


def test_zarr_rewrite_array_zarr_json_with_nan_fill_value(zfs):
    fs = zfs
    meta = zarr_array_meta((8, 8), "<f4", (4, 4), fill=np.nan)
    make_zarr(fs, "zarr/t.zarr/a", meta)
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["fill_value"] == "NaN"
    meta["attributes"] = {"k": 1}
    meta["shape"] = [12, 8]
    fs.write_json("zarr/t.zarr/a/zarr.json", meta)
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["shape"] == [12, 8]


@pytest.mark.parametrize("codec", ["bytes", "zstd", "gzip", "crc32c", "blosc"])
def test_zarr_write_chunk_file_unsharded(zfs, codec):
    """The chunk is stored; bytes in the stored encoding are stored as written (a gzip member
    as the zlib stream it holds: the deflate data is not recompressed)."""
    fs = zfs
    codecs = () if codec == "bytes" else (codec,)
    meta = zarr_array_meta((8, 8), "<i2", (4, 4), codecs=codecs, fill=-1)
    lay = make_zarr(fs, "zarr/t.zarr/a", meta)
    block = rng_data((4, 4), "<i2", seed=1)
    blob = lay.encode_chunk(block)
    fs.mkdir("zarr/t.zarr/a/c")
    fs.mkdir("zarr/t.zarr/a/c/1")
    fs.write_file("zarr/t.zarr/a/c/1/0", blob)
    want = np.full((8, 8), -1, "<i2")
    want[4:, :4] = block
    assert_values(fs, "t", "a", want)
    assert fs.walk_files("zarr/t.zarr/a") == ["c/1/0", "zarr.json"]
    served = fs.read_file("zarr/t.zarr/a/c/1/0")
    if codec in ("bytes", "zstd", "blosc"):
        assert served == blob
    elif codec == "crc32c":
        assert served == blob  # the checksum is checked, not stored, and served back as declared
    else:
        assert gzip_body(served) == gzip_body(blob)
    # a rewrite replaces it
    block2 = block + 1
    fs.write_file("zarr/t.zarr/a/c/1/0", lay.encode_chunk(block2))
    want[4:, :4] = block2
    assert_values(fs, "t", "a", want)


def test_zarr_write_shard_file(zfs):
    """A shard's inner chunks are stored (each as written when in the stored encoding); inner
    chunks missing from a rewritten shard's index are deleted."""
    fs = zfs
    meta = zarr_array_meta((8, 12), "<u2", (4, 4), shards=(8, 8), codecs=("zstd",), fill=5)
    lay = make_zarr(fs, "zarr/t.zarr/a", meta)
    data = rng_data((8, 12), "<u2")
    padded = padded_to(lay, data)
    fs.makedirs("zarr/t.zarr/a/c/0")
    shard0 = lay.encode_file(outer_block(lay, padded, (0, 0)))
    fs.write_file("zarr/t.zarr/a/c/0/0", shard0)
    # an edge shard holds only the inner chunks inside the grid (column 2)
    fs.write_file("zarr/t.zarr/a/c/0/1", lay.encode_file(outer_block(lay, padded, (0, 1)), keep=[0, 2]))
    assert_values(fs, "t", "a", data)
    assert decode_shard(fs.read_file("zarr/t.zarr/a/c/0/0"), 4) == decode_shard(shard0, 4)
    # read-modify-write: chunk 1 replaced, chunk 2 dropped, others kept byte-identical
    parts = decode_shard(fs.read_file("zarr/t.zarr/a/c/0/0"), 4)
    new1 = np.full((4, 4), 77, "<u2")
    parts[1] = lay.encode_chunk(new1)
    del parts[2]
    fs.write_file("zarr/t.zarr/a/c/0/0", encode_shard(parts, 4))
    want = data.copy()
    want[:4, 4:8] = 77
    want[4:8, 0:4] = 5
    assert_values(fs, "t", "a", want)
    served = decode_shard(fs.read_file("zarr/t.zarr/a/c/0/0"), 4)
    assert sorted(served) == [0, 1, 3] and served[0] == parts[0] and served[3] == parts[3]
    # a writer whose zarr.json declares other codecs: its chunks are decoded and encoded with
    # the stored encoding (the view keeps showing zstd, with the crc32c it declared)
    gz_meta = zarr_array_meta((8, 12), "<u2", (4, 4), shards=(8, 8), codecs=("gzip", "crc32c"), fill=5)
    fs.write_json("zarr/t.zarr/a/zarr.json", gz_meta)
    fs.write_file("zarr/t.zarr/a/c/0/0", ZarrLayout(gz_meta).encode_file(outer_block(lay, padded, (0, 0))))
    want[:, :8] = data[:, :8]
    assert_values(fs, "t", "a", want)
    shown = ZarrLayout(fs.read_json("zarr/t.zarr/a/zarr.json"))
    assert [c["name"] for c in shown.chain] == ["bytes", "zstd", "crc32c"]
    for part in decode_shard(fs.read_file("zarr/t.zarr/a/c/0/0"), 4).values():
        assert part[:4] == b"\x28\xb5\x2f\xfd"  # zstd frames


def test_zarr_write_shard_file_with_index_at_start(zfs):
    """The index location the writer declared is read; the view serves its own layout."""
    fs = zfs
    meta = zarr_array_meta((8, 8), "<i4", (4, 4), shards=(8, 8), codecs=("zstd",))
    meta["codecs"][0]["configuration"]["index_location"] = "start"
    lay = make_zarr(fs, "zarr/t.zarr/a", meta)
    assert lay.index_location == "start"
    data = rng_data((8, 8), "<i4")
    fs.makedirs("zarr/t.zarr/a/c/0")
    fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_file(data, keep=[0, 3]))
    want = np.zeros((8, 8), "<i4")
    want[:4, :4], want[4:, 4:] = data[:4, :4], data[4:, 4:]
    assert_values(fs, "t", "a", want)


def test_zarr_write_shard_file_keeps_chunks_another_writer_stored(zfs, caplog):
    """Two processes read-modify-write one shard: inner chunks the second did not change —
    including its stale copy of a chunk the first replaced, and a chunk the first added after
    the second read the shard — are left as the first stored them."""
    fs = zfs
    meta = zarr_array_meta((8, 8), "<u2", (4, 4), shards=(8, 8), codecs=("zstd",))
    lay = make_zarr(fs, "zarr/t.zarr/a", meta)
    fs.makedirs("zarr/t.zarr/a/c/0")
    base = np.zeros((8, 8), "<u2")
    base[:4, :4], base[:4, 4:] = 1, 2
    fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_file(base, keep=[0, 1]))
    a, b = fs.as_pid(4_500_001), fs.as_pid(4_500_002)  # pids above pid_max: no such processes
    read_by_a = a.read_file("zarr/t.zarr/a/c/0/0")
    time.sleep(0.002)
    parts = decode_shard(b.read_file("zarr/t.zarr/a/c/0/0"), 4)
    parts[1] = lay.encode_chunk(np.full((4, 4), 20, "<u2"))
    parts[2] = lay.encode_chunk(np.full((4, 4), 30, "<u2"))
    b.write_file("zarr/t.zarr/a/c/0/0", encode_shard(parts, 4))
    mine = decode_shard(read_by_a, 4)
    mine[0] = lay.encode_chunk(np.full((4, 4), 10, "<u2"))
    a.write_file("zarr/t.zarr/a/c/0/0", encode_shard(mine, 4))
    want = np.zeros((8, 8), "<u2")
    want[:4, :4], want[:4, 4:], want[4:, :4] = 10, 20, 30
    assert_values(fs, "t", "a", want)


@pytest.mark.parametrize("how", ["shard rewritten with fewer chunks", "chunk file truncated to 0"])
def test_zarr_write_chunk_file_rewrite_by_same_process_deletes_missing_chunks(zfs, how):
    fs = zfs
    sharded = how.startswith("shard")
    meta = zarr_array_meta((8, 8), "<u2", (4, 4), shards=(8, 8) if sharded else None, codecs=("zstd",))
    lay = make_zarr(fs, "zarr/t.zarr/a", meta)
    fs.makedirs("zarr/t.zarr/a/c/0")
    if sharded:
        fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_file(np.ones((8, 8), "<u2")))
    else:
        fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_chunk(np.ones((4, 4), "<u2")))
    time.sleep(0.002)
    want = np.zeros((8, 8), "<u2")
    if sharded:
        fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_file(np.full((8, 8), 2, "<u2"), keep=[0]))
        want[:4, :4] = 2
    else:
        fs.truncate("zarr/t.zarr/a/c/0/0", 0)
    assert_values(fs, "t", "a", want)


def test_zarr_write_array_zarr_json_keeps_a_shard_shape_larger_than_the_array(zfs):
    fs = zfs
    meta = zarr_array_meta((3, 20), "<u2", (4, 4), shards=(8, 8), codecs=("zstd",))
    lay = make_zarr(fs, "zarr/t.zarr/a", meta)
    fs.makedirs("zarr/t.zarr/a/c/0")
    fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_file(np.ones((8, 8), "<u2"), keep=[0, 1]))
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["chunk_grid"] == meta["chunk_grid"]
    vals, mask = lay.decode_file(fs.read_file("zarr/t.zarr/a/c/0/0"))  # the writer reads its shard back
    np.testing.assert_array_equal(vals[:4], 1)
    assert mask[:4].all() and not mask[4:].any()


def test_zarr_write_chunk_file_by_the_views_own_metadata_is_accepted(zfs):
    fs = zfs
    meta = zarr_array_meta((8, 8), "<u2", (4, 4), codecs=("zstd", "crc32c"))
    make_zarr(fs, "zarr/t.zarr/a", meta, np.ones((8, 8), "<u2"))
    other = fs.as_pid(4_800_001)
    shown = ZarrLayout(other.read_json("zarr/t.zarr/a/zarr.json"))
    assert [c["name"] for c in shown.chain] == ["bytes", "zstd", "crc32c"]
    other.write_file("zarr/t.zarr/a/c/0/1", shown.encode_chunk(np.full((4, 4), 2, "<u2")))
    want = np.ones((8, 8), "<u2")
    want[:4, 4:] = 2
    assert_values(fs, "t", "a", want)


def test_n5_write_block_by_the_views_own_attributes_is_accepted(fs):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs((8, 8), "uint16", (4, 4), "zlib"))
    other = fs.as_pid(4_800_002)
    shown = other.read_json("n5/t.n5/d/attributes.json")
    assert shown["compression"]["type"] == "gzip"
    other.makedirs("n5/t.n5/d/0")
    block = rng_data((4, 4), ">u2")
    other.write_file("n5/t.n5/d/0/0", n5_block(block, shown["compression"]))
    want = np.zeros((8, 8), ">u2")
    want[:4, :4] = block
    assert_values(fs, "t", "d", want)


@pytest.mark.parametrize("sharded", [False, True], ids=["chunk", "shard"])
def test_zarr_unlink_chunk_or_shard_file(zfs, sharded):
    """``unlink`` deletes the file's chunks: readers get the fill value."""
    fs = zfs
    meta = zarr_array_meta((8, 8), "<f4", (4, 4), shards=(4, 8) if sharded else None, fill=-2.5)
    data = rng_data((8, 8), "<f4")
    make_zarr(fs, "zarr/t.zarr/a", meta, data)
    fs.unlink("zarr/t.zarr/a/c/1/0")
    want = data.copy()
    if sharded:
        want[4:, :] = -2.5
    else:
        want[4:, :4] = -2.5
    assert not fs.exists("zarr/t.zarr/a/c/1/0")
    assert_values(fs, "t", "a", want)  # the N5 view serves fill blocks for a non-zero fill


def test_zarr_unlink_array_zarr_json_deletes_array_and_chunks(zfs):
    fs = zfs
    before_array = fs.snapshot()
    meta = zarr_array_meta((8, 8), "<i2", (4, 4), shards=(8, 8), attributes={"x": 1})
    make_zarr(fs, "zarr/t.zarr/a", meta, rng_data((8, 8), "<i2"))
    fs.unlink("zarr/t.zarr/a/zarr.json")
    assert not fs.exists("zarr/t.zarr/a/zarr.json")
    assert fs.is_dir("zarr/t.zarr/a") and fs.walk_files("zarr/t.zarr/a") == []
    assert fs.ls("n5/t.n5/a") == []
    with h5_view(fs, "t") as f:
        assert "a" in f and not hasattr(f["a"], "shape")  # an (empty) group now
    after = fs.snapshot()
    for key in set(after) - set(before_array):  # only group metadata may be new: no chunk left
        json.loads(after[key])
    # the empty directory takes a new array, with nothing of the old one in it
    meta2 = zarr_array_meta((8, 8), "<f8", (4, 4), fill=0.5)
    fs.write_json("zarr/t.zarr/a/zarr.json", meta2)
    assert_values(fs, "t", "a", np.full((8, 8), 0.5))


def test_zarr_unlink_group_zarr_json_clears_attributes(zfs):
    fs = zfs
    fs.write_json("zarr/t.zarr/zarr.json", zarr_group_meta({"title": "x"}))
    fs.mkdir("zarr/t.zarr/g")
    fs.write_json("zarr/t.zarr/g/zarr.json", zarr_group_meta({"kind": "raw"}))
    fs.mkdir("zarr/t.zarr/g/member")
    fs.unlink("zarr/t.zarr/g/zarr.json")
    assert fs.ls("zarr/t.zarr/g") == ["member"]  # gone, as unlinked: a directory again
    assert fs.ls("n5/t.n5/g") == ["member"]
    with h5_view(fs, "t") as f:
        assert dict(f["g"].attrs) == {} and list(f["g"]) == ["member"]
    fs.unlink("zarr/t.zarr/zarr.json")
    assert fs.read_json("zarr/t.zarr/zarr.json") == zarr_group_meta({})  # the root stays a group
    fs.rmdir("zarr/t.zarr/g/member")
    fs.mkdir("zarr/t.zarr/h")
    fs.write_json("zarr/t.zarr/h/zarr.json", zarr_group_meta({"a": 1}))
    fs.unlink("zarr/t.zarr/h/zarr.json")
    assert fs.ls("zarr/t.zarr/h") == []  # an empty group without attributes: no metadata shown


def test_zarr_rmdir_empty_deletes_nonempty_is_enotempty(zfs, caplog):
    fs = zfs
    fs.mkdir("zarr/t.zarr/g")
    fs.mkdir("zarr/t.zarr/g/inner")
    refused(fs, errno.ENOTEMPTY, fs.rmdir, "zarr/t.zarr/g", caplog=caplog, names="zarr/t.zarr/g")
    meta = zarr_array_meta((4, 4), "<u1", (2, 2))
    make_zarr(fs, "zarr/t.zarr/arr", meta, rng_data((4, 4), "<u1"))
    refused(fs, errno.ENOTEMPTY, fs.rmdir, "zarr/t.zarr/arr", caplog=caplog, names="zarr/t.zarr/arr")
    refused(fs, errno.ENOTEMPTY, fs.rmdir, "zarr/t.zarr/arr/c")  # chunk files below
    # empty ones go: a group, an array without chunks
    fs.rmdir("zarr/t.zarr/g/inner")
    fs.rmdir("zarr/t.zarr/g")
    make_zarr(fs, "zarr/t.zarr/nochunks", meta)
    refused(fs, errno.ENOTEMPTY, fs.rmdir, "zarr/t.zarr/nochunks")  # its zarr.json is in it
    fs.unlink("zarr/t.zarr/nochunks/zarr.json")
    fs.rmdir("zarr/t.zarr/nochunks")
    assert fs.ls("zarr/t.zarr") == ["arr", "zarr.json"]
    assert fs.ls("n5/t.n5") == ["arr", "attributes.json"]
    # rm -r removes the files first and so works
    fs.rm_r("zarr/t.zarr/arr")
    assert fs.ls("zarr/t.zarr") == ["zarr.json"]
    with h5_view(fs, "t") as f:
        assert list(f.keys()) == []
    # a domain directory without members goes too
    fs.rmdir("zarr/t.zarr")
    assert fs.domains() == [] and fs.ls("zarr") == []


def test_zarr_rename_of_directory_or_file_not_being_written_is_exdev(zfs, caplog):
    fs = zfs
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((4, 4), "<u1", (2, 2)), rng_data((4, 4), "<u1"))
    fs.mkdir("zarr/t.zarr/g")
    for src, dst in (("zarr/t.zarr/a", "zarr/t.zarr/b"), ("zarr/t.zarr/g", "zarr/t.zarr/g2"),
                     ("zarr/t.zarr/a/zarr.json", "zarr/t.zarr/a/zarr2.json"),
                     ("zarr/t.zarr/a/c/0/0", "zarr/t.zarr/a/c/0/1"), ("zarr/t.zarr/a", "zarr/t.zarr/g/a")):
        refused(fs, errno.EXDEV, fs.rename, src, dst, caplog=caplog, names=src)


def test_zarr_rename_or_link_of_file_being_written_is_ingested(zfs):
    """tensorstore writes ``X.__lock`` and renames it onto ``X``; zarr-python links a
    temporary to the final name: both are ingested there, lock files stay in memory only."""
    fs = zfs
    fs.mkdir("zarr/t.zarr/a")
    meta = zarr_array_meta((8, 8), "<i2", (4, 4), codecs=("zstd",))
    lay = ZarrLayout(meta)
    before = fs.snapshot()
    h = fs.open_file("zarr/t.zarr/a/zarr.json.__lock")
    h.write(json.dumps(meta).encode())
    h.close()
    assert fs.snapshot() == before  # a temporary file: nothing stored
    assert "zarr.json.__lock" in fs.ls("zarr/t.zarr/a")
    fs.rename("zarr/t.zarr/a/zarr.json.__lock", "zarr/t.zarr/a/zarr.json")
    assert fs.ls("zarr/t.zarr/a") == ["zarr.json"]
    fs.makedirs("zarr/t.zarr/a/c/0")
    h = fs.open_file("zarr/t.zarr/a/c/0/1.__lock")
    h.write(lay.encode_chunk(np.full((4, 4), 4, "<i2")))
    h.close()
    fs.rename("zarr/t.zarr/a/c/0/1.__lock", "zarr/t.zarr/a/c/0/1")
    # zarr-python: write a temporary, link it to the final name, unlink the temporary
    h = fs.open_file("zarr/t.zarr/a/c/0/.0.partial")
    h.write(lay.encode_chunk(np.full((4, 4), 3, "<i2")))
    h.close()
    fs.link("zarr/t.zarr/a/c/0/.0.partial", "zarr/t.zarr/a/c/0/0")
    fs.unlink("zarr/t.zarr/a/c/0/.0.partial")
    assert fs.ls("zarr/t.zarr/a/c/0") == ["0", "1"]
    want = np.zeros((8, 8), "<i2")
    want[:4, :4], want[:4, 4:] = 3, 4
    assert_values(fs, "t", "a", want)
    # a temporary that does not decode is refused at the rename, and nothing changes
    h = fs.open_file("zarr/t.zarr/a/c/0/0.__lock")
    h.write(b"not a chunk")
    h.close()
    refused(fs, errno.EINVAL, fs.rename, "zarr/t.zarr/a/c/0/0.__lock", "zarr/t.zarr/a/c/0/0")
    assert_values(fs, "t", "a", want)


def test_zarr_truncate_and_ftruncate(zfs):
    """Allowed on files being written; a path truncated outside an open file is ingested at once."""
    fs = zfs
    meta = zarr_array_meta((8, 8), "<u2", (4, 4), codecs=("zstd",), fill=6)
    data = rng_data((8, 8), "<u2")
    lay = make_zarr(fs, "zarr/t.zarr/a", meta, data)
    # ftruncate of a file being written (tools that preallocate or rewrite in place)
    h = fs.open_file("zarr/t.zarr/a/c/0/0", os.O_WRONLY)
    h.write(b"x" * 5000)
    h.ftruncate(0)
    new = np.full((4, 4), 11, "<u2")
    h.write(lay.encode_chunk(new))
    h.close()
    want = data.copy()
    want[:4, :4] = 11
    assert_values(fs, "t", "a", want)
    # truncate(2) of a path: ingested at once
    refused(fs, errno.EINVAL, fs.truncate, "zarr/t.zarr/a/zarr.json", 0)  # empty zarr.json: not JSON
    refused(fs, errno.EINVAL, fs.truncate, "zarr/t.zarr/a/c/0/1", 7)  # a cut chunk does not decode
    fs.as_pid(4_600_001).truncate("zarr/t.zarr/a/c/1/1", 0)  # `truncate -s 0`: an empty file holds no chunk
    want[4:, 4:] = 6
    assert not fs.exists("zarr/t.zarr/a/c/1/1")
    assert_values(fs, "t", "a", want)


def test_zarr_chmod_chown_utime_are_accepted_and_not_stored(zfs):
    fs = zfs
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((4, 4), "<u1", (2, 2)), rng_data((4, 4), "<u1"))
    for path in ("zarr/t.zarr", "zarr/t.zarr/a", "zarr/t.zarr/a/zarr.json", "zarr/t.zarr/a/c/0/0"):
        unchanged(fs, lambda p=path: fs.setattr(p, mode=0o600))
        unchanged(fs, lambda p=path: fs.setattr(p, uid=os.getuid(), gid=os.getgid()))
        unchanged(fs, lambda p=path: fs.setattr(p, atime_ns=10 ** 18, mtime_ns=10 ** 18))


def test_zarr_symlink_mknod_are_eperm_and_xattrs_not_supported(zfs):
    fs = zfs
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((4, 4), "<u1", (2, 2)), rng_data((4, 4), "<u1"))
    refused(fs, errno.EPERM, fs.symlink, "zarr/t.zarr/link", "a")
    refused(fs, errno.EPERM, fs.symlink, "zarr/t.zarr/a/c/0/9", "0")
    refused(fs, errno.EPERM, fs.mknod, "zarr/t.zarr/fifo")
    # ENOTSUP, not EPERM: cp -a / mv copying ACLs and user.* attributes skip it quietly
    refused(fs, errno.ENOTSUP, fs.setxattr, "zarr/t.zarr/a/zarr.json", "system.posix_acl_access", b"\x02")
    refused(fs, errno.ENOTSUP, fs.setxattr, "zarr/t.zarr/a/zarr.json", "user.x", b"1")
    refused(fs, errno.ENODATA, fs.removexattr, "zarr/t.zarr/a/zarr.json", "user.x")


TIME_FIELD_STRUCTURED = {"name": "structured", "configuration": {"fields": [
    ["t", {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}}]]}}
UNWRITABLE_ARRAYS = {
    # variable-length bytes are written (test_zarr_bytes_writes_fs.py); vlen-bytes of numbers are not
    "vlen-bytes of int32": ({"data_type": "int32", "fill_value": 0, "codecs": [{"name": "vlen-bytes"}]},
                            {errno.EOPNOTSUPP}),
    # structured arrays are written (test_zarr_n5_explore8_fs.py); a time field has no stored form
    "structured with a time field": ({"data_type": TIME_FIELD_STRUCTURED},
                                     {errno.EOPNOTSUPP}),
    # "default" and "v2" key encodings, either separator, are kept (test_zarr_n5_explore5_ops.py)
    "unknown chunk key encoding": ({"chunk_key_encoding": {"name": "v3", "configuration": {"separator": "."}}},
                                   {errno.EINVAL, errno.EOPNOTSUPP}),
}


@pytest.mark.parametrize("case", sorted(UNWRITABLE_ARRAYS))
def test_zarr_unwritable_array_types_are_refused(zfs, caplog, case):
    """Variable-length bytes, structured types and other chunk key encodings: EOPNOTSUPP or EINVAL."""
    fs = zfs
    fs.mkdir("zarr/t.zarr/a")
    change, codes = UNWRITABLE_ARRAYS[case]
    meta = {**zarr_array_meta((4, 4), "<i4", (2, 2)), **change}
    refused(fs, codes, fs.write_json, "zarr/t.zarr/a/zarr.json", meta, caplog=caplog, names="zarr/t.zarr/a/zarr.json")


@pytest.mark.parametrize("shape,chunks,why", [
    ((2**70, 4), (2, 2), "2**63-1"),  # JSON takes it; int64 extents, indexes and chunk numbers do not
    ((2**62, 2**62), (1, 1), "more chunks than can be counted"),
    ((4, 2**40), (4, 2**33), "below 2**32"),  # HDF5's layout message holds 32-bit chunk extents
    ((2**20, 2**20), (2**16, 2**16), "below 4 GiB"),  # libhdf5 refuses chunks of 4 GiB or more
])
def test_zarr_geometry_no_view_can_hold_is_refused(zfs, caplog, shape, chunks, why):
    """A new array, and a resize of an existing one, that the store or the HDF5 view of the
    domain could not hold: EINVAL naming why, and the store as it was (no dataset JSON that
    every later read of the array, and ``polyfs check``, would fail on)."""
    fs = zfs
    fs.mkdir("zarr/t.zarr/new")
    refused(fs, errno.EINVAL, fs.write_json, "zarr/t.zarr/new/zarr.json", zarr_array_meta(shape, "<i4", chunks),
            caplog=caplog, names=why)
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((4, 4), "<i4", (2, 2)), np.arange(16, dtype="<i4").reshape(4, 4))
    if chunks == (2, 2):
        refused(fs, errno.EINVAL, fs.write_json, "zarr/t.zarr/a/zarr.json", zarr_array_meta(shape, "<i4", chunks),
                caplog=caplog, names=why)
    assert_values(fs, "t", "a", np.arange(16, dtype="<i4").reshape(4, 4))


def test_zarr_array_at_domain_root_is_eperm(zfs):
    refused(zfs, errno.EPERM, zfs.write_json, "zarr/t.zarr/zarr.json", zarr_array_meta((4, 4), "<i4", (2, 2)))
    assert zfs.read_json("zarr/t.zarr/zarr.json")["node_type"] == "group"


# =============================================================================================
# N5 view
# =============================================================================================
def test_a_deflate_chunk_with_bytes_after_its_stream_is_refused(fs, caplog):
    """zlib ignores what follows a stream's end; stored as written, those bytes would end up
    inside the gzip member the Zarr and N5 views splice from the stream, and every read of
    the chunk there would fail its CRC. Refused before the store is touched."""
    comp = {"type": "gzip", "level": 5, "useZlib": True}  # a zlib stream: stored as written
    fs.mkdir("n5/z.n5")
    fs.mkdir("n5/z.n5/d")
    fs.write_json("n5/z.n5/d/attributes.json", n5_attrs((4, 4), ">i4", (4, 4), comp))
    fs.makedirs("n5/z.n5/d/0")
    want = np.arange(16, dtype=">i4").reshape(4, 4)
    fs.write_file("n5/z.n5/d/0/0", n5_block(want, comp))
    refused(fs, errno.EINVAL, fs.write_file, "n5/z.n5/d/0/0", n5_block(want + 1, comp) + b"trailing",
            caplog=caplog, names="does not end with its stream")
    assert_values(fs, "z", "d", want)


def test_n5_mkdir_name_n5_creates_domain(fs):
    fs.mkdir("n5/vol.n5")
    assert fs.domains() == ["/vol.h5"]
    assert "vol.zarr" in fs.ls("zarr") and "vol.n5" in fs.ls("n5")
    assert fs.ls("n5/vol.n5") == ["attributes.json"]  # a container has its version (z5py needs it)
    assert fs.read_json("n5/vol.n5/attributes.json").get("n5")
    assert fs.ls("zarr/vol.zarr") == []  # a directory, as mkdir made it, until zarr.json is written
    fs.write_json("n5/vol.n5/attributes.json", {"n5": "2.0.0", "a": 1})
    assert fs.read_json("n5/vol.n5/attributes.json") == {"n5": "4.0.0", "a": 1}  # the view's version
    assert fs.read_json("zarr/vol.zarr/zarr.json") == zarr_group_meta({"a": 1})
    refused(fs, errno.EPERM, fs.mkdir, "n5/vol.zarr")  # the N5 view makes <name>.n5 domains only
    refused(fs, errno.EEXIST, fs.mkdir, "n5/vol.n5")


def test_n5_mkdir_creates_group_hidden_while_empty(fs):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/g")
    assert fs.ls("n5/t.n5/g") == [] and fs.ls("zarr/t.zarr/g") == []
    fs.mkdir("n5/t.n5/g/h")
    assert fs.ls("n5/t.n5/g") == ["h"]  # N5 groups need no attributes.json
    fs.write_json("n5/t.n5/g/h/attributes.json", n5_attrs((3, 4), "int16", (2, 2)))
    assert_values(fs, "t", "g/h", np.zeros((3, 4), "i2"))


def test_n5_write_attributes_json_without_dimensions_sets_group_attributes(fs):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/g")
    attrs = {"n5": "2.0.0", **GROUP_ATTRS, **GROUP_TEXT_ATTRS}
    fs.write_json("n5/t.n5/attributes.json", attrs)
    fs.write_json("n5/t.n5/g/attributes.json", attrs)
    want = {**GROUP_ATTRS, **GROUP_TEXT_ATTRS}
    for npath, zpath in (("n5/t.n5", "zarr/t.zarr"), ("n5/t.n5/g", "zarr/t.zarr/g")):
        got = fs.read_json(f"{npath}/attributes.json")
        assert n5_user_attrs(got) == want  # the written "n5" version key is not an attribute
        assert fs.read_json(f"{zpath}/zarr.json")["attributes"] == want
    assert "n5" not in fs.read_json("zarr/t.zarr/zarr.json")["attributes"]
    fs.write_json("n5/t.n5/g/attributes.json", {"i": 5})
    assert n5_user_attrs(fs.read_json("n5/t.n5/g/attributes.json")) == {"i": 5}


@pytest.mark.parametrize("comp", ["raw", "gzip", "zlib", "zstd", "bzip2", "blosc"])
def test_n5_write_attributes_json_with_dimensions_creates_dataset(fs, tmp_path, comp):
    """A dataset, big-endian as N5 stores it, with the compression written; values through
    both views (blocks written by hand, edge blocks truncated as z5py writes them)."""
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    shape, block = (9, 7, 5), (4, 4, 2)
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs(shape, "uint16", block, comp, unit="nm", res=[1, 2, 3]))
    got = fs.read_json("n5/t.n5/d/attributes.json")
    assert got["dimensions"] == [5, 7, 9] and got["blockSize"] == [2, 4, 4] and got["dataType"] == "uint16"
    assert n5_user_attrs(got) == {"unit": "nm", "res": [1, 2, 3]}
    z = fs.read_json("zarr/t.zarr/d/zarr.json")
    lay = ZarrLayout(z)
    assert z["shape"] == list(shape) and lay.inner == block and lay.dtype.str == ">u2"
    assert z["attributes"] == {"unit": "nm", "res": [1, 2, 3]}
    data = rng_data(shape, ">u2")
    write_n5_blocks(fs, "n5/t.n5/d", data, block, comp)
    assert_values(fs, "t", "d", data)
    zarr = pytest.importorskip("zarr")
    copy = copy_tree(fs, "zarr/t.zarr", tmp_path / "t.zarr")
    np.testing.assert_array_equal(zarr.open_array(str(copy / "d"), mode="r")[...], data)


def test_n5_rewrite_attributes_json_updates_dataset(fs):
    """Other keys are attributes; a new ``dimensions`` resizes (blocks wholly outside go);
    attributes the N5 view does not show are kept."""
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    shape, block = (10, 7), (4, 4)
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs(shape, "int32", block, "zstd", a=1, b="x"))
    data = rng_data(shape, ">i4")
    write_n5_blocks(fs, "n5/t.n5/d", data, block, "zstd")
    # an attribute only the Zarr view shows: "n5" (the N5 view keeps that key for its version)
    z = fs.read_json("zarr/t.zarr/d/zarr.json")
    z["attributes"] = {"a": 1, "b": "x", "n5": "hidden in N5"}
    fs.write_json("zarr/t.zarr/d/zarr.json", z)
    assert "n5" not in fs.read_json("n5/t.n5/d/attributes.json")
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs((6, 7), "int32", block, "zstd", a=2, c=[1, 2]))
    got = fs.read_json("n5/t.n5/d/attributes.json")
    assert got["dimensions"] == [7, 6] and n5_user_attrs(got) == {"a": 2, "c": [1, 2]}
    assert fs.read_json("zarr/t.zarr/d/zarr.json")["attributes"] == {"a": 2, "c": [1, 2], "n5": "hidden in N5"}
    assert_values(fs, "t", "d", data[:6])
    assert sorted(fs.walk_files("n5/t.n5/d")) == ["0/0", "0/1", "1/0", "1/1", "attributes.json"]


@pytest.mark.parametrize("change", ["dataType", "blockSize", "dataset keys dropped"])
def test_n5_rewrite_attributes_json_type_or_block_change_is_einval(fs, caplog, change):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs((8, 4), "uint16", (4, 4), "raw"))
    data = rng_data((8, 4), ">u2")
    write_n5_blocks(fs, "n5/t.n5/d", data, (4, 4))
    bad = {"dataType": n5_attrs((8, 4), "float32", (4, 4)), "blockSize": n5_attrs((8, 4), "uint16", (2, 4)),
           "dataset keys dropped": {"unit": "um"}}[change]
    refused(fs, errno.EINVAL, fs.write_json, "n5/t.n5/d/attributes.json", bad, caplog=caplog,
            names="n5/t.n5/d/attributes.json")
    assert_values(fs, "t", "d", data)


def test_n5_write_block_file_stores_chunk_at_reversed_position(fs):
    """Block ``i/j/k`` is the chunk at grid position ``(k, j, i)``."""
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    shape, block = (4, 6, 10), (2, 3, 5)
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs(shape, "int8", block, "gzip"))
    fs.makedirs("n5/t.n5/d/1/0")
    blk = rng_data(block, "i1")
    fs.write_file("n5/t.n5/d/1/0/1", n5_block(blk, "gzip"))  # i=1 (fastest), j=0, k=1
    want = np.zeros(shape, "i1")
    want[2:4, 0:3, 5:10] = blk
    assert_values(fs, "t", "d", want)
    assert fs.walk_files("n5/t.n5/d") == ["1/0/1", "attributes.json"]


def test_n5_write_truncated_edge_block_is_padded_with_fill(zfs):
    """z5py writes edge blocks cut to the array; they are padded with the fill value (here an
    array made through the Zarr view with fill 7)."""
    fs = zfs
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((6, 10), "<i4", (4, 4), fill=7))
    edge = rng_data((2, 2), ">i4")
    fs.makedirs("n5/t.n5/a/2")
    fs.write_file("n5/t.n5/a/2/1", n5_block(edge, "raw"))  # rows 4..5, cols 8..9
    want = np.full((6, 10), 7, "<i4")
    want[4:6, 8:10] = edge
    assert_values(fs, "t", "a", want)
    # the stored chunk is full-size: the padding shows where the Zarr view serves whole chunks
    lay = ZarrLayout(fs.read_json("zarr/t.zarr/a/zarr.json"))
    blob = fs.read_file(f"zarr/t.zarr/a/{lay.key((1, 2))}")
    full, _ = lay.decode_file(blob)
    np.testing.assert_array_equal(full[:2, :2], edge)
    np.testing.assert_array_equal(full[2:, :], 7)
    np.testing.assert_array_equal(full[:, 2:], 7)


@pytest.mark.parametrize("comp", ["raw", "zstd", "bzip2", "blosc", "gzip"])
def test_n5_write_block_in_stored_encoding_is_stored_as_written(fs, comp):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs((8, 8), "float32", (4, 4), comp))
    blob = n5_block(rng_data((4, 4), ">f4"), comp)
    fs.makedirs("n5/t.n5/d/1")
    fs.write_file("n5/t.n5/d/1/0", blob)
    served = fs.read_file("n5/t.n5/d/1/0")
    if comp == "gzip":
        head = 4 + 4 * 2  # mode, rank, two dims
        assert served[:head] == blob[:head] and gzip_body(served[head:]) == gzip_body(blob[head:])
    else:
        assert served == blob


def test_n5_unlink_block_deletes_chunk(fs):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs((8, 8), "uint8", (4, 4), "gzip"))
    data = rng_data((8, 8), "u1")
    write_n5_blocks(fs, "n5/t.n5/d", data, (4, 4), "gzip")
    fs.unlink("n5/t.n5/d/1/0")  # i=1 (columns 4..7), j=0 (rows 0..3)
    want = data.copy()
    want[0:4, 4:8] = 0
    assert not fs.exists("n5/t.n5/d/1/0")
    assert_values(fs, "t", "d", want)


def test_n5_rmdir_unlink_attributes_json_and_renames_as_for_zarr(fs, caplog):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/g")
    fs.mkdir("n5/t.n5/g/d")
    fs.write_json("n5/t.n5/g/d/attributes.json", n5_attrs((4, 4), "int16", (2, 2), "raw", x=1))
    write_n5_blocks(fs, "n5/t.n5/g/d", rng_data((4, 4), ">i2"), (2, 2))
    refused(fs, errno.ENOTEMPTY, fs.rmdir, "n5/t.n5/g")
    refused(fs, errno.ENOTEMPTY, fs.rmdir, "n5/t.n5/g/d")
    refused(fs, errno.EXDEV, fs.rename, "n5/t.n5/g/d", "n5/t.n5/g/e", caplog=caplog, names="n5/t.n5/g/d")
    refused(fs, errno.EXDEV, fs.rename, "n5/t.n5/g/d/0/0", "n5/t.n5/g/d/0/1")
    # unlink attributes.json of a dataset: the dataset and its chunks go, the directory stays
    fs.unlink("n5/t.n5/g/d/attributes.json")
    assert fs.is_dir("n5/t.n5/g/d") and "attributes.json" not in fs.ls("n5/t.n5/g/d")
    assert fs.walk_files("zarr/t.zarr/g/d") == []
    fs.rm_r("n5/t.n5/g/d")
    # unlink attributes.json of a group: its attributes are cleared
    fs.write_json("n5/t.n5/g/attributes.json", {"a": 1})
    fs.unlink("n5/t.n5/g/attributes.json")
    assert "attributes.json" not in fs.ls("n5/t.n5/g")  # empty group, no attributes: hidden
    assert fs.ls("zarr/t.zarr/g") == []
    fs.rmdir("n5/t.n5/g")
    assert fs.ls("n5/t.n5") == ["attributes.json"]  # the root: an N5 container has its version


def test_n5_rewrite_attributes_json_of_an_array_with_a_fill_value(zfs):
    fs = zfs
    data = rng_data((6, 5), "<u2")
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((6, 5), "<u2", (4, 4), fill=7), data)
    attrs = fs.read_json("n5/t.n5/a/attributes.json")
    attrs["unit"] = "nm"
    attrs["dimensions"] = [5, 3]  # C order (3, 5)
    fs.write_json("n5/t.n5/a/attributes.json", attrs)
    assert n5_user_attrs(fs.read_json("n5/t.n5/a/attributes.json")) == {"unit": "nm"}
    assert fs.read_json("zarr/t.zarr/a/zarr.json")["fill_value"] == 7
    assert_values(fs, "t", "a", data[:3])


@pytest.mark.parametrize("view", ["zarr", "n5"])
def test_rm_r_of_an_array_whose_chunk_directories_the_view_made(fs, view):
    fs.mkdir("zarr/t.zarr")
    meta = zarr_array_meta((8, 8), "<u2", (4, 4))
    make_zarr(fs, "zarr/t.zarr/a", meta, rng_data((8, 8), "<u2"))  # its c/<i> directories are mkdir'ed ...
    fresh = fs.fresh()  # ... in this mount only: another mount (or this one after a restart) has the view's
    fresh.rm_r(f"{view}/t.{view}/a")
    # the root: a directory mkdir made, no metadata written; N5's root always has its version
    assert fresh.ls(f"{view}/t.{view}") == {"zarr": [], "n5": ["attributes.json"]}[view]


def test_rm_rf_of_an_array_with_a_directory_made_inside_a_view_made_one(zfs):
    fs = zfs
    meta = zarr_array_meta((8, 8), "<u2", (4, 4))
    lay = make_zarr(fs, "zarr/t.zarr/a", meta)
    fs.makedirs("n5/t.n5/a/0")
    fs.write_file("n5/t.n5/a/0/0", n5_block(np.ones((4, 4), ">u2")))  # the view shows zarr/.../a/c/0 now
    fs.mkdir("zarr/t.zarr/a/c/1")  # as zarr-python does: c exists, c/1 is made
    fs.write_file("zarr/t.zarr/a/c/1/0", lay.encode_chunk(np.full((4, 4), 2, "<u2")))
    fs.rm_r("zarr/t.zarr/a", force=True)
    assert fs.ls("zarr/t.zarr") == ["zarr.json"]


def test_deleting_an_array_through_the_n5_view_leaves_no_zarr_directories(zfs):
    fs = zfs
    meta3 = zarr_array_meta((4, 4, 4), "<u2", (2, 2, 2))
    make_zarr(fs, "zarr/t.zarr/a", meta3, rng_data((4, 4, 4), "<u2"))  # mkdir c, c/0, c/0/0 ...
    fs.rm_r("n5/t.n5/a", force=True)  # rm -rf through the N5 view
    assert "a" not in fs.ls("zarr/t.zarr")
    meta2 = zarr_array_meta((4, 4), "<u2", (2, 2))
    fs.mkdir("zarr/t.zarr/a")
    fs.write_json("zarr/t.zarr/a/zarr.json", meta2)
    assert fs.walk_files("zarr/t.zarr/a") == ["zarr.json"] and fs.ls("zarr/t.zarr/a") == ["zarr.json"]
    data = rng_data((4, 4), "<u2")
    write_zarr_files(fs, "zarr/t.zarr/a", meta2, data)  # c/0/0 is a chunk file now
    assert_values(fs, "t", "a", data)


BAD_BLOCKS = {
    "rank differs": (lambda: n5_header((4, 4), ndim=3) + b"\0" * 36, {errno.EINVAL}),
    "dims larger than blockSize": (lambda: n5_header((5, 4)) + b"\0" * 40, {errno.EINVAL}),
    "zero dim": (lambda: n5_header((0, 4)), {errno.EINVAL}),
    "header cut short": (lambda: n5_header((4, 4))[:6], {errno.EINVAL}),
    "payload too short": (lambda: n5_header((4, 4)) + b"\0" * 30, {errno.EINVAL}),
    "payload too long": (lambda: n5_header((4, 4)) + b"\0" * 34, {errno.EINVAL}),
    "edge block payload of a full block": (lambda: n5_header((2, 4)) + b"\0" * 32, {errno.EINVAL}),
    # SEMANTICS.md: "Block headers must be default mode (0) ..." next to EINVAL; the Errors
    # table's EOPNOTSUPP ("a codec the write path cannot hold") may cover it too: either is right
    "varlength mode": (lambda: n5_header((4, 4), mode=1) + b"\0\0\0\x10" + b"\0" * 32,
                       {errno.EINVAL, errno.EOPNOTSUPP}),
}


@pytest.mark.parametrize("case", sorted(BAD_BLOCKS))
def test_n5_bad_block_header_or_payload_is_einval(fs, caplog, case):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs((8, 4), "uint16", (4, 4), "raw"))
    data = rng_data((8, 4), ">u2")
    write_n5_blocks(fs, "n5/t.n5/d", data, (4, 4))
    make, codes = BAD_BLOCKS[case]
    refused(fs, codes, fs.write_file, "n5/t.n5/d/0/0", make(), caplog=caplog, names="n5/t.n5/d/0/0")
    refused(fs, codes, fs.write_file, "n5/t.n5/d/0/1", make())
    assert_values(fs, "t", "d", data)


def test_n5_bad_compressed_payload_is_einval(fs):
    fs.mkdir("n5/t.n5")
    fs.mkdir("n5/t.n5/d")
    fs.write_json("n5/t.n5/d/attributes.json", n5_attrs((4, 4), "int32", (4, 4), "gzip"))
    fs.makedirs("n5/t.n5/d/0")
    good = n5_block(rng_data((4, 4), ">i4"), "gzip")
    refused(fs, errno.EINVAL, fs.write_file, "n5/t.n5/d/0/0", good[:-9])
    refused(fs, errno.EINVAL, fs.write_file, "n5/t.n5/d/0/0", n5_header((4, 4)) + b"\x1f\x8bgarbage")
    short = n5_block(rng_data((4, 3), ">i4"), "gzip")  # a gzip payload of 12 elements ...
    refused(fs, errno.EINVAL, fs.write_file, "n5/t.n5/d/0/0", n5_header((4, 4)) + short[12:])  # ... under 16
    assert fs.walk_files("n5/t.n5/d") == ["attributes.json"]


# =============================================================================================
# Errors
# =============================================================================================
def test_error_erofs_read_only_mount(zfs):
    """A read-only mount refuses every change with EROFS."""
    fs = zfs
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((4, 4), "<u1", (2, 2)), rng_data((4, 4), "<u1"))
    fs.mkdir("n5/t.n5/g")
    ro = FS(fs.url, read_only=True)
    ops = {
        "new domain": lambda: ro.mkdir("zarr/new.zarr"),
        "mkdir": lambda: ro.mkdir("zarr/t.zarr/x"),
        "write metadata": lambda: ro.write_json("zarr/t.zarr/a/zarr.json", zarr_group_meta()),
        "create": lambda: ro.write_file("zarr/t.zarr/a/c/1/1", b""),
        "open for write": lambda: ro.open_file("zarr/t.zarr/a/c/0/0", os.O_RDWR),
        "unlink": lambda: ro.unlink("zarr/t.zarr/a/c/0/0"),
        "rmdir": lambda: ro.rmdir("n5/t.n5/g"),
        "rename": lambda: ro.rename("zarr/t.zarr/a", "zarr/t.zarr/b"),
        "truncate": lambda: ro.truncate("zarr/t.zarr/a/zarr.json", 0),
        "chmod": lambda: ro.setattr("zarr/t.zarr/a/zarr.json", mode=0o600),
        "symlink": lambda: ro.symlink("zarr/t.zarr/s", "a"),
        "n5 write": lambda: ro.write_json("n5/t.n5/g/attributes.json", {"a": 1}),
    }
    for name, op in ops.items():
        assert refused(fs, errno.EROFS, op) == errno.EROFS, name
    np.testing.assert_array_equal(read_zarr_array(ro, "zarr/t.zarr/a")[1], read_zarr_array(fs, "zarr/t.zarr/a")[1])


@pytest.mark.parametrize("view", ["polyglot"])  # tiff/ takes writes (tests/mount/test_tiff_writes.py)
def test_error_erofs_in_read_only_views(zfs, caplog, view):
    fs = zfs
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((4, 4), "<u1", (2, 2)), rng_data((4, 4), "<u1"))
    names = fs.ls(view)
    assert names, f"the {view} view shows the domain"
    top = f"{view}/{names[0]}"
    ops = [lambda: fs.mkdir(f"{view}/x"), lambda: fs.write_file(f"{view}/new.h5", b"x"),
           lambda: fs.rename(top, f"{view}/renamed")]
    if fs.is_dir(top):
        ops += [lambda: fs.mkdir(f"{top}/x"), lambda: fs.write_file(f"{top}/new", b"x"),
                lambda: fs.rmdir(top)]
        files = fs.walk_files(top)
        if files:
            f0 = f"{top}/{files[0]}"
            ops += [lambda: fs.unlink(f0), lambda: fs.truncate(f0, 0), lambda: fs.open_file(f0, os.O_WRONLY)]
    else:
        ops += [lambda: fs.unlink(top), lambda: fs.truncate(top, 0), lambda: fs.open_file(top, os.O_WRONLY),
                lambda: fs.write_file(top, b"x")]
    for op in ops:
        refused(fs, errno.EROFS, op)


def test_hdf5_view_takes_only_its_domain_files(zfs, caplog):
    """The HDF5 view is writable as whole files (one per domain): no directories, no renames;
    a file that is not HDF5 is refused and leaves the store as it was; ``rm`` deletes the domain."""
    fs = zfs
    make_zarr(fs, "zarr/t.zarr/a", zarr_array_meta((4, 4), "<u1", (2, 2)), rng_data((4, 4), "<u1"))
    assert fs.ls("hdf5") == ["t.h5"]
    refused(fs, errno.EPERM, lambda: fs.mkdir("hdf5/x.h5"))  # hdf5/x makes a folder (test_folders.py)
    refused(fs, errno.EINVAL, lambda: fs.write_file("hdf5/new.h5", b"x"))  # not HDF5: no domain made
    refused(fs, errno.EPERM, lambda: fs.write_file("hdf5/notes.txt", b"x"))
    # the refusal names what a new domain's file may be called (X.NC is not x.nc)
    refused(fs, errno.EPERM, lambda: fs.write_file("hdf5/X.NC", b"x"), caplog=caplog, names="<name>.nc")
    refused(fs, errno.EXDEV, lambda: fs.rename("hdf5/t.h5", "hdf5/renamed.h5"))
    refused(fs, errno.EINVAL, lambda: fs.truncate("hdf5/t.h5", 0))
    refused(fs, errno.EINVAL, lambda: fs.write_file("hdf5/t.h5", b"x"))
    unchanged(fs, lambda: fs.write_file("hdf5/t.h5", b"", truncate=False))  # opened, nothing written
    assert fs.ls("hdf5") == ["t.h5"]
    fs.unlink("hdf5/t.h5")  # the file is the domain: gone from every view
    assert fs.ls("hdf5") == [] and fs.ls("zarr") == [] and fs.ls("n5") == []


def _zarr_with_data(fs):
    meta = zarr_array_meta((8, 8), "<u2", (4, 4), shards=(8, 8), codecs=("zstd",))
    make_zarr(fs, "zarr/t.zarr/a", meta, rng_data((8, 8), "<u2"))
    fs.makedirs("zarr/t.zarr/b")
    make_zarr(fs, "zarr/t.zarr/u", zarr_array_meta((8, 8), "<u2", (4, 4), codecs=("gzip",)), rng_data((8, 8), "<u2"))
    return meta


def _einval_cases():
    good = zarr_array_meta((8, 8), "<u2", (4, 4), shards=(8, 8), codecs=("zstd",))
    lay = ZarrLayout(good)
    ulay = ZarrLayout(zarr_array_meta((8, 8), "<u2", (4, 4), codecs=("gzip",)))
    block = np.arange(64, dtype="<u2").reshape(8, 8)
    shard = lay.encode_file(block)
    bad_inner = encode_shard({0: lay.encode_chunk(block[:4, :4]), 1: b"\x28\xb5\x2f\xfdjunk"}, 4)
    wrong_size = encode_shard({0: lay.encode_chunk(block[:4, :2])}, 4)
    meta_new = lambda **kw: json.dumps({**good, **kw}).encode()
    return {
        "zarr.json not JSON": ("zarr/t.zarr/b/zarr.json", b"{"),
        "zarr.json a list": ("zarr/t.zarr/b/zarr.json", b"[]"),
        "zarr.json empty": ("zarr/t.zarr/b/zarr.json", b""),
        "zarr.json Zarr v2": ("zarr/t.zarr/b/zarr.json", meta_new(zarr_format=2)),
        "zarr.json node_type": ("zarr/t.zarr/b/zarr.json", meta_new(node_type="dataset")),
        "zarr.json negative shape": ("zarr/t.zarr/b/zarr.json", meta_new(shape=[-1, 8])),
        "zarr.json rank of chunks": ("zarr/t.zarr/b/zarr.json", meta_new(shape=[8])),
        "zarr.json zero chunk": ("zarr/t.zarr/b/zarr.json", meta_new(chunk_grid={
            "name": "regular", "configuration": {"chunk_shape": [0, 8]}})),
        "zarr.json irregular grid": ("zarr/t.zarr/b/zarr.json", meta_new(chunk_grid={
            "name": "rectilinear", "configuration": {"chunk_shapes": [[4, 4], [8]]}})),
        "zarr.json inner chunks do not divide the shard": ("zarr/t.zarr/b/zarr.json", json.dumps(
            zarr_array_meta((8, 8), "<u2", (3, 4), shards=(8, 8))).encode()),
        "zarr.json no bytes codec": ("zarr/t.zarr/b/zarr.json", meta_new(codecs=[
            {"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "zstd"}])),
        "zarr.json attributes not an object": ("zarr/t.zarr/b/zarr.json", meta_new(attributes=[1])),
        "group zarr.json attributes not an object": ("zarr/t.zarr/zarr.json", json.dumps(
            {"zarr_format": 3, "node_type": "group", "attributes": "x"}).encode()),
        "array dtype change": ("zarr/t.zarr/a/zarr.json", meta_new(data_type="int16")),
        "array fill change": ("zarr/t.zarr/a/zarr.json", meta_new(fill_value=1)),
        "shard index crc32c": ("zarr/t.zarr/a/c/0/0", lay.encode_file(block)[:-1] + bytes([shard[-1] ^ 0xFF])),
        "shard shorter than its index": ("zarr/t.zarr/a/c/0/0", shard[-20:]),
        "shard inner chunk does not decode": ("zarr/t.zarr/a/c/0/0", bad_inner),
        "shard inner chunk of the wrong size": ("zarr/t.zarr/a/c/0/0", wrong_size),
        "shard inner chunk outside the file": ("zarr/t.zarr/a/c/0/0", encode_shard({0: b"x" * 1000}, 4)[-68:]),
        "chunk does not decode": ("zarr/t.zarr/u/c/0/1", b"\x1f\x8b\x08garbage"),
        "chunk of the wrong size": ("zarr/t.zarr/u/c/0/1", ulay.encode_chunk(block[:4, :3])),
        "chunk of the wrong dtype size": ("zarr/t.zarr/u/c/0/1", ulay.encode_chunk(block[:4, :4].astype("<u4"))),
    }


EINVAL_CASES = _einval_cases()


@pytest.mark.parametrize("case", sorted(EINVAL_CASES))
def test_error_einval(zfs, caplog, case):
    fs = zfs
    _zarr_with_data(fs)
    path, data = EINVAL_CASES[case]
    refused(fs, errno.EINVAL, fs.write_file, path, data, caplog=caplog, names=path)


def _eopnotsupp_meta(case: str) -> dict:
    meta = zarr_array_meta((4, 4), "<i4", (2, 2))
    if case == "vlen-bytes of int32":
        meta.update(codecs=[{"name": "vlen-bytes"}])
    elif case == "structured with a time field":
        meta.update(data_type=TIME_FIELD_STRUCTURED)
    elif case == "bitround of int32":
        meta["codecs"] = [{"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}] + meta["codecs"]
    elif case == "unknown codec":
        meta["codecs"] = meta["codecs"] + [{"name": "no.such.codec", "configuration": {}}]
    elif case == "n5 dataType":
        meta = {"dimensions": [4, 4], "blockSize": [2, 2], "dataType": "object", "compression": {"type": "raw"}}
    elif case == "n5 compression":
        meta = n5_attrs((4, 4), "int32", (2, 2), {"type": "no-such-compression"})
    return meta



@pytest.mark.parametrize("case", ["vlen-bytes of int32", "structured with a time field", "bitround of int32",
                                  "unknown codec", "n5 dataType", "n5 compression"])
def test_error_eopnotsupp(zfs, caplog, case):
    fs = zfs
    meta = _eopnotsupp_meta(case)
    path = "n5/t.n5/x/attributes.json" if case.startswith("n5") else "zarr/t.zarr/x/zarr.json"
    fs.mkdir(path.rsplit("/", 1)[0])
    refused(fs, errno.EOPNOTSUPP, fs.write_json, path, meta, caplog=caplog, names=path)


def test_error_enotempty(zfs):
    fs = zfs
    _zarr_with_data(fs)
    fs.mkdir("zarr/t.zarr/g")
    fs.mkdir("zarr/t.zarr/g/h")
    for path in ("zarr/t.zarr/a", "zarr/t.zarr/u", "zarr/t.zarr/g", "zarr/t.zarr", "n5/t.n5/a", "n5/t.n5"):
        refused(fs, errno.ENOTEMPTY, fs.rmdir, path)
    # an array's zarr.json in a group that has members
    refused(fs, errno.ENOTEMPTY, fs.write_json, "zarr/t.zarr/g/zarr.json", zarr_array_meta((4, 4), "<i4", (2, 2)))


def test_error_eperm(zfs):
    fs = zfs
    refused(fs, errno.EPERM, fs.write_file, "zarr/loose.txt", b"x")  # outside a domain
    refused(fs, errno.EPERM, fs.write_file, "n5/loose.txt", b"x")
    refused(fs, errno.EPERM, fs.mkdir, "zarr/.notadomain")
    refused(fs, errno.EPERM, fs.write_json, "zarr/t.zarr/zarr.json", zarr_array_meta((4, 4), "<i4", (2, 2)))
    refused(fs, errno.EPERM, fs.write_json, "n5/t.n5/attributes.json", n5_attrs((4, 4), "int32", (2, 2)))
    refused(fs, errno.EPERM, fs.symlink, "zarr/t.zarr/s", "x")


def test_error_exdev(zfs):
    fs = zfs
    _zarr_with_data(fs)
    for src, dst in (("zarr/t.zarr/a", "zarr/t.zarr/z"), ("zarr/t.zarr/u/c/0/0", "zarr/t.zarr/u/c/0/9"),
                     ("n5/t.n5/a", "n5/t.n5/z"), ("n5/t.n5/u/0/0", "n5/t.n5/u/0/5")):
        refused(fs, errno.EXDEV, fs.rename, src, dst)


def test_error_eexist(zfs):
    fs = zfs
    _zarr_with_data(fs)
    refused(fs, errno.EEXIST, fs.create_excl, "zarr/t.zarr/a/zarr.json")
    refused(fs, errno.EEXIST, fs.create_excl, "zarr/t.zarr/a/c/0/0")
    refused(fs, errno.EEXIST, fs.mkdir, "zarr/t.zarr/a")
    refused(fs, errno.EEXIST, fs.mkdir, "n5/t.n5/b")
    refused(fs, errno.EEXIST, fs.mkdir, "zarr/t.zarr")
    h = fs.open_file("zarr/t.zarr/u/c/0/.tmp")
    h.write(b"x")
    h.close()
    refused(fs, errno.EEXIST, fs.link, "zarr/t.zarr/u/c/0/.tmp", "zarr/t.zarr/u/c/0/0")


class FailingStore:
    """A store whose writes fail on demand (an S3 outage, a full disk)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.fail = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def put(self, key, data):
        if self.fail:
            raise OSError(errno.EIO, "injected store failure")
        return self.inner.put(key, data)

    def put_if(self, key, data, tag):
        if self.fail:
            raise OSError(errno.EIO, "injected store failure")
        return self.inner.put_if(key, data, tag)

    def put_many(self, items):
        if self.fail:
            raise OSError(errno.EIO, "injected store failure")
        return self.inner.put_many(items)

    def delete(self, key):
        if self.fail:
            raise OSError(errno.EIO, "injected store failure")
        return self.inner.delete(key)


def test_error_eio_when_the_store_fails():
    url = unique_store_url("eio")
    store = FailingStore(open_store(url))
    fs = FS(url, store=store)
    try:
        fs.mkdir("zarr/t.zarr")
        meta = zarr_array_meta((8, 8), "<u2", (4, 4), codecs=("zstd",))
        lay = make_zarr(fs, "zarr/t.zarr/a", meta, np.zeros((8, 8), "<u2"))
        store.fail = True
        with pytest.raises(OSError) as ei:
            fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_chunk(np.ones((4, 4), "<u2")))
        assert ei.value.errno == errno.EIO
        for op in (lambda: fs.mkdir("zarr/t.zarr/g"), lambda: fs.unlink("zarr/t.zarr/a/c/1/1"),
                   lambda: fs.write_json("zarr/t.zarr/zarr.json", zarr_group_meta({"a": 1}))):
            with pytest.raises(OSError) as ei:
                op()
            assert ei.value.errno == errno.EIO
        store.fail = False
        fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_chunk(np.full((4, 4), 2, "<u2")))
        want = np.zeros((8, 8), "<u2")
        want[:4, :4] = 2
        assert_values(fs, "t", "a", want)
    finally:
        fs.close()


def test_error_refused_write_logs_one_line(zfs, caplog):
    fs = zfs
    fs.mkdir("zarr/t.zarr/a")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        refused(fs, errno.EINVAL, fs.write_file, "zarr/t.zarr/a/zarr.json", b"{")
    lines = [r.getMessage() for r in caplog.records if "zarr/t.zarr/a/zarr.json" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "JSON" in lines[0]



def _read_view(fs: FS, view: str) -> np.ndarray:
    if view == "zarr":
        return read_zarr_array(fs, "zarr/t.zarr/img")[1]
    if view == "n5":
        return read_n5_array(fs, "n5/t.n5/img")[1]
    if view == "hdf5":
        with h5_view(fs, "t") as f:
            return f["img"][()]
    tifffile = pytest.importorskip("tifffile")
    tiffs = [p for p in fs.walk_files("tiff/t") if p.endswith((".tif", ".tiff"))]
    assert len(tiffs) == 1, tiffs
    with tifffile.TiffFile(io.BytesIO(fs.read_file(f"tiff/t/{tiffs[0]}"))) as tif:
        return tif.asarray()


@pytest.mark.parametrize("view", ["zarr", "n5", "hdf5", "tiff"])
def test_every_view_sees_an_accepted_write_at_once(zfs, view):
    """Consistency: after an accepted write the next open in any view of the *same* mount
    shows it, also when that view had read the old chunks before."""
    fs = zfs
    meta = zarr_array_meta((6, 8), "<u2", (4, 4), codecs=("zstd",), attributes={"v": 1})
    make_zarr(fs, "zarr/t.zarr/img", meta, np.ones((6, 8), "<u2"))
    np.testing.assert_array_equal(_read_view(fs, view), 1)  # rendered and read once
    data = rng_data((6, 8), "<u2")
    write_zarr_files(fs, "zarr/t.zarr/img", meta, data)
    np.testing.assert_array_equal(_read_view(fs, view), data)


def test_zarr_gzip_chunk_rewritten_with_the_same_size_reads_back(zfs):
    fs = zfs
    meta = zarr_array_meta((4, 4), "<u2", (4, 4), codecs=("gzip",))
    meta["codecs"][1]["configuration"]["level"] = 0  # stored deflate blocks: size independent of values
    lay = make_zarr(fs, "zarr/t.zarr/a", meta, np.ones((4, 4), "<u2"))
    np.testing.assert_array_equal(read_zarr_array(fs, "zarr/t.zarr/a")[1], 1)
    fs.write_file("zarr/t.zarr/a/c/0/0", lay.encode_chunk(np.full((4, 4), 2, "<u2")))
    np.testing.assert_array_equal(read_zarr_array(fs, "zarr/t.zarr/a")[1], 2)


def test_zarr_chunk_file_outside_the_extent_is_refused(zfs):
    """A chunk file past the array's extent (a resize the writer did not publish) is refused at
    close (EINVAL), not kept in the daemon as a scratch file that never reaches the store."""
    fs = zfs
    meta = zarr_array_meta((4, 6), "<u2", (2, 2), codecs=("zstd",))
    lay = make_zarr(fs, "zarr/t.zarr/a", meta, rng_data((4, 6), "<u2"))
    fs.makedirs("zarr/t.zarr/a/c/5")
    refused(fs, errno.EINVAL, lambda: fs.write_file("zarr/t.zarr/a/c/5/5", lay.encode_chunk(rng_data((2, 2), "<u2"))))


def test_a_writer_that_found_no_chunk_directory_drops_no_chunks_stored_since(zfs):
    """Found by four zarr-python processes writing one shard: process A looked up ``c`` before
    any chunk existed (ENOENT), process B then stored a shard, and A wrote its own shard
    without reading (it had found none). B's chunks are not A's to delete."""
    fs = zfs
    meta = zarr_array_meta((8, 8), "<u2", (4, 4), shards=(8, 8), codecs=("zstd",))
    lay = make_zarr(fs, "zarr/t.zarr/a", meta)
    a, b = fs.as_pid(4_900_001), fs.as_pid(4_900_002)
    assert not a.exists("zarr/t.zarr/a/c/0/0")  # A's lookup stops at the missing "c"
    b.makedirs("zarr/t.zarr/a/c/0")
    b.write_file("zarr/t.zarr/a/c/0/0", encode_shard({0: lay.encode_chunk(np.full((4, 4), 7, "<u2"))}, 4))
    a.write_file("zarr/t.zarr/a/c/0/0", encode_shard({3: lay.encode_chunk(np.full((4, 4), 9, "<u2"))}, 4))
    want = np.zeros((8, 8), "<u2")
    want[:4, :4] = 7
    want[4:, 4:] = 9
    assert_values(fs, "t", "a", want)
