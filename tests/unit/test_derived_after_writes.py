"""Derived data (CRC32 tables, persisted chunk indexes) stays right through ordinary writes.

Exploratory testers found ``polyfs check --deep`` failing after plain writes through the mount
(the data was right in every view):

- a dataset created through ``tiff/``, in an h5py ``r+`` session or by h5copy had its chunk
  index saved before its ``.dataset.json`` was written into the same directory, so the
  saved token was out of date at once;
- a shrink deleted chunks but left their CRC32 entries;
- the CRC32 table was keyed by linear chunk number, which a resize along any dimension but
  the first renumbers: after shrink then grow, entries named the wrong chunks.

Each test runs the write path the views use (ObjectsWriter + DomainEditor, as
``writes/service.py`` does) on a local store, then asks ``check --deep`` and the loader.
"""
from __future__ import annotations

import os
import time
import zlib

import numpy as np
import pytest

from polyfs.check import check_store
from polyfs.codecs.pipeline import adler32_of_zlib
from polyfs.codecs.registry import DEFLATE, Filter
from polyfs.model import indexcache, keys, types as T
from polyfs.model.catalog import Catalog
from polyfs.model.changes import ObjectChange
from polyfs.model.chunks import CRC_DTYPE, CrcTable
from polyfs.model.editor import DomainEditor
from polyfs.model.schema import Attribute, Link, Shape
from polyfs.model.writer import DomainWriter, ObjectsWriter, stamp
from polyfs.store import open_store
from polyfs.store.base import COARSE_TOKEN_WINDOW, FINE_TOKEN_WINDOW, DirToken
from polyfs.store.local import LocalStore

I2 = T.IntType(2, True)
GZIP = [Filter(DEFLATE, (4,))]


def make(tmp_path, dims=(20, 20), chunks=(8, 8)) -> tuple[str, str]:
    url = str(tmp_path / "store")
    cat = Catalog(open_store(url, create=True))
    with DomainWriter(cat, "/a.h5") as w:
        d = w.add_dataset(w.root, "d", I2, Shape("simple", dims, (None,) * len(dims)), chunks, GZIP)
        w.write_array(d, np.arange(int(np.prod(dims)), dtype="i2").reshape(dims) + 1)
    return url, d.id


def clean(url: str) -> None:
    """What the testers ran: ``check --deep`` finds nothing, not even an unused index."""
    r = check_store(url, deep=True)
    assert not r.problems and not r.notes, r.text()


def fresh(url: str, read_only: bool = True) -> tuple[Catalog, DomainEditor]:
    cat = Catalog(open_store(url, read_only=read_only))
    return cat, DomainEditor(cat)


def crcs_right(cat: Catalog, ds) -> None:
    """Every chunk's CRC32 entry is that of its decoded bytes, under the dataset's own grid."""
    idx = cat.chunk_index(ds)
    table = cat.crc_table(ds)
    assert sorted(int(x) for x in table.entries["linear"]) == sorted(int(x) for x in idx.linear)
    for lin in idx.linear:
        stream = cat.store.get(idx.key(int(lin)))
        assert table.lookup(int(lin), adler32_of_zlib(stream)) == zlib.crc32(zlib.decompress(stream))


def add_dataset_in_session(url: str, name: str, data: np.ndarray, chunks: tuple[int, ...]) -> str:
    """A new dataset in an existing domain, as an h5py ``r+`` session, h5copy or a new ``.tif``
    in ``tiff/`` make one: chunks and derived data by an ObjectsWriter, then the link."""
    cat, ed = fresh(url, read_only=False)
    model = cat.load("/a.h5")
    w = ObjectsWriter(cat, model.domain)
    ds = w.add_dataset(None, None, I2, Shape("simple", data.shape, (None,) * data.ndim), chunks, GZIP)
    w.write_array(ds, data)
    created = w.objects()
    w.commit()
    root = model.groups[model.domain.root]
    links = dict(root.links)
    links[name] = Link(name, "hard", id=ds.id, created=stamp())
    ed.apply_many("/a.h5", [ObjectChange(root.id, links=links)], created)
    return ds.id


