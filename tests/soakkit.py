"""Soak harness (issue 13, part 5): one mount, 8 reader processes over every view and 2
writer processes, for minutes.

Why this shape: a daemon that passes every short test can still leak (memory, fds,
threads), serve stale bytes after many rewrites, or tear a chunk under concurrent load.
So every value a reader gets is checked, never just "it did not raise":

* stable datasets (imported once) must equal the arrays they were made from;
* written datasets hold, in every chunk, ``(version << 12) | chunk_index`` (uint32,
  uncompressed so a rewrite never changes a chunk's size; the documented close-to-open
  ``EIO`` for a chunk that changed size under an open file then cannot happen, and any
  ``EIO`` is a bug). Version ``v`` rewrites the chunks :func:`chunks_of` picks. A reader
  snapshots the writer's acknowledged versions before it opens (the lower bound: an
  acknowledged write must be seen) and the newest started version after it read (the upper
  bound); each chunk must then be whole (one value: never torn), its own (index bits), and
  a version that wrote it within those bounds.

Every exception of every process is kept with its traceback; the daemon's RSS, open fds
and threads are sampled once a second. The process bodies live in ``soakprocs.py``.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from conftest import polyfs_cmd  # noqa: E402

VIEWS = ("zarr", "n5", "hdf5", "tiff", "polyglot")
READERS = ("zarr-python", "tensorstore-zarr", "tensorstore-n5", "z5py", "h5py", "tifffile", "polyglot", "walker")
WRITERS = ("zarr-writer", "n5-hdf5-writer")
HANG_S = 180.0  # an operation that has not finished after this long is a hang (generous: 2 slow cores)
RSS_GROWTH_MAX = 0.10
# Slack for fds and threads, why: an fd sample races with requests in flight (each read of a
# stored chunk opens and closes its object; a commit holds temp files), and trio's thread
# cache starts and retires idle worker threads (10 s idle timeout) with the load. A leak of
# one per operation would show as hundreds over a soak, not a handful.
FD_SLACK = 8
THREAD_SLACK = 6
TRANSIENT = (".partial", ".__lock")  # writers' temporary files (zarr-python, tensorstore)


class Mismatch(AssertionError):
    """A value read is not one the store could hold."""


# -- the datasets ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Stable:
    """Imported once and never written: reads must equal :meth:`array`."""

    stem: str
    path: str
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    h5: dict = field(default_factory=dict, hash=False, compare=False)
    polyglot: bool = False

    @property
    def key(self) -> str:
        return f"{self.stem}:{self.path}"

    def array(self) -> np.ndarray:
        rng = np.random.default_rng(zlib.crc32(self.key.encode()))
        ramp = np.indices(self.shape).sum(axis=0)
        if self.dtype.startswith("float"):
            return (np.sin(ramp / 17.0) + rng.random(self.shape) * 0.01).astype(self.dtype)
        top = np.iinfo(self.dtype).max
        return ((ramp * 3 + rng.integers(0, 8, self.shape)) % top).astype(self.dtype)


STABLE = (
    Stable("stable", "vol", "uint16", (48, 192, 160), (16, 64, 64), {"compression": "gzip", "compression_opts": 4}),
    Stable("stable", "img", "float32", (300, 500), (64, 128), {"compression": "gzip", "shuffle": True}),
    Stable("stable", "grp/lab", "int32", (200, 200), (50, 50)),  # chunked raw: imported as deflate
    Stable("stz", "img16", "uint16", (512, 384), (128, 128), polyglot=True),  # imported as zstd
    Stable("stz", "cube", "uint8", (24, 128, 96), (1, 128, 96), polyglot=True),
)
STABLE_CODEC = {"stable": "deflate", "stz": "zstd"}


@dataclass(frozen=True)
class Written:
    """Rewritten for the whole soak by one writer; chunks hold versions (module doc)."""

    stem: str
    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]  # the version grid: the stored chunk shape
    share: float  # the part of the chunks one version rewrites
    shards: tuple[int, ...] | None = None  # the Zarr writer's shard shape (None: unsharded)
    # The view its writer writes in place (z5py: N5 blocks; h5py "r+": the HDF5 file). A
    # reader of that very file sees the writer's unfinished bytes there, on polyfs as on any
    # POSIX file system (HDF5 forbids it without SWMR), so the soak reads it through the other
    # views while it is written, and through this one in the final check.
    in_place: str = ""

    @property
    def key(self) -> str:
        return f"{self.stem}:{self.path}"

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunks))

    @property
    def nchunks(self) -> int:
        return int(np.prod(self.grid))

    def region(self, c: int) -> tuple[slice, ...]:
        idx = np.unravel_index(c, self.grid)
        return tuple(slice(i * k, min((i + 1) * k, s)) for i, k, s in zip(idx, self.chunks, self.shape))

    def block(self, v: int, c: int) -> np.ndarray:
        shape = tuple(s.stop - s.start for s in self.region(c))
        return np.full(shape, (v << 12) | c, dtype="uint32")

    def full(self, versions: list[int]) -> np.ndarray:
        out = np.zeros(self.shape, dtype="uint32")
        for c, v in enumerate(versions):
            out[self.region(c)] = (v << 12) | c
        return out


WRITTEN = (
    Written("wz", "a", (256, 256), (64, 64), 0.5),  # zarr/, unsharded (tensorstore, zarr-python)
    Written("wz", "s", (256, 192), (32, 32), 0.3, shards=(128, 96)),  # zarr/, sharded (both)
    Written("wn", "b", (192, 160), (64, 32), 0.5),  # n5/ (tensorstore)
    Written("wn", "z", (160, 192), (32, 64), 0.5, in_place="n5"),  # n5/ (z5py)
    Written("wh", "h", (128, 192), (64, 64), 0.5, in_place="hdf5"),  # hdf5/ (h5py r+)
)
WRITTEN_BY_KEY = {w.key: w for w in WRITTEN}
STEMS_STABLE = {s.stem for s in STABLE}
STEMS_WRITTEN = {w.stem for w in WRITTEN}


def chunks_of(spec: Written, v: int) -> list[int]:
    """The chunks version ``v`` rewrites (all for version 1); readers recompute it."""
    if v == 1:
        return list(range(spec.nchunks))
    mask = np.random.default_rng([zlib.crc32(spec.key.encode()), v]).random(spec.nchunks) < spec.share
    mask[v % spec.nchunks] = True
    return [int(c) for c in np.flatnonzero(mask)]


def view_path(view: str, spec: Stable | Written, ext: str = "") -> str:
    """Where a dataset is in a view, relative to the mount (hdf5: the domain's file)."""
    return {"zarr": f"zarr/{spec.stem}.zarr/{spec.path}", "n5": f"n5/{spec.stem}.n5/{spec.path}",
            "hdf5": f"hdf5/{spec.stem}.h5", "tiff": f"tiff/{spec.stem}/{spec.path}.tif",
            "polyglot": f"polyglot/{spec.stem}/{spec.path}{ext}"}[view]


def has_view(view: str, spec: Stable | Written) -> bool:
    return view != "polyglot" or isinstance(spec, Written) or spec.polyglot


def soaked_in(view: str, spec: Stable | Written) -> bool:
    """Read through ``view`` while the writers run (Written.in_place says which are not)."""
    return has_view(view, spec) and not (isinstance(spec, Written) and spec.in_place == view)


# -- shared state: what the writers started and acknowledged ----------------------------------
class Versions:
    """Per written dataset: the newest version a writer started (shared Value) and, per
    chunk, the newest acknowledged version that wrote it (shared Array)."""

    def __init__(self, ctx: Any) -> None:
        self.started = {w.key: ctx.Value("q", 1) for w in WRITTEN}
        self.acked = {w.key: ctx.Array("q", [1] * w.nchunks) for w in WRITTEN}

    def begin(self, spec: Written) -> int:
        """The next version: counted as started before any of its bytes are written."""
        with self.started[spec.key].get_lock():
            self.started[spec.key].value += 1
            return self.started[spec.key].value

    def acknowledge(self, spec: Written, v: int) -> None:
        arr = self.acked[spec.key]
        with arr.get_lock():
            for c in chunks_of(spec, v):
                arr[c] = max(arr[c], v)

    def lower(self, spec: Written) -> list[int]:
        arr = self.acked[spec.key]
        with arr.get_lock():
            return list(arr[:])

    def upper(self, spec: Written) -> int:
        return int(self.started[spec.key].value)


def check_chunk(spec: Written, c: int, block: np.ndarray, lo: int, hi: int, where: str) -> int:
    """One chunk read: whole, its own, a version that wrote it, within [lo, hi]. Values checked."""
    first = int(block.flat[0])
    if not np.all(block == first):
        vals = np.unique(block)[:6]
        raise Mismatch(f"{where}: chunk {c} is torn/mixed: values {[(int(x) >> 12, int(x) & 4095) for x in vals]}")
    v, own = first >> 12, first & 4095
    if own != c:
        raise Mismatch(f"{where}: chunk {c} holds chunk {own}'s data (version {v})")
    if not lo <= v <= hi:
        raise Mismatch(f"{where}: chunk {c} at version {v}, outside [acknowledged {lo}, started {hi}]")
    if c not in chunks_of(spec, v):
        raise Mismatch(f"{where}: chunk {c} at version {v}, which never wrote it")
    return block.size


def check_written(spec: Written, got: np.ndarray, lower: list[int], upper: int, where: str) -> int:
    """A whole written array read: every chunk checked; returns the values verified."""
    if got.shape != spec.shape or got.dtype.newbyteorder("=") != np.uint32:  # N5/HDF5 show big-endian
        raise Mismatch(f"{where}: read {got.dtype}{got.shape}, want uint32{spec.shape}")
    return sum(check_chunk(spec, c, got[spec.region(c)], lower[c], upper, where) for c in range(spec.nchunks))


def check_stable(want: np.ndarray, got: np.ndarray, region: tuple[slice, ...], where: str) -> int:
    exp = want[region]
    if got.shape != exp.shape or got.dtype.newbyteorder("=") != exp.dtype.newbyteorder("="):
        raise Mismatch(f"{where}: read {got.dtype}{got.shape}, want {exp.dtype}{exp.shape} at {region}")
    if not np.array_equal(got, exp):
        bad = np.argwhere(got != exp)
        raise Mismatch(f"{where}: {len(bad)} values differ at {region}, first at {bad[0].tolist()}: "
                       f"{got[tuple(bad[0])]!r} != {exp[tuple(bad[0])]!r}")
    return got.size


# -- preparing the store ---------------------------------------------------------------------------
def _run(*args: str, timeout: float = 300) -> None:
    res = subprocess.run(polyfs_cmd(*args), capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"polyfs {' '.join(args)} failed: {res.stdout}{res.stderr}")


def prepare_store(work: Path) -> Path:
    """A store with the stable domains and the h5py writer's domain, imported by ``polyfs import``."""
    import h5py

    store = work / "store"
    store.mkdir(parents=True)
    for stem, codec in STABLE_CODEC.items():
        src = work / f"{stem}.src.h5"
        with h5py.File(src, "w") as f:
            for s in (s for s in STABLE if s.stem == stem):
                d = f.create_dataset(s.path, data=s.array(), chunks=s.chunks, **s.h5)
                d.attrs["soak"] = s.key
        _run("import", str(src), str(store), "--domain", f"/{stem}.h5", "--codec", codec, "--no-progress")
    for spec in (w for w in WRITTEN if w.stem == "wh"):  # uncompressed: h5py rewrites keep their size
        src = work / f"{spec.stem}.src.h5"
        with h5py.File(src, "a") as f:
            f.create_dataset(spec.path, data=spec.full([1] * spec.nchunks), chunks=spec.chunks)
        _run("import", str(src), str(store), "--domain", f"/{spec.stem}.h5", "--codec", "none", "--no-progress")
    return store


def prepare_mount(root: Path) -> None:
    """Version 1 of the datasets the Zarr and N5 writers own, written through the mount."""
    import tensorstore as ts
    import z5py

    for stem in ("wz", "wn"):
        os.mkdir(root / ("zarr" if stem == "wz" else "n5") / f"{stem}.{'zarr' if stem == 'wz' else 'n5'}")
    for spec in WRITTEN:
        data = spec.full([1] * spec.nchunks)
        if spec.stem == "wz":
            inner = [{"name": "bytes", "configuration": {"endian": "little"}}]
            grid = list(spec.shards or spec.chunks)
            codecs = inner if spec.shards is None else [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": list(spec.chunks), "codecs": inner}}]
            t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root / view_path("zarr", spec))},
                         "metadata": {"shape": list(spec.shape), "data_type": "uint32", "codecs": codecs,
                                      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}}},
                         "create": True}).result()
            t[...] = data
        elif spec.stem == "wn":  # by z5py, both (tensorstore then writes wn:b)
            f = z5py.File(str(root / "n5" / "wn.n5"), use_zarr_format=False, mode="a")
            ds = f.create_dataset(spec.path, shape=spec.shape, chunks=spec.chunks, dtype="uint32", compression="raw")
            ds[:] = data


