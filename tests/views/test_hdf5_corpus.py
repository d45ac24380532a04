"""Tier 2: HDF5 files imported into the store come back out of the HDF5 view the same.

Each file of the HDF5 corpus (tests/corpus.py: every link kind, committed
type, attribute type, dataset type, filter and layout) is imported, the view
synthesized and materialized, then compared with the original by independent
tools: ``h5diff -r`` (HDF5 1.10) reports no difference, h5py reads every
object, value and attribute equal, h5dump -H and h5ls -r list the same tree,
and pyfive reads from the view every dataset it reads from the original.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import warnings

import h5py
import hdf5plugin
import numpy as np
import pytest

import corpus
from polyfs.importers import import_source
from polyfs.store import open_store
from polyfs.formats.hdf5 import view as hdf5
from support import make_ctx, materialize

ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
_ORDER = re.compile(r"(H5T_STD_[IU]\d+|H5T_IEEE_F\d+)(BE|LE)")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """[(original, view)] for every corpus file, plus the store."""
    base = tmp_path_factory.mktemp("h5corpus")
    sources = corpus.make_hdf5_corpus(base / "src")
    store_url = str(base / "store")
    out = []
    for src in sources:
        domain = import_source(src, store_url, progress=False)
        store = open_store(store_url)
        ctx, reader = make_ctx(store)
        node = hdf5.domain_node(ctx.catalog.load(domain), ctx, src.name)
        view = materialize(node, base / "view" / src.name, reader)
        out.append((src, view))
    # the external storage file of filters.h5 sits beside its source only
    return out


def _names(pairs):
    return [p[0].name for p in pairs]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, env=ENV, timeout=300)


def test_corpus_is_all_there(pairs):
    assert sorted(_names(pairs)) == ["filters.h5", "structure.h5", "types.h5"]


def test_h5diff_reports_no_difference(pairs, tmp_path):
    for src, view in pairs:
        res = run("h5diff", "-r", "-c", str(src), str(view))
        assert res.returncode == 0, f"{src.name}: {res.stdout[-3000:]}{res.stderr[-2000:]}"
        counts = [int(n) for n in re.findall(r"^(\d+) differences? found", res.stdout, re.M)]
        assert counts and not any(counts), src.name
        # what h5diff cannot compare is exactly what it cannot compare between the original and a copy of it
        copy = tmp_path / src.name
        shutil.copy(src, copy)
        same = run("h5diff", "-r", "-c", str(src), str(copy))
        assert sorted(re.findall(r"^Not comparable.*$", res.stdout, re.M)) == \
            sorted(re.findall(r"^Not comparable.*$", same.stdout, re.M)), src.name
        assert res.stdout.count("dataset: <") >= same.stdout.count("dataset: <")


def test_h5py_reads_everything_equal(pairs):
    for src, view in pairs:
        a, b = corpus.hdf5_snapshot(src), corpus.hdf5_snapshot(view)
        corpus.assert_snapshots_equal(a, b, src.name)
        assert len(b["objects"]) >= 7


def _norm_dump(text: str) -> list[str]:
    lines = text.splitlines()[1:]  # the first line names the file
    return [_ORDER.sub(r"\1", line) for line in lines]


def test_h5dump_header_and_h5ls_list_the_same_tree(pairs):
    """Same groups, datasets, links, types, shapes and attributes; only the byte
    order of data the importer re-encoded (big-endian is polyfs's default) may differ."""
    for src, view in pairs:
        a, b = run("h5dump", "-H", str(src)), run("h5dump", "-H", str(view))
        assert b.returncode == 0 and "h5dump error" not in b.stderr, b.stderr
        assert _norm_dump(a.stdout) == _norm_dump(b.stdout), src.name
        assert len(b.stdout.splitlines()) > 50
        la, lb = run("h5ls", "-r", str(src)), run("h5ls", "-r", str(view))
        assert la.stdout.splitlines() == lb.stdout.splitlines(), src.name


def test_pyfive_reads_what_it_reads_from_the_original(pairs):
    """pyfive 1.3 cannot open a group holding an external link (structure.h5's
    root), read zstd/blosc/bzip2/lz4, missing chunks, committed or array types;
    every dataset it reads from the original it must read from the view, equal
    to what h5py reads from the original (pyfive's own reading of the original
    can be wrong: it ignores external storage). The view goes in as bytes
    (pyfive drops the user-block offset when it reopens a posix file by name)."""
    import pyfive

    compared = 0
    for src, view in pairs:
        try:
            orig = pyfive.File(str(src))
        except (AssertionError, NotImplementedError):
            with pytest.raises((AssertionError, NotImplementedError)):
                pyfive.File(io.BytesIO(view.read_bytes()))
            continue
        mine = pyfive.File(io.BytesIO(view.read_bytes()))
        with h5py.File(src, "r") as h5:
            names = [n for n in h5 if isinstance(h5.get(n, getlink=True), h5py.HardLink)
                     and isinstance(h5[n], h5py.Dataset) and h5[n].shape is not None]
            for name in names:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        orig[name][()]
                    except Exception:  # noqa: BLE001 - whatever pyfive cannot read from the original
                        continue
                    try:
                        got = mine[name][()]
                    except (ValueError, NotImplementedError):
                        # allowed only where the import changed how the data is stored (the
                        # model has no per-chunk filter mask, and contiguous data is chunked)
                        with h5py.File(view, "r") as v:
                            assert _stored_differently(h5[name], v[name]), name
                        continue
                want = h5[name][()]
                where = f"{src.name}/{name}"
                if isinstance(want, np.ndarray) and want.dtype.kind in "biuf" and not want.dtype.names:
                    assert np.array_equal(np.asarray(got).astype(want.dtype), want,
                                          equal_nan=want.dtype.kind == "f"), where
                elif isinstance(want, np.ndarray) and want.dtype.names and all(
                        want.dtype[n].kind in "biufS" for n in want.dtype.names):
                    assert [tuple(_plain(v) for v in e) for e in np.asarray(got).reshape(-1).tolist()] == \
                        [tuple(_plain(v) for v in e) for e in want.reshape(-1).tolist()], where
                elif isinstance(want, np.ndarray) and want.dtype.kind in "SV" and not want.dtype.names:
                    assert np.asarray(got).tobytes() == want.tobytes(), where
                elif isinstance(want, np.ndarray) and h5py.check_string_dtype(want.dtype):
                    assert [_text(x) for x in np.asarray(got).reshape(-1)] == \
                        [_text(x) for x in want.reshape(-1)], where
                elif isinstance(want, (bytes, str)):
                    assert _text(got) == _text(want), where
                elif isinstance(want, np.generic):
                    assert np.asarray(got).item() == want.item(), where
                else:
                    continue  # references, vlen sequences: pyfive's objects, not values
                compared += 1
    assert compared >= 15


def _stored_differently(orig: h5py.Dataset, view: h5py.Dataset) -> bool:
    if orig.chunks is None:
        return view.chunks is not None
    return any(orig.id.get_chunk_info(i).filter_mask for i in range(orig.id.get_num_chunks()))


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _plain(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def test_zero_copy_for_every_chunked_dataset(pairs, tmp_path_factory):
    """Every chunk h5py finds in the view is byte for byte a chunk object of the store."""
    src, view = next(p for p in pairs if p[0].name == "filters.h5")
    store = open_store(str(view.parent.parent / "store"))
    data = view.read_bytes()
    stored = {o.key: o.size for o in store.list("db/")}
    checked = 0
    with h5py.File(view, "r") as f:
        for name, d in f.items():
            if not isinstance(d, h5py.Dataset) or d.chunks is None:
                continue
            for i in range(d.id.get_num_chunks()):
                info = d.id.get_chunk_info(i)
                blob = data[info.byte_offset:info.byte_offset + info.size]
                coords = "_".join(str(o // c) for o, c in zip(info.chunk_offset, d.chunks))
                keys = [k for k in stored if k.endswith("/" + coords) and stored[k] == info.size]
                assert any(store.get(k) == blob for k in keys), f"{name} chunk {coords}"
                checked += 1
    assert checked >= 40
