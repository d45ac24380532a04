#!/usr/bin/env python3
"""Run the S3 fault-injection tests at full size.

CI runs ``tests/store/test_s3_faults.py`` and ``tests/mount/test_s3_fault_mount.py`` once
each as part of ``scripts/test``. This script repeats the mount test's read-every-view and
write-through-Zarr round ``--rounds`` times behind the fault-injecting proxy, and prints
how many faults of each kind were injected::

    scripts/s3_faults.py               # 20 rounds
    scripts/s3_faults.py --rounds 100

Exit status: pytest's (0 when every round read and wrote right and check --deep was clean).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz import ROOT, plugin_path, python  # noqa: E402 - the venv and HDF5 plugin lookup, shared


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20, help="read/write rounds under faults (default 20)")
    args, rest = ap.parse_known_args(argv)
    py = python()
    env = dict(os.environ, POLYFS_S3_FAULT_ROUNDS=str(args.rounds), HDF5_PLUGIN_PATH=plugin_path(py))
    cmd = [py, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *rest,
           str(ROOT / "tests" / "store" / "test_s3_faults.py"), str(ROOT / "tests" / "mount" / "test_s3_fault_mount.py")]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
