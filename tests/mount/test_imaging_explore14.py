"""The TIFF and HDF5 views used by the common Python image and single-cell tools (Pillow,
imageio, OpenCV, scikit-image, anndata) on a real mount, exploratory round 14.

What it found:

- Pillow, OpenCV, imageio and scikit-image write little-endian strips; decoded and stored
  again, they were stored big-endian, and planes of 16-multiples were served as the stored
  big-endian deflate chunks: Pillow then misread the float32/int32/int16 image it had just
  written (``Image.open(path)`` of its own file gave byte-swapped values). Decoded pixels keep
  the file's byte order now.
- Pillow misreads *any* compressed big-endian int16/int32/float32 TIFF (its libtiff path
  unpacks them byte-swapped: ``I;16BS``, ``I;32BS``, ``F;32BF``) and opens no big-endian
  uint32 nor any float64: the view's files of big-endian datasets (an HDF5 import's default
  order) fail in Pillow exactly where a local file of the same encoding does, and nowhere else.
- anndata reads no ``.h5ad`` written into ``hdf5/`` or imported: contiguous little-endian
  datasets are stored big-endian, and scipy.sparse refuses ``>f4`` (needs the HDF5 importer to
  keep the file's byte order; the test says so until it does).
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

h5py = pytest.importorskip("h5py")
tifffile = pytest.importorskip("tifffile")
zarr = pytest.importorskip("zarr")
Image = pytest.importorskip("PIL.Image")

RNG = np.random.default_rng(14014)


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def snapshot(store: Path) -> dict[str, bytes]:
    """The store's objects, without polyfs's derived data (caches a write may drop)."""
    out = {}
    for dirpath, _, files in os.walk(store):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), store)
            if not rel.startswith("polyfs/"):
                out[rel] = Path(dirpath, name).read_bytes()
    return out


def everywhere(mnt: Path, name: str, want: np.ndarray, domain: str = "exp") -> None:
    """The dataset as zarr-python and h5py read their views' files."""
    warnings.simplefilter("ignore")
    np.testing.assert_array_equal(zarr.open(str(mnt / "zarr" / f"{domain}.zarr"), mode="r")[name][...], want)
    with h5py.File(mnt / "hdf5" / f"{domain}.h5", "r") as f:
        np.testing.assert_array_equal(f[name][()], want)


def pillow_frames(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        frames = []
        for i in range(getattr(im, "n_frames", 1)):
            im.seek(i)
            frames.append(np.asarray(im))
    return np.stack(frames) if len(frames) > 1 else frames[0]


# -- 1. Pillow, imageio, OpenCV and scikit-image write into tiff/ -----------------------------------
GREY = RNG.integers(0, 255, (37, 53)).astype("u1")


def palette_image() -> tuple[Image.Image, np.ndarray]:
    idx = (GREY % 16).astype("u1")
    im = Image.fromarray(idx, mode="L").convert("P")
    im.putpalette([v for i in range(16) for v in (i * 16, 255 - i * 16, i * 8)])
    im.frombytes(idx.tobytes())
    return im, idx


PICTURES = {
    "L": GREY,
    "I16": RNG.integers(0, 65535, (37, 53)).astype("u2"),
    "I": RNG.integers(-10**6, 10**6, (37, 53)).astype("i4"),
    "F": RNG.random((37, 53)).astype("f4"),
    "RGB": RNG.integers(0, 255, (37, 53, 3)).astype("u1"),
    "RGBA": RNG.integers(0, 255, (37, 53, 4)).astype("u1"),
    "1": GREY > 128,
}


@pytest.mark.parametrize("compression", [None, "tiff_lzw", "tiff_adobe_deflate", "packbits"])
def test_pillow_writes_every_mode(mount_store, store, compression):
    m = mount_store(str(store))
    kw = {"compression": compression} if compression else {}
    for mode, arr in PICTURES.items():
        Image.fromarray(arr).save(m.path / "tiff" / "exp" / f"pil_{mode}.tif", **kw)
    pal, idx = palette_image()
    pal.save(m.path / "tiff" / "exp" / "pil_P.tif", **kw)
    for mode, arr in {**PICTURES, "P": idx}.items():
        everywhere(m.path, f"pil_{mode}", arr)
        back = pillow_frames(m.path / "tiff" / "exp" / f"pil_{mode}.tif")
        np.testing.assert_array_equal(back, arr)
    with Image.open(m.path / "tiff" / "exp" / "pil_P.tif") as im:  # the palette is served back
        assert im.mode == "P" and im.getpalette()[:6] == [0, 255, 0, 16, 239, 8]
    m.stop()
    m.start()
    everywhere(m.path, "pil_F", PICTURES["F"])
    m.stop()
    deep_check(store)


def test_pillow_multi_frame_and_jpeg(mount_store, store, tmp_path):
    m = mount_store(str(store))
    d = m.path / "tiff" / "exp"
    frames = [RNG.integers(0, 65535, (30, 40)).astype("u2") for _ in range(3)]
    ims = [Image.fromarray(a) for a in frames]
    ims[0].save(d / "stack.tif", save_all=True, append_images=ims[1:], compression="tiff_lzw")
    everywhere(m.path, "stack", np.stack(frames))
    np.testing.assert_array_equal(pillow_frames(d / "stack.tif"), np.stack(frames))
    rgb = RNG.integers(0, 255, (64, 80, 3)).astype("u1")
    Image.fromarray(rgb).save(tmp_path / "j.tif", compression="jpeg")  # what the decoder makes of it
    Image.fromarray(rgb).save(d / "photo.tif", compression="jpeg")
    everywhere(m.path, "photo", tifffile.imread(tmp_path / "j.tif"))
    m.stop()
    deep_check(store)


def test_pillow_float_image_reads_back_as_written(mount_store, store):
    """A 256x320 float32 picture (its plane served as one stored tile): Pillow misread it."""
    m = mount_store(str(store))
    for mode, arr in (("F", RNG.random((256, 320)).astype("f4")),
                      ("I", RNG.integers(-10**6, 10**6, (256, 320)).astype("i4"))):
        path = m.path / "tiff" / "exp" / f"big_{mode}.tif"
        Image.fromarray(arr).save(path, compression="tiff_adobe_deflate")
        np.testing.assert_array_equal(pillow_frames(path), arr)
        everywhere(m.path, f"big_{mode}", arr)


def test_bad_pillow_writes_are_refused_and_change_nothing(mount_store, store):
    m = mount_store(str(store))
    d = m.path / "tiff" / "exp"
    before = snapshot(store)
    log0 = len(m.log_text().splitlines())
    ims = [Image.fromarray(GREY), Image.fromarray(GREY[:20])]
    with pytest.raises(OSError) as exc:  # frames of two shapes: no one dataset
        ims[0].save(d / "mixed.tif", save_all=True, append_images=ims[1:])
    assert exc.value.errno == errno.EOPNOTSUPP
    with pytest.raises(OSError) as exc:  # float32 over the uint16 dataset
        Image.fromarray(PICTURES["F"]).save(d / "seed.tif")
    assert exc.value.errno == errno.EINVAL
    assert not (d / "mixed.tif").exists()
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f["seed"][()], np.arange(32 * 32, dtype="u2").reshape(32, 32))
    new = [ln for ln in m.log_text().splitlines()[log0:] if "WARNING" in ln or "ERROR" in ln]
    assert len(new) == 2 and "mixed.tif" in new[0] and "seed.tif" in new[1], new
    m.stop()
    assert snapshot(store) == before


