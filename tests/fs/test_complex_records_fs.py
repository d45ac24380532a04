"""Complex fields inside records keep both parts.

numpy's record assignment puts a complex field's real part into both fields of an
``{r, i}`` compound (the way HDF5 and h5py spell complex numbers). Records of h5py's
``[("id", "<i4"), ("z", "<c16")]`` imported with ``polyfs import`` were stored with
``1+2j`` as ``1+1j``, and so were such records written through ``zarr/`` (a zarr-python
structured array with a complex field). Found by the round-9 cross-view comparison."""
from __future__ import annotations

import base64
import io

import h5py
import numpy as np
from test_write_semantics import fs, zfs  # noqa: F401 - fixtures

from polyfs.importers import import_source
from polyfs.model import values

RECORD = np.dtype([("id", "<i4"), ("z", "<c16"), ("w", "<c8", (2,))])


def _records() -> np.ndarray:
    rec = np.zeros(3, RECORD)
    rec["id"] = [1, 2, 3]
    rec["z"] = [1 + 2j, -4.5 + 0.25j, 3j]
    rec["w"] = [[1 - 1j, 2 + 2j], [0.5j, -1], [7 + 8j, 9 - 10j]]
    return rec


def test_as_layout_splits_complex_fields_at_any_depth():
    target = np.dtype([("id", ">i4"), ("z", [("r", ">f8"), ("i", ">f8")]),
                       ("w", [("r", ">f4"), ("i", ">f4")], (2,))])
    got = values.as_layout(_records(), target)
    np.testing.assert_array_equal(got["z"]["i"], [2, 0.25, 3])
    np.testing.assert_array_equal(got["w"]["i"], [[-1, 2], [0.5, 0], [8, -10]])
    nested = np.zeros(2, [("a", RECORD)])
    nested["a"] = _records()[:2]
    got = values.as_layout(nested, np.dtype([("a", target)]))
    np.testing.assert_array_equal(got["a"]["z"]["i"], [2, 0.25])


def test_import_keeps_the_imaginary_part_of_complex_record_fields(fs, tmp_path):  # noqa: F811 - fixture
    src = tmp_path / "rec.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("r", data=_records(), chunks=(2,))
        f.create_dataset("c", data=_records())  # contiguous: re-chunked and encoded
    import_source(str(src), fs.url, domain="/rec.h5", progress=False)
    with h5py.File(io.BytesIO(fs.read_file("hdf5/rec.h5")), "r") as f:
        for name in ("r", "c"):
            got = f[name][...]
            np.testing.assert_array_equal(got["z"], _records()["z"])
            np.testing.assert_array_equal(got["w"], _records()["w"])


def test_records_with_complex_fields_written_through_zarr_keep_both_parts(zfs):  # noqa: F811 - fixture
    structured = {"name": "structured", "configuration": {"fields": [
        ["id", "int32"], ["z", "complex128"], ["w", {"name": "structured", "configuration": {"fields": [
            ["a", "complex64"], ["b", "complex64"]]}}]]}}
    local = np.dtype([("id", "<i4"), ("z", "<c16"), ("w", [("a", "<c8"), ("b", "<c8")])])
    rec = np.zeros(3, local)
    rec["id"], rec["z"] = [1, 2, 3], [1 + 2j, -4.5 + 0.25j, 3j]
    rec["w"]["a"], rec["w"]["b"] = [1 - 1j, 0.5j, 7 + 8j], [2 + 2j, -1, 9 - 10j]
    zfs.mkdir("zarr/t.zarr/r")
    zfs.write_json("zarr/t.zarr/r/zarr.json", {
        "zarr_format": 3, "node_type": "array", "shape": [3], "data_type": structured,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": base64.b64encode(np.zeros((), local).tobytes()).decode(),
        "codecs": [{"name": "bytes"}], "attributes": {}})
    zfs.makedirs("zarr/t.zarr/r/c")
    zfs.write_file("zarr/t.zarr/r/c/0", rec.tobytes())
    with h5py.File(io.BytesIO(zfs.read_file("hdf5/t.h5")), "r") as f:
        got = f["r"][...]
    np.testing.assert_array_equal(got["z"], rec["z"])
    np.testing.assert_array_equal(got["w"]["a"], rec["w"]["a"])
    np.testing.assert_array_equal(got["w"]["b"], rec["w"]["b"])


def test_records_with_complex_fields_copied_into_hdf5_keep_both_parts(fs, tmp_path):  # noqa: F811 - fixture
    """``cp`` of an HDF5 file into ``hdf5/``, then h5py ``r+`` changing one record."""
    src = tmp_path / "rec.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("r", data=_records(), chunks=(2,), compression="gzip")
        f.create_dataset("c", data=_records())
    fs.write_file("hdf5/rec.h5", src.read_bytes())
    blob = io.BytesIO(fs.read_file("hdf5/rec.h5"))
    with h5py.File(blob, "r+") as f:
        for name in ("r", "c"):
            np.testing.assert_array_equal(f[name][...], _records())
        f["c"][2] = (7, 5 - 6j, [1j, 2j])
    fs.write_file("hdf5/rec.h5", blob.getvalue())
    want = _records()
    want[2] = (7, 5 - 6j, [1j, 2j])
    with h5py.File(io.BytesIO(fs.read_file("hdf5/rec.h5")), "r") as f:
        np.testing.assert_array_equal(f["c"][...], want)
        np.testing.assert_array_equal(f["r"][...], _records())
