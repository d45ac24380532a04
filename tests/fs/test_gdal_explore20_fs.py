"""Tier 2: Zarr v3 as GDAL writes it, into the Zarr view, exploratory round 20 (operations awaited
directly).

- GDAL up to 3.10 (rasterio's wheels: ``rasterio.open(p, "w", driver="Zarr", FORMAT="ZARR_V3")``,
  ``rio convert --driver Zarr``) writes arrays whose ``zarr.json`` names no array-to-bytes codec:
  no ``codecs`` at all when uncompressed, only ``gzip`` or ``blosc`` when compressed, with
  ``fill_value`` null; its chunks are the elements' raw little-endian bytes under those codecs (as
  the v3 drafts implied). The view refused every such ``zarr.json`` (``EINVAL``, "the codec chain
  has no bytes codec") at close, which GDAL does not check: the user saw success and the array
  was never stored, its chunk files left as scratch gone at unmount. They are now read as GDAL
  means them (``bytes`` little-endian first) and stored; ``polyfs import`` of such a local
  directory does the same. A chain with other codecs and no array-to-bytes codec stays refused.
- GDAL before 3.8 (the system's GDAL 3.6) writes ``-co FORMAT=ZARR_V3`` as a draft of Zarr v3:
  ``zarr.json`` with ``zarr_format`` a URL, then ``meta/root.group.json`` and
  ``meta/root/<name>.array.json``. Those ``*.array.json``/``*.group.json`` files were taken as
  scratch (GDAL reported nothing, and they vanished at unmount); they are now refused when made
  (``EOPNOTSUPP``, one log line naming the draft), so GDAL prints "Open file ... to write failed".
"""
from __future__ import annotations

import errno
import gzip
import io
import json
import logging

import numpy as np
import pytest
from test_write_semantics import refused
from writeharness import FS, read_zarr_array

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")


@pytest.fixture
def fs():
    f = FS()
    f.mkdir("zarr/gd.zarr")  # domain /gd.h5
    f.write_json("zarr/gd.zarr/zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {}})
    yield f
    f.close()


def gdal_meta(shape: tuple[int, ...], chunks: tuple[int, ...], data_type: str, codecs: list | None,
              fill=None) -> dict:
    """An array's ``zarr.json`` exactly as GDAL 3.10's Zarr driver writes it (``codecs`` left
    out when there are none)."""
    meta = {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "attributes": {}, "dimension_names": ["Band", "Y", "X"][-len(shape):]}
    if codecs is not None:
        meta["codecs"] = codecs
    return meta


def blosc_lz4(raw: bytes, typesize: int) -> bytes:
    numcodecs = pytest.importorskip("numcodecs")
    return numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE).encode(
        np.frombuffer(raw, dtype=f"u{typesize}" if typesize in (1, 2, 4, 8) else "u1"))


CASES = {  # name: (data_type, codecs, fill, encode(raw, itemsize))
    "raw uint16": ("uint16", None, None, lambda raw, n: raw),
    "gzip int16": ("int16", [{"name": "gzip", "configuration": {"level": 6}}], None,
                   lambda raw, n: gzip.compress(raw)),
    "blosc float32": ("float32", [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                                                       "shuffle": "shuffle", "typesize": 4,
                                                                       "blocksize": 0}}], "NaN", blosc_lz4),
    "gzip float64": ("float64", [{"name": "gzip", "configuration": {"level": 6}}], "NaN",
                     lambda raw, n: gzip.compress(raw)),
}


