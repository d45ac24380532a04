"""Tier 1: files being written (polyfs.fs.overlay) against a bytearray model.

hypothesis is not in the venv, so the property tests are seeded random loops:
every failure names its seed. A tiny budget (a few small pages) makes spilling
happen on nearly every write.
"""
from __future__ import annotations

import hashlib
import io
import os
import random
import sys
import threading
import tracemalloc

import numpy as np
import pytest

from polyfs.fs.overlay import PAGE, Discarded, PendingFile, WriteBudget
from polyfs.vfile import LiteralPiece


class BytesBase:
    """A base file over given bytes that records its reads."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.size = len(self.data)
        self.reads: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def read(self, off: int, n: int) -> bytes:
        with self._lock:
            self.reads.append((off, n))
        return self.data[off:off + n]


class SynthBase:
    """A base file of any size whose bytes are a function of their offset (nothing allocated)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.reads: list[tuple[int, int]] = []

    @staticmethod
    def bytes_at(off: int, n: int) -> bytes:
        i = np.arange(off, off + n, dtype=np.uint64)
        return ((i * np.uint64(2654435761)) >> np.uint64(7)).astype(np.uint8).tobytes()

    def read(self, off: int, n: int) -> bytes:
        self.reads.append((off, n))
        n = max(0, min(n, self.size - off))
        return self.bytes_at(off, n)


class Model:
    """What the file must read: base + writes + truncates, byte by byte, and which bytes
    were touched (written, or brought back by growing after a shrink, or past the base)."""

    def __init__(self, base: bytes) -> None:
        self.base = base
        self.data = bytearray(base)
        self.touched = bytearray(len(base))

    def write(self, off: int, buf: bytes) -> None:
        if not buf:
            return
        end = off + len(buf)
        if end > len(self.data):
            grow = end - len(self.data)
            self.data.extend(bytes(grow))
            self.touched.extend(b"\1" * grow)
        self.data[off:end] = buf
        self.touched[off:end] = b"\1" * len(buf)

    def truncate(self, size: int) -> None:
        if size < len(self.data):
            del self.data[size:]
            del self.touched[size:]
        else:
            grow = size - len(self.data)
            self.data.extend(bytes(grow))
            self.touched.extend(b"\1" * grow)


def check_ranges(f: PendingFile, m: Model, page: int, seed: object) -> None:
    """dirty_ranges covers every touched byte; untouched agrees with the model."""
    size = len(m.data)
    ranges = f.dirty_ranges()
    covered = np.zeros(size, dtype=bool)
    last = -1
    for s, e in ranges:
        assert 0 <= s < e <= size and s > last, (seed, ranges)
        last = e
        covered[s:e] = True
    touched = np.frombuffer(bytes(m.touched), dtype=np.uint8).astype(bool)
    assert not (touched & ~covered).any(), seed
    base = np.frombuffer(m.base[:size], dtype=np.uint8)
    differs = np.ones(size, dtype=bool)
    differs[:len(base)] = np.frombuffer(bytes(m.data[:len(base)]), dtype=np.uint8) != base
    assert not (differs & ~covered).any(), seed
    # untouched: never a false "unchanged"; always True where whole pages are untouched
    rng = random.Random(repr(seed))
    for _ in range(20):
        off = rng.randrange(0, size + 2 * page)
        n = rng.randrange(1, 3 * page)
        got = f.untouched(off, n)
        model_ok = off + n <= size and not any(m.touched[off:off + n])
        if got:
            assert model_ok and m.data[off:off + n] == m.base[off:off + n], (seed, off, n)
        lo, hi = off // page * page, min((off + n - 1) // page * page + page, size)
        if off + n <= size and not any(m.touched[lo:hi]):
            assert got, (seed, off, n)


