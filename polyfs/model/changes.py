"""A change to one existing object of a domain, applied as one store write.

A write through a view often changes several things of one object at once
(a rewritten ``zarr.json``: a new shape, new attributes, the shard layout the
writer chose). :class:`ObjectChange` gathers them so the editor validates all
of them first, writes the object's JSON once and installs the new model once
(:meth:`polyfs.model.editor.DomainEditor.apply`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .schema import Attribute, Link


@dataclass
class ObjectChange:
    obj_id: str
    set_attributes: dict[str, Attribute] = field(default_factory=dict)
    remove_attributes: list[str] = field(default_factory=list)
    resize: tuple[int, ...] | None = None  # datasets: a new extent within maxdims
    view_hints: dict[str, Any] | None = None  # datasets: how views lay the array out
    implicit: bool | None = None  # groups: True hides their metadata while empty, False shows it
    links: dict[str, Link] | None = None  # groups: the whole new link table (names added, moved, removed)
    # the attributes' order after the change (a writer re-created one: HDF5 lists it last now)
    attribute_order: tuple[str, ...] | None = None

    def is_empty(self) -> bool:
        return not (self.set_attributes or self.remove_attributes) and self.resize is None \
            and self.view_hints is None and self.implicit is None and self.links is None \
            and self.attribute_order is None
