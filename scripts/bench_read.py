"""Read throughput of the Zarr and N5 views through a real mount, as ratios
against baselines measured in the same run (the machines are shared and noisy).

    .venv/bin/python scripts/bench_read.py [--size-mib 1024] [--workdir DIR]

Builds a uint16 zstd dataset (big-endian, 64^3 chunks, 1 GiB by default) in a
local store, mounts it, and prints:
  (a) MB/s reading every Zarr shard file and every N5 block through the mount
      with large sequential reads vs reading the stored chunk objects directly
      (target N5 first read/direct >= 0.10; Zarr: see (e));
  (b) seconds for tensorstore to read the whole array through the Zarr view vs
      from a native Zarr v3 copy on local disk with the same codecs and shards
      (target mount/native <= 1.5);
  (c) entries/s for os.scandir + stat of all N5 block files on a fresh mount
      (target >= 20,000), and the same walk on a fresh mount of the ceiling (e);
  (d) MB/s of a second read of the same view files (kernel page cache) vs direct
      (targets: Zarr >= 0.9, N5 >= 0.25).
  (e) the pyfuse3 ceiling: the same Zarr shard and N5 block files copied to local
      disk and read through scripts/fuse_ceiling.py (a minimal pass-through pyfuse3
      file system) in the same run, cold and warm; polyfs's figures as ratios to it
      (targets: Zarr cold and warm >= 0.9 of the ceiling).
  (f) the N5 second read of (d) through a read-only mount of the same store: the
      difference is the FLUSH a writable mount answers at every close().
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from polyfs.codecs.registry import ZSTD, Filter  # noqa: E402
from polyfs.model import types as T  # noqa: E402
from polyfs.model.catalog import Catalog  # noqa: E402
from polyfs.model.schema import Shape  # noqa: E402
from polyfs.model.writer import DomainWriter  # noqa: E402
from polyfs.store import open_store  # noqa: E402

from fuse_ceiling import Ceiling  # noqa: E402 - beside this script

CHUNK = 64
BUF = 4 << 20


def build_store(root: Path, size_mib: int) -> tuple[tuple[int, ...], list[Path]]:
    """A domain /bench.h5 with dataset /volume: uint16 BE zstd, 64^3 chunks."""
    z = max(CHUNK, (size_mib << 20) // (2 * 1024 * 1024) // CHUNK * CHUNK)
    shape = (z, 1024, 1024)
    cat = Catalog(open_store(str(root), create=True))
    rng = np.random.default_rng(1)
    yy, xx = np.meshgrid(np.arange(CHUNK), np.arange(CHUNK), indexing="ij")
    with DomainWriter(cat, "/bench.h5") as w:
        ds = w.add_dataset(w.root, "volume", T.IntType(2, False, ">"), Shape("simple", shape), (CHUNK,) * 3,
                           [Filter(ZSTD, (3,))])
        for cz in range(shape[0] // CHUNK):
            for cy in range(shape[1] // CHUNK):
                for cx in range(shape[2] // CHUNK):
                    base = (np.sin((yy + cy * CHUNK) / 40.0) + np.cos((xx + cx * CHUNK) / 30.0) + cz) * 1000 + 4000
                    block = base[None, :, :] + rng.integers(0, 64, (CHUNK, CHUNK, CHUNK))
                    stored, _ = w.encode_chunk(ds, block.astype(">u2"))
                    w.write_chunk(ds, (cz, cy, cx), stored)
    chunk_dir = next((root / "db").glob("*/d/*"))
    chunks = [p for p in chunk_dir.iterdir() if not p.name.startswith(".")]
    return shape, chunks


def read_files(paths: list[Path]) -> tuple[int, float]:
    """Bytes read and seconds, reading each file to its end with large reads."""
    total = 0
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(BUF)
                if not b:
                    break
                total += len(b)
    return total, time.perf_counter() - t0


def walk_files(top: Path) -> list[Path]:
    out = []
    for dirpath, _, files in os.walk(top):
        out.extend(Path(dirpath) / f for f in files)
    return sorted(out)


def scandir_stat(top: Path) -> tuple[int, float]:
    n = 0
    t0 = time.perf_counter()
    stack = [str(top)]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                e.stat()
                n += 1
                if e.is_dir():
                    stack.append(e.path)
    return n, time.perf_counter() - t0


def tensorstore_read(path: Path) -> float:
    import tensorstore as ts

    t0 = time.perf_counter()
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()
    arr.read().result()
    return time.perf_counter() - t0


def native_copy(view_array: Path, dest: Path) -> Path:
    """A plain Zarr v3 array on local disk with the same metadata and codecs as the view."""
    import tensorstore as ts

    meta = json.loads((view_array / "zarr.json").read_text())
    src = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(view_array)}}).result()
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dest)}, "create": True,
            "metadata": {k: meta[k] for k in ("shape", "data_type", "chunk_grid", "chunk_key_encoding",
                                             "codecs", "fill_value")}}
    dst = ts.open(spec).result()
    dst.write(src.read().result()).result()
    return dest


def copy_tree(files: list[Path], top: Path, dest: Path) -> None:
    """The view's files as plain local files (the pass-through's source)."""
    for p in files:
        out = dest / p.relative_to(top)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, out)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="polyfs-bench-"))
    store, mnt = work / "store", work / "mnt"
    shutil.rmtree(work, ignore_errors=True)
    mnt.mkdir(parents=True)
    print(f"building {args.size_mib} MiB uint16 zstd store in {store} ...", flush=True)
    shape, chunks = build_store(store, args.size_mib)
    stored_bytes = sum(p.stat().st_size for p in chunks)
    print(f"shape {shape}, {len(chunks)} chunks of {CHUNK}^3, {stored_bytes / 1e6:.0f} MB stored", flush=True)
    cmd = [sys.executable, "-m", "polyfs", "mount", str(store), str(mnt), "--log-file", str(work / "polyfs.log")]
    subprocess.run(cmd, check=True)
    try:
        zarr_arr = mnt / "zarr" / "bench.zarr" / "volume"
        n5_arr = mnt / "n5" / "bench.n5" / "volume"
        # (c) first, on a cold mount: listing never reads chunk data
        n_entries, t_scan = scandir_stat(n5_arr)
        # warm the store's page cache so both sides read from memory
        read_files(chunks)
        direct_bytes, t_direct = read_files(chunks)
        shard_files = [p for p in walk_files(zarr_arr) if p.name != "zarr.json"]
        block_files = [p for p in walk_files(n5_arr) if p.name != "attributes.json"]
        z_bytes, t_z = read_files(shard_files)
        n_bytes, t_n = read_files(block_files)
        z2_bytes, t_z2 = read_files(shard_files)
        n2_bytes, t_n2 = read_files(block_files)
        direct2_bytes, t_direct2 = read_files(chunks)
        mbps = lambda b, t: b / t / 1e6  # noqa: E731
        d1 = mbps(direct_bytes, t_direct)
        d2 = mbps(direct2_bytes, t_direct2)
        t_native_path = native_copy(zarr_arr, work / "native.zarr")
        t_view = tensorstore_read(zarr_arr)
        t_native = tensorstore_read(t_native_path)
        t_view = min(t_view, tensorstore_read(zarr_arr))
        t_native = min(t_native, tensorstore_read(t_native_path))
        copy_tree(shard_files, zarr_arr, work / "plain" / "zarr")
        copy_tree(block_files, n5_arr, work / "plain" / "n5")
        read_files([p for p in (work / "plain").rglob("*") if p.is_file()])  # in the page cache, like the store
        with Ceiling(work / "plain", work / "ceiling") as cmnt:
            c_entries, t_cscan = scandir_stat(cmnt / "n5")  # first, on a fresh mount, as polyfs's
            c_shards = [cmnt / "zarr" / p.relative_to(zarr_arr) for p in shard_files]
            c_blocks = [cmnt / "n5" / p.relative_to(n5_arr) for p in block_files]
            cz_bytes, t_cz = read_files(c_shards)
            cn_bytes, t_cn = read_files(c_blocks)
            cz2_bytes, t_cz2 = read_files(c_shards)
            cn2_bytes, t_cn2 = read_files(c_blocks)
        cz, cz2 = mbps(cz_bytes, t_cz), mbps(cz2_bytes, t_cz2)
        cn, cn2 = mbps(cn_bytes, t_cn), mbps(cn2_bytes, t_cn2)
        print()
        print(f"(a) direct chunk objects      {d1:8.0f} MB/s")
        print(f"    zarr shards via mount     {mbps(z_bytes, t_z):8.0f} MB/s   ratio {ratio(mbps(z_bytes, t_z), d1)}")
        print(f"    n5 blocks via mount       {mbps(n_bytes, t_n):8.0f} MB/s   ratio {ratio(mbps(n_bytes, t_n), d1)}  (target >= 0.10)")
        print(f"(b) tensorstore native zarr3  {t_native:8.2f} s")
        print(f"    tensorstore zarr view     {t_view:8.2f} s      ratio {ratio(t_view, t_native)}  (target <= 1.5)")
        walk, c_walk = n_entries / t_scan, c_entries / t_cscan
        print(f"(c) scandir+stat n5 blocks    {walk:8.0f} entries/s ({n_entries} entries)  (target >= 20000)"
              f"   ceiling {c_walk:.0f} entries/s, polyfs/ceiling {ratio(walk, c_walk)}")
        print(f"(d) direct, second read       {d2:8.0f} MB/s")
        print(f"    zarr shards, second read  {mbps(z2_bytes, t_z2):8.0f} MB/s   ratio {ratio(mbps(z2_bytes, t_z2), d2)}  (target >= 0.9)")
        print(f"    n5 blocks, second read    {mbps(n2_bytes, t_n2):8.0f} MB/s   ratio {ratio(mbps(n2_bytes, t_n2), d2)}  (target >= 0.25)")
        zc, zw = mbps(z_bytes, t_z), mbps(z2_bytes, t_z2)
        nc, nw = mbps(n_bytes, t_n), mbps(n2_bytes, t_n2)
        print("(e) pyfuse3 pass-through ceiling over the same files (cold = not in the FUSE page cache)")
        print(f"    zarr shards cold          {cz:8.0f} MB/s   polyfs/ceiling {ratio(zc, cz)}  (target >= 0.9)"
              f"   ceiling/direct {ratio(cz, d1)}")
        print(f"    zarr shards warm          {cz2:8.0f} MB/s   polyfs/ceiling {ratio(zw, cz2)}  (target >= 0.9)"
              f"   ceiling/direct {ratio(cz2, d2)}")
        print(f"    n5 blocks cold            {cn:8.0f} MB/s   polyfs/ceiling {ratio(nc, cn)}"
              f"   ceiling/direct {ratio(cn, d1)}")
        print(f"    n5 blocks warm            {cn2:8.0f} MB/s   polyfs/ceiling {ratio(nw, cn2)}"
              f"   ceiling/direct {ratio(cn2, d2)}")
        # (f) what the FLUSH at every close() costs: a writable mount must answer it (writes are
        # stored, and their errors returned, there); a read-only one answers ENOSYS once, as the
        # ceiling does, and the kernel sends no more (pyfuse3 has no FOPEN_NOFLUSH per open)
        ro = work / "mnt-ro"
        ro.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "polyfs", "mount", str(store), str(ro), "-o", "ro"], check=True)
        try:
            ro_blocks = [ro / "n5" / "bench.n5" / "volume" / p.relative_to(n5_arr) for p in block_files]
            read_files(ro_blocks)
            r_bytes, t_r = read_files(ro_blocks)
            d3_bytes, t_d3 = read_files(chunks)
        finally:
            subprocess.run([sys.executable, "-m", "polyfs", "umount", str(ro)])
        d3 = mbps(d3_bytes, t_d3)
        print(f"(f) n5 blocks, second read, read-only mount {mbps(r_bytes, t_r):8.0f} MB/s   ratio {ratio(mbps(r_bytes, t_r), d3)}"
              f"   (vs (d): the FLUSH per close() a writable mount answers)")
    finally:
        subprocess.run([sys.executable, "-m", "polyfs", "umount", str(mnt)])
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
