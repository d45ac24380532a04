"""The soak's processes (soakkit.py runs them): readers through zarr-python, tensorstore,
z5py, h5py, tifffile and plain file reads, and writers through zarr-python, tensorstore,
z5py and h5py. Each is a spawned process (the libraries' threads do not survive fork); it
checks every value it reads (soakkit's rules) and reports its figures and every exception,
with its traceback, through a queue at the end.
"""
from __future__ import annotations

import faulthandler
import io
import json
import os
import signal
import time
import traceback
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from soakkit import (STABLE, STEMS_STABLE, STEMS_WRITTEN, TRANSIENT, WRITTEN, Mismatch, Stable, Versions, Written,
                     check_chunk, check_stable, check_written, chunks_of, read_json, soaked_in, view_path)

KEEP_ERRORS = 20  # per process; more are counted, not kept


class Stats:
    def __init__(self) -> None:
        self.reads: dict[str, int] = {}
        self.writes: dict[str, int] = {}
        self.values = 0
        self.files = 0
        self.errors: list[str] = []
        self.dropped = 0

    def count(self, table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1

    def error(self, what: str) -> None:
        if len(self.errors) < KEEP_ERRORS:
            self.errors.append(f"{what}\n{traceback.format_exc()}")
        else:
            self.dropped += 1

    def as_dict(self) -> dict[str, Any]:
        return {"reads": self.reads, "writes": self.writes, "values": self.values, "files": self.files,
                "errors": self.errors, "dropped": self.dropped}


def main(name: str, root: str, versions: Versions, stop: Any, results: Any, beat: Any, errpath: str) -> None:
    """One soak process: its loop until ``stop``, then its figures on ``results``."""
    fd = os.open(errpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)  # native libraries' messages and faulthandler's stacks go to the file
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    beat.value = time.time()
    stats = Stats()
    try:
        body = WRITER_LOOPS.get(name) or reader_loop
        body(name, Path(root), versions, stop, stats, beat)
    except Exception:  # noqa: BLE001 - reported, with its traceback
        stats.error(f"{name} stopped")
    finally:
        results.put((name, stats.as_dict()))


def attempt(stats: Stats, beat: Any, what: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - every exception is an unexpected error of the soak
        stats.error(what)
    finally:
        beat.value = time.time()


# -- readers ---------------------------------------------------------------------------------------
def _region(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[slice, ...]:
    if rng.random() < 0.3:
        return tuple(slice(0, s) for s in shape)
    out = []
    for s in shape:
        a = int(rng.integers(0, s))
        out.append(slice(a, int(rng.integers(a + 1, s + 1))))
    return tuple(out)


def _ts_open(driver: str, path: Path) -> Any:
    import tensorstore as ts

    return ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path)}, "open": True}).result()


def _zarr_python(root: Path, spec: Any, region: tuple[slice, ...]) -> np.ndarray:
    import zarr

    a = zarr.open_array(str(root / view_path("zarr", spec)), mode="r")
    if isinstance(spec, Stable) and a.attrs["soak"] != spec.key:
        raise Mismatch(f"zarr attribute soak={a.attrs['soak']!r}")
    return a[region]


def _ts_zarr(root: Path, spec: Any, region: tuple[slice, ...]) -> np.ndarray:
    return np.asarray(_ts_open("zarr3", root / view_path("zarr", spec))[region].read().result())


def _ts_n5(root: Path, spec: Any, region: tuple[slice, ...]) -> np.ndarray:
    return np.asarray(_ts_open("n5", root / view_path("n5", spec)).T[region].read().result())


def _z5py(root: Path, spec: Any, region: tuple[slice, ...]) -> np.ndarray:
    import z5py

    f = z5py.File(str(root / "n5" / f"{spec.stem}.n5"), mode="r", use_zarr_format=False)
    return f[spec.path][region]


def _h5py_file(path: Any, mode: str = "r") -> Any:
    """h5py with the filter plugins (zstd). HDF5's own file locks stay on: no reader opens
    the file the h5py writer has open (Written.in_place), so none makes it wait."""
    import h5py
    import hdf5plugin  # noqa: F401 - registers the zstd filter

    return h5py.File(path, mode)


