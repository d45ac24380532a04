"""TIFF: ``tiff/<stem>/<dataset>.tif``, tiled TIFF per image-like dataset; import; writes.

Modules: structs.py (header, IFD entries, tag table), raster.py (which datasets are
images: samples per pixel, complex samples), meta.py (ImageJ/OME
metadata from attributes), image.py (one image's IFD chain), tiles.py
(zero-copy and transcoded tiles), view.py (the view), source.py (the importer),
segments.py (a TIFF's tiles or strips, read a region at a time), written.py
(a written file checked and opened), ingest.py
(a ``.tif`` written into the view: a new dataset, replaced data, rewritten tiles).
"""
from ..base import Format

FORMAT = Format("tiff", __name__, "", "dir", has_source=True, has_ingest=True,
                source_suffixes=(".tif", ".tiff", ".btf"))
