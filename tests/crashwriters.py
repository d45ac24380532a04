"""The writers of the crash loop (``crashkit``): each tool writing its view, and the model.

Why one module for both sides: a writer process applies ``ops(kind, seed, step)`` and the
checker replays the very same ops on a numpy model, so what "acknowledged" means cannot
drift between them. Run as a program (``python crashwriters.py KIND PATH ACKLOG SEED
ROUND``) this file is one writer: it prints ``ready`` once the array is open, then writes
step after step until it is killed, logging ``ack <step>`` to an fsync'd log only after the
tool's ``close()``/``fsync()``/``rename()`` of that step returned 0.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

Region = tuple[slice, ...]
Op = tuple[Region, np.ndarray]


# -- the writes: one definition for the writer processes and the model -------------------------
@dataclass(frozen=True)
class Kind:
    """One writer: a tool writing one dataset through one view."""
    name: str
    domain: str  # the store's domain; the dataset is ``/a`` in it
    view: str  # path of the written file or array under the mount
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    boxes: int = 1  # writes per acknowledged step
    marks: bool = False  # each step also sets the attribute ``mark`` (acknowledged with the data)
    # boxes cover edge chunks whole: z5py's read-modify-write of part of an edge block reads the
    # padded block the N5 view serves into a buffer of the cropped size and scrambles it (the
    # strict xfail test_z5py_partial_write_into_an_edge_block_keeps_the_rest_of_the_block in
    # tests/mount/test_crash_loop.py); whole edge blocks (written cropped, padded at ingest) are fine
    whole_edges: bool = False


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("tensorstore", "/ts.h5", "zarr/ts.zarr/a", (64, 128, 128), (16, 32, 32), "uint16"),
    Kind("zarr-python", "/zp.h5", "zarr/zp.zarr/a", (48, 96, 96), (16, 32, 32), "float32", marks=True),
    Kind("z5py", "/z5.h5", "n5/z5.n5", (40, 80, 80), (16, 32, 32), "uint16", whole_edges=True),
    Kind("h5py", "/h5.h5", "hdf5/h5.h5", (40, 64, 64), (8, 16, 16), "int32", boxes=2, marks=True),
    Kind("tifffile", "/tf.h5", "tiff/tf/a.tif", (4, 128, 128), (1, 64, 64), "uint16"),
)}
TS_SHARD = (32, 64, 64)
ZP_SHARD = (16, 96, 96)
TIFF_TILE = (64, 64)


def new_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Never zero (the fill value), so a chunk read as missing is never mistaken for written."""
    if np.dtype(dtype).kind == "f":
        return (rng.random(shape, dtype=np.float32) + 1).astype(dtype)
    return rng.integers(1, 60000, shape).astype(dtype)


