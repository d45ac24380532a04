"""Tier 2 (no kernel): what the Zarr and N5 views keep of a writer's own spelling
(exploratory round 5; the tools themselves are in tests/mount/test_zarr_n5_explore5.py).

- A chunk key encoding other than ``default`` + ``/`` is kept with the array, so any
  process (not only the one that wrote ``zarr.json``) finds and stores ``c.0.0``/``0.0``/``0/0``.
- A ``compression`` (N5) or codec chain (Zarr) that reads the same bytes as the view's own
  spelling is shown as written until a writer spells it the view's way.
- The other format's metadata file names are refused, the store as it was.
"""
from __future__ import annotations

import errno
import gzip

import numpy as np
import pytest
from test_write_semantics import fs, refused  # noqa: F401 - fixtures

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _meta(enc: dict | None, codecs: list[dict] | None = None) -> dict:
    meta = {"zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "int16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "fill_value": 0, "codecs": codecs or [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": {}}
    if enc is not None:
        meta["chunk_key_encoding"] = enc
    return meta


@pytest.mark.parametrize("enc,names", [
    ({"name": "default", "configuration": {"separator": "."}}, ["c.0.0", "c.0.1", "c.1.0", "c.1.1"]),
    ({"name": "v2"}, ["0.0", "0.1", "1.0", "1.1"]),
    ({"name": "v2", "configuration": {"separator": "/"}}, ["0/0", "0/1", "1/0", "1/1"]),
], ids=["default-dot", "v2-dot", "v2-slash"])
def test_chunk_key_encoding_is_kept_for_every_writer(fs, enc, names):  # noqa: F811
    fs.mkdir("zarr/k.zarr")
    fs.mkdir("zarr/k.zarr/a")
    fs.write_json("zarr/k.zarr/a/zarr.json", _meta(enc))
    shown = fs.read_json("zarr/k.zarr/a/zarr.json")["chunk_key_encoding"]
    assert shown["name"] == enc["name"] and shown["configuration"]["separator"] == ("/" if "/" in names[0] else ".")
    other = fs.as_pid(4242)  # another process: it knows only what the view shows
    x = np.arange(24, dtype="<i2").reshape(4, 6)
    for name in names:
        i, j = (int(p) for p in name.replace("c.", "").replace("/", ".").split("."))
        if "/" in name:
            other.makedirs("zarr/k.zarr/a/" + name.rsplit("/", 1)[0])
        other.write_file(f"zarr/k.zarr/a/{name}", x[2 * i:2 * i + 2, 3 * j:3 * j + 3].tobytes())
    listed = sorted(n for n in fs.walk_files("zarr/k.zarr/a") if not n.endswith("zarr.json"))
    assert [n.split("zarr/k.zarr/a/", 1)[-1] for n in listed] == names
    # the same chunks through N5 (stored, not scratch files): block 0/0 is the chunk at (0, 0)
    block = fs.read_file("n5/k.n5/a/0/0")
    assert np.frombuffer(block[-12:], ">i2").tolist() == x[:2, :3].reshape(-1).tolist()
    fs.unlink(f"zarr/k.zarr/a/{names[-1]}")
    assert not fs.exists("n5/k.n5/a/1/1")


def test_n5_compression_spelling_is_shown_as_written(fs):  # noqa: F811
    fs.mkdir("n5/c.n5")
    fs.mkdir("n5/c.n5/d")
    attrs = {"dimensions": [3, 2], "blockSize": [3, 2], "dataType": "uint16",
             "compression": {"type": "gzip", "level": -1, "useZlib": False}}  # tensorstore's default
    fs.write_json("n5/c.n5/d/attributes.json", attrs)
    assert fs.read_json("n5/c.n5/d/attributes.json")["compression"] == attrs["compression"]
    payload = np.arange(6, dtype=">u2").tobytes()
    fs.makedirs("n5/c.n5/d/0")
    fs.write_file("n5/c.n5/d/0/0", b"\0\0\0\2\0\0\0\3\0\0\0\2" + gzip.compress(payload))
    got = fs.read_file("n5/c.n5/d/0/0")
    assert gzip.decompress(got[12:]) == payload
    # a writer spelling it the view's way replaces the spelling kept
    fs.write_json("n5/c.n5/d/attributes.json", {**attrs, "compression": {"type": "gzip", "level": 6}})
    assert fs.read_json("n5/c.n5/d/attributes.json")["compression"] == {"type": "gzip", "level": 6}


def test_zarr_codec_spelling_is_shown_as_written(fs):  # noqa: F811
    fs.mkdir("zarr/z.zarr")
    fs.mkdir("zarr/z.zarr/a")
    zstd = {"name": "zstd", "configuration": {"level": 1, "checksum": True}}
    fs.write_json("zarr/z.zarr/a/zarr.json", _meta(None, [{"name": "bytes", "configuration": {"endian": "little"}},
                                                           zstd]))
    assert fs.read_json("zarr/z.zarr/a/zarr.json")["codecs"][1] == zstd
    # a blosc/zstd chain the stored filters do not match (a different level) is not shown
    meta = fs.read_json("zarr/z.zarr/a/zarr.json")
    meta["codecs"][1] = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
    fs.write_json("zarr/z.zarr/a/zarr.json", meta)
    assert fs.read_json("zarr/z.zarr/a/zarr.json")["codecs"][1]["configuration"]["checksum"] is False


@pytest.mark.parametrize("path", ["n5/x.n5/zarr.json", "n5/x.n5/.zarray", "n5/x.n5/g/.zgroup",
                                  "zarr/y.zarr/g/attributes.json"])
def test_the_other_formats_metadata_is_refused(fs, caplog, path):  # noqa: F811
    fs.mkdir("n5/x.n5")
    fs.mkdir("n5/x.n5/g")
    fs.mkdir("zarr/y.zarr")
    fs.mkdir("zarr/y.zarr/g")
    refused(fs, errno.EOPNOTSUPP, fs.write_file, path, b"{}", caplog=caplog, names=path.rsplit("/", 1)[-1])
