"""Tier 3, issue 12's corpus: files written by other software come back out of a real mount
the same, through every view.

Every file of :mod:`fidelity_corpus` (HDF5 files that packages ship, netCDF-C ``ncgen``
and netCDF4-python output, a pynwb file, h5py files per feature family) is imported into
one store, mounted once, and checked per file, one test per check:

- ``h5diff -r original view`` exits 0 (cwd = the source folder, so external raw storage
  and virtual dataset sources resolve); ``h5ls -r`` prints the same; ``ncdump -h`` prints
  the same for netCDF files (but the line naming the file);
- h5py lists members and attributes in the same order at every group and dataset;
- ``pyfive.File(path)`` opens the view and reads every dataset it reads from the original,
  equal;
- zarr-python and tensorstore read every array of the Zarr view equal to the original, and
  every dataset is there unless its type is one the view cannot spell or its filter has no
  plugin here (:data:`ZARR_LEFT_OUT`); xarray reads the Zarr view of a netCDF file as the file;
- z5py and tensorstore read every dataset of the N5 view equal, and every dataset of an N5
  data type is there (but under a filter with no plugin here).

An object is looked for under every path to it (through every path of a group linked twice).
A dataset h5py cannot read (:func:`h5py_cannot_read`: H5T_TIME, IEEE quadruple precision,
a filter with no plugin) is never compared: a view showing one fails the test.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import fidelity_corpus as fc
from conftest import Mount, fuse_available
from polyfs.importers import import_source
from polyfs.views.root import domain_leaf_paths

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")
z5py = pytest.importorskip("z5py")
pyfive = pytest.importorskip("pyfive")
xr = pytest.importorskip("xarray")

pytestmark = [pytest.mark.mount,
              pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                         "ignore::DeprecationWarning", "ignore::FutureWarning")]
ENV = dict(os.environ, HDF5_PLUGIN_PATH=hdf5plugin.PLUGIN_PATH)
NAMES = fc.corpus_names()
NETCDF = [n for n in NAMES if n.endswith(".nc")]

# Why a dataset may be missing from the Zarr view: the types it has no Zarr v3 form for
# (polyfs.views.hdmf.zarr_type), netCDF's dimensions without a variable and chunks under a
# filter no codec here decodes (kept opaque for hdf5/ only). Nothing else.
ZARR_LEFT_OUT = {
    "null dataspace": lambda d: d.shape is None,
    "region references": lambda d: _class(d) == h5py.h5t.REFERENCE and _is_region(d),
    "variable-length sequences (not strings)": lambda d: _class(d) == h5py.h5t.VLEN,
    "compounds with variable-length or reference fields": lambda d: _class(d) == h5py.h5t.COMPOUND
    and _has_vlen_or_ref(d.id.get_type()),
    "arrays of variable-length strings": lambda d: _class(d) == h5py.h5t.ARRAY
    and _has_vlen_or_ref(d.id.get_type()),
    "compounds with array fields (Zarr's structured type has none)": lambda d: _class(d) == h5py.h5t.COMPOUND
    and any(_members(d.id.get_type(), h5py.h5t.ARRAY)),
    "long double": lambda d: _class(d) == h5py.h5t.FLOAT and d.id.get_type().get_size() > 8,
    "H5T_TIME": lambda d: _has_class(d.id.get_type(), h5py.h5t.TIME),
    "a filter libhdf5 has no plugin for here": lambda d: bool(no_plugin(d)),
    "netCDF dimension without a variable": lambda d: str(_attr(d, "NAME")).startswith(
        "This is a netCDF dimension but not a netCDF variable"),
}
# N5 has the data types (u)int8-64 and float32/64 only (polyfs.formats.n5.view.element_type)
N5_KINDS = {"i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"}
# tensorstore's zarr3 driver reads the Zarr v3 core data types only
TS_ZARR_TYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                 "float32", "float64", "complex64", "complex128"}


# -- the mount -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """{name: {"src", "hdf5", "zarr", "n5", "error"}}: every corpus file imported and mounted."""
    if not fuse_available():
        pytest.skip("needs /dev/fuse and root")
    base = tmp_path_factory.mktemp("fidelity")
    sources = fc.make_fidelity_corpus(base / "src")
    store = base / "store"
    out: dict[str, Any] = {}
    for name, src in sources.items():
        domain = "/" + (name if name.endswith((".h5", ".nc")) else Path(name).stem + ".h5")
        entry: dict[str, Any] = {"src": src, "error": None}
        try:
            with contextlib.chdir(src.parent):  # external raw storage names are relative to cwd
                domain = import_source(src, str(store), domain=domain, progress=False)
        except Exception as exc:  # noqa: BLE001 - reported by test_import
            entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["leaves"] = dict(p.split("/", 1) for p in domain_leaf_paths(domain))
        out[name] = entry
    (base / "mnt").mkdir()
    mount = Mount(str(store), base / "mnt", base / "polyfs.log", []).start()
    for entry in out.values():
        for view in ("hdf5", "zarr", "n5"):
            entry[view] = mount.path / view / entry["leaves"][view]
    try:
        yield out
    finally:
        mount.stop()


def _entry(corpus: dict[str, Any], name: str) -> dict[str, Any]:
    """The mounted entry of ``name``; fails the test if its import failed."""
    if name not in corpus:
        pytest.skip(f"{name} was not made on this machine")
    entry = corpus[name]
    if entry["error"]:
        pytest.fail(f"{name}: import failed: {entry['error']}")
    return entry


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """A command-line tool run in ``cwd`` with the plugin path set."""
    return subprocess.run(list(args), capture_output=True, text=True, env=ENV, cwd=cwd, timeout=120)


# -- reading originals -------------------------------------------------------------------------
@contextlib.contextmanager
def original(src: Path) -> Iterator[Any]:
    """The original open in h5py, with cwd at its folder (external storage resolves)."""
    with contextlib.chdir(src.parent), h5py.File(src, "r") as f:
        yield f


def objects(f) -> dict[str, list[str]]:
    """Every group and dataset reached by hard links: {first path (sorted breadth-first): every
    path to it}. Every path: a view shows an object once, at a path of its own choosing, so an
    object inside a group linked twice (PyTables' ``attr-u16.h5`` links ``vector0`` as
    ``axes/axis1/data_vector`` too) is looked for under each of its groups' paths."""
    first: dict[int, str] = {}
    edges: dict[int, list[tuple[str, int]]] = {}
    queue: list[tuple[str, int | None, str]] = [("/", None, "")]
    while queue:
        path, parent, name = queue.pop(0)
        obj = f[path]
        key = hash(obj.id)
        if parent is not None:
            edges[parent].append((name, key))
        if key in first:
            continue
        first[key] = path
        if isinstance(obj, h5py.Group):
            edges[key] = []
            for child in sorted(obj):
                if isinstance(obj.get(child, getlink=True), h5py.HardLink):
                    queue.append((path.rstrip("/") + "/" + child, key, child))
    every = _every_path(hash(f["/"].id), edges)
    return {path: [path] + sorted(set(every[key]) - {path}) for key, path in first.items()}