def random_ops(seed: int, with_base: bool, page: int = 512, limit_pages: int = 3, steps: int = 250) -> None:
    rng = random.Random(seed)
    budget = WriteBudget(limit_pages * page, page_size=page)
    base = BytesBase(rng.randbytes(rng.randrange(0, 20 * page))) if with_base else None
    f = PendingFile("d/x", True, 0.0, budget, base)
    m = Model(base.data if base else b"")
    for step in range(steps):
        size = len(m.data)
        op = rng.random()
        if op < 0.5:
            off = rng.randrange(0, size + 2 * page + 1)
            n = rng.choice([0, 1, rng.randrange(1, 50), rng.randrange(1, 3 * page), page])
            buf = rng.randbytes(n)
            before = len(base.reads) if base else 0
            assert f.write(off, buf) == n
            m.write(off, buf)
            if base is not None:  # base fills: at most the two edge pages, each at most a page
                fills = base.reads[before:]
                assert len(fills) <= 2 and all(k <= page for _, k in fills), (seed, step, fills)
            assert budget.used <= budget.limit, (seed, step)
        elif op < 0.65:
            new = rng.choice([0, rng.randrange(0, size + 1), rng.randrange(0, size + 2 * page + 1)])
            f.truncate(new)
            m.truncate(new)
        else:
            off = rng.randrange(0, size + page + 1)
            n = rng.randrange(0, 4 * page)
            assert f.read(off, n) == bytes(m.data[off:off + n]), (seed, step, off, n)
        assert f.size() == len(m.data), (seed, step)
        if step % 50 == 0:
            check_ranges(f, m, page, (seed, step))
    assert f.read(0, len(m.data) + 10) == bytes(m.data), seed
    check_ranges(f, m, page, seed)
    f.discard()
    assert budget.used == 0 and budget.spilled == 0, seed


@pytest.mark.parametrize("seed", range(30))
def test_random_ops_with_base(seed: int) -> None:
    random_ops(seed, with_base=True)


@pytest.mark.parametrize("seed", range(15))
def test_random_ops_without_base(seed: int) -> None:
    random_ops(1000 + seed, with_base=False)


@pytest.mark.parametrize("page", [1, 7, 4096])
def test_random_ops_odd_page_sizes(page: int) -> None:
    random_ops(77 + page, with_base=True, page=page, limit_pages=2, steps=150)


def test_spilling_happens_and_writes_go_through_to_scratch() -> None:
    budget = WriteBudget(4 * 1024, page_size=1024)
    f = PendingFile("a", True, 0.0, budget)
    f.write(0, b"a" * 16 * 1024)
    assert budget.spilled >= 12 * 1024 and budget.used <= budget.limit
    spilled = budget.spilled
    f.write(10, b"b" * 100)  # page 0 is long spilled: written in place, no memory growth
    assert budget.spilled == spilled and budget.used <= budget.limit
    assert f.read(0, 120) == b"a" * 10 + b"b" * 100 + b"a" * 10


def test_small_file_costs_its_size() -> None:
    budget = WriteBudget()
    f = PendingFile("zarr.json", True, 0.0, budget)
    f.write(0, b"{" + b" " * 298 + b"}")
    assert budget.used == 300 and f.size() == 300
    f.discard()


def test_whole_pages_keep_an_immutable_buffer_and_copy_a_mutable_one() -> None:
    """A write's bytes object is kept as the pages it covers (no copy on the FUSE loop);
    a later change copies the page first, so the bytes object never changes; a mutable
    buffer is copied at once, so the caller's later changes do not reach the file."""
    page = 256
    budget = WriteBudget(64 * page, page_size=page)
    f = PendingFile("d/x", True, 0.0, budget)
    kept = bytes(range(256)) * 4
    f.write(0, kept)
    f.write(300, b"XY")
    f.truncate(3 * page + 10)
    assert kept == bytes(range(256)) * 4
    assert f.read(0, 4 * page) == kept[:300] + b"XY" + kept[302:3 * page + 10]
    mutable = bytearray(b"m" * page)
    f.write(4 * page, mutable)
    mutable[:] = b"z" * page
    assert f.read(4 * page, page) == b"m" * page
    assert f.read(3 * page, page) == kept[3 * page:3 * page + 10] + bytes(page - 10)  # truncated, then a hole
    assert budget.used == 3 * page + 10 + page and f.size() == 5 * page
    f.discard()
    assert budget.used == 0


def test_two_files_share_one_budget() -> None:
    page = 256
    budget = WriteBudget(4 * page, page_size=page)
    rng = random.Random(5)
    bases = [BytesBase(rng.randbytes(10 * page)), None]
    files = [PendingFile(f"f{i}", True, 0.0, budget, b) for i, b in enumerate(bases)]
    models = [Model(b.data if b else b"") for b in bases]
    for step in range(400):
        i = rng.randrange(2)
        off = rng.randrange(0, len(models[i].data) + page)
        buf = rng.randbytes(rng.randrange(1, 2 * page))
        files[i].write(off, buf)
        models[i].write(off, buf)
        assert budget.used <= budget.limit
        j = rng.randrange(2)
        off = rng.randrange(0, len(models[j].data) + 1)
        assert files[j].read(off, 3 * page) == bytes(models[j].data[off:off + 3 * page]), step
    assert all(f._scratch is not None for f in files)  # each spilled because of the other too
    for f, m in zip(files, models):
        assert f.read(0, 1 << 20) == bytes(m.data)
    files[0].discard()
    assert files[1].read(0, 1 << 20) == bytes(models[1].data)
    files[1].discard()
    assert budget.used == 0 and budget.spilled == 0


