"""Test sources written by the formats' own libraries, and readers that turn an
HDF5 file or a polyfs domain into one comparable structure.

Generators (each returns the paths it wrote):

- :func:`make_hdf5_corpus` (h5py + hdf5plugin): nested groups, soft, external
  and extra hard links, a committed type, attributes of every type, datasets of
  every type, every filter of the table plus lz4 (outside it), edge chunks,
  missing chunks, masked chunks, scalar, null and 0-size datasets, unlimited
  dims, fill values, contiguous and compact layouts.
- :func:`make_tiff_corpus` (tifffile), :func:`make_zarr_corpus` (zarr-python),
  :func:`make_n5_corpus` (tensorstore, z5py for truncated edge blocks).
- Bad inputs: :func:`make_truncated_hdf5`, :func:`make_unknown_filter_hdf5`,
  :func:`make_corrupt_chunk_hdf5`, :func:`make_bogus_tiff`, :func:`make_bad_zarr`.

Readers: :func:`hdf5_snapshot` (h5py) and :func:`domain_snapshot` (polyfs's
model: catalog + pipelines + vlen decoding, missing chunks = fill value) give
``{"objects": {path: {...}}, "soft": {...}, "external": {...}, "aliases": [...]}``
with every object named by its first path in a sorted breadth-first walk, and
references as those paths; :func:`assert_snapshots_equal` compares two.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

# ---------------------------------------------------------------------------------
# HDF5
# ---------------------------------------------------------------------------------


def h5plugins():
    """Import hdf5plugin with its filters registered in this process, even when
    HDF5_PLUGIN_PATH (set for h5dump by scripts/test) makes HDF5 load them from
    disk against another libhdf5, where blosc's callback fails."""
    import os

    import hdf5plugin

    if os.environ.get("HDF5_PLUGIN_PATH") and not getattr(h5plugins, "done", False):
        hdf5plugin.register(force=True)
        h5plugins.done = True
    return hdf5plugin


def _ramp(shape, dtype, scale=1) -> np.ndarray:
    n = math.prod(shape)
    return (np.arange(n) * scale % 251).astype(dtype).reshape(shape)


