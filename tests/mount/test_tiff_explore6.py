"""The TIFF view used by microscopists and remote-sensing users (tifffile, libtiff tools, GDAL) on a
real mount, exploratory round 6: what it found and what now holds.

- new TIFFs written into one directory at the same time (``parallel gdal_translate``, several
  ``cp``) lost most of their datasets, every writer told success: each file's group link table was
  computed from the domain's model as routed before the domain's lock, and the last commit's
  table dropped the others' links. The ingester now works on the model as it is under the lock;
- the ExtraSamples a written file had were not kept: the view served a grey image's alpha
  (``gdalwarp -dstalpha``, tifffile ``extrasamples=["unassalpha"]``) as an unspecified band (GDAL:
  ColorInterp Undefined, the transparency gone), a premultiplied alpha (GDAL ``ALPHA=PREMULTIPLIED``)
  as unassociated, and the plain fourth band of an RGB image (RGBN) as an alpha. They are now the
  attribute ``extrasamples`` (tifffile's names) and served back as written, and
  ``gdal_edit.py -colorinterp_N alpha`` on the view's file (ExtraSamples rewritten in place), logged
  as not kept, is stored;
- an OME-TIFF's channel names (``Channel Name``: DAPI, GFP...) were dropped: they are now the
  attribute ``channel_names`` (written or imported), and the view's OME-XML names its channels from
  it, or from the NGFF ``omero`` channel labels of an OME-Zarr image;
- a palette file of fewer than 8 bits (GDAL ``NBITS=4`` of a classification, 16 colours) was
  served as grey (its colour map did not fit the 8-bit samples served): padded, it is a palette;
- a GeoTIFF written over a dataset's file kept serving the nodata value (CRS, band metadata) the
  old file had and the new one does not: the file's GeoTIFF/GDAL tags are now all it says (a file
  with none, a plain picture written back, leaves the dataset's);
- a satellite scene's RPC coefficients (``RPCCoefficientTag``, GDAL's RPC metadata) were dropped:
  kept now as the GeoTIFF tags are;
- other private tags of a new file (an ICC profile, Micro-Manager metadata, a writer's
  ``extratags``) vanished unseen: one log line now names them (LERC's codec parameters aside), and
  ``polyfs import`` says so too;
- ``polyfs import`` of a file whose ImageDescription GDAL copied from its source (tifffile's shaped
  JSON, another band count) printed tifffile's ``ERROR`` lines for a good import: one warning
  naming the file now.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import deep_check, seeded_store

from polyfs.importers import import_source

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
tifffile = pytest.importorskip("tifffile")


@pytest.fixture
def store(tmp_path):
    return seeded_store(tmp_path)


def view(m, name: str) -> Path:
    return m.path / "tiff" / "exp" / f"{name}.tif"


def zarr_array(m, name: str):
    return zarr.open_array(str(m.path / "zarr" / "exp.zarr" / name), mode="r")


def gdal_bands(path: Path) -> list[str]:
    out = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return [b.get("colorInterpretation") for b in json.loads(out)["bands"]]


# -- 0. files written side by side at the same time -------------------------------------------------
def test_new_files_written_at_once_into_one_directory_are_all_kept(mount_store, store, tmp_path):
    """Eight ``cp`` of TIFFs into one domain's directory at the same time (``parallel
    gdal_translate ...``): each made its dataset, but the links of most were lost (each file's
    group links were computed from the model as it was before the others were committed); every
    ``cp`` exited 0. All are kept now."""
    m = mount_store(str(store))
    names = [f"tile{i}" for i in range(8)]
    for i, name in enumerate(names):
        tifffile.imwrite(tmp_path / f"{name}.tif", np.full((32, 48), i, "u2"), tile=(16, 16), compression="zlib")
    for rnd in range(2):
        procs = [subprocess.Popen(["cp", str(tmp_path / f"{n}.tif"), str(view(m, f"{n}_{rnd}"))]) for n in names]
        assert [p.wait(timeout=60) for p in procs] == [0] * len(names)
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        for rnd in range(2):
            for i, n in enumerate(names):
                np.testing.assert_array_equal(f[f"{n}_{rnd}"][...], np.full((32, 48), i, "u2"))
    assert sorted(p.name for p in (m.path / "tiff" / "exp").glob("tile*")) == \
        sorted(f"{n}_{r}.tif" for n in names for r in range(2))
    deep_check(store)


# -- 1. extra samples (alpha, premultiplied alpha, a plain band) ----------------------------------
EXTRA_CASES = [  # (name, shape, tifffile options, ExtraSamples written)
    ("gray_alpha", (24, 40, 2), {"photometric": "minisblack", "extrasamples": ["unassalpha"]}, ["UNASSALPHA"]),
    ("rgba_premul", (24, 40, 4), {"photometric": "rgb", "extrasamples": ["assocalpha"]}, ["ASSOCALPHA"]),
    ("rgbn", (24, 40, 4), {"photometric": "rgb", "extrasamples": ["unspecified"]}, ["UNSPECIFIED"]),
    ("sep_gray_alpha", (2, 24, 40), {"photometric": "minisblack", "planarconfig": "separate",
                                     "extrasamples": ["unassalpha"]}, ["UNASSALPHA"]),
]


@pytest.mark.parametrize("name,shape,opts,extra", EXTRA_CASES, ids=[c[0] for c in EXTRA_CASES])
def test_extra_samples_are_served_as_written(mount_store, store, name, shape, opts, extra):
    m = mount_store(str(store))
    data = np.random.default_rng(6).integers(0, 255, shape).astype("u1")
    with open(view(m, name), "wb") as f:
        tifffile.imwrite(f, data, tile=(16, 16), **opts)
    with tifffile.TiffFile(view(m, name)) as t:
        np.testing.assert_array_equal(t.asarray(), data)
        assert [e.name for e in t.pages[0].extrasamples] == extra
    assert list(zarr_array(m, name).attrs["extrasamples"]) == extra
    with h5py.File(m.path / "hdf5" / "exp.h5", "r") as f:
        np.testing.assert_array_equal(f[name][...], data)


@pytest.mark.skipif(shutil.which("gdalwarp") is None or shutil.which("gdal_translate") is None,
                    reason="needs GDAL")
def test_gdal_alpha_bands_keep_their_meaning(mount_store, store, tmp_path):
    """``gdalwarp -dstalpha`` (grey + alpha) and ``ALPHA=PREMULTIPLIED``, as GDAL reads them back
    from the view and from the same command's local file."""
    m = mount_store(str(store))
    src = tmp_path / "src.tif"
    tifffile.imwrite(src, np.random.default_rng(1).random((40, 56)).astype("f4"))
    geo = tmp_path / "geo.tif"
    subprocess.run(["gdal_translate", "-q", "-a_srs", "EPSG:4326", "-a_ullr", "10", "50", "11", "49", "-a_nodata",
                    "-9999", str(src), str(geo)], check=True, timeout=60)
    rgb = tmp_path / "rgb.tif"
    tifffile.imwrite(rgb, np.random.default_rng(2).integers(0, 255, (40, 56, 3)).astype("u1"), photometric="rgb")
    runs = {
        "warped": ["gdalwarp", "-q", "-dstalpha", "-co", "TILED=YES", str(geo)],
        "premul": ["gdal_translate", "-q", "-b", "1", "-b", "2", "-b", "3", "-b", "1", "-colorinterp_4", "alpha",
                   "-co", "TILED=YES", "-co", "ALPHA=PREMULTIPLIED", str(rgb)],
    }
    for name, cmd in runs.items():
        local = tmp_path / f"{name}.tif"
        subprocess.run([*cmd, str(local)], check=True, timeout=60)
        subprocess.run([*cmd, str(view(m, name))], check=True, timeout=60)
        assert gdal_bands(view(m, name)) == gdal_bands(local)
        with tifffile.TiffFile(local) as a, tifffile.TiffFile(view(m, name)) as b:
            assert b.pages[0].extrasamples == a.pages[0].extrasamples
            np.testing.assert_array_equal(b.asarray(), a.asarray())
    assert gdal_bands(view(m, "warped"))[-1] == "Alpha"
    assert "private tag" not in m.log_text()  # GeoTIFF and GDAL tags are kept


