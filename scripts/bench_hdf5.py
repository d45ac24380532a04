"""Scale and read speed of the HDF5 view, as ratios against baselines measured in the same run.

    .venv/bin/python scripts/bench_hdf5.py [--datasets 1000] [--chunks 1000] [--read-mib 256]
                                          [--workdir DIR] [--no-mount] [--keep]

Part 1, scale: a store holding one domain of ``--datasets`` datasets spread
over 20 groups, each of ``--chunks`` chunks (1,000 x 1,000 = one million chunk
objects: tiny identical deflate chunks, hard links of one file per dataset so
the store costs inodes, not disk). The store is mounted with ``polyfs mount
-f`` (or, with ``--no-mount`` or without FUSE, served in-process through a
file object over polyfs's Reader) and a separate h5py process opens
``hdf5/bench/scale.h5`` and lists every dataset (the daemon plans the file on
that first open: domain load, one listing per dataset, B-tree packing).
Printed: the open+list time (target < 5 s), the daemon's peak memory
(VmHWM, target < 1 GiB), and the planning steps measured in this process.

Part 2, reads: an HDF5 file written by h5py (float32, ``--read-mib`` MiB,
(1, 256, 256) deflate chunks) is imported (chunks copied as stored) and
read whole with h5py through the view and from the original file; each
read is repeated (best of 3 after a warm-up) and printed with the ratio
view/original (target <= 1.5).
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from polyfs.codecs.registry import DEFLATE, Filter  # noqa: E402
from polyfs.model import keys  # noqa: E402
from polyfs.model import types as T  # noqa: E402
from polyfs.model.catalog import Catalog  # noqa: E402
from polyfs.model.schema import Shape  # noqa: E402
from polyfs.model.writer import DomainWriter  # noqa: E402
from polyfs.store import open_store  # noqa: E402

DOMAIN = "/bench/scale.h5"
GROUPS = 20

LIST_SCRIPT = r'''
import sys, time
t0 = time.perf_counter()
import h5py
t1 = time.perf_counter()
names = []
with h5py.File(sys.argv[1], "r") as f:
    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            names.append((name, obj.shape))
    f.visititems(visit)
    t2 = time.perf_counter()
    block = f[names[-1][0]][:8, :8]  # one chunk through the chunk B-tree: bytes 0..63
    ok = block.reshape(-1).tolist() == list(range(64))
print(len(names), t2 - t1, "values-ok" if ok else "values-WRONG")
'''

READ_SCRIPT = r'''
import sys, time
import h5py, numpy as np
best = None
with h5py.File(sys.argv[1], "r") as f:
    d = f[sys.argv[2]]
    d[()]  # warm-up
    for _ in range(3):
        t = time.perf_counter()
        a = d[()]
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
print(best, a.nbytes, float(a[::7, ::5, ::3].astype(np.float64).sum()))
'''


def build_scale_store(root: Path, ndatasets: int, nchunks: int) -> None:
    """The million-chunk domain: JSON through DomainWriter, chunk objects as hard links."""
    side = int(np.ceil(np.sqrt(nchunks)))
    rows = -(-nchunks // side)
    shape, chunks = (rows * 8, side * 8), (8, 8)
    store = open_store(str(root), create=True)
    cat = Catalog(store)
    payload = zlib.compress(bytes(range(64)), 1)  # one 8x8 uint8 chunk, deflated
    t = time.perf_counter()
    with DomainWriter(cat, DOMAIN) as w:
        groups = [w.add_group(w.root, f"g{i:02d}") for i in range(GROUPS)]
        sets = [w.add_dataset(groups[i % GROUPS], f"d{i:05d}", T.IntType(1, False), Shape("simple", shape), chunks,
                              [Filter(DEFLATE, (1,))]) for i in range(ndatasets)]
        names = [keys.chunk_name(np.unravel_index(k, (rows, side))) for k in range(nchunks)]
        for ds in sets:
            prefix = root / keys.dataset_prefix(ds.id)
            prefix.mkdir(parents=True, exist_ok=True)
            first = prefix / names[0]
            first.write_bytes(payload)
            for name in names[1:]:
                os.link(first, prefix / name)
    print(f"built {ndatasets} datasets x {nchunks} chunks = {ndatasets * nchunks:,} chunk objects "
          f"in {time.perf_counter() - t:.1f} s")


def build_read_source(path: Path, mib: int) -> tuple[str, tuple]:
    import h5py

    planes = max(1, (mib << 20) // (4 * 1024 * 1024))
    shape = (planes, 1024, 1024)
    yy, xx = np.meshgrid(np.arange(1024), np.arange(1024), indexing="ij")
    base = (np.sin(yy / 40.0) + np.cos(xx / 30.0)).astype("f4") * 1000
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("volume", shape=shape, dtype="<f4", chunks=(1, 256, 256), compression="gzip",
                             compression_opts=1)
        for z in range(planes):
            d[z] = base + rng.integers(0, 16, (1024, 1024)).astype("f4")
    return "volume", shape


def fuse_ok() -> bool:
    return os.path.exists("/dev/fuse") and os.geteuid() == 0


def is_mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


class Mounted:
    """``polyfs mount -f`` as a child process (so its pid and memory are ours to read)."""

    def __init__(self, store: Path, mnt: Path, log: Path) -> None:
        mnt.mkdir(parents=True, exist_ok=True)
        self.mnt = mnt
        self.proc = subprocess.Popen([sys.executable, "-m", "polyfs", "mount", "-f", str(store), str(mnt),
                                      "--log-file", str(log), "--log-level", "warning"], cwd=REPO)
        deadline = time.monotonic() + 60
        while not is_mounted(mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"polyfs mount failed: {log.read_text() if log.exists() else ''}")
            time.sleep(0.1)

    def peak_rss(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        subprocess.run([sys.executable, "-m", "polyfs", "umount", str(self.mnt)], capture_output=True, cwd=REPO)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)


class ViewFile(io.RawIOBase):
    """A virtual file as a Python file object (h5py's fileobj driver): reads go through the Reader."""

    def __init__(self, vfile, reader) -> None:
        self.vfile, self.reader, self.pos = vfile, reader, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = off if whence == 0 else self.pos + off if whence == 1 else self.vfile.size + off
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buf) -> int:
        data = self.reader.read(self.vfile, self.pos, len(buf))
        buf[:len(data)] = data
        self.pos += len(data)
        return len(data)


