"""anndata 0.12 and pynwb 4.2 writing HDF5 and Zarr through a real mount, exploratory round 19.
Every read is compared with the same calls on a local-disk file.

Nothing broke in this round; these tests pin what real single-cell and NWB sessions do:

- anndata: ``write_h5ad`` (csr and csc X, csc int layers, dense layers, obsm/varm/obsp,
  categoricals ordered and not, nullable Int64/boolean/string columns, non-ASCII strings,
  nested ``uns`` dicts, ``uns`` data frames) into ``hdf5/``, read back by anndata from
  ``hdf5/`` and from ``zarr/`` (``read_zarr`` of the domain's Zarr view, consolidated metadata
  included); ``backed="r+"`` edits and ``h5py`` ``r+`` edits (chunk rewrite, delete) give the
  same file as on disk (``h5dump -H`` identical); ``write_zarr`` with
  ``anndata.settings.zarr_write_format = 3`` (plain and ``auto_shard_zarr_v3``) into
  ``zarr/``, read back from ``zarr/`` and ``hdf5/``; a second ``write_zarr`` over the same
  path replaces it. anndata's *default* ``zarr_write_format`` is 2: refused with ENOTSUP and
  a log line saying to write ``zarr_format=3``.
- pynwb: ``NWBHDF5IO(path, "w")`` then ``"a"`` (electrodes table, region references, units
  with ragged columns, soft links of timestamps, processing modules, H5DataIO gzip+shuffle+
  fletcher32 with ``maxshape``, ``DataChunkIterator``), an h5py ``resize`` after it, and a
  second file linking to the first's data (external link): pynwb and ``h5dump -H`` see what
  they see on disk; zarr-python and tensorstore read the arrays through ``zarr/`` with the
  hdmf-zarr spelling of references and links.
"""
from __future__ import annotations

