"""Tier 1: which datasets the TIFF view shows with samples per pixel (RGB) or complex samples,
and the IFD it writes for them, parsed by tifffile."""
from __future__ import annotations

import io

import numpy as np
import pytest
import tifffile

from polyfs.formats.tiff.image import (
    dataset_image,
    image_like,
    tiff_header,
    tiff_metadata,
    tiff_metadata_size,
)
from polyfs.formats.tiff.raster import raster
from polyfs.model import types as T
from polyfs.model.schema import Attribute, Dataset, Shape

VL = T.StringType(None, "utf8", "nullterm")


def _ds(shape, chunks=None, attrs=None, dtype=None) -> Dataset:
    ds = Dataset("d-00000000-00000000-0000-000000-000001", "g-x", dtype or T.IntType(1, False),
                 Shape("simple", tuple(shape)), tuple(chunks or shape))
    for k, v in (attrs or {}).items():
        ds.attributes[k] = Attribute(k, VL, Shape("scalar"), v)
    return ds


def test_samples_axis_needs_the_dataset_to_say_so():
    assert raster(_ds((64, 80, 3))).samples == 1  # no marker: 64 pages of 80 x 3
    r = raster(_ds((64, 80, 3), (16, 16, 3), {"axes": "YXS", "photometric": "RGB"}))
    assert (r.samples, r.shape, r.chunks, r.grid, r.photometric, r.extra) == (3, (64, 80), (16, 16), (4, 5), 2, ())
    assert raster(_ds((64, 80, 4), attrs={"photometric": "rgb"})).extra == (2,)  # RGBA: unassociated alpha
    r = raster(_ds((2, 64, 80, 2), attrs={"axes": "ZYXS"}))
    assert (r.samples, r.shape, r.photometric, r.extra) == (2, (2, 64, 80), 1, (0,))
    assert raster(_ds((64, 80, 3), (16, 16, 1), {"axes": "YXS"})).samples == 1  # a chunk splits the pixel
    assert raster(_ds((64, 80, 5), attrs={"photometric": "RGB"})).samples == 1


def test_complex_compound_is_an_image_of_complex_samples():
    half = T.FloatType(4, ">")
    ds = _ds((16, 16), dtype=T.CompoundType((("r", half), ("i", half))))
    assert image_like(ds)
    assert raster(ds).sample == np.dtype(">c8")
    other = _ds((16, 16), dtype=T.CompoundType((("a", half), ("b", half))))
    assert not image_like(other)


def _parse(ds: Dataset) -> tifffile.TiffPage:
    image = dataset_image(ds, None, "x", "/x", (16, 16), 1)
    n = tiff_metadata_size(image, False)
    offsets = np.full((image.npages, image.tiles_per_page), 8 + n, dtype=np.int64)
    counts = np.full_like(offsets, 16 * 16 * image.samples * image.dtype.itemsize)
    meta = tiff_metadata(image, 8, offsets, counts, False)
    data = tiff_header(image, False, 8) + meta + bytes(int(counts[0, 0]))
    with tifffile.TiffFile(io.BytesIO(data)) as tif:
        return tif.pages[0], tif.series[0].shape, len(tif.pages)


def test_rgb_dataset_is_one_contig_rgb_page():
    page, shape, npages = _parse(_ds((16, 32, 3), (16, 16, 3), {"axes": "YXS", "photometric": "RGB"}))
    assert (page.imagewidth, page.imagelength, page.samplesperpixel) == (32, 16, 3)
    assert page.photometric.name == "RGB" and int(page.planarconfig) == 1
    assert shape == (16, 32, 3) and npages == 1


def test_rgba_stack_has_extra_alpha():
    page, shape, npages = _parse(_ds((2, 16, 16, 4), (1, 16, 16, 4), {"axes": "IYXS"}))
    assert page.samplesperpixel == 4 and tuple(page.extrasamples) == (2,)
    assert shape == (2, 16, 16, 4) and npages == 2


def test_complex_page_has_sample_format_6():
    half = T.FloatType(8, "<")
    page, shape, _ = _parse(_ds((16, 16), dtype=T.CompoundType((("r", half), ("i", half)))))
    assert int(page.sampleformat) == 6 and page.bitspersample == 128
    assert page.dtype == np.dtype("complex128") and shape == (16, 16)


@pytest.mark.parametrize("name,stem", [("a.tif", "a"), ("a.TIFF", "a"), ("b.Tif", "b"), ("x.tiff", "x"),
                                       (".tif", None), ("a.tf", None), (".hidden.tif", None)])
def test_written_names(name, stem):
    from polyfs.formats.tiff.image import written_stem

    assert written_stem(name) == stem