@pytest.mark.parametrize("limit_pages", [100, 0])
def test_clone_is_independent(limit_pages: int) -> None:
    page = 128
    budget = WriteBudget(limit_pages * page, page_size=page)
    rng = random.Random(limit_pages)
    base = BytesBase(rng.randbytes(8 * page))
    f = PendingFile("tmp", False, 1.0, budget, base)
    m = Model(base.data)
    for _ in range(30):
        off, buf = rng.randrange(0, 10 * page), rng.randbytes(rng.randrange(1, page))
        f.write(off, buf)
        m.write(off, buf)
    f.truncate(9 * page + 3)
    m.truncate(9 * page + 3)
    c = f.clone("dst")
    cm = Model(base.data)
    cm.data, cm.touched = bytearray(m.data), bytearray(m.touched)
    assert c.path == "dst" and c.base is base and c.size() == f.size() and c.dirty
    assert c.read(0, 1 << 20) == bytes(m.data)
    for _ in range(30):
        off, buf = rng.randrange(0, 10 * page), rng.randbytes(rng.randrange(1, page))
        f.write(off, buf)
        m.write(off, buf)
        off, buf = rng.randrange(0, 10 * page), rng.randbytes(rng.randrange(1, page))
        c.write(off, buf)
        cm.write(off, buf)
    c.truncate(3 * page)
    cm.truncate(3 * page)
    assert f.read(0, 1 << 20) == bytes(m.data)
    assert c.read(0, 1 << 20) == bytes(cm.data)
    check_ranges(c, cm, page, "clone")
    f.discard()
    assert c.read(0, 1 << 20) == bytes(cm.data)
    c.discard()
    assert budget.used == 0 and budget.spilled == 0


def test_discard_frees_and_is_final() -> None:
    budget = WriteBudget(2048, page_size=512)
    f = PendingFile("x", True, 0.0, budget, BytesBase(b"z" * 5000))
    f.write(100, os.urandom(8000))
    scratch = f._scratch
    assert scratch is not None and budget.used > 0 and budget.spilled > 0
    f.discard()
    f.discard()
    assert budget.used == 0 and budget.spilled == 0 and scratch.closed
    for call in (lambda: f.read(0, 10), lambda: f.write(0, b"a"), lambda: f.truncate(0),
                 lambda: f.dirty_ranges(), lambda: f.clone("y")):
        with pytest.raises(Discarded, match="x: .*discarded"):
            call()


def test_truncate_then_grow_reads_zeros_not_base() -> None:
    budget = WriteBudget(page_size=100)
    base = BytesBase(b"\xff" * 1000)
    f = PendingFile("x", True, 0.0, budget, base)
    f.truncate(250)
    f.truncate(1000)
    assert f.read(0, 1000) == b"\xff" * 250 + bytes(750)
    f.write(600, b"a")  # a page past the (lowered) base limit needs no base read
    assert base.reads == [(0, 250)] and f.untouched(0, 250) and not f.untouched(0, 251)
    assert f.dirty_ranges() == [(250, 1000)]


def test_untouched_and_base_reads_on_huge_base() -> None:
    """1 GiB base, 1 MiB written in the middle: at most two partial pages read from the base."""
    base = SynthBase(1 << 30)
    budget = WriteBudget()
    f = PendingFile("hdf5/big.h5", True, 0.0, budget, base)
    off = (512 << 20) + 12345
    buf = os.urandom(1 << 20)
    assert f.needs_base(off, len(buf)) and not f.needs_base(0, PAGE)
    f.write(off, buf)
    assert len(base.reads) <= 2 and sum(n for _, n in base.reads) <= 2 * PAGE
    assert f.size() == 1 << 30
    lo, hi = off // PAGE * PAGE, -(-(off + len(buf)) // PAGE) * PAGE
    assert f.dirty_ranges() == [(lo, hi)]
    assert f.untouched(0, lo) and f.untouched(hi, (1 << 30) - hi)
    assert not f.untouched(lo, 1) and not f.untouched(hi - 1, 1) and not f.untouched(hi, 1 << 30)
    got = f.read(off - 5000, len(buf) + 10000)
    assert got == SynthBase.bytes_at(off - 5000, 5000) + buf + SynthBase.bytes_at(off + len(buf), 5000)
    assert f.read((1 << 30) - 10, 100) == SynthBase.bytes_at((1 << 30) - 10, 10)
    f.discard()


