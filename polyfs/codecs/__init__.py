"""Chunk codecs: the translation table, pipelines, sniffing, filter specs."""
from .filterspec import format_filter_spec, parse_filter_spec
from .pipeline import Pipeline, effective
from .registry import BLOSC, BZIP2, DEFLATE, FLETCHER32, SHUFFLE, ZSTD, Filter, spec_for

__all__ = ["Pipeline", "effective", "Filter", "spec_for", "parse_filter_spec", "format_filter_spec",
           "BLOSC", "BZIP2", "DEFLATE", "FLETCHER32", "SHUFFLE", "ZSTD"]