def _every_path(root: int, edges: dict[int, list[tuple[str, int]]], most: int = 64) -> dict[int, list[str]]:
    """{object: the paths to it through hard links}, no group twice on one path (HDF5 allows
    cycles), at most ``most`` per object."""
    out: dict[int, list[str]] = {}
    stack: list[tuple[str, int, frozenset[int]]] = [("/", root, frozenset())]
    while stack:
        path, key, above = stack.pop()
        paths = out.setdefault(key, [])
        if len(paths) >= most:
            continue
        paths.append(path)
        for name, child in edges.get(key, ()):
            if child != key and child not in above:
                stack.append((path.rstrip("/") + "/" + name, child, above | {key}))
    return out


def datasets(f) -> dict[str, list[str]]:
    """The datasets of :func:`objects`."""
    return {p: ps for p, ps in objects(f).items() if isinstance(f[p], h5py.Dataset)}


def _class(d) -> int:
    return d.id.get_type().get_class()


def _is_region(d) -> bool:
    return h5py.check_ref_dtype(d.dtype) is h5py.RegionReference


def _has_vlen_or_ref(t) -> bool:
    """An HDF5 type holding variable-length data or references anywhere."""
    cls = t.get_class()
    if cls in (h5py.h5t.VLEN, h5py.h5t.REFERENCE) or (cls == h5py.h5t.STRING and t.is_variable_str()):
        return True
    if cls == h5py.h5t.COMPOUND:
        return any(_has_vlen_or_ref(t.get_member_type(i)) for i in range(t.get_nmembers()))
    if cls == h5py.h5t.ARRAY:
        return _has_vlen_or_ref(t.get_super())
    return False


