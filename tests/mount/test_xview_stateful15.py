"""A reference-model stateful test through a REAL mount, across views (round 15).

A hypothesis ``RuleBasedStateMachine`` drives one live ``polyfs mount`` with the real tools
each ecosystem's users run, in random order, and after every step reads every array back
through every view with a fresh handle and compares it with a numpy model:

- writes: zarr-python (a region of an array, whole chunks or part of one), tensorstore's
  ``n5`` driver, h5py ``r+`` (slice assignment, ``resize`` of a resizable dataset, a new
  dataset, attributes set and deleted, ``move``), tifffile (a whole ``tiff/`` file
  rewritten with new values of the same shape);
- ``rm -r`` of an array's directory in ``zarr/`` or ``n5/``, a dataset deleted through
  h5py, an array made through zarr-python;
- invariants: every array equals the model through ``zarr/`` (zarr-python), ``n5/``
  (tensorstore), ``hdf5/`` (h5py, a fresh open) and ``tiff/`` (tifffile) where the view
  shows it; user attributes agree in ``hdf5/`` and ``zarr/``; ``polyfs check --deep`` is
  clean at the end.

Each example uses a new domain on one mount (a mount per example would dominate the run).
``POLYFS_XVIEW_EXAMPLES=N`` and ``POLYFS_XVIEW_SEED=S`` run more examples with a random seed
(a bug hunt); by default the run is derandomized, so CI is deterministic.
"""
from __future__ import annotations

import copy
import itertools
import os
import shutil
import subprocess
import warnings

import numpy as np
import pytest

from support import deep_check

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")
tifffile = pytest.importorskip("tifffile")
z5py = pytest.importorskip("z5py")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, Phase, Verbosity, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning",
                                        "ignore::FutureWarning", "ignore::DeprecationWarning")

EXAMPLES = int(os.environ.get("POLYFS_XVIEW_EXAMPLES", "0"))
SEED = os.environ.get("POLYFS_XVIEW_SEED")
CHUNK = (8, 8)
DTYPES = ("u2", "f4", "u1", "i2", "f8")
H5_DTYPES = DTYPES + (">u2", ">f4", "bool", "i1")  # big-endian: only HDF5 makes such datasets
NAMES = ("a", "b", "c", "d")
_counter = itertools.count()


BACK = 32  # every extent stays below this (24), chunks included


