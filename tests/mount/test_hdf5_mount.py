"""Tier 3: the HDF5 view through a real FUSE mount, read by h5py, h5dump/h5ls (HDF5 1.10),
pyfive and ncdump (an imported netCDF-4 file); a vanished chunk object fails only the reads that need it (EIO, one log line)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

from conftest import Mount, fuse_available
from polyfs.model.catalog import Catalog
from polyfs.store import open_store
from polyfs.formats.hdf5 import view as hdf5

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "views"))
from test_hdf5_netcdf import ncdump, structure  # noqa: E402
from test_hdf5_view import build_domain  # noqa: E402  (the tier-2 domain and its expected values)

sys.path.pop(0)
pytestmark = pytest.mark.mount
ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    base = tmp_path_factory.mktemp("h5mnt")
    store_dir = base / "store"
    store = open_store(str(store_dir), create=True)
    exp = build_domain(store, "/lab/rich.h5", external=False)
    gone = _victim_domain(store)
    nc = _netcdf(base / "climate.nc")
    from polyfs.importers import import_source

    import_source(nc, str(store_dir), domain="/lab/climate.h5", progress=False)
    (base / "mnt").mkdir()
    m = Mount(str(store_dir), base / "mnt", base / "polyfs.log", []).start()
    try:
        yield m, store, exp, gone, nc
    finally:
        m.stop()


def _victim_domain(store) -> dict:
    """Two big uncompressed datasets: 8 MiB chunks of 1 MiB, far beyond any readahead window."""
    from polyfs.model import types as T
    from polyfs.model.schema import Shape
    from polyfs.model.writer import DomainWriter

    rng = np.random.default_rng(5)
    out = {}
    with DomainWriter(Catalog(store), "/lab/gone.h5") as w:
        for name in ("a_first", "z_victim"):
            arr = rng.integers(0, 255, (8, 1024, 1024), dtype=np.uint8)
            ds = w.add_dataset(w.root, name, T.IntType(1, False), Shape("simple", arr.shape), (1, 1024, 1024), [])
            w.write_array(ds, arr)
            out[name] = arr
    return out


def _netcdf(path: Path) -> Path:
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("y", 3)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "hours since 2020-01-01"
        t[:] = [0, 6]
        v = nc.createVariable("v", "i4", ("time", "y"), zlib=True)
        v.long_name = "a variable"
        v[:] = np.arange(6).reshape(2, 3)
        nc.title = "through the mount"
    return path


def test_ncdump_through_the_mount(setup):
    m, _, _, _, nc = setup
    want = structure(ncdump(nc))
    got = structure(ncdump(m.path / "hdf5" / "lab" / "climate.h5"))
    assert got == want and "int v(time, y) ;" in got["/"]["vars"]


def test_listing_and_size(setup):
    m, store, _, _, _ = setup
    d = m.path / "hdf5" / "lab"
    assert sorted(os.listdir(d)) == ["climate.h5", "gone.h5", "rich.h5"]
    from support import make_ctx, read_node

    ctx, reader = make_ctx(open_store(str(Path(store.url[len("file://"):]))))
    node = hdf5.domain_node(ctx.catalog.load("/lab/rich.h5"), ctx, "rich.h5")
    assert os.stat(d / "rich.h5").st_size == node.size()
    assert (d / "rich.h5").read_bytes() == read_node(node, reader)  # the mount serves the planned bytes


def test_h5py_through_the_mount(setup):
    m, _, exp, _, _ = setup
    with h5py.File(m.path / "hdf5" / "lab" / "rich.h5", "r") as f:
        for name, want in exp["data"].items():
            got = f[name][()]
            if isinstance(want, np.ndarray) and want.dtype.kind != "O" and not want.dtype.names:
                assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), name
        # the referenced objects (HDF5 names one reached by two hard links after whichever it meets first)
        assert [f[r] if r else None for r in f["refs"][()]] == [f[p] if p else None for p in exp["refs"]["/refs"]]
        assert f.attrs["vlen_str"] == "variable ✓"
        assert f["deflate_be"].id.get_num_chunks() > 0 and f["deflate_be"].fillvalue == 7


def test_h5dump_h5ls_and_pyfive_through_the_mount(setup):
    import pyfive

    m, store, exp, _, _ = setup
    path = m.path / "hdf5" / "lab" / "rich.h5"
    ls = subprocess.run(["h5ls", "-r", str(path)], capture_output=True, text=True, env=ENV).stdout
    assert "/grp/sub/points" in ls and "/big_group/s299" in ls
    out = subprocess.run(["h5dump", "-y", "-w", "0", "-d", "/zstd_edge", str(path)], capture_output=True,
                         text=True, env=ENV).stdout
    body = out.split("DATA {", 1)[1].split("}", 1)[0]
    assert [int(v) for v in re.findall(r"\d+", body)] == exp["data"]["/zstd_edge"].reshape(-1).tolist()
    f = pyfive.File(str(path))  # by path: the view's superblock is at 0 (pyfive would lose a user block's base)
    for name in ["/shuffle_deflate", "/fletcher_deflate", "/bool", "/enum", "/f16", "/contig", "/scalar",
                 "/scalar_deflate", "/opaque", "/empty"]:  # every dataset pyfive 1.3 supports
        got, want = np.asarray(f[name][()]), np.asarray(exp["data"][name])
        if want.dtype == bool:
            got = got.astype(bool)
        assert got.shape == want.shape and got.tobytes() == want.astype(got.dtype).tobytes(), name
    assert [x.decode() for x in f["vlen_str"][()]] == exp["data"]["/vlen_str"].tolist()
    assert list(f.attrs) == list(Catalog(store).load("/lab/rich.h5").root.attributes)  # creation order


def test_vanished_chunk_is_eio_for_its_reads_only(setup):
    m, store, _, gone, _ = setup
    cat = Catalog(store)
    ds = cat.load("/lab/gone.h5").resolve("/z_victim")
    idx = cat.chunk_index(ds)
    victim = idx.key(int(idx.linear[-1]))
    path = m.path / "hdf5" / "lab" / "gone.h5"
    os.stat(path)  # the file is planned (chunk sizes listed) before the object vanishes
    store.delete(victim)
    with h5py.File(path, "r") as f:
        with pytest.raises(OSError):
            f["z_victim"][7]
        assert np.array_equal(f["a_first"][()], gone["a_first"])  # everything else still reads
        assert np.array_equal(f["z_victim"][0], gone["z_victim"][0])
    log = m.log_text()
    assert victim in log, log[-2000:]
