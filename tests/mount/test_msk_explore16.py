"""Tier 3: GDAL's external mask sidecar ``<name>.tif.msk`` through a real mount, exploratory round 16.

Debian's GDAL 3.6 writes a per-dataset mask beside the image as ``x.tif.msk`` unless told
``GDAL_TIFF_INTERNAL_MASK=YES``: ``gdal_translate -mask 1``, ``-b 1 -mask 1`` and a plain copy of a
masked file all do. polyfs kept that name only as an in-memory scratch file: ``gdal_translate``
exited 0, ``gdalinfo`` showed the mask while mounted, and after a remount the image had none
(silent data loss). Now the ``.msk`` becomes the image's mask (the sibling dataset its
``tiff_mask`` names, served as its internal mask IFD; no ``x.tif.msk`` is listed, so GDAL sees
one mask), kept across a remount; a ``.msk`` beside no image is refused at create
(EOPNOTSUPP), one of another size at close (EINVAL), each with one log line, the store untouched.
"""
from __future__ import annotations

import errno
import shutil
import subprocess

import numpy as np
import pytest

from support import deep_check, seeded_store
from test_tiff_explore5 import snapshot

pytestmark = pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL's tools")

DATA = np.random.default_rng(1616).integers(1, 200, (1, 100, 150)).astype("u1")
DATA[:, :, :40] = 0  # band 1 as a mask (-mask 1): these columns are transparent
MASK = np.zeros((100, 150), "u1")
MASK[10:60, 20:90] = 255


@pytest.fixture
def src(tmp_path, rasterio):
    """A GeoTIFF with an internal per-dataset mask (rasterio's default)."""
    path = tmp_path / "src.tif"
    with rasterio.open(path, "w", driver="GTiff", width=150, height=100, count=1, dtype="uint8") as d:
        d.write(DATA)
        d.write_mask(MASK)
    return path


def gdal(*args: str) -> None:
    res = subprocess.run(["gdal_translate", "-q", *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def mask_flags(path) -> list[str]:
    out = subprocess.run(["gdalinfo", str(path)], capture_output=True, text=True, timeout=60).stdout
    return [ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Mask Flags" in ln]


def masks_of(rasterio, path) -> np.ndarray:
    with rasterio.open(path) as d:
        return np.where(d.read_masks(1) != 0, 255, 0)


@pytest.mark.parametrize("args", [["-mask", "1"], ["-b", "1", "-mask", "1"], [],
                                  ["--config", "GDAL_TIFF_INTERNAL_MASK", "NO", "-co", "TILED=YES",
                                   "-co", "COMPRESS=DEFLATE"]],
                         ids=["mask1", "b1-mask1", "copy", "tiled-internal-no"])
def test_gdal_translate_msk_is_kept_across_a_remount(mount_store, tmp_path, src, rasterio, args):
    ref = tmp_path / "ref" / "x.tif"
    ref.parent.mkdir()
    gdal(*args, str(src), str(ref))
    assert (tmp_path / "ref" / "x.tif.msk").exists()  # GDAL 3.6 writes it external: what this test is about
    want = masks_of(rasterio, ref)
    store = seeded_store(tmp_path)
    m = mount_store(str(store))
    view = m.path / "tiff" / "exp" / "x.tif"
    gdal(*args, str(src), str(view))
    m.stop()  # unmounted right after gdal_translate exits
    m.start()
    assert not (m.path / "tiff" / "exp" / "x.tif.msk").exists()  # one mask: the internal one served
    assert mask_flags(view) == ["PER_DATASET"]
    np.testing.assert_array_equal(masks_of(rasterio, view), want)
    with rasterio.open(view) as d:
        np.testing.assert_array_equal(d.read(1), DATA[0])
    m.stop()
    deep_check(store)


def test_msk_beside_no_image_is_refused_loudly(mount_store, tmp_path, src):
    ref = tmp_path / "ref" / "x.tif"
    ref.parent.mkdir()
    gdal("-mask", "1", str(src), str(ref))
    store = seeded_store(tmp_path)
    before = snapshot(store)
    m = mount_store(str(store))
    dest = m.path / "tiff" / "exp" / "none.tif.msk"
    with pytest.raises(OSError) as exc:
        shutil.copyfile(tmp_path / "ref" / "x.tif.msk", dest)
    assert exc.value.errno == errno.EOPNOTSUPP
    assert not dest.exists()
    lines = [ln for ln in m.log_text().splitlines() if "none.tif.msk" in ln]
    assert len(lines) == 1 and "GDAL_TIFF_INTERNAL_MASK=YES" in lines[0], lines
    m.stop()
    assert snapshot(store) == before


def test_msk_of_another_size_is_refused_store_untouched(mount_store, tmp_path, src):
    small = tmp_path / "small.tif"
    gdal("-outsize", "75", "50", str(src), str(small))
    assert (tmp_path / "small.tif.msk").exists()
    store = seeded_store(tmp_path)
    m = mount_store(str(store))
    gdal("-mask", "none", str(src), str(m.path / "tiff" / "exp" / "x.tif"))
    m.stop()
    before = snapshot(store)
    m.start()
    with pytest.raises(OSError) as exc:
        shutil.copyfile(tmp_path / "small.tif.msk", m.path / "tiff" / "exp" / "x.tif.msk")
    assert exc.value.errno == errno.EINVAL
    lines = [ln for ln in m.log_text().splitlines() if "x.tif.msk" in ln]
    assert len(lines) == 1 and "75x50" in lines[0], lines
    assert mask_flags(m.path / "tiff" / "exp" / "x.tif") == []  # gdalinfo says nothing for ALL_VALID
    assert not (m.path / "tiff" / "exp" / "x.tif.msk").exists()
    m.stop()
    assert snapshot(store) == before
