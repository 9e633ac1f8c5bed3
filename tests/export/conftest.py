"""A tiny randomly initialised MarianMTModel and its MarianTokenizer, built without network
(`attnlab.testing.tiny_marian`: a SentencePiece model trained on a few hundred generated sentences,
numbered by a Marian-style vocab.json)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from attnlab.testing import sentences, tiny_marian

__all__ = ["sentences"]  # the marian and pruned-export tests import it from here


@pytest.fixture(scope="session")
def marian_dir(tmp_path_factory):
    """Folder as `save_pretrained` writes it: config.json, model.safetensors, generation_config.json,
    source.spm, target.spm, vocab.json, tokenizer_config.json."""
    return tiny_marian(tmp_path_factory.mktemp("marian"))