def _has_class(t, cls: int) -> bool:
    """An HDF5 type of class ``cls``, or holding one in a member, an array or a sequence."""
    if t.get_class() == cls:
        return True
    if t.get_class() == h5py.h5t.COMPOUND:
        return any(_has_class(t.get_member_type(i), cls) for i in range(t.get_nmembers()))
    if t.get_class() in (h5py.h5t.ARRAY, h5py.h5t.VLEN):
        return _has_class(t.get_super(), cls)
    return False


def _members(t, cls: int) -> list[int]:
    """The members of compound type ``t`` of class ``cls`` (by index)."""
    return [i for i in range(t.get_nmembers()) if t.get_member_type(i).get_class() == cls]


def _numpyless_float(t) -> int | None:
    """The precision of a float in ``t`` (anywhere) that h5py has no NumPy type for (IEEE
    quadruple precision: PyTables' ``float.h5``), else None."""
    cls = t.get_class()
    if cls == h5py.h5t.FLOAT:
        try:
            t.dtype
        except ValueError:  # "Insufficient precision in available types"
            return t.get_precision()
        return None
    if cls == h5py.h5t.COMPOUND:
        return next((p for i in range(t.get_nmembers()) if (p := _numpyless_float(t.get_member_type(i)))), None)
    if cls in (h5py.h5t.ARRAY, h5py.h5t.VLEN):
        return _numpyless_float(t.get_super())
    return None


def no_plugin(d) -> list[str]:
    """The filters of ``d``'s pipeline that libhdf5 has no plugin for here (PyTables' LZO):
    neither h5py nor polyfs can decode its chunks; polyfs keeps them opaque for ``hdf5/``."""
    plist = d.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        fid, _, _, fname = plist.get_filter(i)
        if not h5py.h5z.filter_avail(fid):
            out.append(f"{fname.decode(errors='replace')} ({fid})")
    return out


def h5py_cannot_read(d) -> str | None:
    """Why h5py cannot read dataset ``d`` of the original (so a view's reading of it cannot be
    compared with h5py's), or None. Only these reasons; anything else h5py fails on fails the test."""
    t = d.id.get_type()
    if _has_class(t, h5py.h5t.TIME):
        return "its type holds H5T_TIME, which h5py has no NumPy type for"
    if (precision := _numpyless_float(t)) is not None:
        return f"its type holds a float of {precision}-bit precision, which h5py has no NumPy type for"
    if filters := no_plugin(d):
        return f"no plugin here for its filter {', '.join(filters)}"
    return None


def _type_text(d) -> str:
    """``d``'s NumPy type as text, or its HDF5 type's class where h5py has no NumPy type for it."""
    t = d.id.get_type()
    return type(t).__name__ if _has_class(t, h5py.h5t.TIME) or _numpyless_float(t) is not None else str(d.dtype)


def _attr(obj, name: str) -> Any:
    """An attribute's value (text as str), None if absent or unreadable."""
    try:
        v = obj.attrs.get(name)
    except Exception:  # noqa: BLE001 - an attribute h5py cannot read is not a marker
        return None
    return v.decode() if isinstance(v, bytes) else v


def zarr_left_out(d) -> str | None:
    """Why the Zarr view may leave dataset ``d`` out, or None."""
    return next((why for why, test in ZARR_LEFT_OUT.items() if test(d)), None)


def read_h5py(d) -> Any:
    """A dataset's value as h5py reads it (utf-8 variable-length strings as str)."""
    if d.shape is None:
        return None
    if h5py.check_string_dtype(d.dtype) and h5py.check_string_dtype(d.dtype).length is None:
        return d.asstr()[()] if h5py.check_string_dtype(d.dtype).encoding == "utf-8" else d[()]
    return d[()]


