"""polyfs check: derived data is rebuildable, unreachable objects are found."""
from __future__ import annotations

import json

import numpy as np
import pytest

from polyfs.check import check_store
from polyfs.cli import main
from polyfs.codecs.registry import DEFLATE, Filter
from polyfs.model import keys, types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store


def make(tmp_path):
    url = str(tmp_path / "store")
    cat = Catalog(open_store(url, create=True))
    with DomainWriter(cat, "/a.h5") as w:
        d = w.add_dataset(w.root, "d", T.IntType(2, True), Shape("simple", (20, 20)), (8, 8), [Filter(DEFLATE, (4,))])
        w.write_array(d, np.arange(400, dtype="i2").reshape(20, 20))
    return url, cat, d


def test_clean_store(tmp_path):
    url, _, _ = make(tmp_path)
    r = check_store(url, deep=True)
    assert not r.problems and r.checked == {"domains": 1, "datasets": 1, "chunks": 9}


def test_crc_tables_are_rebuilt(tmp_path, capsys):
    url, cat, d = make(tmp_path)
    store = cat.store
    before = store.get(keys.crc_table_key(d.id))
    store.delete(keys.crc_table_key(d.id))
    assert main(["check", url]) == 1
    assert "CRC32" in capsys.readouterr().out
    assert main(["check", url, "--repair"]) == 0
    assert store.get(keys.crc_table_key(d.id)) == before  # rebuilt byte for byte
    assert not check_store(url).problems


def test_unreachable_prefix_of_a_crashed_import(tmp_path):
    url, cat, _ = make(tmp_path)
    store = cat.store
    store.put("db/0123abcd-0123abcd/d/aaaa-bbbbbb-cccccc/0_0", b"orphan")
    r = check_store(url)
    assert any("db/0123abcd-0123abcd/" in p for p in r.problems)
    r = check_store(url, repair=True)
    assert not r.problems and not store.exists("db/0123abcd-0123abcd/d/aaaa-bbbbbb-cccccc/0_0")
    assert check_store(url, deep=True).checked["chunks"] == 9  # the live domain is untouched


def test_unreadable_domain_blocks_orphan_deletion(tmp_path):
    url, cat, _ = make(tmp_path)
    cat.store.put("broken.h5/.domain.json", b"{oops")
    r = check_store(url, repair=True)
    assert any("broken.h5" in p for p in r.problems)
    assert check_store(url).checked["chunks"] == 9


def test_stale_persisted_chunk_index_is_rebuilt(tmp_path):
    import os

    from polyfs.model import keys as K

    url, cat, d = make(tmp_path)
    path = os.path.join(url, K.chunk_key(d.id, (1, 1)))
    with open(path, "wb") as f:  # an in-place rewrite: the directory token does not move
        f.write(b"x" * 3)
    r = check_store(url)
    assert any("persisted chunk index" in p for p in r.problems)
    r = check_store(url, repair=True)
    assert any("persisted chunk index" in x for x in r.repaired)
    assert not any("persisted chunk index" in p for p in check_store(url).problems)


def test_crc_entries_written_beside_the_old_ones_match_either_chunk():
    """put_chunks writes a chunk's new CRC32 entry beside its old one before the chunk moves, so a
    crash between the two leaves a table matching whichever version the store holds."""
    from polyfs.model.chunks import CrcTable

    table = CrcTable.empty().merged([(0, 11, 100), (1, 12, 200)])
    both = table.merged([(1, 13, 300)], keep_old=True)
    assert both.lookup(1, 12) == 200 and both.lookup(1, 13) == 300 and both.lookup(0, 11) == 100
    assert len(both) == 3
    again = both.merged([(1, 13, 300)], keep_old=True)
    assert again.lookup(1, 13) == 300 and again.lookup(1, 12) == 200 and len(again) == 3  # no duplicate entry
    final = both.merged([(1, 13, 300)])
    assert final.lookup(1, 12) is None and final.lookup(1, 13) == 300 and len(final) == 2


@pytest.mark.parametrize("dims, why", [
    ([2**70, 20], str(2**70)), ([-5, 20], "-5"), (["a", 20], "'a'"), ([10.5, 20], "10.5"), (True, "not a list"),
    ({"dims": [20, 20], "maxdims": [10, 20]}, "below dims"),
])
def test_a_record_another_writer_made_with_bad_extents_is_a_problem_not_a_crash(tmp_path, capsys, dims, why):
    """An HSDS record whose extents no numpy index holds (written by another program)
    made ``check`` and ``info`` crash (OverflowError) or, negative, read as -2 chunks."""
    url, cat, d = make(tmp_path)
    body = cat.get_json(keys.dataset_key(d.id))
    body["shape"] = dict(body["shape"], **dims) if isinstance(dims, dict) else dict(body["shape"], dims=dims)
    cat.store.put(keys.dataset_key(d.id), json.dumps(body).encode())
    before = {o.key: cat.store.get(o.key) for o in cat.store.list("")}
    r = check_store(url, deep=True)
    assert len(r.problems) == 1 and d.id in r.problems[0] and why in r.problems[0], r.problems
    assert main(["info", url, "/a.h5"]) == 1 and why in capsys.readouterr().err
    assert check_store(url, repair=True).problems  # nothing "repaired" away
    assert {o.key: cat.store.get(o.key) for o in cat.store.list("")} == before