def make_hdf5_corpus(dest: Path) -> list[Path]:
    """Small HDF5 files covering everything the importer must carry over."""
    import h5py

    hdf5plugin = h5plugins()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    paths = []

    # -- structure, links, committed type, attributes of every type --------------
    p = dest / "structure.h5"
    with h5py.File(p, "w") as f:
        f["point_t"] = np.dtype([("x", "<f4"), ("y", "<f4"), ("id", "<u2")])
        a = f.create_group("a")
        b = a.create_group("b")
        c = b.create_group("c")
        pts = c.create_dataset("points", data=np.array([(1.5, 2.5, 7), (3.0, -1.0, 9)], dtype=f["point_t"].dtype),
                               dtype=f["point_t"])
        f["a/alias_of_c"] = c  # an extra hard link to a group
        f["points_again"] = pts  # an extra hard link to a dataset
        f["soft_to_points"] = h5py.SoftLink("/a/b/c/points")
        f["dangling"] = h5py.SoftLink("/nowhere")
        f["ext"] = h5py.ExternalLink("other.h5", "/some/path")
        f.create_group("empty_group")
        f["point_t"].attrs["note"] = "a committed compound"
        _every_attribute(f, f, pts)
        _every_attribute(c, f, f["a"])
        pts.attrs["typed_by_committed"] = np.array([(0.5, 0.25, 1)], dtype=f["point_t"].dtype)
    paths.append(p)

    # -- filters, layouts, chunk edge cases -----------------------------------------
    p = dest / "filters.h5"
    with h5py.File(p, "w") as f:
        img = _ramp((50, 37), "<u2", 7)
        f.create_dataset("gzip", data=img, chunks=(16, 16), compression="gzip", compression_opts=4)
        f.create_dataset("shuffle_gzip", data=img.astype("<i4"), chunks=(16, 10), compression="gzip", shuffle=True)
        f.create_dataset("zstd", data=img.astype("<f4") / 3, chunks=(20, 20), **hdf5plugin.Zstd(clevel=5))
        f.create_dataset("blosc", data=img, chunks=(25, 16),
                         **hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE))
        f.create_dataset("blosc_zstd_bitshuffle", data=img.astype("<i8"), chunks=(16, 16),
                         **hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE))
        f.create_dataset("bzip2", data=img, chunks=(16, 16), **hdf5plugin.BZip2(blocksize=5))
        f.create_dataset("fletcher_gzip", data=img, chunks=(16, 16), compression="gzip", fletcher32=True)
        f.create_dataset("fletcher_only", data=img, chunks=(16, 16), fletcher32=True)
        f.create_dataset("lz4_outside_table", data=img, chunks=(16, 16), **hdf5plugin.LZ4())
        f.create_dataset("no_filter_chunked", data=img, chunks=(16, 16))
        f.create_dataset("big_endian_gzip", data=img.astype(">i2"), chunks=(16, 16), compression="gzip")
        f.create_dataset("contiguous", data=_ramp((3, 300, 400), "<f4", 3))  # 1.4 MB: re-chunked
        f.create_dataset("contiguous_small", data=img.astype("<u1"))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        f.create_dataset("compact", data=np.arange(12, dtype="<i2"), dcpl=dcpl)
        f.create_dataset("external_storage", data=_ramp((20, 10), "<i2", 3),
                         external=[(str(dest / "filters_external.bin"), 0, h5py.h5f.UNLIMITED)])
        m = f.create_dataset("missing_chunks", shape=(64, 64), dtype="<f8", chunks=(16, 16), compression="gzip",
                             fillvalue=-2.5)
        m[0:16, 16:32] = 1.0
        m[40:50, 60:64] = 2.0
        u = f.create_dataset("unlimited", shape=(5, 3), maxshape=(None, 3), dtype="<i4", chunks=(4, 3),
                             compression="gzip")
        u[...] = np.arange(15).reshape(5, 3)
        u.resize((9, 3))
        u[5:] = -np.arange(12).reshape(4, 3)
        f.create_dataset("empty_unlimited", shape=(0,), maxshape=(None,), dtype="<f4", chunks=(8,),
                         compression="gzip")
        f.create_dataset("empty_contiguous", shape=(0, 4), dtype="<i2")
        f.create_dataset("scalar_int", data=np.int64(-42))
        f.create_dataset("scalar_float", data=np.float32(2.5))
        f.create_dataset("never_written", shape=(10, 10), dtype="<u1", chunks=(5, 5), compression="gzip",
                         fillvalue=9)
        f.create_dataset("null_space", data=h5py.Empty("<f4"))
        # a chunk stored with deflate skipped (filter mask): only shuffle applied
        import numcodecs

        mk = f.create_dataset("masked", shape=(8, 8), dtype="<i4", chunks=(4, 4), compression="gzip", shuffle=True)
        mk[:4, :] = 7
        raw = np.arange(16, dtype="<i4").reshape(4, 4) * 3
        mk.id.write_direct_chunk((4, 4), bytes(numcodecs.Shuffle(4).encode(raw.tobytes())), filter_mask=0b10)
    paths.append(p)

    # -- datasets of every type ---------------------------------------------------------
    p = dest / "types.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("i1", data=np.array([-128, 0, 127], "i1"), chunks=(2,), compression="gzip")
        f.create_dataset("u8", data=np.array([0, 2 ** 64 - 1, 5], "<u8"), chunks=(2,), compression="gzip")
        f.create_dataset("i4_be", data=np.arange(-5, 5, dtype=">i4"), chunks=(4,), compression="gzip")
        f.create_dataset("f2", data=np.linspace(-1, 1, 9).astype("<f2"), chunks=(4,), compression="gzip")
        f.create_dataset("f4_be", data=np.linspace(-1, 1, 9).astype(">f4"))
        f.create_dataset("f8_special", data=np.array([np.nan, np.inf, -np.inf, -0.0, 1e300]), chunks=(5,),
                         compression="gzip")
        f.create_dataset("bool", data=np.array([True, False, True, True]), chunks=(3,), compression="gzip")
        f.create_dataset("fixed_ascii", data=np.array([b"ab", b"hello", b""], "S6"), chunks=(2,),
                         compression="gzip")
        fu = f.create_dataset("fixed_utf8", shape=(2,), dtype=h5py.string_dtype("utf-8", 8))
        fu[...] = np.array(["é".encode(), "ñu".encode()], dtype=h5py.string_dtype("utf-8", 8))
        f.create_dataset("vlen_utf8", data=np.array(["α", "", "long string " * 5, "z"], dtype=object),
                         dtype=h5py.string_dtype("utf-8"), chunks=(3,), compression="gzip")
        f.create_dataset("vlen_ascii", data=np.array([b"x", b"yy"], dtype=object), dtype=h5py.string_dtype("ascii"))
        f.create_dataset("vlen_2d", data=np.array([["a", "bb"], ["ccc", "dddd"], ["e", "f"]], dtype=object),
                         dtype=h5py.string_dtype(), chunks=(2, 2), compression="gzip")
        packed = np.dtype([("a", "<i2"), ("b", ">f8"), ("s", "S3")])
        f.create_dataset("compound", data=np.array([(1, 0.5, b"x"), (-2, 1e9, b"yz"), (3, -1.0, b"")], packed),
                         chunks=(2,), compression="gzip")
        padded_dt = np.dtype({"names": ["a", "b"], "formats": ["u1", "<f8"], "offsets": [0, 8], "itemsize": 16})
        f.create_dataset("compound_padded", data=np.array([(1, 2.0), (3, 4.0)], padded_dt), chunks=(1,),
                         compression="gzip")
        nested = np.dtype([("p", packed), ("arr", "<i2", (2,))])
        f.create_dataset("compound_nested", data=np.array([((1, 2.0, b"a"), [5, 6])], nested))
        f.create_dataset("compound_vlen", data=np.array([(1, "one"), (2, "two")],
                                                        dtype=[("n", "<i4"), ("s", h5py.string_dtype())]))
        edt = h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 42}, basetype="u1")
        f.create_dataset("enum", data=np.array([0, 42, 1, 1], "u1"), dtype=edt, chunks=(2,),
                         **hdf5plugin.Zstd())
        at = f.create_dataset("array_type", shape=(4,), dtype=np.dtype(("<i4", (2, 3))), chunks=(3,),
                              compression="gzip")
        at[...] = np.arange(24, dtype="<i4").reshape(4, 2, 3)
        f.create_dataset("opaque", data=np.array([b"\x01\x02\x03\x04", b"\xff\x00\xff\x00"], "V4"),
                         chunks=(1,), **hdf5plugin.Blosc())
        f.create_dataset("vlen_int", data=np.array([np.arange(3, dtype="<i4"), np.arange(0, dtype="<i4"),
                                                    np.arange(5, dtype="<i4")], dtype=object),
                         dtype=h5py.vlen_dtype("<i4"))
        f.create_dataset("complex", data=(np.arange(6) + 1j * np.arange(6)[::-1]).astype("<c16"), chunks=(4,),
                         compression="gzip")
        cf = f.create_dataset("complex_fill", shape=(7,), dtype="<c8", chunks=(3,), compression="gzip",
                              fillvalue=1 + 2j)
        cf[0:2] = [3 - 1j, 0.5j]
        target = f.create_group("target_group")
        tds = f.create_dataset("target_ds", data=np.arange(3))
        f.create_dataset("refs", data=np.array([target.ref, tds.ref, h5py.Reference()], dtype=h5py.ref_dtype),
                         dtype=h5py.ref_dtype)
        f.create_dataset("refs_chunked", data=np.array([tds.ref, target.ref] * 3, dtype=h5py.ref_dtype),
                         dtype=h5py.ref_dtype, chunks=(4,), compression="gzip")
        rc = np.dtype([("n", "<i4"), ("r", h5py.ref_dtype)])
        f.create_dataset("compound_ref", data=np.array([(1, target.ref), (2, tds.ref)], dtype=rc))
        f.create_dataset("scalar_ref", data=tds.ref, dtype=h5py.ref_dtype)
        f.create_dataset("scalar_str", data="just one", dtype=h5py.string_dtype())
        f.create_dataset("scalar_compound", data=np.array((4, 2.5, b"q"), packed))
    paths.append(p)
    return paths


