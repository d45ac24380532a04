"""Object store backends behind one interface (see base.Store)."""
from .base import Listing, ObjectInfo, Store
from .registry import open_store

__all__ = ["Listing", "ObjectInfo", "Store", "open_store"]
