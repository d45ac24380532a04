"""Review of round 14's changes (second pair of eyes): each test pins one defect found in
today's diff. Each was a real bug (fixed; the tests fail on the code before the fix); the fix is in
the review report.

- Zarr v2 import (formats/zarr/source.py ``_v2_array_meta``): an object array of
  variable-length *bytes* (``|O`` + ``vlen-bytes``, zarr-python's ``VariableLengthBytes``)
  is restated as a ``string`` array, so binary values become (surrogate-escaped) UTF-8 text;
  a ``datetime64`` array with zarr-python's default fill (NaT) is refused although the same
  array as Zarr v3 imports; a big-endian array is kept little-endian (the round's rule is
  that decoded data keeps the source's byte order, as it does for Zarr v3).
- Dangling dimension scales (views/hdmf.py ``dimension_names``): every dataset with an axis
  whose scale is gone recomputes ``gone_scales`` over the whole domain, so serving the
  ``zarr.json`` of n such datasets decodes n * n ``DIMENSION_LIST`` attributes.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "importers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fs"))
import corpus  # noqa: E402
from import_helpers import import_all  # noqa: E402
from writeharness import FS  # noqa: E402

from polyfs.importers import import_source  # noqa: E402
from polyfs.model import types as T  # noqa: E402

zarr = pytest.importorskip("zarr")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")


def _v2_group(path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(str(path), mode="w", zarr_format=2)


# -- Zarr v2 import ----------------------------------------------------------------------------
def test_zarr_v2_variable_length_bytes_stay_bytes(tmp_path):
    from zarr.core.dtype import VariableLengthBytes

    src = tmp_path / "vb.zarr"
    a = _v2_group(src).create_array("x", shape=(3,), dtype=VariableLengthBytes(), chunks=(2,))
    a[...] = np.array([b"ab", b"\xff\x00", b"c"], dtype=object)
    cat = import_all([src], tmp_path / "store")
    ds = cat.load("/vb.h5").resolve("/x")
    assert not isinstance(T.resolved(ds.type), T.StringType), "binary values stored as UTF-8 text"
    got = corpus.read_dataset(cat, ds)
    assert [bytes(np.asarray(v, dtype=np.uint8)) if not isinstance(v, (bytes, str)) else v for v in got] == \
        [b"ab", b"\xff\x00", b"c"]


def test_zarr_v2_datetime64_with_default_fill_imports(tmp_path):
    src = tmp_path / "dt.zarr"
    a = _v2_group(src).create_array("x", shape=(3,), dtype="M8[s]", chunks=(2,))
    when = np.array(["2000-01-01", "2001-01-01", "2002-01-01"], dtype="M8[s]")
    a[...] = when
    cat = import_all([src], tmp_path / "store")
    ds = cat.load("/dt.h5").resolve("/x")
    np.testing.assert_array_equal(corpus.read_dataset(cat, ds).astype(np.int64), when.astype(np.int64))


def test_zarr_v3_datetime64_with_default_fill_imports(tmp_path):
    """The control for the test above: the same array written as Zarr v3 imports."""
    src = tmp_path / "dt3.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(str(src), mode="w", zarr_format=3)
    a = g.create_array("x", shape=(3,), dtype="M8[s]", chunks=(2,))
    when = np.array(["2000-01-01", "2001-01-01", "2002-01-01"], dtype="M8[s]")
    a[...] = when
    cat = import_all([src], tmp_path / "store")
    ds = cat.load("/dt3.h5").resolve("/x")
    np.testing.assert_array_equal(corpus.read_dataset(cat, ds).astype(np.int64), when.astype(np.int64))


def test_zarr_v2_big_endian_array_keeps_its_byte_order(tmp_path):
    src = tmp_path / "be.zarr"
    a = _v2_group(src).create_array("x", shape=(3,), dtype=">f8", chunks=(2,))
    a[...] = [1.0, 2.0, 3.0]
    cat = import_all([src], tmp_path / "store")
    ds = cat.load("/be.h5").resolve("/x")
    assert ds.type.to_json()["base"].endswith("BE")
    np.testing.assert_array_equal(corpus.read_dataset(cat, ds), [1.0, 2.0, 3.0])


# -- dangling dimension scales: work per dataset ---------------------------------------------
def _netcdf_sharing_one_dimension(path: Path, n: int) -> Path:
    netCDF4 = pytest.importorskip("netCDF4")
    with netCDF4.Dataset(path, "w") as d:
        d.createDimension("time", 3)
        d.createVariable("time", "f8", ("time",))[:] = [0, 1, 2]
        for i in range(n):
            d.createVariable(f"v{i}", "f4", ("time",))[:] = [i, i, i]
    return path


def test_gone_scale_is_resolved_once_per_domain_not_once_per_dataset(tmp_path, monkeypatch):
    from polyfs.views import hdmf

    n = 40
    fs = FS()
    try:
        import_source(str(_netcdf_sharing_one_dimension(tmp_path / "f.nc", n)), fs.url, domain="/f.nc")
        fs.rm_r("zarr/f.nc.zarr/time")  # the coordinate variable goes; its 40 users keep the dimension
        reader = fs.fresh(read_only=True)
        calls = [0]
        orig = hdmf.dimension_refs

        def counting(ds):
            calls[0] += 1
            return orig(ds)

        monkeypatch.setattr(hdmf, "dimension_refs", counting)
        for i in range(n):
            assert reader.read_json(f"zarr/f.nc.zarr/v{i}/zarr.json")["dimension_names"] == ["time"]
        reader.close()
        assert calls[0] <= 10 * n, f"{calls[0]} DIMENSION_LIST decodes to serve {n} arrays"
    finally:
        fs.close()
