"""Memory a writable mount must give back (tier 2: Operations awaited directly).

Found by the soak (tests/soakkit.py), whose daemon RSS grew without bound while tensorstore
and zarr-python rewrote chunks: a file written under a temporary name and renamed onto its
final name (tensorstore's ``X.__lock``, zarr-python's ``X.<id>.partial``) is stored at the
rename and leaves the overlay there, but its pages were never freed (they stayed counted in
the write budget, so every such write also brought the spill to scratch files nearer); and
each layout of a file a process read was kept for that process forever."""
from __future__ import annotations

import errno

import numpy as np
import pytest
from writeharness import FS, ZarrLayout, zarr_array_meta

from polyfs.fs.overlay import PendingFile
from polyfs.fs.writeops import SEEN_LAYOUTS


@pytest.fixture
def fs():
    f = FS()
    f.mkdir("zarr/t.zarr")
    f.mkdir("zarr/t.zarr/a")
    meta = zarr_array_meta((8, 8), "<i2", (4, 4), codecs=("zstd",))
    f.write_json("zarr/t.zarr/a/zarr.json", meta)
    f.makedirs("zarr/t.zarr/a/c/0")
    f.layout = ZarrLayout(meta)
    yield f
    f.close()


def pending_files(fs: FS) -> list[PendingFile]:
    import gc

    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, PendingFile) and not o._gone and o.budget is fs.ops.writes.budget]


def chunk(fs: FS, value: int) -> bytes:
    return fs.layout.encode_chunk(np.full((4, 4), value, "<i2"))


def test_a_temporary_renamed_onto_its_name_frees_its_pages(fs):
    budget = fs.ops.writes.budget
    for i in range(5):  # tensorstore: write X.__lock, close, rename onto X
        h = fs.open_file("zarr/t.zarr/a/c/0/1.__lock")
        h.write(chunk(fs, i))
        h.release()
        fs.rename("zarr/t.zarr/a/c/0/1.__lock", "zarr/t.zarr/a/c/0/1")
    assert budget.used == 0, "the stored temporaries' pages are still held"
    assert pending_files(fs) == []
    # renamed while still open (then closed): freed at the last close
    h = fs.open_file("zarr/t.zarr/a/c/0/0.__lock")
    h.write(chunk(fs, 9))
    fs.rename("zarr/t.zarr/a/c/0/0.__lock", "zarr/t.zarr/a/c/0/0")
    assert budget.used > 0  # still open: its pages stay until it is closed
    h.release()
    assert budget.used == 0 and pending_files(fs) == []
    # a temporary unlinked while open: freed at its last close
    h = fs.open_file("zarr/t.zarr/a/c/0/.x.partial")
    h.write(chunk(fs, 3))
    fs.unlink("zarr/t.zarr/a/c/0/.x.partial")
    h.release()
    assert budget.used == 0 and pending_files(fs) == []
    # what was stored is what the last renames carried
    assert fs.read_file("zarr/t.zarr/a/c/0/1") == chunk(fs, 4)
    assert fs.read_file("zarr/t.zarr/a/c/0/0") == chunk(fs, 9)


def test_a_reader_of_a_file_others_rewrite_keeps_few_layouts(fs):
    writer = fs.as_pid(fs.pid + 1_000_000)  # another process
    path = "zarr/t.zarr/a/c/0/1"
    for i in range(3 * SEEN_LAYOUTS):
        writer.write_file(path, chunk(fs, i))
        assert fs.read_file(path) == chunk(fs, i)  # a new layout each time
    seen = fs.ops.writes._seen[(fs.ops.writes.process_of(fs.pid), path)]
    assert 0 < len(seen) <= SEEN_LAYOUTS


def test_a_shard_past_the_batch_size_is_validated_whole_and_stored_in_batches(monkeypatch):
    """A shard file's converted chunks were all held until stored (a 512 MiB shard: 676 MB of
    daemon RSS with write_buffer_mb=64). Past BATCH_BYTES they are converted again when stored,
    a batch at a time; every chunk is still validated before the first is stored, so a bad chunk
    at the end leaves the store as it was."""
    from test_write_semantics import assert_values, refused
    from writeharness import decode_shard, encode_shard

    import polyfs.writes.service as service

    rng = np.random.default_rng(5)
    data = rng.integers(0, 60000, (16, 16), dtype="<u2")  # 16 inner chunks of 4x4, 32 bytes raw each
    f = FS()
    try:
        f.mkdir("zarr/t.zarr")
        f.mkdir("zarr/t.zarr/a")
        meta = zarr_array_meta((16, 16), "<u2", (4, 4), shards=(16, 16), codecs=())
        f.write_json("zarr/t.zarr/a/zarr.json", meta)
        f.makedirs("zarr/t.zarr/a/c/0")
        lay = ZarrLayout(meta)
        shard = lay.encode_file(data)
        monkeypatch.setattr(service, "BATCH_BYTES", 100)  # three chunks a batch
        calls: list[int] = []
        put = f.ops.writes.service.editor.put_chunks

        def counting(domain, ds, items, deletes=(), **kw):
            calls.append(sum(len(b) for _, b in items))
            return put(domain, ds, items, deletes, **kw)

        monkeypatch.setattr(f.ops.writes.service.editor, "put_chunks", counting)
        bad = decode_shard(shard, 16)
        bad[15] = bad[15][:-2]  # the last chunk is short: found before anything is stored
        refused(f, errno.EINVAL, f.write_file, "zarr/t.zarr/a/c/0/0", encode_shard(bad, 16))
        assert calls == []
        f.write_file("zarr/t.zarr/a/c/0/0", shard)
        assert len(calls) >= 5 and max(calls) <= 100 + 32, calls
        assert_values(f, "t", "a", data)
    finally:
        f.close()
