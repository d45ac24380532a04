"""Zarr v3: ``zarr/<stem>.zarr/`` hierarchies with sharded arrays; writes; import."""
from ..base import Format

FORMAT = Format("zarr", __name__, ".zarr", "dir", has_source=True, has_ingest=True, source_suffixes=(".zarr",))
