"""The fidelity corpus of issue 12: HDF5 files written by other software.

:func:`make_fidelity_corpus` writes every source into one directory and returns
``{name: path}``; each generator below writes one family:

- :func:`shipped_files`: HDF5 files that installed Python packages ship (h5py's test
  data...), found by their signature (netCDF-3 files that packages ship are skipped).
- :func:`ncgen_files`: netCDF-C output (``ncgen -k nc4`` / ``-k nc7``) from CDL with groups,
  an unlimited dimension, enum/compound/vlen user types, strings, fill values,
  chunking + deflate + shuffle, contiguous storage and a big-endian variable.
- :func:`netcdf4_python_file`: netCDF4-python output with the same kinds of things;
  :func:`h5netcdf_file`: h5netcdf output (netCDF-4 written through h5py).
- :func:`pynwb_file`: a pynwb NWB file (subject, time series, electrodes table with a
  region of references, processing module).
- :func:`h5py_files`: h5py files, one per feature family (creation order in compact and
  dense storage, layouts, external raw storage, virtual datasets, filters, dimension
  scales, object references, region references, complex/enum/string types, space-padded
  strings), so a failure names its family.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
SHIPPED_SUFFIXES = (".h5", ".hdf5", ".he5", ".nc", ".nc4", ".nwb")


def is_hdf5(path: Path) -> bool:
    """True if the file has the HDF5 signature at 0 or at a user-block offset."""
    with open(path, "rb") as f:
        for offset in (0, 512, 1024, 2048, 4096):
            f.seek(offset)
            if f.read(8) == HDF5_SIGNATURE:
                return True
    return False


def shipped_sources() -> dict[str, Path]:
    """The HDF5 files that packages in this interpreter's site-packages ship, by the name
    their copy gets (``<package>-<file>``); netCDF-3 and other non-HDF5 files are skipped."""
    out: dict[str, Path] = {}
    for site in sorted({Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()}):
        for folder, _, files in os.walk(site):
            for name in sorted(files):
                path = Path(folder) / name
                if path.suffix.lower() in SHIPPED_SUFFIXES and is_hdf5(path):
                    out.setdefault(f"{path.relative_to(site).parts[0]}-{name}", path)
    return dict(sorted(out.items()))


def shipped_files(dest: Path) -> list[Path]:
    """Copies of :func:`shipped_sources` in ``dest``."""
    out = []
    for name, path in shipped_sources().items():
        shutil.copyfile(path, dest / name)
        out.append(dest / name)
    return out


USERTYPES_CDL = r"""netcdf ncgen_usertypes {
types:
  ubyte enum cloud_t {Clear = 0, Cumulus = 1, Stratus = 2, Missing = 255} ;
  compound obs_t {
    int station ;
    double temp ;
    char code(4) ;
  } ;
  int(*) ragged_t ;
dimensions:
  time = UNLIMITED ;
  lat = 3 ;
  lon = 4 ;
  nchar = 5 ;
variables:
  double time(time) ;
    time:units = "hours since 2000-01-01" ;
  float lat(lat) ;
    lat:units = "degrees_north" ;
  float lon(lon) ;
  float temp(time, lat, lon) ;
    temp:_FillValue = -999.f ;
    temp:_ChunkSizes = 1, 3, 4 ;
    temp:_DeflateLevel = 4 ;
    temp:_Shuffle = "true" ;
    temp:units = "K" ;
  short counts(lat, lon) ;
    counts:_FillValue = -1s ;
    counts:_Storage = "contiguous" ;
  cloud_t clouds(time) ;
    clouds:_FillValue = Missing ;
  obs_t obs(lat) ;
  ragged_t rag(lon) ;
  string names(lat) ;
    names:_FillValue = "none" ;
  char label(lat, nchar) ;
  int64 big(lon) ;
    big:_Endianness = "big" ;
  uint64 ubig(lon) ;
    ubig:_Fletcher32 = "true" ;
    ubig:_ChunkSizes = 2 ;
  ushort never_written(time, lon) ;
    never_written:_FillValue = 7us ;
  double nofill(lat) ;
    nofill:_NoFill = "true" ;
  :title = "ncgen corpus" ;
  :version = 2 ;
  string :tags = "a", "bb" ;
  :u8s = 1ub, 255ub ;
  :i16s = -1s, 2s, 3s ;
  :u32 = 4000000000u ;
  :i64 = -9000000000000ll ;
  :u64 = 18000000000000000000ull ;
  :f32 = 1.5f, -0.f, 1e30f ;
  :f64 = 3.14159265358979 ;
data:
  time = 0, 6 ;
  lat = -10, 0, 10 ;
  lon = 0, 90, 180, 270 ;
  temp = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
         _, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24 ;
  counts = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 ;
  clouds = Clear, Stratus ;
  obs = {1, 280.5, {"abcd"}}, {2, 281.0, {"ef"}}, {3, -1, {""}} ;
  rag = {1, 2}, {}, {3}, {4, 5, 6} ;
  names = "alpha", "", "gamma" ;
  label = "one", "two", "three" ;
  big = 1, -2, 3, 4000000000 ;
  ubig = 1, 2, 3, 18000000000000000000 ;
  nofill = 1, 2, 3 ;

group: sub {
  dimensions:
    n = 2 ;
  variables:
    int v(n) ;
      v:note = "in a group" ;
    double w(n, lat) ;
      w:_ChunkSizes = 1, 3 ;
      w:_DeflateLevel = 1 ;
  data:
    v = 7, 8 ;
    w = 1, 2, 3, 4, 5, 6 ;
  group: deeper {
    variables:
      ubyte flag ;
    data:
      flag = 9 ;
  }
}
}
"""

CLASSIC_CDL = r"""netcdf ncgen_classic {
dimensions:
  t = UNLIMITED ;
  x = 6 ;
  y = 2 ;
variables:
  int t(t) ;
    t:units = "seconds since 1970-01-01" ;
  double x(x) ;
  float field(t, y, x) ;
    field:_FillValue = 1.e20f ;
    field:_ChunkSizes = 1, 2, 3 ;
    field:_DeflateLevel = 6 ;
    field:_Shuffle = "true" ;
    field:scale_factor = 0.5f ;
  char name(y, x) ;
  byte b(x) ;
    b:valid_range = -10b, 10b ;
  :Conventions = "CF-1.8" ;
  :history = "ncgen -k nc7" ;
data:
  t = 0, 60, 120 ;
  x = 0.5, 1.5, 2.5, 3.5, 4.5, 5.5 ;
  field = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
          _, _, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
          1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, _ ;
  name = "abc", "defghi" ;
  b = -1, 0, 1, 2, 3, 4 ;
}
"""


def ncgen_files(dest: Path) -> list[Path]:
    """netCDF-4 files written by netCDF-C's ``ncgen`` (skipped if it is not installed)."""
    if shutil.which("ncgen") is None:
        return []
    out = []
    for name, kind, cdl in (("ncgen_usertypes", "nc4", USERTYPES_CDL), ("ncgen_classic", "nc7", CLASSIC_CDL)):
        src = dest / f"{name}.cdl"
        src.write_text(cdl)
        path = dest / f"{name}.nc"
        subprocess.run(["ncgen", "-k", kind, "-o", str(path), str(src)], check=True, capture_output=True,
                       timeout=60)
        src.unlink()
        out.append(path)
    return out


