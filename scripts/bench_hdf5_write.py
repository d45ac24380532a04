"""Write throughput and daemon memory of the HDF5 view through a real mount: h5py
``"r+"`` on ``MNT/hdf5/<stem>.h5`` against h5py ``"r+"`` on a local copy of the
same HDF5 file, as ratios measured in the same run (the machines are shared and
noisy).

    .venv/bin/python scripts/bench_hdf5_write.py [--sizes 4096,1024] [--quick]
        [--workdir DIR] [--level 1] [--src DIR]

Data: uint16 planes of (1024, 512) (1 MiB each), as in bench_write.py: a smooth
gradient rising with z plus 6 bits of noise, generated 64-plane block by block
(seeded by the block's index), never held whole, and generated again to check
what is read back.

The source file (made once, imported with ``polyfs import`` into a fresh store)
holds two chunked datasets, chunks (8, 256, 256) = 1 MiB, gzip level 1
(``--level``), maxshape (None, 1024, 512):

  data  OVERWRITE MiB of planes (the first --sizes figure), holding other values
  grow  64 planes (the second figure is what gets appended)

Why gzip 1: deflate is HDF5's built-in filter, readable by every HDF5 install
(no plugin), the codec h5py users reach for (``compression="gzip"``) and the
one polyfs serves zero-copy in every view and HSDS reads; level 1 is the level
people pick for throughput, so the baseline is not dominated by compression
(HDF5 compresses on one core either way).

Cases, each timed from ``h5py.File(..., "r+")`` to the end of ``close()``
(through the mount, close is the commit), writing 64-plane slabs (64 MiB, whole
chunks) in z order; data generation is not timed:

  overwrite  every plane of ``data`` rewritten with new values
  append     ``grow`` resized slab by slab along its unlimited axis, APPEND MiB

Each case runs once on a fresh ``cp`` of the source file in WORKDIR/local and
once through the mount (``polyfs mount STORE MNT -o write_buffer_mb=256,
scratch_dir=WORKDIR/scratch``), alternating which goes first. Printed per case:
seconds through the view, seconds local, their ratio (target <= 2), the daemon's
VmHWM (peak RSS of the process whose command line names the mountpoint; target
<= 512 MiB) after the commit, and whether the data read back equal: whole
through ``MNT/hdf5`` with a fresh h5py open, sampled 64-plane blocks through
``MNT/zarr`` with tensorstore and from the local file (whole when small).
Exit status 1 when a write failed or read back wrong; missed targets do not
fail a benchmark. ``--src DIR`` runs the daemon from another polyfs tree.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_write as bw  # the data generator and the daemon helpers are shared

REPO = bw.REPO
PLANE = bw.PLANE
SLAB = bw.CHUNK  # planes per write call: 64 MiB, whole (8, 256, 256) chunks
CHUNKS = (8, 256, 256)
GROW0 = SLAB  # planes ``grow`` starts with
TARGET = 2.0
RSS_TARGET_MIB = 512
STEM = "bench"


# -- data ------------------------------------------------------------------
def old_slab(z0: int, z1: int) -> np.ndarray:
    """What the source file holds (differs from the new values everywhere)."""
    return bw.make_slab(z0, z1) + np.uint16(7)


def new_slab(z0: int, z1: int) -> np.ndarray:
    return bw.make_slab(z0, z1)


def planes(size_mib: int) -> int:
    return max(SLAB, size_mib // SLAB * SLAB)


def make_source(path: Path, n_data: int, level: int) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        kw = {"dtype": "<u2", "chunks": CHUNKS, "compression": "gzip", "compression_opts": level,
              "maxshape": (None, *PLANE)}
        d = f.create_dataset("data", shape=(n_data, *PLANE), **kw)
        for z0 in range(0, n_data, SLAB):
            d[z0:z0 + SLAB] = old_slab(z0, z0 + SLAB)
        f.create_dataset("grow", data=old_slab(0, GROW0), **kw)
        f.attrs["title"] = "polyfs hdf5 write benchmark"


# -- the timed writers -----------------------------------------------------
def timed_slabs(path: Path, name: str, starts: range, grow: bool) -> tuple[float, float]:
    """h5py ``r+`` writing ``SLAB``-plane slabs at ``starts`` into dataset ``name`` (``grow``:
    resized first, an append); seconds including the close (through the mount: the flush that
    commits), and the close alone. Data generation is not timed."""
    import h5py

    t0 = time.perf_counter()
    f = h5py.File(path, "r+")
    spent = time.perf_counter() - t0
    try:
        d = f[name]
        for z0 in starts:
            slab = new_slab(z0, z0 + SLAB)
            t0 = time.perf_counter()
            if grow:
                d.resize(z0 + SLAB, axis=0)
            d[z0:z0 + SLAB] = slab
            spent += time.perf_counter() - t0
    finally:
        t0 = time.perf_counter()
        f.close()
        closing = time.perf_counter() - t0
    return spent + closing, closing


def overwrite(path: Path, n: int) -> tuple[float, float]:
    return timed_slabs(path, "data", range(0, n, SLAB), grow=False)


def append(path: Path, n: int) -> tuple[float, float]:
    return timed_slabs(path, "grow", range(GROW0, GROW0 + n, SLAB), grow=True)


# -- checks ----------------------------------------------------------------
def expected(case: str, z0: int, z1: int) -> np.ndarray:
    if case == "overwrite" or z0 >= GROW0:
        return new_slab(z0, z1)
    return old_slab(z0, z1)


def blocks(n_total: int, whole: bool) -> list[int]:
    if whole:
        return list(range(0, n_total, SLAB))
    last = n_total - SLAB
    return sorted({0, SLAB if SLAB <= last else 0, (n_total // 2) // SLAB * SLAB, last})


def check_h5(path: Path, case: str, n_total: int, whole: bool) -> str:
    """'' if the dataset in the HDF5 file at ``path`` holds what was written, else what differs."""
    import h5py

    name = "data" if case == "overwrite" else "grow"
    with h5py.File(path, "r") as f:
        d = f[name]
        if d.shape != (n_total, *PLANE) or d.dtype != np.dtype("<u2") or d.chunks != CHUNKS \
                or d.compression != "gzip":
            return f"{name}: shape/dtype/layout {d.shape} {d.dtype} {d.chunks} {d.compression}"
        for z0 in blocks(n_total, whole):
            if not np.array_equal(d[z0:z0 + SLAB], expected(case, z0, z0 + SLAB)):
                return f"{name}: planes {z0}..{z0 + SLAB} differ"
    return ""


def check_zarr(mnt: Path, case: str, n_total: int, whole: bool) -> str:
    """The same through the Zarr view (another rendering of the canonical store), with tensorstore."""
    import tensorstore as ts

    name = "data" if case == "overwrite" else "grow"
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                                  "path": str(mnt / "zarr" / f"{STEM}.zarr" / name)}}).result()
    if tuple(arr.shape) != (n_total, *PLANE):
        return f"zarr {name}: shape {tuple(arr.shape)}"
    for z0 in blocks(n_total, whole):
        if not np.array_equal(arr[z0:z0 + SLAB].read().result(), expected(case, z0, z0 + SLAB)):
            return f"zarr {name}: planes {z0}..{z0 + SLAB} differ"
    return ""


# -- the daemon ------------------------------------------------------------
def mount(store: Path, mnt: Path, log: Path, scratch: Path, src: Path | None) -> None:
    opts = f"write_buffer_mb=256,scratch_dir={scratch}"
    cmd = bw.polyfs_cmd() + ["mount", str(store), str(mnt), "--log-file", str(log), "--log-level", "info",
                             "-o", opts]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=REPO, env=bw.daemon_env(src))
    if r.returncode != 0:
        raise RuntimeError(f"mount failed: {r.stderr.strip()}")


def polyfs_import(source: Path, store: Path, src: Path | None) -> None:
    r = subprocess.run(bw.polyfs_cmd() + ["import", str(source), str(store), "--domain", f"/{STEM}.h5"],
                       check=False, capture_output=True, text=True, cwd=REPO, env=bw.daemon_env(src))
    if r.returncode != 0:
        raise RuntimeError(f"polyfs import failed: {r.stderr.strip()}")


def du_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6 if path.exists() else 0.0


# -- one run ---------------------------------------------------------------
@dataclass
class Case:
    name: str
    size: int  # MiB written
    n: int  # planes written
    n_total: int  # planes of the dataset afterwards
    local: float | None = None
    view: float | None = None
    closes: dict[str, float] = field(default_factory=dict)  # side -> seconds of close() alone
    hwm: float | None = None
    rss: float | None = None
    errors: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)


WRITERS = {"overwrite": overwrite, "append": append}


def run_side(case: Case, side: str, path: Path, pid: int | None) -> None:
    try:
        t, closing = WRITERS[case.name](path, case.n)
    except Exception as exc:  # noqa: BLE001 - a failed write is a result, reported at the end
        case.errors.append(f"{side}: {type(exc).__name__}: {' '.join(str(exc).split())}")
        print(f"  {case.name:9} {case.size:5} MiB {side:5}: FAILED {case.errors[-1]}", flush=True)
        return
    setattr(case, side, t)
    case.closes[side] = closing
    extra = ""
    if side == "view":
        case.hwm, case.rss = bw.status_mib(pid), bw.status_mib(pid, "VmRSS")
        extra = f"   daemon VmHWM {bw.fmt(case.hwm, '.0f')} MiB, VmRSS {bw.fmt(case.rss, '.0f')} MiB"
    print(f"  {case.name:9} {case.size:5} MiB {side:5}: {t:8.2f} s {case.n * 2**20 / t / 1e6:6.0f} MB/s "
          f"(close {closing:.2f} s){extra}", flush=True)


def bench(args: argparse.Namespace) -> tuple[list[Case], dict]:
    work: Path = args.workdir
    size_o, size_a = args.sizes
    n_data = planes(size_o)
    source, store, mnt, log = work / f"{STEM}.h5", work / "store", work / "mnt", work / "polyfs.log"
    scratch, local = work / "scratch", work / "local"
    for d in (store, scratch, local, mnt):
        d.mkdir(parents=True, exist_ok=True)
    info: dict = {}
    t0 = time.perf_counter()
    make_source(source, n_data, args.level)
    info["source"] = (time.perf_counter() - t0, source.stat().st_size / 1e6)
    print(f"source {source}: data ({n_data}, {PLANE[0]}, {PLANE[1]}) uint16, chunks {CHUNKS}, gzip {args.level}: "
          f"{info['source'][1]:.0f} MB in {info['source'][0]:.1f} s", flush=True)
    t0 = time.perf_counter()
    polyfs_import(source, store, args.src)
    print(f"polyfs import: {time.perf_counter() - t0:.1f} s, store {du_mb(store):.0f} MB", flush=True)
    mount(store, mnt, log, scratch, args.src)
    pid = bw.daemon_pid(mnt)
    info["pid"], info["after_mount"] = pid, bw.status_mib(pid)
    print(f"mounted {mnt} (pid {pid}, VmHWM {bw.fmt(info['after_mount'], '.0f')} MiB); log {log}", flush=True)
    view = mnt / "hdf5" / f"{STEM}.h5"
    cases = [Case("overwrite", size_o, n_data, n_data), Case("append", size_a, planes(size_a), GROW0 + planes(size_a))]
    try:
        for turn, case in enumerate(cases):
            if case.size <= 0:
                continue
            copy = local / f"{STEM}.h5"
            shutil.copyfile(source, copy)
            for side in (("local", "view") if turn % 2 == 0 else ("view", "local")):
                run_side(case, side, copy if side == "local" else view, pid)
            whole = case.n_total <= args.whole_mib
            for what, check, where, every in (("hdf5 view", check_h5, view, True),
                                              ("zarr view", check_zarr, mnt, whole),
                                              ("local file", check_h5, copy, whole)):
                if (case.local if what == "local file" else case.view) is None:
                    continue
                t0 = time.perf_counter()
                try:
                    bad = check(where, case.name, case.n_total, every)
                except Exception as exc:  # noqa: BLE001 - a failed read is a mismatch
                    bad = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                case.checks.append(f"{what}: {bad or 'equal'}")
                print(f"  {case.name:9} read back {what:10} "
                      f"({'whole' if every else 'sampled'}): {bad or 'equal'} "
                      f"[{time.perf_counter() - t0:.1f} s]", flush=True)
                if bad:
                    case.errors.append(f"{what}: {bad}")
            copy.unlink(missing_ok=True)
            print(f"  after read-back: daemon VmHWM {bw.fmt(bw.status_mib(pid), '.0f')} MiB; "
                  f"store {du_mb(store):.0f} MB", flush=True)
        if pid is not None and not Path(f"/proc/{pid}").exists():
            print(f"  daemon pid {pid} is gone", flush=True)
        info["final_hwm"] = bw.status_mib(pid)
    finally:
        bw.umount(mnt, args.src)
    info["problems"] = bw.log_problems(log)
    return cases, info


# -- report ----------------------------------------------------------------
def report(cases: list[Case], info: dict) -> bool:
    ok = True
    print(f"\n{'case':9} {'MiB':>5} {'view s':>8} {'local s':>8} {'ratio':>6} {'<=':>4} {'VmHWM MiB':>10} "
          f"{'<=':>4} {'view close s':>12}  result")
    for c in cases:
        if c.size <= 0:
            continue
        ratio = c.view / c.local if c.view and c.local else None
        if c.errors:
            ok = False
            verdict = "FAILED: " + "; ".join(c.errors)
        else:
            t_ok = ratio is not None and ratio <= TARGET
            m_ok = c.hwm is not None and c.hwm <= RSS_TARGET_MIB
            verdict = (f"time {'met' if t_ok else 'NOT met'}, memory {'met' if m_ok else 'NOT met'}, "
                       f"read back equal")
        print(f"{c.name:9} {c.size:5} {bw.fmt(c.view)} {bw.fmt(c.local)} {bw.fmt(ratio, '6.2f')} {TARGET:4.1f} "
              f"{bw.fmt(c.hwm, '10.0f')} {RSS_TARGET_MIB:4} {bw.fmt(c.closes.get('view'), '12.2f')}  {verdict}")
    print(f"\ndaemon pid {info.get('pid')}: VmHWM after mount {bw.fmt(info.get('after_mount'), '.0f')} MiB, "
          f"at the end {bw.fmt(info.get('final_hwm'), '.0f')} MiB")
    bw.print_problems("daemon log", info.get("problems", []))
    return ok


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4096,1024", help="MiB overwritten, MiB appended (0 skips a case)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 256 MiB overwritten, 128 MiB appended")
    ap.add_argument("--level", type=int, default=1, help="gzip level of the datasets")
    ap.add_argument("--whole-mib", type=int, default=512,
                    help="datasets up to this size are read back whole through every reader (the HDF5 view always)")
    ap.add_argument("--workdir", type=Path, default=Path("/var/tmp/bench-hdf5-write"))
    ap.add_argument("--keep", action="store_true", help="leave the work directory (store, source) behind")
    ap.add_argument("--src", type=Path, default=None,
                    help="run the daemon from this polyfs source tree (PYTHONPATH), e.g. a git archive")
    args = ap.parse_args()
    sizes = [256, 128] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    if len(sizes) == 1:
        sizes.append(0)
    if len(sizes) != 2 or min(sizes) < 0 or sizes[0] <= 0:
        ap.error("--sizes: OVERWRITE_MIB,APPEND_MIB")
    args.sizes = sizes
    return args


def main() -> int:
    args = parse_args()
    work: Path = args.workdir
    mounted = {ln.split()[1] for ln in Path("/proc/self/mounts").read_text().splitlines()}
    if os.path.realpath(work / "mnt") in mounted:  # left by an interrupted run: never rmtree through it
        bw.umount(work / "mnt", args.src)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    import h5py
    import tensorstore  # noqa: F401 - fail early (read-back through the Zarr view)

    print(f"h5py {h5py.version.version}, HDF5 {h5py.version.hdf5_version}; sizes {args.sizes[0]} MiB overwritten, "
          f"{args.sizes[1]} MiB appended; workdir {work}", flush=True)
    try:
        cases, info = bench(args)
    finally:
        if not args.keep:
            mounted = {ln.split()[1] for ln in Path("/proc/self/mounts").read_text().splitlines()}
            if os.path.realpath(work / "mnt") not in mounted:
                shutil.rmtree(work, ignore_errors=True)
    return 0 if report(cases, info) else 1


if __name__ == "__main__":
    sys.exit(main())