def test_a_dataset_added_to_an_existing_domain_has_an_index_in_force(tmp_path, monkeypatch):
    url, _ = make(tmp_path)
    did = add_dataset_in_session(url, "r", np.arange(23, dtype="i2"), (4,))
    cat, _ = fresh(url)
    ds = cat.load("/a.h5").datasets[did]
    assert cat.persisted_index_state(ds) == "in force"
    listings = []
    monkeypatch.setattr(LocalStore, "list_records", lambda self, p: listings.append(p) or {})
    assert len(cat.chunk_index(ds)) == 6 and not listings  # used: no listing
    monkeypatch.undo()
    crcs_right(cat, ds)
    clean(url)


def test_shrinking_a_deflate_dataset_drops_the_deleted_chunks_crcs(tmp_path):
    url, did = make(tmp_path, dims=(23,), chunks=(4,))
    cat, ed = fresh(url, read_only=False)
    ed.resize("/a.h5", did, (6,))
    cat, _ = fresh(url)
    ds = cat.load("/a.h5").datasets[did]
    assert len(cat.chunk_index(ds)) == 2
    crcs_right(cat, ds)
    stored = CrcTable.from_bytes(cat.store.get(keys.crc_table_key(did)))  # as stored, whatever the grid
    assert len(stored) == 2
    clean(url)


def test_deleted_chunks_leave_the_crc_table(tmp_path):
    url, did = make(tmp_path)
    cat, ed = fresh(url, read_only=False)
    ds = cat.load("/a.h5").datasets[did]
    ed.put_chunks("/a.h5", ds, [], [(2, 2), (0, 1)])  # rm of chunk files in zarr/ or n5/
    cat, _ = fresh(url)
    ds = cat.load("/a.h5").datasets[did]
    assert len(cat.chunk_index(ds)) == 7
    crcs_right(cat, ds)
    clean(url)


def test_shrink_then_grow_of_a_2d_deflate_dataset_keys_crcs_by_chunk(tmp_path):
    """HDF5 rewrites the edge chunks a shrink cuts and writes new ones after a growth; each
    resize along the second dimension renumbers the chunks."""
    url, did = make(tmp_path, dims=(10, 10), chunks=(4, 4))
    cat, ed = fresh(url, read_only=False)
    ed.resize("/a.h5", did, (5, 6))
    ds = cat.load("/a.h5").datasets[did]
    w = DomainWriter.__new__(DomainWriter)  # only its chunk encoder
    w._pipelines = {did: cat.pipeline(ds)}
    edge = [((c0, c1), w.encode_chunk(ds, np.full((4, 4), 10 * c0 + c1, "i2"))[0]) for c0 in (0, 1) for c1 in (0, 1)]
    ed.put_chunks("/a.h5", ds, edge)
    ed.resize("/a.h5", did, (12, 12))
    ds = cat.load("/a.h5").datasets[did]
    ed.put_chunks("/a.h5", ds, [((2, 2), w.encode_chunk(ds, np.full((4, 4), 99, "i2"))[0])])
    cat, _ = fresh(url)
    ds = cat.load("/a.h5").datasets[did]
    assert sorted(map(tuple, cat.chunk_index(ds).coords_of(cat.chunk_index(ds).linear).tolist())) == \
        [(0, 0), (0, 1), (1, 0), (1, 1), (2, 2)]
    crcs_right(cat, ds)
    clean(url)


def test_a_dataset_json_rewrite_leaves_no_outdated_index(tmp_path):
    url, did = make(tmp_path)
    cat, ed = fresh(url, read_only=False)
    ds = cat.load("/a.h5").datasets[did]
    assert cat.persisted_index_state(ds) == "in force"
    ed.set_attributes("/a.h5", did, {"units": Attribute("units", T.IntType(4, True), Shape("scalar"), 3, stamp())})
    assert cat.persisted_index_state(ds) == "none"  # dropped with the old JSON, not left to mislead
    clean(url)