def measure_open(store: Path, work: Path, env: dict, label: str, target: bool = False) -> None:
    m = Mounted(store, work / "mnt-scale", work / "scale.log")
    try:
        path = m.mnt / "hdf5" / "bench" / "scale.h5"
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", LIST_SCRIPT, str(path)], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        if out.returncode:
            raise RuntimeError(out.stderr)
        n, listing, check = out.stdout.split()
        rss = m.peak_rss()
        verdict = (" -> OK" if float(listing) < 5 else " -> SLOW") if target else ""
        print(f"  [{label}]\n    first h5py open + list {n} datasets ({check}): {float(listing):.2f} s "
              f"(client wall {wall:.2f} s; the daemon plans the file here{'; target < 5 s' if target else ''}){verdict}")
        print(f"    daemon peak memory {rss / 2**20:.0f} MiB (target < 1024 MiB) -> "
              f"{'OK' if rss < 1 << 30 else 'OVER'}")
        out2 = subprocess.run([sys.executable, "-c", LIST_SCRIPT, str(path)], capture_output=True, text=True, env=env)
        print(f"    second open + list (file planned, kernel cache warm): {float(out2.stdout.split()[1]):.2f} s")
    finally:
        m.stop()


def in_process_planning(store_dir: Path) -> None:
    """Where the first open's time goes (this process, cold catalog)."""
    sys.path.insert(0, str(REPO / "tests"))
    from support import make_ctx

    from polyfs.formats.hdf5 import view as hdf5

    ctx, reader = make_ctx(open_store(str(store_dir)))
    t0 = time.perf_counter()
    model = ctx.catalog.load(DOMAIN)
    t1 = time.perf_counter()
    ctx.catalog.prefetch_chunk_indexes(model.datasets.values())
    t2 = time.perf_counter()
    node = hdf5.domain_node(model, ctx, "scale.h5")
    size = node.size()
    t3 = time.perf_counter()
    plan = node.hdf5().plan
    print(f"  planning in-process: load {t1 - t0:.2f} s, {len(model.datasets)} chunk indexes {t2 - t1:.2f} s, "
          f"plan+render {t3 - t2:.2f} s; file {size / 2**30:.2f} GiB, metadata {plan.metadata_end() / 2**20:.1f} MiB")
    return ctx, reader, node


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", type=int, default=1000)
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--read-mib", type=int, default=256)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--no-mount", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="polyfs-bench-hdf5-"))
    work.mkdir(parents=True, exist_ok=True)
    use_mount = fuse_ok() and not args.no_mount
    env = dict(os.environ)
    try:
        import hdf5plugin

        env["HDF5_PLUGIN_PATH"] = hdf5plugin.PLUGIN_PATH
    except ImportError:
        pass
    try:
        # -- part 1: scale ------------------------------------------------------------
        store = work / "scale-store"
        if not (store / keys.domain_key(DOMAIN)).exists():
            build_scale_store(store, args.datasets, args.chunks)
        print(f"[scale] {args.datasets} datasets x {args.chunks} chunks, "
              f"{'FUSE mount' if use_mount else 'in-process file object'}")
        if use_mount:
            # (i) a store written by another tool: no persisted chunk index yet; this first
            # open lists every chunk object (a stat each) and persists the index
            shutil.rmtree(store / keys.DERIVED / "chunks", ignore_errors=True)
            time.sleep(0.1)  # directories older than the listing's clock tick may be indexed
            measure_open(store, work, env, "no persisted chunk index (store written by another tool)")
            # (ii) what polyfs import leaves behind: the persisted index is valid; a new daemon
            measure_open(store, work, env, "persisted chunk index (as after polyfs import)", target=True)
            in_process_planning(store)
        else:
            import resource

            import h5py

            t = time.perf_counter()
            ctx, reader, node = in_process_planning(store)
            with h5py.File(ViewFile(node.vfile(), reader), "r") as f:
                names = []
                f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
            dt = time.perf_counter() - t
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            print(f"  plan + h5py open + list {len(names)} datasets: {dt:.2f} s (target < 5 s); "
                  f"peak memory {rss / 2**20:.0f} MiB (target < 1024 MiB)")

        # -- part 2: whole-dataset reads -------------------------------------------------
        print(f"[read] {args.read_mib} MiB float32, (1, 256, 256) deflate chunks")
        src = work / "source.h5"
        if not src.exists():
            build_read_source(src, args.read_mib)
        rstore = work / "read-store"
        if not rstore.exists():
            from polyfs.importers import import_source

            import_source(src, str(rstore), domain="/bench/volume.h5", progress=False)

        def timed(path: Path) -> tuple[float, int, float]:
            out = subprocess.run([sys.executable, "-c", READ_SCRIPT, str(path), "volume"], capture_output=True,
                                 text=True, env=env)
            if out.returncode:
                raise RuntimeError(out.stderr)
            best, nbytes, check = out.stdout.split()
            return float(best), int(nbytes), float(check)

        base_t, nbytes, base_sum = timed(src)
        if use_mount:
            m = Mounted(rstore, work / "mnt-read", work / "read.log")
            try:
                view_t, _, view_sum = timed(m.mnt / "hdf5" / "bench" / "volume.h5")
            finally:
                m.stop()
            how = "through the FUSE mount"
        else:
            sys.path.insert(0, str(REPO / "tests"))
            from support import make_ctx, materialize

            from polyfs.formats.hdf5 import view as hdf5

            ctx, reader = make_ctx(open_store(str(rstore)))
            node = hdf5.domain_node(ctx.catalog.load("/bench/volume.h5"), ctx, "volume.h5")
            view_path = materialize(node, work / "volume-view.h5", reader)
            view_t, _, view_sum = timed(view_path)
            how = "materialized view file"
        assert view_sum == base_sum, "the view read different values"
        print(f"  original file (h5py):      {base_t:.3f} s  {nbytes / base_t / 1e6:7.0f} MB/s  (baseline)")
        print(f"  view, {how}: {view_t:.3f} s  {nbytes / view_t / 1e6:7.0f} MB/s  "
              f"ratio {view_t / base_t:.2f}x (target <= 1.5x) -> {'OK' if view_t / base_t <= 1.5 else 'SLOW'}")
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
