"""Corrupted store objects: one bad object fails only its own domain or dataset (issue 13).

A store holds domain ``/a.h5`` (datasets ``x`` deflate and ``y`` zstd, a group attribute)
and domain ``/b.h5`` (dataset ``z`` deflate). Every file of every view is read once from
the pristine store (the golden copy). Then one object is damaged (truncated, garbage,
JSON of the wrong types or missing keys, a chunk of the wrong size or undecodable, polyfs's
derived data) and every file of every view is read again through the operations (tier 2)
and through view trees materialized with ``tests/support.py``:

- files of the other domain (and, for a chunk, the files that do not hold it) read exactly
  as before; damaged derived data changes nothing at all;
- the damaged domain or dataset fails with an errno from polyfs's error tree: nothing
  unexpected reaches the operations' catch-all (no traceback in the log);
- ``polyfs check`` (``--deep`` for chunks) reports the damage.

A tier-3 test mounts a damaged store for real.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from fuzzkit import DELETE, JsonEdit, LogRecords, Unexpected, budget, json_values, note_event
from hypothesis import example, given
from hypothesis import strategies as st
from support import make_ctx, read_node
from writeharness import FS, FsError

from polyfs.check import check_store
from polyfs.codecs.registry import DEFLATE, ZSTD, Filter
from polyfs.errors import PolyfsError
from polyfs.model import keys
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.model.schema import Shape
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store
from polyfs.views.base import DirNode, FileNode
from polyfs.views.root import build_root

DOMAINS = {"/a.h5": {"x": DEFLATE, "y": ZSTD}, "/b.h5": {"z": DEFLATE}}
TARGETS = ("domain", "group", "dataset", "chunk", "derived")
DAMAGES = ("truncate", "garbage", "empty", "json-types", "json-missing", "chunk-size", "chunk-undecodable")


def build_store(url: str) -> dict[str, dict[str, str]]:
    """The two domains; returns domain -> {"root": id, dataset name -> id}."""
    store = open_store(url, create=True)
    ids: dict[str, dict[str, str]] = {}
    for dom, datasets in DOMAINS.items():
        with DomainWriter(Catalog(store), dom) as w:
            w.set_attr_array(w.root, "title", T.StringType(None, "utf8", "nullterm"),
                             np.array(f"domain {dom}", dtype=object))
            ids[dom] = {"root": w.root_id}
            for i, (name, fid) in enumerate(datasets.items()):
                level = (6,) if fid == DEFLATE else (3,)
                ds = w.add_dataset(w.root, name, T.IntType(2, False, ">"), Shape("simple", (32, 48)), (16, 16),
                                   (Filter(fid, level),))
                arr = ((np.add.outer(np.arange(32), np.arange(48)) * (i + 3)) % 1000).astype(">u2")
                w.write_array(ds, arr)
                ids[dom][name] = ds.id
    persist_listings(store)
    return ids


def copy_store(src: str) -> str:
    """A copy of the directory store ``src`` (a new directory beside it)."""
    dest = tempfile.mkdtemp(prefix="corrupt-", dir=str(Path(src).parent))
    shutil.copytree(src, dest, dirs_exist_ok=True)
    persist_listings(open_store(dest))  # a copy's directories are new: their listings are saved anew
    return dest


def persist_listings(store) -> None:
    """Save every dataset's chunk listing (derived data a mount reads before listing the store)."""
    catalog = Catalog(store)
    for dom in DOMAINS:
        catalog.prefetch_chunk_indexes(catalog.load(dom).datasets.values())


# -- reading a whole mount ----------------------------------------------------------------------
def read_all(fs: FS, path: str = "") -> dict[str, bytes | int]:
    """Every file below ``path`` -> its bytes, or the errno reading (or listing) it gave."""
    out: dict[str, bytes | int] = {}
    try:
        names = fs.ls(path)
    except FsError as exc:
        return {path + "/": exc.errno}
    for name in names:
        full = f"{path}/{name}" if path else name
        try:
            is_dir = fs.is_dir(full)
        except FsError as exc:
            out[full] = exc.errno
            continue
        if is_dir:
            out.update(read_all(fs, full))
            continue
        try:
            out[full] = fs.read_file(full)
        except FsError as exc:
            out[full] = exc.errno
    return out


def read_tree(url: str) -> dict[str, bytes | str]:
    """The same through view trees built with ``tests/support.py`` (no operations): bytes, or the
    name of the PolyfsError raised; any other exception propagates."""
    ctx, reader = make_ctx(open_store(url, read_only=True))
    root = build_root(ctx, ttl=0.0)
    out: dict[str, bytes | str] = {}

    def walk(node, path: str) -> None:
        try:
            if isinstance(node, FileNode):
                out[path] = read_node(node, reader)
                return
            assert isinstance(node, DirNode)
            children = node.entries()
        except PolyfsError as exc:
            out[path] = type(exc).__name__
            return
        for name, child in children.items():
            walk(child, f"{path}/{name}" if path else name)

    walk(root, "")
    return out


