"""When HDF5 writes a dataset's fill value (its fill time), kept in ``creationProperties``
as HSDS and h5pyd spell it (``fillTime``) and served back in the fill value message.

netCDF-C makes its ``NC_NOFILL`` variables with ``H5D_FILL_TIME_NEVER``, and HDF5 readers
ask for it (``H5Pget_fill_time``); without it every dataset read back as "fill if set".
"""
from __future__ import annotations

from typing import Any, Mapping

FILL_TIME_KEY = "fillTime"
# the fill value message's "fill value write time" (HDF5 file format spec, message 0x0005)
_WRITE_TIME = {"H5D_FILL_TIME_ALLOC": 0, "H5D_FILL_TIME_NEVER": 1, "H5D_FILL_TIME_IFSET": 2}
DEFAULT_WRITE_TIME = _WRITE_TIME["H5D_FILL_TIME_IFSET"]


def fill_time_property(dcpl: Any) -> dict[str, str]:
    """``{"fillTime": name}`` for a dataset HDF5 made with a fill time other than the default
    (``H5D_FILL_TIME_IFSET``); ``{}`` otherwise, so ordinary datasets carry nothing new."""
    from h5py import h5d

    try:
        code = dcpl.get_fill_time()
    except (ValueError, TypeError, OSError, RuntimeError):
        return {}
    name = {h5d.FILL_TIME_ALLOC: "H5D_FILL_TIME_ALLOC", h5d.FILL_TIME_NEVER: "H5D_FILL_TIME_NEVER"}.get(code)
    return {FILL_TIME_KEY: name} if name else {}


def write_time(creation_properties: Mapping[str, Any]) -> int:
    """The write-time code of a dataset's fill value message (unknown names: the default)."""
    name = creation_properties.get(FILL_TIME_KEY)
    return _WRITE_TIME.get(name, DEFAULT_WRITE_TIME) if isinstance(name, str) else DEFAULT_WRITE_TIME
