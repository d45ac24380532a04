"""Write throughput of the Zarr view through a real mount, as a ratio against a
native Zarr v3 store written in the same run (the machines are shared and noisy).

    .venv/bin/python scripts/bench_write.py [--size-mib 1024] [--workdir DIR]

Generates a uint16 array once with numpy (a smooth gradient plus noise:
compressible, not trivial; shape (N, 1024, 512) with N = --size-mib rounded to
64, 1 GiB by default) and has tensorstore (zarr3 driver, file kvstore) write it
whole, with 64^3 inner chunks in 256^3 shards (``sharding_indexed``: inner
``bytes`` little-endian + ``zstd`` level 3, index ``bytes`` + ``crc32c``):
  (a) to a native Zarr v3 store on local disk;
  (b) through a polyfs mount of an empty store, into a new domain made with
      ``mkdir MNT/zarr/bench.zarr`` (the daemon ingests each shard at flush).
Printed: seconds for each (open + write), the ratio mount/native (target
<= 2.0), whether a tensorstore read back through the mount equals the data,
and the daemon's peak memory (VmHWM of the process whose command line names
the mountpoint).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CHUNK = 64
SHARD = 256
TARGET = 2.0


def make_data(size_mib: int) -> np.ndarray:
    """uint16 (N, 1024, 512): sin/cos gradient rising with z, plus 6 bits of noise."""
    n = max(CHUNK, size_mib // CHUNK * CHUNK)  # one plane of 1024 x 512 uint16 is 1 MiB
    data = np.empty((n, 1024, 512), dtype="<u2")
    yy, xx = np.meshgrid(np.arange(1024, dtype="f4"), np.arange(512, dtype="f4"), indexing="ij")
    base = (np.sin(yy / 40.0) + np.cos(xx / 30.0)) * 1000 + 4000
    rng = np.random.default_rng(0)
    for z0 in range(0, n, CHUNK):
        z = np.arange(z0, z0 + CHUNK, dtype="f4")[:, None, None]
        noise = rng.integers(0, 64, (CHUNK, 1024, 512), dtype="u2")
        data[z0:z0 + CHUNK] = (base[None] + z * 8).astype("u2") + noise
    return data


def spec(path: Path, shape: tuple[int, ...]) -> dict[str, Any]:
    """tensorstore spec creating a sharded zstd Zarr v3 array at ``path``."""
    shard = [min(SHARD, s) for s in shape]
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "create": True,
        "metadata": {
            "shape": list(shape),
            "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shard}},
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


def ts_write(path: Path, data: np.ndarray) -> float:
    """Seconds to create the array at ``path`` and write ``data`` whole."""
    import tensorstore as ts

    t0 = time.perf_counter()
    arr = ts.open(spec(path, data.shape)).result()
    arr.write(data).result()
    return time.perf_counter() - t0


def ts_read(path: Path) -> tuple[np.ndarray, float]:
    import tensorstore as ts

    t0 = time.perf_counter()
    out = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result().read().result()
    return out, time.perf_counter() - t0


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


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def du(top: Path) -> int:
    return sum(p.stat().st_size for p in top.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench-write"))
    args = ap.parse_args()
    work: Path = args.workdir
    store, mnt, log = work / "store", work / "mnt", work / "polyfs.log"
    shutil.rmtree(work, ignore_errors=True)
    store.mkdir(parents=True)
    mnt.mkdir()
    t = time.perf_counter()
    data = make_data(args.size_mib)
    print(f"generated {data.shape} uint16, {data.nbytes / 2**20:.0f} MiB in {time.perf_counter() - t:.1f} s; "
          f"chunks {CHUNK}^3, shards {[min(SHARD, s) for s in data.shape]}, zstd 3", flush=True)

    t_native = ts_write(work / "native.zarr", data)
    print(f"native write done ({du(work / 'native.zarr') / 1e6:.0f} MB on disk)", flush=True)

    subprocess.run([sys.executable, "-m", "polyfs", "mount", str(store), str(mnt), "--log-file", str(log)],
                   check=True, cwd=REPO)
    try:
        pid = daemon_pid(mnt)
        (mnt / "zarr" / "bench.zarr").mkdir()
        view = mnt / "zarr" / "bench.zarr" / "arr"
        t_mount = ts_write(view, data)
        print(f"mount write done ({du(store) / 1e6:.0f} MB in the store)", flush=True)
        back, t_read = ts_read(view)
        same = back.shape == data.shape and bool(np.array_equal(back, data))
        rss = peak_rss(pid) if pid else 0
        r = t_mount / t_native
        print()
        print(f"tensorstore write, native zarr3   {t_native:8.2f} s  {data.nbytes / t_native / 1e6:7.0f} MB/s")
        print(f"tensorstore write, polyfs mount   {t_mount:8.2f} s  {data.nbytes / t_mount / 1e6:7.0f} MB/s   "
              f"ratio {r:.2f}  (target <= {TARGET}) -> {'OK' if r <= TARGET else 'SLOW'}")
        print(f"read back through the mount      {t_read:8.2f} s  -> {'equal' if same else 'DIFFERENT'}")
        if pid:
            print(f"daemon peak memory (pid {pid})   {rss / 2**20:8.0f} MiB (VmHWM)")
        else:
            print("daemon peak memory: daemon pid not found")
    finally:
        subprocess.run([sys.executable, "-m", "polyfs", "umount", str(mnt)], cwd=REPO)


if __name__ == "__main__":
    main()
