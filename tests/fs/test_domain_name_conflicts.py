"""Tier 2: a new domain made through a view (``mkdir zarr/<name>.zarr``, a new file in
``hdf5/``) whose name would hide another domain in some view is refused, store unchanged:
``/t2.h5`` would be ``tiff/t2``, where the domain ``/t2/x.h5`` has its folder."""
from __future__ import annotations

import errno

import pytest
from test_write_semantics import refused
from writeharness import FS, unique_store_url

from polyfs.model.catalog import Catalog
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store


@pytest.fixture
def nested():
    url = unique_store_url("conflict")
    with DomainWriter(Catalog(open_store(url, create=True)), "/t2/x.h5"):
        pass  # an empty domain inside folder /t2
    f = FS(url)
    assert "t2" in f.ls("tiff")
    yield f
    f.close()


def test_mkdir_of_a_domain_that_would_hide_a_folder_is_refused(nested, caplog):
    refused(nested, errno.EEXIST, nested.mkdir, "zarr/t2.zarr", caplog=caplog, names="tiff/t2")
    refused(nested, errno.EEXIST, nested.mkdir, "n5/t2.n5")
    nested.mkdir("zarr/t3.zarr")  # no other domain there: made
    assert "t3" in nested.ls("tiff")


def test_a_new_hdf5_file_that_would_hide_a_folder_is_refused(nested):
    refused(nested, errno.EOPNOTSUPP, nested.write_file, "hdf5/t2.h5", b"")
    assert nested.ls("tiff/t2") == ["x"]
