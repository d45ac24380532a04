"""A live viewer: one process reads an array through the mount while another keeps writing it.

Found in exploratory round 7: zarr-python reading a sharded array that zarr-python kept
rewriting through ``zarr/`` failed about one read in six with ``EIO`` (each also logged "laid
out from an older listing"); on a local disk, none (zarr-python replaces files by rename, and
an open file keeps its bytes). The reader's open file is laid out with the chunk sizes of its
open; the chunks the writer replaced meanwhile are now read as the versions it opened
(polyfs/store/recent.py), so every read decodes and holds values the writer wrote.
"""
from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

SECONDS = 6.0


def _writer(mnt: str, until: float) -> None:
    a = zarr.open_array(f"{mnt}/zarr/live.zarr/a", mode="r+")
    rng = np.random.default_rng(1)
    while time.time() < until:
        y, x = rng.integers(0, 192, 2)
        a[y:y + 64, x:x + 64] = rng.integers(1, 1000, (64, 64), dtype="i4")  # other sizes each time


def _reader(mnt: str, until: float, out) -> None:
    ok, failed, wrong = 0, [], 0
    while time.time() < until:
        try:
            got = zarr.open_array(f"{mnt}/zarr/live.zarr/a", mode="r")[:]
        except Exception as exc:  # noqa: BLE001 - counted: the point of the test
            failed.append(repr(exc)[:200])
            continue
        ok += 1
        wrong += int(((got < 0) | (got >= 1000)).sum())  # only the writer's values, or the fill
    out.put((ok, failed[:5], len(failed), wrong))


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_reader_keeps_reading_while_another_process_rewrites_the_array(mount_store, tmp_path, request, backend):
    """On S3 mounts reads are coalesced range requests: they checked no size, so a reader
    could be served the new version's bytes at the old layout's offsets."""
    if backend == "s3":
        s3 = request.getfixturevalue("s3_server")
        url = f"s3://{s3.create_bucket(f'live-{uuid.uuid4().hex[:10]}')}/store"
    else:
        (tmp_path / "store").mkdir()
        url = str(tmp_path / "store")
    m = mount_store(url)
    (m.path / "zarr" / "live.zarr").mkdir()
    zarr.create_array(str(Path(m.path) / "zarr" / "live.zarr" / "a"), shape=(256, 256), chunks=(32, 32),
                      shards=(128, 128), dtype="i4", fill_value=0)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    until = time.time() + SECONDS + 5  # the spawned processes take a while to start
    w = ctx.Process(target=_writer, args=(str(m.path), until))
    r = ctx.Process(target=_reader, args=(str(m.path), until, out))
    w.start()
    r.start()
    w.join(timeout=120)
    r.join(timeout=120)
    ok, failures, failed, wrong = out.get(timeout=10)
    assert w.exitcode == 0 and r.exitcode == 0
    assert ok > 0 and failed == 0, (failed, failures, m.log_text()[-2000:])
    assert wrong == 0
    assert "older listing" not in m.log_text()
