"""Crash safety of the write paths of rounds 8-9 (exploratory round 10), on a local store.

One mount, six writers (one process each, this module run as a program), the daemon SIGKILLed
at a random moment while they write, then a remount and, per writer, every chunk read back
through the writer's own view must hold the last acknowledged values or the in-flight step's,
never an older state and never garbage; ``polyfs check --deep`` must be clean (after
``--repair`` only if that is all it asks for). The writers:

- zarr-python, a sharded float32 array with ``filters=[TransposeCodec]`` (partial shard
  rewrites: the shard's other inner chunks are sent back transposed as read);
- zarr-python, ``structured`` records with a complex field (unsharded: zarr 3.1 fails to write
  sharded records itself, "unhashable type: writeable void-scalar");
- zarr-python, ``variable_length_bytes`` (stored as HSDS's vlen uint8);
- zarr-python, sharded gzip ``str`` arrays (vlen-utf8 text chunks);
- h5py ``"r+"`` on the ``hdf5/`` file of an int32 array zarr-python made (zstd, an optional
  HDF5 filter from ``HDF5_PLUGIN_PATH``), acknowledged by close() or flush()+fsync();
- GDAL-made sparse float32 GeoTIFFs with ESRI's nodata (``-FLT_MAX``; nodata tiles left
  unwritten), copied over the ``tiff/`` view file (O_TRUNC) at every step.

A second test kills the daemon in the middle of one big commit of each kind (after a random
number of chunk objects were replaced), and checks every chunk is old or new and that
``--repair`` removes the temporaries the kill left. Found: ``check --repair`` removes those
temporaries after it checked (and rebuilt) the persisted chunk indexes, so the removal leaves
the index of that directory out of date again (fixed: leftovers are checked first).

An acknowledged step is one whose tool call returned (zarr-python's ``a[r] = v``: every shard
renamed onto its name; h5py: ``close()``/``fsync()``; TIFF: ``close()`` of the copy). Kill
times come from the printed seed (``POLYFS_CRASH_SEED`` replays it).
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

TESTS = Path(__file__).resolve().parent.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from crashwriters import AckLog  # noqa: E402

NODATA = -np.finfo(np.float32).max
NODATA_TEXT = "-3.4028234663852886e+38"
REC = np.dtype([("i", "<i4"), ("c", "<c16"), ("f", "<f4")])
Region = tuple[slice, ...]


# -- the kinds: one definition for the writer processes and the model -----------------------------
@dataclass(frozen=True)
class Kind:
    name: str
    view: str  # written path under the mount
    shape: tuple[int, ...]
    chunks: tuple[int, ...]  # the grid judged (the store's chunks, the TIFF's tiles)
    dtype: Any


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("transpose", "zarr/tr.zarr/a", (24, 40, 36), (8, 10, 12), "float32"),
    Kind("records", "zarr/rec.zarr/a", (240,), (10,), REC),
    Kind("vlenbytes", "zarr/vb.zarr/a", (160,), (8,), object),
    Kind("text", "zarr/tx.zarr/a", (160,), (6,), object),
    Kind("h5zstd", "hdf5/zs.h5", (48, 64), (16, 16), "int32"),
    Kind("tiffnodata", "tiff/dem/a.tif", (96, 128), (32, 32), "float32"),
)}


def values(kind: Kind, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """New values, never the fill value (a chunk read as missing never passes for written)."""
    n = int(np.prod(shape))
    if kind.name == "records":
        out = np.zeros(n, REC)
        out["i"] = rng.integers(1, 1 << 30, n)
        out["c"] = rng.random(n) + 1 + 1j * (rng.random(n) + 1)
        out["f"] = rng.random(n) + 1
        return out.reshape(shape)
    if kind.name == "vlenbytes":
        return np.array([rng.bytes(int(rng.integers(1, 40))) for _ in range(n)] + [None], object)[:-1].reshape(shape)
    if kind.name == "text":
        alphabet = "abcxyzéγ✓ "
        return np.array(["".join(rng.choice(list(alphabet), int(rng.integers(1, 30)))) for _ in range(n)] + [None],
                        object)[:-1].reshape(shape)
    if kind.name == "h5zstd":
        return rng.integers(1, 1 << 30, shape).astype("int32")
    if kind.name == "tiffnodata":  # values in one tile of four, the rest nodata (GDAL leaves it out)
        return np.where(rng.random(shape) < 0.25, NODATA, rng.random(shape, dtype=np.float32) + 1).astype("float32")
    return (rng.random(shape, dtype=np.float32) + 1).astype("float32")


def ops(kind: Kind, seed: int, step: int) -> tuple[Region, np.ndarray]:
    """One step's write: a box straddling chunk (and shard) boundaries, or chunk-aligned blocks
    (for the TIFF, whole tiles, some of them all nodata), now and then the whole array."""
    rng = np.random.default_rng([seed, step])
    pick = rng.random()
    if pick < 0.15:
        region = tuple(slice(0, n) for n in kind.shape)
    elif pick < 0.5 or kind.name == "tiffnodata":
        region = []
        for n, c in zip(kind.shape, kind.chunks):
            grid = -(-n // c)
            a = int(rng.integers(0, grid))
            region.append(slice(a * c, min(n, (int(rng.integers(a, grid)) + 1) * c)))
        region = tuple(region)
    else:
        region = tuple(slice(a, min(n, a + int(rng.integers(1, max(2, n // 2)))))
                       for n in kind.shape for a in [int(rng.integers(0, n - 1))])
    shape = tuple(s.stop - s.start for s in region)
    if kind.name == "tiffnodata":  # whole tiles of nodata or of values
        tiles = np.where(rng.random(tuple(-(-s // c) for s, c in zip(shape, kind.chunks))) < 0.4, NODATA, 0)
        nod = np.kron(tiles, np.ones(kind.chunks))[:shape[0], :shape[1]]
        v = values(kind, rng, shape)
        return region, np.where(nod == NODATA, NODATA, np.abs(v) % 1000 + 1).astype("float32")
    return region, values(kind, rng, shape)


def initial(kind: Kind) -> np.ndarray:
    if kind.name == "tiffnodata":
        return _tiff_initial(kind)
    return values(kind, np.random.default_rng(sum(kind.name.encode())), kind.shape)


def _tiff_initial(kind: Kind) -> np.ndarray:
    a = np.full(kind.shape, NODATA, np.float32)
    a[32:64, 32:96] = np.arange(32 * 64, dtype=np.float32).reshape(32, 64) + 1
    return a


def states(kind: Kind, base: np.ndarray, seed: int, upto: int) -> list[np.ndarray]:
    """``[base, after step 0, ..., after step upto - 1]``."""
    out = [base]
    for step in range(upto):
        a = out[-1].copy()
        region, v = ops(kind, seed, step)
        a[region] = v
        out.append(a)
    return out


# -- the writer processes --------------------------------------------------------------------------
def _zarr_writer(kind: Kind, path: str, seed: int, ack: Callable[[int], None]) -> None:
    import zarr

    a = zarr.open_array(path, mode="r+")
    print("ready", flush=True)
    for step in range(100000):
        region, v = ops(kind, seed, step)
        a[region] = v
        ack(step)


def _h5py_writer(kind: Kind, path: str, seed: int, ack: Callable[[int], None]) -> None:
    import h5py

    f = h5py.File(path, "r+")
    print("ready", flush=True)
    for step in range(100000):
        region, v = ops(kind, seed, step)
        f["a"][region] = v
        if step % 2 == 0:  # close(): FUSE flush, the commit
            f.close()
            ack(step)
            f = h5py.File(path, "r+")
        else:  # HDF5's caches pwritten, then fsync of its own descriptor
            f.flush()
            os.fsync(f.id.get_vfd_handle())
            ack(step)


def _tiff_writer(kind: Kind, path: str, seed: int, ack: Callable[[int], None]) -> None:
    import tifffile

    data = tifffile.imread(path)
    work = Path(tempfile.mkdtemp(prefix="h10crash_tiffw_", dir=os.environ.get("CRASH10_TMP")))
    print("ready", flush=True)
    for step in range(100000):
        region, v = ops(kind, seed, step)
        data[region] = v
        sparse_geotiff(data, work / "plain.tif", work / "dem.tif")
        shutil.copyfile(work / "dem.tif", path)  # open(O_TRUNC), write, close(): the commit
        ack(step)


def sparse_geotiff(data: np.ndarray, plain: Path, out: Path) -> None:
    """GDAL's sparse tiled float GeoTIFF: tiles all nodata are not written (byte count 0)."""
    import tifffile

    tifffile.imwrite(plain, data)
    out.unlink(missing_ok=True)
    subprocess.run(["gdal_translate", "-q", "-a_nodata", NODATA_TEXT, "-co", "TILED=YES", "-co", "BLOCKXSIZE=32",
                    "-co", "BLOCKYSIZE=32", "-co", "SPARSE_OK=TRUE", "-co", "COMPRESS=DEFLATE", str(plain), str(out)],
                   check=True, timeout=60, capture_output=True)


