"""Stores on S3 (moto) written through the views with the write features of rounds 8-9, as
a user of a shared bucket has them: zarr-python arrays with the ``transpose`` codec,
``structured`` record arrays with complex fields, ``variable_length_bytes`` arrays, gzip
text arrays and ``cp -r`` of their views, h5py ``r+`` on zarr-made zstd arrays with only
``HDF5_PLUGIN_PATH`` set, and GeoTIFFs with a GDAL nodata. Each is read back through the
other views, by a second daemon over the same bucket (another host) within ``domain_ttl``,
and checked deep; a corrupt chunk of each is refused and leaves the bucket as it was.

Found and fixed: a chunk another host rewrites was never seen through views that
transcode chunks (the N5 view of zstd arrays, the Zarr view of transposed arrays): stale
values for good, or EIO when the new product's size differed (reader.forget_datasets); and
a ``transpose`` before ``sharding_indexed`` was refused as "nested sharding"."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import time
import warnings

import h5py
import numpy as np
import pytest
from test_s3_writes_explore5 import bucket_url, check_deep, objects

zarr = pytest.importorskip("zarr")

pytestmark = [pytest.mark.mount, pytest.mark.s3,
              pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                         "ignore::FutureWarning", "ignore::DeprecationWarning")]

TTL = 1.0
REC = np.dtype([("i", "<i4"), ("z", "<c16"), ("name", "S3"), ("w", "<c8")])
BLOBS = [b"a", b"\x00\xffzz", b"", b"hello", b"x" * 300, b"\x01"]
TEXTS = ["alpha", "béta", "", "γ" * 50, "e", "ff", "g"]


def _hosts(s3_server, mount_store, tag: str):
    """A bucket and two daemons over it (two hosts), watching for each other's writes."""
    warnings.filterwarnings("ignore")
    url = bucket_url(s3_server, tag)
    return url, mount_store(url, f"domain_ttl={TTL}"), mount_store(url, f"domain_ttl={TTL}")