def domain_of(path: str) -> str:
    """``zarr/a.zarr/x/...`` -> ``/a.h5`` (every view spells the domain as its second component)."""
    parts = path.split("/")
    stem = parts[1].split(".")[0] if len(parts) > 1 else ""
    return f"/{stem}.h5"


def dataset_of(path: str) -> str | None:
    """The dataset a file belongs to (None: the whole-domain HDF5 file, or a domain-level file)."""
    parts = path.split("/")
    if parts[0] == "hdf5" or len(parts) < 3:
        return None
    return parts[2].split(".")[0]


# -- damage ---------------------------------------------------------------------------------------
def key_of(world: "StoreWorld", target: str, dom: str, name: str) -> str:
    ids = world.ids[dom]
    if target == "domain":
        return keys.domain_key(dom)
    if target == "group":
        return keys.group_key(ids["root"])
    if target == "dataset":
        return keys.dataset_key(ids[name])
    if target == "chunk":
        return keys.chunk_key(ids[name], (1, 1))
    return keys.crc_table_key(ids[name]) if DOMAINS[dom][name] == DEFLATE else keys.chunk_index_key(ids[name])


def damage(blob: bytes, how: str, cut: int, noise: bytes, edit: JsonEdit) -> bytes:
    if how == "truncate":
        return blob[:cut % max(1, len(blob))]
    if how == "garbage":
        return noise or b"\x00"
    if how == "empty":
        return b""
    if how == "chunk-size":
        return blob + noise if cut % 2 else blob[:-1 - cut % max(1, len(blob) - 1)]
    if how == "chunk-undecodable":
        return bytes(b ^ 0x5A for b in blob)
    try:
        doc = json.loads(blob)
    except ValueError:
        return blob[::-1]  # a binary object: reversed
    if how == "json-missing":
        edit = JsonEdit(edit.path[:1], DELETE)
    return json.dumps(edit.apply(doc), allow_nan=True).encode()


class StoreWorld:
    def __init__(self, base: Path) -> None:
        self.url = str(base / "pristine")
        self.ids = build_store(self.url)
        reader = FS(self.url, read_only=True)
        self.golden = read_all(reader)
        again = read_all(FS(self.url, read_only=True))
        assert again == self.golden, "two mounts of one store read differently"
        self.golden_tree = read_tree(self.url)
        assert not any(isinstance(v, int) for v in self.golden.values()), "the pristine store does not read"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> StoreWorld:
    return StoreWorld(tmp_path_factory.mktemp("fuzzstore"))


def expect(world: StoreWorld, got: dict, golden: dict, target: str, dom: str, name: str, key: str,
           failed: type | tuple) -> None:
    """What may differ after damaging ``key`` (the ``target`` object of ``dom``/``name``)."""
    for path, want in golden.items():
        have = got.get(path)
        if target == "derived" or domain_of(path) != dom:
            assert have == want, f"{path} changed after damaging {key} ({target} of {dom})"
        elif target == "chunk" and dataset_of(path) not in (None, name):
            assert have == want, f"{path} changed after damaging the chunk {key} of {name}"
        elif have is not None and not isinstance(have, bytes):
            assert isinstance(have, failed), f"{path}: {have!r} after damaging {key}"
    extra = sorted(set(got) - set(golden))
    if target == "derived" or target == "chunk":
        assert not extra, f"new files after damaging {key}: {extra[:5]}"


def corrupted(world: StoreWorld, target: str, how: str, dom: str, name: str, cut: int, noise: bytes,
              edit: JsonEdit) -> tuple[str, str]:
    url = copy_store(world.url)
    store = open_store(url)
    key = key_of(world, target, dom, name)
    store.put(key, damage(store.get(key), how, cut, noise, edit))
    return url, key


@budget(16)
@given(target=st.sampled_from(TARGETS), how=st.sampled_from(DAMAGES),
       where=st.sampled_from([("/a.h5", "x"), ("/a.h5", "y"), ("/b.h5", "z")]),
       cut=st.integers(0, 4000), noise=st.binary(max_size=64),
       edit=st.builds(JsonEdit, st.lists(st.integers(0, 20), min_size=1, max_size=3).map(tuple), json_values()))
@example(target="dataset", how="json-types", where=("/a.h5", "x"), cut=0, noise=b"",
         edit=JsonEdit((4,), "banana"))
