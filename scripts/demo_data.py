"""Sample sources for scripts/demo: an HDF5 file (a 3-D microscopy-like volume,
a 2-D image, a table of string labels) and a multi-page TIFF."""
from __future__ import annotations

import sys
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import tifffile


def volume(shape: tuple[int, ...]) -> np.ndarray:
    """Smooth blobs plus noise: compresses like real images do."""
    rng = np.random.default_rng(42)
    grids = np.meshgrid(*[np.linspace(0, 6 * np.pi, n, dtype=np.float32) for n in shape], indexing="ij")
    base = sum(np.sin(g * (i + 1) / 2) for i, g in enumerate(grids))
    noise = rng.normal(0, 0.2, shape).astype(np.float32)
    return ((base - base.min()) / (np.ptp(base) or 1) * 3000 + noise * 100).clip(0, 65535).astype(np.uint16)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with h5py.File(out / "brain.h5", "w") as f:
        f.attrs["description"] = "polyfs demo: one store, four formats"
        raw = f.create_group("raw")
        vol = raw.create_dataset("volume", data=volume((64, 256, 256)), chunks=(1, 128, 128),
                                 **hdf5plugin.Zstd(clevel=3))
        vol.attrs["element_size_um"] = np.array([2.0, 0.5, 0.5])
        vol.attrs["axes"] = "zyx"
        img = f.create_dataset("overview", data=volume((512, 512)), chunks=(256, 256), compression="gzip",
                               compression_opts=4)
        img.attrs["units"] = "counts"
        labels = f.create_dataset("labels", data=np.array(["cortex", "hippocampus", "thalamus"], dtype=object),
                                  dtype=h5py.string_dtype())
        labels.attrs["note"] = "variable-length strings"
        f["raw/latest"] = h5py.SoftLink("/raw/volume")
    tifffile.imwrite(out / "stack.tif", volume((8, 300, 400)), tile=(128, 128), compression="zlib",
                     metadata={"axes": "ZYX"})
    print(out / "brain.h5")
    print(out / "stack.tif")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "demo-data"))
