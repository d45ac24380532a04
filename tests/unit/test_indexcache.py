"""Persisted chunk indexes: trusted only while valid, and stale sizes never served."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from polyfs.codecs.registry import ZSTD, Filter
from polyfs.errors import ChunkChanged
from polyfs.model import keys, types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.reader import Reader
from polyfs.store import open_store
from polyfs.store.local import LocalStore
from polyfs.vfile import ChunkRun, VFile


class Ctx:
    def __init__(self, catalog):
        self.catalog = catalog
        self.store = catalog.store


@pytest.fixture
def domain(tmp_path):
    url = str(tmp_path / "store")
    cat = Catalog(open_store(url, create=True))
    with DomainWriter(cat, "/a.h5") as w:
        d = w.add_dataset(w.root, "d", T.IntType(2, True), Shape("simple", (40, 40)), (10, 10), [Filter(ZSTD, (3,))])
        w.write_array(d, np.arange(1600, dtype="i2").reshape(40, 40))
    return url, d


def fresh(url):
    cat = Catalog(open_store(url))
    return cat, cat.load("/a.h5").resolve("/d")


def count_listings(monkeypatch):
    calls = []
    real = LocalStore.list_records

    def spy(self, prefixes):
        calls.append(list(prefixes))
        return real(self, prefixes)

    monkeypatch.setattr(LocalStore, "list_records", spy)
    return calls


def test_import_persists_the_index(domain, monkeypatch):
    url, _ = domain
    calls = count_listings(monkeypatch)
    cat, ds = fresh(url)
    idx = cat.chunk_index(ds)
    assert calls == [] and len(idx) == 16  # no stat per chunk: the persisted index was valid
    listed, _ = fresh(url)
    monkeypatch.undo()
    cat2 = Catalog(open_store(url, read_only=True))
    cat2._untrusted.add(ds.id)  # force a real listing for comparison
    real = cat2.chunk_index(ds)
    assert np.array_equal(real.linear, idx.linear) and np.array_equal(real.sizes, idx.sizes)


def test_a_new_object_invalidates_it(domain, monkeypatch):
    url, d = domain
    cat, ds = fresh(url)
    store = cat.store
    time.sleep(0.05)  # past the clock tick of the import
    store.delete(keys.chunk_key(ds.id, (3, 3)))  # an atomic change: the directory's mtime moves
    calls = count_listings(monkeypatch)
    cat, ds = fresh(url)
    assert len(cat.chunk_index(ds)) == 15 and len(calls) == 1


def test_in_place_rewrite_is_caught_at_read_time(domain, caplog):
    url, d = domain
    cat, ds = fresh(url)
    idx = cat.chunk_index(ds)
    vf = VFile([ChunkRun(idx, idx.linear, idx.sizes)])
    reader = Reader(Ctx(cat))
    before = reader.read(vf, 0, vf.size)
    # another writer (HSDS writes chunks in place) rewrites one chunk with a different size
    path = os.path.join(url, keys.chunk_key(ds.id, (0, 1)))
    with open(path, "wb") as f:
        f.write(b"\x28\xb5\x2f\xfd" + b"different and longer than before" * 20)
    gen = cat.generation("/a.h5")
    with pytest.raises(ChunkChanged):
        reader.read(vf, 0, vf.size)
    assert "0_1" in caplog.text
    assert cat.generation("/a.h5") == gen + 1  # the domain's files get re-planned
    assert not cat.store.exists(keys.chunk_index_key(ds.id))  # the stale persisted index is dropped
    again = cat.chunk_index(ds)  # listed for real this time
    assert again.size_of(again.linear_of((0, 1))) == os.path.getsize(path)
    vf2 = VFile([ChunkRun(again, again.linear, again.sizes)])
    assert len(reader.read(vf2, 0, vf2.size)) == vf2.size != len(before)


def test_damaged_or_foreign_index_files_are_ignored(domain):
    url, _ = domain
    cat, ds = fresh(url)
    cat.store.put(keys.chunk_index_key(ds.id), b"garbage")
    cat, ds = fresh(url)
    assert len(cat.chunk_index(ds)) == 16
