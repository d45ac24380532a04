"""HDF5: ``hdf5/<stem>.h5``, a whole domain as one synthesized file; import.

Modules: structs.py (binary layouts as data), layout.py (address planning),
dtypes.py (datatype messages, disk bytes), messages.py (object header
messages), btree.py (chunk and group B-trees), vlheap.py (global heaps),
render.py (a domain's file), scales.py (dimension scales shown
for xarray's ``_ARRAY_DIMENSIONS``), single.py (one dataset for polyglot files),
view.py (the view), source.py (the importer), filetypes.py (the file's types as
model types, values read as the file's bytes), vlenorder.py (h5py's byte-swapped
sequences read as the file holds them), filters.py (libhdf5 runs filters outside
the translation table on single chunks), userblock.py (a file's user block, a MAT-file's
header, kept and served again).
"""
from ..base import Format

FORMAT = Format("hdf5", __name__, ".h5", "file", has_source=True, has_ingest=True,
                source_suffixes=(".h5", ".hdf5", ".hdf", ".he5", ".nc", ".nwb", ".h5ad", ".loom", ".mat"),
                keeps_names=(".nc", ".nc4", ".hdf5", ".he5", ".nwb", ".h5ad", ".loom", ".mat"), runs_filters=True)
