"""HDF5 files of types numpy has no dtype for, region references and external raw
storage (issue 12, item 5), written with h5py's low-level API."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np


def make_hdf5_types_corpus(dest: Path) -> list[Path]:
    """HDF5 types numpy has no dtype for, and region references (issue 12, item 5).

    ``types.h5``: region references (a dataset of them, hyperslab/points/all
    selections, and attributes), x87 long doubles, IEEE binary128, a 12-bit
    integer in 16 bits and one at bit offset 2, 3- and 5-byte integers,
    ``H5T_UNIX_D32LE``/``D64BE`` times, space- and null-padded strings, binary16,
    big-endian doubles; each exotic type also as an attribute, plus an ordinary
    dataset the Zarr/N5 views show. ``external.h5``: a dataset in external raw
    storage, named relative to the file's directory (``ext.bin`` beside it).
    """
    import h5py
    from h5py import h5d, h5s, h5t

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)

    def raw_dataset(f, name: str, t, data: np.ndarray, mtype=None) -> None:
        sid = h5s.create_simple(data.shape)
        dsid = h5d.create(f.id, name.encode(), t, sid)
        dsid.write(h5s.ALL, h5s.ALL, data, mtype=mtype if mtype is not None else t)

    def raw_attr(obj, name: str, t, data: np.ndarray, mtype=None) -> None:
        from h5py import h5a

        sid = h5s.create_simple(data.shape) if data.shape else h5s.create(h5s.SCALAR)
        aid = h5a.create(obj.id, name.encode(), t, sid)
        aid.write(data, mtype=mtype if mtype is not None else t)

    def quad() -> Any:
        t = h5t.IEEE_F64LE.copy()
        t.set_size(16)
        t.set_precision(128)
        t.set_fields(127, 112, 15, 0, 112)
        t.set_ebias(16383)
        return t

    def quad_bytes(values) -> np.ndarray:
        """IEEE binary128 little-endian bytes of small integers and halves (exact)."""
        out = []
        for v in values:
            if v == 0:
                out.append(bytes(16))
                continue
            sign = 1 if v < 0 else 0
            m, e = math.frexp(abs(v))  # v = m * 2**e, 0.5 <= m < 1
            frac = int((m * 2 - 1) * (1 << 112))
            word = (sign << 127) | ((e - 1 + 16383) << 112) | frac
            out.append(word.to_bytes(16, "little"))
        return np.frombuffer(b"".join(out), dtype="V16")

    types = dest / "types.h5"
    with h5py.File(types, "w") as f:
        data = f.create_dataset("data", data=np.arange(100, dtype="<i4").reshape(10, 10), chunks=(5, 5))
        rr = f.create_dataset("regref", (4,), dtype=h5py.regionref_dtype)
        rr[0] = data.regionref[1:3, 2:5]
        rr[1] = data.regionref[...]
        rr[2] = data.regionref[0:10:3, 1]  # several blocks
        sid = data.id.get_space()
        sid.select_elements(np.asarray([[0, 1], [2, 3], [9, 9]]))
        rr[3] = h5py.h5r.create(data.id, b".", h5py.h5r.DATASET_REGION, sid)
        f.attrs.create("regattr", data.regionref[0:2, 0:2], dtype=h5py.regionref_dtype)
        data.attrs.create("regions", [data.regionref[5:, 5:], data.regionref[0, :]], dtype=h5py.regionref_dtype)
        ld = np.arange(10, dtype=np.longdouble) / 3
        f.create_dataset("longdouble", data=ld, chunks=(5,), compression="gzip")
        f.attrs.create("longdouble_attr", ld[:3])
        raw_dataset(f, "quad", quad(), quad_bytes([0, 1, -2, 0.5, 1024, 3]))
        raw_attr(f, "quad_attr", quad(), quad_bytes([1.5, -3]))
        u12 = h5t.STD_U16LE.copy()
        u12.set_precision(12)
        raw_dataset(f, "u12", u12, np.arange(0, 4096, 512, dtype="<u2"), h5t.STD_U16LE)
        u12be = h5t.STD_U16BE.copy()
        u12be.set_precision(12)
        u12be.set_offset(2)
        raw_dataset(f, "u12_offset_be", u12be, np.arange(0, 4096, 512, dtype="<u2"), h5t.STD_U16LE)
        i24 = h5t.STD_I32LE.copy()
        i24.set_size(3)
        raw_dataset(f, "i24", i24, np.arange(-4, 4, dtype="<i4") * 1000, h5t.STD_I32LE)
        raw_attr(f, "i24_attr", i24, np.asarray([-8388608, 8388607], dtype="<i4"), h5t.STD_I32LE)
        u40 = h5t.STD_U64BE.copy()
        u40.set_size(5)
        raw_dataset(f, "u40_be", u40, np.asarray([0, 1, 2**40 - 1, 2**32 + 7], dtype="<u8"), h5t.STD_U64LE)
        raw_dataset(f, "time", h5t.UNIX_D32LE.copy(), np.arange(8, dtype="<u4") * 86400)
        raw_dataset(f, "time_be", h5t.UNIX_D64BE.copy(), np.arange(8, dtype=">u8") * 3600)
        raw_attr(f, "time_attr", h5t.UNIX_D32LE.copy(), np.asarray(1700000000, dtype="<u4"))
        for name, pad in (("spacepad", h5t.STR_SPACEPAD), ("nullpad", h5t.STR_NULLPAD),
                          ("nullterm", h5t.STR_NULLTERM)):
            ts = h5t.C_S1.copy()
            ts.set_size(8)
            ts.set_strpad(pad)
            text = np.asarray([b"ab      ", b"abcdefgh", b"        ", b"a b     "] if pad == h5t.STR_SPACEPAD
                              else [b"ab", b"abcdefgh", b"", b"a b"], dtype="S8")
            raw_dataset(f, name, ts, text)
            raw_attr(f, name + "_attr", ts, text[:2])
        f.create_dataset("f16", data=np.arange(10, dtype="<f2") / 4)
        f.create_dataset("be_f8", data=np.arange(10, dtype=">f8") / 7)
    with open(dest / "ext.bin", "wb") as fo:
        fo.write(b"\0" * 16 + np.arange(50, dtype="<i4").tobytes())
    external = dest / "external.h5"
    with h5py.File(external, "w") as f:
        f.create_dataset("ext", shape=(5, 10), dtype="<i4", external=[("ext.bin", 16, 200)])
        f["ext"].attrs["note"] = "external raw storage, relative to this file"
        f.create_dataset("plain", data=np.arange(6, dtype="<u1"))
    return [types, external]
