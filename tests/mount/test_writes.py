"""Writes through the Zarr and N5 views of a real mount, by ordinary tools.

Each test writes with zarr-python, tensorstore or z5py, then reads the result
through other views (N5, Zarr, HDF5 with h5py, TIFF with tifffile) and
through the canonical store itself (the model), all equal to what was written.
"""
from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import is_mounted, polyfs_cmd
from corpus import read_dataset

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")
h5py = pytest.importorskip("h5py")


@pytest.fixture
def store(tmp_path) -> Path:
    d = tmp_path / "store"
    d.mkdir()
    return d


def model_array(store: Path, domain: str, path: str) -> np.ndarray:
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    cat = Catalog(open_store(str(store), read_only=True))
    return read_dataset(cat, cat.load(domain).resolve(path))


def snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def h5_read(path: Path, name: str) -> tuple[np.ndarray, dict]:
    with h5py.File(path, "r") as f:
        return f[name][()], {k: v for k, v in f[name].attrs.items()}


def ts_n5(path: Path):
    return ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(path)}}).result()


def test_zarr_python_hierarchy_read_through_every_view(mount_store, store):
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "exp.zarr")
    root = zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="a")
    ome = [{"version": "0.4", "axes": [{"name": "y", "type": "space"}], "datasets": [{"path": "raw/img"}]}]
    root.attrs.update({"title": "run 7", "n": 3, "multiscales": ome, "note": None})  # OME-Zarr style
    g = root.create_group("raw")
    g.attrs["kind"] = "raw"
    rng = np.random.default_rng(1)
    want = {
        "raw/vol": (rng.integers(0, 4000, (70, 90, 50)).astype("uint16"),
                    dict(chunks=(32, 32, 16), shards=(64, 64, 32))),
        "raw/img": (rng.random((100, 130)).astype("float32"),
                    dict(chunks=(32, 64), compressors=zarr.codecs.GzipCodec(level=4))),
        "lab": (rng.integers(-100, 100, (45, 33)).astype("int8"),
                dict(chunks=(16, 16), shards=(32, 32),
                     compressors=zarr.codecs.BloscCodec(cname="lz4", shuffle="shuffle"))),
        "big": (rng.integers(0, 2 ** 40, (40, 40)).astype(">u8"),
                dict(chunks=(20, 20), serializer=zarr.codecs.BytesCodec(endian="big"), compressors=None)),
    }
    for name, (data, kw) in want.items():
        a = root.create_array(name, shape=data.shape, dtype=data.dtype, **kw)
        a[:] = data
        a.attrs["unit"] = "um"
    # a partial rewrite of one shard keeps every other inner chunk
    vol = want["raw/vol"][0]
    root["raw/vol"][3:5, 40:42, 0:2] = 7
    vol[3:5, 40:42, 0:2] = 7

    back = zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="r")
    assert dict(back.attrs) == {"title": "run 7", "n": 3, "multiscales": ome, "note": None}
    n5_root = json.loads((m.path / "n5" / "exp.n5" / "attributes.json").read_text())
    assert n5_root["multiscales"] == ome and n5_root["note"] is None
    for name, (data, _) in want.items():
        np.testing.assert_array_equal(back[name][:], data)
        assert back[name].attrs["unit"] == "um"
        np.testing.assert_array_equal(model_array(store, "/exp.h5", name), data)
        got, attrs = h5_read(m.path / "hdf5" / "exp.h5", name)
        np.testing.assert_array_equal(got, data)
        assert attrs["unit"] == "um"
        np.testing.assert_array_equal(np.asarray(ts_n5(m.path / "n5" / "exp.n5" / name).read().result()).T, data)
    import tifffile

    with tifffile.TiffFile(m.path / "tiff" / "exp" / "raw" / "img.tif") as tif:
        np.testing.assert_array_equal(tif.asarray(), want["raw/img"][0])
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        assert f.attrs["title"] == "run 7" and f["raw"].attrs["kind"] == "raw"


