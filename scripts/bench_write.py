"""Write throughput and daemon memory of the Zarr view through a real mount, as
ratios against native Zarr v3 stores written in the same run (the machines are
shared and noisy).

    .venv/bin/python scripts/bench_write.py [--sizes 1024,4096] [--tools tensorstore,zarr]
        [--modes slab,aligned] [--rounds 1] [--quick] [--workdir DIR] [--src DIR]

Data: uint16 (N, 1024, 512), N = size in MiB rounded to whole 256-plane shards,
a smooth gradient rising with z plus 6 bits of noise (compressible, not
trivial). Never held whole: each 64-plane block is generated when needed,
seeded by its index, and generated again to check what is read back.

Every array has 64^3 inner chunks in 256^3 shards (``sharding_indexed``: inner
``bytes`` little-endian + ``zstd`` level 3, index ``bytes`` + ``crc32c``), made
and written slab by slab along z by
  tensorstore   zarr3 driver, file kvstore, ``arr[z0:z1].write(slab).result()``
  zarr          zarr-python >= 3, ``LocalStore``, ``arr[z0:z1] = slab``
in two modes: ``slab`` (64 planes: every write is a partial shard, so each
shard is written 4 times, read-modify-write) and ``aligned`` (256 planes:
whole shards); once to a native directory on local disk (deleted once timed)
once through a polyfs mount into a new domain (``mkdir
MNT/zarr/<name>.zarr``), and once through the pyfuse3 ceiling
(``scripts/fuse_ceiling.py --writable``: a pass-through that writes each request
straight to a local directory, so ceiling/native is what any pyfuse3 daemon adds
on this machine), rotating which goes first. Timed: create + slab writes, not
data generation. Each size gets a fresh store and mount
(``polyfs mount STORE MNT -o write_buffer_mb=256``, retried without the option
if refused), so the daemon's VmHWM is per size. ``--src DIR`` runs the daemon
from another polyfs tree (PYTHONPATH), e.g. ``git archive HEAD polyfs``.

Printed: per tool, mode and size the native, mount and ceiling seconds (best
of --rounds; each mount write also with the daemon's CPU seconds it took),
mount/native against the target (<= 1.5), ceiling/native and mount/ceiling;
per size the daemon's peak RSS (VmHWM of the process whose command line names
the mountpoint) after the writes and after read-back, against 512 MiB and not
growing with size; the daemon log's warnings and errors. Read-back is through the mount with
tensorstore: sampled 64-plane blocks of every array, all of them at 256 MiB.
Exit status 1 when a write failed or read back wrong; missed targets do not
fail a benchmark.

CLEANUP: each size's store is deleted only at the end of the run. Deleting the
thousands of chunk files of one size's store just before the next size's writes
made every file the mount then created cost more: ext4 without a journal (the
root file system of these machines) skips inodes freed in the last 60-300 s
(``recently_deleted``), scanning past each of them at every file creation in
that block group. That cost belongs to the cleanup, not to the write measured,
and it falls on the mount alone (one file per chunk; the native writes make one
per shard). Native and ceiling outputs (a few shard files) are still deleted
once timed.
"""
from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fuse_ceiling import Ceiling  # beside this script

REPO = Path(__file__).resolve().parents[1]
CHUNK = 64
SHARD = 256
PLANE = (1024, 512)  # one z plane of uint16 is 1 MiB
STEP = {"slab": CHUNK, "aligned": SHARD}
SIDES = ["native", "mount", "ceiling"]
TARGET = 1.5
RSS_TARGET_MIB = 512
BUFFER_OPT = "write_buffer_mb=256"

Put = Callable[[int, int, np.ndarray], None]