def probe(root: Path) -> list[str]:
    """Every view file each dataset should have, missing ones listed (the soak needs them all)."""
    missing = []
    for spec in (*STABLE, *WRITTEN):
        for view in VIEWS:
            if not has_view(view, spec):
                continue
            exts = (".tif", ".h5", ".zarr/zarr.json") if view == "polyglot" else ("",)
            for ext in exts:
                p = root / view_path(view, spec, ext)
                if view in ("zarr", "n5"):
                    p = p / ("zarr.json" if view == "zarr" else "attributes.json")
                if not p.exists():
                    missing.append(str(p.relative_to(root)))
    return missing


# -- the daemon's resources ---------------------------------------------------------------------------
def daemon_sample(pid: int) -> tuple[int, int, int]:
    """(VmRSS in KiB, open fds, threads) of the daemon."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


@dataclass
class Report:
    """What one soak did and found; :meth:`problems` is empty when it passed."""

    seconds: float = 0.0
    warmup: float = 0.0
    reads: dict[str, int] = field(default_factory=dict)
    writes: dict[str, int] = field(default_factory=dict)
    values: int = 0
    files: int = 0
    errors: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    idle: list[str] = field(default_factory=list)  # processes that verified nothing
    rss_warm: int = 0
    rss_end: int = 0
    rss_peak: int = 0
    fds_start: int = 0
    fds_end: int = 0
    fds_max: int = 0
    threads_start: int = 0
    threads_warm: int = 0
    threads_end: int = 0
    threads_max: int = 0
    daemon_alive: bool = True
    final_values: int = 0

    @property
    def rss_growth(self) -> float:
        return (self.rss_end - self.rss_warm) / self.rss_warm if self.rss_warm else 0.0

    def problems(self) -> list[str]:
        out = [f"unexpected error: {e}" for e in self.errors]
        out += [f"daemon log: {line}" for line in self.log_errors]
        out += [f"{who} verified nothing" for who in self.idle]
        if not self.daemon_alive:
            out.append("the daemon died")
        if self.rss_growth >= RSS_GROWTH_MAX:
            out.append(f"daemon RSS grew {self.rss_growth:.1%} after warm-up ({self.rss_warm} -> {self.rss_end} KiB)")
        if self.fds_end > self.fds_start + FD_SLACK:
            out.append(f"daemon fds {self.fds_start} -> {self.fds_end} (slack {FD_SLACK})")
        if self.threads_end > self.threads_warm + THREAD_SLACK:
            out.append(f"daemon threads {self.threads_warm} -> {self.threads_end} (slack {THREAD_SLACK})")
        return out

    def figures(self) -> str:
        lines = [f"minutes soaked:      {self.seconds / 60:.2f} (warm-up {self.warmup:.0f} s)",
                 "reads per view:      " + ", ".join(f"{k} {v}" for k, v in sorted(self.reads.items())),
                 "writes per view:     " + ", ".join(f"{k} {v}" for k, v in sorted(self.writes.items())),
                 f"values verified:     {self.values:,} (+ {self.final_values:,} in the final check); "
                 f"{self.files:,} files walked",
                 f"unexpected errors:   {len(self.errors) + len(self.log_errors) + len(self.idle)}",
                 f"daemon RSS:          {self.rss_warm / 1024:.1f} MiB after warm-up, {self.rss_end / 1024:.1f} MiB "
                 f"at end ({self.rss_growth:+.1%}), peak {self.rss_peak / 1024:.1f} MiB",
                 f"daemon fds:          {self.fds_start} at start, {self.fds_end} at end (max {self.fds_max} under load)",
                 f"daemon threads:      {self.threads_start} at start, {self.threads_warm} after warm-up, "
                 f"{self.threads_end} at end (max {self.threads_max})"]
        return "\n".join(lines)


# -- running it -------------------------------------------------------------------------------------------
def _log_problems(text: str) -> list[str]:
    """Daemon log lines at WARNING and above: nothing in a soak should warn (a refused write,
    a failed read, an unexpected exception each log one)."""
    return [line for line in text.splitlines()
            if any(f" {level} " in line for level in ("WARNING", "ERROR", "CRITICAL")) or "Traceback" in line]


def soak(mount: Any, seconds: float, work: Path, warmup: float | None = None,
         say: Callable[[str], None] = lambda s: None) -> Report:
    """Soak ``mount`` (conftest.Mount, already prepared) for ``seconds``; never raises for what
    it finds: the returned report lists it."""
    import soakprocs

    root = Path(mount.path)
    rep = Report(warmup=warmup if warmup is not None else min(max(15.0, seconds / 4), 120.0))
    pid = mount.daemon_pid()
    log_start = len(mount.log_text())
    ctx = mp.get_context("spawn")
    versions = Versions(ctx)
    stop = ctx.Event()
    results = ctx.Queue()
    beats = {name: ctx.Value("d", 0.0) for name in (*READERS, *WRITERS)}
    _, rep.fds_start, rep.threads_start = daemon_sample(pid)
    work.mkdir(parents=True, exist_ok=True)
    procs = {}
    for name in (*READERS, *WRITERS):
        p = ctx.Process(target=soakprocs.main, name=name, daemon=True,
                        args=(name, str(root), versions, stop, results, beats[name], str(work / f"{name}.stderr")))
        p.start()
        procs[name] = p
    start = time.monotonic()
    samples: list[tuple[float, int, int, int]] = []
    hung: set[str] = set()
    try:
        while (now := time.monotonic()) - start < seconds:
            try:
                samples.append((now - start, *daemon_sample(pid)))
            except OSError:
                rep.daemon_alive = False
                break
            for name, p in procs.items():
                if not p.is_alive() and name not in hung:
                    hung.add(name)
                    rep.errors.append(f"{name}: the process ended early (exit status {p.exitcode}); "
                                      f"stderr: {_tail(work / f'{name}.stderr')}")
                elif beats[name].value and time.time() - beats[name].value > HANG_S and name not in hung:
                    hung.add(name)
                    os.kill(p.pid, signal.SIGUSR1)  # faulthandler: the stack goes to its stderr file
                    time.sleep(1)
                    rep.errors.append(f"{name}: no operation finished for {HANG_S:.0f} s (a hang); "
                                      f"stack: {_tail(work / f'{name}.stderr')}")
            if len(samples) % 30 == 0:
                say(f"  {now - start:5.0f} s: daemon RSS {samples[-1][1] / 1024:.1f} MiB, "
                    f"{samples[-1][2]} fds, {samples[-1][3]} threads")
            time.sleep(1.0)
    finally:
        rep.seconds = time.monotonic() - start
        stop.set()
    _collect(rep, procs, results, work)
    _judge_samples(rep, samples)
    time.sleep(2.0)  # requests in flight finish
    try:
        _, rep.fds_end, _ = daemon_sample(pid)
    except OSError:
        rep.daemon_alive = False
    if rep.daemon_alive:
        rep.final_values = soakprocs.final_check(root, versions, rep.errors)
    rep.log_errors = _log_problems(mount.log_text()[log_start:])
    return rep


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _collect(rep: Report, procs: dict[str, Any], results: Any, work: Path) -> None:
    """Every process's figures and errors, each waited for within the hang deadline."""
    done: set[str] = set()
    deadline = time.monotonic() + HANG_S
    while len(done) < len(procs) and time.monotonic() < deadline:
        try:
            name, stats = results.get(timeout=1.0)
        except Exception:  # queue.Empty: a process still finishing its operation
            if all(not p.is_alive() for n, p in procs.items() if n not in done) and results.empty():
                break
            continue
        done.add(name)
        for k, v in stats["reads"].items():
            rep.reads[k] = rep.reads.get(k, 0) + v
        for k, v in stats["writes"].items():
            rep.writes[k] = rep.writes.get(k, 0) + v
        rep.values += stats["values"]
        rep.files += stats["files"]
        rep.errors += [f"{name}: {e}" for e in stats["errors"]]
        if stats["dropped"]:
            rep.errors.append(f"{name}: {stats['dropped']} more errors (not kept)")
        if not stats["values"] and not stats["writes"]:
            rep.idle.append(name)
    for name, p in procs.items():
        if name not in done:
            rep.errors.append(f"{name}: no result (exit status {p.exitcode}); stderr: {_tail(work / f'{name}.stderr')}")
        if p.is_alive():
            p.kill()
        p.join(10)


def _judge_samples(rep: Report, samples: list[tuple[float, int, int, int]]) -> None:
    """RSS after warm-up vs at end: medians over a window just after warm-up and over the
    last one (a fifth of the measured time, at least 10 s: one sample is at the mercy of the
    requests in flight); threads likewise, by maxima (pools and trio's thread cache breathe)."""
    if not samples:
        return
    span = max(10.0, (samples[-1][0] - rep.warmup) / 5)
    warm = [s for s in samples if rep.warmup <= s[0] < rep.warmup + span] or samples[-1:]
    end = [s for s in samples if s[0] >= samples[-1][0] - span and s[0] >= rep.warmup] or samples[-1:]
    rep.rss_warm = int(median(s[1] for s in warm))
    rep.rss_end = int(median(s[1] for s in end))
    rep.rss_peak = max(s[1] for s in samples)
    rep.fds_max = max(s[2] for s in samples)
    rep.threads_warm = max(s[3] for s in warm)
    rep.threads_end = max(s[3] for s in end)
    rep.threads_max = max(s[3] for s in samples)


def read_json(path: Path) -> Any:
    with open(path, "rb") as f:
        return json.loads(f.read())