@pytest.mark.skipif(shutil.which("gdal_edit.py") is None, reason="needs gdal_edit.py")
def test_colorinterp_set_in_place_is_kept(mount_store, store):
    """``gdal_edit.py -colorinterp_3 alpha`` rewrites ExtraSamples in place: it is stored (it was
    logged as not kept), and set back the same way."""
    m = mount_store(str(store))
    data = np.random.default_rng(7).integers(0, 255, (24, 40, 3)).astype("u1")
    with open(view(m, "three"), "wb") as f:
        tifffile.imwrite(f, data, photometric="minisblack", planarconfig="contig", tile=(16, 16))
    assert gdal_bands(view(m, "three")) == ["Gray", "Undefined", "Undefined"]
    for interp, want in (("alpha", "UNASSALPHA"), ("undefined", "UNSPECIFIED")):
        subprocess.run(["gdal_edit.py", "-colorinterp_3", interp, str(view(m, "three"))], check=True, timeout=60)
        assert gdal_bands(view(m, "three"))[-1] == interp.capitalize()
        assert list(zarr_array(m, "three").attrs["extrasamples"]) == ["UNSPECIFIED", want]
    with tifffile.TiffFile(view(m, "three")) as t:
        np.testing.assert_array_equal(t.asarray(), data)
    assert "not kept" not in m.log_text()


