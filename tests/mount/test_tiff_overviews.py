"""Tier 3: reduced-resolution levels written into ``tiff/`` (``gdaladdo`` on a view file,
tifffile pyramids) are not kept, and say so: one log line naming the file, the
full-resolution image stored unchanged, the store consistent."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from support import deep_check

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")


@pytest.fixture
def store(tmp_path):
    src = tmp_path / "img.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("seed", data=np.arange(64 * 64, dtype="u2").reshape(64, 64), chunks=(32, 32))
    out = tmp_path / "store"
    assert import_source(src, str(out), progress=False) == "/img.h5"
    return out


def dropped_lines(m) -> list[str]:
    return [ln for ln in m.log.read_text().splitlines() if "reduced-resolution" in ln]



@pytest.mark.skipif(shutil.which("gdaladdo") is None, reason="needs GDAL")
def test_gdaladdo_on_a_view_file_keeps_the_image_and_says_overviews_are_dropped(mount_store, store):
    m = mount_store(str(store))
    view = m.path / "tiff" / "img" / "seed.tif"
    before = tifffile.imread(view)
    res = subprocess.run(["gdaladdo", "-q", str(view), "2", "4"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    np.testing.assert_array_equal(tifffile.imread(view), before)
    lines = dropped_lines(m)
    assert lines and "seed" in lines[-1] and "2 reduced-resolution" in lines[-1]
    m.stop()
    deep_check(store)


def test_a_tifffile_pyramid_stores_its_full_resolution_image(mount_store, store):
    m = mount_store(str(store))
    a = (np.arange(128 * 128) % 251).astype("uint8").reshape(128, 128)
    with tifffile.TiffWriter(m.path / "tiff" / "img" / "pyr.tif") as w:
        w.write(a, tile=(64, 64), subifds=1, compression="zlib")
        w.write(a[::2, ::2], tile=(64, 64), subfiletype=1, compression="zlib")
    np.testing.assert_array_equal(tifffile.imread(m.path / "tiff" / "img" / "pyr.tif"), a)
    with h5py.File(m.path / "hdf5" / "img.h5", "r") as f:
        np.testing.assert_array_equal(f["pyr"][...], a)
    assert any("pyr" in ln for ln in dropped_lines(m))
    m.stop()
    deep_check(store)