def _h5py(root: Path, spec: Any, region: tuple[slice, ...], rel: str = "") -> np.ndarray:
    with _h5py_file(root / (rel or view_path("hdf5", spec))) as f:
        d = f[spec.path]
        if isinstance(spec, Stable) and not rel and d.attrs["soak"] != spec.key:
            raise Mismatch(f"hdf5 attribute soak={d.attrs['soak']!r}")
        return d[region]


def _tifffile(root: Path, spec: Any, region: tuple[slice, ...], rel: str = "") -> np.ndarray:
    import tifffile

    with tifffile.TiffFile(root / (rel or view_path("tiff", spec))) as t:
        return t.asarray()[region]


POLYGLOT_NAMES = (".tif", ".h5", ".zarr")
_turn = [0]


def _polyglot(root: Path, spec: Any, region: tuple[slice, ...], ext: str = "") -> np.ndarray:
    """The one polyglot file under its three names (in turn, unless ``ext`` names one)."""
    import zarr

    if not ext:
        _turn[0] += 1
        ext = POLYGLOT_NAMES[_turn[0] % 3]
    if ext == ".tif":
        return _tifffile(root, spec, region, view_path("polyglot", spec, ".tif"))
    if ext == ".h5":
        return _h5py(root, spec, region, view_path("polyglot", spec, ".h5"))
    return zarr.open_array(str(root / view_path("polyglot", spec, ".zarr")), mode="r")[region]


READS: dict[str, tuple[str, Callable[..., np.ndarray], bool]] = {
    # reader: (view, read(root, spec, region), partial regions)
    "zarr-python": ("zarr", _zarr_python, True),
    "tensorstore-zarr": ("zarr", _ts_zarr, True),
    "tensorstore-n5": ("n5", _ts_n5, True),
    "z5py": ("n5", _z5py, True),
    "h5py": ("hdf5", _h5py, True),
    "tifffile": ("tiff", _tifffile, False),
    "polyglot": ("polyglot", _polyglot, True),
}


def read_one(root: Path, versions: Versions, spec: Any, view: str, read: Callable[..., np.ndarray],
             region: tuple[slice, ...], wants: dict[str, np.ndarray]) -> int:
    """One dataset read through one view, checked; returns the values verified."""
    where = f"{view}:{spec.key}"
    if isinstance(spec, Written):
        lower = versions.lower(spec)  # before opening: acknowledged writes must be seen
        got = read(root, spec, tuple(slice(0, s) for s in spec.shape))
        return check_written(spec, np.asarray(got), lower, versions.upper(spec), where)
    got = np.asarray(read(root, spec, region))
    return check_stable(wants[spec.key], got, region, where)


def reader_loop(name: str, root: Path, versions: Versions, stop: Any, stats: Stats, beat: Any) -> None:
    if name == "walker":
        return walker_loop(root, versions, stop, stats, beat)
    view, read, partial = READS[name]
    rng = np.random.default_rng(os.getpid())
    wants = {s.key: s.array() for s in STABLE}
    targets = [s for s in (*STABLE, *WRITTEN) if soaked_in(view, s)]
    while not stop.is_set():
        for i in rng.permutation(len(targets)):
            if stop.is_set():
                break
            spec = targets[int(i)]
            region = _region(rng, spec.shape) if partial else tuple(slice(0, s) for s in spec.shape)

            def one(spec: Any = spec, region: tuple[slice, ...] = region) -> None:
                stats.values += read_one(root, versions, spec, view, read, region, wants)
                stats.count(stats.reads, view)

            attempt(stats, beat, f"{name} reading {spec.key} {region}", one)