def test_memory_stays_within_budget_for_a_big_write() -> None:
    """64 MiB written through a 4 MiB budget: memory held stays at the budget, bytes round-trip."""
    limit, step = 4 << 20, 1 << 20
    budget = WriteBudget(limit)
    f = PendingFile("zarr/a.zarr/d/c/0", True, 0.0, budget)
    rng = random.Random(1)
    want = hashlib.sha256()
    tracemalloc.start()
    try:
        for i in range(64):
            buf = rng.randbytes(step)
            want.update(buf)
            f.write(i * step, buf)
            del buf
            assert budget.used <= limit
        _, traced_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert budget.peak <= limit + step
    assert traced_peak <= limit + 4 * step, traced_peak  # the budget, a write buffer, slack
    assert budget.spilled >= (64 << 20) - limit
    got = hashlib.sha256()
    for i in range(64):
        got.update(f.read(i * step, step))
    assert got.digest() == want.digest()
    reader = io.BufferedReader(f.open_reader(), 1 << 20)
    streamed = hashlib.sha256()
    while chunk := reader.read(3 << 20):
        streamed.update(chunk)
    assert streamed.digest() == want.digest()
    f.discard()
    assert budget.used == 0 and budget.spilled == 0


def test_vfile_reads_through_and_keeps_its_length() -> None:
    f = PendingFile("x", True, 0.0, WriteBudget(page_size=64), BytesBase(b"0123456789" * 20))
    f.write(150, b"abc")
    vf = f.vfile()
    assert vf.size == 200
    f.write(10, b"XY")
    f.write(300, b"tail")
    pieces = vf.plan(0, 1000)
    assert all(isinstance(p, LiteralPiece) for p in pieces)
    data = b"".join(bytes(p.data) for p in pieces)
    assert len(data) == 200 and data[10:12] == b"XY" and data[150:153] == b"abc"
    f.truncate(20)
    assert b"".join(bytes(p.data) for p in vf.plan(0, 200)) == f.read(0, 20) + bytes(180)
    assert f.ready() and f.built and not f.is_dir


def test_attributes() -> None:
    f = PendingFile("a/b/c.json", False, 3.5, WriteBudget())
    assert (f.name, f.path, f.ingest, f.dirty, f.opens, f.base_time) == ("c.json", "a/b/c.json", False, False, 0, 3.5)
    t = f.mtime
    f.write(0, b"x")
    assert f.dirty and f.mtime >= t and f.read(0, f.size()) == b"x"


def test_concurrent_writers_and_reader() -> None:
    """Threads write disjoint ranges of two files on one tiny budget (spilling each other's
    pages) while another reads; the final bytes equal the model, and nothing deadlocks."""
    page = 1024
    budget = WriteBudget(6 * page, page_size=page)
    base = BytesBase(random.Random(9).randbytes(40 * page))
    files = [PendingFile("a", True, 0.0, budget, base), PendingFile("b", True, 0.0, budget)]
    models = [Model(base.data), Model(b"")]
    stride = 10 * page + 333  # ranges straddle pages shared between threads
    lock = threading.Lock()
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(k: int) -> None:
        rng = random.Random(k)
        fi, region = k % 2, k // 2
        for _ in range(300):
            off = region * stride + rng.randrange(0, stride - 200)
            buf = rng.randbytes(rng.randrange(1, min(3 * page, region * stride + stride - off)))
            try:
                files[fi].write(off, buf)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return
            with lock:
                models[fi].write(off, buf)

    def reader() -> None:
        rng = random.Random(99)
        while not stop.is_set():
            f = files[rng.randrange(2)]
            off, n = rng.randrange(0, 5 * stride), rng.randrange(0, 4 * page)
            try:
                assert len(f.read(off, n)) <= n
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    def cloner() -> None:  # takes two file locks while spillers take one
        while not stop.is_set():
            try:
                files[0].clone("c").discard()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    others = [threading.Thread(target=reader), threading.Thread(target=cloner)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave threads as much as the GIL allows
    try:
        for t in others + threads:
            t.start()
        for t in threads:
            t.join(120)
        stop.set()
        for t in others:
            t.join(120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads + others), "deadlock"
    assert not errors, errors
    assert budget.used <= budget.limit and budget.spilled > 0
    for f, m in zip(files, models):
        assert f.read(0, 1 << 22) == bytes(m.data)
        f.discard()
    assert budget.used == 0 and budget.spilled == 0
