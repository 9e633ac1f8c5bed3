"""The decoding cost model: its recorded-weights count is what `record_attention` keeps on a real model,
every factor of a request raises its estimate, the hostile requests of the robustness sweep are far
over what plain ones cost, and the refusal names the option that saves most."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from attnlab.attention import record_attention
from attnlab.decoding.cost import ModelShape, decode_cost, over_budget, recorded_weights
from attnlab.decoding.options import DecodeOptions
from attnlab.models import Transformer, TransformerConfig

TINY = ModelShape("transformer", layers=2, width=32, heads=2, ffn=64, vocab=76)


class Tiny:
    """What the cost reads of a Translator: its config, batch size and output limit."""

    config: ClassVar[dict] = {"model_type": "transformer", "model": {"num_layers": 2, "num_hiddens": 32, "num_heads": 2,
                                                     "ffn_num_hiddens": 64, "tgt_vocab_size": 76}}  # fmt: skip
    batch_size = 256

    def output_limit(self, S: int, max_len: int | None = None) -> int:
        return max_len or min(200, 2 * S + 10)


def test_recorded_weights_are_what_a_recording_keeps():
    torch.manual_seed(0)
    cfg = TransformerConfig(20, 30, num_hiddens=16, num_heads=4, num_layers=3, ffn_num_hiddens=32, dropout=0.0)
    model = Transformer(cfg).eval()
    S, T = 7, 5
    with record_attention(model) as rec:
        model(torch.randint(3, 20, (1, S)), torch.randint(3, 30, (1, T)), torch.tensor([S]))
    kept = sum(w.numel() for calls in rec.weights.values() for w in calls)
    shape = ModelShape.from_config({"model_type": "transformer", "model": cfg.to_dict()})
    assert recorded_weights(shape, S, T) == kept


def test_config_sizes_are_read():
    shape = ModelShape.from_config(Tiny.config)
    assert shape == TINY
    gru = ModelShape.from_config({"model_type": "bahdanau", "model": {"num_hiddens": 8, "num_layers": 1}})
    assert (gru.kind, gru.ffn, gru.heads) == ("bahdanau", 24, 1)
    assert recorded_weights(gru, 4, 3) == 12  # one additive attention: Lt x Ls


@pytest.mark.parametrize(
    "base, options, texts, maps",
    [
        (None, DecodeOptions(beam=8), 2, False),
        (DecodeOptions(beam=8), DecodeOptions(beam=8, n_best=8, align=True), 2, False),
        (None, DecodeOptions(min_len=499, max_len=500), 2, False),
        (DecodeOptions(beam=2), DecodeOptions(beam=2, constraints=("le",) * 50), 2, False),
        (None, DecodeOptions(no_repeat_ngram=3), 2, False),
        (None, None, 20, False),
        (None, None, 2, True),
    ],
)
def test_every_factor_raises_the_estimate(base, options, texts, maps):
    before = decode_cost(TINY, [8, 8], [26, 26], base)
    T = options.max_len if options is not None and options.max_len else 26
    after = decode_cost(TINY, [8] * texts, [T] * texts, options, maps=maps)
    assert after.work > before.work and after.peak_bytes >= before.peak_bytes


def test_the_hostile_body_is_gigabytes_and_plain_ones_are_not():
    # 50 texts, beam 8, n_best 8, min_len 1023 (every step but the last), max_len 1024, align:
    # measured trying to allocate 6.7 GB.
    asked = DecodeOptions(beam=8, n_best=8, min_len=1023, max_len=1024, align=True)
    hostile = decode_cost(TINY, [6] * 50, [1024] * 50, asked)
    plain = decode_cost(TINY, [32] * 64, [74] * 64, DecodeOptions(beam=8))
    assert 4 * 2**30 < hostile.peak_bytes < 12 * 2**30
    assert plain.peak_bytes < 100 * 2**20 and hostile.work > 5 * plain.work


def test_the_refusal_names_the_option_that_saves_most():
    t = Tiny()
    hostile = DecodeOptions(beam=8, n_best=8, min_len=1023, max_len=1024, align=True)
    line = over_budget(t, [6] * 50, hostile, max_work=None, max_bytes=2**30, bytes_flag="--max-request-mb")
    assert line is not None and "\n" not in line
    assert "lower max_len (1024) first" in line and "--max-request-mb" in line and "GB of memory" in line
    many = DecodeOptions(beam=1, constraints=("le",) * 1000)  # many phrases within the default limit
    line = over_budget(t, [6], many, max_work=1e9, max_bytes=None, work_flag="--max-request-work")
    assert line is not None and "lower constraints (1000) first" in line
    assert over_budget(t, [6] * 3, DecodeOptions(beam=4), max_work=1e12, max_bytes=2**30) is None
