"""Tier 2: the Zarr v3 view, materialized and read by zarr-python 3 and tensorstore.

The corpus (zarr_n5_corpus.py) covers u/int 8-64, float16/32/64, bool, fixed
and variable-length strings, compounds, references, array types, scalars and
empty arrays, 1-D to 5-D, edge and missing chunks, none/deflate/zstd/blosc/
bzip2/shuffle/fletcher32, both byte orders and HSDS-style Blosc frames under
a gzip declaration. Shard files are also parsed by hand (index, CRC32C) to
prove the inner chunks are the stored objects byte for byte.
"""
from __future__ import annotations

import json
import math

import crc32c
import numpy as np
import pytest

import zarr_n5_corpus as corpus
from polyfs.model import keys
from polyfs.model.catalog import Catalog
from polyfs.store import open_store
from polyfs.formats.zarr import view as zarr3
from polyfs.views.base import ViewOptions
from support import make_ctx, materialize

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # zarr: numcodecs.* / unstable dtypes
STEM = "run1.zarr"


@pytest.fixture(scope="module")
def domain():
    store = open_store("memory://zarr3-view-corpus")
    datasets = corpus.build(Catalog(store))
    return store, datasets


def _render(store, dest, **options):
    ctx, reader = make_ctx(store, **options)
    model = ctx.catalog.load(corpus.DOMAIN)
    node = zarr3.domain_node(model, ctx, STEM)
    materialize(node, dest, reader)
    return ctx, model


@pytest.fixture(scope="module")
def sharded(domain, tmp_path_factory):
    store, _ = domain
    dest = tmp_path_factory.mktemp("zarr3") / STEM
    ctx, model = _render(store, dest)
    return dest, ctx, model


@pytest.fixture(scope="module")
def unsharded(domain, tmp_path_factory):
    store, _ = domain
    dest = tmp_path_factory.mktemp("zarr3u") / STEM
    ctx, model = _render(store, dest, zarr_sharded=False)
    return dest, ctx, model


@pytest.fixture(scope="module")
def numcodecs(domain, tmp_path_factory):
    """The opt-in zero-copy form: shuffle, fletcher32 and bzip2 as zarr-python's numcodecs.* codecs."""
    store, _ = domain
    dest = tmp_path_factory.mktemp("zarr3n") / STEM
    ctx, model = _render(store, dest, zarr_numcodecs=True)
    return dest, ctx, model


# how the numcodecs form serves the cases the default form transcodes
NUMCODECS_MODES = {"f32_2d_shuffle_deflate": "zero-copy (gzip", "f64_2d_bzip2_be": "zero-copy",
                   "s_vlen_bzip2": "zero-copy", "i16_fletcher_be": "transcoded (deflate"}


def _zarr_read(root, case):
    import zarr

    arr = zarr.open_group(str(root), mode="r")[case.path.lstrip("/")]
    return arr, arr[...] if case.shape else arr[()]


def _assert_same(case, got, want):
    dt = case.dtype.numpy()
    if dt.names:
        assert got.dtype.names == dt.names
        for name in dt.names:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{case.name}.{name}")
    elif dt.kind == "O":
        assert [str(x) for x in np.asarray(got).reshape(-1)] == [str(x) for x in want.reshape(-1)], case.name
    else:
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=case.name)
        if dt.kind in "iuf":
            assert np.asarray(got).dtype.newbyteorder("=") == (dt.subdtype[0] if dt.subdtype else dt).newbyteorder("=")


