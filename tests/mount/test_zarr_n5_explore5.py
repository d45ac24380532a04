"""Tier 3 (exploratory round 5): zarr-python, tensorstore and z5py writing the Zarr and N5
views with the spellings their users choose, read back by the other tools and views.

- A chunk key encoding other than ``default`` + ``/`` (``"."`` separator, zarr-python's and
  tensorstore's ``v2`` encoding) was taken for the array, but its chunk files (``c.0.0``,
  ``0.0``) were never stored: every reader saw the fill value, and the data was gone at the
  next mount. The view now keeps the writer's encoding and lays the files out with it.
- tensorstore reopens an array's metadata when it resizes it and refuses when that reads
  back otherwise than it wrote: a Zarr array written with zstd ``checksum: true`` or blosc
  with a ``blocksize``, and every N5 dataset tensorstore makes with ``gzip`` (its default
  ``level: -1``), could not be resized. Their metadata now reads back as written.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import warnings

import numpy as np
import pytest
from support import deep_check

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")
h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def _store_digest(store) -> str:
    out = hashlib.sha256()
    for d, _, files in sorted(os.walk(store)):
        for f in sorted(files):
            p = os.path.join(d, f)
            out.update(p.encode())
            with open(p, "rb") as fh:
                out.update(fh.read())
    return out.hexdigest()


def _ts(driver: str, path, **extra):
    return ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path)}, **extra}).result()


ENCODINGS = [({"name": "default", "separator": "."}, ["c.0.0", "c.0.1", "zarr.json"]),
             ({"name": "v2", "separator": "."}, ["0.0", "0.1", "zarr.json"]),
             ({"name": "v2", "separator": "/"}, ["0", "1", "zarr.json"])]


@pytest.mark.parametrize("shards", [None, (4, 4)], ids=["chunks", "shards"])
def test_chunk_key_encodings_are_stored(mount_store, tmp_path, shards):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    root = m.path / "zarr" / "k.zarr"
    root.mkdir()
    g = zarr.open_group(str(root), mode="a")
    x = np.arange(60, dtype="i4").reshape(6, 10)
    for i, (enc, _) in enumerate(ENCODINGS):
        a = g.create_array(f"a{i}", shape=(6, 10), chunks=(2, 2) if shards else (4, 4), shards=shards, dtype="i4",
                           chunk_key_encoding=enc, fill_value=-1)
        a[...] = x
        meta = json.loads((root / f"a{i}" / "zarr.json").read_text())
        assert meta["chunk_key_encoding"] == {"name": enc["name"], "configuration": {"separator": enc["separator"]}}
        np.testing.assert_array_equal(a[...], x)  # the writing handle
        np.testing.assert_array_equal(_ts("zarr3", root / f"a{i}").read().result(), x)
        with h5py.File(m.path / "hdf5" / "k.h5", "r") as f:
            np.testing.assert_array_equal(f[f"a{i}"][...], x)
        np.testing.assert_array_equal(_ts("n5", m.path / "n5" / "k.n5" / f"a{i}").read().result().T, x)
    m.stop()
    m.start()  # stored, not kept by the daemon
    for i, (enc, names) in enumerate(ENCODINGS):
        a = zarr.open_array(str(root / f"a{i}"), mode="r+")
        np.testing.assert_array_equal(a[...], x)
        a.resize((3, 5))  # the files outside the new shape go (zarr-python deletes them by name)
        assert sorted(os.listdir(root / f"a{i}"))[:len(names)] == names, enc
        with h5py.File(m.path / "hdf5" / "k.h5", "r") as f:
            np.testing.assert_array_equal(f[f"a{i}"][...], x[:3, :5])
        first = root / f"a{i}" / names[0]
        os.unlink(first / "0" if first.is_dir() else first)  # the chunk (or shard) at 0, 0 goes
        want = x[:3, :5].copy()
        want[:, :4] = -1
        np.testing.assert_array_equal(_ts("zarr3", root / f"a{i}").read().result(), want)
    shutil.rmtree(root / "a0")
    shutil.rmtree(root / "a2")
    assert sorted(zarr.open_group(str(root)).keys()) == ["a1"]
    m.stop()
    deep_check(store)


@pytest.mark.parametrize("enc", [{"name": "default", "configuration": {"separator": "."}}, {"name": "v2"},
                                 {"name": "v2", "configuration": {"separator": "/"}}], ids=["dot", "v2", "v2slash"])
def test_tensorstore_chunk_key_encodings(mount_store, tmp_path, enc):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    (m.path / "zarr" / "t.zarr").mkdir()
    path = m.path / "zarr" / "t.zarr" / "a"
    t = _ts("zarr3", path, create=True, metadata={
        "shape": [5, 7], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
        "chunk_key_encoding": enc, "data_type": "int16"})
    t[...] = np.arange(35, dtype="i2").reshape(5, 7)
    t = t.resize(exclusive_max=[8, 8]).result()
    t[5:, 7:] = 100
    want = np.zeros((8, 8), "i2")
    want[:5, :7] = np.arange(35).reshape(5, 7)
    want[5:, 7:] = 100
    np.testing.assert_array_equal(_ts("zarr3", path).read().result(), want)
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[...], want)
    with h5py.File(m.path / "hdf5" / "t.h5", "r") as f:
        np.testing.assert_array_equal(f["a"][...], want)
    m.stop()
    deep_check(store)


def test_tensorstore_resizes_arrays_with_its_codec_spelling(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    (m.path / "zarr" / "c.zarr").mkdir()
    chains = {
        "zstd_checksum": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1, "checksum": True}}],
        "blosc_blocksize": [{"name": "bytes"}, {"name": "blosc", "configuration": {
            "cname": "lz4hc", "shuffle": "bitshuffle", "typesize": 2, "blocksize": 1024}}],
        "sharded_zstd_checksum": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2], "codecs": [
            {"name": "bytes"}, {"name": "zstd", "configuration": {"level": 2, "checksum": True}}]}}],
    }
    data = np.arange(63, dtype="u2").reshape(7, 9)
    for name, codecs in chains.items():
        path = m.path / "zarr" / "c.zarr" / name
        t = _ts("zarr3", path, create=True, metadata={
            "shape": [7, 9], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
            "data_type": "uint16", "codecs": codecs, "fill_value": 9})
        t[...] = data
        t = t.resize(exclusive_max=[10, 12]).result()  # refused before: the metadata read back otherwise
        t[7:, 9:] = 1
        want = np.full((10, 12), 9, "u2")
        want[:7, :9] = data
        want[7:, 9:] = 1
        np.testing.assert_array_equal(_ts("zarr3", path).read().result(), want, err_msg=name)
        np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[...], want, err_msg=name)
        with h5py.File(m.path / "hdf5" / "c.h5", "r") as f:
            np.testing.assert_array_equal(f[name][...], want, err_msg=name)
    meta = json.loads((m.path / "zarr" / "c.zarr" / "zstd_checksum" / "zarr.json").read_text())
    assert meta["codecs"][1] == {"name": "zstd", "configuration": {"level": 1, "checksum": True}}
    # a writer that spells the chain the view's way leaves the view's spelling
    meta["codecs"][1]["configuration"]["checksum"] = False
    (m.path / "zarr" / "c.zarr" / "zstd_checksum" / "zarr.json").write_text(json.dumps(meta))
    again = json.loads((m.path / "zarr" / "c.zarr" / "zstd_checksum" / "zarr.json").read_text())
    assert again["codecs"][1]["configuration"]["checksum"] is False
    m.stop()
    deep_check(store)


N5_COMPRESSIONS = [{"type": "gzip"}, {"type": "gzip", "useZlib": True}, {"type": "gzip", "level": 3},
                   {"type": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
                   {"type": "zstd"}, {"type": "bzip2"}, {"type": "raw"}]


def test_tensorstore_n5_datasets_resize(mount_store, tmp_path):
    z5py = pytest.importorskip("z5py")
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    (m.path / "n5" / "n.n5").mkdir()
    data = np.arange(63, dtype="u2").reshape(7, 9)  # tensorstore's order: N5's dimensions as listed
    for i, comp in enumerate(N5_COMPRESSIONS):
        path = m.path / "n5" / "n.n5" / f"d{i}"
        t = _ts("n5", path, create=True, metadata={"dimensions": [7, 9], "blockSize": [3, 4], "dataType": "uint16",
                                                   "compression": comp})
        t[...] = data
        t = t.resize(exclusive_max=[12, 5]).result()  # tensorstore's gzip ("level": -1) was refused here
        want = np.zeros((12, 5), "u2")
        want[:7] = data[:, :5]
        np.testing.assert_array_equal(_ts("n5", path).read().result(), want, err_msg=str(comp))
        np.testing.assert_array_equal(z5py.File(str(m.path / "n5" / "n.n5"), "r")[f"d{i}"][...], want.T)
        with h5py.File(m.path / "hdf5" / "n.h5", "r") as f:
            np.testing.assert_array_equal(f[f"d{i}"][...], want.T, err_msg=str(comp))
        np.testing.assert_array_equal(zarr.open_array(str(m.path / "zarr" / "n.zarr" / f"d{i}"), mode="r")[...],
                                      want.T)
    shown = json.loads((m.path / "n5" / "n.n5" / "d0" / "attributes.json").read_text())["compression"]
    assert shown == {"type": "gzip", "level": -1, "useZlib": False}  # as tensorstore wrote it
    m.stop()
    deep_check(store)


def test_bad_key_encodings_leave_the_store_as_it_was(mount_store, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    root = m.path / "zarr" / "b.zarr"
    root.mkdir()
    a = zarr.create_array(str(root / "a"), shape=(4,), chunks=(2,), dtype="i4", chunk_key_encoding={
        "name": "default", "separator": "."})
    a[...] = [1, 2, 3, 4]
    meta = json.loads((root / "a" / "zarr.json").read_text())
    before = _store_digest(store)
    for enc in [{"name": "default", "configuration": {"separator": "-"}}, {"name": "v3"}]:
        bad = dict(meta, chunk_key_encoding=enc)
        with pytest.raises(OSError) as exc:
            (root / "a" / "zarr.json").write_text(json.dumps(bad))
        assert exc.value.errno == 22
    assert _store_digest(store) == before
    np.testing.assert_array_equal(zarr.open_array(str(root / "a"), mode="r")[...], [1, 2, 3, 4])
    m.stop()
    deep_check(store)


def test_the_other_formats_metadata_is_refused_not_lost(mount_store, tmp_path):
    """A Zarr writer pointed at ``n5/`` (zarr_n5 under zarr-python 3 writes plain Zarr v2; a
    Zarr v3 writer writes ``zarr.json``) or an N5 writer pointed at ``zarr/``: the files were
    taken as scratch files that vanish at unmount, the data with them. Now refused at once
    (EOPNOTSUPP, one log line), the store as it was."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    (m.path / "n5" / "x.n5" / "a").mkdir(parents=True)  # groups (mkdir), as the writers below make them
    (m.path / "zarr" / "y.zarr" / "b").mkdir(parents=True)
    before = _store_digest(store)
    with pytest.raises(OSError) as exc:
        zarr.create_array(str(m.path / "n5" / "x.n5" / "a"), shape=(4,), chunks=(2,), dtype="i4")
    assert exc.value.errno == 95
    zarr_n5 = pytest.importorskip("zarr_n5")
    with pytest.raises(OSError) as exc:
        st = zarr_n5.N5WrapperStore(zarr.storage.LocalStore(str(m.path / "n5" / "x.n5")))
        g = zarr.open_group(zarr_n5.ImplicitGroupWrapperStore(st), mode="a", zarr_format=2)
        g.create_array("a", shape=(4,), chunks=(2,), dtype="i4")[...] = 1
    assert exc.value.errno == 95
    with pytest.raises((ValueError, NotImplementedError), match="Operation not supported"):
        _ts("n5", m.path / "zarr" / "y.zarr" / "b", create=True, metadata={
            "dimensions": [4], "blockSize": [2], "dataType": "int32", "compression": {"type": "raw"}})
    for name in (".zarray", ".zattrs", "zarr.json"):
        with pytest.raises(OSError) as exc:
            (m.path / "n5" / "x.n5" / name).write_text("{}")
        assert exc.value.errno == 95
    assert _store_digest(store) == before
    assert "Zarr metadata (zarr.json) cannot be written in the N5 view" in m.log_text()
    assert "N5 metadata (attributes.json) cannot be written in the Zarr view" in m.log_text()
    m.stop()
    deep_check(store)


