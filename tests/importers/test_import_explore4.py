"""``polyfs import``/``create``/``check`` as a new user meets them (no mount needed).

- a netCDF-3 classic file is named as such, with the way to convert it;
- a store path that is an existing file is refused by name (not mkdir's bare "File exists");
- a domain that would hide another in a view (at another's folder, inside another domain,
  or with the same view name as another) is refused before anything is written, by
  ``import`` and ``create`` alike; re-importing over the same path stays possible;
- ``check --repair`` of a store that cannot be written fails at once instead of reporting
  every rebuild as "repaired" while each failed;
- Zarr v3 ``variable_length_bytes`` arrays import (they failed with ``invalid literal for
  int()``), and numpy time and ``fixed_length_utf32`` data types keep the hint the Zarr view
  needs to serve them as declared.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from polyfs.check import check_store
from polyfs.cli import main
from polyfs.errors import AlreadyExists, InvalidInput, ReadOnly, SourceError
from polyfs.importers import import_source
from polyfs.inspect import create_domain
from polyfs.model import keys
from polyfs.model.catalog import Catalog
from polyfs.store import open_store
from polyfs.store.local import LocalStore

from .import_helpers import listing

h5py = pytest.importorskip("h5py")


@pytest.fixture
def small_h5(tmp_path) -> Path:
    p = tmp_path / "small.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.arange(6, dtype="i4")
    return p


def test_netcdf3_classic_is_named(tmp_path):
    src = tmp_path / "old.nc"
    src.write_bytes(b"CDF\x01" + bytes(60))
    with pytest.raises(SourceError, match="netCDF-3.*nccopy -k nc4"):
        import_source(src, str(tmp_path / "store"), progress=False)


def test_store_path_that_is_a_file(tmp_path, small_h5, capsys):
    target = tmp_path / "not-a-store"
    target.write_bytes(b"hello")
    assert main(["import", str(small_h5), str(target), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "is not a directory" in err and "File exists" not in err
    assert target.read_bytes() == b"hello"
    with pytest.raises(InvalidInput, match="not a directory"):
        create_domain(str(target), "/x.h5")


@pytest.mark.parametrize("first,second", [
    ("/a/b.h5", "/a"),            # a domain where another has its folder
    ("/a", "/a/b.h5"),            # a domain inside another domain
    ("/a.h5", "/a/b.h5"),         # tiff/a is /a.h5's directory of images
    ("/a.h5", "/a"),              # both are zarr/a.zarr, n5/a.n5, tiff/a
    ("/x.h5", "/x.h5/y.h5"),      # hdf5/x.h5 is a file
])
def test_domain_that_would_hide_another_is_refused(tmp_path, small_h5, first, second):
    store = tmp_path / "store"
    import_source(small_h5, str(store), domain=first, progress=False)
    before = listing(store)
    with pytest.raises(AlreadyExists, match="in the mount"):
        import_source(small_h5, str(store), domain=second, progress=False)
    assert listing(store) == before
    with pytest.raises(AlreadyExists, match="in the mount"):
        create_domain(str(store), second)
    assert listing(store) == before
    assert Catalog(open_store(str(store))).list_domains() == [first]


def test_siblings_and_overwrite_still_allowed(tmp_path, small_h5):
    store = tmp_path / "store"
    for d in ("/a/b.h5", "/a/c.h5", "/a/b2.h5", "/ab.h5", "/nc/groups.nc", "/nc/groups.h5x"):
        import_source(small_h5, str(store), domain=d, progress=False)
    import_source(small_h5, str(store), domain="/a/b.h5", overwrite=True, progress=False)
    assert len(Catalog(open_store(str(store))).list_domains()) == 6


def test_repair_of_unwritable_store_fails_up_front(tmp_path, small_h5, monkeypatch):
    store = tmp_path / "store"
    import_source(small_h5, str(store), domain="/s.h5", progress=False)
    monkeypatch.setattr(LocalStore, "write_refusal", lambda self: "its file system is mounted read-only")
    with pytest.raises(ReadOnly, match="cannot --repair.*read-only"):
        check_store(str(store), repair=True)
    assert not check_store(str(store)).problems  # a plain check still runs


zarr = pytest.importorskip("zarr")


def test_zarr_variable_length_bytes_and_declared_types(tmp_path):
    src = tmp_path / "src.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=3)
    vb = g.create_array("vb", shape=(3,), chunks=(2,), dtype="variable_length_bytes")
    vb[:] = [b"a", b"", b"xyz"]
    dt = g.create_array("dt", shape=(3,), chunks=(2,), dtype="datetime64[s]")
    dt[:] = np.array(["2001-01-01", "NaT", "2020-01-01"], "datetime64[s]")
    u = g.create_array("u", shape=(2,), chunks=(2,), dtype="<U4")
    u[:] = ["ab", "wxyz"]
    store = tmp_path / "store"
    import_source(src, str(store), domain="/z.h5", progress=False)
    cat = Catalog(open_store(str(store)))
    model = cat.load("/z.h5")
    by_name = {e.path: e.obj for e in model.walk()}
    hints = {n: by_name[n].creation_properties.get("polyfs", {}) for n in ("/vb", "/dt", "/u")}
    assert hints["/dt"]["zarr_data_type"]["name"] == "numpy.datetime64"
    assert hints["/u"]["zarr_data_type"]["name"] == "fixed_length_utf32"
    assert "zarr_data_type" not in hints["/vb"]
    assert not check_store(str(store), deep=True).problems


@pytest.mark.parametrize("args,message", [
    (["--codec", "deflate", "--level", "10"], "deflate level 10 is out of range"),
    (["--codec", "deflate", "--level", "-1"], "deflate level -1 is out of range"),
    (["--codec", "zstd", "--level", "99"], "zstd level 99 is out of range"),
    (["--codec", "bzip2", "--level", "0"], "bzip2 level 0 is out of range"),
    (["--codec", "1,12"], "deflate level 12 is out of range"),
    (["--codec", "none", "--level", "3"], "does not compress"),
    (["--codec", "32001,0,0,0,0,5,9,1"], "blosc shuffle 9"),
    (["--codec", "32001,0,0,0,0,5,1,42"], "blosc compressor 42"),
])
def test_codec_levels_checked_before_anything_is_written(tmp_path, small_h5, capsys, args, message):
    """Out-of-range levels failed mid-import as a 'corrupt deflate stream' (deflate 10) or a
    numcodecs ValueError, or were stored as given (deflate -1, zstd 99: HDF5 refuses such
    parameters when it writes, so a view write into the dataset would fail later)."""
    store = tmp_path / "store"
    assert main(["import", str(small_h5), str(store), "--no-progress", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0 and err.count(str(small_h5)) == 1
    assert not store.exists() or not Catalog(open_store(str(store))).list_domains()


@pytest.mark.parametrize("codec", ["none", "deflate"])
def test_check_deep_decodes_variable_length_chunks(tmp_path, codec):
    """``check --deep`` skipped variable-length chunks, so a corrupt string chunk (which the
    views then fail to read with EIO) passed as 'store is consistent'."""
    src = tmp_path / "strings.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("s", data=np.array(["a", "bb", "ccc", "dddd", "e"] * 40, dtype=object),
                         dtype=h5py.string_dtype(), chunks=(64,))
        v = f.create_dataset("v", shape=(5,), dtype=h5py.vlen_dtype("i4"), chunks=(2,))
        v[0] = [1, 2]
        v[4] = [3]
    store = tmp_path / "store"
    import_source(src, str(store), domain="/s.h5", codec=codec, progress=False)
    assert not check_store(str(store), deep=True).problems  # edge chunks and empty elements parse
    cat = Catalog(open_store(str(store)))
    ds = next(e.obj for e in cat.load("/s.h5").walk() if e.path == "/s")
    key = cat.chunk_index(ds).key(0)
    path = store / key
    data = bytearray(path.read_bytes())
    if codec == "none":
        data = data[:-3]
    else:
        data[len(data) // 2] ^= 0xFF  # the stream's adler32 (and so the CRC32 table) is unchanged
    path.write_bytes(bytes(data))
    problems = check_store(str(store), deep=True).problems
    assert any(key in p and ("variable-length" in p or "deflate" in p) for p in problems), problems


def test_n5_container_that_is_one_dataset_keeps_no_version_attribute(tmp_path):
    """The root ``attributes.json`` of a single-dataset N5 container holds ``"n5"`` (the
    container version) next to the dataset keys; it became an attribute of ``/data``."""
    import json

    src = tmp_path / "one.n5"
    src.mkdir()
    (src / "attributes.json").write_text(json.dumps(
        {"n5": "2.0.0", "dimensions": [4, 3], "blockSize": [4, 3], "dataType": "uint8",
         "compression": {"type": "raw"}, "note": "kept"}))
    (src / "0").mkdir()
    header = (0).to_bytes(2, "big") + (2).to_bytes(2, "big") + (4).to_bytes(4, "big") + (3).to_bytes(4, "big")
    (src / "0" / "0").write_bytes(header + bytes(range(12)))
    store = tmp_path / "store"
    import_source(src, str(store), domain="/one.h5", progress=False)
    ds = next(e.obj for e in Catalog(open_store(str(store))).load("/one.h5").walk() if e.path == "/data")
    assert sorted(ds.attributes) == ["note"]


def test_zarr_implicit_groups_are_walked(tmp_path):
    """An array below directories without ``zarr.json`` (implicit groups of the Zarr v3
    drafts, hand-made trees) was skipped without a word: the import 'succeeded' empty."""
    src = tmp_path / "imp.zarr"
    zarr.open_group(str(src), mode="w", zarr_format=3)
    zarr.create_array(str(src / "x" / "y" / "arr"), shape=(4,), chunks=(2,), dtype="i4")[:] = [1, 2, 3, 4]
    assert not (src / "x" / "zarr.json").exists()
    store = tmp_path / "store"
    import_source(src, str(store), domain="/imp.h5", progress=False)
    paths = [e.path for e in Catalog(open_store(str(store))).load("/imp.h5").walk()]
    assert paths == ["/", "/x", "/x/y", "/x/y/arr"]


def test_zarr_dimension_names_kept(tmp_path):
    src = tmp_path / "dims.zarr"
    zarr.create_array(str(src), shape=(3, 4), chunks=(3, 4), dtype="f4", dimension_names=["y", None])
    store = tmp_path / "store"
    import_source(src, str(store), domain="/dims.h5", progress=False)
    ds = next(e.obj for e in Catalog(open_store(str(store))).load("/dims.h5").walk() if e.path == "/data")
    assert ds.attributes["_ARRAY_DIMENSIONS"].value == ["y", ""]


def test_repair_leaves_an_import_in_progress_alone(tmp_path, small_h5, monkeypatch):
    """``check --repair`` while an import was writing deleted the import's objects (not yet
    referenced by a domain); the import then committed a domain whose chunks were gone
    (EIO in every view, ``check --deep``: 'no object'). A prefix still being written is left
    alone now; a dead one (unchanged over the settle time) is still deleted."""
    import threading

    import polyfs.check as check_mod

    monkeypatch.setattr(check_mod, "ORPHAN_SETTLE", 0.5)
    store_dir = tmp_path / "store"
    import_source(small_h5, str(store_dir), domain="/live.h5", progress=False)
    store = open_store(str(store_dir))
    busy, dead = "db/0123abcd-0123abcd/", "db/0fedcba9-0fedcba9/"
    store.put(dead + "d/aaaa-bbbbbb-cccccc/0", b"left by a killed import")
    stop = threading.Event()

    def importing() -> None:
        i = 0
        while not stop.is_set():
            store.put(f"{busy}d/aaaa-bbbbbb-cccccc/{i}", b"chunk")
            i += 1
            time.sleep(0.02)

    t = threading.Thread(target=importing)
    t.start()
    try:
        time.sleep(0.1)
        report = check_store(str(store_dir), repair=True)
    finally:
        stop.set()
        t.join()
    assert store.exists(busy + "d/aaaa-bbbbbb-cccccc/0")
    assert any(busy in n and "still being written" in n for n in report.notes)
    assert not store.exists(dead + "d/aaaa-bbbbbb-cccccc/0")


def test_import_fails_if_its_chunks_vanish_before_commit(tmp_path, monkeypatch):
    """The import side of the same race: chunks deleted under a running import (a repair
    that ran anyway) make it fail and roll back instead of committing a broken domain."""
    from polyfs.errors import StoreError
    from polyfs.model.writer import DomainWriter

    src = tmp_path / "two.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.arange(1000, dtype="i4"), chunks=(100,))
    real = DomainWriter.write_chunk
    calls = []

    def write_then_lose(self, ds, coords, stored, crc32=None):
        real(self, ds, coords, stored, crc32)
        calls.append(coords)
        if len(calls) == 3:  # a concurrent repair deletes what was staged so far
            self.store.delete_prefix(keys.domain_db_prefix(self.root_id))

    monkeypatch.setattr(DomainWriter, "write_chunk", write_then_lose)
    store_dir = tmp_path / "store"
    with pytest.raises(StoreError, match="vanished"):
        import_source(src, str(store_dir), domain="/two.h5", progress=False)
    monkeypatch.undo()
    assert Catalog(open_store(str(store_dir))).list_domains() == []
    assert not check_store(str(store_dir)).problems


def test_info_and_check_of_a_folder(tmp_path, small_h5, capsys):
    """``polyfs info STORE /data`` (the folder of /data/a.h5...) said 'no domain /data';
    it lists the folder's domains now, and ``check STORE /data`` checks them."""
    store = tmp_path / "store"
    for d in ("/data/a.h5", "/data/sub/b.h5", "/other.h5"):
        import_source(small_h5, str(store), domain=d, progress=False)
    assert main(["info", str(store), "/data/"]) == 0
    assert capsys.readouterr().out.split() == ["/data/a.h5", "/data/sub/b.h5"]
    report = check_store(str(store), "/data", deep=True)
    assert report.checked["domains"] == 2 and not report.problems
    assert main(["info", str(store), "/dat"]) == 1
    assert "no domain /dat" in capsys.readouterr().err
    assert check_store(str(store), "/dat").problems


