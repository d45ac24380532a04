"""Crash-loop harness (issue 13, part 1): the daemon is SIGKILLed at random moments while
ordinary tools write every writable view, and during ``polyfs import`` and ``polyfs check
--repair``; after each kill the store must hold every acknowledged write, no torn chunk, a
clean ``check --deep`` (after ``--repair`` at most) and no half-imported domain.

Shared by the CI test (``tests/mount/test_crash_loop.py``, a few rounds) and the full-size
loop (``scripts/crashloop.py``, ``--rounds N``), so both run the same rounds and count the
same figures. The writer processes and the model of their writes are ``crashwriters``.
"""
from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from crashwriters import (KINDS, AckLog, Kind, Region, create_in_mount, initial, mark, read_view,  # noqa: E402
                          source_file, states)


# -- polyfs check (shared with tests/mount/test_hdf5_crash.py) ---------------------------------
def polyfs_check(store: Path, *flags: str) -> subprocess.CompletedProcess:
    from conftest import polyfs_cmd

    return subprocess.run(polyfs_cmd("check", str(store), *flags), capture_output=True, text=True, timeout=600,
                          check=False)


def problems_of(res: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in res.stdout.splitlines() if ln.startswith("problem:")]


def is_clean(res: subprocess.CompletedProcess) -> bool:
    return res.returncode == 0 and "store is consistent" in res.stdout


def deep_check(store: Path, allow_repair: bool) -> tuple[str, str]:
    """``("clean" | "repaired" | "failed", text)``. A crash may leave only what ``--repair``
    fixes (derived data, objects no domain refers to): any other problem, or one ``--repair``
    does not fix, is a failure."""
    res = polyfs_check(store, "--deep")
    if is_clean(res):
        return "clean", res.stdout
    problems = problems_of(res)
    if not allow_repair or not problems or not all("run --repair" in ln for ln in problems):
        return "failed", res.stdout + res.stderr
    fix = polyfs_check(store, "--repair")
    if fix.returncode != 0:
        return "failed", fix.stdout + fix.stderr
    res = polyfs_check(store, "--deep")
    return ("repaired" if is_clean(res) else "failed"), "\n".join(problems) + "\n" + res.stdout + res.stderr


def check_deep(store: Path, allow_repair: bool) -> None:
    """Assert that ``check --deep`` is clean, after ``--repair`` only if ``allow_repair``."""
    outcome, text = deep_check(store, allow_repair)
    assert outcome != "failed", text
    if outcome == "repaired":
        print("check --deep before --repair:", text, sep="\n")


def catalog(store: Path):
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    return Catalog(open_store(str(store), read_only=True))


