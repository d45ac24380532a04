"""Read throughput of the TIFF view through a real mount: a transcoded TIFF vs a
zero-copy one, as ratios against baselines measured in the same run.

    .venv/bin/python scripts/bench_tiff.py [--size-mib 256] [--cube 16,128,128] [--cube-codec deflate]
        [--level N] [--workdir DIR]

Builds one uint16 big-endian volume (``--size-mib`` of raw data) stored twice
in a local store: ``planes`` with (1, 256, 256) deflate chunks (TIFF tiles
served zero-copy) and ``cube`` with ``--cube`` chunks, deflate (default) or
blosc-lz4, whose 16-plane-deep chunks no TIFF tile can be: every tile is
transcoded, at the mount's default ``tiff_level`` (uncompressed tiles) or
``--level``. Mounts it (cache_mb big enough to hold the transcoded file) and
prints, for each TIFF:
  stat    seconds for the first stat (at a deflate level the transcoded one
          deflates everything once to know its tile sizes);
  first   MB/s of the first full read (transcoded: produced again, cached);
  cached  MB/s of a second read after dropping the file's kernel page cache
          (fadvise DONTNEED), i.e. served from polyfs's produced-bytes cache
          or the store's page cache;
  kernel  MB/s of a third read (kernel page cache);
and the ratios transcoded/zero-copy and view/direct, where "direct" reads the
stored chunk objects of ``planes`` from local disk (warm page cache); and, for
deflate cubes, the decode ceiling: the seconds to inflate the cube's chunks alone
on every core, the least any transcoded first read can take.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from polyfs.codecs.registry import BLOSC, DEFLATE, Filter  # noqa: E402
from polyfs.model import types as T  # noqa: E402
from polyfs.model.catalog import Catalog  # noqa: E402
from polyfs.model.schema import Shape  # noqa: E402
from polyfs.model.writer import DomainWriter  # noqa: E402
from polyfs.store import open_store  # noqa: E402

BUF = 4 << 20
PLANE = 1024


CUBE_CODECS = {"deflate": Filter(DEFLATE, (6,)), "blosc-lz4": Filter(BLOSC, (2, 2, 2, 0, 5, 1, 1))}


def build_store(root: Path, size_mib: int, cube_chunks: tuple[int, int, int],
                cube_codec: str) -> tuple[tuple[int, ...], list[Path]]:
    """Domain /bench.h5 with /planes (zero-copy TIFF) and /cube (transcoded TIFF)."""
    chunk = max(64, cube_chunks[0])
    z = max(chunk, (size_mib << 20) // (2 * PLANE * PLANE) // chunk * chunk)
    shape = (z, PLANE, PLANE)
    cat = Catalog(open_store(str(root), create=True))
    rng = np.random.default_rng(1)
    yy, xx = np.meshgrid(np.arange(PLANE), np.arange(PLANE), indexing="ij")
    base = (np.sin(yy / 40.0) + np.cos(xx / 30.0)) * 1000 + 4000
    u16 = T.IntType(2, False, ">")
    with DomainWriter(cat, "/bench.h5") as w:
        planes = w.add_dataset(w.root, "planes", u16, Shape("simple", shape), (1, 256, 256), [Filter(DEFLATE, (1,))])
        cube = w.add_dataset(w.root, "cube", u16, Shape("simple", shape), cube_chunks, [CUBE_CODECS[cube_codec]])
        for z0 in range(0, z, chunk):
            block = (base[None] + z0 + rng.integers(0, 64, (chunk, PLANE, PLANE))).astype(">u2")
            for coords, part in _blocks(block, (1, 256, 256), z0):
                stored, crc = w.encode_chunk(planes, part)
                w.write_chunk(planes, coords, stored, crc)
            for coords, part in _blocks(block, cube_chunks, z0):
                stored, _ = w.encode_chunk(cube, part)
                w.write_chunk(cube, coords, stored)
    chunk_dir = root / "db"
    ds_dirs = [p for p in chunk_dir.glob("*/d/*") if (p / ".dataset.json").exists()]
    planes_dir = next(p for p in ds_dirs if '"dims": [1, 256, 256]' in (p / ".dataset.json").read_text())
    return shape, [p for p in planes_dir.iterdir() if not p.name.startswith(".")]


def decode_ceiling(store: Path, codec: str, chunk_nbytes: int) -> float | None:
    """Seconds to inflate every stored chunk of /cube with libdeflate on every core, from
    the page cache, and nothing else: no transcoded first read can take less (the
    transcoded TIFF's tiles are the decoded chunks' planes). None for other codecs."""
    if codec != "deflate":
        return None
    import imagecodecs

    dirs = [p for p in (store / "db").glob("*/d/*") if (p / ".dataset.json").exists()]
    cube = next(p for p in dirs if '"dims": [1, 256, 256]' not in (p / ".dataset.json").read_text())
    blobs = [p.read_bytes() for p in sorted(cube.iterdir()) if not p.name.startswith(".")]

    def inflate(blob: bytes) -> Any:  # into a buffer of the known size, as polyfs decodes
        return imagecodecs.deflate_decode(blob, out=chunk_nbytes)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(inflate, blobs[:4]))  # warm up
        t0 = time.perf_counter()
        list(pool.map(inflate, blobs))
        return time.perf_counter() - t0


def _blocks(block: np.ndarray, chunks: tuple[int, ...], z0: int):
    cz, cy, cx = chunks
    for k in range(0, block.shape[0], cz):
        for i in range(0, PLANE, cy):
            for j in range(0, PLANE, cx):
                yield ((z0 + k) // cz, i // cy, j // cx), block[k:k + cz, i:i + cy, j:j + cx]


def read_files(paths: list[Path], drop: bool = False) -> tuple[int, float]:
    """Bytes read and seconds, reading each file to its end with large reads."""
    if drop:
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
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


def timed_stat(path: Path) -> tuple[int, float]:
    t0 = time.perf_counter()
    size = os.stat(path).st_size
    return size, time.perf_counter() - t0


def check(path: Path, shape: tuple[int, ...]) -> None:
    """The TIFF reads back with tifffile (a few pages) so the numbers are of valid files."""
    import tifffile

    with tifffile.TiffFile(path) as t:
        assert len(t.pages) == shape[0], (path, len(t.pages))
        assert t.pages[-1].asarray().shape == shape[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--cube", default="16,128,128", help="chunk shape of the transcoded dataset")
    ap.add_argument("--cube-codec", default="deflate", choices=sorted(CUBE_CODECS))
    ap.add_argument("--level", type=int, default=None,
                    help="tiff_level (deflate level of transcoded tiles; default: the mount's)")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="polyfs-bench-tiff-"))
    store, mnt = work / "store", work / "mnt"
    shutil.rmtree(work, ignore_errors=True)
    mnt.mkdir(parents=True)
    print(f"building {args.size_mib} MiB uint16 volume, stored twice, in {store} ...", flush=True)
    cube_chunks = tuple(int(x) for x in args.cube.split(","))
    shape, chunks = build_store(store, args.size_mib, cube_chunks, args.cube_codec)  # type: ignore[arg-type]
    stored = sum(p.stat().st_size for p in chunks)
    print(f"shape {shape}; planes: {len(chunks)} deflate chunks of 1x256x256 ({stored / 1e6:.0f} MB); "
          f"cube: {args.cube_codec} {'x'.join(map(str, cube_chunks))} chunks", flush=True)
    cache_mb = max(256, 2 * args.size_mib)
    cmd = [sys.executable, "-m", "polyfs", "mount", str(store), str(mnt), "--log-file", str(work / "polyfs.log"),
           "-o", f"cache_mb={cache_mb}" + ("" if args.level is None else f",tiff_level={args.level}")]
    subprocess.run(cmd, check=True)
    try:
        zc = mnt / "tiff" / "bench" / "planes.tif"
        tc = mnt / "tiff" / "bench" / "cube.tif"
        read_files(chunks)  # warm the store's page cache: both sides read from memory
        d_bytes, d_t = read_files(chunks)
        results = {}
        for label, path in (("zero-copy", zc), ("transcoded", tc)):
            size, t_stat = timed_stat(path)
            b1, t1 = read_files([path])
            b2, t2 = read_files([path], drop=True)
            b3, t3 = read_files([path])
            assert b1 == b2 == b3 == size
            results[label] = (size, t_stat, b1 / t1 / 1e6, b2 / t2 / 1e6, b3 / t3 / 1e6, t_stat + t1)
        check(zc, shape)
        check(tc, shape)
        direct = d_bytes / d_t / 1e6
        print()
        print(f"direct chunk objects (planes)       {direct:9.0f} MB/s")
        print(f"{'':12}{'size MB':>10}{'stat s':>9}{'first MB/s':>12}{'cached MB/s':>13}{'kernel MB/s':>13}")
        for label, (size, t_stat, first, cached, kern, _) in results.items():
            print(f"{label:12}{size / 1e6:10.0f}{t_stat:9.2f}{first:12.0f}{cached:13.0f}{kern:13.0f}")
        z, t = results["zero-copy"], results["transcoded"]
        print()
        print(f"transcoded / zero-copy:  stat time {t[1] / z[1]:.1f}x;  first stat+read of the same data "
              f"{z[5] / t[5]:.2f} (seconds, zero-copy/transcoded; target >= 0.5);  "
              f"cached read {t[3] / z[3]:.2f};  kernel-cached read {t[4] / z[4]:.2f} (MB/s of file bytes)")
        print(f"view / direct:           zero-copy first {z[2] / direct:.2f}, cached {z[3] / direct:.2f};  "
              f"transcoded first {t[2] / direct:.2f}, cached {t[3] / direct:.2f}")
        t_dec = decode_ceiling(store, args.cube_codec, 2 * int(np.prod(cube_chunks)))
        if t_dec is not None:
            print(f"decode ceiling:          inflating the cube's chunks alone on {os.cpu_count()} cores takes "
                  f"{t_dec:.2f} s: the first-read ratio cannot exceed {z[5] / t_dec:.2f} on this machine "
                  f"(polyfs reaches {z[5] / t[5] / (z[5] / t_dec):.2f} of it)")
    finally:
        subprocess.run([sys.executable, "-m", "polyfs", "umount", str(mnt)])
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
