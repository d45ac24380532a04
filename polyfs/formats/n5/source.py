"""Import an N5 container: groups, datasets and attributes from ``attributes.json``.

N5 lists dimensions fastest first; a dataset's shape and chunk shape are the
reversed ``dimensions`` and ``blockSize``, and a block's payload is exactly
the C-order bytes of the chunk, always big-endian. Block payloads compressed
with ``gzip`` (a gzip member, or a zlib stream with ``useZlib``), ``zstd``,
``blosc`` or ``bzip2`` are copied when the block header declares the full
block size; gzip members become zlib streams without recompressing. N5
writers truncate edge blocks: those are decoded, padded with the fill value
(zero) and re-encoded with the dataset's filter. ``raw`` datasets, and
compressions outside the table (xz, lz4), are decoded (by whichever reads the
latter: tensorstore, or z5py for lz4) and written with the chosen encoding.
"""
from __future__ import annotations

import json
import logging
import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...codecs.pipeline import Pipeline, gzip_to_zlib
from ...codecs.registry import DEFLATE, ZSTD, Filter
from ...errors import CodecError, SourceError
from ...model import types as T
from ...model.schema import UNLIMITED, Shape
from ...model.writer import DomainWriter
from .spec import META, MODE_DEFAULT, MODE_NAMES, MODE_VARLENGTH, RESERVED, compression_of, geometry, numpy_dtype, \
    is_dataset_attributes, parse_block_header
from ...importers.common import (dir_below, source_errors, write_plans, ChunkSink, ImportOptions, Progress, padded, read_json_object,
                                 set_json_attrs, stored_pipeline_filters, write_decoded)
from ...codecs.sniff import zstd_has_content_size

log = logging.getLogger(__name__)

@dataclass
class _Plan:
    path: Path
    ds: Any
    dims: tuple[int, ...]  # C order
    block: tuple[int, ...]  # C order
    dtype: np.dtype  # big-endian numpy dtype of the payload
    filter: Filter | None  # the copied compression, None = decode
    gzip_member: bool = False
    tensorstore: bool = False  # compression only tensorstore decodes
    nchunks: int = 0