def grid_of(kind: Kind) -> Iterator[tuple[tuple[int, ...], Region]]:
    grid = tuple(-(-n // c) for n, c in zip(kind.shape, kind.chunks))
    for idx in np.ndindex(*grid):
        yield idx, tuple(slice(i * c, min(n, (i + 1) * c)) for i, c, n in zip(idx, kind.chunks, kind.shape))


def stored_chunks(kind: Kind, store: Path) -> dict[tuple[int, ...], np.ndarray | str]:
    """Every chunk straight from its object, decoded by the stored pipeline (cut at the extent;
    the fill value where there is none), or why it does not decode."""
    cat = catalog(store)
    ds = cat.load(kind.domain).resolve("/a")
    assert tuple(ds.shape.array_shape) == kind.shape and tuple(ds.chunks) == kind.chunks, (ds.shape, ds.chunks)
    pipe, idx, dt = cat.pipeline(ds), cat.chunk_index(ds), ds.type.numpy()
    present = {tuple(int(c) for c in idx.coords_of(int(lin))): idx.key(int(lin)) for lin in idx.linear}
    out: dict[tuple[int, ...], np.ndarray | str] = {}
    for coords, region in grid_of(kind):
        if coords not in present:
            out[coords] = np.zeros(tuple(s.stop - s.start for s in region), kind.dtype)
            continue
        try:
            raw = pipe.decode(cat.store.get(present[coords]), ds.chunk_nbytes)
            block = np.frombuffer(raw, dt).reshape(kind.chunks)
            out[coords] = block[tuple(slice(0, s.stop - s.start) for s in region)]
        except Exception as exc:  # noqa: BLE001 - a torn chunk, whatever the decoder says
            out[coords] = f"{type(exc).__name__}: {exc}"
    return out


@dataclass
class Verdict:
    """Chunks judged against the model: old (last acknowledged) or new (the step in flight)."""
    chunks: int = 0
    new: int = 0
    lost: list[str] = field(default_factory=list)  # holds a state older than acknowledged
    torn: list[str] = field(default_factory=list)  # does not decode, or matches no state at all


def judge(kind: Kind, history: list[np.ndarray], acked: int, got: dict[tuple[int, ...], np.ndarray | str]) -> Verdict:
    """``history`` = ``states(...)`` up to the step after the last acknowledged one."""
    old = history[acked + 1]
    new = history[acked + 2] if len(history) > acked + 2 else old
    v = Verdict()
    for coords, region in grid_of(kind):
        v.chunks += 1
        block = got[coords]
        if isinstance(block, str):
            v.torn.append(f"{kind.name} chunk {coords}: {block}")
        elif np.array_equal(block, old[region]):
            pass
        elif np.array_equal(block, new[region]):
            v.new += 1
        elif any(np.array_equal(block, h[region]) for h in history[:acked + 1]):
            v.lost.append(f"{kind.name} chunk {coords}: holds a state older than acknowledged step {acked}")
        else:
            shares = ", ".join(f"{np.mean(block == s[region]):.0%} {what}" for what, s in
                               (("acknowledged", old), ("new", new), ("base", history[0])))
            v.torn.append(f"{kind.name} chunk {coords}: neither the acknowledged nor the new values "
                          f"(elements equal: {shares})")
    return v


def assemble(kind: Kind, got: dict[tuple[int, ...], np.ndarray | str]) -> np.ndarray:
    a = np.zeros(kind.shape, kind.dtype)
    for coords, region in grid_of(kind):
        if not isinstance(got[coords], str):
            a[region] = got[coords]
    return a


# -- processes and mounts ------------------------------------------------------------------------
def cleanup_mount(path: Path) -> None:
    """A killed daemon leaves a dead mountpoint (``ENOTCONN``): ``polyfs umount`` detaches it
    lazily, and first aborts its FUSE connection if processes still wait on it (a daemon killed
    while one of its threads was in the kernel left writers hung for ever; a lazy unmount
    alone frees none of them)."""
    from conftest import is_mounted

    r = subprocess.run([sys.executable, "-m", "polyfs", "umount", str(path)], capture_output=True, text=True,
                       timeout=60, check=False)
    if r.returncode != 0 and is_mounted(path):
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True, text=True, timeout=60,
                       check=False)
    deadline = time.monotonic() + 30
    while is_mounted(path):
        if time.monotonic() > deadline:
            raise Hang(f"{path} still mounted after fusermount3 -u -z")
        time.sleep(0.05)


class Hang(Exception):
    """Something did not finish within a deadline meant only to catch hangs."""


def wait_line(proc: subprocess.Popen, want: str, deadline: float) -> None:
    """Read ``proc``'s stdout until the line ``want`` (its stderr is a file)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Hang(f"no {want!r} from {proc.args!r}")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{proc.args!r} ended (exit {proc.wait()}) before {want!r}")
            if line.strip() == want:
                return


def sigkill(*procs: subprocess.Popen | int | None) -> None:
    for p in procs:
        pid = p if isinstance(p, int) else (p.pid if p is not None else None)
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Watchdog:
    """On expiry, SIGKILL the daemon: reads blocked on a hung mount then fail (``ENOTCONN``)
    instead of hanging the loop, and the hang is reported."""

    def __init__(self, seconds: float, daemon_pid: int) -> None:
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire, (daemon_pid,))

    def _fire(self, pid: int) -> None:
        self.fired = True
        sigkill(pid)

    def __enter__(self) -> "Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()


# -- the loop ------------------------------------------------------------------------------------
PROBLEM_KINDS = (("objects no domain refers to", "objects of a killed import"),
                 ("CRC32", "CRC32 entries"), ("persisted chunk index", "persisted chunk indexes"))


@dataclass
class Tally:
    """The figures of a run (``scripts/crashloop.py`` prints them; the CI test asserts on them)."""
    rounds: int = 0
    daemon_kills: int = 0
    acked: int = 0  # acknowledged steps whose writes were checked
    chunks: int = 0  # chunk checks (every chunk of every dataset, after every kill)
    in_flight_new: int = 0  # chunks found holding the unacknowledged step's values
    lost: int = 0
    torn: int = 0
    imports: dict[str, int] = field(default_factory=lambda: {
        "killed mid-way (objects left, no domain)": 0, "killed before writing": 0, "killed, complete": 0,
        "finished first": 0})
    repairs: dict[str, int] = field(default_factory=lambda: {"killed": 0, "finished first": 0})
    # when -> outcome -> count; and when -> kind of problem --repair fixed -> count
    checks: dict[str, dict[str, int]] = field(default_factory=dict)
    repaired: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def report(self) -> str:
        return "\n".join([
            f"rounds killed:                           {self.rounds} ({self.daemon_kills} daemon SIGKILLs)",
            f"acknowledged writes checked:             {self.acked} ({self.chunks} chunk checks, "
            f"{self.in_flight_new} chunks held the unacknowledged write)",
            f"acknowledged writes lost:                {self.lost}",
            f"torn chunks:                             {self.torn}",
            "imports:                                 " + ", ".join(f"{k} {v}" for k, v in self.imports.items()),
            "check --repair:                          " + ", ".join(f"{k} {v}" for k, v in self.repairs.items()),
            *(f"check --deep {when}: ".ljust(41) + ", ".join(f"{k} {v}" for k, v in outcomes.items())
              + (" (--repair fixed: " + ", ".join(f"{k} {v}" for k, v in self.repaired[when].items()) + ")"
                 if self.repaired.get(when) else "")
              for when, outcomes in self.checks.items()),
            f"failures:                                {len(self.failures)}",
            *(f"  {f}" for f in self.failures),
        ])


class CrashLoop:
    """Rounds of: writers (one process per tool) + an import, the daemon and the import
    SIGKILLed at one random moment, remount, verify; then ``check --repair`` (given work by
    dropping a CRC32 table, polyfs's derived data) killed at a random moment with the daemon,
    verify again, ``check --deep`` clean after ``--repair`` at most."""

    def __init__(self, workdir: Path, seed: int, kinds: list[str] | None = None, max_delay: float = 2.0,
                 say: Callable[[str], None] = print, evidence: bool = False) -> None:
        self.dir = workdir
        self.seed = seed
        self.kinds = [KINDS[k] for k in (kinds or list(KINDS))]
        self.max_delay = max_delay
        self.say = say
        self.evidence = evidence  # keep a copy of every store that needed --repair
        self.store = workdir / "store"
        self.mnt = workdir / "mnt"
        self.log = workdir / "polyfs.log"
        self.tally = Tally()
        self.base: dict[str, np.ndarray] = {}
        self.marks: dict[str, str | None] = {}
        self.source = workdir / "import-source.h5"
        self.source_data: dict[str, np.ndarray] = {}
        self.import_start = 0.3  # seconds from ``polyfs import`` starting to its first object
        self.import_secs = 1.0  # ... and to its end
        self.repair_secs = 1.0
        self.mount: Any = None
        self._procs: list[subprocess.Popen] = []
        self._log_seen = 0

    # -- setup ---------------------------------------------------------------------------------
    def setup(self) -> None:
        from conftest import Mount

        from polyfs.importers import import_source

        self.mnt.mkdir(parents=True)
        (self.dir / "acks").mkdir()
        for kind in self.kinds:
            self.base[kind.name] = initial(kind)
            self.marks[kind.name] = "init" if kind.marks else None
            if kind.name in ("h5py", "tifffile"):
                src = self.dir / f"{kind.name}.h5"
                source_file(kind, src, self.base[kind.name])
                import_source(src, str(self.store), domain=kind.domain, progress=False)
        self.store.mkdir(exist_ok=True)
        self._make_import_source()
        self.mount = Mount(str(self.store), self.mnt, self.log, []).start()
        for kind in self.kinds:
            if kind.name not in ("h5py", "tifffile"):
                create_in_mount(kind, self.mnt, self.base[kind.name])
        self.say(f"crash loop in {self.dir}: seed {self.seed}, writers {', '.join(k.name for k in self.kinds)}; "
                 f"an import writes its first object after {self.import_start:.2f} s and ends after "
                 f"{self.import_secs:.2f} s here")

    def _make_import_source(self) -> None:
        """~1150 small deflate chunks: an import long enough to die in the middle of."""
        import h5py

        rng = np.random.default_rng(self.seed)
        self.source_data = {"a": rng.integers(0, 5000, (64, 256, 256)).astype("uint16"),
                            "g/b": rng.random((16, 128, 128)).astype("float32")}
        with h5py.File(self.source, "w") as f:
            f.create_dataset("a", data=self.source_data["a"], chunks=(4, 32, 32), compression="gzip",
                             compression_opts=1)
            f.create_dataset("g/b", data=self.source_data["g/b"], chunks=(4, 32, 32), compression="gzip",
                             compression_opts=1)
        # the kill window for imports is measured, not guessed: from the process's start to its
        # first object (nothing to leave behind yet), and to its end
        calib = self.dir / "calibration-store"
        t0 = time.monotonic()
        proc = subprocess.Popen(self._import_cmd(calib, "/x.h5"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while proc.poll() is None and not (calib / "db").exists():
            time.sleep(0.005)
        self.import_start = time.monotonic() - t0
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        self.import_secs = time.monotonic() - t0
        shutil.rmtree(calib)

    def _import_cmd(self, store: Path, domain: str) -> list[str]:
        from conftest import polyfs_cmd

        return polyfs_cmd("import", str(self.source), str(store), "--domain", domain)

    # -- one round -----------------------------------------------------------------------------
    def run(self, rounds: int) -> Tally:
        for r in range(rounds):
            self.round(r)
            if self.tally.failures:
                break
        return self.tally

    def round(self, r: int) -> None:
        rng = random.Random(f"{self.seed}:{r}")
        delay = rng.uniform(0.05, self.max_delay)
        age = rng.uniform(0.8 * self.import_start, 1.2 * self.import_secs)  # of the import, at the kill
        repair_after = rng.uniform(0.0, 1.2 * self.repair_secs)
        seeds = {k.name: rng.randrange(1 << 31) for k in self.kinds}
        domain = f"/imp{r}.h5"
        self.say(f"round {r} (seed {self.seed}): daemon killed {delay:.2f} s after the writers are ready and "
                 f"{age:.2f} s after the import started; check --repair killed after {repair_after:.2f} s")
        imp = self._start_import(domain) if age > delay else None  # before the writers: it needs longer
        t_imp = time.monotonic()
        writers = self._start_writers(r, seeds)
        kill_at = time.monotonic() + delay
        if imp is None:
            time.sleep(max(0.0, kill_at - age - time.monotonic()))
            imp, t_imp = self._start_import(domain), time.monotonic()
        kill_at = max(kill_at, t_imp + age)  # the writers took longer to start than the import's age
        time.sleep(max(0.0, kill_at - time.monotonic()))
        early = [f"{k} writer died before the kill (exit {p.poll()}): {self._err(r, k)}"
                 for k, p in writers.items() if p.poll() is not None]
        finished = imp.poll() == 0
        self._kill_daemon(imp)
        self._reap(list(writers.values()) + [imp])
        cleanup_mount(self.mnt)
        self.tally.rounds += 1
        self.tally.failures += early
        self._remount(r)
        with Watchdog(600, self.mount.daemon_pid()) as dog:  # reads of a hung mount fail instead
            recovered = self._verify_writers(r, seeds, views=True)
            visible = self._verify_import(domain, finished)
        if dog.fired:
            raise Hang("reading the remounted views back hung for 600 s")
        self._check("after the daemon kill")
        self._repair_phase(r, repair_after, recovered)
        if visible:  # a complete imported domain: deleted through the mount (keeps rounds small)
            os.unlink(self.mnt / "hdf5" / f"imp{r}.h5")
        self._daemon_log_problems()

    def _kill_daemon(self, *others: subprocess.Popen) -> None:
        """SIGKILL the daemon and ``others`` at one moment (a daemon already gone is a failure)."""
        try:
            pid = self.mount.daemon_pid()
        except AssertionError:
            pid = None
            self.tally.failures.append(f"the daemon was gone before the kill:\n{self.log_tail()}")
        sigkill(pid, *others)
        self.tally.daemon_kills += 1

    def log_tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""

    def _start_import(self, domain: str) -> subprocess.Popen:
        return self._started(subprocess.Popen(self._import_cmd(self.store, domain), stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL))

    def _started(self, proc: subprocess.Popen) -> subprocess.Popen:
        """Remembered, so that :meth:`close` kills whatever a failed round left running."""
        self._procs.append(proc)
        return proc

    def _start_writers(self, r: int, seeds: dict[str, int]) -> dict[str, subprocess.Popen]:
        procs = {}
        for kind in self.kinds:
            err = open(self.dir / "acks" / f"{r}-{kind.name}.err", "w")
            procs[kind.name] = self._started(subprocess.Popen(
                [sys.executable, str(HERE / "crashwriters.py"), kind.name, str(self.mnt / kind.view),
                 str(self.dir / "acks" / f"{r}-{kind.name}.log"), str(seeds[kind.name]), str(r)],
                stdout=subprocess.PIPE, stderr=err, text=True))
            err.close()
        deadline = time.monotonic() + 120
        for p in procs.values():
            wait_line(p, "ready", deadline)
        return procs

    def _err(self, r: int, name: str) -> str:
        path = self.dir / "acks" / f"{r}-{name}.err"
        return path.read_text()[-2000:] if path.exists() else ""

    def _reap(self, procs: list[subprocess.Popen]) -> None:
        """Kill and wait for ``procs``. A daemon SIGKILLed while one of its threads waited in the
        kernel for a directory lock that a request to it held cannot finish dying, and processes
        on the mount then stay stuck in D state (SIGKILL or not) until its connection is
        aborted: ``polyfs umount`` does that (the round goes on; the dead daemon's connection
        was what hung, not the store)."""
        sigkill(*procs)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.say(f"  {p.args[2] if len(p.args) > 2 else p.args!r} stuck on the dead mount: polyfs umount "
                         f"aborts the dead daemon's connection")
                cleanup_mount(self.mnt)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    raise Hang(f"{p.args!r} survived SIGKILL and polyfs umount for 60 s") from None
            if p.stdout:
                p.stdout.close()

    def _remount(self, r: int) -> None:
        """Odd rounds mount with 1 MiB of write buffers: the writes spill to scratch files."""
        from conftest import Mount

        opts = [f"write_buffer_mb=1,scratch_dir={self.dir / 'scratch'}"] if r % 2 else []
        (self.dir / "scratch").mkdir(exist_ok=True)
        self.mount = Mount(str(self.store), self.mnt, self.log, opts).start()

    # -- verification --------------------------------------------------------------------------
    def _verify_writers(self, r: int, seeds: dict[str, int], views: bool) -> dict[str, np.ndarray]:
        """Judge every chunk against the model; with ``views``, the writer's own tool must read the
        view back exactly as the chunk objects say. Returns the recovered arrays (the next base)."""
        recovered = {}
        for kind in self.kinds:
            acked = AckLog(self.dir / "acks" / f"{r}-{kind.name}.log").last()
            history = states(kind, self.base[kind.name], seeds[kind.name], acked + 2)
            got = stored_chunks(kind, self.store)
            v = judge(kind, history, acked, got)
            self.tally.acked += acked + 1
            self.tally.chunks += v.chunks
            self.tally.in_flight_new += v.new
            self.tally.lost += len(v.lost)
            self.tally.torn += len(v.torn)
            self.tally.failures += v.lost + v.torn
            recovered[kind.name] = assemble(kind, got)
            self.say(f"  {kind.name}: {acked + 1} steps acknowledged, {v.new}/{v.chunks} chunks hold the step "
                     f"in flight, {len(v.lost)} lost, {len(v.torn)} torn")
            if views:
                self._verify_view(kind, r, acked, recovered[kind.name])
        return recovered

    def _verify_view(self, kind: Kind, r: int, acked: int, want: np.ndarray) -> None:
        try:
            data, m = read_view(kind, self.mnt)
        except Exception as exc:  # noqa: BLE001 - reported with the round, not raised
            data, m = None, f"{type(exc).__name__}: {exc}"
            self.tally.failures.append(f"{kind.name}: reading {kind.view} back failed: {m}")
        if data is not None and not (data.shape == want.shape and np.array_equal(data, want)):
            self.tally.failures.append(f"{kind.name}: {kind.view} does not read back what the chunk objects hold")
        if kind.marks and data is not None:
            was = self.marks[kind.name] if acked < 0 else mark(r, acked)
            if m not in (was, mark(r, acked + 1)):
                self.tally.failures.append(f"{kind.name}: attribute mark is {m!r}, not {was!r} (acknowledged) "
                                           f"or {mark(r, acked + 1)!r} (in flight)")
            self.marks[kind.name] = m

    def _verify_import(self, domain: str, finished: bool) -> bool:
        """A killed import leaves no domain, or a complete one; one that finished, a complete one.
        Returns whether the domain is there."""
        from corpus import read_dataset

        cat = catalog(self.store)
        visible = domain in cat.list_domains()
        stem = domain.strip("/")[:-3]
        in_views = [(self.mnt / "hdf5" / f"{stem}.h5").exists(), (self.mnt / "zarr" / f"{stem}.zarr").is_dir()]
        if in_views != [visible, visible]:
            self.tally.failures.append(f"{domain}: in the store {visible}, in hdf5/ and zarr/ {in_views}")
        if finished and not visible:
            self.tally.failures.append(f"{domain}: the import exited 0 but the domain is not there")
        if visible:
            model = cat.load(domain)
            for name, data in self.source_data.items():
                try:
                    got = read_dataset(cat, model.resolve("/" + name))
                except Exception as exc:  # noqa: BLE001 - an incomplete domain, reported
                    got = f"{type(exc).__name__}: {exc}"
                if not isinstance(got, np.ndarray) or not np.array_equal(got, data):
                    self.tally.failures.append(f"{domain}: visible but dataset {name} is incomplete ({str(got)[:200]})")
        if finished or visible:
            key = "finished first" if finished else "killed, complete"
        else:
            key = "killed mid-way (objects left, no domain)" if self._orphans(cat) else "killed before writing"
        self.tally.imports[key] += 1
        self.say(f"  import {domain}: {key}")
        return visible

    @staticmethod
    def _orphans(cat) -> list[str]:
        """``db/`` prefixes no domain refers to (what a killed import leaves)."""
        from polyfs.model import keys

        live = {keys.domain_db_prefix(cat.get_json(keys.domain_key(p))["root"]) for p in cat.list_domains()}
        return [p for p in cat.store.list_dir(keys.DB).prefixes if p.rstrip("/") not in {x.rstrip("/") for x in live}]

    def _check(self, when: str) -> None:
        if self.evidence and not is_clean(polyfs_check(self.store, "--deep")):
            n = len(list(self.dir.glob("evidence-*")))  # the store as the crash left it, before --repair
            shutil.copytree(self.store, self.dir / f"evidence-{n}", symlinks=True)
            self.say(f"  (store before --repair copied to {self.dir / f'evidence-{n}'})")
        outcome, text = deep_check(self.store, allow_repair=True)
        label = {"clean": "clean", "repaired": "clean after --repair"}.get(outcome, "failed")
        counts = self.tally.checks.setdefault(when, {"clean": 0, "clean after --repair": 0, "failed": 0})
        counts[label] += 1
        if outcome == "failed":
            self.tally.failures.append(f"check --deep {when}: {text.strip()}")
            return
        kinds: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith("problem:"):
                what = next((name for key, name in PROBLEM_KINDS if key in line), "other")
                kinds[what] = kinds.get(what, 0) + 1
        fixed = self.tally.repaired.setdefault(when, {})
        for what, n in kinds.items():
            fixed[what] = fixed.get(what, 0) + n
        self.say(f"  check --deep {when}: {label}" + (f" ({', '.join(f'{k} {v}' for k, v in kinds.items())})"
                                                      if kinds else ""))

    def _repair_phase(self, r: int, after: float, recovered: dict[str, np.ndarray]) -> None:
        """``check --repair`` (and the daemon) killed at a random moment; nothing of the data may
        change, and the next ``check --deep`` is clean after ``--repair`` at most."""
        from polyfs.model import keys
        from polyfs.store import open_store

        cat, store = catalog(self.store), open_store(str(self.store))
        tables = [keys.crc_table_key(cat.load(k.domain).resolve("/a").id) for k in self.kinds]
        tables = [t for t in tables if (self.store / t).exists()]  # deflate datasets only
        if tables:  # work for --repair; derived data, so dropping it only costs time
            store.delete(tables[r % len(tables)])
        t0 = time.monotonic()
        rep = self._started(subprocess.Popen(self._check_cmd("--repair"), stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL))
        try:
            rep.wait(timeout=after)
            self.tally.repairs["finished first"] += 1
        except subprocess.TimeoutExpired:
            self.tally.repairs["killed"] += 1
        took = time.monotonic() - t0
        self._kill_daemon(rep)
        self._reap([rep])
        cleanup_mount(self.mnt)
        if rep.returncode == 0:
            self.repair_secs = max(0.2, took)
        for kind in self.kinds:
            got = stored_chunks(kind, self.store)
            bad = [c for c, region in grid_of(kind)
                   if isinstance(got[c], str) or not np.array_equal(got[c], recovered[kind.name][region])]
            if bad:
                self.tally.failures.append(f"{kind.name}: chunks {bad[:5]} changed across a killed check --repair")
        self._check("after the killed --repair")
        self.base = recovered
        self._remount(r + 1)

    def _check_cmd(self, *flags: str) -> list[str]:
        from conftest import polyfs_cmd

        return polyfs_cmd("check", str(self.store), *flags)

    def _daemon_log_problems(self) -> None:
        """Errors (an internal one comes with its traceback, a refused write with one line) are
        never expected here: every write in the loop is valid, and a killed daemon logs nothing."""
        text = self.log.read_text() if self.log.exists() else ""
        new, self._log_seen = text[self._log_seen:], len(text)
        bad = [ln for ln in new.splitlines() if " ERROR " in ln or ln.startswith("Traceback")]
        if bad:
            self.tally.failures.append("daemon log has errors:\n" + "\n".join(bad[:20]))

    def close(self) -> None:
        """Unmount, and kill what a failed round left running (only processes this loop started)."""
        from conftest import is_mounted

        sigkill(*(p for p in self._procs if p.poll() is None))
        for p in self._procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.mount is not None and is_mounted(self.mnt):
            try:
                self.mount.stop()
            except subprocess.TimeoutExpired:
                pass
            if is_mounted(self.mnt):
                cleanup_mount(self.mnt)
