"""Real tools over one mount, exploratory round 11: one dataset written through one view
and read through every other with its own ecosystem's tool, without remounting.

- a reader holding a ``zarr/`` shard or an ``n5/`` block of a deflate dataset (the import
  default) open while another view rewrote that chunk with a new size read the old
  deflate body closed by the NEW chunk's gzip CRC32 (the trailer was taken from the
  store's current object, the body from the version its layout planned): a gzip member
  every reader refuses ("CRC check failed"), instead of the old bytes or EIO.
- pinned (worked unchanged): h5py ``r+`` edits in ``hdf5/`` (part of a chunk, attributes,
  a resize of an unlimited dimension) read back by tensorstore (``zarr/``, ``n5/``),
  z5py, tifffile and h5py on ``polyglot/``; tensorstore and z5py writes read back by
  h5py; every view agreeing on values and on the fill of never-written chunks for bool,
  int8, uint64, float16, complex, big-endian and NaN-filled datasets.
"""
from __future__ import annotations

import gzip
import os
import zlib

import numpy as np
import pytest

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _edge_source(path) -> None:
    """Datasets of the dtypes views spell differently, some chunks never written."""
    with h5py.File(path, "w") as f:
        # big-endian: n5/ serves its deflate chunks as spliced gzip members
        f.create_dataset("img", data=(np.arange(64 * 64) % 251).astype(">u2").reshape(64, 64), chunks=(32, 32))
        f.create_dataset("ts", shape=(10, 4), maxshape=(None, 4), chunks=(4, 4), dtype="f4", fillvalue=np.nan)
        f["ts"][:6] = 1.5
        f.create_dataset("b", data=np.array([[True, False] * 8] * 16), chunks=(8, 8))
        f.create_dataset("i8", data=np.arange(-64, 64, dtype="i1").reshape(16, 8), chunks=(8, 8), fillvalue=-3)
        f.create_dataset("u64", shape=(16, 16), dtype="u8", chunks=(8, 8), fillvalue=2 ** 63 + 5)
        f["u64"][:8, :8] = 2 ** 64 - 1
        f.create_dataset("f16", data=np.linspace(0, 1, 256, dtype="f2").reshape(16, 16), chunks=(8, 8))
        f.create_dataset("c8", data=(np.arange(64) + 1j * np.arange(64)).astype("c8").reshape(8, 8), chunks=(4, 4))
        f.create_dataset("be", data=np.arange(256, dtype=">i4").reshape(16, 16), chunks=(8, 8), fillvalue=7)
        f.create_dataset("nanfill", shape=(16, 16), dtype="f8", chunks=(8, 8), fillvalue=np.nan)


def _mounted_edge(mount_store, tmp_path):
    store, src = tmp_path / "store", tmp_path / "x.h5"
    _edge_source(src)
    store.mkdir()
    assert import_source(src, str(store), progress=False) == "/x.h5"
    import warnings
    warnings.filterwarnings("ignore")
    return mount_store(str(store))


def _gunzip_n5_block(blob: bytes) -> bytes:
    """An N5 block's payload: header (mode, ndim, dims) then one gzip member."""
    ndim = int.from_bytes(blob[2:4], "big")
    return gzip.decompress(blob[4 + 4 * ndim:])


def test_held_gzip_member_is_old_or_eio_after_another_view_rewrites_its_chunk(mount_store, tmp_path):
    """A reader that opened an N5 block (a gzip member spliced from the stored zlib stream)
    before h5py rewrote its chunk through ``hdf5/`` with another compressed size reads the
    member it opened, whole, or gets EIO; never the old body under the new CRC32."""
    m = _mounted_edge(mount_store, tmp_path)
    block = m.path / "n5" / "x.n5" / "img" / "0" / "0"
    fd = os.open(block, os.O_RDONLY)
    try:
        before = os.pread(fd, 1 << 20, 0)
        old_raw = _gunzip_n5_block(before)
        with h5py.File(m.path / "hdf5" / "x.h5", "r+") as f:  # chunk (0, 0): incompressible now
            f["img"][0:32, 0:32] = np.random.RandomState(3).randint(0, 60000, (32, 32)).astype(">u2")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            held = os.pread(fd, 1 << 20, 0)
        except OSError as exc:
            assert exc.errno == 5, exc
        else:
            try:
                raw = _gunzip_n5_block(held)
            except (OSError, zlib.error, EOFError) as exc:
                pytest.fail(f"the held N5 block is not a valid gzip member any more: {exc}")
            assert raw == old_raw  # the version it opened, not a mix
    finally:
        os.close(fd)
    with open(block, "rb") as f:  # opened after: the new data
        raw = _gunzip_n5_block(f.read())
    want = np.random.RandomState(3).randint(0, 60000, (32, 32)).astype(">u2")
    assert raw == want.T.tobytes() or raw == want.tobytes()