def _seen_within_ttl(check, timeout: float = 4 * TTL + 6) -> None:
    """``check()`` passes on the other host within a few domain_ttl (it retries until then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except (AssertionError, OSError, KeyError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _cp_r(src, dst) -> None:
    res = subprocess.run(["cp", "-r", str(src), str(dst)], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr


def _python(code: str, *args, env: dict | None = None) -> None:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         check=False, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]


def _records() -> np.ndarray:
    r = np.zeros(7, REC)
    r["i"] = np.arange(7) - 3
    r["z"] = np.arange(7) + 2j * np.arange(7)
    r["name"] = [b"ab", b"c", b"", b"xyz", b"q", b"rr", b"s"]
    r["w"] = -np.arange(7) + 0.5j
    return r


def _transposed() -> np.ndarray:
    return np.arange(24 * 20 * 3, dtype="f4").reshape(24, 20, 3)


def _write_zarr_features(root) -> None:
    """What a zarr-python user writes: transpose (gzip and sharded), records, byte sequences."""
    from zarr.codecs import GzipCodec, TransposeCodec

    g = zarr.open_group(str(root), mode="w")
    kinds = {"tgz": {"compressors": [GzipCodec()]}, "tsh": {"shards": (12, 20, 3), "compressors": None}}
    for name, kw in kinds.items():
        a = g.create_array(name, shape=(24, 20, 3), chunks=(6, 5, 3), dtype="f4",
                           filters=[TransposeCodec(order=(2, 0, 1))], **kw)
        a[:] = _transposed()
        a[3:9, 2:7, 1] = -1
    r = g.create_array("rec", shape=(7,), chunks=(3,), dtype=REC)
    r[:] = _records()
    b = g.create_array("vb", shape=(6,), chunks=(4,), dtype=zarr.dtype.VariableLengthBytes(), fill_value=b"")
    b[:] = np.array(BLOBS, dtype=object)
    g.attrs["who"] = "host-a"


def _check_zarr_features(mnt, dom: str) -> None:
    want = _transposed()
    want[3:9, 2:7, 1] = -1
    g = zarr.open_group(str(mnt / "zarr" / f"{dom}.zarr"), mode="r")
    assert g.attrs["who"] == "host-a"
    for name in ("tgz", "tsh"):
        np.testing.assert_array_equal(g[name][:], want)
    np.testing.assert_array_equal(g["rec"][:], _records())
    assert [bytes(x) for x in g["vb"][:]] == BLOBS
    with h5py.File(mnt / "hdf5" / f"{dom}.h5", "r") as f:
        np.testing.assert_array_equal(f["tgz"][...], want)
        np.testing.assert_array_equal(f["tsh"][...], want)
        rec = f["rec"][...]
        np.testing.assert_array_equal(rec["z"], _records()["z"])
        np.testing.assert_array_equal(rec["w"], _records()["w"])
        np.testing.assert_array_equal(rec["i"], _records()["i"])
        assert [bytes(x) for x in f["vb"][...]] == BLOBS


def test_transposed_records_and_byte_sequences_on_s3_seen_by_another_host(s3_server, mount_store):
    url, a, b = _hosts(s3_server, mount_store, "feat10")
    _write_zarr_features(a.path / "zarr" / "f.zarr")
    _check_zarr_features(a.path, "f")
    _seen_within_ttl(lambda: _check_zarr_features(b.path, "f"))
    # a copy made on host B, seen on host A
    _cp_r(b.path / "zarr" / "f.zarr", b.path / "zarr" / "copy.zarr")
    _check_zarr_features(b.path, "copy")
    _seen_within_ttl(lambda: _check_zarr_features(a.path, "copy"))
    a.stop()
    b.stop()
    check_deep(url)


def test_gzip_text_arrays_and_cp_r_of_their_view_on_s3(s3_server, mount_store, tmp_path):
    url, a, b = _hosts(s3_server, mount_store, "text10")
    local = tmp_path / "s.h5"
    with h5py.File(local, "w") as f:
        f.create_dataset("names", data=np.array(TEXTS, dtype=object), dtype=h5py.string_dtype(), chunks=(3,),
                         compression="gzip")
        d = f.create_dataset("vb", (6,), dtype=h5py.vlen_dtype(np.uint8), chunks=(2,), compression="gzip")
        for i, v in enumerate(BLOBS):
            d[i] = np.frombuffer(v, np.uint8)
    shutil.copy(local, a.path / "hdf5" / "s.h5")
    _cp_r(a.path / "zarr" / "s.zarr", a.path / "zarr" / "copy.zarr")
    g = zarr.open_group(str(a.path / "zarr" / "s.zarr"), mode="a")
    sh = g.create_array("sh", shape=(7,), chunks=(2,), shards=(4,), dtype=str,
                        compressors=[zarr.codecs.GzipCodec(level=5)])
    sh[:] = np.array(TEXTS, dtype=object)
    sh[0] = "new"
    want = ["new"] + TEXTS[1:]

    def seen(mnt) -> None:
        assert list(zarr.open_array(str(mnt / "zarr" / "copy.zarr" / "names"), mode="r")[:]) == TEXTS
        assert [bytes(x) for x in zarr.open_array(str(mnt / "zarr" / "copy.zarr" / "vb"), mode="r")[:]] == BLOBS
        assert list(zarr.open_array(str(mnt / "zarr" / "s.zarr" / "sh"), mode="r")[:]) == want
        with h5py.File(mnt / "hdf5" / "copy.h5", "r") as f:
            assert [x.decode() for x in f["names"][...]] == TEXTS
            assert [bytes(x) for x in f["vb"][...]] == BLOBS
        with h5py.File(mnt / "hdf5" / "s.h5", "r") as f:
            assert [x.decode() for x in f["sh"][...]] == want

    seen(a.path)
    _seen_within_ttl(lambda: seen(b.path))
    a.stop()
    b.stop()
    check_deep(url)


R_PLUS = """
    import sys, h5py, numpy as np
    assert "hdf5plugin" not in sys.modules
    with h5py.File(sys.argv[1], "r+") as f:
        f["a"][0:16, 0:16] = 7
        f["a"][20, 30] = -5
        f["b"][95:] = 2.5
