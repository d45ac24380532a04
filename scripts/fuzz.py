#!/usr/bin/env python3
"""Run the fuzz tests (tests/fuzz/) at full size.

CI runs them with a small, derandomized budget as part of ``scripts/test``. This script runs
each fuzz module in its own pytest process with ``POLYFS_FUZZ_EXAMPLES`` examples per test
(fresh randomness every run), so a crash of a native library (a segfault in the HDF5 library
reading a mutated file) or a hang is reported for its module and the others still run::

    scripts/fuzz.py                      # 1000 examples per test, every module
    scripts/fuzz.py -n 5000 store        # only test_fuzz_store.py, 5000 examples per test
    scripts/fuzz.py --shrink -- -x       # shrink failures (slow); arguments after -- go to pytest

Exit status: 0 when every module passed, else 1.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "tests" / "fuzz"


def python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def plugin_path(py: str) -> str:
    res = subprocess.run([py, "-c", "import hdf5plugin; print(hdf5plugin.PLUGIN_PATH)"], capture_output=True,
                         text=True)
    return res.stdout.strip()


def modules(names: list[str]) -> list[Path]:
    found = sorted(FUZZ.glob("test_fuzz_*.py"))
    if not names:
        return found
    return [m for m in found if any(n in m.stem for n in names)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", help="substrings of module names (default: all)")
    ap.add_argument("-n", "--examples", type=int, default=1000, help="examples per test (default 1000)")
    ap.add_argument("--timeout", type=float, default=7200, help="seconds per module before it counts as a hang")
    ap.add_argument("--shrink", action="store_true", help="let hypothesis shrink a failure (can take minutes)")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: arguments for pytest")
    args = ap.parse_args(argv)
    py = python()
    env = dict(os.environ, POLYFS_FUZZ_EXAMPLES=str(args.examples))
    env.setdefault("HDF5_PLUGIN_PATH", plugin_path(py))
    if args.shrink:
        env["POLYFS_FUZZ_SHRINK"] = "1"
    extra = [a for a in args.pytest_args if a != "--"]
    failed = []
    for mod in modules(args.modules):
        cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", f"timeout={int(args.timeout)}",
               "--hypothesis-show-statistics", *extra, str(mod.relative_to(ROOT))]
        print(f"== {mod.name}: {args.examples} examples per test", flush=True)
        start = time.monotonic()
        try:
            res = subprocess.run(cmd, cwd=ROOT, env=env, timeout=args.timeout + 60)
            code = res.returncode
        except subprocess.TimeoutExpired:
            code = "hang"
        took = time.monotonic() - start
        if code == 0:
            verdict = "ok"
        elif code == "hang":
            verdict = f"no result after {args.timeout:.0f} s (a hang)"
        elif code < 0:
            verdict = f"killed by signal {-code} (a crash, or killed)"
        else:
            verdict = f"failed (exit status {code})"
        print(f"== {mod.name}: {verdict} in {took:.0f} s", flush=True)
        if code != 0:
            failed.append(mod.name)
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