# -- 2. OME channel names ------------------------------------------------------------------------
def ome_channel_names(path: Path) -> list[str | None]:
    with tifffile.TiffFile(path) as t:
        chans = tifffile.xml2dict(t.ome_metadata)["OME"]["Image"]["Pixels"]["Channel"]
    return [c.get("Name") for c in (chans if isinstance(chans, list) else [chans])]


CHANNELS = ["DAPI", "GFP", "mCherry <561>"]


def test_ome_channel_names_are_kept(mount_store, store):
    m = mount_store(str(store))
    data = np.random.default_rng(3).integers(0, 4000, (3, 4, 32, 48)).astype("u2")
    with open(view(m, "cells"), "wb") as f:
        tifffile.imwrite(f, data, ome=True, tile=(16, 16), compression="zlib",
                         metadata={"axes": "CZYX", "Channel": {"Name": CHANNELS}, "PhysicalSizeX": 0.2,
                                   "PhysicalSizeY": 0.2, "PhysicalSizeZ": 1.0})
    with tifffile.TiffFile(view(m, "cells")) as t:
        np.testing.assert_array_equal(t.asarray(), data)
        assert t.series[0].axes == "CZYX"
    assert ome_channel_names(view(m, "cells")) == CHANNELS
    assert list(zarr_array(m, "cells").attrs["channel_names"]) == CHANNELS
    with open(view(m, "cells"), "wb") as f:  # a rewrite with other names sets them
        tifffile.imwrite(f, data, ome=True, metadata={"axes": "CZYX", "Channel": {"Name": ["a", "b", "c"]}})
    assert ome_channel_names(view(m, "cells")) == ["a", "b", "c"]
    deep_check(store)


def test_ome_channel_names_survive_import(mount_store, tmp_path):
    src = tmp_path / "cells.ome.tif"
    data = np.random.default_rng(4).integers(0, 255, (2, 3, 32, 32)).astype("u1")  # TCYX
    tifffile.imwrite(src, data, ome=True, metadata={"axes": "TCYX", "Channel": {"Name": CHANNELS}})
    out = tmp_path / "store"
    assert import_source(src, str(out), progress=False) == "/cells.h5"
    m = mount_store(str(out))
    assert ome_channel_names(m.path / "tiff" / "cells" / "image.tif") == CHANNELS