def ops(kind: Kind, seed: int, step: int) -> list[Op]:
    """The writes of one step: boxes straddling chunk (and shard) boundaries, chunk-aligned
    blocks, now and then the whole array (a commit of many chunks, a long window to die in)."""
    rng = np.random.default_rng([seed, step])
    out = []
    for _ in range(kind.boxes):
        pick = rng.random()
        if pick < 0.1:
            region = tuple(slice(0, n) for n in kind.shape)
        elif pick < 0.4:
            region = []
            for n, c in zip(kind.shape, kind.chunks):
                grid = -(-n // c)
                a = int(rng.integers(0, grid))
                b = int(rng.integers(a, grid)) + 1
                region.append(slice(a * c, min(n, b * c)))
            region = tuple(region)
        else:
            region = []
            for n in kind.shape:
                a = int(rng.integers(0, n - 1))
                region.append(slice(a, min(n, a + int(rng.integers(1, max(2, n // 2))))))
            region = tuple(region)
        if kind.whole_edges and any(n % c and s.stop > n - n % c for s, n, c in zip(region, kind.shape, kind.chunks)):
            region = tuple(slice(s.start // c * c, min(n, -(-s.stop // c) * c))
                           for s, n, c in zip(region, kind.shape, kind.chunks))
        out.append((region, new_values(rng, tuple(s.stop - s.start for s in region), kind.dtype)))
    return out


def initial(kind: Kind) -> np.ndarray:
    return new_values(np.random.default_rng(sum(kind.name.encode())), kind.shape, kind.dtype)


def mark(rnd: int, step: int) -> str:
    return f"r{rnd}s{step}"


def states(kind: Kind, base: np.ndarray, seed: int, upto: int) -> list[np.ndarray]:
    """``[base, after step 0, ..., after step upto - 1]``, replayed from the writer's own ops."""
    out = [base]
    for step in range(upto):
        a = out[-1].copy()
        for region, values in ops(kind, seed, step):
            a[region] = values
        out.append(a)
    return out


# -- the writer processes ------------------------------------------------------------------------
class AckLog:
    """``ack <step>`` lines, each fsync'd before the next step begins."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def writer(self) -> Callable[[int], None]:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

        def ack(step: int) -> None:
            os.write(fd, f"ack {step}\n".encode())
            os.fsync(fd)
        return ack

    def last(self) -> int:
        """The last acknowledged step, -1 if none."""
        steps = [int(ln.split()[1]) for ln in self.path.read_text().splitlines() if ln.startswith("ack ")] \
            if self.path.exists() else []
        return max(steps, default=-1)


def _run_tensorstore(kind: Kind, path: str, seed: int, rnd: int, ack, ready) -> None:
    import tensorstore as ts

    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}, open=True).result()
    ready()
    for step in range(100000):
        for region, values in ops(kind, seed, step):
            t[region].write(values).result()  # returns once the shard's rename (its ingest) returned
        ack(step)


def _run_zarr(kind: Kind, path: str, seed: int, rnd: int, ack, ready) -> None:
    import zarr

    a = zarr.open_array(path, mode="r+")
    ready()
    for step in range(100000):
        for region, values in ops(kind, seed, step):
            a[region] = values  # each shard: written to *.partial, renamed (ingested) onto its name
        a.attrs["mark"] = mark(rnd, step)
        ack(step)


def _run_z5py(kind: Kind, path: str, seed: int, rnd: int, ack, ready) -> None:
    import z5py

    ds = z5py.File(path, use_zarr_format=False, mode="a")["a"]
    ready()
    for step in range(100000):
        for region, values in ops(kind, seed, step):
            ds[region] = values
            # z5py does not report every failed close(): a block is acknowledged only once the
            # daemon served it back (values are never the fill value, so a dead read never matches)
            if not np.array_equal(ds[region], values):
                raise RuntimeError(f"step {step}: z5py read back other values than it wrote")
        ack(step)


def _run_h5py(kind: Kind, path: str, seed: int, rnd: int, ack, ready) -> None:
    import h5py

    f = h5py.File(path, "r+")
    ready()
    for step in range(100000):
        for region, values in ops(kind, seed, step):
            f["a"][region] = values
        f["a"].attrs["mark"] = mark(rnd, step)
        if step % 2 == 0:  # acknowledged by close() (FUSE flush: the commit) ...
            f.close()
            ack(step)
            f = h5py.File(path, "r+")
        else:  # ... or by fsync() of HDF5's own descriptor (h5py's flush() alone only pwrites)
            f.flush()
            os.fsync(f.id.get_vfd_handle())
            ack(step)


def _run_tifffile(kind: Kind, path: str, seed: int, rnd: int, ack, ready) -> None:
    import tifffile

    data = tifffile.imread(path)  # the recovered state, as the view shows it
    ready()
    for step in range(100000):
        for region, values in ops(kind, seed, step):
            data[region] = values
        # a whole-file rewrite (O_TRUNC), stored at close (tiles whose bytes are the stored chunks
        # are not rewritten). The file is ours to close: tifffile closes a file it opened with
        # errors suppressed, so imwrite(path) returns normally when the commit failed or the
        # daemon died, and only our close() can acknowledge the write
        with open(path, "wb") as fh:
            tifffile.imwrite(fh, data, tile=TIFF_TILE, compression="zlib", photometric="minisblack")
        ack(step)


RUNNERS: dict[str, Callable[..., None]] = {"tensorstore": _run_tensorstore, "zarr-python": _run_zarr,
                                           "z5py": _run_z5py, "h5py": _run_h5py, "tifffile": _run_tifffile}


def writer_main(argv: list[str]) -> None:
    """``KIND PATH ACKLOG SEED ROUND``: print ``ready`` once open, then write until killed."""
    name, path, log, seed, rnd = argv[0], argv[1], Path(argv[2]), int(argv[3]), int(argv[4])

    def ready() -> None:
        print("ready", flush=True)
    RUNNERS[name](KINDS[name], path, seed, rnd, AckLog(log).writer(), ready)
    print("done", flush=True)


# -- reading back ----------------------------------------------------------------------------
def create_in_mount(kind: Kind, mnt: Path, data: np.ndarray) -> None:
    """The tools' own creation of the Zarr and N5 arrays (HDF5 and TIFF domains are imported)."""
    target = mnt / kind.view
    if kind.name == "tensorstore":
        import tensorstore as ts

        os.mkdir(target.parent)
        inner = [{"name": "bytes", "configuration": {"endian": "little"}},
                 {"name": "zstd", "configuration": {"level": 1}}]
        t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(target)}, "create": True,
                     "metadata": {"shape": list(kind.shape), "data_type": kind.dtype,
                                  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(TS_SHARD)}},
                                  "codecs": [{"name": "sharding_indexed", "configuration": {
                                      "chunk_shape": list(kind.chunks), "codecs": inner}}]}}).result()
        t[...] = data
    elif kind.name == "zarr-python":
        import zarr

        os.mkdir(target.parent)
        a = zarr.create_array(str(target), shape=kind.shape, chunks=kind.chunks, shards=ZP_SHARD, dtype=kind.dtype,
                              compressors=zarr.codecs.GzipCodec(level=1), fill_value=0)
        a[...] = data
        a.attrs["mark"] = "init"
    elif kind.name == "z5py":
        import z5py

        os.mkdir(target)
        f = z5py.File(str(target), use_zarr_format=False, mode="a")
        f.create_dataset("a", shape=kind.shape, chunks=kind.chunks, dtype=kind.dtype, compression="gzip")[...] = data
    else:
        raise ValueError(f"{kind.name} datasets are imported, not created through the mount")


def source_file(kind: Kind, path: Path, data: np.ndarray) -> None:
    """An HDF5 file to import as the h5py and tifffile writers' domains."""
    import h5py

    with h5py.File(path, "w") as f:
        d = f.create_dataset("a", data=data, chunks=kind.chunks, compression="gzip", compression_opts=1)
        if kind.marks:
            d.attrs["mark"] = "init"


def read_view(kind: Kind, mnt: Path) -> tuple[np.ndarray, str | None]:
    """The dataset (and its mark) as the writer's own tool reads the view back."""
    target = mnt / kind.view
    if kind.name == "tensorstore":
        import tensorstore as ts

        t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(target)}}, open=True).result()
        return np.asarray(t.read().result()), None
    if kind.name == "zarr-python":
        import zarr

        a = zarr.open_array(str(target), mode="r")
        return a[...], a.attrs.get("mark")
    if kind.name == "z5py":
        import z5py

        return z5py.File(str(target), use_zarr_format=False, mode="r")["a"][...], None
    if kind.name == "h5py":
        import h5py

        with h5py.File(target, "r") as f:
            m = f["a"].attrs.get("mark")
            return f["a"][()], m.decode() if isinstance(m, bytes) else (str(m) if m is not None else None)
    import tifffile

    return tifffile.imread(target), None


if __name__ == "__main__":
    writer_main(sys.argv[1:])