def test_cp_r_of_a_local_zarr_hierarchy_makes_a_domain(mount_store, store, tmp_path):
    """GNU cp makes the directory, then creates each file in it with O_EXCL: the new
    domain's root shows no zarr.json of its own until one is written."""
    m = mount_store(str(store))
    local = tmp_path / "up.zarr"
    root = zarr.open_group(str(local), mode="w")
    root.attrs["hello"] = "world"
    sub = root.create_group("sub")
    sub.attrs["level"] = 1
    data = np.arange(64, dtype="uint16").reshape(8, 8)
    sub.create_array("vol", shape=(8, 8), chunks=(4, 4), dtype="uint16")[:] = data
    res = subprocess.run(["cp", "-r", str(local), str(m.path / "zarr" / "new.zarr")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    got = zarr.open_group(str(m.path / "zarr" / "new.zarr"), mode="r")
    assert dict(got.attrs) == {"hello": "world"} and dict(got["sub"].attrs) == {"level": 1}
    np.testing.assert_array_equal(got["sub/vol"][:], data)
    # N5: a container's root always shows its attributes.json (z5py needs the version), so a
    # whole container is copied into a domain made first (cp then overwrites, not O_EXCL)
    import z5py

    n5 = z5py.File(str(tmp_path / "up.n5"), mode="w", use_zarr_format=False)
    n5.attrs["hello"] = "n5"
    n5.create_dataset("g/vol", data=data, chunks=(4, 4), compression="gzip")
    os.mkdir(m.path / "n5" / "copied.n5")
    res = subprocess.run(["cp", "-r", f"{tmp_path / 'up.n5'}/.", str(m.path / "n5" / "copied.n5")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    got = z5py.File(str(m.path / "n5" / "copied.n5"), mode="r")
    assert got.attrs["hello"] == "n5"
    np.testing.assert_array_equal(got["g/vol"][:], data)
    os.mkdir(m.path / "zarr" / "empty.zarr")  # a new domain: an empty directory, as on any disk
    assert os.listdir(m.path / "zarr" / "empty.zarr") == []
    zarr.open_group(str(m.path / "zarr" / "empty.zarr"), mode="a").attrs["x"] = 1
    assert json.loads((m.path / "zarr" / "empty.zarr" / "zarr.json").read_text())["attributes"] == {"x": 1}


def test_tensorstore_and_z5py_write_read_by_other_views(mount_store, store):
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "ts.zarr")
    data = np.arange(60 * 70, dtype="int32").reshape(60, 70)
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(m.path / "zarr/ts.zarr/arr")},
                 "metadata": {"shape": [60, 70], "data_type": "int32",
                              "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [40, 40]}},
                              "codecs": [{"name": "sharding_indexed", "configuration": {
                                  "chunk_shape": [20, 20],
                                  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                             {"name": "zstd", "configuration": {"level": 3}}]}}]},
                 "create": True}).result()
    t[...] = data
    t[10:12, 50:55] = -5
    data[10:12, 50:55] = -5
    np.testing.assert_array_equal(np.asarray(ts_n5(m.path / "n5/ts.n5/arr").read().result()).T, data)
    np.testing.assert_array_equal(h5_read(m.path / "hdf5" / "ts.h5", "arr")[0], data)
    np.testing.assert_array_equal(model_array(store, "/ts.h5", "arr"), data)

    # N5: tensorstore and z5py (z5py truncates edge blocks; they are padded)
    n5 = m.path / "n5" / "ts.n5"
    fdata = np.linspace(0, 1, 35 * 47).reshape(35, 47)
    tn = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(n5 / "tsn5")},
                  "metadata": {"dimensions": [47, 35], "blockSize": [16, 16], "dataType": "float64",
                               "compression": {"type": "gzip"}}, "create": True}).result()
    tn[...] = fdata.T
    z5py = pytest.importorskip("z5py")
    f = z5py.File(str(n5), use_zarr_format=False, mode="a")
    ds = f.create_dataset("z5/blocks", shape=(35, 47), chunks=(16, 16), dtype="uint16", compression="raw")
    udata = np.arange(35 * 47, dtype="uint16").reshape(35, 47)
    ds[:] = udata
    ds.attrs["origin"] = [1.5, 2.5]
    for name, want in (("tsn5", fdata), ("z5/blocks", udata)):
        np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr/ts.zarr" / name), mode="r")[:], want)
        np.testing.assert_array_equal(h5_read(m.path / "hdf5" / "ts.h5", name)[0], want)
        np.testing.assert_array_equal(model_array(store, "/ts.h5", name), want)
    assert list(h5_read(m.path / "hdf5" / "ts.h5", "z5/blocks")[1]["origin"]) == [1.5, 2.5]