def netcdf4_python_file(dest: Path) -> Path:
    """A netCDF-4 file written by netCDF4-python: groups, user types, strings, fills."""
    import netCDF4

    path = dest / "netcdf4py.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.title = "netCDF4-python corpus"
        nc.setncattr_string("keywords", ["a", "b c"])
        nc.createDimension("time", None)
        nc.createDimension("x", 5)
        nc.createDimension("nv", 2)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2001-01-01"
        t[:] = [0.0, 1.0, 2.5]
        nc.createVariable("x", "i4", ("x",))[:] = np.arange(5) * 10
        v = nc.createVariable("v", "f4", ("time", "x"), zlib=True, shuffle=True, complevel=5,
                              fill_value=np.float32(-1.5), chunksizes=(2, 5))
        v.long_name = "a variable"
        v[:] = np.arange(15, dtype="f4").reshape(3, 5)
        v[2, 4] = np.ma.masked
        u = nc.createVariable("u8", "u8", ("x",), fill_value=np.uint64(2**64 - 1))
        u[:4] = [1, 2, 3, 2**63]
        s = nc.createVariable("labels", str, ("x",))
        for i, text in enumerate(["one", "two", "", "fünf", "five"]):
            s[i] = text
        ch = nc.createVariable("chars", "S1", ("x", "nv"))
        ch[:] = netCDF4.stringtochar(np.array(["ab", "c", "", "de", "f"], "S2"))
        enum_t = nc.createEnumType("i2", "flag_t", {"off": 0, "on": 1, "unknown": -1})
        e = nc.createVariable("flags", enum_t, ("x",), fill_value=-1)
        e[:] = np.array([0, 1, 1, -1, 0], "i2")
        cmp_t = nc.createCompoundType(np.dtype([("lat", "f4"), ("n", "i2")]), "pos_t")
        c = nc.createVariable("pos", cmp_t, ("nv",))
        c[:] = np.array([(1.5, 3), (-2.0, 4)], np.dtype([("lat", "f4"), ("n", "i2")]))
        vl_t = nc.createVLType("f8", "seq_t")
        vl = nc.createVariable("seq", vl_t, ("nv",))
        vl[0] = np.array([1.0, 2.0])
        vl[1] = np.array([3.0])
        g = nc.createGroup("forecast")
        g.source = "model"
        g.createDimension("lead", 3)
        g.createVariable("lead", "i2", ("lead",))[:] = [6, 12, 24]
        gv = g.createVariable("skill", "f8", ("time", "lead"), zlib=True)
        gv[:] = np.arange(9).reshape(3, 3) / 9
        g.createGroup("empty").note = "an empty group"
    return path


