#!/usr/bin/env python3
"""Crash loop, full size (issue 13, part 1): ``--rounds N`` rounds of the CI test's loop
(``tests/mount/test_crash_loop.py``, harness ``tests/crashkit.py``). Each round SIGKILLs the
daemon while tensorstore, zarr-python, z5py, h5py and tifffile write (and an import runs),
then while ``check --repair`` runs, and checks what the store holds after each kill.

Prints the figures: rounds killed, acknowledged writes checked, acknowledged writes lost
(must be 0), torn chunks (must be 0), imports and repairs killed, check results. Exits 1
if any round failed. Run as root, from the repository, with the project's venv:

    .venv/bin/python scripts/crashloop.py --rounds 20
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def main(argv: list[str] | None = None) -> int:
    from crashkit import CrashLoop
    from crashwriters import KINDS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None, help="kill times and written values (default: random)")
    ap.add_argument("--max-delay", type=float, default=3.0, help="latest kill, seconds after the writers are ready")
    ap.add_argument("--writers", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    ap.add_argument("--workdir", type=Path, default=None, help="kept afterwards (default: a temporary directory)")
    ap.add_argument("--evidence", action="store_true", help="copy the store aside whenever it needs --repair")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("crashloop: needs root and /dev/fuse", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 20)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="polyfs-crashloop-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO)  # the writers and ``python -m polyfs`` run from the repository
    loop = CrashLoop(workdir, seed, kinds=args.writers.split(","), max_delay=args.max_delay,
                     say=lambda s: print(s, flush=True), evidence=args.evidence)
    t0 = time.monotonic()
    try:
        loop.setup()
        tally = loop.run(args.rounds)
    finally:
        loop.close()
    print(f"\ncrash loop, seed {seed} (--seed {seed} replays the kill times and values), "
          f"{time.monotonic() - t0:.0f} s")
    print(tally.report())
    if args.workdir is None and not tally.failures:
        shutil.rmtree(workdir, ignore_errors=True)
    elif tally.failures:
        print(f"work directory kept: {workdir}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
