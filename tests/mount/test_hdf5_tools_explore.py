"""The HDF5 view used as users use it, with what they write HDF5 with (real mount).

What this module pins, each found by writing through ``hdf5/`` with ordinary tools:

- h5py's LZF is an *optional* filter: HDF5 skips it (filter mask bit set) for every
  chunk it cannot shrink (random or small data). The store has no per-chunk filter
  mask, so such chunks must be stored LZF-encoded after all; they were refused, and
  so was a whole ``h5py "w"`` file, a ``cp`` of it and ``polyfs import`` of it.
- A copied file whose compressed chunks are damaged (blosc, bzip2, LZF, ...) was
  stored as it was (only deflate was checked): every later read of those chunks failed.
  It is refused with ``EINVAL`` at ``close()``, one log line, the store unchanged.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
zarr = pytest.importorskip("zarr")

# files are written by a separate python without HDF5_PLUGIN_PATH: with it set, hdf5plugin's
# shared objects load against another libhdf5 and creating a blosc dataset fails in h5py
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}


def write_with_h5py(code: str, path: Path) -> None:
    """Run ``code`` (h5py, hdf5plugin, np and ``path`` in scope) in a fresh interpreter."""
    prog = "import h5py, hdf5plugin, numpy as np, sys\npath = sys.argv[1]\n" + textwrap.dedent(code)
    res = subprocess.run([sys.executable, "-c", prog, str(path)], capture_output=True, text=True,
                         env=CLEAN_ENV, timeout=120)
    assert res.returncode == 0, res.stderr


def snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def check_deep(store: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "polyfs", "check", str(store), "--deep"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.fixture
def seeded_store(tmp_path):
    """A store holding one small domain, ``/seed.h5``."""
    src = tmp_path / "seed.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.arange(10))
    store = tmp_path / "store"
    import_source(src, str(store), progress=False)
    return store


RANDOM_LZF = """
rng = np.random.default_rng(7)
with h5py.File(path, "w") as f:
    f.create_dataset("noise", data=rng.integers(0, 2**16, (40, 50)).astype("u2"), chunks=(16, 16),
                     compression="lzf")
    f.create_dataset("shuffled", data=rng.random((30, 30)).astype("f8"), chunks=(8, 8), shuffle=True,
                     compression="lzf")
    f.create_dataset("tiny", data=np.arange(3, dtype="u1"), chunks=(3,), compression="lzf")