# -- data ------------------------------------------------------------------
def planes(size_mib: int) -> int:
    return max(SHARD, size_mib // SHARD * SHARD)


@functools.cache
def base_plane() -> np.ndarray:
    yy, xx = np.meshgrid(np.arange(PLANE[0], dtype="f4"), np.arange(PLANE[1], dtype="f4"), indexing="ij")
    return (np.sin(yy / 40.0) + np.cos(xx / 30.0)) * 1000 + 4000


def make_slab(z0: int, z1: int) -> np.ndarray:
    """Planes z0..z1 (multiples of 64); block b is the same whichever slab asks for it."""
    out = np.empty((z1 - z0, *PLANE), dtype="<u2")
    for b0 in range(z0, z1, CHUNK):
        z = (np.arange(b0, b0 + CHUNK, dtype="f4") % 4096)[:, None, None]
        noise = np.random.default_rng(b0 // CHUNK).integers(0, 64, (CHUNK, *PLANE), dtype="u2")
        out[b0 - z0:b0 - z0 + CHUNK] = (base_plane()[None] + z * 8).astype("u2") + noise
    return out


# -- writers ---------------------------------------------------------------
def ts_spec(path: Path, shape: tuple[int, ...]) -> dict[str, Any]:
    """tensorstore spec creating a sharded zstd Zarr v3 array at ``path``."""
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "create": True,
        "metadata": {
            "shape": list(shape),
            "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [min(SHARD, s) for s in shape]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [CHUNK] * len(shape),
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                           {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end"}}],
        },
    }


def ts_open(path: Path, shape: tuple[int, ...]) -> Put:
    import tensorstore as ts

    arr = ts.open(ts_spec(path, shape)).result()

    def put(z0: int, z1: int, slab: np.ndarray) -> None:
        arr[z0:z1].write(slab).result()
    return put


def zarr_open(path: Path, shape: tuple[int, ...]) -> Put:
    import zarr
    import zarr.codecs
    import zarr.storage

    arr = zarr.create_array(store=zarr.storage.LocalStore(str(path)), shape=shape, dtype="uint16",
                            chunks=(CHUNK,) * len(shape), shards=tuple(min(SHARD, s) for s in shape),
                            compressors=zarr.codecs.ZstdCodec(level=3), fill_value=0, zarr_format=3)

    def put(z0: int, z1: int, slab: np.ndarray) -> None:
        arr[z0:z1] = slab
    return put


OPENERS: dict[str, Callable[[Path, tuple[int, ...]], Put]] = {"tensorstore": ts_open, "zarr": zarr_open}


def timed_write(tool: str, path: Path, n: int, step: int) -> float:
    """Seconds spent creating the array and writing it in ``step``-plane slabs."""
    t0 = time.perf_counter()
    put = OPENERS[tool](path, (n, *PLANE))
    spent = time.perf_counter() - t0
    for z0 in range(0, n, step):
        slab = make_slab(z0, z0 + step)
        t0 = time.perf_counter()
        put(z0, z0 + step, slab)
        spent += time.perf_counter() - t0
    return spent


def verify(path: Path, n: int, whole: bool) -> str:
    """'' if the array at ``path`` (read with tensorstore) holds the data, else what differs."""
    import tensorstore as ts

    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()
    if tuple(arr.shape) != (n, *PLANE) or arr.dtype.numpy_dtype != np.dtype("uint16"):
        return f"shape/dtype {tuple(arr.shape)} {arr.dtype}"
    blocks = range(0, n, CHUNK) if whole else sorted({0, CHUNK, n // 2 + 2 * CHUNK, n - CHUNK})
    for z0 in blocks:
        if not np.array_equal(arr[z0:z0 + CHUNK].read().result(), make_slab(z0, z0 + CHUNK)):
            return f"planes {z0}..{z0 + CHUNK} differ"
    return ""


# -- the daemon ------------------------------------------------------------
def polyfs_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "polyfs"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "polyfs"]


def daemon_env(src: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH", "")]))
    return env


def mount(store: Path, mnt: Path, log: Path, src: Path | None) -> str:
    """Mount (daemonized); says whether the daemon took ``-o write_buffer_mb``."""
    cmd = polyfs_cmd() + ["mount", str(store), str(mnt), "--log-file", str(log), "--log-level", "info"]
    run = functools.partial(subprocess.run, check=False, capture_output=True, text=True, cwd=REPO, env=daemon_env(src))
    first = run(cmd + ["-o", BUFFER_OPT])
    if first.returncode == 0:
        return f"with -o {BUFFER_OPT}"
    log.unlink(missing_ok=True)  # the refusal is reported here, not as a daemon error
    second = run(cmd)
    if second.returncode != 0:
        raise RuntimeError(f"mount failed: {second.stderr.strip()}")
    return f"without -o {BUFFER_OPT} (refused: {first.stderr.strip()})"


def umount(mnt: Path, src: Path | None) -> None:
    r = subprocess.run(polyfs_cmd() + ["umount", str(mnt)], check=False, cwd=REPO, env=daemon_env(src))
    if r.returncode != 0:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)


def daemon_pid(mnt: Path) -> int | None:
    """The process whose command line is ``... polyfs mount ... MNT``."""
    want = os.path.realpath(mnt).encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mount" in args and any(os.path.realpath(a.decode(errors="replace")).encode() == want
                                     for a in args if a):
            return int(d.name)
    return None


def status_mib(pid: int | None, key: str = "VmHWM") -> float | None:
    """A memory figure of /proc/PID/status (VmHWM: peak RSS; VmRSS: now), in MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key + ":"))
    except (OSError, TypeError, StopIteration):
        return None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds the process has used (/proc/PID/stat): what the daemon
    spends per write, a figure that noise on a shared machine moves less than wall time."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, TypeError, IndexError, ValueError):
        return None


def log_problems(log: Path) -> list[str]:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln for ln in lines if " WARNING " in ln or " ERROR " in ln or " CRITICAL " in ln]


# -- one run ---------------------------------------------------------------
@dataclass
class Row:
    tool: str
    mode: str
    size: int
    native: list[float] = field(default_factory=list)
    mount: list[float] = field(default_factory=list)
    ceiling: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    mismatch: list[str] = field(default_factory=list)
    arrays: list[Path] = field(default_factory=list)


@dataclass
class SizeMemory:
    size: int
    buffer_note: str = ""
    pid: int | None = None
    after_mount: float | None = None
    after_writes: float | None = None
    after_read: float | None = None
    store_mb: float = 0.0
    problems: list[str] = field(default_factory=list)


def write_one(row: Row, side: str, path: Path, n: int, pid: int | None) -> None:
    try:
        if side == "mount":
            path.parent.mkdir()  # a new domain
        cpu0 = cpu_seconds(pid)
        t = timed_write(row.tool, path, n, STEP[row.mode])
        cpu1 = cpu_seconds(pid)
    except Exception as exc:  # noqa: BLE001 - a failed write is a result, reported at the end
        row.errors.append(f"{side}: {type(exc).__name__}: {exc}")
        print(f"  {row.tool:11} {row.mode:7} {row.size} MiB {side:7}: FAILED {type(exc).__name__}: {exc}",
              flush=True)
        return
    getattr(row, side).append(t)
    if side == "mount":
        row.arrays.append(path)
    cpu = f"{cpu1 - cpu0:.1f}" if cpu0 is not None and cpu1 is not None else "-"
    mem = f"   daemon VmHWM {fmt(status_mib(pid), '.0f')} MiB, VmRSS {fmt(status_mib(pid, 'VmRSS'), '.0f')} MiB, " \
          f"CPU {cpu} s"
    print(f"  {row.tool:11} {row.mode:7} {row.size} MiB {side:7}: {t:7.2f} s  "
          f"{n * 2**20 / t / 1e6:6.0f} MB/s{mem if side == 'mount' else ''}", flush=True)


def verify_rows(rows: list[Row], n: int, whole: bool) -> None:
    for row in rows:
        for path in row.arrays:
            try:
                bad = verify(path, n, whole)
            except Exception as exc:  # noqa: BLE001 - a failed read is a mismatch
                bad = f"{type(exc).__name__}: {exc}"
            if bad:
                row.mismatch.append(f"{path.parent.name}: {bad}")
        print(f"  {row.tool:11} {row.mode:7} {row.size} MiB read back ({'whole' if whole else 'sampled'}): "
              f"{'; '.join(row.mismatch) or 'equal'}", flush=True)


def bench_size(size: int, args: argparse.Namespace) -> tuple[list[Row], SizeMemory]:
    work: Path = args.workdir
    n = planes(size)
    store, mnt, log, native = work / f"store-{size}", work / "mnt", work / f"polyfs-{size}.log", work / "native"
    plain = work / "ceiling-src"  # what the ceiling writes to
    for d in (store, native, plain):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    mnt.mkdir(exist_ok=True)
    log.unlink(missing_ok=True)
    rows = [Row(t, m, size) for t in args.tools for m in args.modes]
    mem = SizeMemory(size)
    print(f"\n== {size} MiB: ({n}, {PLANE[0]}, {PLANE[1]}) uint16, {n // SHARD * 8} shards per array", flush=True)
    mem.buffer_note = mount(store, mnt, log, args.src)
    print(f"mounted {mnt} {mem.buffer_note}; log {log}", flush=True)
    try:
        mem.pid = daemon_pid(mnt)
        mem.after_mount = status_mib(mem.pid)
        turn = 0
        with Ceiling(plain, work / "ceiling", writable=True) as cmnt:
            for rnd in range(args.rounds):
                for row in rows:
                    name = f"{row.tool}-{row.mode}-r{rnd}"
                    sides = SIDES[turn % 3:] + SIDES[:turn % 3]
                    turn += 1
                    for side in sides:
                        if side == "native":
                            write_one(row, side, native / f"{name}.zarr", n, mem.pid)
                            shutil.rmtree(native / f"{name}.zarr", ignore_errors=True)
                        elif side == "ceiling":  # a new name each time: the kernel caches names
                            write_one(row, side, cmnt / f"{name}.zarr", n, mem.pid)
                            shutil.rmtree(plain / f"{name}.zarr", ignore_errors=True)
                        else:
                            write_one(row, side, mnt / "zarr" / f"{name}.zarr" / "arr", n, mem.pid)
        mem.after_writes = status_mib(mem.pid)
        mem.store_mb = sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) / 1e6
        verify_rows(rows, n, whole=size <= 256)
        mem.after_read = status_mib(mem.pid)
        if mem.pid is not None and not Path(f"/proc/{mem.pid}").exists():
            print(f"  daemon pid {mem.pid} is gone", flush=True)
    finally:
        umount(mnt, args.src)
        # the store is deleted at the end of the run (main), not here: see CLEANUP
        shutil.rmtree(native, ignore_errors=True)
        shutil.rmtree(plain, ignore_errors=True)
    mem.problems = log_problems(log)
    return rows, mem


# -- report ----------------------------------------------------------------
def fmt(x: float | None, spec: str = "8.2f") -> str:
    return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0] or 1))


def print_problems(label: str, problems: list[str]) -> None:
    """The daemon log's warning/error lines (count, and the first few)."""
    print(f"{label}: {len(problems)} warning/error lines")
    for line in problems[:8]:
        print("  " + line[:300])


def report(rows: list[Row], mems: list[SizeMemory]) -> bool:
    """Prints the tables; True when every write succeeded and read back equal."""
    ok = True
    print(f"\n{'tool':11} {'mode':7} {'MiB':>5} {'native s':>8} {'mount s':>8} {'ceil. s':>8} {'ratio':>6} "
          f"{'target':>7} {'ceil./nat.':>10} {'mount/ceil.':>11}  result")
    for r in rows:
        nat, mnt, ceil = (min(v) if v else None for v in (r.native, r.mount, r.ceiling))
        ratio = mnt / nat if nat and mnt else None
        c_ratio = ceil / nat if nat and ceil else None
        if r.errors or r.mismatch:
            ok = False
            verdict = "FAILED: " + "; ".join(r.errors + r.mismatch)
        elif ratio is not None and ratio <= TARGET:
            verdict = "met"
        elif c_ratio is not None and c_ratio > TARGET:
            verdict = "NOT met; unreachable here: the pyfuse3 ceiling itself exceeds it"
        else:
            verdict = "NOT met"
        print(f"{r.tool:11} {r.mode:7} {r.size:5} {fmt(nat)} {fmt(mnt)} {fmt(ceil)} {fmt(ratio, '6.2f')} "
              f"{'<= ' + str(TARGET):>7} {fmt(c_ratio, '10.2f')} {fmt(mnt / ceil if mnt and ceil else None, '11.2f')}"
              f"  {verdict}")
    print(f"\n{'MiB':>5} {'VmHWM after writes':>19} {'after read-back':>16}  target <= {RSS_TARGET_MIB} MiB")
    for m in mems:
        hwm = m.after_writes
        verdict = "pid not found" if hwm is None else ("met" if hwm <= RSS_TARGET_MIB else "NOT met")
        print(f"{m.size:5} {fmt(hwm, '15.0f')} MiB {fmt(m.after_read, '12.0f')} MiB  {verdict}"
              f"   (after mount {fmt(m.after_mount, '.0f')} MiB, store {m.store_mb:.0f} MB, pid {m.pid}, "
              f"{m.buffer_note.split(' (')[0]})")
    hwms = [(m.size, m.after_writes) for m in mems if m.after_writes is not None]
    if len(hwms) > 1:
        (s0, h0), (s1, h1) = hwms[0], hwms[-1]
        print(f"growth {s0} -> {s1} MiB: {h1 - h0:+.0f} MiB -> "
              f"{'not growing' if h1 <= 1.1 * h0 + 32 else 'GROWS with size'}")
    for m in mems:
        print_problems(f"\ndaemon log, {m.size} MiB", m.problems)
    return ok


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,4096", help="MiB per array, comma separated")
    ap.add_argument("--tools", default="tensorstore,zarr", help="tensorstore,zarr")
    ap.add_argument("--modes", default="slab,aligned", help="slab (64 planes), aligned (256 planes)")
    ap.add_argument("--rounds", type=int, default=1, help="writes per tool/mode/side; the best is kept")
    ap.add_argument("--quick", action="store_true", help="CI smoke: 256 MiB, one round")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench-write"))
    ap.add_argument("--src", type=Path, default=None,
                    help="run the daemon from this polyfs source tree (PYTHONPATH), e.g. a git archive")
    args = ap.parse_args()
    args.sizes = [256] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    args.rounds = 1 if args.quick else max(1, args.rounds)
    args.tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [t for t in args.tools if t not in OPENERS] + [m for m in args.modes if m not in STEP]
    if unknown:
        ap.error(f"unknown {unknown} (tools: tensorstore, zarr; modes: slab, aligned)")
    if "zarr" in args.tools:
        import zarr
        if int(zarr.__version__.split(".")[0]) < 3:
            ap.error(f"zarr-python {zarr.__version__}: need >= 3")
    return args


def main() -> int:
    args = parse_args()
    work: Path = args.workdir
    mounted = {ln.split()[1] for ln in Path("/proc/self/mounts").read_text().splitlines()}
    if os.path.realpath(work / "mnt") in mounted:  # left by an interrupted run: never rmtree through it
        umount(work / "mnt", args.src)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    import tensorstore  # noqa: F401 - fail early
    rows: list[Row] = []
    mems: list[SizeMemory] = []
    try:
        for size in args.sizes:
            r, m = bench_size(size, args)
            rows += r
            mems.append(m)
    finally:
        for size in args.sizes:  # CLEANUP: only now
            shutil.rmtree(work / f"store-{size}", ignore_errors=True)
    return 0 if report(rows, mems) else 1


if __name__ == "__main__":
    sys.exit(main())
