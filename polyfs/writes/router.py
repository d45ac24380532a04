"""Where a path of a writable view points: domain, object, and the rest.

``zarr/home/alice/brain.zarr/grp/arr/c/0/1`` is domain ``/home/alice/brain.h5``,
object ``/grp/arr`` (a dataset) and rest ``c/0/1``. Only views whose format
package has an ingester take writes; every other path is read-only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import NotFound, ReadOnly
from ..formats import Format, formats
from ..model.schema import Dataset, Group
from ..model.tree import DomainModel
from ..views.root import DomainList



def writable() -> dict[str, Format]:
    return {f.name: f for f in formats() if f.has_ingest}


@dataclass
class Target:
    view: Format  # the writable view the path is in
    parts: list[str]  # the path below the view directory
    domain: str | None = None  # None: the path is above any domain
    model: DomainModel | None = None
    obj: Group | Dataset | None = None  # the deepest existing object on the path
    h5path: str = "/"
    rest: list[str] = field(default_factory=list)  # components below ``obj``

    @property
    def suffix(self) -> str:
        return self.view.suffix

    def new_domain_path(self) -> str | None:
        """The domain a new ``<name><suffix>`` here would create (a directory, or in a view of one
        file per domain a file, also under a name the view keeps: ``x.nc``), if any."""
        if self.domain is not None or not self.parts:
            return None
        name = self.parts[-1]
        if name.startswith("."):
            return None
        if any(name.endswith(k) and len(name) > len(k) for k in self.view.keeps_names):
            return "/" + "/".join(self.parts)
        if not name.endswith(self.suffix):
            return None
        stem = name[: len(name) - len(self.suffix)]
        if not stem:
            return None
        if any(stem.endswith(k) and len(stem) > len(k) for f in formats() for k in f.keeps_names):
            # the inverse of view_parts: domain /x.nc is zarr/x.nc.zarr, so a new x.nc.zarr (xarray's
            # to_zarr(mode="w") removes and remakes the directory) is /x.nc again, not /x.nc.h5
            return "/" + "/".join(self.parts[:-1] + [stem])
        return "/" + "/".join(self.parts[:-1] + [stem + ".h5"])

    def child_path(self, name: str) -> str:
        return (self.h5path.rstrip("/") + "/" + name) if name else self.h5path


class Router:
    def __init__(self, domains: DomainList, load) -> None:
        self.domains = domains
        self.load = load  # domain path -> DomainModel

    def view_of(self, path: str) -> Format:
        name = path.split("/", 1)[0]
        views = writable()
        if name not in views:
            which = ", ".join(f"{n}/" for n in views)
            raise ReadOnly(f"{path or '/'}: the {name or 'root'} view is read-only (only {which} take writes)")
        return views[name]

    def route(self, path: str) -> Target:
        view = self.view_of(path)
        parts = [p for p in path.split("/")[1:] if p]
        t = Target(view, parts)
        hit = self.domains.domain_at(view.suffix, view.keeps_names, parts)  # the listing's own tree
        if hit is not None:
            t.domain, i = hit
            t.model = self.load(t.domain)
            self._descend(t, parts[i:])
        return t

    @staticmethod
    def _descend(t: Target, below: list[str]) -> None:
        model = t.model
        assert model is not None
        obj = model.root
        path = "/"
        i = 0
        while i < len(below) and isinstance(obj, Group):
            link = obj.links.get(below[i])
            if link is None or link.kind != "hard" or not link.id:
                break
            try:
                obj = model.get(link.id)
            except NotFound:
                break
            path = path.rstrip("/") + "/" + below[i]
            i += 1
        t.obj, t.h5path, t.rest = obj, path, below[i:]