def test_imageio_opencv_skimage_write(mount_store, store):
    iio = pytest.importorskip("imageio.v3")
    cv2 = pytest.importorskip("cv2")
    skio = pytest.importorskip("skimage.io")
    m = mount_store(str(store))
    d = m.path / "tiff" / "exp"
    stack = RNG.random((5, 33, 47)).astype("f4")
    iio.imwrite(d / "iio_stack.tif", stack)
    bgr = RNG.integers(0, 255, (41, 29, 3)).astype("u1")
    assert cv2.imwrite(str(d / "cv_bgr.tif"), bgr, [cv2.IMWRITE_TIFF_COMPRESSION, 8])
    deep16 = RNG.integers(0, 65535, (41, 29)).astype("u2")
    assert cv2.imwritemulti(str(d / "cv_multi.tif"), [deep16, deep16 + 1, deep16 + 2])
    sk = RNG.integers(0, 255, (21, 31, 3)).astype("u1")
    skio.imsave(d / "sk_rgb.tif", sk, check_contrast=False)
    # over an existing view file: same type, new values
    seed = (np.arange(32 * 32).reshape(32, 32) * 7).astype("u2")
    assert cv2.imwrite(str(d / "seed.tif"), seed)
    want = {"iio_stack": stack, "cv_bgr": bgr[..., ::-1], "cv_multi": np.stack([deep16, deep16 + 1, deep16 + 2]),
            "sk_rgb": sk, "seed": seed}
    m.stop()
    m.start()
    for name, arr in want.items():
        everywhere(m.path, name, arr)
    np.testing.assert_array_equal(cv2.imread(str(d / "cv_bgr.tif"), cv2.IMREAD_UNCHANGED), bgr)
    np.testing.assert_array_equal(iio.imread(d / "iio_stack.tif"), stack)
    m.stop()
    deep_check(store)


# -- 2. imported data read by the image libraries ---------------------------------------------------
CASES = {  # dtype, HDF5 compression of the source (None: contiguous, re-encoded on import)
    "u1": ("u1", None), "u2": ("u2", None), "i2": ("i2", None), "f4": ("f4", None), "i4": ("i4", None),
    "u4": ("u4", None), "i2_gzip": ("i2", "gzip"), "f4_gzip": ("f4", "gzip"),
}


def local_twin(path: Path, out: Path) -> Path:
    """The view's file re-encoded locally by tifffile with the same byte order, compression and
    tiling: what Pillow makes of such a file anywhere."""
    with tifffile.TiffFile(path) as t:
        p = t.pages[0]
        tifffile.imwrite(out, t.asarray(), byteorder=t.byteorder, compression=p.compression,
                         tile=(p.tilelength, p.tilewidth), photometric="minisblack")
    return out


def readable(read, path: Path, want: np.ndarray) -> bool:
    try:
        got = read(path)
    except Exception:  # noqa: BLE001 - a reader refusing the file is an answer too
        return False
    return got.shape == want.shape and bool(np.array_equal(got.astype(want.dtype.newbyteorder("=")), want))


def test_image_libraries_read_imported_data_as_they_read_such_files(mount_store, tmp_path):
    """Pillow, imageio, OpenCV and scikit-image on the view's files of imported datasets: each
    reads what tifffile reads wherever it reads a local file of the same encoding."""
    iio = pytest.importorskip("imageio.v3")
    cv2 = pytest.importorskip("cv2")
    skio = pytest.importorskip("skimage.io")
    src = tmp_path / "src.h5"
    data = {}
    with h5py.File(src, "w") as f:
        for name, (dt, comp) in CASES.items():
            data[name] = (RNG.random((96, 128)) * 200 - (0 if dt[0] == "u" else 100)).astype(dt)
            f.create_dataset(name, data=data[name], chunks=(32, 64) if comp else None, compression=comp)
    store = tmp_path / "store"
    subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(store), "--domain", "/img.h5",
                    "--chunks", "32,64"], capture_output=True, text=True, timeout=120, check=True)
    m = mount_store(str(store), "ro")
    readers = {"pillow": pillow_frames, "imageio": iio.imread, "skimage": skio.imread,
               "opencv": lambda p: cv2.imread(str(p), cv2.IMREAD_UNCHANGED)}
    pillow_fails = []
    for name, want in data.items():
        served = m.path / "tiff" / "img" / f"{name}.tif"
        np.testing.assert_array_equal(tifffile.imread(served), want)
        twin = local_twin(served, tmp_path / f"twin_{name}.tif")
        for rname, read in readers.items():
            assert readable(read, served, want) == readable(read, twin, want), (name, rname)
        if not readable(pillow_frames, served, want):
            pillow_fails.append(name)
    # Pillow's own gaps: compressed big-endian int16/int32/float32, big-endian uint32
    assert set(pillow_fails) <= {"i2", "i4", "f4", "u4"}, pillow_fails


