"""Tier 2 (no kernel): the format-free write side, exploratory round 7.

- N5 has no fill value: its readers read an absent block as zeros, so tensorstore and
  z5py delete a block they write all zero. A dataset whose fill value is not zero (xarray
  floats: NaN) shows every absent chunk as a block of the fill in ``n5/``; removing a
  block read as "chunk deleted" made the zeros just written read as NaN in every view. A
  block removed through ``n5/`` now stores a chunk of zeros (and through ``zarr/``, where
  an absent chunk is the fill value, still deletes the chunk).
- Metadata written back as the view shows it where that differs from the stored array (a
  scalar is one element in N5: z5py setting an attribute rewrites ``attributes.json``
  with ``dimensions [1]``, ``blockSize [1]``) was refused as a chunk shape change, and
  z5py ignores the error of ``close()``: the attribute was lost.
- A complex fill value with a NaN part (``[1.0, "NaN"]``) did not equal itself, so every
  rewrite of the array's ``zarr.json`` (tensorstore's resize) was refused.
"""
from __future__ import annotations

import errno
import io
import os

import h5py
import hdf5plugin  # noqa: F401 - zstd for h5py writing into the view's file
import numpy as np
import pytest
from test_write_semantics import fs, refused, zfs  # noqa: F401 - fixtures
from writeharness import decode_with, encode_with, n5_block, read_n5_array, zarr_array_meta

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _hdf5(fs, name: str = "t.h5") -> h5py.File:  # noqa: F811 - fixture name
    return h5py.File(io.BytesIO(fs.read_file(f"hdf5/{name}")), "r")


def _nan_array(zfs, name: str = "v") -> None:  # noqa: F811 - fixture name
    """A float32 (8, 8) array of ones in 4x4 chunks, fill NaN (as xarray writes floats)."""
    zfs.mkdir(f"zarr/t.zarr/{name}")
    meta = zarr_array_meta((8, 8), "<f4", (4, 4), codecs=("zstd",), fill="NaN")
    zfs.write_json(f"zarr/t.zarr/{name}/zarr.json", meta)
    for i in range(2):
        zfs.makedirs(f"zarr/t.zarr/{name}/c/{i}")
        for j in range(2):
            zfs.write_file(f"zarr/t.zarr/{name}/c/{i}/{j}", encode_with(meta["codecs"], np.ones((4, 4), "<f4")))


def test_an_n5_block_removed_is_zeros_not_the_fill_value(zfs):  # noqa: F811 - fixture
    _nan_array(zfs)
    zfs.unlink("n5/t.n5/v/0/0")  # z5py / tensorstore: block (0, 0) written all zero
    _, arr = read_n5_array(zfs, "n5/t.n5/v")
    want = np.ones((8, 8), np.float32)
    want[:4, :4] = 0
    assert np.array_equal(arr, want)
    with _hdf5(zfs) as f:
        assert np.array_equal(f["v"][...], want)  # not NaN
    # a block never written (shown as one of the fill value) removed is zeros too
    zfs.mkdir("zarr/t.zarr/w")
    zfs.write_json("zarr/t.zarr/w/zarr.json", zarr_array_meta((8, 8), "<f4", (4, 4), fill="NaN"))
    assert "1" in zfs.ls("n5/t.n5/w")  # the view lists fill blocks: N5 readers would read zeros
    zfs.unlink("n5/t.n5/w/1/1")
    with _hdf5(zfs) as f:
        got = f["w"][...]
    assert np.array_equal(got[4:, 4:], np.zeros((4, 4), np.float32)) and np.isnan(got[:4]).all()


def test_a_chunk_removed_through_zarr_is_the_fill_value_again(zfs):  # noqa: F811 - fixture
    _nan_array(zfs)
    zfs.unlink("zarr/t.zarr/v/c/0/0")  # zarr-python: a chunk written all fill value
    with _hdf5(zfs) as f:
        got = f["v"][...]
    assert np.isnan(got[:4, :4]).all() and (got[4:] == 1).all()


def test_zero_fill_n5_block_removed_is_deleted(zfs):  # noqa: F811 - fixture
    """Fill value zero: absent is zeros in every view, so the chunk object goes."""
    zfs.mkdir("zarr/t.zarr/z")
    meta = zarr_array_meta((8, 8), "<i2", (4, 4), fill=0)
    zfs.write_json("zarr/t.zarr/z/zarr.json", meta)
    zfs.makedirs("zarr/t.zarr/z/c/0")
    zfs.write_file("zarr/t.zarr/z/c/0/0", encode_with(meta["codecs"], np.full((4, 4), 7, "<i2")))
    before = zfs.snapshot()
    zfs.unlink("n5/t.n5/z/0/0")
    assert len(zfs.snapshot()) == len(before) - 1  # the chunk object, and nothing written


