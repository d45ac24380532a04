"""Crash loop, CI size (issue 13, part 1): the daemon SIGKILLed at random moments while
tensorstore and zarr-python write Zarr, z5py writes N5, h5py (``r+``) writes an HDF5 view
file and tifffile rewrites a TIFF view file, each in its own process, with ``polyfs import``
killed at the same moment, then ``polyfs check --repair`` killed with the daemon.

Each round checks, after the remount: every acknowledged write reads back exactly (from
the chunk objects and through the writer's own view), every chunk is the acknowledged or
the in-flight values (never torn), a killed import left no domain or a complete one, and
``check --deep`` is clean (after ``--repair`` at most). The harness is ``tests/crashkit.py``;
``scripts/crashloop.py --rounds N`` runs the same rounds at full size. Kill times come from
the printed seed (``POLYFS_CRASH_SEED`` sets it), so a failing round's writes replay.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest
from conftest import fuse_available

from crashkit import CrashLoop, grid_of, judge
from crashwriters import KINDS, Kind, initial, ops, states

pytest.importorskip("tensorstore")
pytest.importorskip("zarr")
pytest.importorskip("z5py")
pytest.importorskip("h5py")
pytest.importorskip("tifffile")

ROUNDS = 4  # ~4 s each on an idle 2-core machine, ~10 s on a busy one


def test_crash_loop_every_writable_view(tmp_path):
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    seed = int(os.environ.get("POLYFS_CRASH_SEED", random.randrange(1 << 20)))
    print(f"crash loop seed {seed} (POLYFS_CRASH_SEED={seed} replays it)")
    loop = CrashLoop(tmp_path, seed, max_delay=2.0)
    try:
        loop.setup()
        tally = loop.run(ROUNDS)
    finally:
        loop.close()
    print(tally.report())
    assert not tally.failures, f"seed {seed}\n{tally.report()}"
    assert tally.rounds == ROUNDS and tally.daemon_kills == 2 * ROUNDS
    assert tally.lost == 0 and tally.torn == 0
    assert sum(tally.imports.values()) == ROUNDS and sum(tally.repairs.values()) == ROUNDS
    assert tally.chunks == ROUNDS * sum(_nchunks(k) for k in KINDS.values())  # every chunk, every round
    assert tally.acked > 0  # something was acknowledged and checked, not only the initial state


def _nchunks(kind: Kind) -> int:
    return int(np.prod([-(-n // c) for n, c in zip(kind.shape, kind.chunks)]))


def test_the_judge_tells_lost_and_torn_chunks_from_old_and_new():
    """The checker itself: a chunk holding a state older than the last acknowledged one is
    lost, bytes that match no state (or do not decode) are torn, old and new are fine."""
    kind = KINDS["h5py"]
    base = initial(kind)
    history = states(kind, base, seed=7, upto=4)  # base, after steps 0..3
    acked = 1  # steps 0 and 1 acknowledged, step 2 in flight
    grid = _chunks(kind)
    in_flight = [c for c in grid if not np.array_equal(history[2][c[1]], history[3][c[1]])]
    by_step1 = [c for c in grid if not np.array_equal(history[1][c[1]], history[2][c[1]]) and c not in in_flight]
    others = [c for c in grid if c not in in_flight and c not in by_step1]
    assert in_flight and by_step1 and others, "the seed must change chunks in steps 1 and 2"
    got = {coords: history[2][region].copy() for coords, region in _chunks(kind)}  # all old: acknowledged
    v = judge(kind, history, acked, got)
    assert (v.chunks, v.new, v.lost, v.torn) == (len(got), 0, [], [])
    (c0, r0), (c1, r1), (c2, r2) = in_flight[0], by_step1[0], others[0]
    got[c0] = history[3][r0]  # the step in flight: fine
    got[c1] = history[1][r1]  # acknowledged step 1 lost
    torn = history[2][r2].copy()
    torn.flat[0] ^= 1
    got[c2] = torn
    v = judge(kind, history, acked, got)
    assert v.new == 1 and len(v.lost) == 1 and str(c1) in v.lost[0] and len(v.torn) == 1
    got[c2] = "ZlibError: incomplete stream"
    assert len(judge(kind, history, acked, got).torn) == 1
    assert ops(kind, 7, 2)[0][1].all()  # written values are never the fill value


def _chunks(kind: Kind) -> list:
    return list(grid_of(kind))


def test_z5py_partial_write_into_an_edge_block_keeps_the_rest_of_the_block(mount_store, tmp_path):
    """Found by the crash loop. z5py reads an edge block into a buffer of the cropped block's
    size for a read-modify-write, so the view serves edge blocks cropped (as z5py writes them);
    served padded, the block's other values came back scrambled."""
    z5py = pytest.importorskip("z5py")
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    os.mkdir(m.path / "n5" / "edge.n5")
    f = z5py.File(str(m.path / "n5" / "edge.n5"), use_zarr_format=False, mode="a")
    want = (np.arange(24 * 24, dtype="uint16") + 1).reshape(24, 24)
    ds = f.create_dataset("a", shape=want.shape, chunks=(16, 16), dtype="uint16", compression="raw")
    ds[...] = want
    np.testing.assert_array_equal(ds[...], want)  # whole edge blocks: fine
    ds[2:5, 18:20] = 7  # part of edge block (0, 1), cropped along the fastest axis
    want[2:5, 18:20] = 7
    np.testing.assert_array_equal(z5py.File(str(m.path / "n5" / "edge.n5"), use_zarr_format=False, mode="r")["a"][...],
                                  want)
    for comp in ("gzip", "zstd", "blosc"):  # edge blocks encoded again with the dataset's compression
        d = f.create_dataset(comp, shape=want.shape, chunks=(16, 16), dtype="uint16", compression=comp)
        d[...] = want
        d[20:23, 1:3] = 9  # part of edge block (1, 0), cropped along the slowest axis
        got = z5py.File(str(m.path / "n5" / "edge.n5"), use_zarr_format=False, mode="r")[comp][...]
        expect = want.copy()
        expect[20:23, 1:3] = 9
        np.testing.assert_array_equal(got, expect, err_msg=comp)