def test_ngff_omero_channel_labels_name_the_channels(mount_store, store):
    """An OME-Zarr image made through ``zarr/``: its ``omero`` channel labels name the TIFF's channels."""
    m = mount_store(str(store))
    g = zarr.open_group(str(m.path / "zarr" / "exp.zarr"), mode="r+").create_group("ngff")
    a = g.create_array("0", shape=(2, 3, 32, 32), chunks=(1, 1, 32, 32), dtype="u2")
    a[...] = np.arange(2 * 3 * 32 * 32, dtype="u2").reshape(a.shape)
    g.attrs.update({
        "multiscales": [{"version": "0.4", "axes": [{"name": n, "type": t} for n, t in
                                                    zip("czyx", ["channel", "space", "space", "space"])],
                         "datasets": [{"path": "0", "coordinateTransformations": [
                             {"type": "scale", "scale": [1, 2.0, 0.5, 0.5]}]}]}],
        "omero": {"channels": [{"label": "DAPI", "color": "0000FF"}, {"label": "GFP", "color": "00FF00"}]},
    })
    path = m.path / "tiff" / "exp" / "ngff" / "0.tif"
    assert ome_channel_names(path) == ["DAPI", "GFP"]
    with tifffile.TiffFile(path) as t:
        assert t.series[0].axes == "CZYX"
        assert re.search(r'PhysicalSizeZ="2\.0"', t.ome_metadata)


@pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")
def test_geotiff_written_over_a_dataset_drops_the_tags_it_no_longer_has(mount_store, store, tmp_path):
    """A GeoTIFF without nodata (or band metadata) written over a dataset that had them: the old
    nodata was still served with the new pixels. A plain picture written back (tifffile, no geo
    tags) keeps the dataset's georeferencing."""
    tifffile.imwrite(tmp_path / "src.tif", np.random.default_rng(11).random((40, 56)).astype("f4"))
    with_nd, without = tmp_path / "nd.tif", tmp_path / "plain.tif"
    subprocess.run(["gdal_translate", "-q", "-a_srs", "EPSG:4326", "-a_ullr", "10", "50", "11", "49", "-a_nodata",
                    "-9999", "-mo", "SENSOR=x", str(tmp_path / "src.tif"), str(with_nd)], check=True, timeout=60)
    subprocess.run(["gdal_translate", "-q", "-a_srs", "EPSG:3857", "-a_ullr", "0", "40", "56", "0", "-a_nodata",
                    "none", str(tmp_path / "src.tif"), str(without)], check=True, timeout=60)
    m = mount_store(str(store))
    shutil.copyfile(with_nd, view(m, "dem"))
    assert {"GDAL_NODATA", "GDAL_METADATA"} <= set(zarr_array(m, "dem").attrs)

    def described(path: Path) -> tuple:
        d = json.loads(subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True, timeout=60,
                                      check=True).stdout)
        return (d["bands"][0].get("noDataValue"), d["geoTransform"], d["coordinateSystem"]["wkt"],
                d.get("metadata", {}).get("", {}).get("SENSOR"))

    shutil.copyfile(without, view(m, "dem"))
    assert described(view(m, "dem")) == described(without)
    assert described(view(m, "dem"))[0] is None
    assert not {"GDAL_NODATA", "GDAL_METADATA"} & set(zarr_array(m, "dem").attrs)
    data = tifffile.imread(view(m, "dem"))
    with open(view(m, "dem"), "wb") as f:  # processed in Python, written back without geo tags
        tifffile.imwrite(f, data * 2)
    assert described(view(m, "dem")) == described(without)
    np.testing.assert_array_equal(tifffile.imread(view(m, "dem")), data * 2)


# -- 3. RPC coefficients (satellite scenes not yet orthorectified) ---------------------------------
RPC = {"HEIGHT_OFF": "100", "HEIGHT_SCALE": "500", "LAT_OFF": "45.5", "LAT_SCALE": "0.05", "LINE_OFF": "20",
       "LINE_SCALE": "20", "LONG_OFF": "7.5", "LONG_SCALE": "0.07", "SAMP_OFF": "28", "SAMP_SCALE": "28",
       "LINE_NUM_COEFF": "0 0 -1" + " 0" * 17, "LINE_DEN_COEFF": "1" + " 0" * 19,
       "SAMP_NUM_COEFF": "0 1" + " 0" * 18, "SAMP_DEN_COEFF": "1" + " 0" * 19}


@pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")
def test_rpc_coefficients_are_kept(mount_store, store, tmp_path):
    """GDAL writes a scene's RPCs as RPCCoefficientTag (50844): it was dropped (``gdalinfo`` of the
    view showed no RPC metadata); it is kept like the GeoTIFF tags and served back."""
    tifffile.imwrite(tmp_path / "scene.tif", np.random.default_rng(5).random((40, 56)).astype("f4"))
    mdi = "".join(f'<MDI key="{k}">{v}</MDI>' for k, v in RPC.items())
    vrt = tmp_path / "scene.vrt"
    vrt.write_text(f'<VRTDataset rasterXSize="56" rasterYSize="40"><Metadata domain="RPC">{mdi}</Metadata>'
                   '<VRTRasterBand dataType="Float32" band="1"><SimpleSource><SourceFilename relativeToVRT="1">'
                   'scene.tif</SourceFilename><SourceBand>1</SourceBand></SimpleSource></VRTRasterBand></VRTDataset>')
    m = mount_store(str(store))
    local = tmp_path / "local.tif"
    for dst in (local, view(m, "scene")):
        subprocess.run(["gdal_translate", "-q", "-co", "TILED=YES", str(vrt), str(dst)], check=True, timeout=60)

    def rpc(path: Path) -> dict:
        out = subprocess.run(["gdalinfo", "-json", "-checksum", str(path)], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        d = json.loads(out)
        return {"rpc": d["metadata"].get("RPC"), "checksum": d["bands"][0]["checksum"]}

    got = rpc(view(m, "scene"))
    assert got["rpc"] and float(got["rpc"]["LAT_OFF"]) == 45.5
    assert got == rpc(local)
    assert len(zarr_array(m, "scene").attrs["RPCCoefficientTag"]) == 92
    assert "private tag" not in m.log_text()


@pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")
def test_palette_of_fewer_bits_keeps_its_colours(mount_store, store, tmp_path):
    """A 4-bit palette file (GDAL ``NBITS=4``, 16 colours) was served as grey: its colour map did
    not fit the 8-bit samples the view serves. It is served padded: the same colours."""
    idx = (np.arange(40 * 56) % 16).astype("u1").reshape(40, 56)
    cmap = np.zeros((3, 256), "u2")
    cmap[:, :16] = np.random.default_rng(10).integers(0, 65535, (3, 16))
    src = tmp_path / "classes.tif"
    tifffile.imwrite(src, idx, photometric="palette", colormap=cmap)
    m = mount_store(str(store))
    local = tmp_path / "local.tif"
    for dst in (local, view(m, "classes")):
        subprocess.run(["gdal_translate", "-q", "-co", "NBITS=4", str(src), str(dst)], check=True, timeout=60)
    with tifffile.TiffFile(local) as t:
        assert t.pages[0].bitspersample == 4 and t.pages[0].colormap.shape == (3, 16)
        written = t.pages[0].colormap  # GDAL's 8-bit colours, as 16-bit values
    with tifffile.TiffFile(view(m, "classes")) as t:
        assert t.pages[0].photometric.name == "PALETTE"
        np.testing.assert_array_equal(t.pages[0].colormap[:, :16], written)
        np.testing.assert_array_equal(t.asarray(), idx)
    rgb = {}
    for name, path in (("local", local), ("view", view(m, "classes"))):
        rgb[name] = tmp_path / f"{name}_rgb.tif"
        subprocess.run(["gdal_translate", "-q", "-expand", "rgb", str(path), str(rgb[name])], check=True, timeout=60)
    np.testing.assert_array_equal(tifffile.imread(rgb["view"]), tifffile.imread(rgb["local"]))
    assert gdal_bands(view(m, "classes")) == ["Palette"]


# -- 4. private tags a new file carries ----------------------------------------------------------
def test_private_tags_of_a_new_file_are_named_when_dropped(mount_store, store):
    """An ICC profile, Micro-Manager metadata, a writer's own tag: not kept, but said (they
    vanished without a word); ImageJ metadata (kept as attributes) is not named."""
    m = mount_store(str(store))
    data = np.zeros((32, 32, 3), "u1")
    with open(view(m, "acq"), "wb") as f:
        tifffile.imwrite(f, data, photometric="rgb", iccprofile=b"\0" * 128,
                         extratags=[(51123, "s", 0, '{"Camera": "x"}', True), (65000, "s", 0, "mine", True)])
    np.testing.assert_array_equal(tifffile.imread(view(m, "acq")), data)
    lines = [ln for ln in m.log_text().splitlines() if "tiff/exp/acq.tif" in ln and "private tag" in ln]
    assert len(lines) == 1, lines
    assert all(x in lines[0] for x in ("InterColorProfile (34675)", "MicroManagerMetadata (51123)", "65000"))
    with open(view(m, "ij"), "wb") as f:
        tifffile.imwrite(f, np.zeros((2, 32, 32), "u1"), imagej=True, metadata={"axes": "ZYX", "spacing": 2.0})
    assert "tiff/exp/ij.tif: private" not in m.log_text()


def test_import_names_the_private_tags_it_drops(tmp_path):
    """``polyfs import`` of such a file says the same (an LSM's or Micro-Manager's metadata)."""
    import sys

    src = tmp_path / "acq.tif"
    tifffile.imwrite(src, np.zeros((32, 32), "u2"), extratags=[(51123, "s", 0, '{"Camera": "x"}', True)])
    res = subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(tmp_path / "store")], check=False,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "MicroManagerMetadata (51123)" in res.stderr and str(src) in res.stderr, res.stderr