def test_held_zarr_shard_is_old_or_eio_after_another_view_rewrites_its_chunk(mount_store, tmp_path):
    """The same through ``zarr/``: a shard opened before a z5py write through ``n5/`` shrank
    its first chunk decodes, with zarr-python's codecs, to the values it had or is EIO."""
    z5py = pytest.importorskip("z5py")
    zarr = pytest.importorskip("zarr")
    m = _mounted_edge(mount_store, tmp_path)
    with h5py.File(m.path / "hdf5" / "x.h5", "r+") as f:  # a large first chunk
        f["img"][0:32, 0:32] = np.random.RandomState(4).randint(0, 60000, (32, 32)).astype("u2")
    shard = m.path / "zarr" / "x.zarr" / "img" / "c" / "0" / "0"
    fd = os.open(shard, os.O_RDONLY)
    try:
        before = os.pread(fd, 1 << 22, 0)
        z5py.File(str(m.path / "n5" / "x.n5"), "a")["img"][0:32, 0:32] = np.full((32, 32), 5, "u2")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            held = os.pread(fd, 1 << 22, 0)
        except OSError as exc:
            assert exc.errno == 5, exc
        else:
            assert held == before
    finally:
        os.close(fd)
    assert (zarr.open_array(str(m.path / "zarr" / "x.zarr" / "img"), mode="r")[0:32, 0:32] == 5).all()


def _views_of(m, name: str) -> dict[str, np.ndarray]:
    """``name`` as each view's own tool reads it (those views that show it)."""
    ts = pytest.importorskip("tensorstore")
    z5py = pytest.importorskip("z5py")
    tifffile = pytest.importorskip("tifffile")
    out = {}
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(m.path / "zarr" / "x.zarr" / name)}}
    out["tensorstore-zarr3"] = ts.open(spec).result().read().result()
    n5 = m.path / "n5" / "x.n5" / name
    if n5.exists():
        spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(n5)}}
        out["tensorstore-n5"] = np.asarray(ts.open(spec).result().read().result()).T  # N5 order reversed
        out["z5py"] = z5py.File(str(m.path / "n5" / "x.n5"), "r")[name][...]
    tif = m.path / "tiff" / "x" / f"{name}.tif"
    if tif.exists():
        out["tifffile"] = tifffile.imread(tif)
    return out


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    got = np.asarray(got)
    if got.shape != want.shape:
        return False
    if want.dtype.kind in "fc":
        return np.array_equal(got.astype(want.dtype), want, equal_nan=True)
    return np.array_equal(got.astype(want.dtype), want)


def test_hdf5_edits_read_the_same_through_every_view(mount_store, tmp_path):
    """h5py ``r+`` edits (part of a chunk, a never-written chunk, a resize of an unlimited
    dimension) then every view's tool, same mount, no remount: values and fills agree."""
    m = _mounted_edge(mount_store, tmp_path)
    h5 = m.path / "hdf5" / "x.h5"
    with h5py.File(h5, "r+") as f:
        f["img"][3:5, 30:34] = 9999
        f["img"].attrs["note"] = "edited"
        f["ts"].resize((14, 4))
        f["ts"][12:14] = 7.0
        f["u64"][9, 9] = 3
        f["i8"][0, 0] = 127
        f["b"][15, 15] = True
        f["be"][8:, 8:] = -1
        f["f16"][0, 0] = np.float16(0.5)
        f["nanfill"][0, 0] = 1.0
    with h5py.File(h5, "r") as f:
        want = {k: f[k][()] for k in f}
    assert want["img"][4, 31] == 9999 and np.isnan(want["ts"][8:12]).all() and want["u64"][15, 0] == 2 ** 63 + 5
    for name, ref in want.items():
        for tool, got in _views_of(m, name).items():
            assert _same(got, ref), (name, tool)


