"""Tier 3: review of GDAL's external mask ``x.tif.msk`` through a real mount (round 17).

``gdal_translate -mask 1 src.tif out/x.tif`` on a disk, then ``cp out/x.tif out/x.tif.msk
MNT/tiff/exp/`` (or ``rsync -a out/ MNT/tiff/exp/``) run again — a re-copy, a sync after the
image changed: the image is stored first, written anew without an internal mask, so it stops
naming ``x_mask``; its ``.msk`` then found no mask named and made ``x_mask1``, then ``x_mask2``...
one orphan mask dataset per copy, listed as ``x_maskN.tif`` in every view, and ``rm x.tif`` left
them all behind.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from support import deep_check, seeded_store
from test_msk_explore16 import DATA, MASK, gdal, mask_flags, masks_of, src  # noqa: F401 - fixture

pytestmark = pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL's tools")


@pytest.mark.parametrize("tool", ["cp", "rsync"])
def test_copying_a_gdal_image_and_its_msk_again_keeps_one_mask(mount_store, tmp_path, src, rasterio, tool):  # noqa: F811
    if shutil.which(tool) is None:
        pytest.skip(f"needs {tool}")
    out = tmp_path / "out"
    out.mkdir()
    gdal("-mask", "1", str(src), str(out / "x.tif"))
    assert (out / "x.tif.msk").exists()
    want = masks_of(rasterio, out / "x.tif")
    store = seeded_store(tmp_path)
    m = mount_store(str(store))
    dest = m.path / "tiff" / "exp"
    for _ in range(3):
        cmd = ["cp", str(out / "x.tif"), str(out / "x.tif.msk"), str(dest)] if tool == "cp" else \
            ["rsync", "-r", "--checksum", f"{out}/", f"{dest}/"]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith("x")) == ["x.tif", "x_mask.tif"]
    assert mask_flags(dest / "x.tif") == ["PER_DATASET"]
    assert (masks_of(rasterio, dest / "x.tif") == want).all()
    (dest / "x.tif").unlink()
    assert [p.name for p in dest.iterdir() if p.name.startswith("x")] == []
    m.stop()
    deep_check(store)
