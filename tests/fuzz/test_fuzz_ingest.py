"""Fuzzing writes through the Zarr and N5 views (tier 2: operations awaited, no kernel).

Each example gets a fresh domain holding a sharded Zarr array (with one valid shard stored)
and an N5 dataset (with one valid block stored), and writes one mutated file through the
view: a shard (bytes flipped, truncated, spliced; index entries out of range; a wrong
crc32c), an N5 block (mode, ndim, dims, varlength count, payload), a ``zarr.json`` or an
``attributes.json`` (wrong types, huge numbers, deep nesting, invalid UTF-8).

Property (:func:`fuzzkit.attempt`): the write succeeds or is refused with an errno from
polyfs's error tree, nothing unexpected reaches the operations' catch-all, a refusal leaves
the store byte-identical, and after either the array reads back through both views.
"""
from __future__ import annotations

import errno
import json
import struct

import crc32c
import numpy as np
import pytest
from fuzzkit import INTERESTING_INTS, JsonEdit, Unexpected, attempt, budget, deep_nesting, edits, json_edits, \
    mutate, mutations
from hypothesis import example, given
from hypothesis import strategies as st
from writeharness import FS, ZarrLayout, n5_attrs, n5_block, zarr_array_meta

SHARD_META = zarr_array_meta((8, 12), "uint16", (4, 4), shards=(8, 8), codecs=("zstd",))
CRC_META = zarr_array_meta((8, 8), "<i4", (4, 4), codecs=("gzip", "crc32c"))
N5_META = n5_attrs((8, 12), "uint16", (4, 4), "gzip", unit="um")
ROTATE = 40  # examples per FS (each example has its own domain)


class World:
    """Domains on a few reused mounts. A refused write leaves the store as it was (checked), so
    a domain serves example after example until a write is taken; the next example then gets a
    fresh domain (and every :data:`ROTATE` domains a fresh ``FS``)."""

    def __init__(self) -> None:
        self.fs: FS | None = None
        self.guard: Unexpected | None = None
        self.made = 0
        self.current: dict[str, str] = {}  # kind -> stem of its clean domain
        self.lay = ZarrLayout(SHARD_META)
        self.shard = self.lay.encode_file(np.arange(64, dtype="uint16").reshape(8, 8))
        self.crc_chunk = ZarrLayout(CRC_META).encode_file(np.arange(16, dtype="<i4").reshape(4, 4))
        self.block = n5_block(np.arange(16, dtype="uint16").reshape(4, 4), "gzip")

    def domain(self, kind: str) -> tuple[FS, Unexpected, str]:
        """A mount and a clean domain of ``kind``: ``s`` (a sharded Zarr array ``s`` with one valid
        shard), ``c`` (array ``c`` under gzip + crc32c, one chunk) or ``n`` (an N5 dataset ``n``
        made through the N5 view, one block)."""
        stem = self.current.get(kind)
        if stem is not None:
            assert self.fs is not None and self.guard is not None
            return self.fs, self.guard, stem
        if self.fs is None or self.made % ROTATE == 0:
            if self.fs is not None:
                self.fs.close()
            self.fs = FS()
            self.guard = Unexpected(self.fs.ops)
            self.current.clear()
        self.made += 1
        fs, stem = self.fs, f"d{self.made}"
        if kind == "n":
            fs.mkdir(f"n5/{stem}.n5")
            fs.mkdir(f"n5/{stem}.n5/n")
            fs.write_json(f"n5/{stem}.n5/n/attributes.json", N5_META)
            fs.mkdir(f"n5/{stem}.n5/n/0")
            fs.write_file(f"n5/{stem}.n5/n/0/0", self.block)
        else:
            meta, data = (SHARD_META, self.shard) if kind == "s" else (CRC_META, self.crc_chunk)
            fs.mkdir(f"zarr/{stem}.zarr")
            fs.mkdir(f"zarr/{stem}.zarr/{kind}")
            fs.write_json(f"zarr/{stem}.zarr/{kind}/zarr.json", meta)
            fs.mkdir(f"zarr/{stem}.zarr/{kind}/c")
            fs.mkdir(f"zarr/{stem}.zarr/{kind}/c/0")
            fs.write_file(f"zarr/{stem}.zarr/{kind}/c/0/0", data)
        assert self.guard is not None
        self.guard.check("setting up a domain")
        self.current[kind] = stem
        return fs, self.guard, stem

    def taken(self, kind: str, code: int) -> None:
        """After a write: one that was taken changed the domain, so the next example needs a new one."""
        if code == 0:
            self.current.pop(kind, None)

    def close(self) -> None:
        if self.fs is not None:
            self.fs.close()


