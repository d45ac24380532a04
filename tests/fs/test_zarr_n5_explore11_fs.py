"""Tier 2 (no kernel): Zarr/N5 import of trees real writers leave, exploratory round 11
(real tools over a mount are in tests/mount/test_zarr_n5_explore11.py).

- tensorstore writes arrays (``zarr3``) and datasets (``n5``) into plain directories and
  never a group's ``zarr.json`` or the container's ``attributes.json``: ``polyfs import`` of
  such a tree failed with "a directory that is neither a Zarr v3 hierarchy nor an N5
  container". A directory without root metadata is now claimed when metadata of the format
  lies below it (breadth first, bounded) and imported as an implicit root group, as the
  importers already did for groups without metadata inside a hierarchy. A directory with
  no such metadata (plain files, JSON that is no N5 dataset's) is still refused by name,
  and nothing is written.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_write_semantics import fs  # noqa: F401 - fixture
from writeharness import FS

from polyfs.errors import SourceError
from polyfs.importers import import_source
from polyfs.model.catalog import Catalog
from polyfs.store import open_store

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore:The data type")

DATA = (np.arange(20 * 30, dtype="u2").reshape(20, 30) * 7) % 6007


def _copy_view(view: FS, path: str, dest: Path) -> Path:
    """The files of a view directory copied to local disk (what a reader of the mount sees)."""
    for rel in view.walk_files(path):
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(view.read_file(f"{path}/{rel}"))
    return dest


def _ts_write(ts, path: Path, driver: str, metadata: dict, data: np.ndarray) -> None:
    t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path)},
                 "metadata": metadata, "create": True}).result()
    t[...] = data


def _zarr3_meta(codecs: list, chunks: list, dims: list | None = None) -> dict:
    meta = {"shape": list(DATA.shape), "data_type": "uint16", "fill_value": 5, "codecs": codecs,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}}}
    if dims:
        meta["dimension_names"] = dims
    return meta


def _domains(url: str) -> list[str]:
    return sorted(d for d in Catalog(open_store(url)).list_domains())


def test_a_tensorstore_zarr3_tree_without_root_metadata_is_imported(fs, tmp_path):  # noqa: F811
    ts = pytest.importorskip("tensorstore")
    zarr = pytest.importorskip("zarr")
    tree = tmp_path / "tree.zarr"
    sharded = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [4, 8], "index_location": "start",
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "bitshuffle",
                                                        "typesize": 2, "blocksize": 0}}]}}]
    _ts_write(ts, tree / "a", "zarr3", _zarr3_meta(sharded, [8, 16], ["y", None]), DATA)
    gz = [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip", "configuration": {"level": 4}}]
    _ts_write(ts, tree / "sub" / "b", "zarr3", _zarr3_meta(gz, [7, 7]), DATA[::-1])
    assert not (tree / "zarr.json").exists()
    assert import_source(str(tree), fs.url, domain="/tree.h5", progress=False) == "/tree.h5"
    view = fs.fresh()
    assert sorted(view.ls("zarr/tree.zarr")) == ["a", "sub", "zarr.json"]
    local = _copy_view(view, "zarr/tree.zarr", tmp_path / "copy.zarr")
    g = zarr.open_group(str(local), mode="r")
    np.testing.assert_array_equal(g["a"][...], DATA)
    np.testing.assert_array_equal(g["sub/b"][...], DATA[::-1])
    meta = json.loads((local / "a" / "zarr.json").read_text())
    assert meta["dimension_names"] == ["y", None] and meta["fill_value"] == 5
    got = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(local / "sub" / "b")}}).result()
    np.testing.assert_array_equal(got.read().result(), DATA[::-1])


def test_a_tensorstore_n5_container_without_root_attributes_is_imported(fs, tmp_path):  # noqa: F811
    ts = pytest.importorskip("tensorstore")
    tree = tmp_path / "vol.n5"
    comps = {"s0": {"type": "gzip", "level": -1}, "s1": {"type": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2}}
    for i, (name, comp) in enumerate(comps.items()):
        part = DATA[:: 1 + i, :: 1 + i].astype("i4") - 100
        _ts_write(ts, tree / "setup0" / name, "n5", {"dimensions": list(part.shape), "blockSize": [6, 8],
                                                    "dataType": "int32", "compression": comp}, part)
    assert not (tree / "attributes.json").exists()
    assert import_source(str(tree), fs.url, domain="/vol.h5", progress=False) == "/vol.h5"
    view = fs.fresh()
    assert {"s0", "s1"} <= set(view.ls("n5/vol.n5/setup0"))
    local = _copy_view(view, "n5/vol.n5", tmp_path / "copy.n5")
    for i, name in enumerate(comps):
        src = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(tree / "setup0" / name)}}).result()
        got = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(local / "setup0" / name)}}).result()
        np.testing.assert_array_equal(got.read().result(), src.read().result())


@pytest.mark.parametrize("layout", ["plain_files", "foreign_json", "empty"])
def test_directories_without_metadata_below_are_still_refused(fs, tmp_path, layout):  # noqa: F811
    tree = tmp_path / "notes"
    (tree / "sub").mkdir(parents=True)
    if layout == "plain_files":
        (tree / "sub" / "readme.txt").write_text("hello")
        (tree / "data.bin").write_bytes(b"\0" * 64)
    elif layout == "foreign_json":
        (tree / "sub" / "attributes.json").write_text(json.dumps({"colour": "red"}))
    before = _domains(fs.url)
    with pytest.raises(SourceError, match="neither a Zarr v3 hierarchy"):
        import_source(str(tree), fs.url, domain="/notes.h5", progress=False)
    assert _domains(fs.url) == before