def test_check_and_loader_agree_an_outdated_index_is_no_fault(tmp_path, monkeypatch):
    """An index whose directory changed since (another writer than polyfs) is not used, so it is
    not a fault; one the loader would use and a listing contradicts is, and --repair rebuilds both."""
    url, did = make(tmp_path)
    cat, _ = fresh(url, read_only=False)
    ds = cat.load("/a.h5").datasets[did]
    body = keys.dataset_key(did)
    time.sleep(FINE_TOKEN_WINDOW)  # past the tick of the import's last write
    cat.store.put(body, cat.store.get(body))  # HSDS rewrites the dataset's JSON: the token moves
    assert cat.persisted_index_state(ds) == "outdated"
    r = check_store(url, deep=True)
    assert not r.problems and any("out of date" in n for n in r.notes), r.text()
    listings = []
    real = LocalStore.list_records
    monkeypatch.setattr(LocalStore, "list_records", lambda self, p: listings.append(p) or real(self, p))
    assert len(fresh(url)[0].chunk_index(ds)) == 9 and listings  # the loader did not use it either
    monkeypatch.undo()
    r = check_store(url, repair=True)
    assert any("persisted chunk index" in x for x in r.repaired), r.text()
    assert fresh(url)[0].persisted_index_state(ds) in ("in force", "none")


def test_crc_table_is_stored_by_chunk_coordinates():
    t = CrcTable.empty((3, 2)).merged([(5, 11, 100), (1, 12, 200), (2, 13, 300)])  # (2,1) (0,1) (1,0)
    back = CrcTable.from_bytes(t.to_bytes(), (3, 5))  # the second dimension grew: renumbered
    assert back.lookup(2 * 5 + 1, 11) == 100 and back.lookup(1, 12) == 200 and back.lookup(5, 13) == 300
    shrunk = CrcTable.from_bytes(t.to_bytes(), (2, 1))  # chunks outside are left out
    assert len(shrunk) == 1 and shrunk.lookup(1, 13) == 300
    assert t.for_grid((3, 5)).entries.tolist() == back.entries.tolist()
    legacy = np.zeros(2, dtype=CRC_DTYPE)
    legacy["linear"], legacy["adler"], legacy["crc"] = [0, 7], [1, 2], [3, 4]
    import io
    buf = io.BytesIO()
    np.save(buf, legacy)
    old = CrcTable.from_bytes(buf.getvalue(), (2, 2))  # written by an older polyfs: linear, grid unknown
    assert len(old) == 1 and old.lookup(0, 1) == 3 and old.grid == (2, 2)


def test_a_writer_behind_a_growth_keeps_the_crcs_of_chunks_beyond_its_extent(tmp_path):
    """Two daemons: one grew the dataset and wrote a chunk past the old extent; the other, whose
    model still has the old extent, then stores a chunk: the first one's entry stays."""
    url, did = make(tmp_path, dims=(8, 8), chunks=(4, 4))
    a, aed = fresh(url, read_only=False)
    b, bed = fresh(url, read_only=False)
    stale = b.load("/a.h5").datasets[did]  # b read the domain before the growth
    aed.resize("/a.h5", did, (12, 12))
    grown = a.load("/a.h5").datasets[did]
    w = DomainWriter.__new__(DomainWriter)
    w._pipelines = {did: a.pipeline(grown)}
    aed.put_chunks("/a.h5", grown, [((2, 2), w.encode_chunk(grown, np.full((4, 4), 5, "i2"))[0])])
    bed.put_chunks("/a.h5", stale, [((0, 0), w.encode_chunk(stale, np.full((4, 4), 6, "i2"))[0])])
    cat, _ = fresh(url)
    crcs_right(cat, cat.load("/a.h5").datasets[did])
    clean(url)


# -- the token itself -------------------------------------------------------------------------
def test_a_listing_is_saved_only_once_the_directory_held_still_for_its_window():
    t0 = time.time()
    fine = DirToken("a", t0 - 0.2, FINE_TOKEN_WINDOW)
    coarse = DirToken("a", t0 - 0.2, COARSE_TOKEN_WINDOW)
    assert indexcache.stable(fine, fine, t0)
    assert not indexcache.stable(coarse, coarse, t0)  # a change 0.2 s later may share its stamp
    assert not indexcache.stable(fine, DirToken("b", t0, FINE_TOKEN_WINDOW), t0)
    assert indexcache.writer_may_save(DirToken("a", t0, FINE_TOKEN_WINDOW), t0)
    assert not indexcache.writer_may_save(DirToken("a", t0, COARSE_TOKEN_WINDOW), t0)
    assert indexcache.writer_may_save(DirToken("a", t0 - 3, COARSE_TOKEN_WINDOW), t0)