def _every_attribute(obj, f, ref_target) -> None:
    """One attribute per type the model has, on ``obj``."""
    import h5py

    a = obj.attrs
    a["int8"] = np.int8(-3)
    a["uint64_arr"] = np.array([1, 2 ** 63, 3], "<u8")
    a["int32_be"] = np.array([1, -2], ">i4")
    a["float16"] = np.float16(0.5)
    a["float32_2d"] = np.arange(6, dtype="<f4").reshape(2, 3) / 4
    a["float64_special"] = np.array([np.nan, np.inf, -np.inf])
    a["bool"] = True
    a["bool_arr"] = np.array([True, False])
    a["fixed_ascii"] = np.bytes_(b"fixed")
    a.create("fixed_utf8", np.array("ü".encode()), dtype=h5py.string_dtype("utf-8", 4))
    a["vlen_str"] = "variable ✓"
    a["vlen_str_arr"] = np.array(["a", "bc", ""], dtype=h5py.string_dtype())
    a.create("vlen_ascii", b"plain", dtype=h5py.string_dtype("ascii"))
    cdt = np.dtype([("n", "<i2"), ("v", "<f8")])
    a["compound"] = np.array((5, 0.25), cdt)
    a["compound_arr"] = np.array([(1, 1.0), (2, 2.0)], cdt)
    edt = h5py.enum_dtype({"OFF": 0, "ON": 1, "AUTO": 7}, basetype="i2")
    a.create("enum", np.array([0, 7], "i2"), dtype=edt)
    a.create("array_type", np.arange(6, dtype="<i4").reshape(2, 3), dtype=np.dtype(("<i4", (2, 3))))
    a["ref"] = ref_target.ref
    a.create("ref_arr", np.array([ref_target.ref, f.ref, h5py.Reference()], dtype=h5py.ref_dtype),
             dtype=h5py.ref_dtype)
    a["opaque"] = np.void(b"\x00\x01\x02")
    a.create("vlen_int", np.array([np.arange(2, dtype="<i4"), np.arange(4, dtype="<i4")], dtype=object),
             dtype=h5py.vlen_dtype("<i4"))
    a["empty"] = h5py.Empty("<f4")
    a["complex"] = np.complex64(1 - 2j)


def make_truncated_hdf5(dest: Path) -> Path:
    import h5py

    p = Path(dest) / "truncated.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("d", data=np.arange(50000, dtype="<f8"))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    return p