def test_bad_log_level_is_a_usage_error(capsys):
    """``polyfs mount S M --log-level chatty`` ended in a ValueError traceback."""
    with pytest.raises(SystemExit) as exc:
        main(["mount", "/nonexistent-store", "/nonexistent-mnt", "--log-level", "chatty"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'chatty'" in err and "Traceback" not in err


tifffile = pytest.importorskip("tifffile")


def test_tiff_cut_at_a_page_boundary_is_refused(tmp_path, capsys):
    """A 10-page TIFF cut where its third IFD starts imported as 2 pages with exit 0 (tifffile
    only logs the bad next-IFD offset and stops there)."""
    full = tmp_path / "pages.tif"
    tifffile.imwrite(full, np.arange(10 * 64 * 64, dtype="u2").reshape(10, 64, 64), photometric="minisblack")
    with tifffile.TiffFile(full) as t:
        third = t.pages[2].offset
    cut = tmp_path / "cut.tif"
    cut.write_bytes(full.read_bytes()[:third])
    store = tmp_path / "store"
    assert main(["import", str(cut), str(store), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "truncated or corrupt" in err[0] and "after 2 readable pages" in err[0], err
    assert not store.exists() or not Catalog(open_store(str(store))).list_domains()
    import_source(full, str(store), domain="/full.h5", progress=False)  # the whole file still imports


def test_default_domain_of_ome_files():
    """``cells.ome.tif`` became ``/cells.ome.h5`` (views: ``cells.ome.zarr``, ``tiff/cells.ome/``)."""
    from polyfs.importers import default_domain

    assert default_domain(Path("cells.ome.tif")) == "/cells.h5"
    assert default_domain(Path("cells.OME.TIFF")) == "/cells.h5"
    assert default_domain(Path("plate.ome.zarr")) == "/plate.h5"
    assert default_domain(Path("plain.tif")) == "/plain.h5"


@pytest.mark.parametrize("owner", ["", "  ", "a\nb"])
def test_empty_owner_refused(tmp_path, small_h5, owner):
    with pytest.raises(InvalidInput, match="--owner"):
        import_source(small_h5, str(tmp_path / "store"), owner=owner, progress=False)
    with pytest.raises(InvalidInput, match="--owner"):
        create_domain(str(tmp_path / "store"), "/x.h5", owner=owner)
    assert not (tmp_path / "store").exists()


def test_hsds_folders_do_not_count_as_domains(tmp_path, small_h5):
    """An HSDS folder (a ``.domain.json`` without a root group) is no domain of any view, so
    ``/home.h5`` next to folder ``/home`` is fine (both would be ``tiff/home`` otherwise)."""
    import json

    store_dir = tmp_path / "store"
    store = open_store(str(store_dir), create=True)
    store.put("home/.domain.json", json.dumps({"owner": "admin", "acls": {}}).encode())
    import_source(small_h5, str(store_dir), domain="/home.h5", progress=False)
    assert Catalog(open_store(str(store_dir))).list_domains() == ["/home.h5"]
