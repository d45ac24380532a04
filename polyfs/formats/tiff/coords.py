"""Reading a CF coordinate variable's values for the TIFF view's GeoTransform (geo.py).

geo.py is pure: it is handed a reader. This is that reader: the only place the TIFF and
polyglot views read chunk data to plan a file (two small 1-D datasets, once per plan).
"""
from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from ...errors import PolyfsError
from ...model import values
from ...model.schema import Dataset
from ...views.base import ViewContext
from ...views.transcode import fetch_chunk

log = logging.getLogger(__name__)

MAX_COORDINATES = 1 << 20  # longest coordinate variable read for a GeoTransform


def coordinate_reader(ctx: ViewContext) -> Callable[[Dataset], np.ndarray | None]:
    """Reads a small 1-D numeric dataset (a CF coordinate variable) whole, for geo.py; None
    for another kind, and (one log line) when its chunks cannot be read: the file is then
    served without the transform, not refused."""

    def read(cds: Dataset) -> np.ndarray | None:
        n = int(cds.shape.array_shape[0]) if cds.rank == 1 else 0
        dt = cds.type.numpy()
        if not 0 < n <= MAX_COORDINATES or dt.kind not in "iuf" or cds.type.is_vlen:
            return None
        try:
            idx = ctx.catalog.chunk_index(cds)
            pipe = ctx.catalog.pipeline(cds)
            out = values.fill_array(cds.type, cds.fill_value, (n,))
            c = int(cds.chunks[0])
            for lin in idx.linear:
                raw = pipe.decode(fetch_chunk(ctx, idx.key(int(lin))), cds.chunk_nbytes)
                block = np.frombuffer(raw, dtype=dt, count=c)
                start = int(lin) * c
                out[start:start + c] = block[:n - start]
            return out
        except PolyfsError as exc:
            log.warning("tiff: coordinates %s not read (%s): no GeoTransform from them", cds.id, exc)
            return None

    return read