def write_gdal_array(fs: FS, name: str, data: np.ndarray, chunks: tuple[int, ...], case: str) -> None:
    """What GDAL does: ``zarr.json`` first, then every chunk file (edge chunks whole, padded)."""
    data_type, codecs, fill, encode = CASES[case]
    fs.makedirs(f"zarr/gd.zarr/{name}")
    fs.write_json(f"zarr/gd.zarr/{name}/zarr.json", gdal_meta(data.shape, chunks, data_type, codecs, fill))
    grid = [-(-s // c) for s, c in zip(data.shape, chunks)]
    for pos in np.ndindex(*grid):
        block = np.zeros(chunks, data.dtype)
        sl = tuple(slice(p * c, min((p + 1) * c, s)) for p, c, s in zip(pos, chunks, data.shape))
        block[tuple(slice(0, s.stop - s.start) for s in sl)] = data[sl]
        path = f"zarr/gd.zarr/{name}/c/" + "/".join(map(str, pos))
        fs.makedirs(path.rsplit("/", 1)[0])
        fs.write_file(path, encode(block.astype(block.dtype.newbyteorder("<")).tobytes(), data.dtype.itemsize))


@pytest.mark.parametrize("case", sorted(CASES))
def test_gdal_zarr_v3_without_a_bytes_codec_is_stored(fs, case):
    dt = np.dtype(CASES[case][0])
    data = (np.arange(2 * 37 * 45) % 200 - 50).astype(dt).reshape(2, 37, 45)
    write_gdal_array(fs, "band", data, (1, 16, 16), case)
    meta, got = read_zarr_array(fs, "zarr/gd.zarr/band")
    np.testing.assert_array_equal(got, data)
    assert meta["codecs"][0]["name"] in ("bytes", "sharding_indexed")
    with h5py.File(io.BytesIO(fs.read_file("hdf5/gd.h5")), "r") as f:
        np.testing.assert_array_equal(f["band"][...], data)


def test_gdal_1d_coordinate_array_without_codecs_is_stored(fs):
    """GDAL's X/Y arrays of a georeferenced raster: float64, no codecs, fill "NaN"."""
    x = 500005.0 + 10 * np.arange(40)
    write_gdal_array(fs, "X", x, (40,), "gzip float64")
    fs.makedirs("zarr/gd.zarr/Y")
    fs.write_json("zarr/gd.zarr/Y/zarr.json", gdal_meta((30,), (30,), "float64", None, "NaN"))
    fs.makedirs("zarr/gd.zarr/Y/c")
    y = 3999995.0 - 10 * np.arange(30)
    fs.write_file("zarr/gd.zarr/Y/c/0", y.astype("<f8").tobytes())
    for name, want in (("X", x), ("Y", y)):
        _, got = read_zarr_array(fs, f"zarr/gd.zarr/{name}")
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("codecs", [[{"name": "transpose", "configuration": {"order": [1, 0]}}],
                                    [{"name": "no.such.codec"}], [{"name": "gzip"}, {"name": "transpose"}]],
                         ids=["transpose only", "unknown codec", "transpose after gzip"])
def test_a_chain_without_array_to_bytes_and_not_only_bytes_codecs_stays_refused(fs, caplog, codecs):
    meta = gdal_meta((8, 8), (4, 4), "uint16", codecs)
    fs.mkdir("zarr/gd.zarr/bad")
    refused(fs, (errno.EINVAL, errno.EOPNOTSUPP), fs.write_json, "zarr/gd.zarr/bad/zarr.json", meta,
            caplog=caplog, names="zarr/gd.zarr/bad/zarr.json")


def test_text_array_without_codecs_stays_refused(fs, caplog):
    meta = gdal_meta((4,), (4,), "string", None, "")
    fs.mkdir("zarr/gd.zarr/s")
    refused(fs, (errno.EINVAL, errno.EOPNOTSUPP), fs.write_json, "zarr/gd.zarr/s/zarr.json", meta,
            caplog=caplog, names="zarr/gd.zarr/s/zarr.json")


DRAFT_ROOT = {"zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0",
              "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0",
              "metadata_key_suffix": ".json", "extensions": []}


def test_gdal36_draft_v3_root_is_refused_naming_the_draft(fs, caplog):
    fs.mkdir("zarr/d.zarr")
    caplog.set_level(logging.WARNING)
    refused(fs, errno.EINVAL, fs.write_json, "zarr/d.zarr/zarr.json", DRAFT_ROOT, caplog=caplog, names="draft")


@pytest.mark.parametrize("path", ["zarr/gd.zarr/meta/root.group.json", "zarr/gd.zarr/meta/root/band.array.json"])
def test_gdal36_draft_v3_metadata_files_are_refused_when_made(fs, caplog, path):
    fs.makedirs(path.rsplit("/", 1)[0])
    caplog.set_level(logging.WARNING)
    refused(fs, errno.EOPNOTSUPP, fs.open_file, path, caplog=caplog, names="draft of Zarr v3")


def test_import_of_a_local_gdal_zarr_v3_directory(tmp_path):
    """``polyfs import`` of a directory GDAL 3.10 wrote with ``COMPRESS=GZIP`` (zarr-python itself
    refuses it): its gzip members are copied as they are."""
    root = tmp_path / "gd.zarr"
    (root / "img" / "c" / "0").mkdir(parents=True)
    (root / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    data = np.arange(16 * 20, dtype="<u2").reshape(16, 20)
    gz = [{"name": "gzip", "configuration": {"level": 6}}]
    (root / "img" / "zarr.json").write_text(json.dumps(gdal_meta((16, 20), (16, 10), "uint16", gz)))
    for j in range(2):
        raw = np.ascontiguousarray(data[:, j * 10:(j + 1) * 10]).tobytes()
        (root / "img" / "c" / "0" / str(j)).write_bytes(gzip.compress(raw))
    store = tmp_path / "store"
    import_source(root, str(store), progress=False)
    f = FS("file://" + str(store))
    try:
        with h5py.File(io.BytesIO(f.read_file("hdf5/gd.h5")), "r") as h:
            np.testing.assert_array_equal(h["img"][...], data)
    finally:
        f.close()