@pytest.fixture(scope="module")
def world():
    w = World()
    yield w
    w.close()


def readable(fs: FS, guard: Unexpected, paths: list[str]) -> None:
    """Every path reads without an unexpected exception (a write that was taken is readable); a
    chunk file may be absent (an empty chunk file written deletes the chunk)."""
    for path in paths:
        code = attempt(fs, guard, lambda: fs.read_file(path), f"reading {path}")
        chunk = not path.endswith((".json", ".h5"))
        assert code == 0 or (chunk and code == errno.ENOENT), f"{path} does not read back: errno {code}"


def write_one(world: World, kind: str, rel: str, data: bytes, after: list[str]) -> int:
    """Write ``data`` at ``<view>/<stem>.<suffix>/<rel>`` of a clean domain of ``kind``, check the
    property, read ``after`` (relative to the view directory, and the domain's HDF5 file) back."""
    fs, guard, stem = world.domain(kind)
    top = f"n5/{stem}.n5" if kind == "n" else f"zarr/{stem}.zarr"
    path = f"{top}/{rel}"
    code = attempt(fs, guard, lambda: fs.write_file(path, data), f"writing {path}")
    world.taken(kind, code)
    readable(fs, guard, [f"{top}/{r}" for r in after] + [f"hdf5/{stem}.h5"])
    return code


# -- shards ------------------------------------------------------------------------------------
SHARD_BACK = ["s/zarr.json", "s/c/0/0"]


@budget(40)
@given(bad=edits(4), tail=st.booleans())
@example(bad=[], tail=False)
def test_zarr_shard_mutated(world, bad, tail) -> None:
    """Bytes flipped, truncated, spliced; ``tail``: positions counted from the end (the index)."""
    data = mutate(world.shard[::-1], bad)[::-1] if tail else mutate(world.shard, bad)
    write_one(world, "s", "s/c/0/0", data, SHARD_BACK)


ENTRY = st.sampled_from(INTERESTING_INTS + (10, 100, 200))


@budget(40)
@given(entries=st.lists(st.tuples(ENTRY, ENTRY), min_size=4, max_size=4), good_crc=st.booleans(),
       keep=st.integers(0, 3))
@example(entries=[(2 ** 64 - 1, 2 ** 64 - 1), (0, 2 ** 64 - 1), (2 ** 63, 16), (0, 0)], good_crc=True, keep=0)
def test_zarr_shard_index_entries(world, entries, good_crc, keep) -> None:
    """An index naming ranges outside the shard, overlapping or empty (crc32c right or wrong);
    the first ``keep`` inner chunks keep their real entries."""
    body, index = world.shard[:-68], np.frombuffer(world.shard[-68:-4], dtype="<u8").reshape(4, 2).copy()
    for i, (off, nb) in enumerate(entries[keep:], start=keep):
        index[i] = (off, nb)
    raw = index.tobytes()
    crc = crc32c.crc32c(raw) ^ (0 if good_crc else 0xDEAD)
    write_one(world, "s", "s/c/0/0", body + raw + struct.pack("<I", crc), SHARD_BACK)


@budget(25)
@given(bad=edits(3))
def test_zarr_crc32c_chunk_mutated(world, bad) -> None:
    """An unsharded chunk under gzip + crc32c: a wrong checksum, a broken gzip stream."""
    write_one(world, "c", "c/c/0/0", mutate(world.crc_chunk, bad), ["c/zarr.json", "c/c/0/0"])


# -- N5 blocks ---------------------------------------------------------------------------------
N5_BACK = ["n/attributes.json", "n/0/0"]


@budget(40)
@given(mode=st.one_of(st.just(0), st.integers(0, 3), st.integers(0, 65535)),
       ndim=st.one_of(st.just(2), st.integers(0, 4), st.just(65535)),
       dims=st.lists(st.one_of(st.integers(0, 5), st.sampled_from(INTERESTING_INTS).map(lambda v: v & 0xFFFFFFFF)),
                     min_size=0, max_size=3),
       count=st.one_of(st.none(), st.sampled_from(INTERESTING_INTS).map(lambda v: v & 0xFFFFFFFF)),
       payload=st.sampled_from(["valid", "raw", "empty", "garbage"]), garbage=st.binary(max_size=40))