class Arr:
    """The model of one dataset: its values, fill value and user attributes. ``back`` holds
    what lies beyond the extent inside edge chunks: a Zarr/N5 shrink deletes only chunks
    wholly outside and HDF5's clears the rest, but an N5 edge block rewritten later is cut
    at the extent; so after a Zarr/N5 shrink those cells may hold the old value or the fill
    when the extent grows again (``unsure``), and nothing else."""

    def __init__(self, data: np.ndarray, resizable: bool, fill=0) -> None:
        self.fill = np.asarray(fill, data.dtype)
        self.back = np.full((BACK, BACK), self.fill, data.dtype)
        self.shape = data.shape
        self.back[tuple(slice(0, n) for n in self.shape)] = data
        self.unsure = np.zeros((BACK, BACK), bool)
        self.attrs: dict[str, int] = {}
        self.resizable = resizable
        self.chunks = CHUNK

    @property
    def data(self) -> np.ndarray:
        return self.back[tuple(slice(0, n) for n in self.shape)]

    def write(self, region, vals) -> None:
        self.data[region] = vals
        self.unsure[tuple(slice(0, n) for n in self.shape)][region] = False

    def resize(self, new: tuple[int, ...], clear_edges: bool) -> None:
        """Chunks wholly outside ``new`` go; with ``clear_edges`` (HDF5) so does the rest."""
        keep = tuple(slice(0, -(-n // c) * c) for n, c in zip(new, self.chunks))
        inside = tuple(slice(0, n) for n in new)
        kept, kept_unsure = self.back[keep].copy(), self.unsure[keep].copy()
        inside_new = np.zeros((BACK, BACK), bool)
        inside_new[inside] = True
        self.back[...] = self.fill
        self.unsure[...] = False
        if clear_edges:
            self.back[inside] = kept[inside]
            self.unsure[inside] = kept_unsure[inside]
        else:  # cells cut off inside kept chunks: their old value, or the fill
            self.back[keep] = kept
            self.unsure[keep] = kept_unsure | ~inside_new[keep]
        self.shape = new

    def check(self, got: np.ndarray, where: str) -> None:
        """``got`` equals the model, but for cells that may hold an old value or the fill."""
        assert got.shape == self.shape, f"{where} shape {got.shape} != {self.shape}"
        want, unsure = self.data, self.unsure[tuple(slice(0, n) for n in self.shape)]
        bad = (got != want) & ~(unsure & (got == self.fill))
        if self.back.dtype.kind == "f":
            bad &= ~(np.isnan(got) & np.isnan(want))
        assert not bad.any(), f"{where}: {bad.sum()} cells differ at {np.argwhere(bad)[:5].tolist()}: " \
            f"got {got[bad][:5].tolist()} want {want[bad][:5].tolist()}"


class XView(RuleBasedStateMachine):
    """One domain on a live mount, written through every view, checked through every view."""

    mnt = None  # the mount's root directory (set by the test function)

    def __init__(self) -> None:
        super().__init__()
        self.dom = f"x{os.getpid()}_{next(_counter)}"
        self.arrays: dict[str, Arr] = {}
        self.failed = False

    # -- paths -------------------------------------------------------------------------------
    @property
    def h5(self):
        return self.mnt / "hdf5" / f"{self.dom}.h5"

    def zpath(self, name: str):
        return self.mnt / "zarr" / f"{self.dom}.zarr" / name

    def npath(self, name: str):
        return self.mnt / "n5" / f"{self.dom}.n5" / name

    def tpath(self, name: str):
        return self.mnt / "tiff" / self.dom / f"{name}.tif"

    # -- drawing -----------------------------------------------------------------------------
    def region(self, data, name: str) -> tuple[slice, ...]:
        shape = self.arrays[name].data.shape
        out = []
        for n in shape:
            a = data.draw(st.integers(0, n - 1))
            b = data.draw(st.integers(a + 1, n))
            out.append(slice(a, b))
        return tuple(out)

    def values(self, data, name: str, region) -> np.ndarray:
        arr = self.arrays[name].data
        shape = arr[region].shape
        seed = data.draw(st.integers(0, 2 ** 16))
        vals = np.random.RandomState(seed).randint(0, 200, size=shape)
        return vals.astype(arr.dtype)

    # -- rules -------------------------------------------------------------------------------
    @initialize(data=st.data())
    def new_domain(self, data):
        """h5py ``"w"`` of a new ``hdf5/`` file: a new domain with one resizable dataset."""
        shape = (data.draw(st.integers(4, 20)), data.draw(st.integers(4, 20)))
        dtype = data.draw(st.sampled_from(H5_DTYPES))
        vals = np.random.RandomState(shape[0]).randint(0, 200, size=shape).astype(dtype)
        note(f"h5py w {self.dom}.h5: a {shape} {dtype} resizable")
        with h5py.File(self.h5, "w") as f:
            f.create_dataset("a", data=vals, chunks=CHUNK, maxshape=(None, None))
        self.arrays["a"] = Arr(vals, True)

    @precondition(lambda self: self.arrays)
    @rule(data=st.data())
    def write_via_zarr(self, data):
        name = data.draw(st.sampled_from(sorted(self.arrays)))
        reg = self.region(data, name)
        vals = self.values(data, name, reg)
        note(f"zarr {name}[{reg}] = ...")
        z = zarr.open_array(str(self.zpath(name)), mode="r+")
        z[reg] = vals
        self.arrays[name].write(reg, vals)

    @precondition(lambda self: self.arrays)
    @rule(data=st.data())
    def write_via_n5(self, data):
        name = data.draw(st.sampled_from(sorted(self.arrays)))
        reg = self.region(data, name)
        vals = self.values(data, name, reg)
        tool = data.draw(st.sampled_from(["tensorstore", "z5py"]))
        note(f"{tool} n5 {name}[{reg}] = ...")
        if tool == "z5py":
            z5py.File(str(self.mnt / "n5" / f"{self.dom}.n5"), "a")[name][reg] = vals
        else:  # tensorstore's n5 driver keeps N5's (reversed) dimension order
            t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(self.npath(name))}},
                        open=True).result()
            t.T[reg].write(vals).result()
        self.arrays[name].write(reg, vals)

    @precondition(lambda self: self.arrays)
    @rule(data=st.data())
    def write_via_hdf5(self, data):
        name = data.draw(st.sampled_from(sorted(self.arrays)))
        reg = self.region(data, name)
        vals = self.values(data, name, reg)
        note(f"h5py r+ {name}[{reg}] = ...")
        with h5py.File(self.h5, "r+") as f:
            f[name][reg] = vals
        self.arrays[name].write(reg, vals)

    @precondition(lambda self: any(a.resizable for a in self.arrays.values()))
    @rule(data=st.data())
    def resize_via_hdf5(self, data):
        name = data.draw(st.sampled_from(sorted(n for n, a in self.arrays.items() if a.resizable)))
        new = (data.draw(st.integers(1, 24)), data.draw(st.integers(1, 24)))
        note(f"h5py r+ {name}.resize({new})")
        with h5py.File(self.h5, "r+") as f:
            f[name].resize(new)
        self.arrays[name].resize(new, clear_edges=True)

    @precondition(lambda self: any(a.resizable for a in self.arrays.values()))
    @rule(data=st.data())
    def resize_via_zarr_or_n5(self, data):
        """zarr-python ``resize`` (``zarr/``) or tensorstore ``resize`` (``n5/``)."""
        name = data.draw(st.sampled_from(sorted(n for n, a in self.arrays.items() if a.resizable)))
        new = (data.draw(st.integers(1, 24)), data.draw(st.integers(1, 24)))
        tool = data.draw(st.sampled_from(["zarr", "tensorstore-n5"]))
        note(f"{tool} {name}.resize({new})")
        if tool == "zarr":
            zarr.open_array(str(self.zpath(name)), mode="r+").resize(new)
        else:
            t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(self.npath(name))}},
                        open=True).result()
            t.resize(exclusive_max=list(new[::-1])).result()
        self.arrays[name].resize(new, clear_edges=False)

    @precondition(lambda self: any(not a.resizable for a in self.arrays.values()))
    @rule(data=st.data())
    def resize_fixed_is_refused(self, data):
        """Growing a dataset past its HDF5 maximum shape through ``zarr/``: EINVAL, no change."""
        name = data.draw(st.sampled_from(sorted(n for n, a in self.arrays.items() if not a.resizable)))
        shape = self.arrays[name].shape
        new = (shape[0] + data.draw(st.integers(1, 4)), shape[1])
        note(f"zarr {name}.resize({new}) of a fixed dataset")
        with pytest.raises(OSError) as exc:
            zarr.open_array(str(self.zpath(name)), mode="r+").resize(new)
        assert exc.value.errno == 22, exc.value

    @precondition(lambda self: len(self.arrays) < len(NAMES))
    @rule(data=st.data())
    def create_via_hdf5(self, data):
        name = data.draw(st.sampled_from([n for n in NAMES if n not in self.arrays]))
        shape = (data.draw(st.integers(1, 20)), data.draw(st.integers(1, 20)))
        dtype = data.draw(st.sampled_from(H5_DTYPES))
        vals = np.random.RandomState(shape[1]).randint(0, 200, size=shape).astype(dtype)
        resizable = data.draw(st.booleans())
        fill = data.draw(st.sampled_from([0, 7]))
        comp = data.draw(st.sampled_from([None, "gzip", "shuffle"]))
        note(f"h5py r+ create {name} {shape} {dtype} resizable={resizable} fill={fill} {comp}")
        kw = {"compression": "gzip", "shuffle": True} if comp == "shuffle" else {"compression": comp}
        chunks = CHUNK if resizable else tuple(min(c, n) for c, n in zip(CHUNK, shape))
        with h5py.File(self.h5, "r+") as f:
            f.create_dataset(name, data=vals, chunks=chunks, maxshape=(None, None) if resizable else None,
                             fillvalue=fill, **kw)
        self.arrays[name] = Arr(vals, resizable, fill)
        self.arrays[name].chunks = chunks

    @precondition(lambda self: len(self.arrays) < len(NAMES))
    @rule(data=st.data())
    def create_via_zarr(self, data):
        name = data.draw(st.sampled_from([n for n in NAMES if n not in self.arrays]))
        shape = (data.draw(st.integers(1, 20)), data.draw(st.integers(1, 20)))
        dtype = data.draw(st.sampled_from(DTYPES))
        vals = np.random.RandomState(shape[0] + 7).randint(0, 200, size=shape).astype(dtype)
        note(f"zarr create {name} {shape} {dtype}")
        root = zarr.open_group(str(self.mnt / "zarr" / f"{self.dom}.zarr"), mode="r+")
        fill = data.draw(st.sampled_from([0, 3]))
        shards = data.draw(st.sampled_from([None, (16, 16), (8, 16)]))
        note(f"  fill={fill} shards={shards}")
        z = root.create_array(name, shape=shape, dtype=dtype, chunks=CHUNK, shards=shards, fill_value=fill)
        z[...] = vals
        self.arrays[name] = Arr(vals, True, fill)  # arrays made in zarr/ have no maximum shape

    @precondition(lambda self: len(self.arrays) < len(NAMES))
    @rule(data=st.data())
    def create_via_n5(self, data):
        """z5py ``create_dataset`` in ``n5/`` then a whole write."""
        name = data.draw(st.sampled_from([n for n in NAMES if n not in self.arrays]))
        shape = (data.draw(st.integers(1, 20)), data.draw(st.integers(1, 20)))
        dtype = data.draw(st.sampled_from(DTYPES))
        vals = np.random.RandomState(shape[0] + 11).randint(0, 200, size=shape).astype(dtype)
        comp = data.draw(st.sampled_from(["raw", "gzip"]))
        note(f"z5py create {name} {shape} {dtype} {comp}")
        f5 = z5py.File(str(self.mnt / "n5" / f"{self.dom}.n5"), "a")
        d = f5.create_dataset(name, shape=shape, chunks=CHUNK, dtype=dtype, compression=comp)
        d[...] = vals
        self.arrays[name] = Arr(vals, True)

    @precondition(lambda self: len(self.arrays) < len(NAMES))
    @rule(data=st.data())
    def create_via_tiff(self, data):
        """tifffile writes a new ``tiff/<domain>/<name>.tif``: a new dataset."""
        name = data.draw(st.sampled_from([n for n in NAMES if n not in self.arrays]))
        shape = (data.draw(st.integers(1, 20)), data.draw(st.integers(1, 20)))
        dtype = data.draw(st.sampled_from(DTYPES))
        vals = np.random.RandomState(shape[0] + 13).randint(0, 200, size=shape).astype(dtype)
        tiled = data.draw(st.booleans()) and min(shape) >= 16
        note(f"tifffile new {name}.tif {shape} {dtype} tiled={tiled}")
        with open(self.tpath(name), "wb") as fh:
            tifffile.imwrite(fh, vals, tile=(16, 16) if tiled else None)
        arr = Arr(vals, True)
        with h5py.File(self.h5, "r") as f:
            arr.chunks = f[name].chunks  # the chunk shape polyfs chose for the strips or tiles
        self.arrays[name] = arr

    @precondition(lambda self: self.arrays)
    @rule(data=st.data())
    def attrs_via_hdf5(self, data):
        name = data.draw(st.sampled_from(sorted(self.arrays)))
        key = data.draw(st.sampled_from(["k1", "k2", "k3"]))
        model = self.arrays[name].attrs
        if key in model and data.draw(st.booleans()):
            note(f"h5py del {name}.attrs[{key}]")
            with h5py.File(self.h5, "r+") as f:
                del f[name].attrs[key]
            del model[key]
        else:
            val = data.draw(st.integers(-1000, 1000))
            note(f"h5py {name}.attrs[{key}] = {val}")
            with h5py.File(self.h5, "r+") as f:
                f[name].attrs[key] = val
            model[key] = val

    @precondition(lambda self: self.arrays)
    @rule(data=st.data())
    def attrs_via_zarr_or_n5(self, data):
        name = data.draw(st.sampled_from(sorted(self.arrays)))
        key = data.draw(st.sampled_from(["k1", "k2", "k3"]))
        tool = data.draw(st.sampled_from(["zarr", "z5py"]))
        model = self.arrays[name].attrs
        if tool == "zarr":
            attrs = zarr.open_array(str(self.zpath(name)), mode="r+").attrs
        else:
            attrs = z5py.File(str(self.mnt / "n5" / f"{self.dom}.n5"), "a")[name].attrs
        if key in model and data.draw(st.booleans()):
            note(f"{tool} del {name}.attrs[{key}]")
            del attrs[key]
            del model[key]
        else:
            val = data.draw(st.integers(-1000, 1000))
            note(f"{tool} {name}.attrs[{key}] = {val}")
            attrs[key] = val
            model[key] = val

    @precondition(lambda self: self.arrays and len(self.arrays) < len(NAMES))
    @rule(data=st.data())
    def copy_or_move_in_a_view(self, data):
        """``cp -r`` or ``mv`` (a rename there is EXDEV: copy then delete) of an array's
        directory in ``zarr/`` or ``n5/``, or of its file in ``tiff/``."""
        src = data.draw(st.sampled_from(sorted(self.arrays)))
        dst = data.draw(st.sampled_from([n for n in NAMES if n not in self.arrays]))
        view = data.draw(st.sampled_from(["zarr", "n5", "tiff"] if self._tiff_ok(src) else ["zarr", "n5"]))
        move = data.draw(st.booleans())
        note(f"{'mv' if move else 'cp -r'} {view} {src} -> {dst}")
        path = {"zarr": self.zpath, "n5": self.npath, "tiff": self.tpath}[view]
        cmd = ["mv"] if move else (["cp", "-r"] if view != "tiff" else ["cp"])
        res = subprocess.run([*cmd, str(path(src)), str(path(dst))], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        a = self.arrays[src]
        b = copy.deepcopy(a)
        b.resizable = True  # a new array made in zarr/ or n5/ has no maximum shape
        if view == "tiff":  # a new dataset from a TIFF file: no attributes, chunks polyfs picks
            b = Arr(a.data.copy(), True)
            with h5py.File(self.h5, "r") as f:
                b.chunks = f[dst].chunks
        self.arrays[dst] = b
        if move:
            del self.arrays[src]

    @precondition(lambda self: self.arrays)
    @rule(data=st.data())
    def write_via_tensorstore_zarr3(self, data):
        name = data.draw(st.sampled_from(sorted(self.arrays)))
        reg = self.region(data, name)
        vals = self.values(data, name, reg)
        note(f"tensorstore zarr3 {name}[{reg}] = ...")
        t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(self.zpath(name))}},
                    open=True).result()
        t[reg].write(vals).result()
        self.arrays[name].write(reg, vals)

    @precondition(lambda self: any(self._tiff_ok(n) for n in self.arrays))
    @rule(data=st.data())
    def write_via_tiff(self, data):
        """tifffile rewrites a whole ``tiff/`` file: new values, same shape and dtype."""
        name = data.draw(st.sampled_from(sorted(n for n in self.arrays if self._tiff_ok(n))))
        a = self.arrays[name]
        shape = a.shape
        if a.resizable and data.draw(st.booleans()):
            shape = (data.draw(st.integers(1, 24)), data.draw(st.integers(1, 24)))
        vals = np.random.RandomState(data.draw(st.integers(0, 999))).randint(0, 200, size=shape).astype(a.back.dtype)
        tiled = data.draw(st.booleans()) and min(shape) >= 16
        note(f"tifffile rewrite {name}.tif {shape} tiled={tiled}")
        with open(self.tpath(name), "wb") as fh:
            tifffile.imwrite(fh, vals, tile=(16, 16) if tiled else None)
        a.back[...] = a.fill  # a rewrite replaces the data (what lies beyond it: fill)
        a.unsure[...] = False
        a.shape = shape
        a.data[...] = vals

    @precondition(lambda self: self.arrays)
    @rule(data=st.data())
    def delete_array(self, data):
        name = data.draw(st.sampled_from(sorted(self.arrays)))
        how = data.draw(st.sampled_from(["zarr", "n5", "hdf5", "tiff"]))
        if how == "tiff" and not self._tiff_ok(name):
            how = "hdf5"
        note(f"delete {name} via {how}")
        if how == "hdf5":
            with h5py.File(self.h5, "r+") as f:
                del f[name]
        elif how == "tiff":
            os.unlink(self.tpath(name))
        else:
            shutil.rmtree(self.zpath(name) if how == "zarr" else self.npath(name))
        del self.arrays[name]

    @precondition(lambda self: self.arrays and len(self.arrays) < len(NAMES))
    @rule(data=st.data())
    def rename_via_hdf5(self, data):
        src = data.draw(st.sampled_from(sorted(self.arrays)))
        dst = data.draw(st.sampled_from([n for n in NAMES if n not in self.arrays]))
        note(f"h5py move {src} -> {dst}")
        with h5py.File(self.h5, "r+") as f:
            f.move(src, dst)
        self.arrays[dst] = self.arrays.pop(src)

    # -- invariants --------------------------------------------------------------------------
    def _tiff_ok(self, name: str) -> bool:
        return self.tpath(name).exists()

    @invariant()
    def every_view_equals_the_model(self):
        if not self.arrays:
            return
        try:
            self._check_views()
        except BaseException:
            self.failed = True
            raise

    def _check_views(self) -> None:
        with h5py.File(self.h5, "r") as f:
            assert sorted(k for k in f.keys()) == sorted(self.arrays), "hdf5/ names"
            for name, a in self.arrays.items():
                a.check(f[name][...], f"hdf5/ {name}")
                attrs = {k: int(v) for k, v in f[name].attrs.items() if k in ("k1", "k2", "k3")}
                assert attrs == a.attrs, f"hdf5/ {name} attrs {attrs} != {a.attrs}"
        zroot = self.mnt / "zarr" / f"{self.dom}.zarr"
        assert sorted(p.name for p in zroot.iterdir() if p.is_dir()) == sorted(self.arrays), "zarr/ names"
        for name, a in self.arrays.items():
            z = zarr.open_array(str(self.zpath(name)), mode="r")
            a.check(z[...], f"zarr/ {name}")
            attrs = {k: v for k, v in z.attrs.items() if k in ("k1", "k2", "k3")}
            assert attrs == a.attrs, f"zarr/ {name} attrs {attrs} != {a.attrs}"
            t = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(self.npath(name))}},
                        open=True, read=True).result()
            a.check(np.asarray(t.T.read().result()), f"n5/ {name}")
            if self._tiff_ok(name):
                a.check(tifffile.imread(self.tpath(name)), f"tiff/ {name}")

    def teardown(self) -> None:
        if not self.failed and self.arrays:
            self._check_views()