def whole(kind: Kind, seed: int) -> np.ndarray:
    """New values for the whole array (for the TIFF, whole tiles of nodata and of values)."""
    rng = np.random.default_rng(seed)
    if kind.name != "tiffnodata":
        return values(kind, rng, kind.shape)
    tiles = rng.random(tuple(-(-n // c) for n, c in zip(kind.shape, kind.chunks))) < 0.4
    nod = np.kron(tiles, np.ones(kind.chunks, bool))[:kind.shape[0], :kind.shape[1]]
    return np.where(nod, NODATA, rng.random(kind.shape, dtype=np.float32) + 1).astype("float32")


def write_once(kind: Kind, path: str, seed: int) -> None:
    """One whole-array write (many chunks: a long commit), ``closing`` printed as it starts."""
    new = whole(kind, seed)
    if kind.name == "tiffnodata":
        work = Path(tempfile.mkdtemp(prefix="h10crash_once_", dir=os.environ.get("CRASH10_TMP")))
        sparse_geotiff(new, work / "plain.tif", work / "dem.tif")
        print("closing", flush=True)
        shutil.copyfile(work / "dem.tif", path)
    elif kind.name == "h5zstd":  # the chunks pwritten, then the commit at close()
        import h5py

        f = h5py.File(path, "r+")
        f["a"][...] = new
        f.flush()
        print("closing", flush=True)
        f.close()
    else:
        import zarr

        a = zarr.open_array(path, mode="r+")
        print("closing", flush=True)
        a[...] = new
    print("done", flush=True)


BIG: dict[str, Kind] = {k.name: k for k in (
    Kind("transpose", "zarr/tb.zarr/a", (32, 80, 72), (8, 10, 12), "float32"),
    Kind("tiffnodata", "tiff/big/a.tif", (512, 512), (32, 32), "float32"),
    Kind("records", "zarr/rb.zarr/a", (4000,), (10,), REC),
    Kind("vlenbytes", "zarr/vb.zarr/a", (3200,), (8,), object),
    Kind("text", "zarr/tx.zarr/a", (4800,), (6,), object),
    Kind("h5zstd", "hdf5/zs.h5", (256, 256), (16, 16), "int32"),
)}


def writer_main(argv: list[str]) -> None:
    """``KIND PATH ACKLOG SEED``: print ``ready`` once open, then write until killed;
    ``once KIND PATH SEED``: one whole-array write of a big array."""
    warnings.filterwarnings("ignore")
    if argv[0] == "once":
        write_once(BIG[argv[1]], argv[2], int(argv[3]))
        return
    kind, path, log, seed = KINDS[argv[0]], argv[1], Path(argv[2]), int(argv[3])
    run = {"h5zstd": _h5py_writer, "tiffnodata": _tiff_writer}.get(kind.name, _zarr_writer)
    run(kind, path, seed, AckLog(log).writer())


if __name__ == "__main__":
    writer_main(sys.argv[1:])
    sys.exit(0)

# -- the test ------------------------------------------------------------------------------------------
import pytest  # noqa: E402

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")
hdf5plugin = pytest.importorskip("hdf5plugin")

from conftest import Mount, fuse_available  # noqa: E402
from crashkit import Watchdog, cleanup_mount, deep_check, is_clean, polyfs_check, sigkill, wait_line  # noqa: E402

pytestmark = [pytest.mark.mount,
              pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                         "ignore::FutureWarning", "ignore::DeprecationWarning")]
needs_gdal = pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")
ROUNDS = int(os.environ.get("POLYFS_CRASH10_ROUNDS", 2))


def opts(tmp_path: Path, r: int) -> list[str]:
    """Odd rounds write with 1 MiB of write buffers: the writes spill to scratch files."""
    return [f"write_buffer_mb=1,scratch_dir={tmp_path / 'scratch'}"] if r % 2 else []


def create(kind: Kind, mnt: Path, data: np.ndarray, work: Path) -> None:
    """Each array made by its own tool through the mount."""
    from zarr.codecs import GzipCodec, TransposeCodec

    target = mnt / kind.view
    if kind.name == "tiffnodata":
        target.parent.mkdir()
        sparse_geotiff(data, work / "plain0.tif", work / "dem0.tif")
        shutil.copyfile(work / "dem0.tif", target)
        return
    if kind.name == "h5zstd":  # zarr-python's default codec: zstd
        (mnt / "zarr" / "zs.zarr").mkdir()
        a = zarr.create_array(str(mnt / "zarr" / "zs.zarr" / "a"), shape=kind.shape, chunks=kind.chunks,
                              dtype="int32", fill_value=0)
        a[...] = data
        return
    target.parent.mkdir()
    kw: dict[str, Any] = {"transpose": dict(dtype="float32", chunks=kind.chunks, shards=(8, 20, 36),
                                            filters=[TransposeCodec(order=(2, 0, 1))], compressors=GzipCodec(level=1)),
                          "records": dict(dtype=REC, chunks=kind.chunks),  # zarr 3.1 cannot shard records (an lru_cache of a void fill)
                          "vlenbytes": dict(dtype=zarr.dtype.VariableLengthBytes(), chunks=kind.chunks),
                          "text": dict(dtype=str, chunks=kind.chunks, shards=(24,),
                                       compressors=GzipCodec(level=5))}[kind.name]
    a = zarr.create_array(str(target), shape=kind.shape, **kw)
    a[...] = data


def read_back(kind: Kind, mnt: Path) -> np.ndarray:
    """The array as the writer's own tool reads the remounted view."""
    if kind.name == "tiffnodata":
        return tifffile.imread(mnt / kind.view)
    if kind.name == "h5zstd":
        with h5py.File(mnt / kind.view, "r") as f:
            return f["a"][()]
    a = zarr.open_array(str(mnt / kind.view), mode="r")[...]
    return np.asarray(a, dtype=object) if kind.dtype is object else a


def read_other_view(kind: Kind, mnt: Path) -> np.ndarray | None:
    """The same array through another view (h5py on ``hdf5/`` for the Zarr arrays, zarr-python
    on ``zarr/`` for the other two): after the remount both views serve the same chunks."""
    if kind.name == "tiffnodata":
        return zarr.open_array(str(mnt / "zarr" / f"{kind.view.split('/')[1]}.zarr" / "a"), mode="r")[...]
    if kind.name == "h5zstd":
        return zarr.open_array(str(mnt / "zarr" / "zs.zarr" / "a"), mode="r")[...]
    stem = kind.view.split("/")[1][:-len(".zarr")]
    with h5py.File(mnt / "hdf5" / f"{stem}.h5", "r") as f:
        got = f["a"][()]
    if kind.name == "vlenbytes":
        return np.array([bytes(x) for x in got] + [None], object)[:-1]
    if kind.name == "text":
        return np.array([x.decode() for x in got] + [None], object)[:-1]
    return got


def stray_names(kind: Kind, mnt: Path) -> list[str]:
    """Names in the remounted view that are neither metadata nor chunk files nor the view file:
    zarr-python's ``*.partial`` and HDF5's or cp's temporaries live only in the dead daemon."""
    top = mnt / "/".join(kind.view.split("/")[:2])
    if kind.name == "h5zstd":
        top = mnt / "zarr" / "zs.zarr"
    out = []
    for sub, _dirs, files in os.walk(top):
        for f in files:
            rel = os.path.relpath(os.path.join(sub, f), top)
            if not (f in ("zarr.json", "a.tif") or f.isdigit()):
                out.append(rel)
    return out


def grid(kind: Kind):
    for idx in np.ndindex(*(-(-n // c) for n, c in zip(kind.shape, kind.chunks))):
        yield idx, tuple(slice(i * c, min(n, (i + 1) * c)) for i, c, n in zip(idx, kind.chunks, kind.shape))


def judge(kind: Kind, history: list[np.ndarray], acked: int, got: np.ndarray) -> tuple[int, list[str]]:
    """(chunks holding the in-flight step, problems): each chunk old (acknowledged) or new."""
    old = history[acked + 1]
    new = history[acked + 2] if len(history) > acked + 2 else old
    fresh, bad = 0, []
    if got.shape != old.shape:
        return 0, [f"{kind.name}: shape {got.shape}, not {old.shape}"]
    for idx, region in grid(kind):
        block = got[region]
        if _same(block, old[region]):
            continue
        if _same(block, new[region]):
            fresh += 1
        elif any(_same(block, h[region]) for h in history[:acked + 1]):
            bad.append(f"{kind.name} chunk {idx}: an older state than acknowledged step {acked} (lost)")
        else:
            bad.append(f"{kind.name} chunk {idx}: neither acknowledged nor in-flight values (torn): "
                       f"{block.ravel()[:3]!r} vs {old[region].ravel()[:3]!r}")
    return fresh, bad


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype == object or b.dtype == object:
        return a.shape == b.shape and all(x == y for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
    return bool(np.array_equal(a, b))


@needs_gdal
def test_sigkill_during_writes_of_the_round_8_and_9_paths(tmp_path):
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    seed = int(os.environ.get("POLYFS_CRASH_SEED", random.randrange(1 << 20)))
    print(f"seed {seed} (POLYFS_CRASH_SEED={seed} replays it)")
    store, mnt, log, acks = tmp_path / "store", tmp_path / "mnt", tmp_path / "polyfs.log", tmp_path / "acks"
    for d in (store, mnt, acks, tmp_path / "scratch"):
        d.mkdir()
    env = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH, CRASH10_TMP=str(tmp_path))
    base = {k.name: initial(k) for k in KINDS.values()}
    mount = Mount(str(store), mnt, log, []).start()
    procs: list[subprocess.Popen] = []
    failures: list[str] = []
    try:
        for kind in KINDS.values():
            create(kind, mnt, base[kind.name], tmp_path)
        for r in range(ROUNDS):
            rng = random.Random(f"{seed}:{r}")
            seeds = {k: rng.randrange(1 << 31) for k in KINDS}
            delay = rng.uniform(0.3, 2.5)
            writers = {}
            for name, kind in KINDS.items():
                writers[name] = subprocess.Popen(
                    [sys.executable, __file__, name, str(mnt / kind.view), str(acks / f"{r}-{name}"),
                     str(seeds[name])], stdout=subprocess.PIPE, stderr=open(acks / f"{r}-{name}.err", "w"),
                    text=True, env=env)
                procs.append(writers[name])
            deadline = time.monotonic() + 120
            for p in writers.values():
                wait_line(p, "ready", deadline)
            time.sleep(delay)
            failures += [f"round {r}: {n} died before the kill: {(acks / f'{r}-{n}.err').read_text()[-1500:]}"
                         for n, p in writers.items() if p.poll() is not None]
            sigkill(mount.daemon_pid(), *writers.values())
            for p in writers.values():
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    cleanup_mount(mnt)
                    p.wait(timeout=60)
                p.stdout.close()
            cleanup_mount(mnt)
            mount = Mount(str(store), mnt, log, []).start()
            with Watchdog(300, mount.daemon_pid()):
                for name, kind in KINDS.items():
                    acked = AckLog(acks / f"{r}-{name}").last()
                    history = states(kind, base[name], seeds[name], acked + 2)
                    try:
                        got = read_back(kind, mnt)
                    except Exception as exc:  # noqa: BLE001 - reported with the round
                        failures.append(f"round {r}: {name}: reading back failed: {type(exc).__name__}: {exc}")
                        continue
                    fresh, bad = judge(kind, history, acked, got)
                    other = read_other_view(kind, mnt)
                    bad += [f"{name}: {x} still in the view after the remount" for x in stray_names(kind, mnt)]
                    if not _same(other, got):
                        bad.append(f"{name}: the other view serves other values than {kind.view}")
                    print(f"round {r} ({delay:.2f} s): {name}: {acked + 1} steps acknowledged, "
                          f"{fresh} chunks in flight, {len(bad)} bad")
                    failures += [f"round {r}: {b}" for b in bad]
                    base[name] = got if not bad else history[acked + 1]
            mount.stop()
            outcome, text = deep_check(store, allow_repair=True)
            print(f"round {r}: check --deep {outcome}")
            if outcome != "clean":
                print(text)
            if outcome == "failed":
                failures.append(f"round {r}: check --deep: {text.strip()[-3000:]}")
            if failures:
                break
            mount = Mount(str(store), mnt, log, opts(tmp_path, r + 1)).start()
    finally:
        sigkill(*(p for p in procs if p.poll() is None))
        cleanup_mount(mnt)
    text = log.read_text() if log.exists() else ""
    errors = [ln for ln in text.splitlines() if " ERROR " in ln or ln.startswith("Traceback")]
    assert not failures, f"seed {seed}\n" + "\n".join(failures)
    assert not errors, "daemon log has errors:\n" + "\n".join(errors[:20])


def _chunk_mtimes(store: Path) -> dict[str, int]:
    """Chunk object path -> mtime, over every dataset (temporaries come and go)."""
    out = {}
    for d in store.glob("db/*/d/*"):
        for e in os.scandir(d):
            if e.name.replace("_", "").isdigit():
                try:
                    out[e.path] = e.stat().st_mtime_ns
                except FileNotFoundError:
                    pass
    return out


def _age_leftovers(store: Path) -> int:
    """Temporaries a killed daemon left (staged, never renamed), made older than ``check``'s
    cut-off (``LEFTOVER_AGE``: younger ones may be a live writer's): ``--repair`` removes them."""
    old = time.time() - 7200
    found = [p for p in store.rglob(".polyfs-tmp-*") if p.is_file()]
    for p in found:
        os.utime(p, (old, old))
    return len(found)


@needs_gdal
@pytest.mark.parametrize("name", list(BIG))
def test_sigkill_in_the_middle_of_a_big_commit_leaves_each_chunk_old_or_new(tmp_path, name):
    """A whole-array rewrite (192 inner chunks of 32 transposed shards; a 512x512 sparse
    GeoTIFF of 256 tiles copied over its view file; 400-800 record, byte and text chunks; h5py
    closing 256 zstd chunks), the daemon killed once the commit replaced a random number of
    chunk objects (1 to a quarter): every chunk is then the old or the new one, the other view
    agrees, and the store checks clean, after ``--repair`` of the temporaries the kill left."""
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    seed = int(os.environ.get("POLYFS_CRASH_SEED", random.randrange(1 << 20)))
    kind = BIG[name]
    nchunks = int(np.prod([-(-n // c) for n, c in zip(kind.shape, kind.chunks)]))
    want = int(os.environ.get("CRASH10_AFTER", random.Random(seed).randint(1, nchunks // 4)))
    print(f"seed {seed}: killed after {want} of {nchunks} chunk objects replaced")
    store, mnt, log = tmp_path / "store", tmp_path / "mnt", tmp_path / "polyfs.log"
    store.mkdir()
    mnt.mkdir()
    (tmp_path / "scratch").mkdir()
    old = whole(kind, 1)
    new = whole(kind, 2)
    writer = None
    try:
        mount = Mount(str(store), mnt, log, opts(tmp_path, seed)).start()
        create(kind, mnt, old, tmp_path)
        before = _chunk_mtimes(store)
        writer = subprocess.Popen([sys.executable, __file__, "once", name, str(mnt / kind.view), "2"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, CRASH10_TMP=str(tmp_path),
                                           HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH))
        wait_line(writer, "closing", time.monotonic() + 120)
        deadline, hit = time.monotonic() + 60, False
        while time.monotonic() < deadline and writer.poll() is None:
            if sum(before.get(k) != t for k, t in _chunk_mtimes(store).items()) >= want:
                hit = True
                break
            time.sleep(0.001)
        sigkill(mount.daemon_pid(), writer)
        writer.communicate(timeout=60)
        cleanup_mount(mnt)
        mount = Mount(str(store), mnt, log, []).start()
        got = read_back(kind, mnt)
        assert _same(read_other_view(kind, mnt), got), "the two views disagree after the remount"
        counts = {"old": 0, "new": 0}
        for idx, region in grid(kind):
            if _same(got[region], new[region]):
                counts["new"] += 1
            else:
                np.testing.assert_array_equal(got[region], old[region], err_msg=f"chunk {idx}: neither old nor new")
                counts["old"] += 1
        mount.stop()
        left = _age_leftovers(store)
        print(f"{name}: killed mid-commit {hit}, chunks {counts}, {left} temporaries left")
        outcome, text = deep_check(store, allow_repair=True)
        assert outcome != "failed", text
        assert not list(store.rglob(".polyfs-tmp-*")), "--repair left temporaries"
        errors = [ln for ln in log.read_text().splitlines() if " ERROR " in ln or ln.startswith("Traceback")]
        assert not errors, "daemon log has errors:\n" + "\n".join(errors[:20])
    finally:
        if writer is not None and writer.poll() is None:
            sigkill(writer)
        cleanup_mount(mnt)


def test_repair_of_a_killed_writers_temporaries_leaves_the_chunk_index_in_force(tmp_path):
    """A daemon killed while a commit staged chunk objects leaves ``.polyfs-tmp-<hex>`` files
    beside them (seen after the kills above). Once they are older than ``check``'s cut-off,
    ``check --deep`` asks for ``--repair``, and after it the store must be consistent with
    nothing more to rebuild: no persisted chunk index out of date (else every mount lists the
    directory afresh until a second ``--repair``)."""
    from polyfs.importers import import_source
    from polyfs.store.local import TMP_PREFIX

    src, store = tmp_path / "s.h5", tmp_path / "store"
    with h5py.File(src, "w") as f:
        f.create_dataset("a", data=np.arange(4096).reshape(64, 64), chunks=(8, 8), compression="gzip")
    import_source(src, str(store), domain="/s.h5", progress=False)
    chunk_dir = next(store.glob("db/*/d/*"))
    (chunk_dir / f"{TMP_PREFIX}{'0' * 32}").write_bytes(b"a half-staged chunk")
    _age_leftovers(store)
    first = polyfs_check(store, "--deep")
    assert "temporary files a killed writer left" in first.stdout and "run --repair" in first.stdout, first.stdout
    fix = polyfs_check(store, "--repair")
    assert "removed 1 temporary files" in fix.stdout, fix.stdout
    after = polyfs_check(store, "--deep")
    assert is_clean(after), after.stdout
    assert "out of date" not in after.stdout, after.stdout