@example(target="chunk", how="chunk-undecodable", where=("/a.h5", "y"), cut=0, noise=b"", edit=JsonEdit((0,), 0))
@example(target="derived", how="garbage", where=("/a.h5", "x"), cut=0, noise=b"\x01" * 12, edit=JsonEdit((0,), 0))
@example(target="derived", how="empty", where=("/a.h5", "y"), cut=0, noise=b"", edit=JsonEdit((0,), 0))
# regressions found by this test: a 2-byte deflate chunk (a negative range read), a deflate chunk
# that does not inflate (zlib.error out of the CRC lookup), .domain.json fields of the wrong type
@example(target="chunk", how="truncate", where=("/a.h5", "x"), cut=2, noise=b"", edit=JsonEdit((0,), 0))
@example(target="chunk", how="chunk-undecodable", where=("/b.h5", "z"), cut=0, noise=b"", edit=JsonEdit((0,), 0))
@example(target="domain", how="json-types", where=("/a.h5", "x"), cut=0, noise=b"", edit=JsonEdit((0,), 2702))
@example(target="domain", how="json-types", where=("/a.h5", "x"), cut=0, noise=b"", edit=JsonEdit((4,), 5))
@example(target="dataset", how="json-types", where=("/a.h5", "x"), cut=0, noise=b"",
         edit=JsonEdit((11, 0, 19), None))  # a null in creationProperties.filters
def test_corrupt_object(world, target, how, where, cut, noise, edit) -> None:
    """One damaged object: the rest of the mount reads exactly as before."""
    dom, name = where
    url, key = corrupted(world, target, how, dom, name, cut, noise, edit)
    try:
        corrupt_object_reads(world, url, key, target, how, dom, name)
    finally:
        shutil.rmtree(url, ignore_errors=True)


def corrupt_object_reads(world: StoreWorld, url: str, key: str, target: str, how: str, dom: str, name: str) -> None:
    """The checks of :func:`test_corrupt_object` on the damaged copy at ``url``."""
    note_event(f"{target}/{how}")
    fs = FS(url, read_only=True)
    guard = Unexpected(fs.ops)
    with LogRecords() as logs:
        got = read_all(fs)
    guard.check(f"reading the mount after damaging {key} ({how})")
    expect(world, got, world.golden, target, dom, name, key, int)
    codes = {v for v in got.values() if isinstance(v, int)}
    assert codes <= {errno.EIO, errno.EINVAL, errno.ENOENT, errno.EOPNOTSUPP}, codes
    if codes:
        note_event(f"errno {sorted(errno.errorcode[c] for c in codes)}")
    assert not logs.tracebacks(), "a traceback reached the log"
    tree = read_tree(url)
    expect(world, tree, world.golden_tree, target, dom, name, key, str)


# -- polyfs check -------------------------------------------------------------------------------
def _set(key: str, value) -> Callable[[bytes], bytes]:
    """A JSON body with ``key`` set to ``value`` (``DELETE``: removed)."""
    def edit(blob: bytes) -> bytes:
        doc = json.loads(blob)
        if value is DELETE:
            doc.pop(key, None)
        else:
            doc[key] = value
        return json.dumps(doc).encode()

    return edit


