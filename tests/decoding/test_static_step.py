"""The static-shape decoding step (a GPU's: CUDA graphs or torch.compile over it) decodes what the dynamic cache
does: the same tokens, greedy and beam search, on the CPU in float32 (its eager mode)."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention.recording import record_attention
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.static import StaticDecoder, decoding_model
from attnlab.models import Transformer, TransformerConfig

EOS = 2


def _model(norm_first: bool = False) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=20, tgt_vocab_size=30, num_hiddens=32, num_heads=4, num_layers=2, ffn_num_hiddens=64,
        norm_first=norm_first,
    )  # fmt: skip
    model = Transformer(config).eval()
    with torch.no_grad():
        # Peaked, source-dependent outputs and a likely <eos>: sentences end at different steps.
        model.decoder.dense.weight.mul_(4)
        model.decoder.dense.bias[EOS] += 2
    return model


def _decode(model, options):
    g = torch.Generator().manual_seed(1)
    lens = torch.randint(2, 9, (12,), generator=g)
    src = torch.randint(3, 20, (12, 8), generator=g)
    src[torch.arange(8)[None] >= lens[:, None]] = 0
    return generate(model, src, lens, options, bos=1, eos=EOS, max_len=10)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("options", [DecodeOptions(beam=1), DecodeOptions(beam=4, n_best=2)], ids=["greedy", "beam4"])
def test_static_step_decodes_the_dynamic_caches_tokens(norm_first, options):
    model = _model(norm_first)
    dynamic = _decode(model, options)
    static = _decode(StaticDecoder(model, "static"), options)
    lengths = {len(h.tokens) for hs in dynamic for h in hs}
    assert len(lengths) >= 2  # sentences finish at different steps, so rows leave the batch
    assert [[h.tokens for h in hs] for hs in static] == [[h.tokens for h in hs] for hs in dynamic]
    for s, d in zip(static, dynamic):
        assert [h.score for h in s] == pytest.approx([h.score for h in d], abs=1e-5)


def test_static_step_is_used_only_where_it_computes_the_same():
    model = _model()
    assert isinstance(decoding_model(model, "static"), StaticDecoder)
    assert decoding_model(model, None) is model
    with record_attention(model):  # attention weights are recorded by the modules' own path
        assert decoding_model(model, "graphs") is model
    multi_query = Transformer(TransformerConfig(src_vocab_size=9, tgt_vocab_size=9, num_hiddens=8, num_heads=2,
                                                num_layers=1, ffn_num_hiddens=8, num_kv_heads=1))  # fmt: skip
    assert decoding_model(multi_query, "static") is multi_query
    with pytest.raises(ValueError, match="mode must be one of"):
        decoding_model(model, "fast")


@pytest.mark.parametrize("index", [[3, 1, 0], [1, 1, 0]], ids=["each-row-once", "a-row-twice"])
def test_reordered_rows_step_as_the_dynamic_caches_do(index):
    """Rows kept in place (renamed) or copied (a beam's parent taken twice) give the dynamic cache's logits."""
    model, static = _model(), StaticDecoder(_model(), "static")
    src, lens = torch.randint(3, 20, (4, 6), generator=torch.Generator().manual_seed(2)), torch.tensor([6, 4, 5, 2])
    states = [m.start_decoding(src, lens) for m in (model, static)]
    for state in states:
        state.reserve(5)
    tokens = [torch.tensor([[1], [1], [1], [1]]), torch.tensor([[4], [5], [6], [7]]), torch.tensor([[8], [9], [3]])]
    with torch.no_grad():
        for step, tok in enumerate(tokens):
            out = []
            for i, m in enumerate((model, static)):
                logits, states[i] = m.decode_step(tok, states[i])
                out.append(logits)
                if step == 1:
                    states[i] = m.reorder_state(states[i], torch.tensor(index))
            torch.testing.assert_close(out[1], out[0], atol=1e-5, rtol=1e-5)
