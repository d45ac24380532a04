"""Tier 2: TIFFs as libvips writes them into ``tiff/``, exploratory round 16 (operations awaited
directly).

libvips copies an image's ImageDescription onto every page and every SubIFD level it writes. A
stack written by tifffile (its shaped JSON description, ``{"shape": [3, H, W]}``) saved as a
pyramid (``vips tiffsave stack.tif[n=-1] out.tif --tile --pyramid --subifd``: multi-page
pyramids are always SubIFDs in libvips) then has that description on its reduced levels too,
and tifffile's shaped parser makes a series of each level instead of listing it among the
stack's levels. Such a file written into ``tiff/`` was refused with ``EOPNOTSUPP`` ("3 images
of different shapes"), which libvips never reports (it ignores ``close()``'s error: the image was
lost with ``vips`` exiting 0), and ``polyfs import`` made a dataset of the first page's level
beside the stack. Now the stack is stored and its levels are dropped, one log line saying how
many, as for any pyramid written into the view.

ImageMagick creates its output file and closes it before it opens it again to write the image:
that first ``close()`` of a new, empty ``tiff/`` file failed with ``EINVAL`` and logged "flush
refused (EINVAL): not a TIFF file (bad byte-order mark)" for every ``convert`` that then
succeeded. A file made through the mount and closed before anything is written is refused
quietly now (nothing stored, a debug line: ImageMagick ignores that close's error as before); an
existing image emptied (``: > x.tif``) is still a logged refusal.
"""
from __future__ import annotations

import errno
import io
import json
import logging
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_tiff_explore8_fs import fs  # noqa: F401 - fixture (domain /exp.h5)
from writeharness import FS

tifffile = pytest.importorskip("tifffile")

STACK = (np.arange(3 * 64 * 96) % 251).astype("u1").reshape(3, 64, 96)


def vips_like_pyramid(stack: np.ndarray, levels: int = 2) -> bytes:
    """A stack saved as libvips saves a pyramid of pages: every page (NewSubfileType 2) with
    ``levels`` SubIFD levels (NewSubfileType 1), the source's shaped description on all of them."""
    desc = json.dumps({"shape": list(stack.shape)})
    buf = io.BytesIO()
    with tifffile.TiffWriter(buf) as w:
        for page in stack:
            w.write(page, tile=(32, 32), subifds=levels, compression="zlib", photometric="minisblack",
                    description=desc, metadata=None, subfiletype=2)
            for k in range(1, levels + 1):
                f = 2 ** k
                w.write(np.ascontiguousarray(page[::f, ::f]), tile=(16, 16), subfiletype=1, compression="zlib",
                        photometric="minisblack", description=desc, metadata=None)
    return buf.getvalue()


def stored(fs: FS, name: str) -> np.ndarray:
    with h5py.File(io.BytesIO(fs.read_file("hdf5/exp.h5")), "r") as f:
        return f[name][...]


def test_tifffile_sees_the_levels_as_series_of_their_own(tmp_path):
    """The premise: what makes the refusal (tifffile's reading of such a file)."""
    data = vips_like_pyramid(STACK)
    with tifffile.TiffFile(io.BytesIO(data)) as t:
        assert t.is_shaped and len(t.series) == 3
        assert t.series[0].shape == STACK.shape


def test_stack_pyramid_with_copied_description_is_stored(fs, caplog):  # noqa: F811
    caplog.set_level(logging.WARNING)
    fs.write_file("tiff/exp/pyr.tif", vips_like_pyramid(STACK))
    np.testing.assert_array_equal(stored(fs, "pyr"), STACK)
    served = tifffile.imread(io.BytesIO(fs.read_file("tiff/exp/pyr.tif")))
    np.testing.assert_array_equal(served, STACK)
    said = [r.getMessage() for r in caplog.records if "reduced-resolution" in r.getMessage()]
    assert said and "pyr" in said[-1] and "2 reduced-resolution" in said[-1]


def test_stack_pyramid_rewrites_an_existing_stack(fs):  # noqa: F811
    fs.write_file("tiff/exp/st.tif", tifffile_stack(STACK))
    fs.write_file("tiff/exp/st.tif", vips_like_pyramid(255 - STACK, levels=1))
    np.testing.assert_array_equal(stored(fs, "st"), 255 - STACK)


def tifffile_stack(stack: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, stack, photometric="minisblack", tile=(32, 32), compression="zlib")
    return buf.getvalue()


def test_import_of_a_stack_pyramid_is_one_dataset(tmp_path):
    from polyfs.importers import import_source

    src = tmp_path / "pyr.tif"
    src.write_bytes(vips_like_pyramid(STACK))
    out = tmp_path / "store"
    assert import_source(src, str(out), progress=False) == "/pyr.h5"
    reader = FS(str(out), read_only=True)
    try:
        with h5py.File(io.BytesIO(reader.read_file("hdf5/pyr.h5")), "r") as f:
            assert list(f) == ["image"]  # not image0 (the stack) and image1 (page 0's level)
            np.testing.assert_array_equal(f["image"][...], STACK)
    finally:
        reader.close()


@pytest.mark.skipif(shutil.which("vips") is None, reason="needs libvips-tools")
def test_a_file_vips_wrote_is_stored(fs, tmp_path):  # noqa: F811
    src = tmp_path / "stack.tif"
    tifffile.imwrite(src, STACK, photometric="minisblack")
    out = tmp_path / "pyr.tif"
    subprocess.run(["vips", "tiffsave", f"{src}[n=-1]", str(out), "--tile", "--pyramid", "--subifd",
                    "--compression", "deflate", "--tile-width", "32", "--tile-height", "32"],
                   check=True, capture_output=True, timeout=120)
    fs.write_file("tiff/exp/vpyr.tif", Path(out).read_bytes())
    np.testing.assert_array_equal(stored(fs, "vpyr"), STACK)


def test_a_new_tiff_closed_empty_is_no_refusal(fs, caplog):  # noqa: F811
    """ImageMagick's first open of its output: create, close; then the image in a second open."""
    before = fs.state()
    caplog.set_level(logging.WARNING)
    h = fs.open_file("tiff/exp/im.tif")
    try:
        h.flush()  # close(): EINVAL (nothing is stored) is allowed, a logged refusal is not
    except OSError as exc:
        assert exc.errno == errno.EINVAL
    h.release()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert fs.state() == before
    fs.write_file("tiff/exp/im.tif", tifffile_stack(STACK))
    np.testing.assert_array_equal(stored(fs, "im"), STACK)


def test_an_existing_image_emptied_is_still_refused(fs):  # noqa: F811
    fs.write_file("tiff/exp/keep.tif", tifffile_stack(STACK))
    before = fs.state()
    assert fs.errno_of(fs.write_file, "tiff/exp/keep.tif", b"") == errno.EINVAL
    assert fs.state() == before
    np.testing.assert_array_equal(stored(fs, "keep"), STACK)