def test_n5_attributes_of_a_scalar_rewritten_as_shown(zfs):  # noqa: F811 - fixture
    zfs.mkdir("zarr/t.zarr/s")
    zfs.write_json("zarr/t.zarr/s/zarr.json", zarr_array_meta((), "<f8", (), codecs=("zstd",), fill=2.5))
    shown = zfs.read_json("n5/t.n5/s/attributes.json")
    assert shown["dimensions"] == [1] and shown["blockSize"] == [1]
    zfs.write_json("n5/t.n5/s/attributes.json", {**shown, "units": "K"})  # z5py d.attrs["units"] = "K"
    with _hdf5(zfs) as f:
        assert f["s"].shape == () and f["s"].attrs["units"] == "K" and f["s"][()] == 2.5
    # another shape or type is still refused, the store unchanged
    refused(zfs, errno.EINVAL, zfs.write_json, "n5/t.n5/s/attributes.json", {**shown, "blockSize": [2]})
    refused(zfs, errno.EINVAL, zfs.write_json, "n5/t.n5/s/attributes.json", {**shown, "dataType": "int32"})


def test_complex_fill_with_a_nan_part_rewritten(zfs):  # noqa: F811 - fixture
    zfs.mkdir("zarr/t.zarr/c")
    meta = {**zarr_array_meta((4, 4), "<f4", (2, 2), codecs=("zstd",)), "data_type": "complex64",
            "fill_value": [1.0, "NaN"]}
    zfs.write_json("zarr/t.zarr/c/zarr.json", meta)
    zfs.write_json("zarr/t.zarr/c/zarr.json", {**meta, "shape": [6, 4]})  # tensorstore resize
    with _hdf5(zfs) as f:
        assert f["c"].shape == (6, 4)
    refused(zfs, errno.EINVAL, zfs.write_json, "zarr/t.zarr/c/zarr.json",
            {**meta, "shape": [6, 4], "fill_value": [2.0, "NaN"]})


def test_n5_zero_block_of_a_block_itself_written(zfs):  # noqa: F811 - fixture
    """The same through a block written via n5/ first (z5py writes, then zeroes it)."""
    _nan_array(zfs)
    comp = zfs.read_json("n5/t.n5/v/attributes.json")["compression"]
    zfs.write_file("n5/t.n5/v/1/0", n5_block(np.full((4, 4), 5, ">f4"), comp))
    zfs.unlink("n5/t.n5/v/1/0")
    with _hdf5(zfs) as f:
        got = f["v"][...]
    assert np.array_equal(got[:4, 4:], np.zeros((4, 4), np.float32)) and (got[4:] == 1).all()


def test_rm_r_of_an_n5_dataset_whose_fill_is_not_zero(zfs):  # noqa: F811 - fixture
    """``rm -r`` unlinks every block (each now a chunk of zeros), then removes the
    directories: the zero chunks go with them; a directory still holding data is not empty."""
    _nan_array(zfs)
    _nan_array(zfs, "u")
    zfs.unlink("n5/t.n5/u/0/0")
    with pytest.raises(Exception) as err:
        zfs.rmdir("n5/t.n5/u/0")  # block (1, 0) still holds ones
    assert getattr(err.value, "errno", None) == errno.ENOTEMPTY
    with _hdf5(zfs) as f:
        assert (f["u"][4:, :4] == 1).all() and (f["u"][:4, :4] == 0).all()
    before = set(zfs.snapshot())
    zfs.rm_r("n5/t.n5/v")
    assert "v" not in zfs.ls("n5/t.n5") and "v" not in zfs.ls("zarr/t.zarr")
    assert len(before - set(zfs.snapshot())) >= 4  # its chunks and metadata are gone
    assert not [k for k in set(zfs.snapshot()) - before]  # and nothing is left behind


