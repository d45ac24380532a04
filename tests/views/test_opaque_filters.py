"""Tier 2: filters outside the translation table are carried, never refused (issue 12, item 4).

Sources written by h5py and hdf5plugin with LZF+shuffle, LZ4, Bitshuffle (lz4
and zstd), Zfp, Blosc2 and szip, and a file whose pipeline names filter 39999
(no one has it), are imported. Their chunks are stored byte for byte with the
whole original pipeline; the HDF5 view serves them unchanged (``read_direct_chunk``
through the view equals the original's, h5dump shows the same filters and
parameters, ``h5diff -r`` is clean); the Zarr and N5 views decode them through
HDF5's own filters and are read by zarr-python, tensorstore and z5py; filter
39999 leaves that one dataset out of the other views (one log line) and ``polyfs
info`` says why.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

import corpus
from polyfs.formats.hdf5 import view as hdf5
from polyfs.formats.n5 import view as n5
from polyfs.formats.tiff import view as tiff
from polyfs.formats.zarr import view as zarr3
from polyfs.importers import import_source
from polyfs.inspect import info_text
from polyfs.store import open_store
from support import make_ctx, materialize

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)

# name -> (dtype, h5py create_dataset keywords): every one is outside polyfs's table
OPAQUE = {
    "lzf_shuffle": ("<f4", dict(compression="lzf", shuffle=True)),
    "lz4": ("<i4", dict(hdf5plugin.LZ4())),
    "bitshuffle_lz4": ("<u2", dict(hdf5plugin.Bitshuffle(cname="lz4"))),
    "bitshuffle_zstd": (">i8", dict(hdf5plugin.Bitshuffle(cname="zstd"))),
    "zfp": ("<f8", dict(hdf5plugin.Zfp(reversible=True))),
    "zfp_rate": ("<f4", dict(hdf5plugin.Zfp(rate=12))),  # lossy: the view gives what HDF5 gives
    "blosc2": ("<f4", dict(hdf5plugin.Blosc2(cname="zstd", clevel=5, filters=hdf5plugin.Blosc2.BITSHUFFLE))),
    "szip": ("<i2", dict(compression="szip")),
}
SHAPE, CHUNKS = (50, 70), (16, 32)  # edge chunks on both axes


def make_opaque_hdf5(dest: Path) -> Path:
    corpus.h5plugins()  # the in-process filters, not HDF5_PLUGIN_PATH's copies
    p = Path(dest) / "opaque.h5"
    ramp = np.add.outer(np.arange(SHAPE[0]), np.arange(SHAPE[1]) * 3) % 1000
    with h5py.File(p, "w") as f:
        for i, (name, (dt, kw)) in enumerate(OPAQUE.items()):
            data = (ramp + i).astype(dt) if np.dtype(dt).kind != "f" else (np.sin(ramp / 50.0) * 100).astype(dt)
            f.create_dataset(name, data=data, chunks=CHUNKS, **kw)
        f["nested/lz4"] = f["lz4"]  # a hard link: one dataset, two paths
    return p


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("opaque")
    srcs = {"opaque": make_opaque_hdf5(base), "unknown": corpus.make_unknown_filter_hdf5(base)}
    url = str(base / "store")
    out = {}
    for key, src in srcs.items():
        domain = import_source(src, url, progress=False)
        ctx, reader = make_ctx(open_store(url))
        model = ctx.catalog.load(domain)
        out[key] = {
            "src": src, "domain": domain, "ctx": ctx, "model": model,
            "h5": materialize(hdf5.domain_node(model, ctx, f"{key}.h5"), base / "hdf5" / f"{key}.h5", reader),
            "zarr": materialize(zarr3.domain_node(model, ctx, key), base / "zarr" / f"{key}.zarr", reader),
            "n5": materialize(n5.domain_node(model, ctx, key), base / "n5" / f"{key}.n5", reader),
            "tiff": materialize(tiff.domain_node(model, ctx, key), base / "tiff" / key, reader),
        }
    out["url"] = url
    return out


def run_h5diff(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["h5diff", *map(str, args)], capture_output=True, text=True, env=ENV, timeout=300)


def _filters(d: h5py.Dataset) -> list[tuple]:
    plist = d.id.get_create_plist()
    return [plist.get_filter(i) for i in range(plist.get_nfilters())]


def _chunks(d: h5py.Dataset) -> dict[tuple, tuple[int, bytes]]:
    out: dict[tuple, tuple[int, bytes]] = {}
    d.id.chunk_iter(lambda info: out.__setitem__(tuple(info.chunk_offset), None))
    return {off: (lambda m, b: (m, bytes(b)))(*d.id.read_direct_chunk(off)) for off in out}


@pytest.mark.parametrize("key,path", [("opaque", n) for n in OPAQUE] + [("unknown", "/data/odd")])
def test_chunks_are_kept_byte_for_byte_and_served_unchanged(built, key, path):
    b = built[key]
    ds = b["model"].resolve(path)
    pipe = b["ctx"].catalog.declared_pipeline(ds)
    assert pipe.opaque, path
    with h5py.File(b["src"], "r") as src, h5py.File(b["h5"], "r") as view:
        want, got = _chunks(src[path]), _chunks(view[path])
        assert want and got == want  # same chunks, same bytes, filter masks 0
        # the same filter ids and parameters; opaque ones also with the same flags and names
        exact = [f if f[0] not in (1, 2, 3) else f[::2] for f in _filters(src[path])]
        assert [f if f[0] not in (1, 2, 3) else f[::2] for f in _filters(view[path])] == exact
        idx = b["ctx"].catalog.chunk_index(ds)
        for off, (_, data) in want.items():
            assert b["ctx"].catalog.store.get(idx.key_of(tuple(o // c for o, c in zip(off, ds.chunks)))) == data


def test_hdf5_view_reads_and_h5diff_is_clean(built):
    b = built["opaque"]
    with h5py.File(b["src"], "r") as src, h5py.File(b["h5"], "r") as view:
        for name in OPAQUE:
            np.testing.assert_array_equal(view[name][...], src[name][...])
        assert view["nested/lz4"].id == view["lz4"].id or np.array_equal(view["nested/lz4"][...], src["lz4"][...])
    # Debian's h5diff decodes everything hdf5plugin's PLUGIN_PATH has; LZF lives in h5py only
    # (h5diff cannot read it in the original either: compared with h5py above)
    res = run_h5diff("-r", "--exclude-path", "/lzf_shuffle", b["src"], b["h5"])
    assert res.returncode == 0 and "not comparable" not in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("dataset: ") == len(OPAQUE)  # every other dataset, /nested/lz4 included


def test_h5dump_shows_the_unknown_filter_with_its_parameters(built):
    b = built["unknown"]
    res = subprocess.run(["h5dump", "-H", "-p", "-d", "/data/odd", str(b["h5"])], capture_output=True, text=True,
                         env=ENV, timeout=120)
    orig = subprocess.run(["h5dump", "-H", "-p", "-d", "/data/odd", str(b["src"])], capture_output=True,
                          text=True, env=ENV, timeout=120)

    def filters(text: str) -> str:
        m = re.search(r"FILTERS \{(.*?)\n\s*\}\n\s*FILLVALUE", text, re.S)
        assert m, text
        return " ".join(m.group(1).split())

    assert "FILTER_ID 39999" in res.stdout and "PARAMS { 0 }" in res.stdout, res.stdout
    assert filters(res.stdout) == filters(orig.stdout)
    with h5py.File(b["h5"], "r") as view:  # the rest of the file reads; the dataset is there
        np.testing.assert_array_equal(view["fine"][...], np.arange(10))
        assert view["data/odd"].shape == (64,) and _filters(view["data/odd"])[0][0] == 39999


@pytest.mark.parametrize("name", sorted(OPAQUE))
def test_zarr_view_decodes_through_hdf5(built, name):
    import tensorstore as ts
    import zarr

    b = built["opaque"]
    with h5py.File(b["src"], "r") as src:
        want = src[name][...]
    root = b["zarr"]
    got = zarr.open_group(str(root), mode="r")[name][...]
    np.testing.assert_array_equal(got, want)
    t = ts.open({"driver": "zarr3", "kvstore": f"file://{root}/{name}"}, read=True).result()
    np.testing.assert_array_equal(t.read().result(), want)


@pytest.mark.parametrize("name", sorted(OPAQUE))
def test_n5_view_decodes_through_hdf5(built, name):
    import tensorstore as ts
    import z5py

    b = built["opaque"]
    with h5py.File(b["src"], "r") as src:
        want = src[name][...]
    root = b["n5"]
    np.testing.assert_array_equal(z5py.File(str(root), "r")[name][:], want)
    t = ts.open({"driver": "n5", "kvstore": f"file://{root}/{name}"}, read=True).result()
    np.testing.assert_array_equal(t.read().result(), want.T)


@pytest.mark.parametrize("name", sorted(OPAQUE))
def test_tiff_view_decodes_through_hdf5(built, name):
    import tifffile

    b = built["opaque"]
    with h5py.File(b["src"], "r") as src:
        want = src[name][...]
    with tifffile.TiffFile(b["tiff"] / f"{name}.tif") as tif:
        got = tif.asarray()
    np.testing.assert_array_equal(got, want.astype(want.dtype.newbyteorder("=")))


def test_undecodable_dataset_is_left_out_of_other_views_only(built, caplog):
    import zarr
    import z5py

    b = built["unknown"]
    g = zarr.open_group(str(b["zarr"]), mode="r")
    np.testing.assert_array_equal(g["fine"][...], np.arange(10))
    assert "data" in g and "odd" not in g["data"]
    f = z5py.File(str(b["n5"]), "r")
    np.testing.assert_array_equal(f["fine"][:], np.arange(10))
    assert not (b["n5"] / "data" / "odd").exists()
    assert not (b["tiff"] / "data" / "odd.tif").exists()
    # one log line per view and dataset, however often the tree is built again
    ctx, _ = make_ctx(open_store(built["url"]))
    model = ctx.catalog.load(b["domain"])
    with caplog.at_level("WARNING"):
        for _ in range(2):
            zarr3.domain_node(model, ctx, "u").entries()["data"].entries()
    lines = [r.getMessage() for r in caplog.records if "39999" in r.getMessage()]
    assert len(lines) <= 1 and all("/data/odd" in line for line in lines)


def test_info_says_which_views_show_it(built):
    text = info_text(built["url"], built["unknown"]["domain"])
    block = text.split("/data/odd")[1].split("/fine")[0]
    assert "(39999)[0]" in block  # the codec line: the filter and its parameters
    views = [line for line in block.splitlines() if line.strip().startswith("views")][0]
    assert "hdf5 zero-copy" in views and "zarr - (filter" in views and "no filter 39999" in views
    text = info_text(built["url"], built["opaque"]["domain"])
    assert "zarr transcoded (lzf (32000): no Zarr codec)" in text