def test_metadata_edits_resize_and_delete(mount_store, store):
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "md.zarr")
    root = zarr.open_group(str(m.path / "zarr" / "md.zarr"), mode="a")
    a = root.create_array("a", shape=(10, 10), chunks=(5, 5), dtype="uint8")
    a[:] = 1
    a.attrs.update({"scale": 0.5, "names": ["x", "y"], "flag": True})
    a.resize((15, 10))
    a[10:15] = 2
    with h5py.File(m.path / "hdf5" / "md.h5", "r") as f:
        assert f["a"].shape == (15, 10) and f["a"].attrs["scale"] == 0.5
        assert list(f["a"].attrs["names"]) == ["x", "y"] or [s.decode() for s in f["a"].attrs["names"]] == ["x", "y"]
        np.testing.assert_array_equal(f["a"][10:], 2)
    # rmdir of a non-empty group fails; rm -r of an array deletes it and its chunks
    g = root.create_group("g")
    g.create_array("inner", shape=(4,), chunks=(2,), dtype="int16")[:] = 3
    with pytest.raises(OSError) as ei:
        os.rmdir(m.path / "zarr/md.zarr/g")
    assert ei.value.errno == errno.ENOTEMPTY
    subprocess.run(["rm", "-r", str(m.path / "zarr/md.zarr/g")], check=True)
    assert not (m.path / "zarr/md.zarr/g").exists()
    with h5py.File(m.path / "hdf5" / "md.h5", "r") as f:
        assert "g" not in f
    assert not any("inner" in k for k in snapshot(store))
    # unlink of one chunk file deletes that chunk (fill value returns)
    os.unlink(m.path / "zarr/md.zarr/a/c/0/0")
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr/md.zarr/a"), mode="r")[:5, :5], 0)


def _writer(mnt: str, col0: int, width: int, seed: int) -> None:
    import zarr as z

    a = z.open_array(mnt, mode="r+")
    rng = np.random.default_rng(seed)
    for row in range(0, a.shape[0], 16):  # many small read-modify-writes of shared shards
        a[row:row + 16, col0:col0 + width] = rng.integers(1, 60000, (16, width)).astype("uint16")


def test_four_concurrent_writers_lose_nothing(mount_store, store):
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "cc.zarr")
    path = m.path / "zarr" / "cc.zarr" / "arr"
    zarr.create_array(str(path), shape=(128, 128), chunks=(16, 16), shards=(64, 128), dtype="uint16")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), i * 32, 32, i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, m.log_text()[-3000:]
    want = np.zeros((128, 128), dtype="uint16")
    for i in range(4):
        rng = np.random.default_rng(i)
        for row in range(0, 128, 16):
            want[row:row + 16, i * 32:(i + 1) * 32] = rng.integers(1, 60000, (16, 32)).astype("uint16")
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], want)
    np.testing.assert_array_equal(model_array(store, "/cc.h5", "arr"), want)


# -- bad input: refused with an errno, the store byte-identical ---------------------------
def _n5_dataset(m, store) -> Path:
    os.mkdir(m.path / "n5" / "bad.n5")
    d = m.path / "n5" / "bad.n5" / "d"
    os.mkdir(d)
    (d / "attributes.json").write_text(json.dumps(
        {"dimensions": [8, 4], "blockSize": [4, 4], "dataType": "uint16", "compression": {"type": "raw"}}))
    return d


def _block(dims_n5, payload: bytes, ndim=None) -> bytes:
    head = (0).to_bytes(2, "big") + (ndim or len(dims_n5)).to_bytes(2, "big")
    return head + b"".join(int(x).to_bytes(4, "big") for x in dims_n5) + payload


def _write_expect(path: Path, data: bytes, code: int) -> None:
    with pytest.raises(OSError) as ei:
        with open(path, "wb") as f:
            f.write(data)
    assert ei.value.errno == code, ei.value


BAD_CASES = {
    "n5 header dims larger than blockSize": lambda d: (d / "0" / "0", _block([5, 4], b"\0" * 40)),
    "n5 header rank differs": lambda d: (d / "0" / "0", _block([4, 4, 1], b"\0" * 32)),
    "n5 payload of the wrong dtype size": lambda d: (d / "0" / "0", _block([4, 4], b"\0" * 16)),
    "n5 attributes.json not JSON": lambda d: (d / "attributes.json", b"{not json"),
    "n5 dtype change": lambda d: (d / "attributes.json", json.dumps(
        {"dimensions": [8, 4], "blockSize": [4, 4], "dataType": "float32", "compression": {"type": "raw"}}).encode()),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_n5_writes_are_refused(mount_store, store, case):
    m = mount_store(str(store))
    d = _n5_dataset(m, store)
    os.makedirs(d / "0", exist_ok=True)
    before = snapshot(store)
    target, data = BAD_CASES[case](d)
    _write_expect(target, data, errno.EINVAL)
    assert snapshot(store) == before
    assert "refused" in m.log_text()


def _zarr_array(m) -> Path:
    os.mkdir(m.path / "zarr" / "badz.zarr")
    path = m.path / "zarr" / "badz.zarr" / "a"
    a = zarr.create_array(str(path), shape=(8, 8), chunks=(4, 4), shards=(8, 8), dtype="uint16")
    a[:] = 5
    return path


def test_bad_zarr_writes_are_refused(mount_store, store):
    m = mount_store(str(store))
    path = _zarr_array(m)
    before = snapshot(store)
    shard = (path / "c" / "0" / "0").read_bytes()
    broken = shard[:-1] + bytes([shard[-1] ^ 0xFF])  # the index crc32c no longer matches
    for code in (errno.EIO, errno.EINVAL):
        try:
            _write_expect(path / "c" / "0" / "0", broken, code)
            break
        except AssertionError:
            if code == errno.EINVAL:
                raise
    assert snapshot(store) == before
    meta = json.loads((path / "zarr.json").read_text())
    for bad in (b"{", json.dumps({**meta, "zarr_format": 2}).encode(),
                json.dumps({**meta, "data_type": "float64"}).encode(),
                json.dumps({**meta, "codecs": [{"name": "bytes"}],
                            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}}}).encode()):
        _write_expect(path / "zarr.json", bad, errno.EINVAL)
        assert snapshot(store) == before
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], 5)


