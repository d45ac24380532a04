"""Many small chunk files through the Zarr view: zarr-python writing an array of tiny
chunks (one file each), then ``rm`` of those files, as ratios against the same on a
native directory and through the pyfuse3 ceiling, measured in the same run (the
machines are shared and noisy).

    .venv/bin/python scripts/bench_small_chunks.py [--chunks 2048] [--flat] [--rounds 1] [--workdir DIR]

Data: uint16 (chunks/64, 64) with 1x1 chunks (``--flat``: (1, chunks), every chunk file
in one directory: the per-file cost must not grow with the directory), zstd level 3:
every chunk is a file of a few bytes, so what is timed is the per-file work (create,
write, rename, and the commit behind each rename on the mount), not bytes. zarr-python writes many chunks
at once (``async.concurrency``), most of them into one directory, whose lock the
kernel holds across each create and rename: a mount's per-file latency there is paid
once per file, not once per concurrent writer.

Printed per side (native, ceiling, mount): seconds to create and write the array,
seconds to delete its chunk files with ``find -delete``, the ratios mount/native and
mount/ceiling of both, and the daemon's peak RSS. Read-back through the mount must
give the array written, else exit status 1. There is no target here: the figures are
to compare commits (``--src`` runs the daemon from another polyfs tree).
"""
from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_write import daemon_pid, fmt, mount, status_mib, umount  # beside this script
from fuse_ceiling import Ceiling

SIDES = ["native", "ceiling", "mount"]


def write_array(path: Path, shape: tuple[int, int]) -> float:
    import zarr
    import zarr.codecs

    t0 = time.perf_counter()
    arr = zarr.create_array(store=str(path), shape=shape, chunks=(1, 1), dtype="uint16",
                            compressors=zarr.codecs.ZstdCodec(level=3), fill_value=0, zarr_format=3)
    arr[:] = np.arange(math.prod(shape), dtype="uint16").reshape(shape)
    return time.perf_counter() - t0


def read_back(path: Path, shape: tuple[int, int]) -> bool:
    import zarr

    return bool(np.array_equal(zarr.open_array(str(path), mode="r")[:],
                               np.arange(math.prod(shape), dtype="uint16").reshape(shape)))


def delete_chunks(path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["find", str(path / "c"), "-type", "f", "-delete"], check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=2048, help="chunk files per array (a multiple of 64)")
    ap.add_argument("--rounds", type=int, default=1, help="runs per side; the best is kept")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench-small"))
    ap.add_argument("--src", type=Path, default=None, help="run the daemon from this polyfs tree")
    ap.add_argument("--flat", action="store_true", help="shape (1, N): every chunk file in one directory")
    args = ap.parse_args()
    n = max(64, args.chunks // 64 * 64)
    shape = (1, n) if args.flat else (n // 64, 64)
    work: Path = args.workdir
    store, mnt, native, plain = work / "store", work / "mnt", work / "native", work / "ceiling-src"
    for d in (store, native, plain):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    mnt.mkdir(exist_ok=True)
    log = work / "polyfs.log"
    log.unlink(missing_ok=True)
    best: dict[str, list[float]] = {s: [float("inf"), float("inf")] for s in SIDES}
    ok = True
    print(f"{n} chunk files of (1, 1) uint16, zstd, shape {shape}; {args.rounds} round(s)", flush=True)
    mount(store, mnt, log, args.src)
    try:
        pid = daemon_pid(mnt)
        with Ceiling(plain, work / "ceiling", writable=True) as cmnt:
            for rnd in range(args.rounds):
                for i, side in enumerate(SIDES[rnd % 3:] + SIDES[:rnd % 3]):
                    where = {"native": native / f"a{rnd}", "ceiling": cmnt / f"a{rnd}",
                             "mount": mnt / "zarr" / f"d{rnd}.zarr" / "a"}[side]
                    if side == "mount":
                        where.parent.mkdir()
                    w = write_array(where, shape)
                    if side == "mount" and not read_back(where, shape):
                        print("  mount: read back differs", flush=True)
                        ok = False
                    d = delete_chunks(where)
                    best[side] = [min(best[side][0], w), min(best[side][1], d)]
                    print(f"  round {rnd} {side:8} write {w:7.2f} s  delete {d:7.2f} s", flush=True)
        hwm = status_mib(pid)
    finally:
        umount(mnt, args.src)
    nat, ceil, mnt_ = best["native"], best["ceiling"], best["mount"]
    print("\nwhat      native s  ceil. s  mount s  mount/native  mount/ceil.  ms per file (mount)")
    for k, what in enumerate(["write", "delete"]):
        print(f"{what:8} {nat[k]:9.2f} {ceil[k]:8.2f} {mnt_[k]:8.2f} {mnt_[k] / nat[k]:13.1f} "
              f"{mnt_[k] / ceil[k]:12.1f} {1000 * mnt_[k] / n:19.2f}")
    print(f"daemon VmHWM {fmt(hwm, '.0f')} MiB")
    shutil.rmtree(store, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
