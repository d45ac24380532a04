"""Tier 2: polyglot files (TIFF + HDF5 + Zarr v3 shard in one), materialized and read by
independent readers: tifffile, libtiff (tiffinfo, tiffcp), h5py, h5dump (HDF5 1.10),
pyfive, zarr-python and tensorstore. Every format's index is parsed by hand to prove the
chunk bytes are stored once and shared (polyglot_corpus.check_shared_bytes)."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tifffile

from polyfs.model import keys
from polyfs.model.catalog import Catalog
from polyfs.store import open_store
from polyfs.formats.polyglot import file as polyfile
from polyfs.formats.polyglot import view as polyglot
from polyfs.formats.tiff import tiles as tifftiles
from polyfs.formats.tiff import view as tiff
from polyfs.views.base import DirNode, FileNode, Node
from support import make_ctx, materialize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import polyglot_corpus as corpus  # noqa: E402

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
IDS = lambda c: c.path.strip("/").replace("/", "_")  # noqa: E731


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("polyglot")
    store = open_store(str(corpus.build_store(base / "store")))
    ctx, reader = make_ctx(store)
    model = ctx.catalog.load(corpus.DOMAIN)
    pnode = polyglot.domain_node(model, ctx, "poly")
    tnode = tiff.domain_node(model, ctx, "poly")
    return SimpleNamespace(store=store, ctx=ctx, reader=reader, model=model, pnode=pnode, tnode=tnode,
                           out=materialize(pnode, base / "polyglot", reader),
                           tout=materialize(tnode, base / "tiff", reader))


def at(env, case, ext: str) -> Path:
    return env.out / (case.path.lstrip("/") + ext)


def node_at(root: DirNode, rel: str) -> Node:
    node: Node = root
    for part in rel.split("/"):
        assert isinstance(node, DirNode)
        node = node.entries()[part]
    return node


def shard_rel(case) -> str:
    return case.path.lstrip("/") + ".zarr/c/" + "/".join("0" * len(case.shape))


def test_listing(env):
    got = sorted(str(p.relative_to(env.out)) for p in env.out.rglob("*") if p.is_file())
    want = []
    for c in corpus.POLYGLOT:
        rel = c.path.lstrip("/")
        want += [rel + ".tif", rel + ".h5", rel + ".zarr/zarr.json", shard_rel(c)]
    for alias, target in corpus.ALIASES.items():
        rel, zeros = alias.lstrip("/"), "/".join("0" * len(corpus.BY_PATH[target].shape))
        want += [rel + ".tif", rel + ".h5", rel + ".zarr/zarr.json", f"{rel}.zarr/c/{zeros}"]
    assert got == sorted(want)


def test_links_show_the_same_file(env):
    """A soft link and an extra hard link to polyglot datasets: the same bytes, a readable array."""
    import zarr

    for alias, target in corpus.ALIASES.items():
        a, t = alias.lstrip("/"), target.lstrip("/")
        assert (env.out / (a + ".tif")).read_bytes() == (env.out / (t + ".tif")).read_bytes()
        assert (env.tout / (a + ".tif")).read_bytes() == (env.out / (t + ".tif")).read_bytes()
        assert node_at(env.pnode, a + ".h5").vfile() is node_at(env.pnode, t + ".h5").vfile()
        z = zarr.open_array(str(env.out / (a + ".zarr")), mode="r")
        np.testing.assert_array_equal(z[...], corpus.make_array(corpus.BY_PATH[target]))


def test_every_name_is_one_virtual_file(env):
    """.tif, .h5, the shard c/0/0 and the TIFF view's .tif serve the very same VFile (the TIFF
    view's not when its uncompressed chunk planes are not whole KiB: it re-tiles those)."""
    for c in corpus.POLYGLOT:
        rel = c.path.lstrip("/")
        nodes = [node_at(env.pnode, rel + ".tif"), node_at(env.pnode, rel + ".h5"),
                 node_at(env.pnode, shard_rel(c)), node_at(env.tnode, rel + ".tif")]
        assert all(isinstance(n, FileNode) for n in nodes)
        ds = env.model.resolve(c.path)
        shared = tifftiles.served_as_stored(ds, env.ctx.catalog.pipeline(ds))
        if not shared:
            assert nodes[3].vfile() is not nodes[0].vfile(), c.path
            nodes = nodes[:3]
        vf = nodes[0].vfile()
        assert all(n.vfile() is vf for n in nodes), c.path
        assert len({n.size() for n in nodes}) == 1
        data = at(env, c, ".tif").read_bytes()
        assert at(env, c, ".h5").read_bytes() == data == (env.out / shard_rel(c)).read_bytes()
        if shared:
            assert (env.tout / (rel + ".tif")).read_bytes() == data
        else:
            np.testing.assert_array_equal(tifffile.imread(env.tout / (rel + ".tif")), tifffile.imread(at(env, c, ".tif")))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_tifffile_reads_it(env, case):
    arr = corpus.make_array(case)
    with tifffile.TiffFile(at(env, case, ".tif")) as t:
        assert t.is_ome and not t.is_bigtiff
        assert t.byteorder == (">" if case.np_dtype.byteorder == ">" else "<")
        assert len(t.pages) == int(np.prod(case.shape[:-2]))
        assert t.pages[0].compression == (50000 if case.filters else 1)
        assert t.pages[0].tilelength == case.chunks[-2] and t.pages[0].tilewidth == case.chunks[-1]
        s = t.series[0]
        assert s.shape == arr.shape
        np.testing.assert_array_equal(s.asarray(), arr)


