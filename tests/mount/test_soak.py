"""Soak in CI (issue 13, part 5): one real mount, 8 reader processes over every view and
2 writer processes for a minute (``POLYFS_SOAK_SECONDS``; ``scripts/soak.py`` runs it for
longer and prints the figures). soakkit.py says what is checked and why."""
from __future__ import annotations

import os
import subprocess

import pytest

import soakkit
from conftest import polyfs_cmd

pytestmark = pytest.mark.mount
pytest.importorskip("zarr")
pytest.importorskip("tensorstore")
pytest.importorskip("z5py")
pytest.importorskip("tifffile")

SOAK_S = float(os.environ.get("POLYFS_SOAK_SECONDS", "60"))


def test_soak_readers_and_writers_on_every_view(mount_store, tmp_path):
    store = soakkit.prepare_store(tmp_path / "work")
    m = mount_store(str(store))
    soakkit.prepare_mount(m.path)
    assert soakkit.probe(m.path) == [], "every dataset is in every view it belongs to"
    rep = soakkit.soak(m, SOAK_S, tmp_path / "procs")
    print(rep.figures())
    problems = rep.problems()
    assert not problems, f"{len(problems)} problems:\n\n" + "\n\n".join(problems)
    # the soak did what it claims: every view read, by libraries and the walker; every writer wrote
    for view in soakkit.VIEWS:
        assert rep.reads.get(view, 0) > 0 and rep.reads.get(f"walk:{view}", 0) > 0, (view, rep.reads)
    assert {k.split()[0] for k in rep.writes} == {"zarr", "n5", "hdf5"}, rep.writes
    assert rep.final_values > 0
    m.stop()
    res = subprocess.run(polyfs_cmd("check", str(store), "--deep"), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "store is consistent" in res.stdout, res.stdout + res.stderr


def test_the_checks_catch_what_a_bug_would_serve():
    """The soak's value checks are not vacuous: torn, misplaced, stale, future and never-written
    chunks and a wrong stable value are each caught."""
    spec = soakkit.WRITTEN_BY_KEY["wz:a"]
    v = next(v for v in range(2, 50) if 0 not in soakkit.chunks_of(spec, v))  # a version that skipped chunk 0
    w = next(w for w in range(v + 1, 60) if 0 in soakkit.chunks_of(spec, w))  # a later one that wrote it
    versions = [1] * spec.nchunks
    for c in soakkit.chunks_of(spec, v):
        versions[c] = v
    good = spec.full(versions)
    assert soakkit.check_written(spec, good, versions, v, "ok") == good.size
    c0 = spec.region(0)
    bad = {"torn": good.copy(), "misplaced": good.copy(), "never wrote it": good.copy()}
    bad["torn"][c0][:10] = (w << 12) | 0
    bad["misplaced"][c0] = (1 << 12) | 1
    bad["never wrote it"][c0] = (v << 12) | 0
    for what, arr in bad.items():
        with pytest.raises(soakkit.Mismatch):
            soakkit.check_written(spec, arr, versions, w, what)
    acked = list(versions)
    acked[0] = w  # version w was acknowledged for chunk 0: version 1 there is stale
    with pytest.raises(soakkit.Mismatch, match="outside"):
        soakkit.check_written(spec, good, acked, w, "stale")
    future = good.copy()
    future[c0] = (w << 12) | 0
    with pytest.raises(soakkit.Mismatch, match="outside"):
        soakkit.check_written(spec, future, versions, v, "not started yet")
    st = soakkit.STABLE[0]
    want = st.array()
    got = want[:5, :6, :7].copy()
    got[1, 2, 3] += 1
    with pytest.raises(soakkit.Mismatch):
        soakkit.check_stable(want, got, (slice(0, 5), slice(0, 6), slice(0, 7)), "stable")