def norm(x: Any, ref: Callable[[Any], Any] = lambda r: "<ref>") -> Any:
    """A value as plain nested lists/tuples (NaN as "nan", text as bytes, references by ``ref``)."""
    if isinstance(x, np.ndarray):
        if x.dtype.names is None and x.dtype.kind in "biu":
            return [x.shape, x.reshape(-1).tolist()]
        return [x.shape, [norm(e, ref) for e in x.reshape(-1)]]
    if isinstance(x, np.void):
        if x.dtype.names:
            return tuple(norm(x[n], ref) for n in x.dtype.names)
        return bytes(x)
    if isinstance(x, np.generic):
        return norm(x.item(), ref)
    if isinstance(x, (h5py.Reference, h5py.RegionReference)) or type(x).__name__.endswith("Reference"):
        return ref(x)
    if isinstance(x, str):
        return x.encode()
    if isinstance(x, float) and x != x:
        return "nan"
    if isinstance(x, complex):
        return (norm(x.real), norm(x.imag))
    if isinstance(x, (list, tuple)):
        return [norm(e, ref) for e in x]
    return x


def top(x: Any, ref: Callable[[Any], Any] = lambda r: "<ref>") -> Any:
    """:func:`norm` of a whole read (scalars as 0-d arrays)."""
    if not isinstance(x, np.ndarray):
        arr = np.empty((), dtype=object)
        arr[()] = x
        x = arr
    return norm(x, ref)


# -- the checks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_import(corpus, name):
    """``import_source`` took the file."""
    _entry(corpus, name)


def _h5diff_summary(res: subprocess.CompletedProcess) -> str:
    """The lines of an ``h5diff -r`` run that say something (objects followed by anything but
    "0 differences found", counts other than 0, warnings), and its stderr."""
    lines = res.stdout.splitlines()
    keep = [line for i, line in enumerate(lines) if line.strip() and line != "0 differences found"
            and not (line.startswith(("dataset: ", "attribute: ", "group  : ", "datatype: "))
                     and i + 1 < len(lines) and lines[i + 1] == "0 differences found")]
    return "\n".join(keep[:60]) + "\n" + res.stderr[-2000:]


@pytest.mark.parametrize("name", NAMES)
def test_h5diff(corpus, name):
    """``h5diff -r`` exits 0; where it cannot read the original (a filter HDF5 has no plugin
    for here, such as h5py's lzf), it says for the view exactly what it says for a copy."""
    e = _entry(corpus, name)
    src = e["src"]
    res = run(src.parent, "h5diff", "-r", str(src), str(e["hdf5"]))
    if res.returncode == 0:
        return
    copy = src.with_name(".copy-" + src.name)  # beside it: virtual dataset sources resolve the same
    shutil.copyfile(src, copy)
    try:
        same = run(src.parent, "h5diff", "-r", str(src), str(copy))
    finally:
        copy.unlink()
    if same.returncode == 0:
        pytest.fail(f"{name}: h5diff exit {res.returncode}\n{_h5diff_summary(res)}")
    assert (res.returncode, res.stdout.replace(str(e["hdf5"]), "B"), res.stderr.replace(str(e["hdf5"]), "B")) == \
        (same.returncode, same.stdout.replace(str(copy), "B"), same.stderr.replace(str(copy), "B"))


@pytest.mark.parametrize("name", NAMES)
def test_h5ls(corpus, name):
    """``h5ls -r`` prints the same tree, types and shapes (the file's own name aside)."""
    e = _entry(corpus, name)
    want = run(e["src"].parent, "h5ls", "-r", str(e["src"]))
    got = run(e["src"].parent, "h5ls", "-r", str(e["hdf5"]))
    assert got.returncode == want.returncode, got.stderr
    assert got.stdout.replace(str(e["hdf5"]), "FILE").splitlines() == \
        want.stdout.replace(str(e["src"]), "FILE").splitlines()


@pytest.mark.parametrize("name", NETCDF)
def test_ncdump_header(corpus, name):
    """``ncdump -h`` prints the same header but its first line (which names the file)."""
    e = _entry(corpus, name)
    want = run(e["src"].parent, "ncdump", "-h", str(e["src"]))
    got = run(e["src"].parent, "ncdump", "-h", str(e["hdf5"]))
    assert want.returncode == 0, want.stderr
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[1:] == want.stdout.splitlines()[1:]