def test_tensorstore_and_z5py_writes_read_back_by_h5py(mount_store, tmp_path):
    """tensorstore partial writes in ``zarr/`` (a never-written chunk of a NaN-filled array
    keeps NaN around the written element) and z5py block writes in ``n5/``: h5py, pyfive
    and the other views agree."""
    ts = pytest.importorskip("tensorstore")
    z5py = pytest.importorskip("z5py")
    m = _mounted_edge(mount_store, tmp_path)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(m.path / "zarr" / "x.zarr" / "nanfill")}}
    ts.open(spec).result()[15, 15].write(2.5).result()
    spec["kvstore"]["path"] = str(m.path / "zarr" / "x.zarr" / "img")
    ts.open(spec).result()[40:42, 0:3].write(np.full((2, 3), 4242, "u2")).result()
    f5 = z5py.File(str(m.path / "n5" / "x.n5"), "a")
    f5["u64"][8:16, 0:8] = np.full((8, 8), 11, "u8")
    f5["be"][0, 0] = 123
    with h5py.File(m.path / "hdf5" / "x.h5", "r") as f:
        nan = f["nanfill"][()]
        assert nan[15, 15] == 2.5 and np.isnan(nan[8:15]).all() and np.isnan(nan[:8]).all()
        assert (f["img"][40:42, 0:3] == 4242).all() and f["img"][40, 3] == (40 * 64 + 3) % 251
        assert (f["u64"][8:16, 0:8] == 11).all() and f["u64"][8, 8] == 2 ** 63 + 5
        assert f["be"][0, 0] == 123 and f["be"][0, 1] == 1
        want = {k: f[k][()] for k in ("nanfill", "img", "u64", "be")}
    pyfive = pytest.importorskip("pyfive")
    pf = pyfive.File(str(m.path / "hdf5" / "x.h5"))
    for name, ref in want.items():
        if name in ("img", "be"):  # pyfive reads no dataset with unallocated chunks (a local file neither)
            assert _same(pf[name][:], ref), ("pyfive", name)
        for tool, got in _views_of(m, name).items():
            assert _same(got, ref), (name, tool)


def test_hdf5_file_mtime_follows_writes_through_other_views(mount_store, tmp_path):
    """``ls -l``: after a tensorstore write through ``zarr/`` (same size: values of an
    uncompressed dataset) the domain's ``hdf5/`` file is newer than before, as its
    ``tiff/`` and ``zarr/`` files are; else ``rsync -a`` (size + mtime) skips the change."""
    import time

    ts = pytest.importorskip("tensorstore")
    store, src = tmp_path / "store", tmp_path / "u.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("img", data=np.zeros((32, 32), "u2"), chunks=(16, 16))
    store.mkdir()
    assert import_source(src, str(store), progress=False, codec="none") == "/u.h5"
    m = mount_store(str(store))
    h5, tif = m.path / "hdf5" / "u.h5", m.path / "tiff" / "u" / "img.tif"
    before = os.stat(h5)
    time.sleep(1.1)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(m.path / "zarr" / "u.zarr" / "img")}}
    ts.open(spec).result()[0:2, 0:2].write(np.full((2, 2), 9, "u2")).result()
    with h5py.File(h5, "r") as f:
        assert f["img"][0, 0] == 9
    # the kernel's cached attributes are dropped by the daemon's notifier thread, a moment
    # after the commit (never inside the request: that can deadlock the kernel)
    deadline = time.monotonic() + 30  # polled: a loaded machine may run the notifier late
    while os.stat(h5).st_mtime <= before.st_mtime and time.monotonic() < deadline:
        time.sleep(0.05)
    after = os.stat(h5)
    assert after.st_size == before.st_size  # the case rsync's quick check cannot tell by size
    assert os.stat(tif).st_mtime > before.st_mtime
    assert after.st_mtime > before.st_mtime
