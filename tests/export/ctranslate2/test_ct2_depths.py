"""CTranslate2 export of a Transformer whose decoder is shallower than its encoder (3 + 1 blocks), trained on
the synthetic task of test_ct2_converter: the spec holds both depths, and CTranslate2's greedy tokens and
alignments equal attnlab's."""

from __future__ import annotations

import random

import pytest
import torch

from attnlab.data import Vocab
from attnlab.models import TransformerConfig

from .test_ct2_converter import (  # skips without ctranslate2
    _alignments,
    _both,
    _saved_dtypes,
    _task,
    _trained_and_exported,
)

ctranslate2 = pytest.importorskip("ctranslate2")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def deep_shallow(tmp_path_factory, one_thread):
    torch.manual_seed(0)
    pairs = _task(random.Random(0), 400)
    vocab = Vocab([w for s, t in pairs for w in (s + " " + t).split()], min_freq=1)
    cfg = TransformerConfig(
        len(vocab), len(vocab), num_hiddens=32, num_heads=4, num_layers=3, decoder_layers=1, ffn_num_hiddens=64,
        dropout=0.0, max_len=32,
    )  # fmt: skip
    return _trained_and_exported(cfg, vocab, pairs, tmp_path_factory.mktemp("ct2-3-1"))


def test_the_spec_holds_three_encoder_layers_and_one_decoder_layer(deep_shallow):
    names = set(_saved_dtypes(deep_shallow[3]))
    assert any(n.startswith("encoder/layer_2/") for n in names)
    assert not any(n.startswith("encoder/layer_3/") for n in names)
    assert any(n.startswith("decoder/layer_0/") for n in names)
    assert not any(n.startswith("decoder/layer_1/") for n in names)


def test_greedy_is_token_identical(deep_shallow):
    translator, ct2, sample, _ = deep_shallow
    ours, theirs = _both(translator, ct2, sample, beam=1)
    assert ours == theirs
    correct = sum(o == [w for w in reversed(s.split()) if w != "w0"] for o, s in zip(ours, sample))
    assert correct >= len(sample) // 3  # learned the task: not two degenerate outputs compared


def test_alignment_equals_ctranslate2_return_attention(deep_shallow):
    translator, ct2, sample, _ = deep_shallow
    ours, theirs = _alignments(translator, ct2, sample)  # the one decoder layer's cross-attention
    assert ours == theirs and sum(len(p) for p in ours) >= len(sample)