def h5netcdf_file(dest: Path) -> Path:
    """A netCDF-4 file written by h5netcdf (through h5py, not netCDF-C): groups, an unlimited
    dimension, a string variable, a compressed variable with a fill value."""
    import h5netcdf
    import h5py

    path = dest / "h5netcdf.nc"
    with h5netcdf.File(path, "w") as f:
        f.attrs["title"] = "written by h5netcdf"
        f.dimensions = {"t": None, "x": 4}
        t = f.create_variable("t", ("t",), "f8")
        t.attrs["units"] = "s"
        f.resize_dimension("t", 3)
        t[:] = [0.0, 0.5, 1.0]
        f.create_variable("x", ("x",), "i4", data=np.arange(4, dtype="i4"))
        v = f.create_variable("v", ("t", "x"), "f4", chunks=(1, 4), compression="gzip", shuffle=True,
                              fillvalue=np.float32(-9))
        v[:] = np.arange(12, dtype="f4").reshape(3, 4)
        s = f.create_variable("label", ("x",), h5py.string_dtype())
        s[:] = np.array(["a", "bb", "", "dddd"], dtype=object)
        g = f.create_group("inner")
        g.dimensions = {"y": 2}
        g.create_variable("y", ("y",), "i2", data=np.array([5, 6], "i2"))
        g.create_variable("w", ("y", "x"), "f8", data=np.arange(8).reshape(2, 4) / 2)
    return path


def pynwb_file(dest: Path) -> Path | None:
    """An NWB file written by pynwb (None if pynwb is not installed)."""
    try:
        import pynwb
        from pynwb.ecephys import ElectricalSeries
    except ImportError:
        return None
    from datetime import datetime, timezone

    path = dest / "pynwb.nwb"
    nwb = pynwb.NWBFile(session_description="polyfs corpus", identifier="polyfs-0001",
                        session_start_time=datetime(2024, 5, 1, 12, tzinfo=timezone.utc),
                        experimenter=["Doe, Jane"], lab="lab", institution="polyfs", keywords=["a", "b"])
    nwb.subject = pynwb.file.Subject(subject_id="m1", species="Mus musculus", age="P90D", sex="F")
    device = nwb.create_device(name="probe", description="a probe")
    group = nwb.create_electrode_group(name="shank0", description="shank", location="CA1", device=device)
    for i in range(4):
        nwb.add_electrode(x=float(i), y=0.0, z=0.0, location="CA1", group=group, imp=-1.0,
                          filtering="none", rel_x=0.0, rel_y=float(i))
    region = nwb.create_electrode_table_region(region=[0, 1, 2, 3], description="all")
    data = (np.arange(200, dtype="i2").reshape(50, 4) % 17) - 8
    nwb.add_acquisition(ElectricalSeries(name="raw", data=data, electrodes=region, rate=1000.0,
                                         conversion=0.5e-6))
    nwb.add_acquisition(pynwb.TimeSeries(name="speed", data=np.linspace(0, 1, 20), unit="m/s",
                                         timestamps=np.arange(20) / 10.0))
    behavior = nwb.create_processing_module(name="behavior", description="behavior")
    behavior.add(pynwb.TimeSeries(name="position", data=np.arange(30, dtype="f4").reshape(10, 3), unit="cm",
                                  rate=30.0))
    nwb.add_trial_column(name="correct", description="correct trial")
    for i in range(3):
        nwb.add_trial(start_time=float(i), stop_time=i + 0.5, correct=bool(i % 2))
    with pynwb.NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    return path