def _settings() -> settings:
    return settings(max_examples=EXAMPLES or 12, stateful_step_count=int(os.environ.get("POLYFS_XVIEW_STEPS", "10")), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck),
                    verbosity=Verbosity.verbose if os.environ.get("POLYFS_XVIEW_VERBOSE") else Verbosity.normal, derandomize=not (EXAMPLES or SEED),
                    phases=[p for p in Phase if p != Phase.shrink] if not os.environ.get("POLYFS_XVIEW_SHRINK")
                    else list(Phase))


@pytest.mark.timeout(0)
def test_views_agree_with_a_model_under_random_tool_writes(mount_store, tmp_path):
    """Random writes by real tools through zarr/, n5/, hdf5/ and tiff/ of one mount: every
    view equals the numpy model after every step; the store checks clean at the end."""
    warnings.filterwarnings("ignore")
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    XView.mnt = m.path
    if SEED:
        XView._hypothesis_internal_use_seed = int(SEED)  # what hypothesis's @seed sets
    run_state_machine_as_test(XView, settings=_settings())
    m.stop()
    deep_check(store)


# -- plain regressions of what the machine found -------------------------------------------------
@pytest.mark.parametrize("how", ["hdf5-del", "tiff-rm"])
def test_cp_r_of_an_array_again_after_another_view_deleted_the_copy(mount_store, tmp_path, how):
    """``cp -r`` of an array in ``zarr/``, the copy deleted through ``hdf5/`` (h5py ``del``) or
    ``tiff/`` (``rm``), then ``cp -r`` to the same name again: it failed with "cannot create
    directory 'd/c': File exists" (the first copy's ``c/`` outlived its array)."""
    warnings.filterwarnings("ignore")
    store = tmp_path / "store"
    store.mkdir()
    m = mount_store(str(store))
    vals = np.arange(14 * 7, dtype="u2").reshape(14, 7)
    with h5py.File(m.path / "hdf5" / "x.h5", "w") as f:
        f.create_dataset("a", data=vals, chunks=(8, 8), maxshape=(None, None))
    z = m.path / "zarr" / "x.zarr"
    for attempt in range(2):
        res = subprocess.run(["cp", "-r", str(z / "a"), str(z / "d")], capture_output=True, text=True)
        assert res.returncode == 0, f"cp -r #{attempt + 1}: {res.stderr}"
        with h5py.File(m.path / "hdf5" / "x.h5", "r") as f:
            np.testing.assert_array_equal(f["d"][...], vals)
        np.testing.assert_array_equal(zarr.open_array(str(z / "d"), mode="r")[...], vals)
        if attempt == 0:
            if how == "hdf5-del":
                with h5py.File(m.path / "hdf5" / "x.h5", "r+") as f:
                    del f["d"]
            else:
                os.unlink(m.path / "tiff" / "x" / "d.tif")
            assert not (z / "d").exists()
    m.stop()
    deep_check(store)
