"""Zarr v2 hierarchies (zarr-python ``zarr_format=2``, xarray, OME-Zarr 0.4) import: they
were refused ("only Zarr v3 is supported") although every value is representable.

- numeric arrays under v2 filters and compressors (Delta, FixedScaleOffset, Shuffle, bz2,
  lzma, blosc), Fortran order and '/' chunk keys keep values, chunk shape and fill value;
- group and array ``.zattrs`` become attributes; strings (fixed and variable) import;
- a non-numeric fill value polyfs cannot keep is refused naming the file, store unchanged.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import corpus
from .import_helpers import import_all, listing
from polyfs.errors import SourceError
from polyfs.importers import import_source

zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

A = np.arange(30 * 40, dtype="<i4").reshape(30, 40) - 500
F = (np.arange(30 * 40, dtype="<f8").reshape(30, 40) / 7).round(2)

CASES = {
    "delta_zlib": (A, dict(filters=[numcodecs.Delta(dtype="<i4")], compressors=[numcodecs.Zlib(level=3)])),
    "slash_blosc": (A, dict(chunk_key_encoding={"name": "v2", "separator": "/"},
                            compressors=[numcodecs.Blosc(cname="lz4", shuffle=2)])),
    "order_f_gzip": (A, dict(order="F", compressors=[numcodecs.GZip(5)])),
    "nan_fill_bz2": (F, dict(fill_value=np.nan, compressors=[numcodecs.BZ2()])),
    "fso_zstd": (F, dict(filters=[numcodecs.FixedScaleOffset(offset=0, scale=100, dtype="<f8", astype="<i4")],
                         compressors=[numcodecs.Zstd()])),
    "shuffle_lzma": (F, dict(filters=[numcodecs.Shuffle(elementsize=8)], compressors=[numcodecs.LZMA()])),
    "big_endian_raw": (A.astype(">i2"), dict(compressors=None, fill_value=-1)),
}


def _v2_group(path, name, data, **kw):
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    g.attrs["title"] = "made by zarr-python"
    a = g.create_array(name, shape=data.shape, dtype=data.dtype, chunks=(16, 12), **kw)
    a[...] = data
    a.attrs["units"] = "m"
    return g


@pytest.mark.parametrize("case", sorted(CASES))
def test_zarr_v2_array_values_chunks_fill_attrs(tmp_path, case):
    data, kw = CASES[case]
    src = tmp_path / f"{case}.zarr"
    _v2_group(src, "x", data, **kw)
    cat = import_all([src], tmp_path / "store")
    m = cat.load(f"/{case}.h5")
    assert m.root.attributes["title"].value == "made by zarr-python"
    ds = m.resolve("/x")
    got = corpus.read_dataset(cat, ds)
    assert got.dtype.newbyteorder("=") == data.dtype.newbyteorder("=")
    want = zarr.open_array(str(src / "x"), mode="r")[...]  # what the source's own library reads
    np.testing.assert_array_equal(got, want)
    assert ds.chunks == (16, 12) and ds.attributes["units"].value == "m"
    fill = zarr.open_array(str(src / "x"), mode="r").fill_value
    if isinstance(fill, float) and np.isnan(fill):
        assert np.isnan(ds.fill_value)
    elif fill:
        assert ds.fill_value == fill


def test_zarr_v2_nested_groups_strings_and_single_array(tmp_path):
    src = tmp_path / "tree.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=2)
    sub = g.create_group("a").create_group("b")
    sub.attrs["k"] = [1, 2]
    s = sub.create_array("words", shape=(4,), dtype=str, chunks=(2,))
    s[...] = np.array(["a", "bbb", "", "ü"])
    u = g.create_array("fixed", shape=(2, 2), dtype="<U4", chunks=(1, 2))
    u[...] = np.array([["ab", "c"], ["dd", "eeee"]])
    b = g.create_array("flags", shape=(5,), dtype=bool, chunks=(2,))
    b[...] = [True, False, True, True, False]
    cat = import_all([src], tmp_path / "store")
    m = cat.load("/tree.h5")
    assert m.resolve("/a/b").attributes["k"].value == [1, 2]
    words = corpus.read_dataset(cat, m.resolve("/a/b/words"))
    assert [w.decode() if isinstance(w, bytes) else str(w) for w in words.ravel()] == ["a", "bbb", "", "ü"]
    fixed = corpus.read_dataset(cat, m.resolve("/fixed"))
    assert [w.decode() if isinstance(w, bytes) else str(w) for w in fixed.ravel()] == ["ab", "c", "dd", "eeee"]
    assert corpus.read_dataset(cat, m.resolve("/flags")).tolist() == [True, False, True, True, False]
    one = tmp_path / "one.zarr"  # a bare v2 array is one dataset, as a bare v3 array is
    a = zarr.open_array(str(one), mode="w", zarr_format=2, shape=(6,), chunks=(4,), dtype="<u2")
    a[...] = np.arange(6)
    cat = import_all([one], tmp_path / "store")
    assert corpus.read_dataset(cat, cat.load("/one.h5").resolve("/data")).tolist() == list(range(6))


def test_zarr_v2_unkeepable_fill_is_refused_and_store_unchanged(tmp_path, capsys):
    store = tmp_path / "store"
    import_all([corpus.make_zarr_corpus(tmp_path / "first")[0]], store)
    before = listing(store)
    src = tmp_path / "fill.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=2)
    g.create_array("ok", shape=(3,), dtype="<i2", chunks=(2,))[...] = [1, 2, 3]
    s = g.create_array("s", shape=(3,), dtype="S3", chunks=(2,), fill_value=b"xy")
    s[...] = [b"a", b"b", b"c"]
    with pytest.raises(SourceError, match=r"s/\.zarray.*fill_value"):
        import_source(src, str(store), progress=False)
    assert listing(store) == before


def test_zarr_v2_metadata_of_another_version_is_refused(tmp_path):
    src = tmp_path / "odd.zarr"
    src.mkdir()
    (src / ".zgroup").write_text(json.dumps({"zarr_format": 3}))
    with pytest.raises(SourceError, match="zarr_format 3"):
        import_source(src, str(tmp_path / "store"), progress=False)
    assert not (tmp_path / "store").exists() or not listing(tmp_path / "store")


def test_tensorstore_zarr_v2_arrays_in_plain_directories(tmp_path):
    """tensorstore's ``zarr`` driver writes ``.zarray`` arrays and never a ``.zgroup``: the
    directory above them is an implicit root group, as for its ``zarr3`` arrays."""
    ts = pytest.importorskip("tensorstore")
    root = tmp_path / "tsv2"
    data = np.arange(20 * 30, dtype="<u2").reshape(20, 30)
    t = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(root / "sub" / "arr")},
                 "metadata": {"shape": [20, 30], "chunks": [8, 16], "dtype": "<u2",
                              "compressor": {"id": "zlib", "level": 2}}},
                create=True, delete_existing=True).result()
    t[...] = data
    cat = import_all([root], tmp_path / "store")
    ds = cat.load("/tsv2.h5").resolve("/sub/arr")
    assert ds.chunks == (8, 16)
    np.testing.assert_array_equal(corpus.read_dataset(cat, ds), data)