@example(mode=1, ndim=2, dims=[4, 4], count=16, payload="valid", garbage=b"")
@example(mode=0, ndim=2, dims=[4, 4], count=None, payload="raw", garbage=b"")
def test_n5_block_header(world, mode, ndim, dims, count, payload, garbage) -> None:
    """Block headers: modes (default, varlength, unknown), ranks, dims, varlength counts."""
    head = struct.pack(">HH", mode, ndim) + b"".join(struct.pack(">I", d) for d in dims[:ndim])
    if count is not None:
        head += struct.pack(">I", count)
    body = {"valid": world.block[12:], "raw": np.arange(16, dtype=">u2").tobytes(), "empty": b"",
            "garbage": garbage}[payload]
    write_one(world, "n", "n/0/0", head + body, N5_BACK)


@budget(25)
@given(bad=edits(3))
def test_n5_block_mutated(world, bad) -> None:
    write_one(world, "n", "n/0/0", mutate(world.block, bad), N5_BACK)


# -- metadata files ----------------------------------------------------------------------------
def _doc_bytes(doc) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


def write_metadata(world: World, kind: str, data: bytes, new: bool) -> None:
    """A metadata file over the existing array, or (``new``) in a new directory beside it."""
    meta = "n/attributes.json" if kind == "n" else "s/zarr.json"
    if not new:
        write_one(world, kind, meta, data, [meta])
        return
    fs, guard, stem = world.domain(kind)
    top = f"n5/{stem}.n5" if kind == "n" else f"zarr/{stem}.zarr"
    fs.mkdir(f"{top}/x")
    world.taken(kind, 0)  # the new group changed the domain
    rel = f"x/{meta.split('/')[1]}"
    path = f"{top}/{rel}"
    code = attempt(fs, guard, lambda: fs.write_file(path, data), f"writing {path}")
    readable(fs, guard, ([path] if code == 0 else []) + [f"{top}/{meta}", f"hdf5/{stem}.h5"])


@budget(40)
@given(changes=json_edits(), new=st.booleans())
@example(changes=[JsonEdit((5,), -1)], new=True)  # a uint16 fill_value of -1 was taken, then no view rendered
@example(changes=[JsonEdit((5,), 2 ** 16)], new=False)
def test_zarr_json_written(world, changes, new) -> None:
    """A mutated ``zarr.json`` over the existing array (a resize, an attribute change, a refusal)
    or at a new path (a new array or group)."""
    doc = SHARD_META
    for c in changes:
        doc = c.apply(doc)
    write_metadata(world, "s", _doc_bytes(doc), new)


@budget(40)
@given(changes=json_edits(), new=st.booleans())
def test_n5_attributes_written(world, changes, new) -> None:
    doc = N5_META
    for c in changes:
        doc = c.apply(doc)
    write_metadata(world, "n", _doc_bytes(doc), new)


@budget(20)
@given(bad=edits(3, near=lambda _n: st.integers(0, 400)), kind=st.sampled_from(["s", "n"]))
def test_metadata_bytes_written(world, bad, kind) -> None:
    """Byte damage to a metadata file: invalid UTF-8, truncated JSON."""
    write_metadata(world, kind, mutate(_doc_bytes(N5_META if kind == "n" else SHARD_META), bad), False)


@pytest.mark.parametrize("kind", ["s", "n"])
@pytest.mark.parametrize("data", [deep_nesting(100_000), b"\xff\xfe\xfd", b'{"a": "\xed\xa0\x80"}',
                                  b'{"zarr_format": 3, "node_type": "group", "attributes": {"big": 1e999}}',
                                  b'{"zarr_format": 3, "node_type": "group", "attributes": {"n": ' + b"9" * 5000
                                  + b"}}"], ids=["deep", "utf8", "surrogate", "inf", "bignum"])
def test_metadata_pinned(world, kind, data) -> None:
    """Deep nesting (Python's parser recurses), invalid UTF-8, surrogates, huge numbers."""
    write_metadata(world, kind, data, False)


def test_mutations_strategy_draws() -> None:
    """The mutators themselves: every kind applies to empty and short inputs."""
    from hypothesis import find

    for data in (b"", b"a", b"abcdef"):
        find(mutations(), lambda m: isinstance(m.apply(data), bytes))
