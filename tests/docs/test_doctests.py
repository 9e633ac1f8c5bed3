"""The `Examples:` sections of the docstrings run as doctests (they are documentation that must stay true).

The modules are found, not listed: every module of src/attnlab whose source holds a `>>>`; each must attempt
at least one example (an example that only ever skips documents nothing that is checked)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "attnlab"


def doctest_modules() -> list[str]:
    """The dotted names of the package's modules whose source holds an example (`>>>`)."""
    return sorted(
        ".".join(("attnlab", *path.relative_to(PACKAGE).with_suffix("").parts))
        for path in PACKAGE.rglob("*.py")
        if ">>>" in path.read_text(encoding="utf-8")
    )


MODULES = doctest_modules()


def test_the_examples_are_found():
    # Named here so that losing their Examples (or a broken search) shows: the chapter's core objects.
    for name in ("attnlab.models.transformer", "attnlab.decoding.search", "attnlab.decoding.translator"):
        assert name in MODULES
    assert len(MODULES) >= 40


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, one_thread):
    import torch

    torch.manual_seed(0)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (run with -s to see them)"
    assert result.attempted > 0, f"{name} has a `>>>` but no example ran (all skipped, or not in a docstring)"