def test_shell_redirects_over_chunk_files_are_all_or_nothing(mount_store, store, tmp_path):
    """``cmd > file`` opens with O_TRUNC, dup2()s and closes the first descriptor before
    anything is written: that close must not store the emptied file (deleting the chunks)."""
    m = mount_store(str(store))
    path = _zarr_array(m)
    plain = zarr.create_array(str(path.parent / "p"), shape=(8, 8), chunks=(4, 4), dtype="uint16")
    plain[:] = 7
    before = snapshot(store)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(np.random.default_rng(1).bytes(300))
    for target in (path / "c" / "0" / "0", path.parent / "p" / "c" / "1" / "1"):
        res = subprocess.run(["bash", "-c", f"cat {garbage} > {target}"], capture_output=True, text=True)
        assert res.returncode != 0, res.stderr  # the bytes written are refused at close...
        assert snapshot(store) == before  # ...and nothing else was stored on the way
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], 5)
    np.testing.assert_array_equal(zarr.open_array(str(path.parent / "p"), mode="r")[:], 7)
    good = tmp_path / "good"  # a valid chunk of another array's bytes, through a redirect
    zarr.open_array(str(path.parent / "p"), mode="r+")[4:, 4:] = 9
    good.write_bytes((path.parent / "p" / "c" / "1" / "1").read_bytes())
    zarr.open_array(str(path.parent / "p"), mode="r+")[4:, 4:] = 7
    res = subprocess.run(["bash", "-c", f"cat {good} > {path.parent / 'p' / 'c' / '1' / '1'}"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    want = np.full((8, 8), 7, "uint16")
    want[4:, 4:] = 9
    np.testing.assert_array_equal(zarr.open_array(str(path.parent / "p"), mode="r")[:], want)


def test_read_only_mount_refuses_every_write(mount_store, store):
    m = mount_store(str(store))
    _zarr_array(m)
    before = snapshot(store)
    ro = mount_store(str(store), "ro")
    a = ro.path / "zarr" / "badz.zarr" / "a"
    for op in (lambda: (a / "zarr.json").write_text("{}"), lambda: os.unlink(a / "c" / "0" / "0"),
               lambda: os.mkdir(a.parent / "x"), lambda: os.rmdir(a), lambda: os.truncate(a / "zarr.json", 0)):
        with pytest.raises(OSError) as ei:
            op()
        assert ei.value.errno == errno.EROFS
    assert snapshot(store) == before


# -- crash safety -------------------------------------------------------------------------
WRITE_SCRIPT = """
import sys, numpy as np, tensorstore as ts
t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": sys.argv[1]}}).result()
t[...] = np.full(t.shape, 2, dtype="uint16")
"""


def test_sigkill_mid_write_leaves_old_or_new_chunks(mount_store, store, tmp_path):
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "crash.zarr")
    path = m.path / "zarr" / "crash.zarr" / "a"
    shape = (256, 256, 128)
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)},
                 "metadata": {"shape": list(shape), "data_type": "uint16",
                              "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64, 64]}},
                              "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                         {"name": "zstd", "configuration": {"level": 1}}]},
                 "create": True}).result()
    t[...] = np.ones(shape, dtype="uint16")
    writer = subprocess.Popen([sys.executable, "-c", WRITE_SCRIPT, str(path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.0)  # mid-way through writing 32 chunk files
    os.kill(m.daemon_pid(), signal.SIGKILL)
    writer.wait(60)
    res = subprocess.run(polyfs_cmd("umount", str(m.path)), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert not is_mounted(m.path)
    m.start()
    got = zarr.open_array(str(path), mode="r")[:]
    for idx in np.ndindex(4, 4, 2):
        block = got[tuple(slice(i * 64, (i + 1) * 64) for i in idx)]
        assert np.all(block == block.flat[0]) and block.flat[0] in (1, 2), idx
    m.stop()
    res = subprocess.run(polyfs_cmd("check", str(store), "--repair"), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run(polyfs_cmd("check", str(store), "--deep"), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "store is consistent" in res.stdout, res.stdout + res.stderr


SHARD_WRITER = """
import sys, numpy as np, tensorstore as ts
t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": sys.argv[1]}}).result()
for i in range(4):
    for j in range(2):
        block = np.random.default_rng(i * 2 + j).integers(0, 65535, (64, 128, 128), dtype="uint16")
        t[i * 64:(i + 1) * 64, j * 128:(j + 1) * 128, :] = block
        print(i, j, flush=True)  # acknowledged: the shard's rename (its ingest) has returned
"""


def test_sigkill_with_spilled_write_buffers_keeps_acknowledged_shards(mount_store, store, tmp_path):
    """Write buffers far smaller than a shard (every shard spills to scratch): a SIGKILL mid-write
    loses nothing acknowledged, leaves every inner chunk old or new, and no scratch file behind."""
    scratch = tmp_path / "scratch"
    m = mount_store(str(store), f"write_buffer_mb=1,scratch_dir={scratch}")
    os.mkdir(m.path / "zarr" / "spill.zarr")
    path = m.path / "zarr" / "spill.zarr" / "a"
    ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)},
             "metadata": {"shape": [256, 256, 128], "data_type": "uint16",
                          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 128, 128]}},
                          "codecs": [{"name": "sharding_indexed", "configuration": {
                              "chunk_shape": [32, 64, 64],
                              "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                         {"name": "zstd", "configuration": {"level": 1}}]}}]},
             "create": True}).result()
    writer = subprocess.Popen([sys.executable, "-c", SHARD_WRITER, str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    acked = []
    for _ in range(3):  # three shards acknowledged, then the daemon dies mid-way through the rest
        line = writer.stdout.readline()
        assert line, writer.stderr.read()
        acked.append(tuple(int(x) for x in line.split()))
    os.kill(m.daemon_pid(), signal.SIGKILL)
    writer.wait(60)
    res = subprocess.run(polyfs_cmd("umount", str(m.path)), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "spilling pages to" in m.log_text()  # the shards did not fit the 1 MiB of buffers
    assert not list(scratch.iterdir())  # scratch files are unlinked at birth: nothing survives the kill
    m.start()
    got = zarr.open_array(str(path), mode="r")[:]
    for i, j in np.ndindex(4, 2):
        want = np.random.default_rng(i * 2 + j).integers(0, 65535, (64, 128, 128), dtype="uint16")
        have = got[i * 64:(i + 1) * 64, j * 128:(j + 1) * 128, :]
        if (i, j) in acked:
            np.testing.assert_array_equal(have, want)
            continue
        for a, b, c in np.ndindex(2, 2, 2):  # unacknowledged: each inner chunk old (fill 0) or new
            sl = (slice(a * 32, (a + 1) * 32), slice(b * 64, (b + 1) * 64), slice(c * 64, (c + 1) * 64))
            assert np.array_equal(have[sl], want[sl]) or not have[sl].any(), (i, j, a, b, c)
    m.stop()
    res = subprocess.run(polyfs_cmd("check", str(store), "--deep"), capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        res = subprocess.run(polyfs_cmd("check", str(store), "--repair"), capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        res = subprocess.run(polyfs_cmd("check", str(store), "--deep"), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "store is consistent" in res.stdout, res.stdout + res.stderr


def test_a_mkdir_domain_filled_through_hdf5_shows_its_root_zarr_json(mount_store, store):
    """A domain made by mkdir shows no zarr.json until one is written, but a document view
    (h5py through hdf5/) that adds members makes its root a group in every view."""
    m = mount_store(str(store))
    os.mkdir(m.path / "zarr" / "mixed.zarr")
    assert os.listdir(m.path / "zarr" / "mixed.zarr") == []
    with h5py.File(m.path / "hdf5" / "mixed.h5", "r+") as f:
        f.create_dataset("d", data=np.arange(6, dtype="i4"))
    root = zarr.open_group(str(m.path / "zarr" / "mixed.zarr"), mode="r")
    np.testing.assert_array_equal(root["d"][:], np.arange(6, dtype="i4"))