@pytest.mark.skipif(shutil.which("tiffinfo") is None, reason="libtiff tools not installed")
@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_libtiff_reads_it(env, case, tmp_path):
    path = at(env, case, ".tif")
    res = subprocess.run(["tiffinfo", "-D", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "warning" not in res.stdout.lower() and "error" not in res.stdout.lower()
    out = tmp_path / "copy.tif"
    res = subprocess.run(["tiffcp", str(path), str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    arr = corpus.make_array(case)
    with tifffile.TiffFile(out) as t:
        got = np.stack([p.asarray() for p in t.pages])
    np.testing.assert_array_equal(got, arr.reshape(-1, *arr.shape[-2:]))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_h5py_reads_it(env, case):
    import h5py
    import hdf5plugin  # noqa: F401  (zstd filter)

    path = at(env, case, ".h5")
    assert path.read_bytes()[512:520] == HDF5_SIGNATURE
    with h5py.File(path, "r") as f:
        assert f.userblock_size == 512 and list(f) == [case.name]
        d = f[case.name]
        assert d.shape == case.shape and d.chunks == case.chunks and d.dtype == case.np_dtype
        assert d.fillvalue == (case.fill or 0)
        filters = [d.id.get_create_plist().get_filter(i)[0] for i in range(d.id.get_create_plist().get_nfilters())]
        assert filters == ([32015] if case.filters else [])
        np.testing.assert_array_equal(d[()], corpus.make_array(case))
        if case.path == "/u16be_zstd":
            np.testing.assert_array_equal(d.attrs["element_size_um"], [0.25, 0.5])


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="HDF5 tools not installed")
@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_h5dump_values(env, case):
    arr = corpus.make_array(case)
    got = corpus.h5dump_values(at(env, case, ".h5"), "/" + case.name, case.np_dtype)
    np.testing.assert_array_equal(got, arr.ravel().astype(np.float64))


@pytest.mark.parametrize("case", [c for c in corpus.POLYGLOT if c.hole is None], ids=IDS)
def test_pyfive_reads_it(env, case):
    import pyfive

    f = pyfive.File(io.BytesIO(at(env, case, ".h5").read_bytes()))  # pyfive 1.3: user blocks only from bytes
    np.testing.assert_array_equal(f[case.name][()], corpus.make_array(case))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_zarr_python_reads_the_shard(env, case):
    import zarr

    z = zarr.open_array(str(at(env, case, ".zarr")), mode="r")
    meta = json.loads((at(env, case, ".zarr") / "zarr.json").read_text())
    grid = case.grid
    assert tuple(meta["shape"]) == case.shape
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [g * c for g, c in zip(grid, case.chunks)]
    (shard,) = meta["codecs"]
    conf = shard["configuration"]
    assert shard["name"] == "sharding_indexed" and conf["index_location"] == "end"
    assert list(conf["chunk_shape"]) == list(case.chunks)
    inner = [c["name"] for c in conf["codecs"]]
    assert inner == (["bytes", "zstd"] if case.filters else ["bytes"])
    if case.np_dtype.itemsize > 1:
        assert conf["codecs"][0]["configuration"]["endian"] == ("big" if case.np_dtype.byteorder == ">" else "little")
    assert meta["fill_value"] == (case.fill or 0)
    np.testing.assert_array_equal(z[...], corpus.make_array(case))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_tensorstore_reads_the_shard(env, case):
    import tensorstore as ts

    t = ts.open({"driver": "zarr3", "kvstore": f"file://{at(env, case, '.zarr')}/"}, read=True).result()
    np.testing.assert_array_equal(t.read().result(), corpus.make_array(case))


@pytest.mark.parametrize("case", corpus.POLYGLOT, ids=IDS)
def test_chunk_bytes_are_stored_once_and_shared(env, case):
    corpus.check_shared_bytes(at(env, case, ".tif"), env.store, case)


def test_the_plan_says_where_everything_is(env):
    """PolyglotFile's own offsets agree with what the readers found."""
    c = corpus.BY_PATH["/u16be_zstd"]
    pf = polyfile.shared_file(env.model, env.model.resolve(c.path), None, c.path, env.ctx)
    data = at(env, c, ".tif").read_bytes()
    assert pf.size == len(data) and pf.index_at == pf.hdf5_end == len(data) - int(np.prod(c.grid)) * 16 - 4
    chunks = corpus.existing_chunks(env.store, c)
    assert list(pf.linear) == sorted(chunks)
    for lin, off, n in zip(pf.linear, pf.chunk_offsets, pf.chunk_sizes):
        assert data[off:off + n] == chunks[int(lin)]
    _, toffs, tcounts = corpus.tiff_tiles(at(env, c, ".tif"))
    np.testing.assert_array_equal(toffs, pf.tile_offsets)
    np.testing.assert_array_equal(tcounts, pf.tile_counts)
    assert pf.fill_at in set(toffs.ravel().tolist()) and pf.fill_at > pf.tiff_at > 512


def test_a_big_chunk_btree_is_packed_on_first_read(env):
    """650 chunks: the HDF5 B-tree is a producer (planning does not pack it), read correctly
    (h5py, h5dump, pyfive above) and equal to SingleDatasetFile.render's eager bytes."""
    from polyfs.vfile import Produced
    from polyfs.formats.hdf5.btree import LazyNodes
    from polyfs.formats.hdf5.single import SingleDatasetFile

    c = corpus.BY_PATH["/u8_raw_many"]
    ds = env.model.resolve(c.path)
    pf = polyfile.shared_file(env.model, ds, None, c.path, env.ctx)
    lazy = [s for s in pf.vfile.segments if isinstance(s, Produced) and isinstance(s.producer, LazyNodes)]
    assert len(lazy) == 1
    h5 = SingleDatasetFile(ds, env.ctx.catalog.pipeline(ds), pf.linear, name=c.name)
    eager = h5.render(pf.chunk_offsets, pf.chunk_sizes, pf.hdf5_end)
    data = at(env, c, ".h5").read_bytes()
    assert data[512:512 + len(eager)] == eager


def test_other_datasets_keep_their_tiff_view(env):
    """Deflate and 3-D-chunked images are plain TIFFs (no HDF5 inside), 1-D datasets no file."""
    for path in ("/u16_deflate", "/cube_zstd"):
        c = corpus.BY_PATH[path]
        f = env.tout / (path.lstrip("/") + ".tif")
        data = f.read_bytes()
        assert HDF5_SIGNATURE not in data[:4096]
        with tifffile.TiffFile(f) as t:
            np.testing.assert_array_equal(t.series[0].asarray(), corpus.make_array(c))
        assert polyfile.shared_file(env.model, env.model.resolve(path), None, path, env.ctx) is None
    assert not (env.tout / "line_zstd.tif").exists()
    ds = env.model.resolve("/u16_deflate")
    assert "not zstd or uncompressed" in polyfile.why_not(ds, env.ctx.catalog.pipeline(ds))
    ds = env.model.resolve("/cube_zstd")
    assert "not TIFF tiles" in polyfile.why_not(ds, env.ctx.catalog.pipeline(ds))
    from polyfs.errors import UnsupportedType

    with pytest.raises(UnsupportedType, match="u16_deflate"):
        polyfile.plan_file(ds := env.model.resolve("/u16_deflate"), None, "x", "/lab/poly.h5/u16_deflate",
                           env.ctx.catalog.chunk_index(ds), env.ctx.catalog.pipeline(ds))


def test_listing_and_stat_read_no_chunk_data(env):
    counting = corpus_counting(env.store)
    ctx, _ = make_ctx(counting)
    model = ctx.catalog.load(corpus.DOMAIN)
    files: list[tuple[FileNode, int]] = []

    def walk(node: DirNode) -> None:
        for child in node.entries().values():
            walk(child) if isinstance(child, DirNode) else files.append((child, child.size()))

    walk(polyglot.domain_node(model, ctx, "poly"))
    walk(tiff.domain_node(model, ctx, "poly"))
    images = len([c for c in corpus.CASES if len(c.shape) > 1])
    assert len(files) == 4 * (len(corpus.POLYGLOT) + len(corpus.ALIASES)) + images + len(corpus.ALIASES)
    chunk_reads = [r for r in counting.reads if not r[1].endswith(".json") and "/polyfs" not in "/" + r[1]]
    # the pipeline sniff (16 bytes of one chunk per dataset) is the only chunk access; the deflate
    # TIFF view of /u16_deflate is zero-copy too, the zstd cube is transcoded (it measures its tiles)
    cube = keys.dataset_prefix(model.resolve("/cube_zstd").id)
    bad = [r for r in chunk_reads if not (r[0] == "get_range" and r[2] == 0 and r[3] <= 16)
           and not r[1].startswith(cube)]
    assert not bad, bad[:5]
    for node, size in files:
        assert node.vfile().size == size


def corpus_counting(store):
    class Counting:
        def __init__(self, inner) -> None:
            self._inner = inner
            self.reads: list[tuple] = []

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def get(self, key, *a, **kw):
            self.reads.append(("get", key))
            return self._inner.get(key, *a, **kw)

        def get_range(self, key, start, length, *a, **kw):
            self.reads.append(("get_range", key, start, length))
            return self._inner.get_range(key, start, length, *a, **kw)

    return Counting(store)


def test_a_new_chunk_index_makes_a_new_plan(env):
    """The shared plan is keyed by the model and chunk index objects: a re-listing re-plans."""
    c = corpus.BY_PATH["/f32le_raw"]
    ds = env.model.resolve(c.path)
    a = polyfile.shared_file(env.model, ds, None, c.path, env.ctx)
    assert polyfile.shared_file(env.model, ds, None, c.path, env.ctx) is a
    ctx2, _ = make_ctx(env.store)
    b = polyfile.shared_file(env.model, ds, None, c.path, ctx2)  # another catalog: its own plan
    assert b is not a and b.size == a.size


def test_catalog_of_a_fresh_store_lists_the_same(env, tmp_path):
    """The view is a pure function of the model and chunk sizes: two catalogs, same bytes."""
    ctx2, reader2 = make_ctx(Catalog(env.store).store)
    model2 = ctx2.catalog.load(corpus.DOMAIN)
    out2 = materialize(polyglot.domain_node(model2, ctx2, "poly"), tmp_path / "again", reader2)
    for c in corpus.POLYGLOT:
        rel = c.path.lstrip("/") + ".tif"
        assert (out2 / rel).read_bytes() == (env.out / rel).read_bytes()


@pytest.mark.skipif(shutil.which("gdalinfo") is None, reason="GDAL not installed")
def test_gdal_reads_both_faces(env, tmp_path):
    """GDAL's GTiff and HDF5 drivers give the checksum of a tifffile-written reference."""
    import hdf5plugin

    c = corpus.BY_PATH["/u16be_zstd"]
    ref = tmp_path / "ref.tif"
    tifffile.imwrite(ref, corpus.make_array(c))
    envvars = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)

    def checksum(target: str) -> list[str]:
        res = subprocess.run(["gdalinfo", "-checksum", target], capture_output=True, text=True, timeout=120,
                             env=envvars)
        assert res.returncode == 0 and "ERROR" not in res.stderr, res.stderr
        return [line.strip() for line in res.stdout.splitlines() if "Checksum=" in line]

    want = checksum(str(ref))
    assert want and checksum(str(at(env, c, ".tif"))) == want
    assert checksum(f'HDF5:"{at(env, c, ".h5")}"://{c.name}') == want
