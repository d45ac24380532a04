"""A stateful test of writes through the Zarr and N5 views against a numpy model.

One domain, a few small arrays made through either view; random steps create arrays,
write whole shards, read-modify-write part of a shard (like tensorstore: inner chunks
that are not replaced go back byte-identical), write N5 blocks (edge blocks sometimes
truncated as z5py writes them), delete chunk/shard/block files, resize, edit attributes
and delete arrays. After every step every array, read through the Zarr view and the N5
view and decoded by hand, must equal the model, and so must its attributes and the number
of chunk objects in the store.

The model is chunk-level (coordinates -> the whole chunk as stored), because a resize
keeps the data of chunks that stay partly inside, and growing again shows it.

Each step is a new writer process (its own pid) that opens the array through the view
(reads zarr.json / attributes.json) before writing, as a tool invocation does; a
read-modify-write reads and writes within its step. (One process rewriting its own
files, and two processes merging into one shard, are tests of test_write_semantics.py.)
Values are read back through the writing mount after every step, and through a second
mount of the same store at the end of each run.

With hypothesis installed this is a ``RuleBasedStateMachine``; without it (or with
``POLYFS_STATEFUL_DRIVER=random``) the same rules run in seeded random loops.
``POLYFS_STATEFUL_EXAMPLES`` raises the number of examples (hypothesis) or seeds
(fallback), ``POLYFS_STATEFUL_STEPS`` the steps of each; ``POLYFS_STATEFUL_SHRINK=1``
lets hypothesis shrink a failure (off by default: it can take minutes). Setting either
count also lifts pytest-timeout's limit for this file.
"""
from __future__ import annotations

import contextlib
import errno
import math
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from writeharness import (
    FS,
    FsError,
    ZarrLayout,
    decode_shard,
    encode_shard,
    fill_json,
    n5_attrs,
    n5_block,
    n5_user_attrs,
    read_n5_array,
    read_zarr_array,
    zarr_array_meta,
    zarr_group_meta,
)

try:  # hypothesis is optional: a seeded random driver runs the same rules without it
    from hypothesis import HealthCheck, Phase, note, settings
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        initialize,
        invariant,
        precondition,
        rule,
    )

    HAVE_HYPOTHESIS = os.environ.get("POLYFS_STATEFUL_DRIVER", "") != "random"
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_HYPOTHESIS = False

EXAMPLES = int(os.environ.get("POLYFS_STATEFUL_EXAMPLES", "0") or 0)
STEPS = int(os.environ.get("POLYFS_STATEFUL_STEPS", "0") or 0)
SHRINK = os.environ.get("POLYFS_STATEFUL_SHRINK", "") == "1"

STEM = "sm"
ZROOT = f"zarr/{STEM}.zarr"
NROOT = f"n5/{STEM}.n5"
SLOTS = ("a", "b", "grp/c")  # at most one array per slot at a time
DTYPES = ("|u1", "<i2", ">i2", "<f4", ">u2")
CODECS = ("zstd", "gzip", "bytes")
ATTR_NAMES = ("title", "count", "scale", "flags", "labels", "ok")
CHUNK_KEY = re.compile(r"^db/[^/]+/d/[^/]+/\d+(_\d+)*$")  # HSDS schema v2 chunk objects


# -- what a rule draws from -----------------------------------------------------------------
class RandomDraw:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, seq):
        return self.rng.choice(list(seq))

    def bool(self) -> bool:
        return self.rng.random() < 0.5

    def seed(self) -> int:
        return self.rng.randrange(2 ** 32)


if HAVE_HYPOTHESIS:
    class HypothesisDraw:
        def __init__(self, data) -> None:
            self.data = data

        def int(self, lo: int, hi: int) -> int:
            return self.data.draw(st.integers(lo, hi))

        def choice(self, seq):
            return self.data.draw(st.sampled_from(list(seq)))

        def bool(self) -> bool:
            return self.data.draw(st.booleans())

        def seed(self) -> int:
            return self.data.draw(st.integers(0, 2 ** 32 - 1))


