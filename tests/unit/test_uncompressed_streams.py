"""codecs/uncompressed.py: uncompressed-mode streams decode with the codecs' own libraries,
and their sizes are the ones computed without making them (block boundaries included)."""
from __future__ import annotations

import gzip
import zlib

import imagecodecs
import numcodecs
import numpy as np
import pytest

from polyfs.codecs import uncompressed as u

SIZES = [1, 255, 256, 65535, 65536, 65791, 65792, 131072, 131073, 300000]


@pytest.mark.parametrize("n", SIZES)
def test_streams_decode_and_sizes_are_known(n):
    raw = np.random.default_rng(n).bytes(n)
    g = u.gzip_stored(raw)
    assert gzip.decompress(g) == raw and len(g) == u.gzip_stored_size(n)
    z = u.zlib_stored(raw)
    assert zlib.decompress(z) == raw and len(z) == u.zlib_stored_size(n)
    s = u.zstd_raw(raw)
    assert numcodecs.Zstd().decode(s) == raw and imagecodecs.zstd_decode(s) == raw
    assert len(s) == u.zstd_raw_size(n)
    if n % 4 == 0:
        b = u.blosc_memcpy(raw, 4, "zstd", 1)
        assert bytes(numcodecs.Blosc().decode(b)) == raw and len(b) == u.blosc_memcpy_size(n)


def test_stored_blocks_are_what_rfc_1951_says():
    d = u.deflate_stored(b"abc")
    assert d == b"\x01\x03\x00\xfc\xffabc"  # BFINAL=1, BTYPE=00, LEN=3, NLEN=~3
    assert zlib.decompress(d, -15) == b"abc"
