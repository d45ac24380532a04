"""Bad input through the real CLI: one line naming the file and the cause, a
non-zero exit code, and the store exactly as it was (every key and size)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import corpus
from .import_helpers import listing
from polyfs.cli import main
from polyfs.importers import import_source
from polyfs.store.local import LocalStore


@pytest.fixture
def store(tmp_path, hdf5_files) -> Path:
    """A store that already holds a domain (so 'unchanged' means something)."""
    s = tmp_path / "store"
    import_source(hdf5_files["types"], str(s), progress=False)
    return s


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    err = capsys.readouterr().err
    return code, err


def check_failure(code: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code != 0
    assert len(lines) == 1, err
    assert lines[0].startswith("polyfs: error: ")
    for n in needles:
        assert n in lines[0], (n, lines[0])


CASES = {
    "truncated_hdf5": (corpus.make_truncated_hdf5, [], ("truncated",)),
    "corrupt_chunk_after_writes": (corpus.make_corrupt_chunk_hdf5, [], ("/z_corrupt", "chunk [3, 3]", "corrupt")),
    "bogus_tiff_offset": (corpus.make_bogus_tiff, [], ("tile 2", "outside the file")),
    "zarr_json_not_json": (corpus.make_bad_zarr, [], ("arr/zarr.json", "not valid JSON")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_source_leaves_store_unchanged(case, store, tmp_path, capsys, monkeypatch):
    make, extra, needles = CASES[case]
    src = make(tmp_path)
    before = listing(store)
    puts = []
    real_put = LocalStore.put
    monkeypatch.setattr(LocalStore, "put", lambda self, key, data: (puts.append(key), real_put(self, key, data)))
    code, err = run_cli(["import", str(src), str(store), "--no-progress", *extra], capsys)
    check_failure(code, err, str(src), *needles)
    assert listing(store) == before
    if case == "corrupt_chunk_after_writes":
        assert any("/d/" in k for k in puts)  # chunks were written, then rolled back


def test_unknown_codec_option(store, hdf5_files, capsys):
    before = listing(store)
    code, err = run_cli(["import", str(hdf5_files["filters"]), str(store), "--codec", "39999"], capsys)
    check_failure(code, err, str(hdf5_files["filters"]), "39999")
    code, err = run_cli(["import", str(hdf5_files["filters"]), str(store), "--codec", "lzma"], capsys)
    check_failure(code, err, "lzma")
    code, err = run_cli(["import", str(hdf5_files["filters"]), str(store), "--chunks", "4,x"], capsys)
    check_failure(code, err, "--chunks")
    assert listing(store) == before


def test_missing_source_and_existing_domain(store, hdf5_files, tmp_path, capsys):
    before = listing(store)
    code, err = run_cli(["import", str(tmp_path / "nope.h5"), str(store)], capsys)
    check_failure(code, err, "nope.h5", "no such file")
    not_a_source = tmp_path / "notes.txt"
    not_a_source.write_text("hello")
    code, err = run_cli(["import", str(not_a_source), str(store)], capsys)
    check_failure(code, err, "notes.txt", "not an HDF5 or TIFF file")
    code, err = run_cli(["import", str(hdf5_files["types"]), str(store)], capsys)
    check_failure(code, err, "/types.h5", "already exists")
    assert listing(store) == before


def test_real_process_exit_code_and_stderr(store, tmp_path):
    """The installed entry point, in its own process."""
    src = corpus.make_bogus_tiff(tmp_path)
    before = listing(store)
    env = dict(os.environ)
    res = subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(store)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"polyfs: error: {src}: ")
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert listing(store) == before
