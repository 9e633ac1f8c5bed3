"""The decoding cost of a Transformer whose decoder is shallower than its encoder: the encoder's work counts
`num_layers` blocks once per sentence, every step and the caches count `decoder_layers` blocks, and the
recorded-weights count is what a recording of such a model keeps."""

from __future__ import annotations

import torch

from attnlab.attention import record_attention
from attnlab.decoding.cost import ModelShape, decode_cost, recorded_weights
from attnlab.decoding.options import DecodeOptions
from attnlab.models import Transformer, TransformerConfig


def shape(encoder: int, decoder: int | None) -> ModelShape:
    return ModelShape("transformer", encoder, 32, 2, 64, 76, decoder)


def test_the_config_gives_both_depths():
    model = {"num_layers": 4, "decoder_layers": 1, "num_hiddens": 32, "num_heads": 2}
    read = ModelShape.from_config({"model_type": "transformer", "model": model})
    assert (read.layers, read.decoder_depth) == (4, 1)
    equal = ModelShape.from_config({"model_type": "transformer", "model": {**model, "decoder_layers": None}})
    assert (equal.layers, equal.decoder_depth, equal.decoder_layers) == (4, 4, None)
    one_stack = ModelShape.from_config({"model_type": "decoder-only", "model": model})
    assert one_stack.decoder_depth == 4  # one stack: no decoder of its own


def test_recorded_weights_are_what_a_recording_of_a_3_plus_1_model_keeps():
    torch.manual_seed(0)
    cfg = TransformerConfig(20, 30, num_hiddens=16, num_heads=4, num_layers=3, decoder_layers=1, ffn_num_hiddens=32)
    model = Transformer(cfg).eval()
    S, T = 7, 5
    with record_attention(model) as rec:
        model(torch.randint(3, 20, (1, S)), torch.randint(3, 30, (1, T)), torch.tensor([S]))
    kept = sum(w.numel() for calls in rec.weights.values() for w in calls)
    assert recorded_weights(ModelShape.from_config({"model_type": "transformer", "model": cfg.to_dict()}), S, T) == kept


def test_the_encoder_counts_once_and_the_decoder_every_step():
    sources, outputs, options = [9, 12], [28, 34], DecodeOptions(beam=4, min_len=27)
    work = {(e, d): decode_cost(shape(e, d), sources, outputs, options).work for e in (1, 6) for d in (1, 6)}
    encoder_blocks = work[6, 1] - work[1, 1]
    assert encoder_blocks > 0 and work[6, 6] - work[1, 6] == encoder_blocks  # the encoder's share: depth-free
    assert work[1, 6] - work[1, 1] > 10 * encoder_blocks  # 4 hypotheses x ~30 steps of 5 more decoder blocks
    assert decode_cost(shape(6, None), sources, outputs, options).work == work[6, 6]
    # Decoding's memory is the decoder's caches: the encoder's depth does not change it.
    peak = {e: decode_cost(shape(e, 1), sources, outputs, options).peak_bytes for e in (1, 6)}
    assert peak[1] == peak[6] < decode_cost(shape(1, 6), sources, outputs, options).peak_bytes
