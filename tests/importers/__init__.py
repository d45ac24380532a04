"""Import tests (a package, so its conftest.py does not shadow tests/conftest.py)."""
