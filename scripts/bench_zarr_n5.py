"""Zarr v3 and N5 views: read throughput through a real mount, and list+stat cost.

    .venv/bin/python scripts/bench_zarr_n5.py [--size-mib 128] [--chunk 64] [--many 48] [--workdir DIR]

Read: one float32 big-endian volume (``--size-mib`` raw) with ``--chunk``^3
zstd chunks in a local store, mounted. tensorstore reads the whole array
from the Zarr view (sharded) and from the N5 view (zero-copy, so both serve
the stored frames), and the same array from a reference Zarr v3 written by
tensorstore itself on local disk with the same chunking and codec
(baseline). Printed: MB/s (of decoded data) and the ratio view/baseline,
best of 3 warm runs (tensorstore's own cache disabled; page caches warm for
both, so the ratio is the cost of the views and FUSE, not of the disk).

List+stat: a dataset of ``--many``^3 tiny chunks, walked in-process through
the Zarr view (shards) and the N5 view (one block file per chunk): every
file's size, as ``ls -lR`` would, without reading chunk data.
"""
from __future__ import annotations

import argparse
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
from polyfs.model import keys  # noqa: E402
from polyfs.model import types as T  # noqa: E402
from polyfs.model.catalog import Catalog  # noqa: E402
from polyfs.model.schema import Shape  # noqa: E402
from polyfs.model.writer import DomainWriter  # noqa: E402
from polyfs.store import open_store  # noqa: E402
from polyfs.formats.n5 import view as n5
from polyfs.formats.zarr import view as zarr3
from polyfs.views.base import ViewContext  # noqa: E402


def best_of(fn, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def read_bench(work: Path, size_mib: int, chunk: int) -> None:
    import tensorstore as ts

    edge = int(round((size_mib * 2 ** 20 / 4) ** (1 / 3) / chunk)) * chunk or chunk
    shape = (edge, edge, edge)
    rng = np.random.default_rng(0)
    arr = (rng.random(shape, dtype=np.float32) * 100).round(1).astype(">f4")
    store_dir = work / "store"
    with DomainWriter(Catalog(open_store(str(store_dir), create=True)), "/bench.h5") as w:
        ds = w.add_dataset(w.root, "vol", T.FloatType(4, ">"), Shape("simple", shape), (chunk,) * 3, [Filter(ZSTD, (1,))])
        w.write_array(ds, arr)
    ref = ts.open({"driver": "zarr3", "kvstore": f"file://{work}/ref.zarr", "create": True,
                   "metadata": {"shape": list(shape), "data_type": "float32",
                                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk] * 3}},
                                "codecs": [{"name": "bytes", "configuration": {"endian": "big"}},
                                           {"name": "zstd", "configuration": {"level": 1}}]}}).result()
    ref.write(arr).result()
    mnt = work / "mnt"
    mnt.mkdir()
    py = sys.executable
    res = subprocess.run([py, "-m", "polyfs", "mount", str(store_dir), str(mnt)], capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"mount failed: {res.stderr}")
    try:
        mb = arr.nbytes / 1e6
        views = {
            "baseline (tensorstore's own zarr3 on disk)": {"driver": "zarr3", "kvstore": f"file://{work}/ref.zarr"},
            "zarr view (sharded)": {"driver": "zarr3", "kvstore": f"file://{mnt}/zarr/bench.zarr/vol"},
            "n5 view": {"driver": "n5", "kvstore": f"file://{mnt}/n5/bench.n5/vol"},
        }
        base = None
        print(f"read {shape} float32 zstd, chunks {chunk}^3 ({mb:.0f} MB decoded), best of 3:")
        for name, spec in views.items():
            t = ts.open(spec, read=True, context=ts.Context({"cache_pool": {"total_bytes_limit": 0}})).result()
            got = t.read().result()
            assert np.array_equal(got if spec["driver"] == "zarr3" else got.T, arr), name
            sec = best_of(lambda: t.read().result())
            base = base or sec
            print(f"  {name:44s} {mb / sec:8.0f} MB/s   ratio {sec / base:5.2f}")
    finally:
        subprocess.run([py, "-m", "polyfs", "umount", str(mnt)], capture_output=True)


def stat_bench(many: int) -> None:
    store = open_store("memory://bench-zarr-n5-many")
    cat = Catalog(store)
    with DomainWriter(cat, "/many.h5") as w:
        ds = w.add_dataset(w.root, "x", T.IntType(2, False, ">"), Shape("simple", (many * 4,) * 3), (4, 4, 4),
                           [Filter(ZSTD, (1,))])
        blob = w.encode_chunk(ds, np.zeros((4, 4, 4), ">u2"))[0]
        for i in range(many):
            for j in range(many):
                for k in range(many):
                    store.put(keys.chunk_key(ds.id, (i, j, k)), blob)

    def walk(node) -> tuple[int, int]:
        n = size = 0
        for child in node.entries().values():
            if child.is_dir:
                a, b = walk(child)
                n, size = n + a, size + b
            else:
                n, size = n + 1, size + child.size()
        return n, size

    print(f"list+stat, {many ** 3} chunks (in-process, chunk listing included):")
    for view in (zarr3, n5):
        ctx = ViewContext(Catalog(store))
        t = time.perf_counter()
        n, size = walk(view.domain_node(ctx.catalog.load("/many.h5"), ctx, "many"))
        sec = time.perf_counter() - t
        print(f"  {view.__name__.rsplit('.', 1)[1]:6s} {n:8d} files {size / 1e6:7.1f} MB in {sec:6.2f} s "
              f"({sec / n * 1e6:.0f} us/file)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--many", type=int, default=48)
    ap.add_argument("--workdir")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-zarr-n5-", dir=args.workdir))
    try:
        read_bench(work, args.size_mib, args.chunk)
        stat_bench(args.many)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