def _h5py_order(path: Path) -> None:
    """track_order groups and attributes in compact (few) and dense (> 8) storage."""
    import h5py

    with h5py.File(path, "w", track_order=True) as f:
        for name in ("z", "a", "m"):
            f.attrs[name] = name
        compact = f.create_group("compact", track_order=True)
        for name in ("zeta", "alpha", "mid"):
            ds = compact.create_dataset(name, data=np.arange(3), track_order=True)
            compact.attrs[name] = len(name)
            for a in ("units", "scale", "axis"):
                ds.attrs[a] = a
        compact["soft"] = h5py.SoftLink("/compact/zeta")
        compact["ext"] = h5py.ExternalLink("elsewhere.h5", "/x")
        dense = f.create_group("dense", track_order=True)
        for i, name in enumerate(["q", "b", "z", "a", "m", "c", "y", "d", "x", "e", "k", "j"]):
            if i % 3 == 0:
                dense.create_group(name, track_order=True).attrs["i"] = i
            else:
                dense.create_dataset(name, data=np.full(4, i), chunks=(2,), compression="gzip", track_order=True)
            dense.attrs[f"attr_{name}"] = i
        dense["a_soft_link"] = h5py.SoftLink("/dense/q")
        d = dense["b"]
        for i, name in enumerate(["w", "v", "u", "t", "s", "r", "p", "o", "n", "l"]):
            d.attrs[name] = np.arange(i + 1)
        plain = f.create_group("untracked", track_order=False)
        for name in ("b", "a", "c"):
            plain.create_group(name)
            plain.attrs[name] = 1


def _h5py_layouts(path: Path) -> None:
    """compact, contiguous and chunked layouts."""
    import h5py

    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4, 3))
        h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I32LE, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, np.arange(12, dtype="<i4").reshape(4, 3))
        f.create_dataset("contiguous", data=np.arange(1000, dtype="<f8").reshape(10, 100))
        f.create_dataset("contiguous_be", data=np.arange(50, dtype=">u2"))
        f.create_dataset("contiguous_unwritten", shape=(6,), dtype="<i2", fillvalue=-3)
        f.create_dataset("chunked", data=np.arange(120, dtype="<i8").reshape(12, 10), chunks=(5, 4))
        f.create_dataset("scalar", data=np.float64(3.25))
        f.create_dataset("chunked_unwritten", shape=(10, 10), dtype="<f4", chunks=(5, 5), fillvalue=np.nan)
        f.create_dataset("zero_size", shape=(0, 3), dtype="<i4", chunks=(4, 3), maxshape=(None, 3))
        f.create_dataset("empty", data=h5py.Empty("<f8"))


def _h5py_external(path: Path) -> None:
    """A dataset in external raw storage, by a path relative to the file's folder."""
    import h5py

    raw = path.with_name(path.stem + ".raw")
    with contextlib.chdir(path.parent), h5py.File(path, "w") as f:  # the raw file's name is relative to cwd
        f.create_dataset("external", data=np.arange(60, dtype="<i4").reshape(6, 10),
                         external=[(raw.name, 0, h5py.h5f.UNLIMITED)])
        f.create_dataset("inside", data=np.arange(5, dtype="<f4"))


def _h5py_vds(path: Path) -> None:
    """A virtual dataset over two source files (relative names) and one in the same file."""
    import h5py

    for i in range(2):
        with h5py.File(path.with_name(f"{path.stem}_src{i}.h5"), "w") as s:
            s.create_dataset("data", data=np.arange(10, dtype="<i4") + 100 * i)
    with h5py.File(path, "w") as f:
        layout = h5py.VirtualLayout(shape=(2, 10), dtype="<i4")
        for i in range(2):
            layout[i] = h5py.VirtualSource(f"{path.stem}_src{i}.h5", "data", shape=(10,))
        f.create_virtual_dataset("stacked", layout, fillvalue=-1)
        f.create_dataset("local", data=np.arange(8, dtype="<f4"))
        half = h5py.VirtualLayout(shape=(4,), dtype="<f4")
        half[:] = h5py.VirtualSource(f["local"])[::2]
        f.create_virtual_dataset("strided", half, fillvalue=0)


