"""Tier 2: the N5 view, materialized and read by tensorstore (n5 driver), z5py and zarr-n5.

Same corpus as the Zarr tests (zarr_n5_corpus.py); N5 shows its numeric
datasets. Block files are also parsed by hand: header (mode 0, ndim, block
dims, big-endian) and payload, which for big-endian zstd/blosc/raw data is the
stored chunk object byte for byte and for deflate a gzip member spliced around
the stored raw-deflate bytes. A block crossing the dataset's edge is cropped to
it (as n5-java and z5py write them), its payload in the compression's
uncompressed mode, decoded here with numcodecs and gzip.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import zarr_n5_corpus as corpus
from polyfs.model.catalog import Catalog
from polyfs.store import open_store
from polyfs.formats.n5 import spec as n5spec
from polyfs.formats.n5 import view as n5
from support import make_ctx, materialize

STEM = "run1.n5"
N5_CASES = [c for c in corpus.CASES if c.n5_mode is not None]


@pytest.fixture(scope="module")
def domain():
    store = open_store("memory://n5-view-corpus")
    datasets = corpus.build(Catalog(store))
    return store, datasets


@pytest.fixture(scope="module")
def rendered(domain, tmp_path_factory):
    store, _ = domain
    ctx, reader = make_ctx(store)
    model = ctx.catalog.load(corpus.DOMAIN)
    dest = tmp_path_factory.mktemp("n5") / STEM
    materialize(n5.domain_node(model, ctx, STEM), dest, reader)
    return dest, ctx, model


def n5_expected(case, datasets) -> np.ndarray:
    """What an N5 reader returns in C order: bool as uint8, scalars as 1-element 1-D."""
    want = corpus.expected_array(case, datasets[case.name])
    if want.dtype.kind == "b":
        want = want.astype(np.uint8)
    return want.reshape(want.shape or (1,))


def test_only_numeric_datasets_are_shown(rendered):
    root, _, _ = rendered
    shown = {p.parent.relative_to(root).as_posix() for p in root.rglob("attributes.json")
             if "dataType" in json.loads(p.read_bytes())}
    want = {c.path.lstrip("/") for c in N5_CASES} | {"x"}
    assert shown == want
    top = json.loads((root / "attributes.json").read_bytes())
    assert top["n5"] == "4.0.0" and top["title"] == "a run"
    assert not (root / "refs").exists() and not (root / "s_vlen_zstd").exists()


@pytest.mark.parametrize("case", N5_CASES, ids=lambda c: c.name)
def test_tensorstore_n5(rendered, domain, case):
    import tensorstore as ts

    root, _, _ = rendered
    t = ts.open({"driver": "n5", "kvstore": f"file://{root}{case.path}"}, read=True).result()
    want = n5_expected(case, domain[1])
    got = t.read().result()  # tensorstore keeps N5's dimension order (fastest first)
    np.testing.assert_array_equal(got, want.T)
    assert got.dtype.newbyteorder("=") == want.dtype.newbyteorder("=")


@pytest.mark.parametrize("case", N5_CASES, ids=lambda c: c.name)
def test_z5py(rendered, domain, case):
    import z5py

    root, _, _ = rendered
    f = z5py.File(str(root), "r")
    ds = f[case.path.lstrip("/")]
    want = n5_expected(case, domain[1])
    assert ds.shape == want.shape  # z5py turns N5's order back into C order
    np.testing.assert_array_equal(ds[:], want)
    if want.size and want.ndim:
        sl = tuple(slice(d // 3, max(1, d - d // 4)) for d in want.shape)
        np.testing.assert_array_equal(ds[sl], want[sl])


@pytest.mark.parametrize("case", [c for c in N5_CASES if c.zarr_n5], ids=lambda c: c.name)
def test_zarr_n5(rendered, domain, case):
    import zarr
    import zarr_n5

    root, _, _ = rendered
    store = zarr_n5.ImplicitGroupWrapperStore(zarr_n5.N5WrapperStore(zarr.storage.LocalStore(str(root), read_only=True)))
    arr = zarr.open_group(store, mode="r")[case.path.lstrip("/")]
    want = n5_expected(case, domain[1])
    np.testing.assert_array_equal(arr[...], want.T)  # zarr-n5 keeps N5's order too


def test_recipes_are_as_expected(rendered):
    _, ctx, model = rendered
    for case in N5_CASES:
        assert n5.serving(model, ctx, case.path).startswith(case.n5_mode), case.name
    assert n5.serving(model, ctx, "/s_vlen_zstd") == "-"


# -- block files, by hand -----------------------------------------------------------------------
def _block(root, case, coords) -> tuple[int, tuple, bytes] | None:
    path = root / case.path.lstrip("/") / "/".join(str(c) for c in reversed(coords))
    if not path.exists():
        return None
    data = path.read_bytes()
    head = n5spec.parse_block_header(data)
    return head.mode, head.dims_n5, data[head.size:]


def edge_extent(case, coords) -> tuple[int, ...]:
    """The C-order extent of the block at ``coords``: the block, cut at the dataset's edge."""
    return tuple(min(c, s - i * c) for i, c, s in zip(coords, case.chunks, case.shape))