# -- the walker: plain os.walk / stat / read of every file, bytes checked -----------------------------
class Walk:
    """What the walker saw first (stable files and listings must never change)."""

    def __init__(self, root: Path, versions: Versions, stats: Stats) -> None:
        self.root, self.versions, self.stats = root, versions, stats
        self.files: dict[str, tuple[int, int]] = {}
        self.listings: dict[str, list[str]] = {}
        self.meta: dict[str, Any] = {}

    def listing(self, rel: str, names: list[str]) -> None:
        names = sorted(n for n in names if not n.endswith(TRANSIENT))
        first = self.listings.setdefault(rel, names)
        if names != first:
            raise Mismatch(f"listing of {rel or '/'} changed: {first} -> {names}")

    def file(self, rel: str) -> None:
        parts = rel.split("/")
        view, top = parts[0], parts[1]
        stem = top.rsplit(".", 1)[0] if view in ("zarr", "n5", "hdf5") else top
        specs = [w for w in WRITTEN if w.stem == stem]
        inner = "/".join(parts[2:])
        if any(w.in_place == view and (view == "hdf5" or inner.startswith(w.path + "/")) for w in specs):
            return  # written in place right now: read in the final check (Written.in_place)
        lower = {w.key: self.versions.lower(w) for w in specs}
        path = self.root / rel
        size = os.stat(path).st_size
        with open(path, "rb", buffering=0) as f:
            data = bytearray()
            while chunk := f.read(1 << 20):
                data += chunk
        if len(data) != size:
            raise Mismatch(f"{rel}: stat says {size} bytes, read gave {len(data)}")
        upper = {w.key: self.versions.upper(w) for w in specs}
        self.stats.files += 1
        self.stats.count(self.stats.reads, f"walk:{view}")
        if stem in STEMS_STABLE:
            sig = (size, zlib.crc32(data))
            if self.files.setdefault(rel, sig) != sig:
                raise Mismatch(f"{rel}: a stable file's bytes changed ({self.files[rel]} -> {sig})")
        elif stem in STEMS_WRITTEN:
            self.written(rel, parts, bytes(data), specs, lower, upper)
        else:
            raise Mismatch(f"{rel}: a domain the soak did not make")

    def written(self, rel: str, parts: list[str], data: bytes, specs: list[Written], lower: dict, upper: dict) -> None:
        view = parts[0]
        if rel.endswith(".json"):
            read = json.loads(data)
            if rel.endswith("zarr.json") and read.get("node_type") == "array":
                spec = self.spec_at(specs, parts, "zarr.json")
                if tuple(read["shape"]) != spec.shape:
                    raise Mismatch(f"{rel}: shape {read['shape']}")
            return
        if view == "hdf5" or rel.endswith(".h5"):
            with _h5py_file(io.BytesIO(data)) as f:
                for spec in (self.spec_at(specs, parts, ".h5"),) if view == "polyglot" else specs:
                    self.stats.values += check_written(spec, f[spec.path][()], lower[spec.key], upper[spec.key], rel)
            return
        if rel.endswith(".tif"):
            import tifffile

            spec = self.spec_at(specs, parts, ".tif")
            with tifffile.TiffFile(io.BytesIO(data)) as t:
                self.stats.values += check_written(spec, t.asarray(), lower[spec.key], upper[spec.key], rel)
            return
        spec = self.spec_at(specs, parts, "")
        if view == "n5":
            return self.n5_block(rel, spec, parts, data, lower[spec.key], upper[spec.key])
        ci = parts.index("c", 2)
        meta = self.meta.get("/".join(parts[:ci]))
        if meta is None:
            meta = self.meta["/".join(parts[:ci])] = read_json(self.root.joinpath(*parts[:ci], "zarr.json"))
        coords = [int(p) for p in parts[ci + 1:]]
        for c, block in zarr_chunks(spec, meta, coords, data):
            self.stats.values += check_chunk(spec, c, block, lower[spec.key][c], upper[spec.key], rel)

    @staticmethod
    def spec_at(specs: list[Written], parts: list[str], suffix: str) -> Written:
        inner = "/".join(parts[2:])
        for spec in specs:
            if inner == spec.path + suffix or inner.startswith(spec.path + (".zarr/" if parts[0] == "polyglot" else "/")):
                return spec
        raise Mismatch(f"{'/'.join(parts)}: no written dataset there")

    def n5_block(self, rel: str, spec: Written, parts: list[str], data: bytes, lower: list[int], upper: int) -> None:
        mode, ndim = int.from_bytes(data[0:2], "big"), int.from_bytes(data[2:4], "big")
        dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
        if mode != 0 or ndim != len(spec.shape):
            raise Mismatch(f"{rel}: N5 block header mode {mode}, {ndim} dims")
        block = np.frombuffer(data[4 + 4 * ndim:], ">u4").reshape(dims[::-1])
        pos = [int(p) for p in parts[len(spec.path.split("/")) + 2:]][::-1]
        c = int(np.ravel_multi_index(pos, spec.grid))
        want = tuple(s.stop - s.start for s in spec.region(c))
        self.stats.values += check_chunk(spec, c, block[tuple(slice(0, w) for w in want)], lower[c], upper, rel)