CHECK_CASES = {
    "domain-garbage": ("domain", lambda b: b"\x89garbage"),
    "domain-root-type": ("domain", _set("root", 5)),
    "group-truncated": ("group", lambda b: b[:len(b) // 2]),
    "group-links-type": ("group", _set("links", [1, 2])),
    "dataset-type-missing": ("dataset", _set("type", DELETE)),
    "dataset-shape-type": ("dataset", _set("shape", "round")),
    "dataset-empty": ("dataset", lambda b: b""),
    "chunk-undecodable": ("chunk", lambda b: bytes(x ^ 0x5A for x in b)),
    "chunk-short": ("chunk", lambda b: b[:3]),
    "derived-garbage": ("derived", lambda b: b"\x01" * 12),
}


@pytest.mark.parametrize("case", sorted(CHECK_CASES))
def test_check_reports(world, case) -> None:
    """``check --deep`` names the damaged domain (and only it); damaged derived data is no fault
    of the domain's (it is rebuilt, never trusted)."""
    target, fn = CHECK_CASES[case]
    url = copy_store(world.url)
    store = open_store(url)
    key = key_of(world, target, "/a.h5", "x")
    store.put(key, fn(store.get(key)))
    report = check_store(url, deep=True)
    assert all("/b.h5" not in p for p in report.problems), report.text()
    if target == "derived":
        return
    assert any("/a.h5" in p for p in report.problems), report.text()


def test_check_cli_reports(world, tmp_path) -> None:
    """``polyfs check`` on a directory store: a non-zero exit and one line naming the domain."""
    store_dir = tmp_path / "store"
    build_store(str(store_dir))
    local = open_store(str(store_dir))
    info = next(i for i in local.list("") if i.key.endswith(keys.DOMAIN_FILE) and "/a.h5" in "/" + i.key)
    dom_json = json.loads(local.get(info.key))
    root = dom_json["root"]
    local.put(keys.group_key(root), b"{not json")
    res = subprocess.run([sys.executable, "-m", "polyfs", "check", str(store_dir)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0, res.stdout
    assert "Traceback" not in res.stderr, res.stderr
    assert any("/a.h5" in line for line in res.stdout.splitlines() + res.stderr.splitlines()), res.stdout


# -- tier 3: a real mount ------------------------------------------------------------------------
@pytest.mark.mount
def test_mount_serves_around_corruption(mount_store, tmp_path) -> None:
    """A damaged ``.dataset.json`` in ``/a.h5``: its files fail with an errno, ``/b.h5`` reads as an
    independent reader expects, and the log holds no traceback."""
    h5py = pytest.importorskip("h5py")
    store_dir = tmp_path / "store"
    ids = build_store(str(store_dir))
    local = open_store(str(store_dir))
    local.put(keys.dataset_key(ids["/a.h5"]["x"]), b'{"id": 7, "shape": "round"}')
    local.put(keys.chunk_key(ids["/b.h5"]["z"], (0, 0)) + "_junk", b"not a chunk name")  # ignored
    m = mount_store(str(store_dir))
    mnt = Path(m.path)
    assert "b.h5" in os.listdir(mnt / "hdf5")  # a.h5, whose size cannot be known, may be left out
    with pytest.raises(OSError) as ei:
        (mnt / "hdf5" / "a.h5").read_bytes()
    assert ei.value.errno in (errno.EIO, errno.EINVAL, errno.ENOENT)
    with pytest.raises(OSError):
        os.listdir(mnt / "zarr" / "a.zarr")
    with h5py.File(mnt / "hdf5" / "b.h5", "r") as f:
        want = ((np.add.outer(np.arange(32), np.arange(48)) * 3) % 1000).astype(">u2")
        np.testing.assert_array_equal(f["z"][...], want)
    assert json.loads((mnt / "zarr" / "b.zarr" / "z" / "zarr.json").read_text())["shape"] == [32, 48]
    for _ in range(3):  # the same failure again: logged again, without a traceback
        with pytest.raises(OSError):
            (mnt / "hdf5" / "a.h5").read_bytes()
    log = m.log_text()
    assert "Traceback" not in log, log
    assert "a.h5" in log, log


@pytest.mark.parametrize("target", ["domain", "dataset"])
def test_deeply_nested_object(world, target) -> None:
    """JSON nested past Python's recursion limit: only its own domain fails (a ``.domain.json`` so
    damaged took the whole domain list down)."""
    url = copy_store(world.url)
    key = key_of(world, target, "/a.h5", "x")
    open_store(url).put(key, b"[" * 100_000 + b"]" * 100_000)
    fs = FS(url, read_only=True)
    guard = Unexpected(fs.ops)
    with LogRecords() as logs:
        got = read_all(fs)
    guard.check(f"reading the mount after nesting {key} too deeply")
    expect(world, got, world.golden, target, "/a.h5", "x", key, int)
    assert not logs.tracebacks(), "a traceback reached the log"
    report = check_store(url)
    assert any("/a.h5" in p for p in report.problems), report.text()


@pytest.mark.parametrize("how", ["chunk-size", "chunk-undecodable", "empty"])
def test_chunk_damaged_while_mounted(world, how) -> None:
    """A chunk replaced behind a mount that already laid its files out (as HSDS rewrites chunks):
    the files holding it fail with an errno or serve the new bytes, every other file reads as
    before, and a second pass (files laid out again) behaves the same."""
    url = copy_store(world.url)
    fs = FS(url, read_only=True)
    guard = Unexpected(fs.ops)
    assert read_all(fs) == world.golden
    key = key_of(world, "chunk", "/a.h5", "x")
    store = open_store(url)
    store.put(key, damage(store.get(key), how, 5, b"tail", JsonEdit((0,), 0)))
    for attempt_no in range(2):
        with LogRecords() as logs:
            got = read_all(fs)
        guard.check(f"pass {attempt_no} after damaging {key} under the mount")
        expect(world, got, world.golden, "chunk", "/a.h5", "x", key, int)
        assert not logs.tracebacks(), "a traceback reached the log"