def _h5py_filters(path: Path) -> None:
    """fletcher32, scale-offset (integer and float), lzf, lzf + shuffle."""
    import h5py

    img = (np.arange(40 * 30).reshape(40, 30) % 97).astype("<i4")
    with h5py.File(path, "w") as f:
        f.create_dataset("fletcher32", data=img, chunks=(16, 16), fletcher32=True)
        f.create_dataset("fletcher32_gzip", data=img, chunks=(16, 16), fletcher32=True, compression="gzip")
        f.create_dataset("scaleoffset_int", data=img, chunks=(16, 16), scaleoffset=0)
        f.create_dataset("scaleoffset_float", data=img.astype("<f8") / 8, chunks=(16, 16), scaleoffset=3)
        f.create_dataset("lzf", data=img.astype("<u2"), chunks=(16, 16), compression="lzf")
        f.create_dataset("lzf_shuffle", data=img.astype("<f4"), chunks=(16, 16), compression="lzf", shuffle=True)


def _h5py_dimscales(path: Path) -> None:
    """h5py dimension scales: two scales on one axis, a label, a scale of a group."""
    import h5py

    with h5py.File(path, "w") as f:
        data = f.create_dataset("data", data=np.arange(24, dtype="<f4").reshape(4, 6), chunks=(2, 3),
                                compression="gzip")
        y = f.create_dataset("y", data=np.arange(4, dtype="<f8"))
        x = f.create_dataset("x", data=np.arange(6, dtype="<i4") * 10)
        x2 = f.create_dataset("x_alt", data=np.linspace(0, 1, 6))
        y.make_scale("y")
        x.make_scale("x")
        x2.make_scale()
        data.dims[0].attach_scale(y)
        data.dims[1].attach_scale(x)
        data.dims[1].attach_scale(x2)
        data.dims[0].label = "rows"
        g = f.create_group("sub")
        g.create_dataset("other", data=np.arange(6, dtype="<u1")).dims[0].attach_scale(x)


def _h5py_refs(path: Path) -> None:
    """Object references in datasets and attributes."""
    import h5py

    with h5py.File(path, "w") as f:
        g = f.create_group("target_group")
        t = f.create_dataset("target", data=np.arange(5))
        f.create_dataset("refs", data=np.array([g.ref, t.ref, h5py.Reference()], dtype=h5py.ref_dtype))
        f.create_dataset("refs_chunked", data=np.array([t.ref, g.ref] * 3, dtype=h5py.ref_dtype), chunks=(4,),
                         compression="gzip")
        f.attrs["ref"] = t.ref
        t.attrs.create("refs", np.array([g.ref, f.ref], dtype=h5py.ref_dtype), dtype=h5py.ref_dtype)


def _h5py_regionrefs(path: Path) -> None:
    """Region references (a dataset of them and an attribute)."""
    import h5py

    with h5py.File(path, "w") as f:
        d = f.create_dataset("data", data=np.arange(20).reshape(4, 5))
        f.create_dataset("regions", data=np.array([d.regionref[0:2, 1:3], d.regionref[3, :]],
                                                  dtype=h5py.regionref_dtype), dtype=h5py.regionref_dtype)
        d.attrs["region"] = d.regionref[1:2, 0:1]


def _write_strings(f, name: str, tid, words: list[bytes]) -> None:
    """A dataset ``name`` of ``words`` and a scalar attribute ``name`` (the first word),
    both of the fixed string type ``tid``, converted from null-padded memory strings."""
    import h5py

    mtype = tid.copy()
    mtype.set_strpad(h5py.h5t.STR_NULLPAD)
    ds = h5py.h5d.create(f.id, name.encode(), tid, h5py.h5s.create_simple((len(words),)))
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(words, f"S{tid.get_size()}"), mtype=mtype)
    aid = h5py.h5a.create(f.id, name.encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
    aid.write(np.array(words[0], f"S{tid.get_size()}"), mtype=mtype)


def _h5py_types(path: Path) -> None:
    """complex, enums, bool, fixed strings (null-terminated, null-padded; ascii, utf-8), vlen strings."""
    import h5py

    with h5py.File(path, "w") as f:
        f.create_dataset("c8", data=(np.arange(6) + 0.5j).astype("<c8"), chunks=(4,), compression="gzip")
        f.create_dataset("c16_be", data=(np.arange(4) - 2j).astype(">c16"))
        f.attrs["complex"] = np.complex128(1 + 2j)
        e1 = h5py.enum_dtype({"LOW": 0, "MID": 5, "HIGH": 200}, basetype="u1")
        f.create_dataset("enum_u1", data=np.array([0, 5, 200, 5], "u1"), dtype=e1, chunks=(2,), compression="gzip")
        e4 = h5py.enum_dtype({"NEG": -7, "ZERO": 0, "BIG": 100000}, basetype="<i4")
        f.create_dataset("enum_i4", data=np.array([-7, 0, 100000], "<i4"), dtype=e4)
        f.attrs.create("enum", np.array([0, 200], "u1"), dtype=e1)
        f.create_dataset("bool", data=np.array([True, False, True]))
        for pad, padname in ((h5py.h5t.STR_NULLTERM, "nullterm"), (h5py.h5t.STR_NULLPAD, "nullpad")):
            for cset, csname, words in ((h5py.h5t.CSET_ASCII, "ascii", [b"ab", b"hello!!", b""]),
                                        (h5py.h5t.CSET_UTF8, "utf8", ["é".encode(), "ñu".encode(), b"x"])):
                tid = h5py.h5t.C_S1.copy()
                tid.set_size(8)
                tid.set_strpad(pad)
                tid.set_cset(cset)
                _write_strings(f, f"fixed_{padname}_{csname}", tid, words)
        f.create_dataset("vlen_utf8", data=np.array(["α", "", "long " * 9, "z"], dtype=object),
                         dtype=h5py.string_dtype("utf-8"), chunks=(2,), compression="gzip")
        f.create_dataset("vlen_ascii", data=np.array([b"x", b"yy", b""], dtype=object),
                         dtype=h5py.string_dtype("ascii"))
        f.create_dataset("vlen_scalar", data="one string", dtype=h5py.string_dtype())
        f.attrs["vlen"] = "attribute ✓"
        f.attrs["vlen_arr"] = np.array(["a", "bc"], dtype=h5py.string_dtype())


def _h5py_spacepad(path: Path) -> None:
    """Space-padded fixed strings (ascii and utf-8), as a dataset and an attribute."""
    import h5py

    with h5py.File(path, "w") as f:
        for cset, csname, words in ((h5py.h5t.CSET_ASCII, "ascii", [b"ab", b"hello!", b""]),
                                    (h5py.h5t.CSET_UTF8, "utf8", ["é".encode(), b"a b", b"z"])):
            tid = h5py.h5t.C_S1.copy()
            tid.set_size(6)
            tid.set_strpad(h5py.h5t.STR_SPACEPAD)
            tid.set_cset(cset)
            _write_strings(f, f"spacepad_{csname}", tid, words)


H5PY_FILES = {
    "h5py_order.h5": _h5py_order,
    "h5py_layouts.h5": _h5py_layouts,
    "h5py_external.h5": _h5py_external,
    "h5py_vds.h5": _h5py_vds,
    "h5py_filters.h5": _h5py_filters,
    "h5py_dimscales.h5": _h5py_dimscales,
    "h5py_refs.h5": _h5py_refs,
    "h5py_regionrefs.h5": _h5py_regionrefs,
    "h5py_types.h5": _h5py_types,
    "h5py_spacepad.h5": _h5py_spacepad,
}


def h5py_files(dest: Path) -> list[Path]:
    """One h5py file per feature family (see :data:`H5PY_FILES`)."""
    out = []
    for name, make in H5PY_FILES.items():
        make(dest / name)
        out.append(dest / name)
    return out


def make_fidelity_corpus(dest: Path) -> dict[str, Path]:
    """Every source of the corpus in ``dest`` (helper files such as external raw data and
    virtual dataset sources sit beside them); ``{file name: path}``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    paths = [*shipped_files(dest), *ncgen_files(dest), netcdf4_python_file(dest), h5netcdf_file(dest),
             *h5py_files(dest)]
    nwb = pynwb_file(dest)
    if nwb is not None:
        paths.append(nwb)
    return {p.name: p for p in paths}


def corpus_names() -> list[str]:
    """The file names :func:`make_fidelity_corpus` writes, without writing them (for test ids)."""
    names = list(shipped_sources())
    if shutil.which("ncgen"):
        names += ["ncgen_usertypes.nc", "ncgen_classic.nc"]
    names += ["netcdf4py.nc", "h5netcdf.nc", *H5PY_FILES]
    return [*names, "pynwb.nwb"] if importlib.util.find_spec("pynwb") else names


def is_netcdf4(path: Path) -> bool:
    """A netCDF-4 file (written by netCDF-C or a netCDF library): ``.nc`` files of the corpus."""
    return path.suffix == ".nc"