# -- the model ---------------------------------------------------------------------------------
@dataclass
class ArrayModel:
    name: str
    via: str  # the view it was made through
    dtype: np.dtype  # element type as written by its creator (values compare by kind and size)
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    fill: Any
    attrs: dict[str, Any]
    stored: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)  # chunk coords -> whole chunk

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunks))

    def in_grid(self, coords) -> bool:
        return all(0 <= c < g for c, g in zip(coords, self.grid))

    def values(self) -> np.ndarray:
        padded = np.full(tuple(g * c for g, c in zip(self.grid, self.chunks)), self.fill, dtype=self.dtype)
        for coords, block in self.stored.items():
            padded[tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, self.chunks))] = block
        return padded[tuple(slice(0, s) for s in self.shape)]

    def resize(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.stored = {c: b for c, b in self.stored.items() if self.in_grid(c)}


def random_values(d, shape, dtype: np.dtype) -> np.ndarray:
    rng = np.random.default_rng(d.seed())
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.integers(-400, 400, shape) / 4).astype(dt)  # exact in float32
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dt)


def random_attrs(d) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(d.int(0, 3)):
        name = d.choice(ATTR_NAMES)
        kind = d.int(0, 5)
        if kind == 0:
            out[name] = "text-" + str(d.int(0, 99))
        elif kind == 1:
            out[name] = d.int(-50, 50)
        elif kind == 2:
            out[name] = d.int(-20, 20) / 4
        elif kind == 3:
            out[name] = [d.int(0, 9) for _ in range(d.int(1, 3))]
        elif kind == 4:
            out[name] = ["x", "yz"][: d.int(1, 2)]
        else:
            out[name] = d.bool()
    return out


def random_fill(d, dtype: np.dtype):
    if np.dtype(dtype).kind == "f":
        return d.choice([0.0, -1.5, 2.25])
    return d.choice([0, 0, 1, 7])


