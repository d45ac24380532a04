#!/usr/bin/env python3
"""Soak a real mount at full size (issue 13, part 5) and print the figures.

One mount of a store prepared with stable and written datasets; 8 reader processes over
every view (zarr-python, tensorstore, z5py, h5py, tifffile, plain os.walk/stat/read) and 2
writer processes (tensorstore, zarr-python, z5py, h5py r+) for ``--minutes``; every value
read is checked (tests/soakkit.py says how)::

    scripts/soak.py --minutes 10
    scripts/soak.py --minutes 3 --work /var/tmp/soak --keep    # keep the store, logs, stderr files

Needs root and /dev/fuse. Exit status: 0 when the soak found nothing (no unexpected error,
RSS growth after warm-up < 10%, no fd or thread growth, ``polyfs check --deep`` clean), else 1.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PY = ROOT / ".venv" / "bin" / "python"


def reexec_in_venv() -> None:
    """The soak needs the test dependencies: run under the project's venv, with HDF5's plugins."""
    if VENV_PY.exists() and Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        os.execv(str(VENV_PY), [str(VENV_PY), *sys.argv])
    if "HDF5_PLUGIN_PATH" not in os.environ:
        import hdf5plugin

        os.environ["HDF5_PLUGIN_PATH"] = hdf5plugin.PLUGIN_PATH


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long to soak (default 10)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds of warm-up (default: a quarter, 15-120 s)")
    ap.add_argument("--work", type=Path, default=None, help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    reexec_in_venv()
    sys.path.insert(0, str(ROOT / "tests"))
    os.chdir(ROOT)
    import soakkit
    from conftest import Mount, fuse_available, polyfs_cmd

    if not fuse_available():
        print("soak: needs root and /dev/fuse", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="polyfs-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"soak: preparing the store in {work}", flush=True)
    store = soakkit.prepare_store(work / "data")
    (work / "mnt").mkdir()
    mount = Mount(str(store), work / "mnt", work / "polyfs.log", []).start()
    try:
        soakkit.prepare_mount(mount.path)
        missing = soakkit.probe(mount.path)
        if missing:
            print("soak: view files missing: " + ", ".join(missing), file=sys.stderr)
            return 1
        print(f"soak: {args.minutes:g} minutes, daemon pid {mount.daemon_pid()}", flush=True)
        started = time.monotonic()
        rep = soakkit.soak(mount, args.minutes * 60, work / "procs", args.warmup,
                           say=lambda s: print(s, flush=True))
    finally:
        mount.stop()
    res = subprocess.run(polyfs_cmd("check", str(store), "--deep"), capture_output=True, text=True, timeout=600)
    check_ok = res.returncode == 0 and "store is consistent" in res.stdout
    problems = rep.problems() + ([] if check_ok else [f"polyfs check --deep: {res.stdout}{res.stderr}"])
    print(f"\nsoak done in {(time.monotonic() - started) / 60:.1f} minutes (with setup of processes and checks)")
    print(rep.figures())
    print(f"polyfs check --deep:  {'clean' if check_ok else 'NOT clean'}")
    for p in problems:
        print(f"\nPROBLEM: {p}")
    if args.keep or problems:
        print(f"\nwork directory kept: {work} (daemon log: {work / 'polyfs.log'})")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