def decode_payload(compression: dict, payload: bytes) -> bytes:
    import gzip

    import numcodecs

    kind = compression["type"]
    if kind == "raw":
        return payload
    if kind == "gzip":
        return gzip.decompress(payload)
    return bytes({"zstd": numcodecs.Zstd(), "blosc": numcodecs.Blosc(),
                  "bzip2": numcodecs.BZ2()}[kind].decode(payload))


@pytest.mark.parametrize("name", ["f64_3d_zstd_be", "i32_4d_blosc_be", "u8_1d_none", "u64_5d_deflate_be",
                                  "f64_2d_bzip2_be"])
def test_blocks_are_the_stored_chunks_and_edge_blocks_are_cropped(rendered, domain, name):
    root, ctx, _ = rendered
    store, datasets = domain
    case, ds = corpus.BY_NAME[name], datasets[name]
    index = ctx.catalog.chunk_index(ds)
    meta = json.loads((root / case.path.lstrip("/") / "attributes.json").read_bytes())
    assert meta["dimensions"] == list(reversed(case.shape)) and meta["blockSize"] == list(reversed(case.chunks))
    want = n5_expected(case, datasets)
    edges = 0
    for coords in corpus.chunk_coords(ds.grid):
        got = _block(root, case, coords)
        if coords in case.skip:
            assert got is None, f"missing chunk {coords} (zero fill) must be an absent block"
            continue
        mode, dims, payload = got
        extent = edge_extent(case, coords)
        assert mode == 0 and dims == tuple(reversed(extent)), "block dims: the block's, cut at the edge"
        if extent == tuple(case.chunks):
            if meta["compression"]["type"] != "gzip":
                assert payload == store.get(index.key_of(coords)), "an inner block is the stored chunk"
            continue
        edges += 1
        region = tuple(slice(i * c, i * c + e) for i, c, e in zip(coords, case.chunks, extent))
        block = np.frombuffer(decode_payload(meta["compression"], payload), want.dtype.newbyteorder(">"))
        np.testing.assert_array_equal(block.reshape(extent), want[region], err_msg=str(coords))
    assert edges or all(s % c == 0 for s, c in zip(case.shape, case.chunks))


def test_deflate_blocks_are_spliced_gzip_members(rendered, domain):
    root, ctx, _ = rendered
    store, datasets = domain
    case, ds = corpus.BY_NAME["u64_5d_deflate_be"], datasets["u64_5d_deflate_be"]
    meta = json.loads((root / case.path.lstrip("/") / "attributes.json").read_bytes())
    assert meta["compression"] == {"type": "gzip", "level": 6}
    index = ctx.catalog.chunk_index(ds)
    for lin in index.linear:
        coords = index.coords_of(int(lin))
        if edge_extent(case, coords) != tuple(case.chunks):
            continue  # cropped: test_blocks_are_the_stored_chunks_and_edge_blocks_are_cropped
        _, _, member = _block(root, case, coords)
        stored = store.get(index.key(int(lin)))
        assert member[10:-8] == stored[2:-4]
        assert corpus.crc_ok(member)