class N5Importer:
    def __init__(self, path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
        self.path = Path(path)
        self.writer = writer
        self.opts = opts

    def err(self, where: Path | str, cause: object) -> SourceError:
        return SourceError(where, " ".join(str(cause).split()))

    def attrs_of(self, node: Path) -> dict:
        f = node / META
        return read_json_object(f) if f.exists() else {}

    def run(self) -> None:
        with source_errors(lambda cause: self.err(self.path, cause)):
            plans: list[_Plan] = []
            root = self.attrs_of(self.path)
            if is_dataset_attributes(root):
                plans.append(self._plan(self.path, "data", root, self.writer.root))
            else:
                set_json_attrs(self.writer.root, root, skip=("n5",))
                self._walk(self.path, self.writer.root, plans)
            write_plans(plans, self._write, self.path.name, self.opts.progress)

    def _walk(self, node: Path, group, plans: list[_Plan]) -> None:
        for child in sorted(p for p in node.iterdir() if p.is_dir() and not p.name.startswith(".")):
            attrs = self.attrs_of(child)
            if is_dataset_attributes(attrs):  # n5-java's rule: a group may have a dataType
                plans.append(self._plan(child, child.name, attrs, group))
            else:
                g = self.writer.add_group(group, child.name)
                set_json_attrs(g, attrs, skip=("n5",))
                self._walk(child, g, plans)

    # -- datasets ---------------------------------------------------------------------
    def _plan(self, where: Path, name: str, attrs: dict, group) -> _Plan:
        mf = where / META
        try:
            dtname = attrs["dataType"]
            npdt = numpy_dtype(dtname)
            if npdt is None:
                raise self.err(mf, f"dataType {dtname!r} is not supported")
            dims, block = geometry(attrs, npdt.itemsize)
        except KeyError as exc:
            raise self.err(mf, f"malformed dataset attributes: {exc}") from None
        except ValueError as exc:
            raise self.err(mf, exc) from None
        dtype = T.from_numpy(npdt)
        try:
            comp = compression_of(attrs, npdt, block)
        except ValueError as exc:
            raise self.err(mf, exc) from None
        filt = comp.filters[0] if comp.filters else None
        ts_only = comp.filters is None
        member = comp.gzip_member
        filters = list(comp.filters) if comp.filters else stored_pipeline_filters(self.opts, dtype, block)
        growable = tuple(UNLIMITED for _ in dims)  # N5 has no maximum shape: writers resize through the view
        ds = self.writer.add_dataset(group, name, dtype, Shape("simple", dims, growable), block, filters)
        set_json_attrs(ds, attrs, skip=RESERVED + ("n5",))  # "n5": the version of a container that is one dataset
        plan = _Plan(where, ds, dims, block, npdt, filt, member, ts_only)
        plan.nchunks = ds.nchunks if all(dims) else 0
        return plan

    # -- blocks -------------------------------------------------------------------------
    def _blocks(self, plan: _Plan):
        """(C-order grid coords, file) of every block file the dataset has."""
        rank = len(plan.dims)
        grid = plan.ds.grid
        for dirpath, dirnames, filenames in os.walk(plan.path):
            rel = Path(dirpath).relative_to(plan.path).parts
            if any(not p.isdigit() for p in rel) or len(rel) >= rank:
                dirnames[:] = []
                if len(rel) >= rank:
                    continue
            dirnames.sort(key=lambda s: (len(s), s))
            for fn in sorted(filenames, key=lambda s: (len(s), s)):
                if not fn.isdigit() or len(rel) != rank - 1:
                    continue
                n5 = [int(p) for p in rel] + [int(fn)]
                coords = tuple(reversed(n5))
                if all(c < g for c, g in zip(coords, grid)):
                    yield coords, Path(dirpath) / fn

    def parse_block(self, data: bytes, rank: int, where: Path) -> tuple[tuple[int, ...], bytes]:
        """(C-order block dims, payload) of one block file."""
        try:
            head = parse_block_header(data)
            if head.mode not in (MODE_DEFAULT, MODE_VARLENGTH):
                raise ValueError(f"{MODE_NAMES[head.mode]}-mode blocks are not supported")
            if len(head.dims_n5) != rank:
                raise ValueError(f"header has {len(head.dims_n5)} dims, the dataset {rank}")
            if head.num_elements is not None and head.num_elements != math.prod(head.dims):
                raise ValueError("varlength blocks are not supported")
        except ValueError as exc:
            raise self.err(where, f"bad N5 block header: {exc}") from None
        return head.dims, data[head.size:]

    def _write(self, plan: _Plan, bar: Progress) -> None:
        if not all(plan.dims):
            return
        if plan.tensorstore:
            self._write_tensorstore(plan, bar)
            return
        w = self.writer
        ds = plan.ds
        raw_pipe = Pipeline((plan.filter,) if plan.filter else (), plan.dtype.itemsize)

        def convert(dims: tuple[int, ...], payload: bytes) -> tuple[bytes, int | None]:
            crc = None
            if plan.gzip_member:
                payload, crc = gzip_to_zlib(payload)
            if plan.filter is not None and dims == plan.block and \
                    (plan.filter.id != ZSTD or zstd_has_content_size(payload)):
                if crc is None and plan.filter.id == DEFLATE:
                    crc = zlib.crc32(zlib.decompress(payload))
                return payload, crc
            # a truncated edge block, raw data, or a streamed zstd frame: decode, pad, re-encode
            nbytes = math.prod(dims) * plan.dtype.itemsize
            arr = np.frombuffer(raw_pipe.decode(payload, nbytes), dtype=plan.dtype).reshape(dims)
            return w.encode_chunk(ds, padded(ds, arr))

        try:
            with ChunkSink(w) as sink:
                for coords, f in self._blocks(plan):
                    dims, payload = self.parse_block(f.read_bytes(), len(plan.dims), f)
                    sink.job(ds, coords, convert, dims, payload)
                    bar(1)
        except CodecError as exc:
            raise self.err(plan.path, exc) from None

    def _write_tensorstore(self, plan: _Plan, bar: Progress) -> None:
        """A compression outside polyfs's table: decoded by tensorstore (xz), else by z5py
        (lz4: n5-java's LZ4 block stream, which only z5py reads here)."""
        import tensorstore as ts

        try:
            store = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(plan.path)}},
                            read=True).result()
        except Exception as ts_exc:  # tensorstore raises ValueError and its own kinds
            read = self._z5py_reader(plan, ts_exc)
        else:
            def read(region):
                n5_region = tuple(reversed(region))
                try:
                    return np.asarray(store[n5_region].read().result()).T
                except Exception as exc:
                    raise self.err(plan.path, f"tensorstore cannot decode a block ({exc})") from None

        coords = [c for c, _ in self._blocks(plan)]
        write_decoded(self.writer, plan.ds, read, coords, skip_fill=False, progress=bar)

    def _z5py_reader(self, plan: _Plan, ts_exc: Exception):
        try:
            import z5py

            class _Parent(z5py.File):
                def _check_version(self) -> None:
                    """The parent of a dataset need not be a container root with a version."""

            dset = _Parent(str(plan.path.parent), "r", use_zarr_format=False)[plan.path.name]
        except Exception as exc:  # z5py raises RuntimeError, KeyError and its own kinds
            raise self.err(plan.path, f"compression not in polyfs's table and neither tensorstore ({ts_exc}) "
                                      f"nor z5py ({exc}) can read it") from None

        def read(region):
            try:
                return np.asarray(dset[tuple(region)])
            except Exception as exc:
                raise self.err(plan.path, f"z5py cannot decode a block ({exc})") from None

        return read


def claims(path: Path) -> bool:
    """A directory with an ``attributes.json`` (an N5 container or dataset), or a container
    without one whose datasets have theirs (tensorstore writes no container attributes)."""
    return path.is_dir() and ((path / META).is_file() or _dataset_below(path))


def _dataset_below(root: Path) -> bool:
    """Whether a directory below ``root`` holds an N5 dataset's ``attributes.json``
    (unreadable or non-N5 JSON does not count)."""
    return dir_below(root, _is_dataset_dir)


def _is_dataset_dir(d: Path) -> bool:
    try:
        attrs = json.loads((d / META).read_bytes()) if (d / META).is_file() else {}
    except (OSError, ValueError):
        return False
    return isinstance(attrs, dict) and is_dataset_attributes(attrs)


def import_into(path: Path, writer: DomainWriter, opts: ImportOptions) -> None:
    N5Importer(path, writer, opts).run()
