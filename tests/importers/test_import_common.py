"""Pure units of the import layer: codec choice, chunk-shape rule, JSON attributes,
source detection; and `polyfs info` / `polyfs create`."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from .import_helpers import import_all
from polyfs.cli import main
from polyfs.codecs.registry import BLOSC, BZIP2, DEFLATE, SHUFFLE, ZSTD
from polyfs.errors import AlreadyExists, SourceError
from polyfs.importers import default_domain, detect_kind
from polyfs.codecs.sniff import zstd_has_content_size
from polyfs.importers.common import auto_chunks, parse_chunks, parse_codec
from polyfs.model.jsonattrs import json_attribute
from polyfs.inspect import create_domain, info_text
from polyfs.model import types as T
from polyfs.model.catalog import Catalog
from polyfs.store import open_store


def test_parse_codec():
    assert parse_codec("deflate", None, "s").filters_for(T.IntType(2, False))[0].cd_values == (6,)
    assert parse_codec("zstd", 9, "s").filters[0].cd_values == (9,) and parse_codec("zstd", 9, "s").filters[0].id == ZSTD
    assert parse_codec("none", None, "s").filters == ()
    assert parse_codec("bzip2", None, "s").filters[0].id == BZIP2
    b = parse_codec("blosc", 3, "s").filters_for(T.FloatType(4), (10, 10))
    assert b[0].id == BLOSC and b[0].cd_values[2:5] == (4, 400, 3)
    s = parse_codec("2|1,4", None, "s").filters_for(T.IntType(8, True), (5,))
    assert [f.id for f in s] == [SHUFFLE, DEFLATE] and s[0].cd_values == (8,) and s[1].cd_values == (4,)
    with pytest.raises(SourceError, match=r"src\.h5: --codec '39999': unknown filter id 39999"):
        parse_codec("39999", None, "src.h5")
    with pytest.raises(SourceError, match="--codec"):
        parse_codec("32015,x", None, "src.h5")


def test_parse_chunks():
    assert parse_chunks("64, 64,1", "s") == (64, 64, 1) and parse_chunks(None, "s") is None
    for bad in ("0,4", "a", "-1"):
        with pytest.raises(SourceError, match="--chunks"):
            parse_chunks(bad, "s")


def test_chunk_shape_rule():
    assert auto_chunks((), 4) == ()
    assert auto_chunks((100, 100), 2) == (100, 100)  # 20 KB: one chunk
    assert auto_chunks((10_000_000,), 8) == (131072,)  # 1 MiB runs
    c = auto_chunks((64, 2048, 2048), 2)  # planes of 8 MiB: one plane deep, tiles of 16s
    assert c[0] == 1 and all(x % 16 == 0 for x in c[1:]) and math.prod(c) * 2 <= 1 << 20
    assert math.prod(c) * 2 > (1 << 20) // 4
    c = auto_chunks((5000, 64, 64), 1)  # 4 KiB planes: stacked up to 1 MiB
    assert c == (256, 64, 64)
    c = auto_chunks((3, 300, 400), 4)
    assert c == (1, 300, 400)
    c = auto_chunks((2, 5, 100_000), 8)  # a long thin plane
    assert math.prod(c) * 8 <= 1 << 20 and c[0] == 1


def test_json_attributes():
    def kind(v):
        t, s, val = json_attribute(v)
        return t.to_json(), s.to_json(), val

    assert kind(True)[0]["class"] == "H5T_ENUM"
    assert kind(3)[0]["base"] == "H5T_STD_I64LE" and kind(2 ** 64 - 1)[0]["base"] == "H5T_STD_U64LE"
    assert kind(0.5)[0]["base"] == "H5T_IEEE_F64LE"
    assert kind("x")[0]["class"] == "H5T_STRING"
    assert kind([1, 2])[1] == {"class": "H5S_SIMPLE", "dims": [2]}
    assert kind([1, 2.5])[2] == [1.0, 2.5]
    assert kind(["a", "b"])[0]["length"] == "H5T_VARIABLE"
    for v in ({"a": 1}, [[1], [2]], None, [], [1, "a"], 2 ** 70):
        t, s, val = kind(v)
        assert t["class"] == "H5T_STRING" and json.loads(val) == v


def test_zstd_content_size():
    import numcodecs

    frame = numcodecs.Zstd().encode(b"x" * 1000)
    assert zstd_has_content_size(bytes(frame))
    streamed = b"\x28\xb5\x2f\xfd\x00" + bytes(frame)[6:]  # descriptor without FCS / single segment
    assert not zstd_has_content_size(streamed)
    assert not zstd_has_content_size(b"\x78\x9c")


def test_detect_kind(tmp_path, hdf5_files, tiff_files, zarr_source, n5_sources):
    assert detect_kind(hdf5_files["types"]) == "hdf5"
    assert detect_kind(tiff_files["tiled_zstd"]) == "tiff"
    assert detect_kind(zarr_source) == "zarr"
    assert detect_kind(n5_sources[0]) == "n5"
    ub = tmp_path / "userblock.h5"  # an HDF5 file after a 512-byte user block
    import h5py

    with h5py.File(ub, "w", userblock_size=512) as f:
        f["x"] = np.arange(3)
    assert detect_kind(ub) == "hdf5"
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / ".zgroup").write_text('{"zarr_format": 2}')
    assert detect_kind(tmp_path / "v2") == "zarr"  # a Zarr v2 hierarchy
    (tmp_path / "v9").mkdir()
    (tmp_path / "v9" / ".zgroup").write_text("{}")
    with pytest.raises(SourceError, match="Zarr v2 metadata with zarr_format None"):
        detect_kind(tmp_path / "v9")
    assert default_domain(zarr_source) == "/hier.h5" and default_domain(tiff_files["tiled_zstd"]) == "/tiled_zstd.h5"


def test_info_and_create(tmp_path, hdf5_files, capsys, monkeypatch):
    store = tmp_path / "store"
    import_all([hdf5_files["filters"]], store, domain="/home/admin/filters.h5")
    assert create_domain(str(store), "/home/admin/empty.h5") == "/home/admin/empty.h5"
    with pytest.raises(AlreadyExists):
        create_domain(str(store), "/home/admin/empty.h5")
    assert info_text(str(store)) == "/home/admin/empty.h5\n/home/admin/filters.h5\n"
    cat = Catalog(open_store(str(store)))
    m = cat.load("/home/admin/empty.h5")
    assert list(m.groups) == [m.domain.root] and not m.datasets and not m.root.links

    # info must not read chunk data: only listings, JSON, polyfs's derived indexes and the
    # 16-byte sniff of one chunk
    from polyfs.model import keys
    from polyfs.store.local import LocalStore

    real_get, real_range = LocalStore.get, LocalStore.get_range
    chunk_reads = []

    def get(self, key):
        if not key.endswith(".json") and not key.startswith(keys.DERIVED):
            chunk_reads.append(key)
        return real_get(self, key)

    def get_range(self, key, start, length):
        if length > 16:
            chunk_reads.append(key)
        return real_range(self, key, start, length)

    monkeypatch.setattr(LocalStore, "get", get)
    monkeypatch.setattr(LocalStore, "get_range", get_range)
    text = info_text(str(store), "/home/admin/filters.h5")
    assert chunk_reads == []
    monkeypatch.undo()
    ds = cat.load("/home/admin/filters.h5").resolve("/missing_chunks")
    idx = cat.chunk_index(ds)
    block = text[text.index("/missing_chunks  dataset"):].split("\n/")[0]
    assert "type    H5T_IEEE_F64LE" in block and "shape   [64, 64]" in block
    assert "chunks  [16, 16]  grid [4, 4]" in block and "codec   deflate(4)" in block  # h5py's gzip level
    assert f"stored  {len(idx)}/16 chunks" in block and "fill    -2.5" in block
    assert "max [unlimited, 3]" in text and "zstd(5)" in text and "blosc(lz4, 5, shuffle=1)" in text
    assert "shuffle+deflate(" in text and "bzip2(5)" in text

    assert main(["info", str(store)]) == 0
    assert capsys.readouterr().out == "/home/admin/empty.h5\n/home/admin/filters.h5\n"
    assert main(["create", str(store), "/home/admin/new.h5"]) == 0
    assert "created /home/admin/new.h5" in capsys.readouterr().out
    assert main(["create", str(store), "/home/admin/new.h5"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["info", str(store), "/nope.h5"]) == 1
    assert capsys.readouterr().err.startswith("polyfs: error: no domain /nope.h5")


def test_progress_bar_only_on_a_terminal(tmp_path, hdf5_files, monkeypatch):
    import io
    import sys

    from polyfs.importers import import_source

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    import_source(hdf5_files["filters"], str(tmp_path / "a"), progress=True)
    assert "filters.h5" in tty.getvalue() and "chunk" in tty.getvalue()
    quiet = Tty()
    monkeypatch.setattr(sys, "stderr", quiet)
    import_source(hdf5_files["filters"], str(tmp_path / "b"), progress=False)
    assert quiet.getvalue() == ""
    pipe = io.StringIO()  # not a terminal: no bar even when asked
    monkeypatch.setattr(sys, "stderr", pipe)
    import_source(hdf5_files["filters"], str(tmp_path / "c"), progress=True)
    assert pipe.getvalue() == ""


def test_chunk_sink_inline_and_threaded_store_the_same(tmp_path):
    from polyfs.codecs.registry import Filter
    from polyfs.importers.common import write_decoded
    from polyfs.model.schema import Shape
    from polyfs.model.writer import DomainWriter

    data = (np.arange(100 * 70) % 97).astype(">u2").reshape(100, 70)
    data[:32] = 5  # the fill value: those chunks stay missing
    results = []
    for workers in (1, 3):
        cat = Catalog(open_store(str(tmp_path / f"w{workers}"), create=True))
        with DomainWriter(cat, "/d.h5") as w:
            ds = w.add_dataset(w.root, "x", T.IntType(2, False, ">"), Shape("simple", data.shape), (16, 16),
                               [Filter(DEFLATE, (6,))], fill_value=5)
            n = write_decoded(w, ds, lambda r: data[r], workers=workers)
        ds = cat.load("/d.h5").resolve("/x")
        idx = cat.chunk_index(ds)
        results.append((n, {idx.key(int(i)).rsplit("/", 1)[1]: cat.store.get(idx.key(int(i))) for i in idx.linear},
                        len(cat.crc_table(ds))))
    assert results[0] == results[1]
    assert results[0][0] == 7 * 5 - 2 * 5 and results[0][2] == results[0][0]


def test_polyglot_file_is_imported_as_hdf5(tmp_path):
    """A TIFF header at 0 and an HDF5 superblock after a 512-byte user block."""
    import h5py
    import tifffile

    tif = tmp_path / "t.tif"
    tifffile.imwrite(tif, np.zeros((4, 4), "u1"))
    head = tif.read_bytes()
    assert len(head) <= 512
    p = tmp_path / "both.h5"
    with h5py.File(p, "w", userblock_size=512) as f:
        f["x"] = np.arange(5)
    with open(p, "r+b") as fh:
        fh.write(head)
    assert detect_kind(p) == "hdf5"
    cat = import_all([p], tmp_path / "s")
    assert list(cat.load("/both.h5").root.links) == ["x"]


def test_info_says_why_a_view_does_not_show_a_dataset(tmp_path):
    """``polyfs info``'s views line: "zarr -" with its reason, not a bare dash, and never
    "zero-copy" for a netCDF dimension the Zarr view hides."""
    netCDF4 = pytest.importorskip("netCDF4")
    import numpy as np

    from polyfs.importers import import_source
    from polyfs.inspect import info_text

    src = tmp_path / "d.nc"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("lon", 4)  # a dimension without a variable
        nc.createVariable("v", "f4", ("lon",))[:] = np.arange(4)
        vt = nc.createVLType("i4", "ragged")
        nc.createVariable("r", vt, ("lon",))
    store = tmp_path / "store"
    domain = import_source(src, str(store), progress=False)
    text = info_text(str(store), domain)
    lon = text[text.index("/lon  dataset"):].split("\n/")[0]
    assert "zarr - (a netCDF dimension without a variable)" in lon, lon
    ragged = text[text.index("/r  dataset"):].split("\n/")[0]
    assert "zarr - (" in ragged and "zarr -," not in ragged, ragged