def test_a_whole_float_extent_still_reads(tmp_path):
    url, cat, d = make(tmp_path)
    body = cat.get_json(keys.dataset_key(d.id))
    body["shape"]["dims"] = [20.0, 20]
    cat.store.put(keys.dataset_key(d.id), json.dumps(body).encode())
    assert not check_store(url, deep=True).problems


def _objects(store) -> dict[str, bytes]:
    return {o.key: store.get(o.key) for o in store.list("")}


def test_a_domain_whose_domain_file_was_lost_is_named_again_not_deleted(tmp_path, capsys):
    """A stray ``rm`` of ``.domain.json`` leaves a whole domain unreachable: ``check`` says so,
    and ``--repair`` names it again under /lost+found (before, it deleted every chunk)."""
    url, cat, d = make(tmp_path)
    store = cat.store
    root = cat.load("/a.h5").domain.root
    store.delete(keys.domain_key("/a.h5"))
    before = _objects(store)
    assert main(["check", url]) == 1
    out = capsys.readouterr().out
    assert f"root group {root}" in out and "/lost+found/" in out
    assert _objects(store) == before  # a check without --repair changes nothing
    r = check_store(url, repair=True)
    uuid1 = keys.domain_db_prefix(root)[len("db/"):-1]
    lost = f"/lost+found/{uuid1}.h5"
    assert not r.problems and any(lost in x and "nothing deleted" in x for x in r.repaired), r.text()
    after = _objects(store)
    assert set(after) - set(before) == {keys.domain_key(lost)}  # one file made, nothing deleted
    assert all(after[k] == v for k, v in before.items() if not k.startswith(keys.DERIVED))
    model = Catalog(open_store(url)).load(lost)
    assert model.domain.root == root and [ds.id for ds in model.datasets.values()] == [d.id]
    r = check_store(url, deep=True)
    assert not r.problems and r.checked == {"domains": 1, "datasets": 1, "chunks": 9}


def test_a_root_group_whose_objects_are_incomplete_is_a_crashed_import_and_deleted(tmp_path):
    """An import killed while its commit wrote the JSON objects: a root group that names a
    dataset whose object never came. It does not load, so it is deleted as before, and no
    /lost+found domain is left behind."""
    url, cat, d = make(tmp_path)
    store = cat.store
    root = cat.load("/a.h5").domain.root
    store.delete(keys.domain_key("/a.h5"))
    store.delete(keys.object_key(d.id))
    r = check_store(url, repair=True)
    assert not r.problems, r.text()
    assert not [k for k in _objects(store) if k.startswith(keys.domain_db_prefix(root))]
    assert Catalog(open_store(url)).list_domains() == []


def test_a_domain_deleted_halfway_is_not_named_again(tmp_path, monkeypatch):
    """Deleting a domain removes its root group right after its .domain.json: objects a
    failure leaves behind are a deletion's leftovers to --repair, never a lost domain to
    bring back under /lost+found."""
    from polyfs.errors import StoreError
    from polyfs.model.editor import DomainEditor

    url, cat, d = make(tmp_path)
    root = cat.load("/a.h5").domain.root
    store = cat.store
    real = type(store).delete_prefix
    monkeypatch.setattr(type(store), "delete_prefix", lambda self, prefix: (_ for _ in ()).throw(
        StoreError(f"{prefix}: disk gone")))
    with pytest.raises(StoreError):
        DomainEditor(cat).delete_domain("/a.h5")
    monkeypatch.setattr(type(store), "delete_prefix", real)
    assert store.exists(keys.chunk_key(d.id, (0, 0))) and not store.exists(keys.group_key(root))
    r = check_store(url, repair=True)
    assert not r.problems and not [x for x in r.repaired if "lost+found" in x], r.text()
    assert not store.exists(keys.chunk_key(d.id, (0, 0))) and Catalog(open_store(url)).list_domains() == []


def test_a_lost_domain_whose_lost_found_name_is_taken_gets_another(tmp_path):
    """/lost+found/<uuid>.h5 already names something else: the lost domain gets the next free
    name, and nothing of it is deleted."""
    url, cat, d = make(tmp_path)
    store = cat.store
    root = cat.load("/a.h5").domain.root
    uuid1 = keys.domain_db_prefix(root)[len("db/"):-1]
    with DomainWriter(cat, f"/lost+found/{uuid1}.h5"):
        pass
    store.delete(keys.domain_key("/a.h5"))
    r = check_store(url, repair=True)
    assert not r.problems and any(f"/lost+found/{uuid1}-2.h5" in x for x in r.repaired), r.text()
    model = Catalog(open_store(url)).load(f"/lost+found/{uuid1}-2.h5")
    assert model.domain.root == root and store.exists(keys.chunk_key(d.id, (0, 0)))