# -- the driver: rules and invariants, independent of how they are chosen -----------------------------
class WriteModel:
    def __init__(self) -> None:
        self.fs = FS()
        self.fs.mkdir(ZROOT)  # a hierarchy as zarr-python makes one: then the root group's zarr.json
        self.fs.write_json(f"{ZROOT}/zarr.json", zarr_group_meta({}))
        self.arrays: dict[str, ArrayModel] = {}
        self.root_attrs: dict[str, Any] = {}
        self.made_grp = False
        self.next_pid = 5_000_000  # above the kernel's pid_max: never a real process
        self.writer = self.fs
        self.log: list[str] = []

    # -- plumbing ----------------------------------------------------------------------------------
    def close(self) -> None:
        self.fs.close()

    def step(self, text: str) -> None:
        self.log.append(text)
        if HAVE_HYPOTHESIS:
            with contextlib.suppress(Exception):  # outside a hypothesis run
                note(text)

    def new_writer(self) -> FS:
        """A new process for each step."""
        self.next_pid += 1
        return self.fs.as_pid(self.next_pid)

    def slot_of(self, name: str) -> str:
        return next(s for s in SLOTS if name == s or (name.startswith(s) and name[len(s):].isdigit()))

    def n5_metadata_ok(self, arr: ArrayModel) -> bool:
        """Whether an N5 attributes.json may be rewritten (always, since N5 declares no fill)."""
        return True

    @staticmethod
    def zpath(name: str) -> str:
        return f"{ZROOT}/{name}"

    @staticmethod
    def npath(name: str) -> str:
        return f"{NROOT}/{name}"

    def zarr_layout(self, w: FS, arr: ArrayModel) -> ZarrLayout:
        return ZarrLayout(w.read_json(f"{self.zpath(arr.name)}/zarr.json"))

    # -- rules -----------------------------------------------------------------------------------
    def create_array(self, d) -> None:
        taken = {self.slot_of(n) for n in self.arrays}
        free = [s for s in SLOTS if s not in taken]
        if not free:
            return
        slot = d.choice(free)
        name = slot  # a deleted array's name is reused: nothing made below it may outlive it
        via = d.choice(["zarr", "n5"])
        ndim = d.choice([2, 2, 3])
        limits = (12, 20) if ndim == 2 else (6, 8, 10)
        chunks = tuple(d.int(2, 5) for _ in range(ndim))
        dtype = np.dtype(d.choice(DTYPES))
        codec = d.choice(CODECS)
        attrs = random_attrs(d)
        w = self.new_writer()
        if name.startswith("grp/") and not self.made_grp:
            w.mkdir(f"{ZROOT}/grp" if via == "zarr" else f"{NROOT}/grp")
            self.made_grp = True
        if via == "zarr":
            factors = tuple(d.choice([1, 2]) for _ in range(ndim)) if d.bool() else None
            shape = tuple(d.int(1, lim) for lim in limits)
            fill = random_fill(d, dtype)
            shards = tuple(c * k for c, k in zip(chunks, factors)) if factors else None
            meta = zarr_array_meta(shape, dtype, chunks, shards=shards, codecs=() if codec == "bytes" else (codec,),
                                   fill=fill, attributes=attrs)
            self.step(f"create {name} via zarr: {dtype.str} shape {shape} chunks {chunks} shards {shards} "
                      f"{codec} fill {fill} attrs {attrs}")
            w.mkdir(self.zpath(name))
            w.write_json(f"{self.zpath(name)}/zarr.json", meta)
        else:
            shape = tuple(d.int(1, lim) for lim in limits)
            dtype = dtype.newbyteorder(">") if dtype.itemsize > 1 else dtype
            fill = 0
            comp = {"bytes": "raw", "zstd": "zstd", "gzip": d.choice(["gzip", "zlib"])}[codec]
            self.step(f"create {name} via n5: {dtype.str} shape {shape} blocks {chunks} {comp} attrs {attrs}")
            w.mkdir(self.npath(name))
            w.write_json(f"{self.npath(name)}/attributes.json", n5_attrs(shape, dtype, chunks, comp, **attrs))
        self.arrays[name] = ArrayModel(name, via, dtype, shape, chunks, fill, attrs)

    def pick(self, d) -> ArrayModel | None:
        return self.arrays[d.choice(sorted(self.arrays))] if self.arrays else None

    def write_whole_shard(self, d) -> None:
        arr = self.pick(d)
        if arr is None:
            return
        w = self.new_writer()
        lay = self.zarr_layout(w, arr)
        pos = tuple(d.int(0, g - 1) for g in lay.file_grid)
        per = lay.per_shard
        block = random_values(d, lay.outer, arr.dtype)
        if d.bool():  # what lies beyond the array's extent: the fill value (zarr-python) or anything
            beyond = np.ones(lay.outer, dtype=bool)
            beyond[tuple(slice(0, max(0, s - p * o)) for s, p, o in zip(arr.shape, pos, lay.outer))] = False
            block[beyond] = arr.fill
        keep = []
        for local in range(math.prod(per)):
            lc = np.unravel_index(local, per)
            coords = tuple(p * k + i for p, k, i in zip(pos, per, lc))
            if not arr.in_grid(coords):
                continue
            if lay.sharded and d.int(0, 5) == 0:  # left out: deleted (write_empty_chunks=False)
                arr.stored.pop(coords, None)
                continue
            keep.append(local)
            sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(lc, arr.chunks))
            arr.stored[coords] = block[sl].copy()
        self.step(f"write whole {'shard' if lay.sharded else 'chunk'} {lay.key(pos)} of {arr.name} "
                  f"(inner chunks {keep})")
        path = f"{self.zpath(arr.name)}/{lay.key(pos)}"
        w.makedirs(path.rsplit("/", 1)[0])
        w.write_file(path, lay.encode_file(block, keep=keep))

    def write_partial_shard(self, d) -> None:
        """Read the file through the view, replace some inner chunks (or a box of an unsharded
        chunk), keep the rest byte-identical, write it back: one process, like tensorstore."""
        arr = self.pick(d)
        if arr is None:
            return
        w = self.new_writer()
        lay = self.zarr_layout(w, arr)
        pos = tuple(d.int(0, g - 1) for g in lay.file_grid)
        path = f"{self.zpath(arr.name)}/{lay.key(pos)}"
        try:
            blob = w.read_file(path)
        except FsError as exc:
            assert exc.errno == errno.ENOENT, exc
            blob = None
        if lay.sharded:
            n = math.prod(lay.per_shard)
            parts = decode_shard(blob, n, lay.index_location) if blob is not None else {}
            inside = []
            for local in range(n):
                lc = np.unravel_index(local, lay.per_shard)
                coords = tuple(p * k + i for p, k, i in zip(pos, lay.per_shard, lc))
                if arr.in_grid(coords):
                    inside.append((local, coords))
            changed = []
            for local, coords in inside:
                if d.int(0, 2) == 0:
                    new = random_values(d, arr.chunks, arr.dtype)
                    parts[local] = lay.encode_chunk(new)
                    arr.stored[coords] = new
                    changed.append(local)
                elif local in parts and d.int(0, 7) == 0:
                    del parts[local]
                    arr.stored.pop(coords, None)
                    changed.append(-local - 1)
            self.step(f"read-modify-write shard {lay.key(pos)} of {arr.name}: {changed} (+new, -dropped)")
            out = encode_shard(parts, n, lay.index_location)
        else:
            coords = pos
            old = lay.decode_chunk(blob) if blob is not None else np.full(arr.chunks, arr.fill, dtype=lay.dtype)
            assert blob is None or coords in arr.stored
            new = old.copy()
            lo = [d.int(0, c - 1) for c in arr.chunks]
            hi = [d.int(a + 1, c) for a, c in zip(lo, arr.chunks)]
            box = tuple(slice(a, b) for a, b in zip(lo, hi))
            new[box] = random_values(d, tuple(b - a for a, b in zip(lo, hi)), arr.dtype)
            arr.stored[coords] = new.astype(arr.dtype)
            self.step(f"read-modify-write chunk {lay.key(pos)} of {arr.name}: box {lo}..{hi}")
            out = lay.encode_chunk(new)
        w.makedirs(path.rsplit("/", 1)[0])
        w.write_file(path, out)

    def write_n5_block(self, d) -> None:
        arr = self.pick(d)
        if arr is None:
            return
        w = self.new_writer()
        attrs = w.read_json(f"{self.npath(arr.name)}/attributes.json")
        block = tuple(reversed(attrs["blockSize"]))
        assert block == arr.chunks
        coords = tuple(d.int(0, g - 1) for g in arr.grid)
        dims = tuple(min(c, s - i * c) for i, c, s in zip(coords, arr.chunks, arr.shape))
        truncated = dims != arr.chunks and d.bool()
        values = random_values(d, dims if truncated else arr.chunks, arr.dtype)
        if truncated:  # z5py: the edge block cut to the array, padded with the fill value on ingest
            full = np.full(arr.chunks, arr.fill, dtype=arr.dtype)
            full[tuple(slice(0, s) for s in dims)] = values
            arr.stored[coords] = full
        else:
            arr.stored[coords] = values
        rel = "/".join(str(c) for c in reversed(coords))
        self.step(f"write n5 block {rel} of {arr.name}{' (truncated to ' + str(dims) + ')' if truncated else ''}")
        path = f"{self.npath(arr.name)}/{rel}"
        w.makedirs(path.rsplit("/", 1)[0])
        w.write_file(path, n5_block(values, attrs["compression"]))

    def delete_file(self, d) -> None:
        arr = self.pick(d)
        if arr is None or not arr.stored:
            return
        coords = d.choice(sorted(arr.stored))
        w = self.new_writer()
        if d.bool():
            lay = self.zarr_layout(w, arr)
            pos = tuple(c // k for c, k in zip(coords, lay.per_shard))
            gone = [c for c in arr.stored if tuple(x // k for x, k in zip(c, lay.per_shard)) == pos]
            path = f"{self.zpath(arr.name)}/{lay.key(pos)}"
        else:
            gone = [coords]
            path = f"{self.npath(arr.name)}/{'/'.join(str(c) for c in reversed(coords))}"
        self.step(f"unlink {path}")
        w.unlink(path)
        for c in gone:
            arr.stored.pop(c, None)

    def resize(self, d) -> None:
        arr = self.pick(d)
        if arr is None:
            return
        w = self.new_writer()
        limits = (12, 20) if len(arr.shape) == 2 else (6, 8, 10)
        shape = tuple(d.int(1, lim) for lim in limits)
        if d.bool() or not self.n5_metadata_ok(arr):
            meta = w.read_json(f"{self.zpath(arr.name)}/zarr.json")
            meta["shape"] = list(shape)
            self.step(f"resize {arr.name} to {shape} via zarr.json")
            w.write_json(f"{self.zpath(arr.name)}/zarr.json", meta)
        else:
            attrs = w.read_json(f"{self.npath(arr.name)}/attributes.json")
            attrs["dimensions"] = list(reversed(shape))
            self.step(f"resize {arr.name} to {shape} via attributes.json")
            w.write_json(f"{self.npath(arr.name)}/attributes.json", attrs)
        arr.resize(shape)

    def edit_attributes(self, d) -> None:
        w = self.new_writer()
        attrs = random_attrs(d)
        via = d.choice(["zarr", "n5"])
        arr = self.pick(d) if self.arrays and d.int(0, 3) else None
        if arr is not None and not self.n5_metadata_ok(arr):
            via = "zarr"
        if arr is None:
            self.step(f"set root attributes {attrs} via {via}")
            if via == "zarr":
                w.write_json(f"{ZROOT}/zarr.json", zarr_group_meta(attrs))
            else:
                w.write_json(f"{NROOT}/attributes.json", {**attrs, **({"n5": "4.0.0"} if d.bool() else {})})
            self.root_attrs = attrs
            return
        self.step(f"set attributes of {arr.name} to {attrs} via {via}")
        if via == "zarr":
            meta = w.read_json(f"{self.zpath(arr.name)}/zarr.json")
            meta["attributes"] = attrs
            w.write_json(f"{self.zpath(arr.name)}/zarr.json", meta)
        else:
            shown = w.read_json(f"{self.npath(arr.name)}/attributes.json")
            w.write_json(f"{self.npath(arr.name)}/attributes.json",
                         {**{k: v for k, v in shown.items() if k not in n5_user_attrs(shown)}, **attrs})
        arr.attrs = attrs

    def delete_array(self, d) -> None:
        arr = self.pick(d)
        if arr is None:
            return
        w = self.new_writer()
        via = d.choice(["zarr", "n5"])
        path = self.zpath(arr.name) if via == "zarr" else self.npath(arr.name)
        meta = "zarr.json" if via == "zarr" else "attributes.json"
        if d.bool():
            self.step(f"delete {arr.name}: unlink {meta}, then rm -r {path}")
            w.unlink(f"{path}/{meta}")
        else:
            self.step(f"delete {arr.name}: rm -r {path}")
        w.rm_r(path)  # plain rm -r: chunk directories the view made stay until removed
        del self.arrays[arr.name]

    RULES = (("create_array", 3), ("write_whole_shard", 4), ("write_partial_shard", 4), ("write_n5_block", 3),
             ("delete_file", 2), ("resize", 2), ("edit_attributes", 2), ("delete_array", 1))

    # -- invariants ---------------------------------------------------------------------------------
    def check(self, r: FS | None = None) -> None:
        """The views equal the model: through the writing mount, or through ``r``."""
        fs = self.fs
        r = r or fs
        top = {n.split("/")[0] for n in self.arrays} | ({"grp"} if self.made_grp else set())
        assert set(fs.ls(ZROOT)) == top | {"zarr.json"}
        assert set(fs.ls(NROOT)) == top | {"attributes.json"}
        assert fs.read_json(f"{ZROOT}/zarr.json")["attributes"] == self.root_attrs
        assert n5_user_attrs(fs.read_json(f"{NROOT}/attributes.json")) == self.root_attrs
        for arr in self.arrays.values():
            want = arr.values()
            meta = fs.read_json(f"{self.zpath(arr.name)}/zarr.json")
            assert tuple(meta["shape"]) == arr.shape, (arr.name, meta["shape"])
            assert meta["fill_value"] == fill_json(arr.fill, arr.dtype), (arr.name, meta["fill_value"])
            assert meta["attributes"] == arr.attrs, (arr.name, meta["attributes"])
            assert ZarrLayout(meta).inner == arr.chunks
            _, got = read_zarr_array(r, self.zpath(arr.name))
            assert (got.dtype.kind, got.dtype.itemsize) == (arr.dtype.kind, arr.dtype.itemsize)
            np.testing.assert_array_equal(got, want, err_msg=f"{arr.name} through the Zarr view")
            n5 = fs.read_json(f"{self.npath(arr.name)}/attributes.json")
            assert n5_user_attrs(n5) == arr.attrs, (arr.name, n5)
            assert tuple(reversed(n5["dimensions"])) == arr.shape
            _, got = read_n5_array(r, self.npath(arr.name))
            np.testing.assert_array_equal(got, want, err_msg=f"{arr.name} through the N5 view")
        chunk_objects = sum(1 for k in fs.snapshot() if CHUNK_KEY.match(k))
        assert chunk_objects == sum(len(a.stored) for a in self.arrays.values()), "chunk objects in the store"


def run_random(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    d = RandomDraw(rng)
    m = WriteModel()
    names = [n for n, _ in WriteModel.RULES]
    weights = [w for _, w in WriteModel.RULES]
    try:
        for _ in range(steps):
            getattr(m, rng.choices(names, weights)[0])(d)
            m.check()
        m.check(m.fs.fresh(read_only=True))  # what another mount (or this one after a restart) sees
    except BaseException as exc:
        raise AssertionError(f"seed {seed}; steps:\n  " + "\n  ".join(m.log)) from exc
    finally:
        m.close()


# -- how they are run ------------------------------------------------------------------------------
if HAVE_HYPOTHESIS:
    class WriteStateMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.m = WriteModel()
            self.failed = False

        def run(self, rule: str, data=None) -> None:
            try:
                if data is None:
                    self.m.check()
                else:
                    getattr(self.m, rule)(HypothesisDraw(data))
            except BaseException:
                self.failed = True  # teardown must not replace this failure with its own
                raise

        def teardown(self) -> None:
            try:
                if not self.failed:
                    self.m.check(self.m.fs.fresh(read_only=True))  # as another mount sees it
            finally:
                self.m.close()

        @initialize(data=st.data())
        def first_array(self, data):
            self.run("create_array", data)

        @rule(data=st.data())
        def create_array(self, data):
            self.run("create_array", data)

        @precondition(lambda self: self.m.arrays)
        @rule(data=st.data())
        def write_whole_shard(self, data):
            self.run("write_whole_shard", data)

        @precondition(lambda self: self.m.arrays)
        @rule(data=st.data())
        def write_partial_shard(self, data):
            self.run("write_partial_shard", data)

        @precondition(lambda self: self.m.arrays)
        @rule(data=st.data())
        def write_n5_block(self, data):
            self.run("write_n5_block", data)

        @precondition(lambda self: any(a.stored for a in self.m.arrays.values()))
        @rule(data=st.data())
        def delete_file(self, data):
            self.run("delete_file", data)

        @precondition(lambda self: self.m.arrays)
        @rule(data=st.data())
        def resize(self, data):
            self.run("resize", data)

        @rule(data=st.data())
        def edit_attributes(self, data):
            self.run("edit_attributes", data)

        @precondition(lambda self: self.m.arrays)
        @rule(data=st.data())
        def delete_array(self, data):
            self.run("delete_array", data)

        @invariant()
        def views_equal_the_model(self):
            self.run("check")

    WriteStateMachine.TestCase.settings = settings(
        max_examples=EXAMPLES or 12, stateful_step_count=STEPS or 20, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), derandomize=not EXAMPLES,
        phases=list(Phase) if SHRINK else [p for p in Phase if p != Phase.shrink])
    TestWriteStateMachine = WriteStateMachine.TestCase
    if EXAMPLES or STEPS:  # a long run: no pytest-timeout
        TestWriteStateMachine.pytestmark = [pytest.mark.timeout(0)]
else:
    @pytest.mark.timeout(0 if EXAMPLES or STEPS else 600)
    @pytest.mark.parametrize("seed", range(EXAMPLES or 12))
    def test_write_state_machine_seeded(seed):
        """hypothesis is not installed: the same rules, chosen by a seeded random generator."""
        run_random(seed, STEPS or 20)
