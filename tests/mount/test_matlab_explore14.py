"""MATLAB 7.3 MAT-files through a real mount, round 14.

What this module pins (readers: h5py, hdf5storage, mat73; Octave when installed):

- ``cp data.mat MNT/hdf5/`` of a MAT-file (HDF5 after a 512-byte user block holding the
  ``MATLAB 7.3 MAT-file`` header) was refused with ``EOPNOTSUPP``, and ``polyfs import``
  dropped the header (and the ``.mat`` name): no MAT reader took the view's file. The block
  is kept with the domain now and served before the superblock, under the ``.mat`` name.
- ``hdf5storage.savemat`` straight into the mount (h5py ``"w"`` with a zero user block, the
  header written with ``r+b``, then h5py ``"a"``) failed: the header overwrote the view's
  superblock. It gives a MAT-file now.
- h5py ``r+`` sessions keep the header; ``polyfs check --deep`` is clean.
- An ``h5jam`` header over 64 KiB is refused, the store unchanged.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
hdf5storage = pytest.importorskip("hdf5storage")
mat73 = pytest.importorskip("mat73")
scipy_matlab = pytest.importorskip("scipy.io.matlab")

from polyfs.importers import import_source  # noqa: E402
from test_hdf5_tools_explore import check_deep, seeded_store, snapshot  # noqa: E402,F401

SAVE = """
    import sys, numpy as np, hdf5storage
    d = {"a": np.arange(12.0).reshape(3, 4), "s": "hello", "n": np.int32(7),
         "st": {"f": np.array([1.5, 2.5]), "g": np.uint8(3)}, "c": np.array([[1.0, "x"]], dtype=object)}
    hdf5storage.savemat(sys.argv[1], d, format="7.3", matlab_compatible=True)
"""


def _python(code: str, *args) -> str:
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def _check_mat(path, header: bytes | None = None) -> None:
    """``path`` is a MAT-file of SAVE's variables, for every reader here."""
    raw = path.read_bytes()
    assert raw[:10] == b"MATLAB 7.3" and raw[126:128] == b"IM" and raw[512:520] == b"\x89HDF\r\n\x1a\n"
    if header is not None:
        assert raw[:512] == header[:512]
    assert scipy_matlab.matfile_version(str(path)) == (2, 0)  # scipy.io's check of the header: v7.3
    with h5py.File(path, "r") as f:
        assert f.userblock_size == 512 and f["s"].attrs["MATLAB_class"] == b"char"
    got = hdf5storage.loadmat(str(path))
    np.testing.assert_array_equal(got["a"], np.arange(12.0).reshape(3, 4))
    assert got["s"] == "hello" and int(got["n"]) == 7
    m = mat73.loadmat(str(path))
    np.testing.assert_array_equal(m["st"]["f"], [1.5, 2.5])
    assert m["c"][1] == "x" and int(m["st"]["g"]) == 3
    if shutil.which("octave-cli") or shutil.which("octave"):
        exe = shutil.which("octave-cli") or shutil.which("octave")
        res = subprocess.run([exe, "--no-gui", "--quiet", "--eval",
                              f"x = load('{path}'); disp(sum(x.a(:)) + 1000 * x.n)"],
                             capture_output=True, text=True, timeout=300)  # Octave 7 reads no cells, char as uint16
        assert res.returncode == 0 and res.stdout.split()[-1] == "7066", res.stdout + res.stderr


def test_mat_files_copied_imported_and_saved_into_the_mount(mount_store, seeded_store, tmp_path):
    src = tmp_path / "data.mat"
    _python(SAVE, src)
    header = src.read_bytes()[:512]
    import_source(src, str(seeded_store), domain="/imported.mat", progress=False)
    m = mount_store(str(seeded_store))
    hdf5 = m.path / "hdf5"
    _check_mat(hdf5 / "imported.mat", header)
    subprocess.run(["cp", str(src), str(hdf5 / "copied.mat")], check=True, timeout=60)
    _check_mat(hdf5 / "copied.mat", header)
    for _ in range(2):  # hdf5storage's three steps, straight into the mount; then over the domain
        _python(SAVE, hdf5 / "saved.mat")
        _check_mat(hdf5 / "saved.mat")
    _python("""
        import sys, h5py, numpy as np
        with h5py.File(sys.argv[1], "r+") as f:
            d = f.create_dataset("b", data=np.arange(4.0).reshape(4, 1))
            d.attrs["MATLAB_class"] = np.bytes_("double")
    """, hdf5 / "copied.mat")
    _check_mat(hdf5 / "copied.mat", header)
    np.testing.assert_array_equal(mat73.loadmat(str(hdf5 / "copied.mat"))["b"], np.arange(4.0))
    m.stop()
    m = mount_store(str(seeded_store))  # a fresh daemon: the kept blocks, from the store alone
    for name in ("imported.mat", "copied.mat", "saved.mat"):
        _check_mat(m.path / "hdf5" / name)
    m.stop()
    check_deep(seeded_store)


def test_h5jam_headers_kept_or_refused_by_size(mount_store, seeded_store, tmp_path):
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f["a"] = np.arange(5)
    small, large = tmp_path / "small.txt", tmp_path / "large.txt"
    small.write_text("MY HEADER v1\n")
    large.write_bytes(b"L" * (70 * 1024))  # a 128 KiB user block: over the 64 KiB kept
    m = mount_store(str(seeded_store))
    subprocess.run(["h5jam", "-i", str(src), "-u", str(small), "-o", str(m.path / "hdf5" / "j.h5")], check=True,
                   timeout=60)
    shown = (m.path / "hdf5" / "j.h5").read_bytes()
    assert shown.startswith(b"MY HEADER v1\n") and shown[512:520] == b"\x89HDF\r\n\x1a\n"
    with h5py.File(m.path / "hdf5" / "j.h5", "r") as f:
        np.testing.assert_array_equal(f["a"][()], np.arange(5))
    m.stop()
    before = snapshot(seeded_store)
    m = mount_store(str(seeded_store))
    jammed = tmp_path / "big.h5"
    subprocess.run(["h5jam", "-i", str(src), "-u", str(large), "-o", str(jammed)], check=True, timeout=60)
    res = subprocess.run(["cp", str(jammed), str(m.path / "hdf5" / "big.h5")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and "not supported" in res.stderr, res.stderr
    assert m.log_text().count("user block holds data") == 1
    m.stop()
    after = snapshot(seeded_store)
    assert {k: v for k, v in after.items() if not k.startswith("polyfs/")} == \
        {k: v for k, v in before.items() if not k.startswith("polyfs/")}
    check_deep(seeded_store)