def test_zarr_python_reads_back_its_numcodecs_arrays(mount_store, tmp_path):
    """zarr-python's ``numcodecs.*`` codecs: the view showed (and served) the stored deflate as
    a ``gzip`` member and bzip2/shuffle/fletcher32 chunks decoded, while the writer's open
    handle (and every later open of the view's zarr.json by a numcodecs-reading writer) kept
    ``numcodecs.zlib``/``numcodecs.bz2``: "incorrect header check", "Invalid data stream".
    Now such an array's chunks are served as stored under the codecs its writer declared."""
    from zarr.codecs import GzipCodec
    from zarr.codecs import numcodecs as nc

    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    warnings.filterwarnings("ignore")
    root = m.path / "zarr" / "nc.zarr"
    root.mkdir()
    chains = {"zlib": [nc.Zlib(level=3)], "bz2": [nc.BZ2()], "shuffle_gzip": [nc.Shuffle(elementsize=4), GzipCodec()],
              "shuffle_zlib": [nc.Shuffle(), nc.Zlib()], "fletcher32": [nc.Fletcher32()], "zstd": [nc.Zstd(level=2)]}
    want = np.array([0, 9, 2, 3, 4, 5], "i4")
    for name, compressors in chains.items():
        for shards in (None, (6,)):
            path = root / f"{name}{'_sharded' if shards else ''}"
            a = zarr.create_array(str(path), shape=(6,), chunks=(3,), shards=shards, dtype="i4",
                                  compressors=compressors)
            a[...] = np.arange(6)
            a[1] = 9  # a read-modify-write of the chunk through the writer's own handle
            np.testing.assert_array_equal(a[...], want, err_msg=name)
            np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[...], want, err_msg=name)
            with h5py.File(m.path / "hdf5" / "nc.h5", "r") as f:
                np.testing.assert_array_equal(f[path.name][...], want, err_msg=name)
    names = [c["name"] for c in json.loads((root / "zlib" / "zarr.json").read_text())["codecs"]]
    assert names == ["bytes", "numcodecs.zlib"]
    # numcodecs.zstd reads the same bytes as Zarr v3's zstd: shown as that, so tensorstore reads it
    names = [c["name"] for c in json.loads((root / "zstd" / "zarr.json").read_text())["codecs"]]
    assert names == ["bytes", "zstd"]
    np.testing.assert_array_equal(_ts("zarr3", root / "zstd").read().result(), want)
    m.stop()
    deep_check(store)


def test_null_dimension_names_read_back_as_null(mount_store, tmp_path):
    """``dimension_names`` with a null (tensorstore, zarr-python ``[None, "x"]``) read back as
    ``""``: tensorstore then refused to resize the array ("incompatible with existing metadata")."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    (m.path / "zarr" / "d.zarr").mkdir()
    path = m.path / "zarr" / "d.zarr" / "a"
    attrs = {"a": 1, "b": [1, 2.5], "c": None, "d": {"x": [1, {"y": "z"}]}, "e": True, "f": "µ", "g": [],
             "h": [True, False], "i": 2**64 - 1, "k": ["a", "b"], "l": [[1, 2], [3, 4]], "n": [1, None]}
    t = _ts("zarr3", path, create=True, metadata={
        "shape": [4, 4], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
        "data_type": "float32", "fill_value": "NaN", "dimension_names": ["y", None], "attributes": attrs})
    t[...] = 1
    meta = json.loads((path / "zarr.json").read_text())
    assert meta["dimension_names"] == ["y", None]
    assert meta["attributes"] == attrs
    t = t.resize(exclusive_max=[6, 6]).result()
    got = _ts("zarr3", path).read().result()
    assert (got[:4, :4] == 1).all() and np.isnan(got[4:]).all()
    a = zarr.create_array(str(m.path / "zarr" / "d.zarr" / "z"),
                          shape=(2, 2), chunks=(2, 2), dtype="i4", dimension_names=[None, "x"])
    a[...] = 1
    assert zarr.open_array(str(m.path / "zarr" / "d.zarr" / "z"), mode="r").metadata.dimension_names == (None, "x")
    m.stop()
    deep_check(store)


def test_shell_redirection_into_metadata_logs_nothing_when_taken(mount_store, tmp_path):
    """``echo '{...}' > zarr.json``: the shell opens with O_TRUNC and closes a first descriptor
    before writing; that empty file was refused with a warning though the write that follows was
    stored. Now only what is refused is logged: once."""
    import subprocess

    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    (m.path / "zarr" / "r.zarr").mkdir()
    meta = m.path / "zarr" / "r.zarr" / "zarr.json"
    body = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {"by": "sh"}})
    subprocess.run(["sh", "-c", f"echo '{body}' > '{meta}'"], check=True)
    assert json.loads(meta.read_text())["attributes"] == {"by": "sh"}
    subprocess.run(["sh", "-c", f"echo 'not json' > '{meta}'"], check=False)  # sh ignores close()'s error
    time.sleep(0.5)  # a release's line would come after close()
    lines = [ln for ln in m.log_text().splitlines() if "r.zarr/zarr.json" in ln]
    assert len(lines) == 1, lines  # the refused write, not the empty file before it
    assert json.loads(meta.read_text())["attributes"] == {"by": "sh"}
