"""S3 figures of issue 15, in one run against one local moto endpoint (started here, as
the tests start it). The machines are shared and noisy: every figure is a ratio of two
measurements made minutes apart on the same endpoint.

    .venv/bin/python scripts/bench_s3.py [--size-mb 1024] [--listing-chunks 100000]
                                         [--domain-ttl 5] [--workdir DIR]

Builds a uint16 dataset of ``--size-mb`` (1 MiB uncompressed chunks, so the Zarr view
serves them as stored) in ``s3://polyfs-bench/store`` and a copy of the same objects in
a local store directory, then prints:
  (a) MB/s reading every shard file of the Zarr view through a polyfs mount of the S3
      store (cold: fresh mount, ``cache_gb=0``; 1 MiB preads, one per inner chunk, 16 in
      flight, as Zarr readers read shards) vs obstore's own parallel ranged GETs of the
      same chunk objects (32 in flight; mean of one run before and one after): target >= 0.7;
  (b) MB/s of the second read of those shard files through a mount with the chunk cache
      (the kernel's pages of the view files dropped in between, so the reads reach the
      daemon) vs the same second read through a mount of the local copy: target >= 0.8;
  (c) the requests, counted at the endpoint (a counting proxy in front of moto), that a
      fresh mount makes to list a dataset of ``--listing-chunks`` chunks (``stat`` of its
      Zarr files), by kind;
and each daemon's peak memory (VmHWM).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from polyfs.model import keys  # noqa: E402
from polyfs.model import types as T  # noqa: E402
from polyfs.model.catalog import Catalog  # noqa: E402
from polyfs.model.schema import Shape  # noqa: E402
from polyfs.model.writer import DomainWriter  # noqa: E402
from polyfs.store import open_store  # noqa: E402
from s3count import CountingProxy  # noqa: E402

BUCKET = "polyfs-bench"
CHUNK = (16, 256, 128)  # uint16: 1 MiB
PIECE = 1 << 20  # bytes per pread of the view files: one inner chunk, as a Zarr reader reads a shard
READERS = 16  # preads in flight (one 8 MiB pread at a time per file goes as one chain of FUSE reads)
INFLIGHT = 32  # obstore GETs in flight


# -- the endpoint ----------------------------------------------------------------
def start_moto(work: Path) -> tuple[subprocess.Popen, str]:
    exe = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=open(work / "moto.log", "wb"))
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            return proc, endpoint
        except Exception:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise SystemExit("moto_server did not start")
            time.sleep(0.2)


def aws_env(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1"}


def create_bucket(endpoint: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                 aws_secret_access_key="bench").create_bucket(Bucket=BUCKET)


# -- data -----------------------------------------------------------------------
def build_volume(url: str, size_mb: int) -> list[tuple[str, int]]:
    """Domain /bench.h5, dataset /volume: uint16, 1 MiB chunks, no filter. Returns the chunk keys and sizes."""
    planes = max(CHUNK[0], size_mb // 2 // CHUNK[0] * CHUNK[0])  # a 1024x1024 uint16 plane is 2 MiB
    shape = (planes, 1024, 1024)
    grid = [s // c for s, c in zip(shape, CHUNK)]
    store = open_store(url)
    rng = np.random.default_rng(7)
    with DomainWriter(Catalog(store), "/bench.h5") as w:
        ds = w.add_dataset(w.root, "volume", T.IntType(2, False, "<"), Shape("simple", shape), CHUNK, [])
        coords = [tuple(int(i) for i in c) for c in np.ndindex(*grid)]

        def one(c: tuple[int, ...]) -> None:
            w.write_chunk(ds, c, rng.integers(0, 1 << 16, int(np.prod(CHUNK)), dtype=np.uint16).tobytes())

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, coords))
    return [(keys.chunk_key(ds.id, c), int(np.prod(CHUNK)) * 2) for c in coords]


def build_listing(url: str, n: int) -> None:
    """Domain /listing.h5, dataset /many: ``n`` chunks of 10 bytes (written 1000 at a time)."""
    rows = max(1, n // 100)
    store = open_store(url)
    with DomainWriter(Catalog(store), "/listing.h5") as w:
        ds = w.add_dataset(w.root, "many", T.IntType(1, False, "<"), Shape("simple", (rows, 1000)), (1, 10), [])
        items = [(keys.chunk_key(ds.id, (i, j)), bytes([i % 256]) * 10) for i in range(rows) for j in range(100)]
        for k in range(0, len(items), 1000):
            store.put_many(items[k:k + 1000])
            print(f"\r  {min(k + 1000, len(items))}/{len(items)} chunk objects", end="", flush=True)
        print()


def copy_store(url: str, dest: Path) -> None:
    src, dst = open_store(url), open_store(str(dest), create=True)
    objs = list(src.list(""))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda o: dst.put(o.key, src.get(o.key)), objs))


# -- mounts ---------------------------------------------------------------------
class Mounted:
    """``polyfs mount`` for the length of a ``with``; ``hwm()`` is the daemon's VmHWM (MiB)."""

    def __init__(self, store: str, mnt: Path, log: Path, env: dict[str, str], *options: str) -> None:
        self.store, self.mnt, self.log, self.env, self.options = store, mnt, log, env, options

    def __enter__(self) -> "Mounted":
        self.mnt.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "polyfs", "mount", self.store, str(self.mnt), "--log-file", str(self.log)]
        for o in self.options:
            cmd += ["-o", o]
        subprocess.run(cmd, check=True, env={**os.environ, **self.env})
        return self

    def pid(self) -> int:
        want = os.path.realpath(self.mnt).encode()
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"mount" in cmd and want in cmd:
                    return int(p)
        raise RuntimeError(f"no daemon for {self.mnt}")

    def hwm(self) -> float:
        for line in Path(f"/proc/{self.pid()}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def __exit__(self, *exc: object) -> None:
        subprocess.run([sys.executable, "-m", "polyfs", "umount", str(self.mnt)], check=False)


def view_files(top: Path) -> list[Path]:
    return sorted(Path(d) / f for d, _, fs in os.walk(top) for f in fs if f != "zarr.json")


def read_all(files: list[Path]) -> tuple[int, float]:
    """Every byte of ``files``: preads (fd, length, offset) of PIECE bytes, READERS in flight; bytes and seconds."""
    fds = {p: os.open(p, os.O_RDONLY) for p in files}
    pieces = [(fds[p], min(PIECE, size - off), off) for p in files
              for size in [os.fstat(fds[p]).st_size] for off in range(0, size, PIECE)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(READERS) as pool:
        total = sum(pool.map(lambda x: len(os.pread(*x)), pieces))
    took = time.perf_counter() - t0
    for fd in fds.values():
        os.close(fd)
    return total, took


def drop_pages(files: list[Path]) -> None:
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def obstore_read(url: str, chunks: list[tuple[str, int]]) -> tuple[int, float]:
    """obstore alone: one ranged GET per chunk object, INFLIGHT at a time."""
    import obstore
    from obstore.store import S3Store

    bucket, _, prefix = url[len("s3://"):].partition("/")
    store = S3Store(bucket, prefix=prefix or None, client_options={"allow_http": True},
                    config={"endpoint": os.environ["AWS_ENDPOINT_URL"], "access_key_id": "bench",
                            "secret_access_key": "bench", "region": "us-east-1"})

    async def run() -> int:
        sem = asyncio.Semaphore(INFLIGHT)

        async def one(key: str, size: int) -> int:
            async with sem:
                return len(await obstore.get_range_async(store, key, start=0, length=size))

        return sum(await asyncio.gather(*(one(k, n) for k, n in chunks)))

    t0 = time.perf_counter()
    total = asyncio.run(run())
    return total, time.perf_counter() - t0


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the dataset read in (a) and (b)")
    ap.add_argument("--listing-chunks", type=int, default=100_000, help="chunks of the dataset listed in (c)")
    ap.add_argument("--domain-ttl", type=float, default=5.0, help="the cached mount's domain_ttl in (b)")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="polyfs-bench-s3-", dir="/var/tmp"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    moto, endpoint = start_moto(work)
    os.environ.update(aws_env(endpoint))
    hwm: dict[str, float] = {}
    try:
        create_bucket(endpoint)
        url = f"s3://{BUCKET}/store"
        t0 = time.perf_counter()
        chunks = build_volume(url, args.size_mb)
        print(f"built {len(chunks)} chunk objects of 1 MiB in {url} ({time.perf_counter() - t0:.0f} s); "
              f"endpoint {endpoint}", flush=True)
        copy_store(url, work / "local")

        # (a) cold reads over S3: polyfs vs obstore alone
        obstore_read(url, chunks)  # untimed: the endpoint's first reads of fresh objects are slower
        b1, t1 = obstore_read(url, chunks)
        with Mounted(url, work / "mnt-a", work / "a.log", {}, "cache_gb=0") as m:
            files = view_files(m.mnt / "zarr/bench.zarr/volume")
            pb, pt = read_all(files)
            hwm["s3, no cache"] = m.hwm()
        b2, t2 = obstore_read(url, chunks)
        base = mbps(b1 + b2, t1 + t2)
        print(f"(a) cold read of {len(files)} Zarr shard files ({pb / 2**20:.0f} MiB) over S3: polyfs "
              f"{mbps(pb, pt):.0f} MB/s; obstore ranged GETs ({INFLIGHT} in flight) {mbps(b1, t1):.0f} / "
              f"{mbps(b2, t2):.0f} MB/s: ratio {mbps(pb, pt) / base:.2f} (target >= 0.7)", flush=True)

        # (b) second reads: chunk cache vs local store
        second: dict[str, float] = {}
        for name, store, opts in (("cache", url, (f"cache_dir={work / 'cache'}", f"domain_ttl={args.domain_ttl}")),
                                  ("local", str(work / "local"), ())):
            with Mounted(store, work / f"mnt-{name}", work / f"{name}.log", {}, *opts) as m:
                files = view_files(m.mnt / "zarr/bench.zarr/volume")
                read_all(files)  # first read: fills the cache / the page cache of the store files
                best = 0.0
                for _ in range(2):
                    drop_pages(files)  # the kernel's pages of the view files: the reads reach the daemon
                    nb, nt = read_all(files)
                    best = max(best, mbps(nb, nt))
                second[name] = best
                hwm["s3 + chunk cache" if name == "cache" else "local store"] = m.hwm()
        print(f"(b) second read: chunk cache {second['cache']:.0f} MB/s, local store {second['local']:.0f} MB/s: "
              f"ratio {second['cache'] / second['local']:.2f} (target >= 0.8; domain_ttl={args.domain_ttl})",
              flush=True)

        # (c) requests for a listing of many chunks, counted at the endpoint
        t0 = time.perf_counter()
        build_listing(url, args.listing_chunks)
        print(f"built the {args.listing_chunks}-chunk dataset in {time.perf_counter() - t0:.0f} s", flush=True)
        with CountingProxy(endpoint) as proxy:
            with Mounted(url, work / "mnt-list", work / "list.log", aws_env(proxy.endpoint), "cache_gb=0") as m:
                at_mount = proxy.snapshot()
                t0 = time.perf_counter()
                top = m.mnt / "zarr/listing.zarr/many"
                n_files = 0
                for d, _, fs in os.walk(top):
                    for f in fs:
                        os.stat(os.path.join(d, f))
                        n_files += 1
                took = time.perf_counter() - t0
                after = proxy.snapshot()
                hwm["listing"] = m.hwm()
        spent = after - at_mount
        by_kind: dict[str, int] = {}
        for (method, kind, _), n in spent.items():
            by_kind[f"{method} {kind}"] = by_kind.get(f"{method} {kind}", 0) + n
        print(f"(c) listing {args.listing_chunks} chunks ({n_files} Zarr files stat'ed in {took:.1f} s): "
              f"{sum(spent.values())} requests ({', '.join(f'{v} {k}' for k, v in sorted(by_kind.items()))}); "
              f"the mount itself made {sum(at_mount.values())} before", flush=True)
        print("daemon VmHWM: " + ", ".join(f"{k} {v:.0f} MiB" for k, v in hwm.items()))
    finally:
        moto.kill()
        moto.wait()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
