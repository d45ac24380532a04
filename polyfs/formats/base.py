"""What a format package declares about itself: one :class:`Format` per package.

The rest of polyfs (the mount's view tree, ``polyfs info``, the import
driver, the write dispatch) reaches a format only through this descriptor,
so adding a format means adding a package and naming it in
:data:`polyfs.formats.PACKAGES`; nothing else branches on a format's name.
Modules are imported on first use: a read-only mount never imports an
importer (h5py, tifffile), a daemon never imports the writers it lacks.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from ..model.schema import Dataset
    from ..model.tree import DomainModel
    from ..views.base import Node, ViewContext
    from ..codecs.pipeline import Pipeline


class ViewModule(Protocol):
    """A format's ``view`` module: the model of one domain -> its node in the mount."""

    def domain_node(self, model: "DomainModel", ctx: "ViewContext", name: str) -> "Node": ...

    def describe(self, ds: "Dataset", pipe: "Pipeline") -> str: ...


class SourceModule(Protocol):
    """A format's ``source`` module: import a file or directory of that format."""

    def claims(self, path: Path) -> bool: ...

    def import_into(self, path: Path, writer: Any, opts: Any) -> None: ...


@dataclass(frozen=True)
class Format:
    name: str  # the view directory under the mount root ("zarr")
    package: str  # the format's package ("polyfs.formats.zarr")
    suffix: str  # appended to a domain's stem in this view (".zarr"; "" for per-dataset trees)
    kind: str = "dir"  # what the view makes of a domain: "dir" or "file"
    has_source: bool = False  # ``source.py``: polyfs import reads this format
    has_ingest: bool = False  # ``ingest.py`` provides ``make_ingester``: the view takes writes
    source_suffixes: tuple[str, ...] = ()  # file-name suffixes of sources (default domain names)
    keeps_names: tuple[str, ...] = ()  # domains named so show under their own name ("x.nc", not "x.nc.h5")
    runs_filters: bool = False  # ``filters.py``: codes chunks under filters outside the table (opaque)

    def _module(self, name: str) -> ModuleType:
        return importlib.import_module(f"{self.package}.{name}")

    def view(self) -> ViewModule:
        return self._module("view")  # type: ignore[return-value]

    def source(self) -> SourceModule:
        return self._module("source")  # type: ignore[return-value]

    def filter_runner(self) -> ModuleType:
        """The ``filters`` module: ``why_not(pipe, encode)`` and ``coder(pipe)``."""
        return self._module("filters")

    def ingester_factory(self) -> Callable[..., Any]:
        return self._module("ingest").make_ingester  # type: ignore[no-any-return]


def json_object(data: bytes) -> dict[str, Any]:
    """A metadata file's JSON object (every JSON-metadata format reads them so);
    ValueError naming what is wrong."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj
