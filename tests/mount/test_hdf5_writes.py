"""Writes through the HDF5 view of a real mount: h5py ``"r+"`` on ``hdf5/<stem>.h5``.

A source file made with h5py is imported into a store; a writer changes
chunk data, extents and attributes through the view; every other view
(h5py on a fresh open, zarr-python, tensorstore on N5, tifffile, h5dump)
and the store itself then hold exactly what a numpy model of the writes
says. Structural changes and garbage are refused and leave the store
byte-identical.
"""
from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")
tifffile = pytest.importorskip("tifffile")

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)


def snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def mtimes(store: Path) -> dict[str, int]:
    return {str(p.relative_to(store)): p.stat().st_mtime_ns for p in sorted(store.rglob("*")) if p.is_file()}


def make_source(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    want = {
        "gz": rng.random((100, 90)).astype("float32"),
        "zs": rng.integers(-3000, 3000, (64, 64)).astype(">i2"),
        "flags": rng.integers(0, 2, (40,)).astype(bool),
        "keep": rng.integers(0, 1000, (64, 64)).astype("int32"),
    }
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "before"
        f.attrs["n"] = np.int64(3)
        f.attrs["gone"] = np.arange(4, dtype="float64")
        f.create_dataset("gz", data=want["gz"], chunks=(32, 32), maxshape=(None, 90), compression="gzip")
        g = f.create_group("grp")
        g.attrs["fixed"] = np.bytes_(b"abcd")
        g.create_dataset("zs", data=want["zs"], chunks=(16, 16), **hdf5plugin.Zstd())
        f.create_dataset("flags", data=want["flags"], chunks=(8,), compression="gzip")
        f.create_dataset("keep", data=want["keep"], chunks=(16, 16), compression="gzip")
        f["gz"].attrs["unit"] = "um"
        cmp = np.zeros(20, dtype=[("a", "<i4"), ("b", "<f8")])
        cmp["a"], cmp["b"] = np.arange(20), np.linspace(0, 1, 20)
        f.create_dataset("cmp", data=cmp, chunks=(5,), compression="gzip")
        en = np.arange(30, dtype="u1") % 2
        f.create_dataset("en", data=en, chunks=(10,), dtype=h5py.enum_dtype({"R": 0, "G": 1}, basetype="u1"))
    return {"gz": want["gz"], "grp/zs": want["zs"], "flags": want["flags"], "keep": want["keep"],
            "cmp": cmp, "en": en}


@pytest.fixture
def imported(tmp_path):
    src = tmp_path / "exp.h5"
    want = make_source(src)
    store = tmp_path / "store"
    domain = import_source(src, str(store), progress=False)
    assert domain == "/exp.h5"
    return store, want


def model_array(store: Path, path: str) -> np.ndarray:
    from corpus import read_dataset

    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    cat = Catalog(open_store(str(store), read_only=True))
    return read_dataset(cat, cat.load("/exp.h5").resolve(path))


def h5dump_values(path: Path, name: str) -> np.ndarray:
    res = subprocess.run(["h5dump", "-d", name, "-y", "-w", "0", str(path)], capture_output=True, text=True,
                         check=False, env=ENV, timeout=120)
    body = res.stdout.split("DATA {", 1)[1]
    return np.array([float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", body.split("}", 1)[0])])


def chunk_files(store: Path) -> dict[str, tuple[int, bytes]]:
    """Chunk objects (``db/<root>/d/<id>/i_j``): path -> (mtime, bytes)."""
    return {str(p.relative_to(store)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in store.rglob("*") if p.is_file() and p.parent.parent.name == "d"
            and re.fullmatch(r"[0-9_]+", p.name)}


def test_h5py_r_plus_writes_read_through_every_view(mount_store, imported):
    store, want = imported
    before_chunks = chunk_files(store)
    m = mount_store(str(store))
    path = m.path / "hdf5" / "exp.h5"
    with h5py.File(path, "r+") as f:
        f["gz"][3:5, 40:42] = -1.5  # partial write into a deflate chunk
        f["grp/zs"][0:16, 16:32] = 11  # a whole zstd chunk
        f["grp/zs"][50, 60] = -7  # partial, edge-free zstd chunk
        f["flags"][8:16] = True
        f["cmp"][2:4] = np.array([(-1, 9.5), (-2, 8.5)], dtype=want["cmp"].dtype)
        f["en"][0:5] = 1
        f["gz"].resize((130, 90))  # append along the unlimited axis
        f["gz"][100:130] = 2.25
        f.attrs["title"] = "after"  # changed
        f.attrs["added"] = np.arange(3, dtype="int16")
        f.attrs["vs"] = "variable length"
        del f.attrs["gone"]
        f["grp"].attrs["fixed"] = np.bytes_(b"wxyz")
        f["gz"].attrs["scale"] = 0.5
    want["gz"][3:5, 40:42] = -1.5
    want["gz"] = np.concatenate([want["gz"], np.full((30, 90), 2.25, "float32")])
    want["grp/zs"][0:16, 16:32] = 11
    want["grp/zs"][50, 60] = -7
    want["flags"][8:16] = True
    want["cmp"][2:4] = np.array([(-1, 9.5), (-2, 8.5)], dtype=want["cmp"].dtype)
    want["en"][0:5] = 1

    for name, data in want.items():
        np.testing.assert_array_equal(model_array(store, name), data)
    with h5py.File(path, "r") as f:
        for name, data in want.items():
            np.testing.assert_array_equal(f[name][()], data)
        assert f.attrs["title"] == "after" and "gone" not in f.attrs and f.attrs["n"] == 3
        np.testing.assert_array_equal(f.attrs["added"], np.arange(3))
        assert f.attrs["vs"] == "variable length"
        assert f["grp"].attrs["fixed"] == b"wxyz"
        assert f["gz"].attrs["scale"] == 0.5 and f["gz"].attrs["unit"] == "um"
        assert f["gz"].maxshape == (None, 90)
    root = zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="r")
    for name in ("gz", "grp/zs", "flags", "keep"):
        np.testing.assert_array_equal(root[name][:], want[name])
    assert root.attrs["title"] == "after"
    for name in ("gz", "grp/zs", "keep"):
        t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "exp.n5" / name)}})
        np.testing.assert_array_equal(np.asarray(t.result().read().result()).T, want[name])
    for name in ("gz", "grp/zs"):
        with tifffile.TiffFile(m.path / "tiff" / "exp" / f"{name}.tif") as tif:
            np.testing.assert_array_equal(tif.asarray(), want[name])
    np.testing.assert_allclose(h5dump_values(path, "/grp/zs"), want["grp/zs"].ravel())
    np.testing.assert_allclose(h5dump_values(path, "/gz"), want["gz"].ravel(), atol=1e-6)  # h5dump prints 6 digits

    # chunks nobody touched were not rewritten: same bytes, same mtime
    after = chunk_files(store)
    keep, gz = _dataset_key(store, "keep"), _dataset_key(store, "gz")
    kept = [k for k in before_chunks if f"/{keep}/" in k]
    assert len(kept) == 16
    kept += [k for k in before_chunks if f"/{gz}/" in k and k.rsplit("/", 1)[1] not in ("0_1", "3_0", "3_1", "3_2")]
    assert len(kept) == 16 + 8
    for k in kept:
        assert after[k] == before_chunks[k], k
    assert after[next(k for k in before_chunks if k.endswith(f"/{gz}/0_1"))] != before_chunks[
        next(k for k in before_chunks if k.endswith(f"/{gz}/0_1"))]
    assert "not stored" not in m.log_text()


def _dataset_key(store: Path, name: str) -> str:
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    cat = Catalog(open_store(str(store), read_only=True))
    return "-".join(cat.load("/exp.h5").resolve(name).id.split("-")[-3:])


def test_no_op_r_plus_commits_nothing(mount_store, imported):
    store, _ = imported
    m = mount_store(str(store))
    before = snapshot(store)
    stamps = mtimes(store)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r+") as f:
        f["gz"][0, 0]
    assert snapshot(store) == before
    assert mtimes(store) == stamps


def test_structure_made_through_the_view_shows_in_every_view(mount_store, imported):
    """Groups and datasets made, deleted, linked and moved by h5py ``r+``: the model, a fresh
    h5py, zarr-python, tensorstore (N5), h5dump and TIFF all agree; data of objects that were
    only moved is never rewritten."""
    store, want = imported
    before_chunks = chunk_files(store)
    keep_key = _dataset_key(store, "keep")
    m = mount_store(str(store))
    path = m.path / "hdf5" / "exp.h5"
    rng = np.random.default_rng(3)
    new = {
        "made/chunked": rng.integers(0, 60000, (50, 70)).astype("uint16"),
        "made/contig": rng.random((30, 20)),  # contiguous: becomes chunked
        "made/deep/zs": rng.integers(-9, 9, (40, 40)).astype("int8"),
        "compact": np.arange(6, dtype="int32"),
    }
    with h5py.File(path, "r+") as f:
        g = f.create_group("made")
        g.attrs["purpose"] = "made through the view"
        g.create_dataset("chunked", data=new["made/chunked"], chunks=(16, 32), compression="gzip", shuffle=True)
        g.create_dataset("contig", data=new["made/contig"])
        g.create_group("deep").create_dataset("zs", data=new["made/deep/zs"], chunks=(10, 10), **hdf5plugin.Zstd())
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        sid = h5py.h5s.create_simple((6,))
        h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I32LE, sid, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, new["compact"])
        f.create_dataset("strings", data=np.array(["a", "bb", "ccc"], dtype=h5py.string_dtype()))
        g["chunked"].attrs["unit"] = "counts"
        del f["flags"]  # a dataset
        f.move("keep", "made/kept")  # a move: the same object, its chunks untouched
        f["soft"] = h5py.SoftLink("/gz")
        f["made/hard_gz"] = f["gz"]  # a second hard link
        f["ext"] = h5py.ExternalLink("other.h5", "/x")
    want.pop("flags")
    want["made/kept"] = want.pop("keep")
    want.update(new)

    for name, data in want.items():
        np.testing.assert_array_equal(model_array(store, name), data)
    with h5py.File(path, "r") as f:
        for name, data in want.items():
            np.testing.assert_array_equal(f[name][()], data)
        assert "flags" not in f and "keep" not in f
        assert [s.decode() for s in f["strings"][()]] == ["a", "bb", "ccc"]
        assert f["made"].attrs["purpose"] == "made through the view"
        assert f["made/chunked"].attrs["unit"] == "counts"
        assert f["made/chunked"].compression == "gzip" and f["made/chunked"].chunks == (16, 32)
        assert f["made/contig"].chunks is not None  # stored chunked
        assert f.get("soft", getlink=True).path == "/gz"
        np.testing.assert_array_equal(f["soft"][()], want["gz"])
        assert f["made/hard_gz"].id == f["gz"].id or np.array_equal(f["made/hard_gz"][()], want["gz"])
        link = f.get("ext", getlink=True)
        assert (link.filename, link.path) == ("other.h5", "/x")
    root = zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="r")
    for name in ("made/chunked", "made/contig", "made/deep/zs", "made/kept"):
        np.testing.assert_array_equal(root[name][:], want[name])
    assert "flags" not in root
    for name in ("made/chunked", "made/deep/zs"):
        t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(m.path / "n5" / "exp.n5" / name)}})
        np.testing.assert_array_equal(np.asarray(t.result().read().result()).T, want[name])
    z5py = pytest.importorskip("z5py")
    n5 = z5py.File(str(m.path / "n5" / "exp.n5"), mode="r")
    for name in ("made/chunked", "made/kept"):
        np.testing.assert_array_equal(n5[name][:], want[name])
    with tifffile.TiffFile(m.path / "tiff" / "exp" / "made" / "chunked.tif") as tif:
        np.testing.assert_array_equal(tif.asarray(), want["made/chunked"])
    np.testing.assert_allclose(h5dump_values(path, "/made/deep/zs"), want["made/deep/zs"].ravel())

    # the moved dataset is the same object: its chunks were neither read nor rewritten
    assert _dataset_key(store, "made/kept") == keep_key
    after = chunk_files(store)
    kept = [k for k in before_chunks if f"/{keep_key}/" in k]
    assert len(kept) == 16 and all(after[k] == before_chunks[k] for k in kept)
    # the deleted dataset's chunks are gone from the store
    assert not any(k not in after for k in before_chunks if f"/{keep_key}/" in k)
    assert len([k for k in before_chunks if k not in after]) == 5  # flags: 40 elements in chunks of 8
    assert "not stored" not in m.log_text()


def test_virtual_dataset_is_refused(mount_store, imported, tmp_path):
    store, _ = imported
    m = mount_store(str(store))
    before = snapshot(store)
    with pytest.raises((OSError, RuntimeError)) as ei:  # h5py reports close() errors as RuntimeError
        with h5py.File(m.path / "hdf5" / "exp.h5", "r+") as f:
            layout = h5py.VirtualLayout(shape=(64, 64), dtype="int32")
            layout[:] = h5py.VirtualSource(".", "keep", shape=(64, 64))
            f.create_virtual_dataset("virt", layout)
    assert getattr(ei.value, "errno", None) == errno.EOPNOTSUPP or f"errno = {errno.EOPNOTSUPP}," in str(ei.value)
    assert snapshot(store) == before
    lines = [ln for ln in m.log_text().splitlines() if "/virt" in ln and "virtual" in ln]
    assert len(lines) == 1, m.log_text()[-2000:]


def test_garbage_over_the_superblock_is_refused(mount_store, imported):
    store, _ = imported
    m = mount_store(str(store))
    before = snapshot(store)
    with pytest.raises(OSError) as ei, open(m.path / "hdf5" / "exp.h5", "r+b") as f:
        f.write(os.urandom(2048))
    assert ei.value.errno in (errno.EINVAL, errno.EIO)
    assert snapshot(store) == before
    time.sleep(1)  # FUSE RELEASE is asynchronous: let the refused file leave the overlay first
    with pytest.raises(OSError) as ei:
        os.truncate(m.path / "hdf5" / "exp.h5", 1000)
    assert ei.value.errno == errno.EINVAL
    assert snapshot(store) == before
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        assert f.attrs["title"] == "before"


def test_r_plus_writes_into_strings_references_scalars_and_contiguous_data(mount_store, tmp_path):
    """Data the view converts (variable-length strings, references, scalars, small contiguous
    datasets) written in place by h5py: read back through HDF5 and stored in the store's encoding."""
    src = tmp_path / "kinds.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("vstr", data=np.array(["a", "bb", "ccc", "dddd", "e"], dtype=object),
                         dtype=h5py.string_dtype(), chunks=(2,))
        f.create_dataset("fstr", data=np.array([b"ab", b"cd", b"ef"], dtype="S2"), chunks=(2,))
        f.create_dataset("scalar", data=np.float64(1.5))
        f.create_dataset("contig", data=np.arange(12, dtype="int16").reshape(3, 4))
        f.create_dataset("target", data=np.arange(3))
        refs = f.create_dataset("refs", (2,), dtype=h5py.ref_dtype)
        refs[0] = f["target"].ref
    store = tmp_path / "store"
    import_source(src, str(store), progress=False)
    m = mount_store(str(store))
    path = m.path / "hdf5" / "kinds.h5"
    with h5py.File(path, "r+") as f:
        f["vstr"][1] = "changed and longer"
        f["vstr"][4] = ""
        f["fstr"][2] = b"zz"
        f["scalar"][()] = -2.25
        f["contig"][1, 1:3] = [70, 80]
        f["refs"][1] = f["contig"].ref
    with h5py.File(path, "r") as f:
        assert [s.decode() for s in f["vstr"][()]] == ["a", "changed and longer", "ccc", "dddd", ""]
        assert list(f["fstr"][()]) == [b"ab", b"cd", b"zz"]
        assert f["scalar"][()] == -2.25
        want = np.arange(12, dtype="int16").reshape(3, 4)
        want[1, 1:3] = [70, 80]
        np.testing.assert_array_equal(f["contig"][()], want)
        assert f[f["refs"][0]].name == "/target" and f[f["refs"][1]].name == "/contig"
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    from corpus import read_dataset

    cat = Catalog(open_store(str(store), read_only=True))
    model = cat.load("/kinds.h5")
    np.testing.assert_array_equal(read_dataset(cat, model.resolve("contig")), want)
    assert [x.decode() if isinstance(x, bytes) else x for x in read_dataset(cat, model.resolve("vstr"))] == \
        ["a", "changed and longer", "ccc", "dddd", ""]
    root = zarr.open_group(str(m.path / "zarr" / "kinds.zarr"), mode="r")
    np.testing.assert_array_equal(root["contig"][:], want)
    assert float(root["scalar"][()]) == -2.25
    assert "not stored" not in m.log_text()