def make_unknown_filter_hdf5(dest: Path, filter_id: int = 39999) -> Path:
    """A dataset whose pipeline names a filter no one has: written with LZ4
    (32004) and its id patched in the filter pipeline message."""
    import h5py

    hdf5plugin = h5plugins()
    p = Path(dest) / "unknown_filter.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("fine", data=np.arange(10))
        f.create_dataset("data/odd", data=np.arange(64, dtype="<i4"), chunks=(16,), **hdf5plugin.LZ4())
    data = p.read_bytes()
    needle = (32004).to_bytes(2, "little") + b"\x70\x00"  # id, then the name length of "HDF5 lz4 filter; ..."
    i = data.find(needle)
    if i < 0 or data.find(needle, i + 1) >= 0:
        raise RuntimeError("could not find the lz4 filter id exactly once")
    p.write_bytes(data[:i] + int(filter_id).to_bytes(2, "little") + data[i + 2:])
    return p


def make_corrupt_chunk_hdf5(dest: Path) -> Path:
    """Good datasets first (their chunks are written before the failure), then a
    gzip dataset whose last stored chunk has its deflate bytes overwritten."""
    import h5py

    p = Path(dest) / "corrupt_chunk.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("a_good", data=_ramp((64, 64), "<u2"), chunks=(16, 16), compression="gzip")
        d = f.create_dataset("z_corrupt", data=_ramp((64, 64), "<u2", 5), chunks=(16, 16), compression="gzip")
        infos = []
        d.id.chunk_iter(infos.append)
        last = max(infos, key=lambda i: i.byte_offset)
    with open(p, "r+b") as fh:
        fh.seek(last.byte_offset + 2)
        fh.write(b"\xff" * min(8, last.size - 6))
    return p


# ---------------------------------------------------------------------------------
# TIFF
# ---------------------------------------------------------------------------------


def make_tiff_corpus(dest: Path) -> list[Path]:
    import tifffile

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    vol = _ramp((4, 100, 70), "<u2", 13)

    def write(name, data, **kw):
        p = dest / name
        tifffile.imwrite(p, data, **kw)
        out.append(p)

    write("tiled_deflate_be.tif", vol, tile=(32, 32), compression="zlib", byteorder=">",
          photometric="minisblack", metadata={"axes": "ZYX"}, resolution=(2.0, 4.0))
    write("tiled_zstd.tif", vol.astype("<f4") / 7, tile=(48, 16), compression="zstd", photometric="minisblack")
    write("stripped_zstd_big.tif", _ramp((3, 250, 180), "<u2", 3), rowsperstrip=200, compression="zstd",
          photometric="minisblack")  # 72000-byte strips are copied; the 50-row last strip is re-encoded
    write("stripped_raw_small.tif", vol, rowsperstrip=8, photometric="minisblack")
    write("tiled_raw.tif", vol, tile=(32, 48), photometric="minisblack")
    write("tiled_lzw_predictor.tif", vol, tile=(32, 32), compression="lzw", predictor=True,
          photometric="minisblack")
    write("rgb_contig_deflate.tif", _ramp((40, 50, 3), "u1", 5), tile=(16, 16), photometric="rgb",
          compression="zlib")
    write("rgb_planar_deflate.tif", _ramp((3, 40, 50), "u1", 5), tile=(16, 16), photometric="rgb",
          planarconfig="separate", compression="zlib")
    write("imagej_hyperstack.tif", _ramp((2, 3, 30, 40), "<u2", 11), imagej=True,
          metadata={"axes": "TZYX", "spacing": 0.5, "unit": "um"}, resolution=(1 / 0.25, 1 / 0.25))
    write("single_int16.tif", _ramp((64, 64), "<i2", 17) - 100, tile=(32, 32), compression="zlib")
    p = dest / "pyramid.tif"  # one series, two levels (a SubIFD)
    with tifffile.TiffWriter(p) as w:
        w.write(_ramp((128, 128), "u1", 3), tile=(32, 32), compression="zlib", subifds=1)
        w.write(_ramp((128, 128), "u1", 3)[::2, ::2], tile=(32, 32), compression="zlib", subfiletype=1)
    out.append(p)
    p = dest / "two_series.tif"  # two series of different shapes and types
    with tifffile.TiffWriter(p) as w:
        w.write(_ramp((128, 128), "<u2", 5), tile=(32, 32), compression="zstd", photometric="minisblack")
        w.write(_ramp((3, 20, 30), "<f4", 2) / 8, photometric="minisblack", compression="zlib")
    out.append(p)
    write("sparse_tiles.tif", _ramp((64, 64), "<u2", 9), tile=(16, 16), compression="zlib")
    with tifffile.TiffFile(out[-1], mode="r+b") as t:  # tile 5 becomes an empty (sparse) tile
        page = t.pages[0]
        offsets, counts = list(page.tags["TileOffsets"].value), list(page.tags["TileByteCounts"].value)
        offsets[5] = counts[5] = 0
        page.tags["TileOffsets"].overwrite(tuple(offsets))
        page.tags["TileByteCounts"].overwrite(tuple(counts))
    return out


