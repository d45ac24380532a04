"""N5: ``n5/<stem>.n5/`` containers; writes; import."""
from ..base import Format

FORMAT = Format("n5", __name__, ".n5", "dir", has_source=True, has_ingest=True, source_suffixes=(".n5",))
