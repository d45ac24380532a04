"""The HSDS-schema data model: ids, keys, types, objects, catalog."""