def _order(f) -> dict[str, tuple[list[str], list[str]]]:
    """{object path: (its members as h5py lists them, its attributes as h5py lists them)}."""
    out = {}
    for path in objects(f):
        obj = f[path]
        out[path] = (list(obj) if isinstance(obj, h5py.Group) else [], list(obj.attrs))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_h5py_member_and_attribute_order(corpus, name):
    """h5py lists members and attributes in the same order at every group and dataset."""
    e = _entry(corpus, name)
    with original(e["src"]) as f, h5py.File(e["hdf5"], "r") as v:
        want, got = _order(f), _order(v)
    assert list(got) == list(want)
    for path in want:
        assert got[path] == want[path], path


@pytest.mark.parametrize("name", NAMES)
def test_pyfive_reads_the_view(corpus, name):
    """pyfive opens the view by path and reads every dataset it reads from the original, equal
    (to pyfive's reading of the original, or to h5py's where pyfive misreads the original)."""
    e = _entry(corpus, name)
    try:
        orig = pyfive.File(str(e["src"]))
    except Exception as exc:  # noqa: BLE001 - pyfive cannot open the original: nothing to match
        pytest.skip(f"pyfive cannot open the original: {type(exc).__name__}: {exc}")
    view = pyfive.File(str(e["hdf5"]))
    failures = []
    with original(e["src"]) as f:
        for path in datasets(f):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    want = top(orig[path][()])
                except Exception:  # noqa: BLE001 - what pyfive cannot read from the original
                    continue
                try:
                    got = top(view[path][()])
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"{path}: {type(exc).__name__}: {exc}")
                    continue
            if got != want and got != top(read_h5py(f[path])):
                failures.append(f"{path}: {got!r:.200} != {want!r:.200}")
    assert not failures, "\n".join(failures)


def _zarr_value(meta: dict, arr: np.ndarray, d) -> Any:
    """:func:`top` of a Zarr read (object references as their targets' paths)."""
    if h5py.check_ref_dtype(d.dtype) is h5py.Reference:  # hdmf-zarr's reference JSON, as text
        paths = [json.loads(s)["path"] if s and s != "null" else None for s in np.asarray(arr).reshape(-1)]
        return [np.asarray(arr).shape, paths]
    return top(arr)


def _netcdf_records(arr: np.ndarray, d, src: Path, failures: list[str]) -> np.ndarray:
    """``arr`` cut to ``d``'s own shape where it is a netCDF variable shown as long as its
    unlimited dimension (its records past its own extent must be its fill value)."""
    arr = np.asarray(arr)
    if not fc.is_netcdf4(src) or d.shape is None or arr.shape == d.shape or arr.ndim != len(d.shape) \
            or any(a < b for a, b in zip(arr.shape, d.shape)) or d.maxshape is None:
        return arr
    inside = tuple(slice(0, n) for n in d.shape)
    extra = np.ones(arr.shape, bool)
    extra[inside] = False
    if any(a != b and m is not None for a, b, m in zip(arr.shape, d.shape, d.maxshape)) or \
            not np.array_equal(arr[extra], np.full(int(extra.sum()), d.fillvalue, arr.dtype), equal_nan=True):
        failures.append(f"{d.name}: shown as {arr.shape}, not netCDF's shape of a {d.shape} variable")
    return arr[inside]


@pytest.mark.parametrize("name", NAMES)
def test_zarr_view_reads_equal(corpus, name):
    """zarr-python and tensorstore read every array equal to h5py's reading of the original;
    a dataset may be missing for one of the reasons of :data:`ZARR_LEFT_OUT` only."""
    e = _entry(corpus, name)
    failures = []
    with original(e["src"]) as f:
        for path, paths in datasets(f).items():
            d = f[path]
            where = next((e["zarr"] / p.lstrip("/") for p in paths if (e["zarr"] / p.lstrip("/") / "zarr.json").exists()),
                         None)
            if where is None:
                if zarr_left_out(d) is None:
                    failures.append(f"{path}: missing from the Zarr view ({_type_text(d)}, {d.shape})")
                continue
            if why := h5py_cannot_read(d):
                failures.append(f"{path}: in the Zarr view, but not compared: {why}")
                continue
            meta = json.loads((where / "zarr.json").read_bytes())
            if h5py.check_ref_dtype(d.dtype) is h5py.Reference:
                want = [d.shape, [f[r].name if r else None for r in np.asarray(d[()]).reshape(-1)]]
            else:
                want = top(read_h5py(d))
            try:
                arr = _netcdf_records(zarr.open_array(str(where), mode="r")[...], d, e["src"], failures)
                got = _zarr_value(meta, arr, d)
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{path}: zarr-python: {type(exc).__name__}: {exc}")
                continue
            if got != want:
                failures.append(f"{path}: zarr-python read {got!r:.300} != {want!r:.300}")
            if isinstance(meta["data_type"], str) and meta["data_type"] in TS_ZARR_TYPES:
                try:
                    arr = ts.open({"driver": "zarr3", "kvstore": f"file://{where}"}, read=True).result().read().result()
                    arr = _netcdf_records(arr, d, e["src"], failures)
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"{path}: tensorstore: {type(exc).__name__}: {exc}")
                    continue
                if top(arr) != want:
                    failures.append(f"{path}: tensorstore read {top(arr)!r:.300} != {want!r:.300}")
    assert not failures, "\n".join(failures)