import errno
import re
import subprocess
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from support import quiet_local_mount

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sp = pytest.importorskip("scipy.sparse")
from anndata.tests.helpers import assert_equal  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def cells(fmt: str = "csr") -> "ad.AnnData":
    """A small AnnData holding every element kind anndata 0.12 writes (same data every call)."""
    rng = np.random.default_rng(19)
    n, g = 40, 25
    obs = pd.DataFrame({"cell_type": pd.Categorical(rng.choice(["T", "B", "NK"], n)),
                        "ordered": pd.Categorical(rng.choice(["lo", "hi"], n), categories=["lo", "hi"], ordered=True),
                        "n_genes": rng.integers(0, 100, n).astype("i4"), "score": rng.random(n),
                        "flag": rng.random(n) > 0.5, "barcode": [f"AC{i:04d}é" for i in range(n)],
                        "nullable_int": pd.array([1, None] * (n // 2), dtype="Int64"),
                        "nullable_bool": pd.array([True, None] * (n // 2), dtype="boolean")},
                       index=[f"cell{i}" for i in range(n)])
    var = pd.DataFrame({"symbol": [f"G{i}" for i in range(g)], "hv": rng.random(g) > 0.5},
                       index=[f"gene{i}" for i in range(g)])
    a = ad.AnnData(X=sp.random(n, g, density=0.2, format=fmt, dtype="f4", random_state=3), obs=obs, var=var)
    a.layers["counts"] = sp.random(n, g, density=0.1, format="csc", dtype="i8", random_state=4)
    a.layers["dense"] = rng.random((n, g))
    a.obsm["X_pca"] = rng.random((n, 5)).astype("f4")
    a.obsm["df"] = pd.DataFrame({"u": np.arange(n)}, index=obs.index)
    a.varm["PCs"] = rng.random((g, 5))
    a.obsp["conn"] = sp.random(n, n, density=0.05, format="csr", random_state=5)
    a.uns["neighbors"] = {"params": {"n_neighbors": 15, "method": "umap",
                                     "nested": {"deep": np.array([1, 2, 3]), "s": "x"}}, "arr": np.arange(4)}
    a.uns["colors"] = np.array(["#ff0000", "#00ff00"], dtype=object)
    a.uns.update({"scalar_f": 1.5, "scalar_s": "hello", "bool": True, "empty": {}, "df": pd.DataFrame({"a": [1, 2]})})
    return a


def h5dump_header(path: Path) -> str:
    """``h5dump -H`` without its first line (the file name), object ids and addresses."""
    out = subprocess.run(["h5dump", "-H", str(path)], capture_output=True, text=True, timeout=120, check=True).stdout
    out = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID", out.split("\n", 1)[1])
    return re.sub(r"(GROUP|DATASET) \d+ ", r"\1 ADDR ", out)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_h5ad_into_hdf5_reads_back_through_hdf5_and_zarr(mount_store, tmp_path, fmt):
    _, m = quiet_local_mount(mount_store, tmp_path)
    local, mounted = tmp_path / "local.h5ad", m.path / "hdf5" / "cells.h5ad"
    for p in (local, mounted):
        cells(fmt).write_h5ad(p)
    want = ad.read_h5ad(local)
    assert_equal(want, ad.read_h5ad(mounted))
    assert_equal(want, ad.read_zarr(m.path / "zarr" / "cells.h5ad.zarr"))
    assert h5dump_header(mounted) == h5dump_header(local)


def _edit(path: Path) -> None:
    """A backed session adding columns and uns, then h5py rewriting chunks and deleting a layer."""
    b = ad.read_h5ad(path, backed="r+")
    b.obs["new"] = np.arange(b.n_obs, dtype="f8")
    b.obs["newcat"] = pd.Categorical(["x", "y"] * (b.n_obs // 2))
    b.uns["added"] = {"k": np.arange(3), "s": "v"}
    b.write()
    b.file.close()
    with h5py.File(path, "r+") as f:
        f["X/data"][:5] = -1
        del f["layers/dense"]


def test_backed_h5ad_edits_match_a_local_file(mount_store, tmp_path):
    store, m = quiet_local_mount(mount_store, tmp_path)
    local, mounted = tmp_path / "local.h5ad", m.path / "hdf5" / "bk.h5ad"
    for p in (local, mounted):
        cells().write_h5ad(p)
        _edit(p)
    want = ad.read_h5ad(local)
    m.stop()
    m.start()
    assert_equal(want, ad.read_h5ad(mounted))
    assert_equal(want, ad.read_zarr(m.path / "zarr" / "bk.h5ad.zarr"))
    assert h5dump_header(mounted) == h5dump_header(local)


@pytest.mark.parametrize("shard", [False, True])
def test_write_zarr_v3_reads_back_through_zarr_and_hdf5(mount_store, tmp_path, shard):
    _, m = quiet_local_mount(mount_store, tmp_path)
    with ad.settings.override(zarr_write_format=3, auto_shard_zarr_v3=shard):
        _write_zarr_twice(m, tmp_path)


def _write_zarr_twice(m, tmp_path: Path) -> None:
    local, mounted = tmp_path / "local.zarr", m.path / "zarr" / "cells.zarr"
    for p in (local, mounted):
        cells("csc").write_zarr(p)
    want = ad.read_zarr(local)
    assert_equal(want, ad.read_zarr(mounted))
    assert_equal(want, ad.read_h5ad(m.path / "hdf5" / "cells.h5"))
    smaller = cells()[:30, :20].copy()  # a second run of the notebook replaces the store
    for p in (local, mounted):
        smaller.write_zarr(p)
    want = ad.read_zarr(local)
    assert want.shape == (30, 20)
    assert_equal(want, ad.read_zarr(mounted))
    assert_equal(want, ad.read_h5ad(m.path / "hdf5" / "cells.h5"))


def test_anndata_default_zarr_v2_is_refused_with_a_clear_error(mount_store, tmp_path):
    _, m = quiet_local_mount(mount_store, tmp_path)
    with ad.settings.override(zarr_write_format=2), pytest.raises(OSError) as err:
        cells().write_zarr(m.path / "zarr" / "v2.zarr")
    assert err.value.errno == errno.EOPNOTSUPP
    assert "this view is Zarr v3 (write with zarr_format=3)" in m.log_text()


# -- pynwb -------------------------------------------------------------------------------------------
def _nwb_session(d: Path) -> None:
    """Writes ``s.nwb`` (ecephys tables, units, links, compressed growable data), appends to it
    with pynwb and resizes with h5py, then writes ``h.nwb`` linking to ``s.nwb``'s data."""
    from hdmf.backends.hdf5.h5_utils import H5DataIO
    from hdmf.data_utils import DataChunkIterator
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries
    from pynwb.ecephys import LFP, ElectricalSeries
    from pynwb.file import Subject
    t0 = datetime(2020, 1, 1, tzinfo=timezone.utc)
    nwb = NWBFile(session_description="s", identifier="id1", session_start_time=t0, keywords=["a", "b"],
                  file_create_date=t0)
    nwb.subject = Subject(subject_id="m1", species="Mus musculus", age="P90D", sex="F")
    grp = nwb.create_electrode_group(name="shank0", description="d", location="CA1",
                                     device=nwb.create_device(name="probe"))
    nwb.add_electrode_column("label", "lab")
    for i in range(4):
        nwb.add_electrode(group=grp, location="CA1", label=f"e{i}", x=float(i), y=0.0, z=0.0)
    region = nwb.create_electrode_table_region([0, 2], "two")
    nwb.add_acquisition(ElectricalSeries(name="es", data=np.arange(40, dtype="i2").reshape(20, 2),
                                         electrodes=region, starting_time=0.0, rate=100.0))
    ts = TimeSeries(name="ts", data=np.arange(100.0).reshape(50, 2), unit="V", timestamps=np.linspace(0, 1, 50))
    nwb.add_acquisition(ts)
    nwb.add_acquisition(TimeSeries(name="ts_linked", data=np.ones(50), unit="V", timestamps=ts))
    nwb.add_acquisition(TimeSeries(name="grow", unit="V", rate=1.0, data=H5DataIO(
        np.arange(20, dtype="f4").reshape(10, 2), maxshape=(None, 2), chunks=(4, 2), compression="gzip",
        shuffle=True, fletcher32=True)))
    nwb.add_acquisition(TimeSeries(name="it", unit="V", rate=1.0,
                                   data=DataChunkIterator(data=iter([np.full(3, i, "i4") for i in range(7)]))))
    mod = nwb.create_processing_module("ecephys", "proc")
    mod.add(LFP(electrical_series=ElectricalSeries(name="lfp", data=np.zeros((10, 2)), electrodes=region, rate=10.0)))
    nwb.add_unit_column("quality", "q")
    nwb.add_unit(spike_times=[0.1, 0.2, 0.5], quality="good", electrodes=[0, 1])
    nwb.add_unit(spike_times=[0.3], quality="mua", electrodes=[2])
    with NWBHDF5IO(d / "s.nwb", "w") as io:
        io.write(nwb)
    with NWBHDF5IO(d / "s.nwb", "a") as io:
        nwb = io.read()
        nwb.add_acquisition(TimeSeries(name="ts2", data=np.ones(5), unit="A", rate=1.0))
        io.write(nwb)
    with h5py.File(d / "s.nwb", "a") as f:
        f["acquisition/grow/data"].resize((15, 2))
        f["acquisition/grow/data"][10:] = -1
    with NWBHDF5IO(d / "s.nwb", "r") as io1:
        src = io1.read()
        other = NWBFile(session_description="s2", identifier="id2", session_start_time=t0, file_create_date=t0)
        other.add_acquisition(TimeSeries(name="ext", data=src.acquisition["grow"].data, unit="V", rate=1.0))
        with NWBHDF5IO(d / "h.nwb", "w", manager=io1.manager) as io2:
            io2.write(other, link_data=True)


def _nwb_summary(d: Path) -> list:
    from pynwb import NWBHDF5IO
    with NWBHDF5IO(d / "s.nwb", "r") as io:
        n = io.read()
        es, grow = n.acquisition["es"], n.acquisition["grow"].data
        got = [sorted(n.acquisition), list(n.units["quality"][:]), [list(map(float, x)) for x in n.units["spike_times"][:]],
               [list(e.index) for e in n.units["electrodes"][:]],
               n.electrodes.to_dataframe().drop(columns=["group"]).to_dict("list"),
               es.electrodes.data[:].tolist(), es.electrodes.table.name, str(es.data.dtype),
               n.acquisition["ts_linked"].timestamps.name, n.processing["ecephys"]["LFP"]["lfp"].electrodes.table.name,
               grow[:].tolist(), grow.chunks, grow.compression, grow.shuffle, grow.fletcher32, grow.maxshape,
               n.acquisition["it"].data[:].tolist(), n.subject.subject_id, list(n.keywords[:])]
    with NWBHDF5IO(d / "h.nwb", "r") as io:
        ext = io.read().acquisition["ext"].data
        got += [ext[:].tolist(), Path(ext.file.filename).name]
    return got


def test_pynwb_session_matches_a_local_one_and_the_zarr_view_reads_it(mount_store, tmp_path):
    pytest.importorskip("pynwb")
    _, m = quiet_local_mount(mount_store, tmp_path)
    local = tmp_path / "local"
    local.mkdir()
    warnings.simplefilter("ignore")
    for d in (local, m.path / "hdf5"):
        _nwb_session(d)
    assert _nwb_summary(m.path / "hdf5") == _nwb_summary(local)
    for name in ("s.nwb", "h.nwb"):
        assert h5dump_header(m.path / "hdf5" / name) == h5dump_header(local / name)
    g = zarr.open_group(m.path / "zarr" / "s.nwb.zarr", mode="r")
    np.testing.assert_array_equal(g["acquisition/es/data"][:], np.arange(40, dtype="i2").reshape(20, 2))
    grow = np.vstack([np.arange(20, dtype="f4").reshape(10, 2), np.full((5, 2), -1, "f4")])
    np.testing.assert_array_equal(g["acquisition/grow/data"][:], grow)
    assert g["acquisition/it/data"][:].sum() == 63
    table = g["acquisition/es/electrodes"].attrs["table"]
    assert table == {"zarr_dtype": "object", "value": {"source": ".", "path": "/general/extracellular_ephys/electrodes"}}
    assert g["acquisition/ts_linked"].attrs["zarr_link"] == [
        {"name": "timestamps", "source": ".", "path": "/acquisition/ts/timestamps", "h5_link": "soft"}]
    groups = g["general/extracellular_ephys/electrodes/group"][:]
    assert list(groups) == ['{"source": ".", "path": "/general/extracellular_ephys/shank0"}'] * 4
    h = zarr.open_group(m.path / "zarr" / "h.nwb.zarr", mode="r")
    assert h["acquisition/ext"].attrs["zarr_link"] == [
        {"name": "data", "source": "../s.nwb.zarr", "path": "/acquisition/grow/data", "h5_link": "external"}]
    ts = pytest.importorskip("tensorstore")
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                                  "path": str(m.path / "zarr" / "s.nwb.zarr/acquisition/grow/data")}}).result()
    np.testing.assert_array_equal(arr.read().result(), grow)