@pytest.mark.parametrize("layout", ["sharded", "unsharded", "numcodecs"])
@pytest.mark.parametrize("case", corpus.CASES, ids=lambda c: c.name)
def test_zarr_python_reads_every_array(request, layout, case, domain):
    root, ctx, model = request.getfixturevalue(layout)
    arr, got = _zarr_read(root, case)
    want = corpus.expected_array(case, domain[1][case.name])
    assert arr.shape == want.shape
    _assert_same(case, got, want)
    # a partial read across chunk (and shard) edges
    if want.ndim and want.size and case.dtype.numpy().kind != "O":
        sl = tuple(slice(max(0, d // 3), max(1, d - d // 4)) for d in want.shape)
        _assert_same(case, arr[sl], want[sl])


TS_CASES = [c for c in corpus.CASES if c.tensorstore]


@pytest.mark.parametrize("layout", ["sharded", "unsharded"])
@pytest.mark.parametrize("case", TS_CASES, ids=lambda c: c.name)
def test_tensorstore_reads_numeric_arrays(request, layout, case, domain):
    import tensorstore as ts

    root, _, _ = request.getfixturevalue(layout)
    t = ts.open({"driver": "zarr3", "kvstore": f"file://{root}{case.path}"}, read=True).result()
    want = corpus.expected_array(case, domain[1][case.name])
    got = t.read().result()
    assert tuple(t.shape) == want.shape
    np.testing.assert_array_equal(got, want)


def test_recipes_are_as_expected(sharded, numcodecs):
    _, ctx, model = sharded
    _, nctx, _ = numcodecs
    for case in corpus.CASES:
        assert zarr3.serving(model, ctx, case.path).startswith(case.zarr_mode), case.name
        want = NUMCODECS_MODES.get(case.name, case.zarr_mode)
        assert zarr3.serving(model, nctx, case.path).startswith(want), case.name


def test_default_chains_are_zarr_v3_spec_codecs(sharded, numcodecs):
    """Every codec the default view names is a Zarr v3 core codec (tensorstore reads them all);
    the numcodecs form names zarr-python's own where it serves stored bytes."""
    spec_names = {"bytes", "vlen-utf8", "gzip", "zstd", "blosc", "crc32c", "sharding_indexed"}
    root, _, _ = sharded
    for path in root.rglob("zarr.json"):
        meta = json.loads(path.read_bytes())
        chain = list(meta.get("codecs", []))
        for c in list(chain):
            chain += c.get("configuration", {}).get("codecs", []) + c.get("configuration", {}).get("index_codecs", [])
        assert {c["name"] for c in chain} <= spec_names, path
    nroot, _, _ = numcodecs
    inner = _array_meta(nroot, corpus.BY_NAME["f32_2d_shuffle_deflate"])["codecs"][0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes", "numcodecs.shuffle", "gzip"]
    inner = _array_meta(nroot, corpus.BY_NAME["f64_2d_bzip2_be"])["codecs"][0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes", "numcodecs.bz2"]


# -- shard files, by hand ----------------------------------------------------------------
def _shard_index(data: bytes, n: int) -> np.ndarray:
    raw, crc = data[-(16 * n + 4):-4], data[-4:]
    assert int.from_bytes(crc, "little") == crc32c.crc32c(raw), "shard index CRC32C"
    return np.frombuffer(raw, dtype="<u8").reshape(n, 2)


def _array_meta(root, case):
    return json.loads((root / case.path.lstrip("/") / "zarr.json").read_bytes())


@pytest.mark.parametrize("name", ["f64_3d_zstd_be", "u16_3d_zstd_be", "u8_1d_none"])
def test_shards_hold_the_stored_chunks_byte_for_byte(sharded, domain, name):
    root, ctx, _ = sharded
    store, datasets = domain
    case = corpus.BY_NAME[name]
    ds = datasets[name]
    meta = _array_meta(root, case)
    shard_codec = meta["codecs"][0]
    assert shard_codec["name"] == "sharding_indexed"
    assert shard_codec["configuration"]["index_location"] == "end"
    inner = tuple(shard_codec["configuration"]["chunk_shape"])
    outer = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    assert inner == case.chunks
    k = tuple(o // i for o, i in zip(outer, inner))
    n = math.prod(k)
    index = ctx.catalog.chunk_index(ds)
    seen = set()
    shard_grid = tuple(-(-g // kk) for g, kk in zip(ds.grid, k))
    for scoords in corpus.chunk_coords(shard_grid):
        path = root / case.path.lstrip("/") / "c" / "/".join(map(str, scoords))
        members = [tuple(s * kk + i for s, kk, i in zip(scoords, k, icoords))
                   for icoords in corpus.chunk_coords(k)]
        present = [m for m in members if all(c < g for c, g in zip(m, ds.grid)) and m not in case.skip]
        if not present:
            assert not path.exists(), f"all-missing shard {scoords} must be absent"
            continue
        data = path.read_bytes()
        table = _shard_index(data, n)
        for pos, m in enumerate(members):
            off, nbytes = (int(x) for x in table[pos])
            if m in present:
                stored = store.get(index.key_of(m))
                assert data[off:off + nbytes] == stored, f"chunk {m} in shard {scoords}"
                seen.add(m)
            else:
                assert off == nbytes == 2 ** 64 - 1, f"missing chunk {m} in shard {scoords}"
    assert len(seen) == len(index)


def test_gzip_members_are_spliced_from_the_stored_zlib_streams(sharded, domain):
    root, ctx, _ = sharded
    store, datasets = domain
    case = corpus.BY_NAME["u64_5d_deflate_be"]
    ds = datasets[case.name]
    meta = _array_meta(root, case)
    k = tuple(o // i for o, i in zip(meta["chunk_grid"]["configuration"]["chunk_shape"], case.chunks))
    index = ctx.catalog.chunk_index(ds)
    checked = 0
    for lin in index.linear:
        coords = index.coords_of(int(lin))
        s = tuple(c // kk for c, kk in zip(coords, k))
        pos = int(np.ravel_multi_index(tuple(c % kk for c, kk in zip(coords, k)), k))
        data = (root / case.path.lstrip("/") / "c" / "/".join(map(str, s))).read_bytes()
        off, nbytes = (int(x) for x in _shard_index(data, math.prod(k))[pos])
        member = data[off:off + nbytes]
        stored = store.get(index.key(int(lin)))
        assert member[:3] == b"\x1f\x8b\x08" and member[10:-8] == stored[2:-4]
        assert corpus.crc_ok(member)
        checked += 1
    assert checked == len(index) > 0


def test_unsharded_chunk_files_are_the_stored_objects(unsharded, domain):
    root, ctx, _ = unsharded
    store, datasets = domain
    for name in ("f64_3d_zstd_be", "i32_4d_blosc_le", "f32_hsds_blosc"):
        case = corpus.BY_NAME[name]
        meta = _array_meta(root, case)
        assert meta["codecs"][0]["name"] == "bytes"
        assert tuple(meta["chunk_grid"]["configuration"]["chunk_shape"]) == case.chunks
        index = ctx.catalog.chunk_index(datasets[name])
        for coords in corpus.chunk_coords(datasets[name].grid):
            path = root / case.path.lstrip("/") / "c" / "/".join(map(str, coords))
            if coords in case.skip:
                assert not path.exists()
            else:
                assert path.read_bytes() == store.get(index.key_of(coords))
    scalar = root / "u32_scalar_be" / "c"
    assert scalar.is_file()


# -- metadata -------------------------------------------------------------------------------
def test_metadata_documents(sharded):
    import zarr

    root, _, model = sharded
    g = zarr.open_group(str(root), mode="r")
    attrs = g.attrs.asdict()
    assert attrs["title"] == "a run"
    assert attrs["nan"] == [1.5, "NaN", "-Infinity"]
    assert attrs["flag"] is True
    assert attrs["point"] == {"a": 1, "b": 2.5, "s": "ab"}
    assert attrs["matrix"] == [[1, 2, 3], [4, 5, 6]]
    assert attrs["target"] == {"zarr_dtype": "object", "value": {"source": ".", "path": "/deep/f64_3d_zstd_be"}}
    deep = g["deep"].attrs.asdict()
    links = {link["name"]: link for link in deep["zarr_link"]}
    assert links["soft"] == {"name": "soft", "source": ".", "path": "/deep/er/u64_5d_deflate_be", "h5_link": "soft"}
    er_links = {link["name"]: link for link in g["deep/er"].attrs["zarr_link"]}
    assert er_links["again"] == {"name": "again", "source": ".", "path": "/bool_2d_deflate", "h5_link": "hard"}
    assert links["ext"] == {"name": "ext", "source": "../../other/file.zarr", "path": "/data", "h5_link": "external"}
    assert (root / links["ext"]["source"]).resolve() == (root.parent.parent / "other" / "file.zarr").resolve()
    assert sorted(g.keys()) == sorted({c.path.split("/")[1] for c in corpus.CASES} | {"refs", "x"})
    assert not (root / "vlen_seq").exists() and not (root / "mytype").exists()
    # dimension scales -> dimension_names
    fsd = g["f32_2d_shuffle_deflate"]
    assert fsd.metadata.dimension_names == (None, "x")
    assert g["x"].metadata.dimension_names == ("x",)
    # references: JSON text + zarr_dtype
    refs = g["refs"]
    assert refs.attrs["zarr_dtype"] == "object"
    got = [json.loads(v) if v else None for v in refs[:]]
    assert got == [{"source": ".", "path": "/deep/f64_3d_zstd_be"}, {"source": ".", "path": "/deep"}, None,
                   {"source": ".", "path": "/u8_1d_none"}]
    # fill values in Zarr's JSON spelling; strict JSON everywhere
    for path in root.rglob("zarr.json"):
        json.loads(path.read_bytes(), parse_constant=lambda c: pytest.fail(f"{path}: bare {c}"))
    meta = _array_meta(root, corpus.BY_NAME["f32_2d_shuffle_deflate"])
    assert meta["fill_value"] == "NaN"
    assert meta["data_type"] == "float32"
    inner = meta["codecs"][0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes"]  # shuffle+deflate: decoded (tensorstore has no shuffle)
    assert inner[0]["configuration"] == {"endian": "little"}
    assert _array_meta(root, corpus.BY_NAME["u16_3d_zstd_be"])["fill_value"] == 7
    assert _array_meta(root, corpus.BY_NAME["s_vlen_none"])["fill_value"] == "none"
    assert _array_meta(root, corpus.BY_NAME["f64_3d_zstd_be"])["codecs"][0]["configuration"]["codecs"][0] == \
        {"name": "bytes", "configuration": {"endian": "big"}}


def test_hdmf_helpers():
    from polyfs.model import types as T
    from polyfs.errors import UnsupportedType
    from polyfs.views import hdmf

    assert hdmf.external_source("/lab/run1.h5", "other.h5", ".zarr") == "../other.zarr"
    assert hdmf.external_source("/lab/run1.h5", "/x/y/z.h5", ".n5") == "../../x/y/z.n5"
    assert hdmf.json_safe({"a": [float("nan"), float("inf"), np.float32(1.5)], "b": np.int64(3)}) == \
        {"a": ["NaN", "Infinity", 1.5], "b": 3}
    for t in (T.VlenType(T.IntType(4, True)), T.ReferenceType("region"),
              T.CompoundType((("v", T.StringType(None)),)), T.ArrayType(T.StringType(None), (2,))):
        with pytest.raises(UnsupportedType):
            hdmf.zarr_type(t)
    zt = hdmf.zarr_type(T.ArrayType(T.IntType(2, True, ">"), (2, 3)))
    assert (zt.data_type, zt.endian, zt.inner) == ("int16", "big", (2, 3))
    assert hdmf.zarr_fill(hdmf.zarr_type(T.FloatType(4)), T.FloatType(4), "-Infinity") == "-Infinity"
    assert hdmf.zarr_fill(hdmf.zarr_type(T.BOOL), T.BOOL, None) is False
    # complex numbers: h5py's {r, i} compound is Zarr complex (same bytes), else a struct
    c8 = T.CompoundType((("r", T.FloatType(4, "<")), ("i", T.FloatType(4, "<"))))
    c16be = T.CompoundType((("real", T.FloatType(8, ">")), ("imag", T.FloatType(8, ">"))))
    assert (hdmf.zarr_type(c8).data_type, hdmf.zarr_type(c8).endian) == ("complex64", "little")
    assert (hdmf.zarr_type(c16be).data_type, hdmf.zarr_type(c16be).endian) == ("complex128", "big")
    assert hdmf.zarr_fill(hdmf.zarr_type(c8), c8, [1.5, "NaN"]) == [1.5, "NaN"]
    assert hdmf.zarr_fill(hdmf.zarr_type(c8), c8, None) == [0.0, 0.0]
    for t in (T.CompoundType((("r", T.FloatType(4)), ("i", T.FloatType(8)))),
              T.CompoundType((("a", T.FloatType(4)), ("b", T.FloatType(4)))),
              T.CompoundType((("r", T.IntType(4, True)), ("i", T.IntType(4, True))))):
        assert isinstance(hdmf.zarr_type(t).data_type, dict), t  # structured


def test_xarray_fill_value_spelling():
    """``_FillValue`` as xarray's FillValueCoder decodes it, for each Zarr data type."""
    import xarray.backends.zarr as xz

    from polyfs.formats.zarr import cf
    from polyfs.model import types as T
    from polyfs.views import hdmf

    cases = [(T.FloatType(4), [-999.0], "float32", -999.0), (T.FloatType(8), ["NaN"], "float64", float("nan")),
             (T.IntType(2, True), [-1], "int16", -1), (T.IntType(1, False), 255, "uint8", 255),
             (T.CompoundType((("r", T.FloatType(8)), ("i", T.FloatType(8)))), [{"r": 1.0, "i": -2.0}],
              "complex128", complex(1, -2))]
    for t, value, name, want in cases:
        zt = hdmf.zarr_type(t)
        assert zt.data_type == name
        got = xz.FillValueCoder.decode(cf.fill_attribute(value, zt), name)
        assert got == want or (np.isnan(want) and np.isnan(got)), name
    assert cf.fill_attribute("not base64", hdmf.zarr_type(T.FloatType(4))) == "not base64"  # left as it is


# -- shard shape rule and options ---------------------------------------------------------------
def test_shard_factor_rule():
    assert zarr3.shard_factors((100, 100, 100), (32, 32, 32), 512) == (8, 8, 8)
    assert zarr3.shard_factors((100, 100), (64, 64), 512) == (16, 32)
    assert zarr3.shard_factors((3, 4), (10, 10), 512) == (3, 4)  # covers the array
    assert zarr3.shard_factors((100, 100), (1, 256), 64) == (64, 1)  # balanced in elements
    assert zarr3.shard_factors((7, 9, 5), (8, 8, 8), 1) == (1, 1, 1)
    assert zarr3.shard_factors((0, 1), (4, 5), 512) == (1, 1)  # an empty array
    for grid, chunks, m in [((50, 60, 70), (4, 8, 16), 100), ((1000,), (10,), 37), ((9, 9, 9, 9), (2, 3, 4, 5), 64)]:
        k = zarr3.shard_factors(grid, chunks, m)
        assert math.prod(k) <= m and all(1 <= a <= g for a, g in zip(k, grid))


def test_shard_options(domain, tmp_path):
    import tensorstore as ts
    import zarr

    store, datasets = domain
    case = corpus.BY_NAME["f64_3d_zstd_be"]
    dest = tmp_path / STEM
    _render(store, dest, shard_max_chunks=2, shard_shape={case.path: [1, 3, 2]})
    meta = _array_meta(dest, case)
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [16, 48, 32]
    other = _array_meta(dest, corpus.BY_NAME["i16_2d_deflate_le"])
    assert other["chunk_grid"]["configuration"]["chunk_shape"] == [64, 48]  # 2 chunks, along the shorter extent
    want = corpus.expected_array(case, datasets[case.name])
    np.testing.assert_array_equal(zarr.open_array(str(dest / "deep" / case.name), mode="r")[...], want)
    t = ts.open({"driver": "zarr3", "kvstore": f"file://{dest}/deep/{case.name}"}, read=True).result()
    np.testing.assert_array_equal(t.read().result(), want)


# -- listing and stat never read chunk data ------------------------------------------------------
@pytest.mark.parametrize("sharded_opt", [True, False])
def test_listing_and_stat_read_no_chunk_data(domain, sharded_opt):
    from polyfs.views.base import ViewContext

    store, _ = domain
    counting = corpus.CountingStore(store)
    ctx = ViewContext(Catalog(counting), ViewOptions(zarr_sharded=sharded_opt))
    model = ctx.catalog.load(corpus.DOMAIN)
    files = corpus.walk_files(zarr3.domain_node(model, ctx, STEM), [])
    assert len(files) > 50
    chunk_reads = [r for r in counting.reads if not r[1].endswith(".json") and "/polyfs" not in "/" + r[1]]
    # the pipeline sniff (16 bytes of one chunk per dataset) is the only chunk access, except the
    # documented measured transcodes: references as JSON, variable-length chunks in HSDS Blosc
    # frames or in codecs outside the Zarr v3 spec (bzip2)
    measured = {model.resolve(p).id for p in ("/refs", "/s_vlen_hsds", "/s_vlen_bzip2")}
    bad = [r for r in chunk_reads if not (r[0] == "get_range" and r[2] == 0 and r[3] <= 16)
           and not any(r[1].startswith(keys.dataset_prefix(did)) for did in measured)]
    assert not bad, bad[:5]
    # the sizes stat reported (from chunk sizes) are the sizes of the files as built
    for node, size in files:
        assert node.vfile().size == size, node.name