"""


def _random_lzf_values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"noise": rng.integers(0, 2**16, (40, 50)).astype("u2"), "shuffled": rng.random((30, 30)),
            "tiny": np.arange(3, dtype="u1")}


def test_lzf_chunks_hdf5_could_not_shrink_are_stored(mount_store, seeded_store, tmp_path):
    """h5py "w" and cp of files whose LZF chunks HDF5 left unfiltered (filter mask 1)."""
    local = tmp_path / "noise.h5"
    write_with_h5py(RANDOM_LZF, local)
    with h5py.File(local) as f:  # the premise: HDF5 skipped LZF for these chunks
        assert f["noise"].id.get_chunk_info(0).filter_mask == 1
    want = _random_lzf_values()
    m = mount_store(str(seeded_store))
    write_with_h5py(RANDOM_LZF, m.path / "hdf5" / "made.h5")  # h5py "w" through the view
    subprocess.run(["cp", str(local), str(m.path / "hdf5" / "copied.h5")], check=True, timeout=60)
    for name in ("made", "copied"):
        with h5py.File(m.path / "hdf5" / f"{name}.h5", "r") as f:
            for ds, data in want.items():
                np.testing.assert_array_equal(f[ds][()], data)
                assert f[ds].compression == "lzf"
                assert all(f[ds].id.get_chunk_info(i).filter_mask == 0 for i in range(f[ds].id.get_num_chunks()))
        root = zarr.open_group(str(m.path / "zarr" / f"{name}.zarr"), mode="r")
        np.testing.assert_array_equal(root["noise"][:], want["noise"])

    # r+ into an existing LZF dataset and a new one, with data LZF cannot shrink
    fresh = np.random.default_rng(8).integers(0, 2**16, (40, 50)).astype("u2")
    with h5py.File(m.path / "hdf5" / "made.h5", "r+") as f:
        f["noise"][...] = fresh
        f.create_dataset("more", data=fresh[:16, :16], chunks=(16, 16), compression="lzf")
    with h5py.File(m.path / "hdf5" / "made.h5", "r") as f:
        np.testing.assert_array_equal(f["noise"][()], fresh)
        np.testing.assert_array_equal(f["more"][()], fresh[:16, :16])
    assert "refused" not in m.log_text()
    m.stop()
    check_deep(seeded_store)

    # polyfs import of the same file
    other = tmp_path / "other"
    import_source(local, str(other), progress=False)
    check_deep(other)


DAMAGED = {
    "blosc": "hdf5plugin.Blosc(cname='lz4', clevel=5)",
    "bzip2": "hdf5plugin.BZip2()",
    "lzf": "dict(compression='lzf')",
    "lz4": "hdf5plugin.LZ4()",
}


@pytest.mark.parametrize("codec", sorted(DAMAGED))
def test_a_copied_file_with_a_damaged_chunk_is_refused(mount_store, seeded_store, tmp_path, codec):
    src = tmp_path / f"damaged_{codec}.h5"
    write_with_h5py(f"""
        with h5py.File(path, "w") as f:
            f.create_dataset("d", data=np.arange(4096, dtype="i4").reshape(64, 64) % 7, chunks=(32, 32),
                             **{DAMAGED[codec]})
            info = f["d"].id.get_chunk_info(1)
        b = bytearray(open(path, "rb").read())
        for i in range(min(info.size // 2, 10), min(info.size - 2, 40)):
            b[info.byte_offset + i] ^= 0x5A
        open(path, "wb").write(b)
    """, src)
    with h5py.File(src) as f, pytest.raises(OSError):  # the premise: HDF5 cannot read it either
        f["d"][()]
    before = snapshot(seeded_store)
    m = mount_store(str(seeded_store))
    res = subprocess.run(["cp", str(src), str(m.path / "hdf5" / "bad.h5")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and "Invalid argument" in res.stderr, res.stderr
    assert "bad.h5" not in os.listdir(m.path / "hdf5")
    lines = [x for x in m.log_text().splitlines() if "bad.h5" in x]
    assert len(lines) == 1 and "chunk [0, 1]" in lines[0], lines
    m.stop()
    assert snapshot(seeded_store) == before


def test_a_damaged_object_header_is_refused_naming_the_file_once(mount_store, seeded_store):
    """dd over an object header of a domain's file (r+ in place): EINVAL at close, one log
    line naming the file once and the object, the store unchanged."""
    before = snapshot(seeded_store)
    m = mount_store(str(seeded_store))
    path = m.path / "hdf5" / "seed.h5"
    data = path.read_bytes()
    headers = [i for i in range(len(data) - 3) if data[i:i + 4] == b"OHDR"]
    assert len(headers) == 2  # the root group's and /x's (version 2 headers)
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, b"\xff" * 8, headers[1] + 8)
    with pytest.raises(OSError) as exc:
        os.close(fd)
    assert exc.value.errno == 22
    lines = [x for x in m.log_text().splitlines() if "seed.h5" in x]
    assert len(lines) == 1 and "object /x" in lines[0] and lines[0].count("hdf5/seed.h5") == 1, lines
    m.stop()
    assert snapshot(seeded_store) == before


def test_info_says_the_hdf5_view_transcodes_a_netcdf_compound(mount_store, seeded_store):
    """netCDF-4 compounds are C-struct padded: stored packed, the HDF5 view places the members
    at read time (unfiltered), so ``polyfs info`` must not call its chunks zero-copy."""
    netCDF4 = pytest.importorskip("netCDF4")
    m = mount_store(str(seeded_store))
    d = netCDF4.Dataset(m.path / "hdf5" / "cmp.nc", "w")
    d.createDimension("n", 4)
    t = d.createCompoundType(np.dtype([("a", "i1"), ("b", "f8")]), "pair")
    v = d.createVariable("v", t, ("n",), zlib=True)
    v[:] = np.array([(i, i / 2) for i in range(4)], dtype=[("a", "i1"), ("b", "f8")])
    d.close()
    with h5py.File(m.path / "hdf5" / "cmp.nc") as f:
        assert f["v"].dtype.itemsize == 16 and list(f["v"]["b"]) == [0, 0.5, 1, 1.5]
        assert f["v"].compression is None  # served unfiltered
    m.stop()
    out = subprocess.run([sys.executable, "-m", "polyfs", "info", str(seeded_store), "/cmp.nc"],
                         capture_output=True, text=True, timeout=60).stdout
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("/v "))
    views = next(x for x in lines[at:] if x.strip().startswith("views"))
    assert "hdf5 transcoded (padded compound)" in views, out


def test_attributes_added_to_committed_types_in_place(mount_store, seeded_store):
    """h5py "r+" adding attributes to committed types of a view file. A committed integer
    type's header holds one 18-byte message; HDF5 then writes a continuation message that
    overruns it unless the header is padded to libhdf5's minimum (22 bytes)."""
    types = {"i1": "i1", "i8": "<i8", "S1": "S1", "f4": "<f4", "u2be": ">u2",
             "e": h5py.enum_dtype({"a": 0}, basetype="u1")}
    m = mount_store(str(seeded_store))
    path = m.path / "hdf5" / "types.h5"
    with h5py.File(path, "w") as f:
        for n, t in types.items():
            f[f"t_{n}"] = np.dtype(t)
        f.create_dataset("uses", data=np.arange(3), dtype=f["t_i8"])
    with h5py.File(path, "r+") as f:
        for n in types:
            f[f"t_{n}"].attrs["units"] = "m"
            f[f"t_{n}"].attrs["long"] = "x" * 100
    with h5py.File(path, "r") as f:
        for n, t in types.items():
            assert f[f"t_{n}"].dtype == np.dtype(t)
            assert f[f"t_{n}"].attrs["units"] == "m" and f[f"t_{n}"].attrs["long"] == "x" * 100
        np.testing.assert_array_equal(f["uses"][()], np.arange(3))
    assert "refused" not in m.log_text()
    dump = subprocess.run(["h5dump", "-A", str(path)], capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0 and dump.stdout.count('ATTRIBUTE "units"') == len(types), dump.stderr


def test_attributes_over_64_kib_written_through_the_view_read_back(mount_store, seeded_store, tmp_path):
    """h5py (``libver="latest"``) writing attributes over the 64 KiB an object header message
    holds: they were stored but the view left them out, so the writer's own file lost them on
    its next open. The view now keeps them in dense storage, and ``r+`` edits them in place."""
    m = mount_store(str(seeded_store))
    path = m.path / "hdf5" / "big.h5"
    write_with_h5py("""
    with h5py.File(path, "w", libver="latest") as f:
        d = f.create_dataset("x", data=np.arange(20.0))
        d.attrs["small"] = 1
        d.attrs["big"] = np.arange(20000, dtype="f8")
        f.attrs["notes"] = "n" * 80000
    """, path)
    with h5py.File(path, "r+") as f:
        assert f["x"].attrs["small"] == 1 and f.attrs["notes"] == "n" * 80000
        np.testing.assert_array_equal(f["x"].attrs["big"], np.arange(20000.0))
        f["x"].attrs["more"] = 2
        f["x"].attrs["big"] = np.arange(30000, dtype="f8")
        del f["x"].attrs["small"]
    with h5py.File(path, "r") as f:
        assert sorted(f["x"].attrs) == ["big", "more"] and f["x"].attrs["more"] == 2
        np.testing.assert_array_equal(f["x"].attrs["big"], np.arange(30000.0))
    zattrs = zarr.open_array(str(m.path / "zarr" / "big.zarr" / "x"), mode="r").attrs
    assert sorted(zattrs) == ["big", "more"] and zattrs["big"][-1] == 29999
    dump = subprocess.run(["h5dump", "-A", str(path)], capture_output=True, text=True, timeout=60)
    assert dump.returncode == 0 and 'ATTRIBUTE "notes"' in dump.stdout, dump.stderr
    assert "left out" not in m.log_text() and "refused" not in m.log_text()
    check_deep(seeded_store)
