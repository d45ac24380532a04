"""One domain's object graph, loaded: groups, datasets, committed types.

The HDF5 model is a graph (hard links may point at one object from several
groups). Views that are trees (Zarr, N5, TIFF) need one canonical path per
object; :meth:`DomainModel.walk` gives it deterministically (links in name
order, depth first, first path wins) and reports every other link as an
alias for the view to express in its own way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union

from ..errors import NotFound
from .schema import Dataset, Datatype, Domain, Group, Link

Obj = Union[Group, Dataset, Datatype]


@dataclass
class Entry:
    """One object reached by the canonical walk."""

    path: str  # "/" for the root
    obj: Obj
    parent: "Entry | None" = None


@dataclass
class DomainModel:
    domain: Domain
    groups: dict[str, Group] = field(default_factory=dict)
    datasets: dict[str, Dataset] = field(default_factory=dict)
    datatypes: dict[str, Datatype] = field(default_factory=dict)
    # store key -> version tag of each metadata object as loaded: changes are
    # conditional writes against these (another host may have changed one since)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return self.domain.path

    @property
    def root(self) -> Group:
        if not self.domain.root or self.domain.root not in self.groups:
            raise NotFound(f"domain {self.domain.path} has no root group")
        return self.groups[self.domain.root]

    def get(self, obj_id: str) -> Obj:
        for table in (self.groups, self.datasets, self.datatypes):
            if obj_id in table:
                return table[obj_id]
        raise NotFound(f"object {obj_id} is not in domain {self.domain.path}")

    def committed_types_used(self, skip: set[str] | frozenset[str] = frozenset()) -> set[str]:
        """Ids of the committed types the objects (other than ``skip``) use as dataset or
        attribute types (a committed type is a whole type, never a member of another): the
        unlinked ones a load must fetch, the ones a write that drops their link must keep."""
        used: set[str] = set()
        for table in (self.groups, self.datasets, self.datatypes):
            for oid, obj in table.items():
                if oid in skip:
                    continue
                types = [a.type for a in obj.attributes.values()]
                if isinstance(obj, Dataset):
                    types.append(obj.type)
                used.update(t.committed_id for t in types if t.committed_id)
        return used

    # -- the canonical tree ------------------------------------------------
    def walk(self) -> Iterator[Entry]:
        """Every reachable object once, at its canonical path, parents first."""
        if not self.domain.root:
            return
        seen: set[str] = set()
        stack = [Entry("/", self.root)]
        while stack:
            entry = stack.pop()
            if entry.obj.id in seen:
                continue
            seen.add(entry.obj.id)
            yield entry
            if isinstance(entry.obj, Group):
                children = []
                for name in sorted(entry.obj.links):
                    link = entry.obj.links[name]
                    if link.kind != "hard" or link.id in seen:
                        continue
                    try:
                        child = self.get(link.id)
                    except NotFound:
                        continue  # dangling hard link: nothing to show
                    children.append(Entry(_join(entry.path, name), child, entry))
                stack.extend(reversed(children))

    def canonical_paths(self) -> dict[str, str]:
        """object id -> canonical path."""
        return {e.obj.id: e.path for e in self.walk()}

    def aliases(self) -> Iterator[tuple[str, Link]]:
        """(group path, link) for links that are not the canonical edge to their target:
        soft and external links, and extra hard links to already-placed objects."""
        paths = self.canonical_paths()
        for gid, gpath in paths.items():
            group = self.groups.get(gid)
            if group is None:
                continue
            for name in sorted(group.links):
                link = group.links[name]
                if link.kind != "hard" or paths.get(link.id) != _join(gpath, name):
                    yield gpath, link

    def resolve(self, path: str) -> Obj:
        """The object at an HDF5 path, following hard and soft links inside the domain."""
        obj: Obj = self.root
        parts = [p for p in path.split("/") if p]
        hops = 0
        i = 0
        while i < len(parts):
            if not isinstance(obj, Group) or parts[i] not in obj.links:
                raise NotFound(f"{path} not found in {self.domain.path}")
            link = obj.links[parts[i]]
            if link.kind == "hard":
                obj = self.get(link.id)
                i += 1
            elif link.kind == "soft" and hops < 40:
                hops += 1
                target = link.h5path or ""
                rest = parts[i + 1:]
                base = target if target.startswith("/") else _join("/" + "/".join(parts[:i]), target)
                parts = [p for p in base.split("/") if p] + rest
                obj, i = self.root, 0
            else:
                raise NotFound(f"{path}: link {parts[i]!r} leaves the domain")
        return obj


def _join(parent: str, name: str) -> str:
    return ("" if parent == "/" else parent) + "/" + name
