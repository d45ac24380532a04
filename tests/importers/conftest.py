"""Sources generated once per session (small files), and helpers to import them."""
from __future__ import annotations

from pathlib import Path

import pytest

import corpus


@pytest.fixture(scope="session")
def hdf5_files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hdf5-corpus")
    return {p.stem: p for p in corpus.make_hdf5_corpus(d)}


@pytest.fixture(scope="session")
def tiff_files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tiff-corpus")
    return {p.stem: p for p in corpus.make_tiff_corpus(d)}


@pytest.fixture(scope="session")
def zarr_source(tmp_path_factory) -> Path:
    return corpus.make_zarr_corpus(tmp_path_factory.mktemp("zarr-corpus"))[0]


@pytest.fixture(scope="session")
def n5_sources(tmp_path_factory) -> list[Path]:
    return corpus.make_n5_corpus(tmp_path_factory.mktemp("n5-corpus"))