def make_bogus_tiff(dest: Path) -> Path:
    """A tiled TIFF whose third tile offset points past the end of the file."""
    import tifffile

    p = Path(dest) / "bogus_offset.tif"
    tifffile.imwrite(p, _ramp((64, 64), "<u2"), tile=(16, 16), compression="zlib")
    with tifffile.TiffFile(p, mode="r+b") as t:
        tag = t.pages[0].tags["TileOffsets"]
        offsets = list(tag.value)
        offsets[2] = 10_000_000
        tag.overwrite(tuple(offsets))
    return p


def tiff_expected(path: Path) -> list[np.ndarray]:
    """tifffile's reading of each series, in series order."""
    import tifffile

    with tifffile.TiffFile(path) as t:
        return [s.asarray() for s in t.series]


def tiff_levels(path: Path) -> list[np.ndarray]:
    """tifffile's reading of every pyramid level of the first series."""
    import tifffile

    with tifffile.TiffFile(path) as t:
        return [lv.asarray() for lv in t.series[0].levels]


# ---------------------------------------------------------------------------------
# Zarr v3
# ---------------------------------------------------------------------------------


def make_zarr_corpus(dest: Path) -> list[Path]:
    """One hierarchy with nested groups and arrays in every codec chain."""
    import zarr
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    p = dest / "hier.zarr"
    root = zarr.open_group(p, mode="w", zarr_format=3)
    root.attrs.update({"title": "zarr corpus", "version": 3, "scale": 0.5, "flags": [True, False],
                       "nested": {"a": [1, 2]}, "mixed": [1, "x"], "none": None, "ints": [1, 2, 3],
                       "floats": [1, 2.5], "big": 2 ** 63 + 5, "empty": []})
    img = _ramp((50, 37), "<u2", 7)
    g = root.create_group("images")
    g.attrs["kind"] = "images"
    a = g.create_array("gzip", shape=img.shape, chunks=(16, 16), dtype="uint16", compressors=[GzipCodec(level=5)],
                       fill_value=3)
    a[:] = img
    a.attrs["units"] = "counts"
    a = g.create_array("zstd_be", shape=img.shape, chunks=(16, 16), dtype="int32", serializer=BytesCodec(endian="big"),
                       compressors=[ZstdCodec(level=3)])
    a[:] = img.astype("i4") - 100
    a = g.create_array("blosc", shape=img.shape, chunks=(20, 20), dtype="float32",
                       compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")])
    a[:] = img / 3
    a = g.create_array("zstd_crc32c", shape=img.shape, chunks=(16, 16), dtype="uint16",
                       compressors=[ZstdCodec(level=2), Crc32cCodec()])
    a[:] = img
    a = g.create_array("uncompressed", shape=img.shape, chunks=(16, 16), dtype="int16", compressors=None)
    a[:] = img.astype("i2")
    a = g.create_array("transposed", shape=(6, 5), chunks=(4, 4), dtype="uint8", compressors=[GzipCodec()],
                       filters=[TransposeCodec(order=(1, 0))])
    a[:] = np.arange(30, dtype="u1").reshape(6, 5)
    s = root.create_group("sharded")
    a = s.create_array("zstd", shape=(50, 37), chunks=(8, 8), shards=(16, 24), dtype="uint16",
                       compressors=[ZstdCodec(level=3)])
    a[:] = img
    a = s.create_array("gzip_sparse", shape=(40, 40), chunks=(10, 10), shards=(20, 20), dtype="float64",
                       compressors=[GzipCodec()], fill_value=float("nan"))
    a[0:10, 0:10] = 1.0
    a[25:40, 35:40] = 2.0
    m = root.create_array("missing", shape=(30, 30), chunks=(10, 10), dtype="int8", compressors=[GzipCodec()],
                          fill_value=-1)
    m[0:10, 0:10] = 5
    m[20:30, 10:20] = 6
    b = root.create_array("bool", shape=(7,), chunks=(4,), dtype="bool", compressors=[GzipCodec()])
    b[:] = np.array([1, 0, 1, 1, 0, 0, 1], bool)
    c = root.create_array("complex", shape=(5,), chunks=(2,), dtype="complex64", compressors=[ZstdCodec()])
    c[:] = (np.arange(5) + 2j).astype("c8")
    st = root.create_array("strings", shape=(4,), chunks=(3,), dtype=str)
    st[:] = np.array(["one", "twó", "", "four"])
    sc = root.create_array("scalar", shape=(), dtype="float64", fill_value=0.0)
    sc[()] = 6.25
    return [p]


def make_bad_zarr(dest: Path) -> Path:
    p = Path(dest) / "bad.zarr"
    (p / "arr").mkdir(parents=True, exist_ok=True)
    (p / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    (p / "arr" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array", "shape": [4,')  # cut short
    return p


def zarr_expected(path: Path) -> dict[str, np.ndarray]:
    """zarr-python's reading of every array, by path inside the hierarchy."""
    import zarr

    out = {}
    root = zarr.open_group(path, mode="r")
    for name, arr in root.arrays():
        out["/" + name] = arr[()] if arr.shape == () else arr[...]
    for gname, grp in root.groups():
        for name, arr in grp.arrays():
            out[f"/{gname}/{name}"] = arr[...]
    return out


# ---------------------------------------------------------------------------------
# N5
# ---------------------------------------------------------------------------------

N5_COMPRESSIONS = {
    "gzip": {"type": "gzip"},
    "gzip_zlib": {"type": "gzip", "useZlib": True},
    "zstd": {"type": "zstd", "level": 3},
    "blosc": {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    "bzip2": {"type": "bzip2", "blockSize": 9},
    "raw": {"type": "raw"},
    "xz": {"type": "xz"},
}


def make_n5_corpus(dest: Path) -> list[Path]:
    """tensorstore datasets in every compression (numpy C-order shapes given
    here; N5 metadata holds them reversed), groups with attributes, missing
    blocks, and z5py datasets whose edge blocks are truncated."""
    import json

    import tensorstore as ts
    import z5py

    dest = Path(dest)
    p = dest / "container.n5"
    p.mkdir(parents=True, exist_ok=True)
    (p / "attributes.json").write_text(json.dumps({"n5": "4.0.0", "title": "n5 corpus", "pixel": [0.5, 0.5]}))
    img = _ramp((50, 37), "<u2", 7)
    for name, comp in N5_COMPRESSIONS.items():
        dtype = {"zstd": "float32", "blosc": "int32", "xz": "int16"}.get(name, "uint16")
        t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(p / "ts" / name)},
                     "metadata": {"dataType": dtype, "dimensions": [37, 50], "blockSize": [16, 16],
                                  "compression": comp}}, create=True).result()
        t[...] = img.astype(dtype).T
    (p / "ts" / "attributes.json").write_text(json.dumps({"made_by": "tensorstore"}))
    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(p / "ts" / "sparse")},
                 "metadata": {"dataType": "uint8", "dimensions": [40, 30, 20], "blockSize": [10, 10, 10],
                              "compression": {"type": "gzip"}}}, create=True).result()
    t[0:10, 0:10, 0:10] = 1
    t[30:40, 20:30, 10:20] = 2
    attrs_path = p / "ts" / "sparse" / "attributes.json"
    meta = json.loads(attrs_path.read_text())
    meta.update({"resolution": [4.0, 4.0, 40.0], "unit": "nm"})
    attrs_path.write_text(json.dumps(meta))
    f = z5py.File(str(dest / "truncated.n5"), mode="a", use_zarr_format=False)
    d = f.create_dataset("edges", shape=(7, 10), chunks=(3, 4), dtype="uint16", compression="gzip")
    d[:] = np.arange(70, dtype="u2").reshape(7, 10)
    d = f.create_dataset("edges_raw", shape=(5, 9), chunks=(2, 4), dtype="int32", compression="raw")
    d[:] = np.arange(45, dtype="i4").reshape(5, 9) - 20
    f.attrs["made_by"] = "z5py"
    return [p, dest / "truncated.n5"]


def n5_expected(path: Path, dataset: str) -> np.ndarray:
    """tensorstore's reading of an N5 dataset, transposed to C order."""
    import tensorstore as ts

    t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(Path(path) / dataset.strip("/"))}},
                read=True).result()
    return np.asarray(t.read().result()).T


# ---------------------------------------------------------------------------------
# Snapshots: one comparable structure for an HDF5 file and for a domain
# ---------------------------------------------------------------------------------


def _walk_graph(root_key, children: Callable[[Any], list[tuple[str, str, Any]]]):
    """Breadth-first over hard links, names sorted; each group expanded once.

    Returns (name of each object key = its first path, [(path, key)] of every
    hard link, {path: soft target}, {path: (file, path)} of external links)."""
    names = {root_key: "/"}
    hard, soft, ext = [], {}, {}
    queue = [(root_key, "/")]
    while queue:
        key, path = queue.pop(0)
        for name, kind, target in sorted(children(key), key=lambda x: x[0]):
            child = ("" if path == "/" else path) + "/" + name
            if kind == "soft":
                soft[child] = target
            elif kind == "external":
                ext[child] = tuple(target)
            else:
                hard.append((child, target))
                if target not in names:
                    names[target] = child
                    queue.append((target, child))
    return names, hard, soft, ext


def hdf5_snapshot(path: Path) -> dict[str, Any]:
    """Everything of an HDF5 file, through h5py."""
    import h5py
    from h5py import h5o

    h5plugins()

    with h5py.File(path, "r") as f:
        objs = {}

        def key_of(obj):
            info = h5o.get_info(obj.id)
            return (info.fileno, info.addr)

        root = key_of(f)
        objs[root] = f

        def children(k):
            g = objs[k]
            if not isinstance(g, h5py.Group):
                return []
            out = []
            for name in g:
                link = g.get(name, getlink=True)
                if isinstance(link, h5py.SoftLink):
                    out.append((name, "soft", link.path))
                elif isinstance(link, h5py.ExternalLink):
                    out.append((name, "external", (link.filename, link.path)))
                else:
                    obj = g[name]
                    k2 = key_of(obj)
                    objs.setdefault(k2, obj)
                    out.append((name, "hard", k2))
            return out

        names, hard, soft, ext = _walk_graph(root, children)

        def ref_path(r):
            return names.get(key_of(f[r])) if r else None

        snap = {"objects": {}, "soft": soft, "external": ext,
                "links": sorted((p, names[k]) for p, k in hard)}
        for k, name in names.items():
            obj = objs[k]
            entry: dict[str, Any] = {"attrs": {n: _norm(_h5attr(obj, n), ref_path) for n in obj.attrs}}
            if isinstance(obj, h5py.Dataset):
                entry["kind"] = "dataset"
                if obj.shape is None:
                    entry["value"] = None
                else:
                    entry["value"] = _norm(obj[()], ref_path)
                entry["shape"] = obj.shape
                entry["maxshape"] = obj.maxshape if obj.shape is not None else None
                entry["fill"] = _norm(obj.fillvalue, ref_path) if _user_fill(obj) else None
            elif isinstance(obj, h5py.Group):
                entry["kind"] = "group"
            else:
                entry["kind"] = "datatype"
            snap["objects"][name] = entry
        return snap


def _user_fill(d) -> bool:
    from h5py import h5d

    try:
        return d.id.get_create_plist().fill_value_defined() == h5d.FILL_VALUE_USER_DEFINED \
            and d.dtype.kind not in "OV" and not (d.dtype.names and any(d.dtype[n].kind == "O" for n in d.dtype.names))
    except Exception:  # pragma: no cover
        return False


def _h5attr(obj, name):
    import h5py

    v = obj.attrs[name]
    return None if isinstance(v, h5py.Empty) else v


def domain_snapshot(catalog, domain: str) -> dict[str, Any]:
    """Everything of a domain, through polyfs's model (chunks decoded here)."""
    from polyfs.model import ids as _ids
    from polyfs.model import values

    model = catalog.load(domain)

    def children(obj_id):
        g = model.groups.get(obj_id)
        if g is None:
            return []
        out = []
        for name, link in g.links.items():
            if link.kind == "soft":
                out.append((name, "soft", link.h5path))
            elif link.kind == "external":
                out.append((name, "external", (link.domain, link.h5path)))
            else:
                out.append((name, "hard", link.id))
        return out

    names, hard, soft, ext = _walk_graph(model.domain.root, children)

    def ref_path(v):
        oid = values.ref_from_json(v)
        return names.get(oid) if oid else None

    snap = {"objects": {}, "soft": soft, "external": ext, "links": sorted((p, names[k]) for p, k in hard)}
    for oid, name in names.items():
        obj = model.get(oid)
        entry: dict[str, Any] = {"attrs": {}}
        for an, attr in obj.attributes.items():
            arr = None if attr.shape.kind == "null" else values.to_numpy(attr.type, attr.shape, attr.value)
            entry["attrs"][an] = _norm(arr, ref_path, attr.type)
        kind = _ids.kind_of(oid)
        entry["kind"] = kind
        if kind == "dataset":
            entry["value"] = _norm(read_dataset(catalog, obj), ref_path, obj.type)
            entry["shape"] = None if obj.shape.kind == "null" else obj.shape.array_shape
            entry["maxshape"] = None if obj.shape.kind == "null" else (
                obj.shape.maxdims if obj.shape.maxdims is not None else obj.shape.array_shape)
            entry["fill"] = None if obj.fill_value is None else _norm(
                values.fill_array(obj.type, obj.fill_value, ()), ref_path, obj.type)
        snap["objects"][name] = entry
    return snap