"""


def test_h5py_r_plus_on_zarr_made_zstd_arrays_on_s3_with_the_plugin_path_only(s3_server, mount_store):
    hdf5plugin = pytest.importorskip("hdf5plugin")
    url, a, b = _hosts(s3_server, mount_store, "zstd10")
    g = zarr.open_group(str(a.path / "zarr" / "zz.zarr"), mode="w")
    g.create_array("a", shape=(40, 50), chunks=(16, 16), dtype="int32", fill_value=-1)[:] = \
        np.arange(2000, dtype="int32").reshape(40, 50)
    g.create_array("b", shape=(100,), chunks=(10,), shards=(50,), dtype="float64")[:] = np.linspace(0, 1, 100)
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    env["HDF5_PLUGIN_PATH"] = hdf5plugin.PLUGIN_PATH
    _seen_within_ttl(lambda: zarr.open_group(str(b.path / "zarr" / "zz.zarr"), mode="r")["b"])
    _python(R_PLUS, b.path / "hdf5" / "zz.h5", env=env)  # host B edits what host A made
    wa = np.arange(2000, dtype="int32").reshape(40, 50)
    wa[0:16, 0:16] = 7
    wa[20, 30] = -5
    wb = np.linspace(0, 1, 100)
    wb[95:] = 2.5

    def seen(mnt) -> None:
        z = zarr.open_group(str(mnt / "zarr" / "zz.zarr"), mode="r")
        np.testing.assert_array_equal(z["a"][...], wa)
        np.testing.assert_array_equal(z["b"][...], wb)
        assert [c.__class__.__name__ for c in z["a"].compressors] == ["ZstdCodec"]

    seen(b.path)
    _seen_within_ttl(lambda: seen(a.path))
    a.stop()
    b.stop()
    check_deep(url)


def _gdal_stats(path) -> list[str]:
    out = subprocess.run(["gdalinfo", "-stats", "-checksum", "--config", "GDAL_PAM_ENABLED", "NO", str(path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [ln.strip() for ln in out.splitlines() if "Checksum=" in ln or "Minimum=" in ln or "NoData" in ln]


@pytest.mark.skipif(shutil.which("gdal_translate") is None or shutil.which("gdalinfo") is None,
                    reason="needs GDAL")
@pytest.mark.parametrize("nodata", ["-3.4028234663852886e+38", "-9999"])
def test_geotiff_with_gdal_nodata_on_s3_seen_by_another_host(s3_server, mount_store, tmp_path, nodata):
    tifffile = pytest.importorskip("tifffile")
    url, a, b = _hosts(s3_server, mount_store, "tif10")
    data = np.full((96, 128), np.float32(float(nodata)), np.float32)
    data[32:64, 32:64] = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, data)
    src = tmp_path / "dem.tif"
    subprocess.run(["gdal_translate", "-q", "-a_nodata", nodata, "-co", "TILED=YES", "-co", "BLOCKXSIZE=32",
                    "-co", "BLOCKYSIZE=32", "-co", "SPARSE_OK=TRUE", "-co", "COMPRESS=DEFLATE", str(plain), str(src)],
                   check=True, timeout=60)
    (a.path / "tiff" / "geo").mkdir()
    shutil.copyfile(src, a.path / "tiff" / "geo" / "dem.tif")
    want = _gdal_stats(src)
    assert _gdal_stats(a.path / "tiff" / "geo" / "dem.tif") == want

    def seen(mnt) -> None:
        assert _gdal_stats(mnt / "tiff" / "geo" / "dem.tif") == want
        np.testing.assert_array_equal(zarr.open_array(str(mnt / "zarr" / "geo.zarr" / "dem"), mode="r")[...], data)
        with h5py.File(mnt / "hdf5" / "geo.h5", "r") as f:
            np.testing.assert_array_equal(f["dem"][...], data)

    _seen_within_ttl(lambda: seen(b.path))
    a.stop()
    b.stop()
    check_deep(url)


def _refused(path, data: bytes) -> None:
    with pytest.raises(OSError) as err, open(path, "wb") as f:
        f.write(data)
    assert err.value.errno == errno.EINVAL, path


def test_corrupt_chunks_of_the_new_kinds_are_refused_and_the_bucket_kept(s3_server, mount_store, tmp_path):
    url, a, b = _hosts(s3_server, mount_store, "bad10")
    d = a.path / "zarr" / "f.zarr"
    _write_zarr_features(d)
    g = zarr.open_group(str(d), mode="a")
    g.create_array("txt", shape=(7,), chunks=(4,), dtype=str, compressors=[zarr.codecs.GzipCodec()])[:] = \
        np.array(TEXTS, dtype=object)
    before = objects(s3_server, url)
    log_at = len(a.log_text().splitlines())
    vb = (d / "vb" / "c" / "0").read_bytes()
    bad = {"tgz/c/0/0/0": os.urandom(200),  # not gzip
           "tgz/c/1/0/0": (d / "tgz/c/1/0/0").read_bytes()[:-9],  # gzip cut short
           "tsh/c/0/0/0": os.urandom(100),  # a shard without its index
           "rec/c/0": os.urandom(5),  # not a whole number of records
           "vb/c/0": vb[:-3],  # an element overruns the chunk
           "txt/c/0": (d / "txt/c/0").read_bytes()[:20]}
    for name, data in bad.items():
        _refused(d / name, data)
    lines = a.log_text().splitlines()[log_at:]
    for name in bad:
        assert len([ln for ln in lines if f"zarr/f.zarr/{name}:" in ln]) == 1, (name, lines)
    _check_zarr_features(a.path, "f")
    _seen_within_ttl(lambda: _check_zarr_features(b.path, "f"))
    a.stop()
    b.stop()
    assert objects(s3_server, url) == before
    check_deep(url)


def test_another_hosts_rewrite_shows_in_transcoded_views(s3_server, mount_store):
    ts = pytest.importorskip("tensorstore")
    from zarr.codecs import GzipCodec, TransposeCodec

    url, a, b = _hosts(s3_server, mount_store, "stale10")
    g = zarr.open_group(str(a.path / "zarr" / "t.zarr"), mode="w")
    plain = g.create_array("plain", shape=(8, 6), chunks=(4, 3), dtype="<i4")  # zstd: N5 view re-encodes
    tr = g.create_array("tr", shape=(8, 6), chunks=(4, 3), dtype="<i4", filters=[TransposeCodec(order=(1, 0))],
                        compressors=None)  # same-size rewrite: no size changes in the listing
    tgz = g.create_array("tgz", shape=(8, 6), chunks=(4, 3), dtype="<i4", filters=[TransposeCodec(order=(1, 0))],
                         compressors=[GzipCodec()])
    want = np.arange(48, dtype="<i4").reshape(8, 6)
    for arr in (plain, tr, tgz):
        arr[:] = want

    def seen(mnt) -> None:
        n5 = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(mnt / "n5" / "t.n5" / "plain")}}
                     ).result()
        np.testing.assert_array_equal(n5.read().result(), want.T)
        for name in ("tr", "tgz"):
            np.testing.assert_array_equal(zarr.open_array(str(mnt / "zarr" / "t.zarr" / name), mode="r")[...], want)

    _seen_within_ttl(lambda: seen(b.path))  # host B reads every chunk once (and caches what it made)
    want[0, 0:3] = -7
    want[5, 4] = 1 << 20
    for arr in (plain, tr, tgz):
        arr[0, 0:3] = -7
        arr[5, 4] = 1 << 20
    seen(a.path)
    try:
        _seen_within_ttl(lambda: seen(b.path))
    finally:
        a.stop()
        b.stop()
    check_deep(url)


def test_a_transpose_outside_the_shard_is_refused_by_its_name(s3_server, mount_store):
    import json

    url = bucket_url(s3_server, "tshard10")
    m = mount_store(url)
    zarr.open_group(str(m.path / "zarr" / "t.zarr"), mode="w")
    meta = {"zarr_format": 3, "node_type": "array", "shape": [40, 30], "data_type": "uint16", "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [20, 30]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                       {"name": "sharding_indexed", "configuration": {
                           "chunk_shape": [10, 10],
                           "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                           "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                            {"name": "crc32c"}]}}]}
    os.mkdir(m.path / "zarr" / "t.zarr" / "ts")
    before = objects(s3_server, url)
    log_at = len(m.log_text().splitlines())
    with pytest.raises(OSError) as err, open(m.path / "zarr" / "t.zarr" / "ts" / "zarr.json", "w") as f:
        f.write(json.dumps(meta))
    assert err.value.errno in (errno.EOPNOTSUPP, errno.EINVAL)
    said = [ln for ln in m.log_text().splitlines()[log_at:] if "zarr/t.zarr/ts/zarr.json" in ln]
    assert len(said) == 1 and "transpose" in said[0] and "nested" not in said[0], said
    m.stop()
    assert objects(s3_server, url) == before
