"""What the crash loop (tests/mount/test_crash_loop.py) found, pinned down without a mount.

- Shards of one array are committed in parallel, each under its own file's lock; their
  updates of the dataset's CRC32 table (polyfs's derived data) were read-merge-write steps
  that lost each other's entries, so a store written by zarr-python needed ``--repair``
  without any crash.
  Other processes and hosts updating the same table are ordered by conditional writes.
- An import killed between staging an object and renaming it leaves a temp file in the
  orphaned prefix; ``check --repair`` deleted the objects but the temp file kept the
  directory, so the prefix was reported as unreachable again after every repair.
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from polyfs.check import check_store
from polyfs.model import keys
from polyfs.model.catalog import Catalog
from polyfs.model.chunks import CrcTable
from polyfs.store import open_store
from polyfs.store.local import TMP_PREFIX

DATASET = "d-11111111-22222222-3333-444444-555555"


@pytest.mark.parametrize("processes", [1, 4])
def test_parallel_crc_updates_of_one_dataset_keep_every_entry(tmp_path, processes):
    """``processes``: catalogs of their own (a daemon and ``check --repair``, or two hosts),
    ordered by the store's conditional writes, not by a lock they share."""
    store = open_store(str(tmp_path / "store"), create=True)
    catalogs = [Catalog(open_store(str(tmp_path / "store"))) for _ in range(processes)]
    threads, per = 8, 25

    def commit(t: int) -> None:
        catalog = catalogs[t % processes]
        for i in range(per):  # as put_chunks does: beside the old entries, then replacing them
            catalog.save_crcs(DATASET, [(t * 1000 + i, 7, 9)], keep_old=True)
            catalog.save_crcs(DATASET, [(t * 1000 + i, 8, 10)])

    workers = [threading.Thread(target=commit, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    table = CrcTable.from_bytes(store.get(keys.crc_table_key(DATASET)))
    assert len(table) == threads * per
    assert sorted(int(x) for x in table.entries["linear"]) == sorted(t * 1000 + i for t in range(threads)
                                                                      for i in range(per))
    assert set(int(x) for x in table.entries["adler"]) == {8}


def test_repair_removes_an_orphaned_prefix_holding_a_killed_writers_temp_file(tmp_path):
    root = tmp_path / "store"
    store = open_store(str(root), create=True)
    orphan = "db/0123abcd-4567ef01/"
    store.put(orphan + "d/0123-456789-abcdef/0_0", b"chunk")
    stray = root / orphan / "d" / "0123-456789-abcdef" / f"{TMP_PREFIX}0f0f"  # staged, never renamed
    stray.write_bytes(b"half an object")
    before = check_store(str(root))
    assert [p for p in before.problems if p.startswith(orphan)], before.text()
    repaired = check_store(str(root), repair=True)
    assert any(orphan in r for r in repaired.repaired), repaired.text()
    after = check_store(str(root))
    assert not after.problems, after.text()
    assert not (root / orphan).exists() and not Path(root / "db").exists()


def test_repair_removes_temp_files_a_killed_daemon_left_in_a_live_dataset(tmp_path):
    """A daemon killed mid-commit leaves staged temporaries beside live chunks: listings skip
    them, so only check finds them (once old enough to be no one's write in flight)."""
    import os
    import time

    import numpy as np

    from polyfs.importers import import_source

    h5py = pytest.importorskip("h5py")
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.arange(64, dtype="<u2").reshape(8, 8), chunks=(4, 4))
    root = tmp_path / "store"
    import_source(str(src), str(root), domain="/live.h5", progress=False)
    chunk_dir = next(p.parent for p in root.rglob("0_0"))
    old = chunk_dir / f"{TMP_PREFIX}dead"
    old.write_bytes(b"staged by a killed daemon")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    fresh = chunk_dir / f"{TMP_PREFIX}inflight"
    fresh.write_bytes(b"a write in flight right now")
    report = check_store(str(root))
    assert [p for p in report.problems if "temporary files" in p and "1 " in p], report.text()
    repaired = check_store(str(root), repair=True)
    assert any("temporary" in r for r in repaired.repaired), repaired.text()
    assert not old.exists() and fresh.exists()  # a young one may be someone's write: kept
    assert (chunk_dir / "0_0").exists()
    assert not check_store(str(root), deep=True).problems