@pytest.mark.skipif(shutil.which("gdal_translate") is None, reason="needs GDAL")
def test_codec_parameters_are_not_named_as_dropped(mount_store, store, tmp_path):
    """LERC's LercParameters tag (50674) says how the tiles decode: nothing is lost with it."""
    src = tmp_path / "src.tif"
    data = np.random.default_rng(8).random((40, 56)).astype("f4")
    tifffile.imwrite(src, data)
    local = tmp_path / "lerc.tif"
    cmd = ["gdal_translate", "-q", "-co", "TILED=YES", "-co", "COMPRESS=LERC_DEFLATE", str(src)]
    if subprocess.run([*cmd, str(local)], check=False, capture_output=True, timeout=60).returncode != 0:
        pytest.skip("GDAL without LERC")
    m = mount_store(str(store))
    subprocess.run([*cmd, str(view(m, "lerc"))], check=True, timeout=60)
    np.testing.assert_array_equal(tifffile.imread(view(m, "lerc")), tifffile.imread(local))
    assert "private tag" not in m.log_text()


# -- 5. a copied description that does not describe the pages ----------------------------------
def test_import_of_a_file_whose_description_was_copied_prints_no_error(tmp_path):
    """GDAL copies its source's ImageDescription (tifffile's shaped JSON) into a file of another
    band count; tifffile logs an error and reads the pages as they are: the import is good, yet
    printed ``ERROR``. It is a warning naming the file now."""
    import sys

    src = tmp_path / "warped.tif"
    data = np.random.default_rng(9).integers(0, 255, (40, 56, 2)).astype("u1")
    tifffile.imwrite(src, data, photometric="minisblack", metadata=None, description='{"shape": [40, 56]}')
    res = subprocess.run([sys.executable, "-m", "polyfs", "import", str(src), str(tmp_path / "store"), "--domain",
                          "/w.h5"], check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "ERROR" not in res.stderr and "warped.tif" in res.stderr and "WARNING" in res.stderr, res.stderr
    from polyfs.model.catalog import Catalog
    from polyfs.store import open_store

    ds = Catalog(open_store(str(tmp_path / "store"), read_only=True)).load("/w.h5").resolve("/image")
    assert tuple(ds.shape.array_shape) == data.shape  # the pages as they are
