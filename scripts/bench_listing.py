"""``ls -l`` / ``find`` / ``du`` over many domains through a real mount, as ratios against a
baseline measured in the same run (``ls -lR`` of a local-disk tree of the same number of files).

    .venv/bin/python scripts/bench_listing.py [--domains 40] [--datasets 200] [--work /tmp/bench_listing]

Builds (once, kept in ``--work``) a store of DOMAINS h5py files of DATASETS small chunked,
gzip'd datasets each, imported with ``polyfs import``; mounts it read-only and times, each on
a fresh mount (cold caches): ``ls -l hdf5/`` (every domain's HDF5 file planned for its size),
``ls -lR tiff/``, ``find zarr -type f | wc -l``, ``find n5 -type f | wc -l``, ``du -s zarr``.
Prints seconds, the ratio to the baseline and the daemon's VmHWM after each.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POLYFS = str(REPO / ".venv" / "bin" / "polyfs")
COMMANDS = [
    ("ls -l hdf5", "ls -l hdf5 > /dev/null"),
    ("ls -lR tiff", "ls -lR tiff > /dev/null"),
    ("find zarr -type f", "find zarr -type f | wc -l > /dev/null"),
    ("find n5 -type f", "find n5 -type f | wc -l > /dev/null"),
    ("du -s zarr", "du -s zarr > /dev/null"),
]


def build(work: Path, domains: int, datasets: int) -> Path:
    """The store (made once): h5py files imported one by one, as a user would."""
    import h5py
    import numpy as np

    store = work / f"store-{domains}x{datasets}"
    if (store / ".complete").exists():
        return store
    src = work / "src"
    src.mkdir(parents=True, exist_ok=True)
    for d in range(domains):
        path = src / f"d{d:03d}.h5"
        with h5py.File(path, "w") as f:
            for i in range(datasets):
                f.create_dataset(f"v{i:04d}", data=np.arange(64, dtype="f4").reshape(8, 8) + i,
                                 chunks=(4, 8), compression="gzip")
        subprocess.run([POLYFS, "import", str(path), str(store), "--no-progress", "--overwrite"],
                       check=True, stdout=subprocess.DEVNULL)
    (store / ".complete").write_text("")
    return store


def baseline(work: Path, nfiles: int) -> float:
    """``ls -lR`` of ``nfiles`` small files in 40 local directories (page cache warm)."""
    tree = work / f"local-{nfiles}"
    if not tree.exists():
        for i in range(nfiles):
            d = tree / f"d{i % 40:02d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"f{i:06d}").write_bytes(b"x" * 64)
    return timed(f"ls -lR {tree} > /dev/null", work)


def timed(cmd: str, cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, shell=True, cwd=cwd, check=True)
    return time.perf_counter() - t


def daemon_hwm(mnt: Path) -> str:
    """VmHWM of the daemon serving ``mnt`` (found by its command line)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"mount" in cmd and str(mnt).encode() in cmd:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", type=int, default=40)
    ap.add_argument("--datasets", type=int, default=200)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_listing"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    store = build(args.work, args.domains, args.datasets)
    base = baseline(args.work, args.domains * args.datasets)
    print(f"baseline: ls -lR of {args.domains * args.datasets} local files: {base:.3f} s")
    mnt = args.work / "mnt"
    mnt.mkdir(exist_ok=True)
    for name, cmd in COMMANDS:
        subprocess.run([POLYFS, "mount", str(store), str(mnt), "--read-only"], check=True)
        for _ in range(100):  # the daemon serves once the mount point is a mount
            if os.path.ismount(mnt):
                break
            time.sleep(0.1)
        try:
            secs = timed(cmd, mnt)
            print(f"{name:20s} {secs:7.3f} s  x{secs / base:8.1f} baseline  daemon VmHWM {daemon_hwm(mnt)}")
            sys.stdout.flush()
        finally:
            subprocess.run([POLYFS, "umount", str(mnt)], check=True)


if __name__ == "__main__":
    main()