def test_coarse_timestamps_never_hide_a_new_chunk(tmp_path):
    """On a filesystem whose timestamps are whole (even) seconds, a chunk another writer adds in
    the same tick as the last change leaves the directory's token as it was: an index saved from
    a listing in that tick would be in force and miss it."""
    url, did = make(tmp_path)
    cat, _ = fresh(url, read_only=False)
    ds = cat.load("/a.h5").datasets[did]
    cat.store.delete(keys.chunk_index_key(did))
    cat.store.delete(keys.chunk_key(did, (2, 2)))
    directory = os.path.join(url, keys.dataset_prefix(did))
    tick = int(time.time()) // 2 * 2 * 10 ** 9
    os.utime(directory, ns=(tick, tick))
    assert cat.store.dir_token(keys.dataset_prefix(did)).window == COARSE_TOKEN_WINDOW
    assert len(cat.chunk_index(ds)) == 8  # listed (and, were the tick over, saved)
    with open(os.path.join(directory, "2_2"), "wb") as f:  # another writer, in the same tick
        f.write(cat.store.get(keys.chunk_key(did, (2, 1))))
    os.utime(directory, ns=(tick, tick))
    assert len(fresh(url)[0].chunk_index(ds)) == 9
    assert not [p for p in check_store(url).problems if "chunk index" in p]


def test_a_second_writer_drops_the_index_before_its_chunks_move(tmp_path):
    """Two daemons on one store: the one that writes chunks drops the persisted index first, so a
    put in the same timestamp tick as the saved token cannot go unseen by the other."""
    url, did = make(tmp_path)
    a, _ = fresh(url, read_only=False)
    ds = a.load("/a.h5").datasets[did]
    directory = os.path.join(url, keys.dataset_prefix(did))
    before = os.stat(directory).st_mtime_ns
    assert a.persisted_index_state(ds) == "in force"
    b, bed = fresh(url, read_only=False)
    bds = b.load("/a.h5").datasets[did]
    bed.put_chunks("/a.h5", bds, [], [(0, 0)])
    os.utime(directory, ns=(before, before))  # as if in the same tick
    assert len(fresh(url)[0].chunk_index(ds)) == 8
    clean(url)


@pytest.mark.parametrize("shape", [(23,), (10, 10)])
def test_writes_of_every_kind_in_a_row_leave_check_clean(tmp_path, shape):
    chunks = (4,) * len(shape)
    url, did = make(tmp_path, dims=shape, chunks=chunks)
    new = add_dataset_in_session(url, "n", np.ones(shape, "i2"), chunks)
    cat, ed = fresh(url, read_only=False)
    for d in (did, new):
        ed.resize("/a.h5", d, tuple(max(1, s // 2) for s in shape))
        ed.resize("/a.h5", d, tuple(s + 3 for s in shape))
        ed.set_view_hints("/a.h5", d, {"zarr_sharded": False})
    clean(url)
    cat, _ = fresh(url)
    for d in (did, new):
        crcs_right(cat, cat.load("/a.h5").datasets[d])


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_chunk_writes_drop_a_persisted_index_only_where_one_can_be_in_force(tmp_path, kind):
    """Every chunk write deleted the dataset's persisted index first, also on stores without
    directory tokens (S3), where none is ever persisted: one extra request per chunk file."""
    url = str(tmp_path / "store") if kind == "local" else f"memory://drop-{os.getpid()}-{time.time_ns()}"
    store = open_store(url, create=True)
    with DomainWriter(Catalog(store), "/d.h5") as w:
        ds = w.add_dataset(w.root, "x", T.IntType(2, False, "<"), Shape("simple", (8,)), (4,), [])
        for i in range(2):
            w.write_chunk(ds, (i,), np.full(4, i, "<u2").tobytes())
    cat = Catalog(store)
    ds = cat.load("/d.h5").resolve("/x")
    deleted: list[str] = []
    real = store.delete

    def delete(key: str) -> None:
        deleted.append(key)
        real(key)

    store.delete = delete  # type: ignore[method-assign]
    DomainEditor(cat).put_chunks("/d.h5", ds, [((1,), np.full(4, 9, "<u2").tobytes())])
    assert (keys.chunk_index_key(ds.id) in deleted) == (kind == "local")
