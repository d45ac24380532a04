"""Committed types still in use when their last link goes.

HDF5 keeps a committed type whose link a writer deleted (``del f["t"]``) while a dataset or an
attribute still has it as its type: it becomes an anonymous committed type (h5dump's
``"/#800"``), and HSDS never deletes an object a link no longer reaches either. diff.py
removes what the written file no longer reaches by links; a type still in use must stay, or
the store keeps datasets whose type names a deleted ``t-...`` object (the view then shows the
type inline, HSDS clients find no such datatype).
"""
from __future__ import annotations

from collections.abc import Iterable

from ...model import types as T
from ...model.tree import DomainModel


def committed_in_use(model: DomainModel, gone: Iterable[str]) -> set[str]:
    """Ids of committed types the model's objects other than ``gone`` use, as dataset types
    or attribute types (a committed type is a whole type: never a member of another)."""
    gone = set(gone)
    used: set[str] = set()
    for table in (model.groups, model.datasets, model.datatypes):
        for oid, obj in table.items():
            if oid in gone:
                continue
            types = [a.type for a in obj.attributes.values()]
            if table is model.datasets:
                types.append(obj.type)
            used.update(t.id for t in types if isinstance(t, T.Committed))
    return used