def zarr_chunks(spec: Written, meta: dict, coords: list[int], data: bytes) -> list[tuple[int, np.ndarray]]:
    """The chunks (linear index, in-bounds block) of one Zarr chunk or shard file of a written,
    uncompressed array, decoded by hand from its ``zarr.json``."""
    import crc32c

    codecs = meta["codecs"]
    outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
    pieces: list[tuple[list[int], bytes, list]] = []
    if codecs[0]["name"] == "sharding_indexed":
        cfg = codecs[0]["configuration"]
        inner, per = cfg["chunk_shape"], [o // i for o, i in zip(outer, cfg["chunk_shape"])]
        n = int(np.prod(per))
        checked = any(c["name"] == "crc32c" for c in cfg["index_codecs"])
        raw = data[-(16 * n + 4 * checked):]
        if checked and crc32c.crc32c(raw[:16 * n]) != int.from_bytes(raw[16 * n:], "little"):
            raise Mismatch(f"shard {coords}: index checksum is wrong")
        index = np.frombuffer(raw[:16 * n], "<u8").reshape(n, 2)
        for k, (off, nb) in enumerate(index.tolist()):
            pos = [s * p + i for s, p, i in zip(coords, per, np.unravel_index(k, per))]
            if any(p >= g for p, g in zip(pos, spec.grid)):
                continue
            if off == 2 ** 64 - 1:
                raise Mismatch(f"shard {coords}: inner chunk {pos} missing (every chunk was written)")
            pieces.append((pos, data[off:off + nb], cfg["codecs"]))
    else:
        inner = outer
        pieces.append((coords, data, codecs))
    if list(inner) != list(spec.chunks):
        raise Mismatch(f"chunk shape {inner}, want {spec.chunks}")
    out = []
    for pos, raw, chain in pieces:
        if [c["name"] for c in chain] != ["bytes"]:
            raise Mismatch(f"codecs {chain} for an uncompressed written array")
        dt = "<u4" if chain[0].get("configuration", {}).get("endian", "little") == "little" else ">u4"
        block = np.frombuffer(raw, dt).reshape(inner)
        c = int(np.ravel_multi_index(pos, spec.grid))
        want = tuple(s.stop - s.start for s in spec.region(c))
        out.append((c, block[tuple(slice(0, w) for w in want)]))
    return out


def walker_loop(root: Path, versions: Versions, stop: Any, stats: Stats, beat: Any) -> None:
    walk = Walk(root, versions, stats)

    def fail(exc: OSError) -> None:
        raise exc

    while not stop.is_set():
        for dirpath, dirnames, filenames in os.walk(root, onerror=fail):
            if stop.is_set():
                break
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/").lstrip(".")
            attempt(stats, beat, f"walker listing {rel_dir}", lambda: walk.listing(rel_dir, dirnames + filenames))
            for fname in filenames:
                rel = f"{rel_dir}/{fname}" if rel_dir else fname
                if fname.endswith(TRANSIENT):
                    continue  # a writer's temporary file: gone any moment, never ours to check
                attempt(stats, beat, f"walker reading {rel}", lambda rel=rel: walk.file(rel))


# -- writers -------------------------------------------------------------------------------------------
def _ts_write(root: Path, spec: Written, v: int, driver: str) -> None:
    import tensorstore as ts

    view = "zarr" if driver == "zarr3" else "n5"
    base = _ts_open(driver, root / view_path(view, spec))
    with ts.Transaction() as txn:
        t = base.with_transaction(txn)
        if driver == "n5":
            t = t.T
        for c in chunks_of(spec, v):
            t[spec.region(c)] = spec.block(v, c)


def _zarr_write(root: Path, spec: Written, v: int) -> None:
    import zarr

    a = zarr.open_array(str(root / view_path("zarr", spec)), mode="r+")
    for c in chunks_of(spec, v):
        a[spec.region(c)] = spec.block(v, c)


def _z5py_write(root: Path, spec: Written, v: int) -> None:
    import z5py

    ds = z5py.File(str(root / "n5" / f"{spec.stem}.n5"), mode="a", use_zarr_format=False)[spec.path]
    for c in chunks_of(spec, v):
        ds[spec.region(c)] = spec.block(v, c)


def _h5py_write(root: Path, spec: Written, v: int) -> None:
    with _h5py_file(root / view_path("hdf5", spec), "r+") as f:
        d = f[spec.path]
        for c in chunks_of(spec, v):
            d[spec.region(c)] = spec.block(v, c)


_W = {w.key: w for w in WRITTEN}
JOBS: dict[str, list[tuple[Written, str, str, Callable[[Path, Written, int], None]]]] = {
    # writer: [(dataset, view, tool, write(root, spec, version))], taken in turn
    "zarr-writer": [(_W["wz:a"], "zarr", "tensorstore", lambda r, s, v: _ts_write(r, s, v, "zarr3")),
                    (_W["wz:s"], "zarr", "zarr-python", _zarr_write),
                    (_W["wz:a"], "zarr", "zarr-python", _zarr_write),
                    (_W["wz:s"], "zarr", "tensorstore", lambda r, s, v: _ts_write(r, s, v, "zarr3"))],
    "n5-hdf5-writer": [(_W["wn:b"], "n5", "tensorstore", lambda r, s, v: _ts_write(r, s, v, "n5")),
                       (_W["wn:z"], "n5", "z5py", _z5py_write),
                       (_W["wh:h"], "hdf5", "h5py r+", _h5py_write)],
}


def writer_loop(name: str, root: Path, versions: Versions, stop: Any, stats: Stats, beat: Any) -> None:
    """Versions in turn until ``stop`` (a round in progress is finished: it is acknowledged)."""
    turn = 0
    while not stop.is_set():
        spec, view, tool, write = JOBS[name][turn % len(JOBS[name])]
        turn += 1

        def one() -> None:
            v = versions.begin(spec)
            write(root, spec, v)
            versions.acknowledge(spec, v)  # close()/commit returned: readers must see it from now
            stats.count(stats.writes, f"{view} ({tool})")

        attempt(stats, beat, f"{name}: {tool} writing {spec.key}", one)
        time.sleep(0.05)


WRITER_LOOPS = {name: writer_loop for name in JOBS}


# -- after the soak ----------------------------------------------------------------------------------
def final_check(root: Path, versions: Versions, errors: list[str]) -> int:
    """Writers stopped: every view, read once more by each library, holds exactly the last
    acknowledged version of every chunk (bounds only where a write failed mid-way)."""
    values = 0
    for spec in WRITTEN:
        lower, upper = versions.lower(spec), versions.upper(spec)
        exact = upper == max(lower)
        ways = [(v, r, "") for v, r, _ in READS.values() if v != "polyglot"]
        ways += [("polyglot", _polyglot, ext) for ext in POLYGLOT_NAMES]
        for view, read, ext in ways:
            whole = tuple(slice(0, s) for s in spec.shape)
            try:
                got = np.asarray(read(root, spec, whole, ext) if ext else read(root, spec, whole))
                if exact and not np.array_equal(got, spec.full(lower)):
                    raise Mismatch(f"final {view}{ext}:{spec.key}: not the last acknowledged versions")
                values += check_written(spec, got, lower, upper, f"final {view}:{spec.key}")
            except Exception:  # noqa: BLE001 - reported with its traceback
                errors.append(f"final check {view}{ext}:{spec.key}\n{traceback.format_exc()}")
    return values
