"""Tier 2: directories above domains are HSDS folders, made and removed as on a disk.

``mkdir zarr/proj`` (a name that is no domain's in the view) makes folder ``/proj`` (a
``.domain.json`` without a root group, as ``hstouch /proj/`` does), a directory in every
view, so ``mkdir -p proj/run1 && cp x.h5 proj/run1/`` and ``cp -r`` of a directory of
arrays work; ``rmdir`` removes an empty one, and ``rm -r`` of a directory of domains no
longer fails on the directories once their domains are gone. Names the views give domains
(``x.zarr``, ``x.n5``, ``x.h5``, ``x.nc``, hidden names) are refused, and so is a folder
that would hide a domain (or be hidden by one) in a view; the store is then unchanged.
"""
from __future__ import annotations

import errno
import json

import pytest
from test_write_semantics import refused
from writeharness import FS, unique_store_url, zarr_group_meta

from polyfs.model.catalog import Catalog
from polyfs.model.writer import DomainWriter
from polyfs.store import open_store

VIEWS = ("zarr", "n5", "hdf5", "tiff", "polyglot")


@pytest.fixture
def fs():
    f = FS()
    yield f
    f.close()


def folder_body(fs: FS, path: str) -> dict | None:
    key = path.strip("/") + "/.domain.json"
    raw = fs.snapshot().get(key)
    return None if raw is None else json.loads(raw)


def test_mkdir_above_domains_makes_a_folder_shown_in_every_view(fs):
    fs.mkdir("zarr/proj")
    body = folder_body(fs, "/proj")
    assert body is not None and "root" not in body and body["owner"]  # an HSDS folder
    assert fs.domains() == []
    for view in VIEWS:
        assert fs.is_dir(f"{view}/proj") and fs.ls(f"{view}/proj") == [], view
    # a domain made inside it, through another view
    fs.mkdir("n5/proj/run.n5")
    assert fs.domains() == ["/proj/run.h5"]
    assert fs.ls("zarr/proj") == ["run.zarr"] and fs.ls("hdf5/proj") == ["run.h5"]
    assert fs.ls("tiff/proj") == ["run"]
    refused(fs, errno.EEXIST, fs.mkdir, "hdf5/proj")  # already there, in every view


def test_nested_folders_are_made_one_level_at_a_time_like_mkdir_p(fs):
    fs.makedirs("hdf5/a/b/c")
    assert sorted(Catalog(open_store(fs.url)).list_tree()[1]) == ["/a", "/a/b", "/a/b/c"]
    fs.mkdir("zarr/a/b/c/x.zarr")
    fs.write_json("zarr/a/b/c/x.zarr/zarr.json", zarr_group_meta({"k": 1}))
    assert fs.domains() == ["/a/b/c/x.h5"]
    assert fs.read_json("zarr/a/b/c/x.zarr/zarr.json")["attributes"] == {"k": 1}
    assert fs.ls("tiff/a/b/c") == ["x"]


def test_rmdir_removes_an_empty_folder_and_refuses_one_with_a_domain(fs):
    fs.mkdir("zarr/proj")
    fs.mkdir("zarr/proj/sub")
    fs.mkdir("zarr/proj/sub/run.zarr")
    refused(fs, errno.ENOTEMPTY, fs.rmdir, "zarr/proj/sub")
    refused(fs, errno.ENOTEMPTY, fs.rmdir, "hdf5/proj")
    fs.rm_r("zarr/proj")  # the domain, then each folder once emptied
    assert fs.domains() == [] and Catalog(open_store(fs.url)).list_tree() == ([], [])
    for view in VIEWS:
        assert "proj" not in fs.ls(view), view


def test_rm_r_of_directories_that_only_hold_domains_succeeds():
    """Directories implied by domain paths (``/proj/sub/a.h5`` imported, no folder objects):
    ``rm -r`` removes the domain, then the directories, without EPERM."""
    url = unique_store_url("folders")
    with DomainWriter(Catalog(open_store(url, create=True)), "/proj/sub/a.h5"):
        pass
    fs = FS(url)
    try:
        assert fs.ls("zarr/proj") == ["sub"]
        refused(fs, errno.ENOTEMPTY, fs.rmdir, "zarr/proj/sub")
        fs.rm_r("zarr/proj")
        assert fs.domains() == [] and "proj" not in fs.ls("zarr") and "proj" not in fs.ls("tiff")
    finally:
        fs.close()


@pytest.mark.parametrize("path", ["zarr/x.n5", "zarr/y.h5", "n5/z.zarr", "zarr/w.nc", "zarr/.hidden",
                                  "hdf5/v.h5", "hdf5/.cache"])
def test_names_the_views_give_domains_are_refused_as_folders(fs, path, caplog):
    refused(fs, errno.EPERM, fs.mkdir, path, caplog=caplog, names=path)


def test_a_folder_that_would_hide_a_domain_is_refused(fs, caplog):
    fs.mkdir("zarr/t2.zarr")  # domain /t2.h5: tiff/t2
    refused(fs, errno.EEXIST, fs.mkdir, "zarr/t2", caplog=caplog, names="tiff/t2")
    fs.mkdir("zarr/t3")  # folder /t3: tiff/t3
    fs.mkdir("zarr/t3/inner.zarr")  # inside it is where domains go
    assert fs.domains() == ["/t2.h5", "/t3/inner.h5"]
    refused(fs, errno.EEXIST, fs.mkdir, "zarr/t3.zarr")  # would be tiff/t3, holding /t3/inner.h5


def test_an_empty_folder_does_not_block_a_domain_of_its_tiff_name(fs):
    """HSDS keeps folder ``/t4/`` and domain ``/t4.h5`` apart; only ``tiff/`` names both
    ``tiff/t4``: there the domain is shown, elsewhere both."""
    fs.mkdir("zarr/t4")
    fs.mkdir("zarr/t4.zarr")
    assert fs.domains() == ["/t4.h5"]
    assert {"t4", "t4.zarr"} <= set(fs.ls("zarr")) and fs.ls("tiff") == ["t4"]
    assert fs.ls("tiff/t4") == []  # the (empty) domain


def test_a_folder_made_by_hsds_shows_empty():
    """``hstouch /home/bob/`` (HSDS) leaves folder objects only: they show as directories."""
    url = unique_store_url("folders")
    store = open_store(url, create=True)
    for key in ("home/.domain.json", "home/bob/.domain.json"):
        store.put(key, json.dumps({"owner": "admin", "acls": {}, "created": 1.0, "lastModified": 1.0}).encode())
    fs = FS(url)
    try:
        for view in VIEWS:
            assert fs.ls(f"{view}/home") == ["bob"] and fs.ls(f"{view}/home/bob") == [], view
        fs.mkdir("zarr/home/bob/new.zarr")
        assert fs.domains() == ["/home/bob/new.h5"]
    finally:
        fs.close()