# -- 3. anndata --------------------------------------------------------------------------------------
def small_adata():
    ad = pytest.importorskip("anndata")
    pd = pytest.importorskip("pandas")
    sp = pytest.importorskip("scipy.sparse")
    n, g = 50, 30
    obs = pd.DataFrame({"cell_type": pd.Categorical(RNG.choice(["T", "B", "NK"], n)),
                        "n_genes": RNG.integers(0, 100, n), "barcode": [f"AC{i:04d}" for i in range(n)]},
                       index=[f"cell{i}" for i in range(n)])
    var = pd.DataFrame({"symbol": [f"G{i}" for i in range(g)], "highly_variable": RNG.random(g) > 0.5},
                       index=[f"gene{i}" for i in range(g)])
    a = ad.AnnData(X=sp.random(n, g, density=0.2, format="csr", dtype="f4", random_state=3), obs=obs, var=var)
    a.obsm["X_pca"] = RNG.random((n, 5)).astype("f4")
    a.uns["neighbors"] = {"params": {"n_neighbors": 15, "method": "umap"}, "arr": np.arange(4)}
    return ad, a


def test_anndata_h5ad_written_into_hdf5_keeps_its_arrays(mount_store, store):
    """``write_h5ad`` into ``hdf5/``: a domain whose arrays h5py and zarr-python read as written."""
    _, a = small_adata()
    m = mount_store(str(store))
    a.write_h5ad(m.path / "hdf5" / "cells.h5ad")
    m.stop()
    m.start()
    with h5py.File(m.path / "hdf5" / "cells.h5ad", "r") as f:
        assert f.attrs["encoding-type"] == "anndata"
        np.testing.assert_array_equal(f["X/data"][()], a.X.data)
        np.testing.assert_array_equal(f["X/indices"][()], a.X.indices)
        np.testing.assert_array_equal(f["obsm/X_pca"][()], a.obsm["X_pca"])
        assert [v.decode() for v in f["obs/cell_type/categories"][()]] == list(a.obs["cell_type"].cat.categories)
        assert f["uns/neighbors/params/n_neighbors"][()] == 15
    m.stop()
    deep_check(store)


def test_anndata_backed_read_modify_write(mount_store, store):
    """A dense ``.h5ad`` written into ``hdf5/``, changed in place with ``backed="r+"``: a new obs
    column (a new dataset) and rows of X (chunks rewritten) are stored."""
    ad = pytest.importorskip("anndata")
    pd = pytest.importorskip("pandas")
    x = RNG.random((20, 10)).astype("f4")
    a = ad.AnnData(X=x, obs=pd.DataFrame({"ct": pd.Categorical(RNG.choice(["a", "b"], 20))},
                                         index=[f"c{i}" for i in range(20)]))
    m = mount_store(str(store))
    path = m.path / "hdf5" / "dense.h5ad"
    a.write_h5ad(path)
    b = ad.read_h5ad(path, backed="r+")
    b.obs["score"] = np.arange(20, dtype="f8")
    b.write()
    b.file.close()
    b = ad.read_h5ad(path, backed="r+")
    b.X[0:2] = 0
    b.file.close()
    m.stop()
    m.start()
    c = ad.read_h5ad(path)
    want = x.copy()
    want[0:2] = 0
    np.testing.assert_array_equal(c.X, want)
    assert list(c.obs["score"]) == list(range(20)) and list(c.obs["ct"]) == list(a.obs["ct"])
    m.stop()
    deep_check(store)


@pytest.mark.parametrize("how", ["written", "imported"])
def test_anndata_reads_back_its_sparse_h5ad(mount_store, store, tmp_path, how):
    ad, a = small_adata()
    if how == "imported":
        local = tmp_path / "cells.h5ad"
        a.write_h5ad(local)
        subprocess.run([sys.executable, "-m", "polyfs", "import", str(local), str(store), "--domain", "/cells.h5ad"],
                       capture_output=True, text=True, timeout=120, check=True)
    m = mount_store(str(store))
    path = m.path / "hdf5" / "cells.h5ad"
    if how == "written":
        a.write_h5ad(path)
    b = ad.read_h5ad(path)
    assert (b.X != a.X).nnz == 0
    pd = pytest.importorskip("pandas")
    pd.testing.assert_frame_equal(b.obs, a.obs)  # dtypes too: '>i8' columns were not int64
    pd.testing.assert_frame_equal(b.var, a.var)
