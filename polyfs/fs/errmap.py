"""The decorator that maps every exception of a FUSE handler to an errno reply."""
from __future__ import annotations

import errno
import functools
import logging
from typing import Any, Callable

import pyfuse3
import trio

from ..errors import Incomplete, PolyfsError, errno_of, one_line
from .overlay import StillLost

log = logging.getLogger("polyfs.fs.operations")


WRITE_OPS = {"create", "write", "flush", "fsync", "release", "setattr", "mkdir", "rmdir", "unlink", "rename"}


def fuse_errors(fn: Callable) -> Callable:
    """Map exceptions to FUSEError in one place; never let one escape to pyfuse3."""

    @functools.wraps(fn)
    async def wrapper(self, *args: Any) -> Any:
        try:
            return await fn(self, *args)
        except pyfuse3.FUSEError:
            raise
        except trio.Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - the one place that maps them
            code = errno_of(exc)
            if isinstance(exc, StillLost):
                log.debug("%s: %s -> %s (said before)", fn.__name__, one_line(exc), errno.errorcode.get(code, code))
            elif code == errno.EIO and not isinstance(exc, PolyfsError):
                self._log_unexpected(fn.__name__, exc)
            elif fn.__name__ in WRITE_OPS and code not in (errno.ENOENT, errno.EEXIST) \
                    and not (fn.__name__ == "flush" and isinstance(exc, Incomplete)):
                log.warning("%s refused (%s): %s", fn.__name__, errno.errorcode.get(code, code), one_line(exc))
            else:
                log.debug("%s: %s -> %s", fn.__name__, exc, errno.errorcode.get(code, code))
            raise pyfuse3.FUSEError(code) from None

    return wrapper


