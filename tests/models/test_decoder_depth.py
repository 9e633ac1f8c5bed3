"""A decoder shallower than the encoder (`TransformerConfig.decoder_layers`): the stacks' depths, the cache
against a full forward, causality, the parameter count, the cache-size estimate, and configs without the key."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.cli import main
from attnlab.data import Vocab
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.models import CONFIGS, Transformer, TransformerConfig, build_model
from attnlab.runs.config import write_run_config
from attnlab.runs.loading import load_translator
from attnlab.runs.weights import save_weights

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(num_hiddens=16, num_heads=4, ffn_num_hiddens=32, dropout=0.0)


def deep_shallow(encoder: int = 3, decoder: int | None = 1, **kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(13, 11, num_layers=encoder, decoder_layers=decoder, **{**SMALL, **kw})).eval()


def batch(B=3, S=7, T=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([S, 4, 2][:B])
    src = torch.randint(3, 13, (B, S), generator=g).masked_fill(torch.arange(S)[None] >= lens[:, None], 0)
    return src, torch.randint(3, 11, (B, T), generator=g), lens


def test_the_stacks_have_their_own_depths():
    model = deep_shallow()
    assert len(model.encoder.blocks) == 3 and len(model.decoder.blocks) == 1
    assert model.config.decoder_depth == 1
    assert [len(v) for v in model.attention_kinds().values()] == [3, 1, 1]
    src, _, lens = batch()
    assert len(model.start_decoding(src, lens).caches) == 1  # one (self, cross) cache pair per decoder block
    unset = deep_shallow(decoder=None)
    assert len(unset.decoder.blocks) == 3 and unset.config.decoder_depth == 3


@pytest.mark.parametrize("kw", [{}, {"norm_first": True}, {"positions": "rope"}, {"positions": "t5"}])
def test_cached_decoding_equals_full_forward_at_every_step(kw):
    model = deep_shallow(**kw)
    src, tgt, lens = batch()
    full = model(src, tgt, lens)
    state = model.start_decoding(src, lens)
    logits, state = model.decode_step(tgt[:, :2], state)
    torch.testing.assert_close(logits, full[:, :2], atol=1e-5, rtol=1e-5)
    for t in range(2, tgt.shape[1]):
        logits, state = model.decode_step(tgt[:, t : t + 1], state)
        torch.testing.assert_close(logits[:, 0], full[:, t], atol=1e-5, rtol=1e-5)


def test_beam_search_scores_are_the_full_forwards_log_probabilities():
    model = deep_shallow()
    src, _, lens = batch()
    hyps = generate(model, src, lens, DecodeOptions(beam=3), bos=1, eos=2, max_len=6)
    for i, nbest in enumerate(hyps):
        best = nbest[0]
        out = [*best.tokens, 2] if best.finished else best.tokens
        tokens = torch.tensor([[1, *out]])
        logp = model(src[i : i + 1], tokens[:, :-1], lens[i : i + 1]).log_softmax(-1)[0]
        expected = logp.gather(1, tokens[0, 1:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(best.positional_scores), expected, atol=1e-4, rtol=1e-4)


def test_future_target_tokens_never_change_earlier_outputs():
    model = deep_shallow()
    src, tgt, lens = batch(T=6)
    base = model(src, tgt, lens)
    for k in range(1, tgt.shape[1]):
        changed = tgt.clone()
        changed[:, k:] = (changed[:, k:] + 1 - 3) % 8 + 3
        out = model(src, changed, lens)
        torch.testing.assert_close(out[:, :k], base[:, :k], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, k:], base[:, k:])


def count(encoder: int, decoder: int) -> int:
    return sum(p.numel() for p in deep_shallow(encoder, decoder).parameters())


def test_parameter_count_is_each_stack_at_its_own_depth():
    block = {name: count(2, 1) - count(1, 1) for name in ("encoder",)} | {"decoder": count(1, 2) - count(1, 1)}
    D, F = SMALL["num_hiddens"], SMALL["ffn_num_hiddens"]
    ffn = 2 * D * F + F + D
    assert block["encoder"] == 4 * (D * D + D) + ffn + 2 * 2 * D  # attention, FFN, two LayerNorms
    assert block["decoder"] == 8 * (D * D + D) + ffn + 3 * 2 * D  # two attentions, FFN, three LayerNorms
    assert count(3, 1) == count(1, 1) + 2 * block["encoder"]
    assert count(3, 1) == count(3, 3) - 2 * block["decoder"]


def test_the_cache_size_estimate_counts_decoder_blocks():
    deep = TransformerConfig(5, 5, num_layers=6, decoder_layers=1)
    balanced = TransformerConfig(5, 5, num_layers=6)
    assert balanced.kv_cache_bytes(10, 20) == 6 * deep.kv_cache_bytes(10, 20)
    assert deep.kv_cache_bytes(1) == 2 * 1 * 8 * 64 * 4  # K and V, one block, 8 heads of 64, float32


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_decoder_depth_is_one_line(bad):
    with pytest.raises(ValueError, match="decoder_layers") as err:
        TransformerConfig(5, 5, decoder_layers=bad)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="decoder_layers") as err:
        TransformerConfig.from_dict({"src_vocab_size": 5, "tgt_vocab_size": 5, "decoder_layers": bad})
    assert "\n" not in str(err.value)


def test_configs_round_trip_with_and_without_the_key():
    cfg = TransformerConfig(12, 14, num_layers=3, decoder_layers=1, **SMALL)
    assert CONFIGS["transformer"].from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    old = {k: v for k, v in TransformerConfig(12, 14, num_layers=2, **SMALL).to_dict().items() if k != "decoder_layers"}
    loaded = TransformerConfig.from_dict(old)
    assert loaded.decoder_layers is None and loaded.decoder_depth == 2
    assert len(build_model("transformer", old).decoder.blocks) == 2


def test_a_run_saved_without_the_key_loads_and_translates_unchanged(tmp_path, capsys):
    vocab = Vocab(["i", "am", "home", ".", "go", "now"], min_freq=1)
    cfg = dict(num_hiddens=8, num_layers=2, num_heads=2, ffn_num_hiddens=16, dropout=0.0, max_len=16)
    cfg.update(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab))
    torch.manual_seed(0)
    model = build_model("transformer", cfg)
    run = tmp_path / "old"
    write_run_config(
        run, "transformer", cfg, {}, {}, src_vocab=vocab, tgt_vocab=vocab
    )  # config.json as runs before the key
    save_weights(model, run / "model.safetensors")
    before = (run / "config.json").read_text()
    assert "decoder_layers" not in before
    translator = load_translator(run)
    assert len(translator.model.decoder.blocks) == 2 and translator.model.config.decoder_layers is None
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "go now ."]) == 0
    assert capsys.readouterr().err.strip() == ""  # no note: the key's absence is today's default
    assert (run / "config.json").read_text() == before