def read_dataset(catalog, ds) -> np.ndarray | None:
    """A dataset's whole array from its stored chunks (fill value where missing)."""
    from polyfs.codecs import vlen
    from polyfs.model import values

    if ds.shape.kind == "null":
        return None
    dims = ds.shape.array_shape
    pipe = catalog.pipeline(ds)
    idx = catalog.chunk_index(ds)
    out = values.fill_array(ds.type, ds.fill_value, dims)
    if ds.type.is_vlen and out.dtype.kind != "O" and not out.dtype.names:
        out = out.astype(object)
    dt = ds.type.numpy()
    base = dt.subdtype[0] if dt.subdtype else dt
    inner = dt.subdtype[1] if dt.subdtype else ()
    chunks = ds.chunks
    for linear in idx.linear:
        coords = idx.coords_of(int(linear))
        raw = pipe.decode(catalog.store.get(idx.key(int(linear))))
        count = math.prod(chunks) if chunks else 1
        if ds.type.is_vlen:
            block = vlen.decode(ds.type, raw, count).reshape(chunks)
        else:
            block = np.frombuffer(raw, dtype=base).reshape(tuple(chunks) + tuple(inner))
        if not dims:
            out[()] = block.reshape(inner or ())[()] if not inner else block.reshape(inner)
            continue
        sl = tuple(slice(c * n, min((c + 1) * n, d)) for c, n, d in zip(coords, chunks, dims))
        out[sl] = block[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def _norm(v: Any, ref_path: Callable[[Any], Any], t=None) -> Any:
    """Values in one canonical form: native byte order, str for all text, paths
    for references, complex as [r, i], nested lists for records and sequences."""
    import h5py

    if v is None:
        return None
    if isinstance(v, h5py.Reference):
        return ref_path(v)
    if isinstance(v, (str, bytes, np.bytes_, np.str_)):
        return ref_path(v) if t is not None and _is_ref(t) else _text(v)
    arr = np.asarray(v)
    kind = arr.dtype.kind
    if kind == "c":
        return _tree(arr, lambda e: [np.asarray(e.real), np.asarray(e.imag)])
    if arr.dtype.names:
        fts = _fields(t)
        return _tree(arr, lambda e: [_norm(e[n], ref_path, fts.get(n)) for n in arr.dtype.names])
    if h5py.check_dtype(ref=arr.dtype) is not None or (t is not None and _is_ref(t)):
        return _tree(arr, ref_path)
    if kind == "V":
        return _tree(arr, lambda e: bytes(e))
    if kind in "OSUT":
        base = _vbase(t)

        def elem(e):
            if isinstance(e, h5py.Reference):
                return ref_path(e)
            if isinstance(e, (str, bytes, np.bytes_, np.str_)):
                return _text(e)
            return _norm(e, ref_path, base)
        return _tree(arr, elem)
    if kind == "b":
        return arr.astype(bool)
    return arr.astype(arr.dtype.newbyteorder("="))


def _text(v) -> str:
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).rstrip(b"\0").decode("utf-8", "replace")
    return str(v)


def _tree(arr: np.ndarray, fn):
    """Nested lists over the array's own dims; ``fn`` for each element."""
    def rec(idx: tuple) -> Any:
        if len(idx) == arr.ndim:
            return fn(arr[idx])
        return [rec(idx + (i,)) for i in range(arr.shape[len(idx)])]
    return rec(())


def _is_ref(t) -> bool:
    from polyfs.model import types as T

    t = T.resolved(t)
    if isinstance(t, T.ArrayType):
        return _is_ref(t.base)
    return isinstance(t, T.ReferenceType)


def _fields(t) -> dict:
    from polyfs.model import types as T

    t = T.resolved(t) if t is not None else None
    if isinstance(t, T.CompoundType):
        return dict(t.fields)
    return {}


def _vbase(t):
    from polyfs.model import types as T

    t = T.resolved(t) if t is not None else None
    return t.base if isinstance(t, (T.VlenType, T.ArrayType)) else None


def assert_snapshots_equal(a: dict, b: dict, where: str = "") -> None:
    """Structure, links, attributes and values identical (NaN equal to NaN)."""
    assert sorted(a["objects"]) == sorted(b["objects"]), f"{where}: objects differ"
    assert a["soft"] == b["soft"], f"{where}: soft links differ"
    assert a["external"] == b["external"], f"{where}: external links differ"
    assert a["links"] == b["links"], f"{where}: hard links differ"
    for path in a["objects"]:
        x, y = a["objects"][path], b["objects"][path]
        assert x["kind"] == y["kind"], f"{where}{path}: kind"
        assert sorted(x["attrs"]) == sorted(y["attrs"]), f"{where}{path}: attribute names"
        for n in x["attrs"]:
            assert_value_equal(x["attrs"][n], y["attrs"][n], f"{where}{path} attribute {n}")
        if x["kind"] == "dataset":
            assert tuple(x["shape"] or ()) == tuple(y["shape"] or ()), f"{where}{path}: shape"
            assert tuple(x["maxshape"] or ()) == tuple(y["maxshape"] or ()), f"{where}{path}: maxshape"
            assert_value_equal(x["value"], y["value"], f"{where}{path} value")
            assert_value_equal(x["fill"], y["fill"], f"{where}{path} fill value")


def assert_value_equal(x: Any, y: Any, where: str) -> None:
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        xa, ya = np.asarray(x), np.asarray(y)
        assert xa.shape == ya.shape, f"{where}: shape {xa.shape} != {ya.shape}"
        assert xa.dtype == ya.dtype, f"{where}: dtype {xa.dtype} != {ya.dtype}"
        if xa.dtype.kind in "fc" or ya.dtype.kind in "fc":
            assert np.array_equal(xa.astype(float) if xa.dtype.kind != "c" else xa,
                                  ya.astype(float) if ya.dtype.kind != "c" else ya, equal_nan=True), where
            assert np.array_equal(np.signbit(xa.real), np.signbit(ya.real)), f"{where}: signed zeros"
        else:
            assert np.array_equal(xa, ya), f"{where}: {xa!r} != {ya!r}"
        return
    if isinstance(x, list) and isinstance(y, list):
        assert len(x) == len(y), f"{where}: length {len(x)} != {len(y)}"
        for i, (p, q) in enumerate(zip(x, y)):
            assert_value_equal(p, q, f"{where}[{i}]")
        return
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return
    assert x == y, f"{where}: {x!r} != {y!r}"
