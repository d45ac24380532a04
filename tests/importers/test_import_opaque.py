"""Import of filters outside the translation table: carried, never refused (issue 12, item 4).

Chunks a source stored with a filter skipped (nonzero filter mask, made here
with ``write_direct_chunk``) are encoded again with the whole pipeline by HDF5
when it can give the values back, else the import fails naming the file, the
dataset and the filter. Written chunks under an opaque filter go through the
same coder (the write path), and refusals are EOPNOTSUPP.
"""
from __future__ import annotations

import errno

import h5py
import numpy as np
import pytest

import corpus
from polyfs.errors import NoCodec, errno_of
from polyfs.importers import import_source
from polyfs.model.catalog import Catalog
from polyfs.store import open_store
from polyfs.writes.chunkin import Incoming, stored_dtype, to_stored


def _masked_source(path, kw: dict, dtype: str = "<i4") -> np.ndarray:
    """A dataset whose chunk (1, 0) was written unfiltered (filter mask 1)."""
    want = (np.arange(32 * 16, dtype=dtype).reshape(32, 16) % 97).astype(dtype)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=want, chunks=(16, 16), **kw)
        d.id.write_direct_chunk((16, 0), np.ascontiguousarray(want[16:32]).tobytes(), filter_mask=1)
    with h5py.File(path, "r") as f:
        info = f["x"].id.get_chunk_info_by_coord((16, 0))
        assert info.filter_mask == 1
        np.testing.assert_array_equal(f["x"][16:32], want[16:32])  # the unfiltered chunk
    return want


def _open(url: str, domain: str):
    cat = Catalog(open_store(url))
    return cat, cat.load(domain).resolve("/x")


def test_a_chunk_with_a_filter_skipped_is_encoded_again_with_the_whole_pipeline(tmp_path):
    plugins = corpus.h5plugins()
    src = tmp_path / "masked.h5"
    want = _masked_source(src, dict(plugins.LZ4()))
    url = str(tmp_path / "store")
    domain = import_source(src, url, progress=False)
    cat, ds = _open(url, domain)
    pipe = cat.pipeline(ds)
    assert pipe.ids == (32004,)
    idx = cat.chunk_index(ds)
    with h5py.File(src, "r") as f:
        _, kept = f["x"].id.read_direct_chunk((0, 0))
        raw_masked = bytes(f["x"].id.read_direct_chunk((16, 0))[1])
    assert cat.store.get(idx.key_of((0, 0))) == bytes(kept)  # mask 0: as stored
    again = cat.store.get(idx.key_of((1, 0)))
    assert again != raw_masked  # now LZ4-encoded, as the pipeline says
    got = np.frombuffer(pipe.decode(again, 16 * 16 * 4), "<i4").reshape(16, 16)
    np.testing.assert_array_equal(got, want[16:32])


def test_a_skipped_optional_filter_no_one_can_apply_again_is_dropped_saying_so(tmp_path, caplog):
    """A chunk HDF5 wrote without an optional filter (its filter mask) that cannot be applied
    here (lossy Zfp; ``h5repack -f SOFF`` on integers): the store has no per-chunk mask, so the
    dataset is stored as HDF5 reads it, with the default encoding, and one log line names it
    (it was refused whole before, and so was every file ``h5repack -f SOFF=...`` wrote)."""
    plugins = corpus.h5plugins()
    src = tmp_path / "lossy.h5"
    _masked_source(src, dict(plugins.Zfp(rate=4)), "<f4")
    with h5py.File(src, "r") as f:
        want = f["x"][()]  # the values HDF5 reads, the lossy chunk included
    url = str(tmp_path / "store")
    caplog.set_level("INFO")
    domain = import_source(src, url, progress=False)
    cat, ds = _open(url, domain)
    assert 32013 not in cat.pipeline(ds).ids  # stored without Zfp
    got = np.concatenate([np.frombuffer(cat.pipeline(ds).decode(cat.store.get(cat.chunk_index(ds).key_of((i, 0))),
                                                                  16 * 16 * 4), stored_dtype(ds)).reshape(16, 16)
                          for i in range(2)])
    np.testing.assert_array_equal(got, want)
    lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(lines) == 1 and "lossy.h5" in lines[0] and "/x" in lines[0], lines


def test_written_chunks_under_an_opaque_filter(tmp_path):
    """The write path: plain values into an LZ4 dataset are encoded by HDF5; into a lossy Zfp
    dataset refused (EOPNOTSUPP); unchanged values keep their stored bytes."""
    plugins = corpus.h5plugins()
    src = tmp_path / "w.h5"
    data = np.sin(np.arange(32 * 16, dtype="<f4").reshape(32, 16))
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=data, chunks=(16, 16), **plugins.LZ4())
        f.create_dataset("z", data=data, chunks=(16, 16), **plugins.Zfp(rate=6))
    url = str(tmp_path / "store")
    domain = import_source(src, url, progress=False)
    cat = Catalog(open_store(url))
    model = cat.load(domain)
    for name, ok in (("x", True), ("z", False)):
        ds = model.resolve(f"/{name}")
        pipe = cat.pipeline(ds)
        inc = Incoming(stored_dtype(ds))
        new = np.random.default_rng(2).random((16, 16), dtype="float32")
        if ok:
            stored = to_stored(ds, pipe, inc, new.tobytes())
            assert np.array_equal(np.frombuffer(pipe.decode(stored), "<f4").reshape(16, 16), new)
        else:
            with pytest.raises(NoCodec, match="32013") as exc:
                to_stored(ds, pipe, inc, new.tobytes())
            assert errno_of(exc.value) == errno.EOPNOTSUPP
        old = cat.store.get(cat.chunk_index(ds).key_of((0, 0)))
        same = pipe.decode(old)
        assert to_stored(ds, pipe, inc, same, old=old) is old  # values unchanged: bytes kept
