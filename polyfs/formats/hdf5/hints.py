"""What the HDF5 view keeps of a written or imported file beyond the model (view hints).

Kept in an object's ``polyfs`` record (a group's beside its ``implicit`` flag, a dataset's in
its creation properties, where the Zarr and N5 views keep theirs; HSDS ignores the key), under
names starting ``hdf5_`` (a rewrite through another view keeps them):

- the root group's :data:`SUPERBLOCK_HINT`: the superblock version the file was written with
  (2 or 3; absent: 0). An SWMR writer needs 3 again when it reopens the file;
- a group's or dataset's :data:`UNTRACKED_HINT`: the object did not track its attributes'
  creation order (h5py's default; netCDF-C's objects made in an ``"a"`` session). HDF5 lists
  them by name then, but iterating natively (netCDF-C, pyfive) in the order of the object
  header's messages, which the model keeps: the view's header tracks no order either, so
  both kinds of reader see what they saw in the file;
- a group's :data:`LINKS_UNTRACKED_HINT`: the group did not track its links' creation order
  (h5py's default). HDF5 lists its links by name then (h5py's ``list(group)``), so the view's
  group tracks no link order either and lists them as the file did (netCDF-C, which needs
  every group to track it, cannot open such a file for writing: neither could it the file).
"""
from __future__ import annotations

from typing import Any

from ...model.editor import group_hints
from ...model.schema import Dataset, Group
from .structs import SUPERBLOCK_VERSIONS

SUPERBLOCK_HINT = "hdf5_superblock"
UNTRACKED_HINT = "hdf5_attributes_untracked"
LINKS_UNTRACKED_HINT = "hdf5_links_untracked"


def hints(obj: Any) -> dict[str, Any]:
    """The view hints of a group or dataset (others have none)."""
    if isinstance(obj, Group):
        return group_hints(obj)
    if isinstance(obj, Dataset):
        got = obj.creation_properties.get("polyfs")
        return got if isinstance(got, dict) else {}
    return {}


def set_hint(obj: Any, key: str, value: Any) -> None:
    """Record one hint on a group or dataset the caller is making (not yet in the store)."""
    if isinstance(obj, Group):
        flags = obj.extra.get("polyfs")
        obj.extra["polyfs"] = {**(flags if isinstance(flags, dict) else {}), key: value}
    elif isinstance(obj, Dataset):
        obj.creation_properties["polyfs"] = {**hints(obj), key: value}


def keep_superblock_version(root: Any, f: Any) -> None:
    """Record the superblock version of the h5py file ``f`` on the new domain's ``root`` group
    (none for 0, the view's default, or when there is no new root: an existing domain's)."""
    version = int(f.id.get_create_plist().get_version()[0])
    if isinstance(root, Group) and version and version in SUPERBLOCK_VERSIONS:
        set_hint(root, SUPERBLOCK_HINT, version)


def tracks_attribute_order(obj: Any) -> bool:
    """Whether the view's header of ``obj`` numbers its attributes in creation order."""
    return not hints(obj).get(UNTRACKED_HINT)


def tracks_link_order(g: Any) -> bool:
    """Whether the view's group ``g`` numbers its links in creation order (and lists them so)."""
    return not hints(g).get(LINKS_UNTRACKED_HINT)


def file_tracks_link_order(h5obj: Any) -> bool | None:
    """Whether an h5py group (or file: its root) tracks its links' creation order (None: not a
    group)."""
    from h5py import h5f, h5g, h5p

    gid = h5obj.id
    if not isinstance(gid, h5g.GroupID):
        return None
    try:
        if isinstance(gid, h5f.FileID):  # its creation properties are the file's, not the root's
            gid = h5g.open(gid, b"/")
        return bool(gid.get_create_plist().get_link_creation_order() & h5p.CRT_ORDER_TRACKED)
    except Exception:  # noqa: BLE001 - no plist to ask
        return None


def record_untracked_orders(h5obj: Any, model: Any) -> None:
    """Hint on the model object made from ``h5obj`` the creation orders it did not track
    (attributes: netCDF-C's objects made in an "a" session, h5py's; links: h5py's groups)."""
    if file_tracks_attribute_order(h5obj) is False:
        set_hint(model, UNTRACKED_HINT, True)
    if isinstance(model, Group) and file_tracks_link_order(h5obj) is False:
        set_hint(model, LINKS_UNTRACKED_HINT, True)


def file_tracks_attribute_order(h5obj: Any) -> bool | None:
    """Whether an h5py group or dataset tracks its attributes' creation order (None: an
    object without creation properties to ask, a committed type)."""
    from h5py import h5p

    try:
        return bool(h5obj.attrs._id.get_create_plist().get_attr_creation_order() & h5p.CRT_ORDER_TRACKED)
    except Exception:  # noqa: BLE001 - no plist to ask
        return None


def native_attribute_order(h5obj: Any, names: list[str]) -> list[str]:
    """``names`` (h5py's listing) in the order of the object's header messages, as HDF5 iterates
    natively: what netCDF-C and pyfive list for an object that tracks no creation order (h5py
    lists it by name). h5py's order when the two do not name the same attributes."""
    from h5py import h5, h5a

    native: list[bytes] = []
    h5a.iterate(h5obj.attrs._id, lambda name: native.append(bytes(name)), index_type=h5.INDEX_NAME,
                order=h5.ITER_NATIVE)
    by_bytes = {n.encode("utf-8", "surrogateescape"): n for n in names}
    ordered = [by_bytes[b] for b in native if b in by_bytes]
    return ordered if len(ordered) == len(names) and set(ordered) == set(names) else names