def _groups(f) -> list[str]:
    """The group paths of :func:`objects`."""
    return [p for p in objects(f) if isinstance(f[p], h5py.Group)]


@pytest.mark.parametrize("name", NETCDF)
def test_xarray_reads_the_zarr_view_as_the_file(corpus, name):
    """``xarray.open_zarr`` of each group of the view equals ``xarray.open_dataset`` of the
    file's group, but for variables :data:`ZARR_LEFT_OUT` allows to be missing."""
    e = _entry(corpus, name)
    with original(e["src"]) as f:
        groups = _groups(f)
        dropped = {p for p in datasets(f) if zarr_left_out(f[p])}
    for group in groups:
        want = xr.open_dataset(e["src"], group=group).load()
        gone = [v for v in want.variables if f"{group.rstrip('/')}/{v}" in dropped]
        want = want.drop_vars(gone)
        got = xr.open_zarr(e["zarr"], group=None if group == "/" else group.strip("/"), consolidated=False).load()
        xr.testing.assert_identical(got, want)


def _n5_type(d) -> bool:
    """A dataset of an N5 data type (H5T_TIME and floats over 64 bits, which h5py has no NumPy
    type for, are none)."""
    t = d.id.get_type()
    if d.shape is None or _has_class(t, h5py.h5t.TIME) or _numpyless_float(t) is not None:
        return False
    base = d.dtype.subdtype[0] if d.dtype.subdtype else d.dtype
    return base.names is None and f"{base.kind}{base.itemsize}" in N5_KINDS \
        and _class(d) in (h5py.h5t.INTEGER, h5py.h5t.FLOAT, h5py.h5t.ENUM, h5py.h5t.ARRAY)


@pytest.mark.parametrize("name", NAMES)
def test_n5_view_reads_equal(corpus, name):
    """z5py and tensorstore read every N5 dataset equal; every dataset of an N5 data type is there."""
    e = _entry(corpus, name)
    failures = []
    n5 = z5py.File(str(e["n5"]), "r")
    with original(e["src"]) as f:
        for path, paths in datasets(f).items():
            d = f[path]
            why = h5py_cannot_read(d)
            where = next((p for p in paths if (e["n5"] / p.lstrip("/") / "attributes.json").exists()), None)
            if where is None:
                if _n5_type(d) and not no_plugin(d):
                    failures.append(f"{path}: missing from the N5 view ({_type_text(d)}, {d.shape})")
                continue
            if why:
                failures.append(f"{path}: in the N5 view, but not compared: {why}")
                continue
            want = np.asarray(d[()])
            shape = want.shape or (1,)
            try:
                got = n5[where.lstrip("/")][...]
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{path}: z5py: {type(exc).__name__}: {exc}")
                got = None
            if got is not None and top(got.reshape(shape)) != top(want.reshape(shape)):
                failures.append(f"{path}: z5py read {top(got)!r:.300} != {top(want)!r:.300}")
            try:
                arr = ts.open({"driver": "n5", "kvstore": f"file://{e['n5'] / where.lstrip('/')}"},
                              read=True).result().read().result()
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{path}: tensorstore: {type(exc).__name__}: {exc}")
                continue
            arr = np.asarray(arr).T  # tensorstore lists N5's dimensions as they are: fastest first
            if top(arr.reshape(shape)) != top(want.reshape(shape)):
                failures.append(f"{path}: tensorstore read {top(arr)!r:.300} != {top(want)!r:.300}")
    assert not failures, "\n".join(failures)
