"""Shared fixtures: a private cache folder for the whole session, and the full corpus loaded once."""

import os
from pathlib import Path

import pytest

CORPUS = os.environ.get("ATTNLAB_DATA")


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Never write the tokenized cache into the user's real ~/.cache during tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture(scope="session")
def corpus_path() -> str:
    """The shared fra-eng.zip; tests that need it skip only when it is absent."""
    if not (CORPUS and Path(CORPUS).is_file()):
        pytest.skip("set ATTNLAB_DATA to the shared fra-eng.zip")
    return CORPUS


@pytest.fixture(scope="session")
def full_data(corpus_path):
    from attnlab.data import load_translation_data

    return load_translation_data(corpus_path)
