"""Polyglot files: one file that is a TIFF, an HDF5 file and a Zarr v3 shard at once.

Built from the TIFF, HDF5 and Zarr packages' pieces (file.py); the view
(view.py) serves each qualifying dataset under three names.
"""
from ..base import Format

FORMAT = Format("polyglot", __name__, "", "dir")