def test_little_endian_blocks_are_raw_big_endian(rendered, domain):
    root, _, _ = rendered
    case = corpus.BY_NAME["i16_2d_deflate_le"]
    meta = json.loads((root / case.path.lstrip("/") / "attributes.json").read_bytes())
    assert meta["compression"] == {"type": "raw"} and meta["dataType"] == "int16"
    want = corpus.expected_array(case, domain[1][case.name])
    _, dims, payload = _block(root, case, (3, 2))  # an edge block: cropped to the dataset
    assert dims == (34, 4) and len(payload) == 4 * 34 * 2
    block = np.frombuffer(payload, ">i2").reshape(4, 34)
    np.testing.assert_array_equal(block, want[96:, 96:])


def test_missing_chunks_with_a_fill_value_are_fill_blocks(rendered, domain):
    root, _, _ = rendered
    case = corpus.BY_NAME["u16_3d_zstd_be"]  # fill 7, zstd
    mode, dims, payload = _block(root, case, (0, 0, 0))
    import numcodecs

    fill = np.frombuffer(numcodecs.Zstd().decode(payload), ">u2")
    assert fill.size == math.prod(case.chunks) and np.all(fill == 7)
    case = corpus.BY_NAME["f32_2d_shuffle_deflate"]  # fill NaN, transcoded raw
    _, _, payload = _block(root, case, (1, 1))
    assert np.all(np.isnan(np.frombuffer(payload, ">f4")))


def test_attributes_and_axis_keys(rendered):
    root, _, _ = rendered
    meta = json.loads((root / "deep" / "f64_3d_zstd_be" / "attributes.json").read_bytes())
    assert meta["resolution"] == [4.0, 2.0, 1.0]  # per-axis: kept as given
    assert "units" not in meta  # a plain string is not N5's per-axis units (tensorstore rejects it)
    deep = json.loads((root / "deep" / "attributes.json").read_bytes())
    assert {link["name"] for link in deep["zarr_link"]} == {"soft", "ext"}
    assert json.loads((root / "bool_2d_deflate" / "attributes.json").read_bytes())["dataType"] == "uint8"
    arr = json.loads((root / "f32_arraytype" / "attributes.json").read_bytes())
    assert arr["dimensions"] == [3, 20] and arr["blockSize"] == [3, 8]


def test_listing_and_stat_read_no_chunk_data(domain):
    from polyfs.views.base import ViewContext

    counting = corpus.CountingStore(domain[0])
    ctx = ViewContext(Catalog(counting))
    model = ctx.catalog.load(corpus.DOMAIN)
    files = corpus.walk_files(n5.domain_node(model, ctx, STEM), [])
    assert len(files) > 100
    bzip2 = ctx.catalog.chunk_index(model.resolve(corpus.BY_NAME["f64_2d_bzip2_be"].path)).key(0).rsplit("/", 1)[0]
    # ^ the bzip2 dataset's chunks: its edge blocks are compressed again (bzip2 has no uncompressed mode)
    bad = [r for r in counting.reads if not r[1].endswith(".json") and "/polyfs" not in "/" + r[1]
           and not (r[0] == "get_range" and r[2] == 0 and r[3] <= 16) and bzip2 not in r[1]]
    assert not bad, bad[:5]
    for node, size in files:
        assert node.vfile().size == size, node.name


def test_header_layout_roundtrip():
    hdr = n5spec.block_header((3, 2, 1))
    assert hdr == bytes.fromhex("0000 0003 00000003 00000002 00000001".replace(" ", ""))
    head = n5spec.parse_block_header(hdr + b"xyz")
    assert (head.mode, head.dims_n5, head.dims, head.size) == (0, (3, 2, 1), (1, 2, 3), 16)
    with pytest.raises(ValueError):
        n5spec.parse_block_header(hdr[:10])
