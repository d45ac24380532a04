"""TIFF import: values as tifffile reads them; deflate/zstd tiles and strips are
the file's bytes; everything else decoded to big-endian deflate."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import tifffile

import corpus
from .import_helpers import import_all
from polyfs.codecs.registry import DEFLATE, ZSTD
from polyfs.model.catalog import Catalog

# file stem -> (filter ids, byte order of the stored type, chunk shape)
EXPECT = {
    "tiled_deflate_be": ((DEFLATE,), ">", (1, 32, 32)),  # copied, MM kept
    "tiled_zstd": ((ZSTD,), "<", (1, 48, 16)),  # copied
    "stripped_zstd_big": ((ZSTD,), "<", (1, 200, 180)),  # strips copied, the short last one re-encoded
    "stripped_raw_small": ((DEFLATE,), "<", (4, 100, 70)),  # uncompressed: decoded, rule chunks
    "tiled_lzw_predictor": ((DEFLATE,), "<", (1, 32, 32)),  # LZW: decoded, tile chunks
    "tiled_raw": ((DEFLATE,), "<", (1, 32, 48)),  # uncompressed: the default encoding
    "rgb_contig_deflate": ((DEFLATE,), "|", (16, 16, 3)),
    "rgb_planar_deflate": ((DEFLATE,), "|", (1, 16, 16)),
    "imagej_hyperstack": ((DEFLATE,), "<", (2, 3, 30, 40)),
    "single_int16": ((DEFLATE,), "<", (32, 32)),
    "sparse_tiles": ((DEFLATE,), "<", (16, 16)),
}
COPIED = {"tiled_deflate_be", "tiled_zstd", "stripped_zstd_big", "rgb_contig_deflate", "rgb_planar_deflate",
          "single_int16", "sparse_tiles"}


@pytest.fixture(scope="module")
def imported(tiff_files, tmp_path_factory) -> Catalog:
    return import_all(tiff_files.values(), tmp_path_factory.mktemp("store"))


def test_corpus_is_complete(tiff_files):
    assert set(tiff_files) == set(EXPECT) | {"pyramid", "two_series"}


def test_series_and_levels_become_datasets(imported, tiff_files):
    m = imported.load("/pyramid.h5")
    assert sorted(m.root.links) == ["image", "image_level1"]
    for name, want in zip(("/image", "/image_level1"), corpus.tiff_levels(tiff_files["pyramid"])):
        ds = m.resolve(name)
        assert np.array_equal(corpus.read_dataset(imported, ds), want)
        assert imported.declared_pipeline(ds).ids == (DEFLATE,) and ds.chunks == (32, 32)
    m = imported.load("/two_series.h5")
    assert sorted(m.root.links) == ["image0", "image1"]
    want = corpus.tiff_expected(tiff_files["two_series"])
    first, second = m.resolve("/image0"), m.resolve("/image1")
    assert np.array_equal(corpus.read_dataset(imported, first), want[0])
    assert np.array_equal(corpus.read_dataset(imported, second), want[1])
    assert imported.declared_pipeline(first).ids == (ZSTD,)  # copied tiles
    assert second.type.order == "<" and second.shape.dims == (3, 20, 30)  # stripped: decoded, its order kept


@pytest.mark.parametrize("stem", sorted(EXPECT))
def test_values_encoding_and_metadata(imported, tiff_files, stem):
    ds = imported.load(f"/{stem}.h5").resolve("/image")
    want = corpus.tiff_expected(tiff_files[stem])[0]
    got = corpus.read_dataset(imported, ds)
    assert got.shape == ds.shape.dims and got.size == want.size
    assert np.array_equal(got, want.reshape(got.shape))
    ids, order, chunks = EXPECT[stem]
    assert imported.declared_pipeline(ds).ids == ids
    assert ds.type.order == order
    assert ds.chunks == chunks
    with tifffile.TiffFile(tiff_files[stem]) as t:
        assert ds.attributes["axes"].value.replace("I", "") in (t.series[0].axes, t.series[0].axes.replace("Q", ""))
        assert len(ds.attributes["axes"].value) == len(ds.shape.dims)


@pytest.mark.parametrize("stem", sorted(COPIED))
def test_tiles_are_copied_byte_for_byte(imported, tiff_files, stem):
    ds = imported.load(f"/{stem}.h5").resolve("/image")
    idx = imported.chunk_index(ds)
    stored = {idx.coords_of(int(i)): imported.store.get(idx.key(int(i))) for i in idx.linear}
    raw = tiff_files[stem].read_bytes()
    with tifffile.TiffFile(tiff_files[stem]) as t:
        pages = t.series[0].pages
        copied = 0
        for n, page in enumerate(pages):
            for off, count in zip(page.dataoffsets, page.databytecounts):
                tile = raw[off:off + count]
                if count == 0:
                    continue
                if tile in stored.values():
                    copied += 1
        ntiles = sum(sum(1 for c in p.databytecounts if c) for p in pages)
    if stem == "stripped_zstd_big":
        assert copied == ntiles - len(pages)  # each page's short last strip is re-encoded
    else:
        assert copied == ntiles
    if stem == "sparse_tiles":  # the empty tile stays missing, and reads as the fill value
        assert set(stored) == {(i, j) for i in range(4) for j in range(4)} - {(1, 1)}
        assert not corpus.read_dataset(imported, ds)[16:32, 16:32].any()


def test_resolution_and_imagej_metadata(imported):
    ds = imported.load("/tiled_deflate_be.h5").resolve("/image")
    assert ds.attributes["resolution"].value == [2.0, 4.0]
    assert ds.attributes["axes"].value == "ZYX"
    ij = imported.load("/imagej_hyperstack.h5").resolve("/image")
    assert ij.attributes["imagej_spacing"].value == 0.5 and ij.attributes["imagej_unit"].value == "um"
    assert ij.attributes["axes"].value == "TZYX"


def test_deflate_tiles_get_crc32(imported):
    ds = imported.load("/tiled_deflate_be.h5").resolve("/image")
    idx = imported.chunk_index(ds)
    table = imported.crc_table(ds)
    for i in idx.linear:
        data = imported.store.get(idx.key(int(i)))
        assert table.lookup(int(i), int.from_bytes(data[-4:], "big")) == zlib.crc32(zlib.decompress(data))


def test_codec_none_copies_uncompressed_tiles(tiff_files, tmp_path):
    src = tiff_files["tiled_raw"]
    cat = import_all([src], tmp_path / "s", codec="none")
    ds = cat.load("/tiled_raw.h5").resolve("/image")
    assert cat.declared_pipeline(ds).is_identity and ds.type.order == "<"
    idx = cat.chunk_index(ds)
    raw = src.read_bytes()
    with tifffile.TiffFile(src) as t:
        tiles = [raw[o:o + n] for p in t.series[0].pages for o, n in zip(p.dataoffsets, p.databytecounts)]
    stored = [cat.store.get(idx.key(int(i))) for i in idx.linear]
    assert sorted(stored) == sorted(tiles)
    assert np.array_equal(corpus.read_dataset(cat, ds), corpus.tiff_expected(src)[0])
