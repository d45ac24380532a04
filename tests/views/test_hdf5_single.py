"""Tier 2: the polyglot API: one dataset as HDF5 metadata indexing chunks placed by the caller."""
from __future__ import annotations

import io
import os
import re
import subprocess
import zlib

import h5py
import hdf5plugin
import numpy as np
import pytest

from polyfs.codecs.pipeline import Pipeline
from polyfs.codecs.registry import DEFLATE, ZSTD, Filter
from polyfs.errors import InvalidInput, UnsupportedType
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store
from polyfs.formats.hdf5.single import SingleDatasetFile


def make(tmp_path, filters, dtype=T.IntType(2, False, ">"), shape=(70, 90), chunks=(32, 32)):
    store = open_store(str(tmp_path / "store"), create=True)
    arr = (np.add.outer(np.arange(shape[0]), np.arange(shape[1])) % 251).astype(dtype.numpy())
    arr[32:64, 0:32] = 0  # left missing (fill value)
    with DomainWriter(Catalog(store), "/p.h5") as w:
        ds = w.add_dataset(w.root, "x", dtype, Shape("simple", shape), chunks, filters)
        w.set_attr_array(ds, "units", T.StringType(None, "utf8", "nullterm"), np.array("µm", dtype=object))
        w.write_array(ds, arr, skip_fill=True)
    cat = Catalog(store)
    ds = cat.load("/p.h5").resolve("/x")
    return cat, ds, arr


def polyglot(cat, ds, tail: bytes = b"") -> tuple[bytes, np.ndarray, SingleDatasetFile]:
    """TIFF-like bytes at 0, HDF5 metadata at 512, chunks in reverse order, an index after the end."""
    idx = cat.chunk_index(ds)
    h5 = SingleDatasetFile(ds, cat.pipeline(ds), idx.linear, name="image")
    chunks = [cat.store.get(idx.key(int(lin))) for lin in idx.linear]
    body = bytearray()
    offsets = np.zeros(len(chunks), np.int64)
    start = h5.data_start + 100  # any gap is fine
    for i in reversed(range(len(chunks))):
        offsets[i] = start + len(body)
        body += chunks[i]
    end = start + len(body)
    meta = h5.render(offsets, [len(c) for c in chunks], end)
    assert len(meta) == h5.metadata_size
    head = b"II*\x00" + bytes(508)  # where the TIFF header would be
    data = head + meta + bytes(100) + bytes(body) + tail
    return data, offsets, h5


@pytest.mark.parametrize("filters", [[Filter(DEFLATE, (6,))], [Filter(ZSTD, (3,))], []])
def test_caller_placed_chunks_read_in_h5py(tmp_path, filters):
    cat, ds, arr = make(tmp_path, filters)
    data, offsets, h5 = polyglot(cat, ds, tail=b"shard index bytes" * 10)
    path = tmp_path / "poly.h5"
    path.write_bytes(data)
    with h5py.File(path, "r") as f:
        d = f["image"]
        assert np.array_equal(d[()], arr) and d.attrs["units"] == "µm" and d.chunks == (32, 32)
        got = sorted(d.id.get_chunk_info(i).byte_offset for i in range(d.id.get_num_chunks()))
        assert got == sorted(offsets.tolist())
    env = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
    out = subprocess.run(["h5dump", "-y", "-w", "0", "-d", "/image", "-s", "40,0", "-c", "1,90", str(path)],
                         capture_output=True, text=True, env=env).stdout
    assert [int(v) for v in re.findall(r"\d+", out.split("DATA {", 1)[1].split("}", 1)[0])] == arr[40].tolist()


def test_pyfive_reads_a_polyglot_deflate_file(tmp_path):
    import pyfive

    cat, ds, arr = make(tmp_path, [Filter(DEFLATE, (6,))])
    arr[32:64, 0:32] = 1  # pyfive cannot read missing chunks: write them all
    with DomainWriter(Catalog(cat.store), "/q.h5") as w:
        full = w.add_dataset(w.root, "x", ds.type, ds.shape, ds.chunks, [Filter(DEFLATE, (6,))])
        w.write_array(full, arr)
    cat = Catalog(cat.store)
    data, _, _ = polyglot(cat, cat.load("/q.h5").resolve("/x"))
    assert np.array_equal(pyfive.File(io.BytesIO(data))["image"][()], arr)


def test_metadata_size_is_known_before_the_offsets(tmp_path):
    cat, ds, _ = make(tmp_path, [Filter(DEFLATE, (6,))])
    idx = cat.chunk_index(ds)
    a = SingleDatasetFile(ds, cat.pipeline(ds), idx.linear)
    b = SingleDatasetFile(ds, cat.pipeline(ds), idx.linear)
    assert a.metadata_size == b.metadata_size and a.data_start == 512 + a.metadata_size
    n = len(idx.linear)
    far = np.arange(n, dtype=np.int64) * (1 << 31) + (5 << 32)  # offsets past 4 GiB
    meta = a.render(far, np.full(n, 10), int(far[-1]) + 10)
    assert len(meta) == a.metadata_size and zlib.crc32(meta) != zlib.crc32(b.render(far + 8, np.full(n, 10),
                                                                                      int(far[-1]) + 18))
    with pytest.raises(InvalidInput):
        a.render(np.zeros(n, np.int64), np.full(n, 10), 1 << 20)  # inside the metadata
    with pytest.raises(InvalidInput):
        a.render(far[:-1], np.full(n - 1, 10), 1 << 40)


def test_unsupported_datasets_are_refused(tmp_path):
    store = open_store(str(tmp_path / "store"), create=True)
    with DomainWriter(Catalog(store), "/v.h5") as w:
        w.add_dataset(w.root, "s", T.StringType(None, "utf8", "nullterm"), Shape("simple", (4,)), (2,), [])
    ds = Catalog(store).load("/v.h5").resolve("/s")
    with pytest.raises(UnsupportedType):
        SingleDatasetFile(ds, Pipeline(), np.zeros(0, np.int64))


def test_chunks_past_4_gib(tmp_path):
    """8-byte addresses: chunks placed beyond 4 GiB (a sparse file on disk) read in h5py and h5dump."""
    cat, ds, arr = make(tmp_path, [Filter(DEFLATE, (6,))])
    idx = cat.chunk_index(ds)
    h5 = SingleDatasetFile(ds, cat.pipeline(ds), idx.linear, name="far")
    chunks = [cat.store.get(idx.key(int(lin))) for lin in idx.linear]
    offsets = (5 << 30) + np.cumsum([0] + [len(c) for c in chunks[:-1]]).astype(np.int64)
    end = int(offsets[-1]) + len(chunks[-1])
    path = tmp_path / "far.h5"
    with open(path, "wb") as f:
        f.seek(512)
        f.write(h5.render(offsets, [len(c) for c in chunks], end))
        for off, c in zip(offsets, chunks):
            f.seek(int(off))
            f.write(c)
    assert path.stat().st_size == end > 1 << 32
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["far"][()], arr)
        assert min(f["far"].id.get_chunk_info(i).byte_offset for i in range(len(chunks))) == 5 << 30
    out = subprocess.run(["h5dump", "-y", "-w", "0", "-d", "/far", "-s", "69,0", "-c", "1,90", str(path)],
                         capture_output=True, text=True).stdout
    assert [int(v) for v in re.findall(r"\d+", out.split("DATA {", 1)[1].split("}", 1)[0])] == arr[69].tolist()
