"""The `Examples:` sections of the public docstrings run as doctests (they are documentation that
must stay true)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "attnlab.attention.multihead",
    "attnlab.attention.dropout",
    "attnlab.attention.masking",
    "attnlab.attention.recording",
    "attnlab.models.transformer",
    "attnlab.models.transformer_layers",
    "attnlab.decoding.search",
    "attnlab.decoding.translator",
    "attnlab.metrics",
    "attnlab.chapter.report",
    "attnlab.utils.extras",
    "attnlab.kernels.switches",
    "attnlab.kernels.few_queries",
    "attnlab.kernels.finite",
    "attnlab.kernels.int8_rows",
    "attnlab.kernels.layer_norm",
    "attnlab.attention.projections",
    "attnlab.utils.quantize",
    "attnlab.attention.positions.rope",
    "attnlab.attention.positions.alibi",
    "attnlab.analysis.positions",
    "attnlab.viz.positions",
    "attnlab.training.settings",
    "attnlab.export.tokens",
    "attnlab.utils.runtime",
    "attnlab.training.progress",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, one_thread):
    import torch

    torch.manual_seed(0)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (run with -s to see them)"
    if name in ("attnlab.models.transformer", "attnlab.decoding.search", "attnlab.decoding.translator"):
        assert result.attempted > 0, f"{name} lost its Examples: section"
