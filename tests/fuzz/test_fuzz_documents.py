"""Fuzzing whole-document writes: HDF5 and TIFF files written through the views (tier 2).

A valid view file (``hdf5/<stem>.h5``, ``tiff/<stem>/<name>.tif``) is read through the
operations, its bytes mutated (flipped, truncated, spliced, integers overwritten: offsets,
sizes, tags) and written back the ways tools write: over the view's file (``r+``: the
view's bytes plus the dirty pages, shortened with ftruncate when the mutation shortened
it), from scratch (``w``: truncated and rewritten, a whole new domain or image), or as a
new file next to it. The HDF5 library and tifffile read what was written: a corrupt file
must come back as an errno (EINVAL/EOPNOTSUPP...), never as an unexpected exception, a
hang or a crash, and a refusal leaves the store byte-identical. With ``POLYFS_FUZZ_SAVE=DIR``
each input is saved in DIR before it is written (what was being written when a run hung).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from fuzzkit import Mutation, Unexpected, attempt, budget, edits, mutate
from hypothesis import example, given
from hypothesis import strategies as st
from writeharness import FS, zarr_array_meta

META = zarr_array_meta((32, 32), "uint8", (16, 16), codecs=("zstd",), attributes={"units": "m", "scale": [1, 2]})
ROTATE = 30


class Docs:
    """Domains holding one image-like array ``img`` (made through the Zarr view), reused until
    a write is taken; a fresh ``FS`` every :data:`ROTATE` domains."""

    def __init__(self) -> None:
        self.fs: FS | None = None
        self.guard: Unexpected | None = None
        self.made = 0
        self.stem: str | None = None
        self.files: dict[str, bytes] = {}
        self.saved = 0  # inputs saved (POLYFS_FUZZ_SAVE)

    def domain(self) -> tuple[FS, Unexpected, str]:
        if self.stem is not None:
            assert self.fs is not None and self.guard is not None
            return self.fs, self.guard, self.stem
        if self.fs is None or self.made % ROTATE == 0:
            if self.fs is not None:
                self.fs.close()
            self.fs = FS()
            self.guard = Unexpected(self.fs.ops)
        self.made += 1
        fs, stem = self.fs, f"doc{self.made}"
        fs.mkdir(f"zarr/{stem}.zarr")
        fs.mkdir(f"zarr/{stem}.zarr/img")
        fs.write_json(f"zarr/{stem}.zarr/img/zarr.json", META)
        fs.mkdir(f"zarr/{stem}.zarr/img/c")
        data = (np.arange(32 * 32) % 251).astype("uint8").reshape(32, 32)
        for i in range(2):
            fs.mkdir(f"zarr/{stem}.zarr/img/c/{i}")
            for j in range(2):
                import numcodecs

                blob = bytes(numcodecs.Zstd(level=3).encode(np.ascontiguousarray(data[i * 16:(i + 1) * 16,
                                                                                       j * 16:(j + 1) * 16])))
                fs.write_file(f"zarr/{stem}.zarr/img/c/{i}/{j}", blob)
        self.files = {"hdf5": fs.read_file(f"hdf5/{stem}.h5"), "tiff": fs.read_file(self.tiff_path(stem))}
        assert self.guard is not None
        self.guard.check("setting up a domain")
        self.stem = stem
        return fs, self.guard, stem

    def tiff_path(self, stem: str) -> str:
        assert self.fs is not None
        names = [n for n in self.fs.ls(f"tiff/{stem}") if n.endswith(".tif")]
        assert names, f"no TIFF of {stem}"
        return f"tiff/{stem}/{names[0]}"

    def taken(self, code: int) -> None:
        if code == 0:
            self.stem = None

    def close(self) -> None:
        if self.fs is not None:
            self.fs.close()


@pytest.fixture(scope="module")
def docs():
    pytest.importorskip("h5py")
    d = Docs()
    yield d
    d.close()


def write_over(fs: FS, path: str, data: bytes, size: int) -> None:
    """``open(path, "r+b")``, write ``data`` at 0, ftruncate when shorter, close."""
    h = fs.open_file(path, os.O_RDWR)
    try:
        if data:
            h.write(data, 0)
        if len(data) < size:
            h.ftruncate(len(data))
        h.flush()
    finally:
        h.release()


def document(docs: Docs, kind: str, how: str, bad) -> None:
    fs, guard, stem = docs.domain()
    base = docs.files[kind]
    data = mutate(base, bad)
    keep = os.environ.get("POLYFS_FUZZ_SAVE")  # a directory: the last inputs written, for a hang
    if keep:
        docs.saved += 1
        Path(keep, f"{docs.saved:07d}").write_bytes(data)
        Path(keep, f"{docs.saved - 50:07d}").unlink(missing_ok=True)
        with open(Path(keep, "inputs.txt"), "a") as f:
            f.write(f"{docs.saved:07d} {kind} {how} domain {docs.made}\n")
    path = f"hdf5/{stem}.h5" if kind == "hdf5" else docs.tiff_path(stem)
    if how == "new":
        path = f"hdf5/new{docs.made}.h5" if kind == "hdf5" else f"tiff/{stem}/new.tif"
        code = attempt(fs, guard, lambda: fs.write_file(path, data), f"writing {path}", quiet=not data)
    elif how == "scratch":
        code = attempt(fs, guard, lambda: fs.write_file(path, data), f"writing {path}")
    else:
        code = attempt(fs, guard, lambda: write_over(fs, path, data, len(base)), f"writing {path}")
    docs.taken(code)
    if code == 0 and how == "new" and kind == "hdf5":
        fs.unlink(path)  # the new domain goes again (the next example reuses the name)
    for check in (f"hdf5/{stem}.h5", f"zarr/{stem}.zarr/img/zarr.json"):
        got = attempt(fs, guard, lambda: fs.read_file(check), f"reading {check}")
        assert got in (0, 2), f"{check} after writing {path}: errno {got}"


@budget(40)
@given(bad=edits(3), how=st.sampled_from(["over", "over", "scratch", "new"]))
@example(bad=[Mutation("insert", 56, b"\x00")], how="over")  # RuntimeError out of the HDF5 library
@example(bad=[Mutation("truncate", 0, None)], how="new")  # a new file closed empty: quietly nothing
def test_hdf5_file_mutated(docs, bad, how) -> None:
    document(docs, "hdf5", how, bad)


@budget(40)
@given(bad=edits(3), how=st.sampled_from(["over", "over", "scratch", "new"]))
def test_tiff_file_mutated(docs, bad, how) -> None:
    document(docs, "tiff", how, bad)


def test_hdf5_attribute_not_utf8() -> None:
    """A new ``hdf5/`` file whose UTF-8 string attribute holds the bytes ``e4 62 61 64``: it is
    refused, or stored so that every view still renders (regression found by the fuzzer)."""
    import io

    h5py = pytest.importorskip("h5py")
    bio = io.BytesIO()
    with h5py.File(bio, "w") as f:
        d = f.create_dataset("img", data=np.arange(16, dtype="u1").reshape(4, 4))
        utf8 = h5py.string_dtype("utf-8")
        d.attrs.create("units", np.array(b"\xe4bad", dtype=utf8), dtype=utf8)
    fs = FS()
    guard = Unexpected(fs.ops)
    try:
        code = attempt(fs, guard, lambda: fs.write_file("hdf5/s.h5", bio.getvalue()), "writing hdf5/s.h5")
        if code == 0:
            for path in ("zarr/s.zarr/img/zarr.json", "n5/s.n5/img/attributes.json", "hdf5/s.h5"):
                assert attempt(fs, guard, lambda: fs.read_file(path), f"reading {path}") == 0, path
    finally:
        fs.close()