def test_a_page_written_back_over_a_chunk_as_stored_does_not_store_it(zfs, monkeypatch):  # noqa: F811
    """h5py ``r+`` writes whole pages: chunks beside the one it changed come back as they are
    stored. Storing them again raced with a chunk file merged meanwhile (tensorstore writing
    the same chunk through ``n5/``): the page's copy won, and tensorstore's write was lost
    (tests/mount/test_reliability_explore6.py, 1 run in 16). They are not stored; and a
    chunk's replaced version is known to other merges from before the new one lands."""
    _nan_array(zfs)
    service = zfs.ops.writes.service
    stored: list[list] = []
    superseded_then: list[bool] = []
    put_chunks = service.editor.put_chunks

    def spy(domain, ds, puts, deletes, **kw):
        stored.append([tuple(c) for c, _ in puts])
        idx = service.catalog.chunk_index(ds)
        superseded_then.append(all(service.history.knows_replaced(idx.key_of(tuple(c))) for c, _ in puts
                                   if idx.size_of(idx.linear_of(tuple(c))) >= 0))
        return put_chunks(domain, ds, puts, deletes, **kw)

    monkeypatch.setattr(service.editor, "put_chunks", spy)
    blob = io.BytesIO(zfs.read_file("hdf5/t.h5"))
    with h5py.File(blob, "r+") as f:
        f["v"][0, 0] = 5.0  # one chunk changes; the file is then written back whole, in place
    h = zfs.open_file("hdf5/t.h5", os.O_RDWR)
    h.write(blob.getvalue(), 0)
    h.release()
    assert stored == [[(0, 0)]]  # not the three chunks written back as they are stored
    assert superseded_then == [True]
    with _hdf5(zfs) as f:
        assert f["v"][0, 0] == 5.0 and (f["v"][4:, 4:] == 1).all()


def test_names_made_in_the_views_must_be_utf8(zfs):  # noqa: F811 - fixture
    """A latin-1 directory made in ``zarr/`` was taken, and then hid ``hdf5/t.h5`` (or made
    h5py ``r+`` refuse the file): names made in any view must be text. Existing ones are
    still removable."""
    latin1 = os.fsdecode(b"caf\xe9")
    for op, args in ((zfs.mkdir, (f"zarr/t.zarr/{latin1}",)), (zfs.mkdir, (f"n5/t.n5/{latin1}",)),
                     (zfs.write_file, (f"zarr/t.zarr/{latin1}.json", b"{}")),
                     (zfs.write_file, (f"hdf5/{latin1}.h5", b"x"))):
        refused(zfs, errno.EINVAL, op, *args)
    zfs.mkdir("zarr/t.zarr/café")  # UTF-8 is fine
    with _hdf5(zfs) as f:
        assert "café" in f


def test_a_reader_open_before_a_rewrite_reads_the_version_it_opened(tmp_path):
    """A live viewer reading an array another process keeps rewriting: its open file is laid
    out with the chunk sizes of its open, and a chunk rewritten meanwhile (another size) gave
    it EIO. As on a local disk, it reads on the version it opened (kept for it a while)."""
    from writeharness import FS

    store = tmp_path / "store"
    store.mkdir()
    zfs = FS(str(store))
    try:
        zfs.mkdir("zarr/t.zarr")
        zfs.write_json("zarr/t.zarr/zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {}})
        meta = zarr_array_meta((8, 8), "<i4", (8, 8), codecs=("zstd",), fill=0)
        zfs.mkdir("zarr/t.zarr/a")
        zfs.write_json("zarr/t.zarr/a/zarr.json", meta)
        zfs.makedirs("zarr/t.zarr/a/c/0")
        first = np.zeros((8, 8), "<i4")
        zfs.write_file("zarr/t.zarr/a/c/0/0", encode_with(meta["codecs"], first))
        reader = zfs.as_pid(9001).open_file("zarr/t.zarr/a/c/0/0", os.O_RDONLY)
        head = reader.read(0, 4)
        second = np.arange(64, dtype="<i4").reshape(8, 8)  # compresses to another size
        zfs.as_pid(9002).write_file("zarr/t.zarr/a/c/0/0", encode_with(meta["codecs"], second))
        blob = head + reader.read(4, 1 << 20)  # before: EIO
        reader.release()
        assert np.array_equal(decode_with(meta["codecs"], blob, np.dtype("<i4"), (8, 8)), first)
        blob = zfs.read_file("zarr/t.zarr/a/c/0/0")  # a new open: the new version
        assert np.array_equal(decode_with(meta["codecs"], blob, np.dtype("<i4"), (8, 8)), second)
    finally:
        zfs.close()
