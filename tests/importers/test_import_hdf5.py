"""HDF5 import: everything comes back identical through the model, and stored
chunks of table codecs are the source file's bytes (h5py's read_direct_chunk)."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

import corpus
from .import_helpers import import_all
from polyfs.codecs.registry import BLOSC, BZIP2, DEFLATE, FLETCHER32, SHUFFLE, ZSTD
from polyfs.importers import import_source
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.store import open_store

# datasets whose chunks must be copied as stored: (file, path) -> filter ids in write order
COPIED = {
    ("filters", "/gzip"): (DEFLATE,),
    ("filters", "/shuffle_gzip"): (SHUFFLE, DEFLATE),
    ("filters", "/zstd"): (ZSTD,),
    ("filters", "/blosc"): (BLOSC,),
    ("filters", "/blosc_zstd_bitshuffle"): (BLOSC,),
    ("filters", "/bzip2"): (BZIP2,),
    ("filters", "/fletcher_gzip"): (DEFLATE, FLETCHER32),
    ("filters", "/big_endian_gzip"): (DEFLATE,),
    ("filters", "/missing_chunks"): (DEFLATE,),
    ("filters", "/unlimited"): (DEFLATE,),
    ("filters", "/masked"): (SHUFFLE, DEFLATE),
    ("filters", "/never_written"): (DEFLATE,),
    ("filters", "/empty_unlimited"): (DEFLATE,),
    ("types", "/i1"): (DEFLATE,),
    ("types", "/u8"): (DEFLATE,),
    ("types", "/i4_be"): (DEFLATE,),
    ("types", "/f2"): (DEFLATE,),
    ("types", "/f8_special"): (DEFLATE,),
    ("types", "/bool"): (DEFLATE,),
    ("types", "/fixed_ascii"): (DEFLATE,),
    ("types", "/compound"): (DEFLATE,),
    ("types", "/enum"): (ZSTD,),
    ("types", "/array_type"): (DEFLATE,),
    ("types", "/opaque"): (BLOSC,),
    ("types", "/complex"): (DEFLATE,),
    ("types", "/complex_fill"): (DEFLATE,),
    ("filters", "/lz4_outside_table"): (32004,),  # opaque: kept with its own filter
}
# datasets that are decoded and written with the default encoding (big-endian deflate)
DECODED = [("filters", "/contiguous"), ("filters", "/contiguous_small"), ("filters", "/compact"),
           ("filters", "/no_filter_chunked"), ("filters", "/fletcher_only"),
           ("filters", "/external_storage"), ("types", "/f4_be"), ("types", "/compound_padded"),
           ("types", "/vlen_utf8"), ("types", "/refs_chunked")]


@pytest.fixture(scope="module")
def imported(hdf5_files, tmp_path_factory) -> Catalog:
    return import_all(hdf5_files.values(), tmp_path_factory.mktemp("store"))


@pytest.mark.parametrize("name", ["structure", "filters", "types"])
def test_round_trip_is_identical(imported, hdf5_files, name):
    """Groups, links, committed types, attributes and values as h5py reads the source."""
    want = corpus.hdf5_snapshot(hdf5_files[name])
    got = corpus.domain_snapshot(imported, f"/{name}.h5")
    corpus.assert_snapshots_equal(want, got, name)
    assert len(want["objects"]) > 5 and want["soft"] or name != "structure"


def test_structure_details(imported):
    m = imported.load("/structure.h5")
    pts = m.resolve("/a/b/c/points")
    assert m.resolve("/points_again") is pts and m.resolve("/soft_to_points") is pts
    assert m.resolve("/a/alias_of_c") is m.resolve("/a/b/c")
    assert isinstance(pts.type, T.Committed) and pts.type.id in m.datatypes
    assert m.datatypes[pts.type.id].attributes["note"].value == "a committed compound"
    ext = m.root.links["ext"]
    assert (ext.kind, ext.domain, ext.h5path) == ("external", "other.h5", "/some/path")
    assert m.root.links["dangling"].h5path == "/nowhere"
    # object references are the new ids, as HSDS spells them
    ref = m.root.attributes["ref"]
    assert ref.value == "datasets/" + pts.id and ref.type.to_json()["base"] == "H5T_STD_REF_OBJ"
    assert m.root.attributes["ref_arr"].value == ["datasets/" + pts.id, "groups/" + m.root.id, ""]


def _dataset(catalog, fname, path):
    return catalog.load(f"/{fname}.h5").resolve(path)


@pytest.mark.parametrize("key", sorted(COPIED), ids=lambda k: f"{k[0]}{k[1]}")
def test_table_codecs_are_copied_byte_for_byte(imported, hdf5_files, key):
    fname, path = key
    ds = _dataset(imported, fname, path)
    pipe = imported.declared_pipeline(ds)
    assert pipe.ids == COPIED[key]
    idx = imported.chunk_index(ds)
    with h5py.File(hdf5_files[fname], "r") as f:
        d = f[path]
        assert ds.chunks == d.chunks
        assert ds.type.numpy().itemsize == d.dtype.itemsize
        if d.dtype.kind in "iuf" and d.dtype.itemsize > 1:
            assert ds.type.order == d.dtype.byteorder.replace("=", "<")  # the source's byte order is kept
        source = []
        d.id.chunk_iter(lambda info: source.append(info))
        assert sorted(idx.coords_of(int(i)) for i in idx.linear) == \
            sorted(tuple(o // c for o, c in zip(s.chunk_offset, d.chunks)) for s in source)  # missing stay missing
        for info in source:
            coords = tuple(o // c for o, c in zip(info.chunk_offset, d.chunks))
            stored = imported.store.get(idx.key_of(coords))
            mask, raw = d.id.read_direct_chunk(info.chunk_offset)
            if mask == 0:
                assert stored == bytes(raw), f"{path} chunk {coords}"
            else:  # a chunk that skipped deflate is re-encoded with the whole pipeline
                assert stored != bytes(raw)
                block = np.frombuffer(pipe.decode(stored), d.dtype).reshape(d.chunks)
                assert np.array_equal(block, d[tuple(slice(o, o + c) for o, c in zip(info.chunk_offset, d.chunks))])
    if pipe.ids[-1] == DEFLATE:  # every deflate chunk has its CRC32 (for spliced gzip members)
        assert len(imported.crc_table(ds)) == len(idx)


@pytest.mark.parametrize("key", DECODED, ids=lambda k: f"{k[0]}{k[1]}")
def test_other_data_gets_the_default_encoding(imported, hdf5_files, key):
    ds = _dataset(imported, *key)
    assert imported.declared_pipeline(ds).ids == (DEFLATE,)
    base = T.resolved(ds.type)
    if isinstance(base, (T.IntType, T.FloatType)) and base.size > 1:  # the file's byte order, kept
        with h5py.File(hdf5_files[key[0]]) as f:
            assert base.byteorder == {"=": "<", "|": "<"}.get(f[key[1]].dtype.byteorder, f[key[1]].dtype.byteorder)
    idx = imported.chunk_index(ds)
    assert len(idx) > 0
    assert len(imported.crc_table(ds)) == len(idx)
    for linear in idx.linear:  # zlib streams whose CRC32 table entry matches the data
        stored = imported.store.get(idx.key(int(linear)))
        assert stored[0] == 0x78
        import zlib

        assert imported.crc_table(ds).lookup(int(linear), int.from_bytes(stored[-4:], "big")) == \
            zlib.crc32(zlib.decompress(stored))


def test_chunk_shape_rule_for_contiguous_data(imported):
    big = _dataset(imported, "filters", "/contiguous")  # 3 x 300 x 400 float32 = 1.4 MB
    assert big.chunks == (1, 300, 400)
    small = _dataset(imported, "filters", "/contiguous_small")
    assert small.chunks == (50, 37)
    scalar = _dataset(imported, "filters", "/scalar_int")
    assert scalar.chunks == () and imported.declared_pipeline(scalar).is_identity
    assert len(imported.chunk_index(scalar)) == 1
    empty = _dataset(imported, "filters", "/empty_contiguous")
    assert empty.shape.dims == (0, 4) and len(imported.chunk_index(empty)) == 0
    unl = _dataset(imported, "filters", "/unlimited")
    assert unl.shape.maxdims == (None, 3)


def test_codec_level_and_chunks_options(hdf5_files, tmp_path):
    src = hdf5_files["filters"]
    cat = import_all([src], tmp_path / "zstd", codec="zstd", level=7, chunks="1,64,100")
    ds = cat.load("/filters.h5").resolve("/contiguous")
    p = cat.declared_pipeline(ds)
    assert p.ids == (ZSTD,) and p.filters[0].cd_values == (7,)
    assert ds.chunks == (1, 64, 100)
    assert cat.declared_pipeline(cat.load("/filters.h5").resolve("/gzip")).ids == (DEFLATE,)  # copied as is
    corpus.assert_snapshots_equal(corpus.hdf5_snapshot(src), corpus.domain_snapshot(cat, "/filters.h5"))

    cat = import_all([src], tmp_path / "blosc", codec="blosc", domain="/x/blosc.h5")
    ds = cat.load("/x/blosc.h5").resolve("/contiguous")
    f = cat.declared_pipeline(ds).filters[0]
    assert f.id == BLOSC and f.blosc["typesize"] == 4
    assert cat.store.get(cat.chunk_index(ds).key(0))[3] == 4  # the frame shuffles 4-byte elements
    cat = import_all([src], tmp_path / "spec", codec="2|32015,4", domain="/spec.h5")
    ds = cat.load("/spec.h5").resolve("/contiguous")
    p = cat.declared_pipeline(ds)
    assert p.ids == (SHUFFLE, ZSTD) and p.filters[0].cd_values == (4,) and p.filters[1].cd_values == (4,)
    assert np.array_equal(corpus.read_dataset(cat, ds), h5py.File(src)["contiguous"][...])
    cat = import_all([src], tmp_path / "none", codec="none", domain="/none.h5")
    ds = cat.load("/none.h5").resolve("/contiguous")
    assert cat.declared_pipeline(ds).is_identity
    assert cat.store.get(cat.chunk_index(ds).key(0)) == \
        np.ascontiguousarray(h5py.File(src)["contiguous"][0], "<f4").tobytes()  # the file's byte order
    raw = cat.load("/none.h5").resolve("/no_filter_chunked")  # unfiltered chunks: copied as they are
    assert cat.declared_pipeline(raw).is_identity and raw.type.order == "<"
    with h5py.File(src) as f:
        idx = cat.chunk_index(raw)
        assert len(idx) == 12
        for i in idx.linear:
            coords = idx.coords_of(int(i))
            assert cat.store.get(idx.key(int(i))) == \
                f["no_filter_chunked"].id.read_direct_chunk(tuple(c * 16 for c in coords))[1]


def test_overwrite_replaces_and_cleans_up(hdf5_files, tmp_path):
    store = tmp_path / "s"
    src = hdf5_files["types"]
    import_source(src, str(store), progress=False)
    first = Catalog(open_store(str(store))).load("/types.h5").domain.root
    from polyfs.errors import AlreadyExists

    with pytest.raises(AlreadyExists):
        import_source(src, str(store), progress=False)
    import_source(src, str(store), overwrite=True, progress=False)
    cat = Catalog(open_store(str(store)))
    second = cat.load("/types.h5").domain.root
    assert second != first
    prefixes = {o.key.split("/")[1] for o in cat.store.list("db/")}
    assert prefixes == {second[2:19]}  # the replaced domain's objects are gone
    assert not list(cat.store.list("polyfs/crc32/" + first[2:19]))
