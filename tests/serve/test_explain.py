"""`explain`: one teacher-forced recorded forward gives exactly the attention of cached decoding."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from attnlab.analysis.explanation import explain
from attnlab.attention import record_attention
from attnlab.attention.recording import attention_maps
from attnlab.decoding.generator import generate
from attnlab.decoding.options import DecodeOptions
from attnlab.decoding.translator import InputError, TextTooLong


def greedy(model, src, lens, bos, eos, max_len, scores=True):
    """The generator's greedy search: one hypothesis per source."""
    opts = DecodeOptions()
    return [hs[0] for hs in generate(model, src, lens, replace(opts, scores=scores), bos=bos, eos=eos, max_len=max_len)]


def _check_shapes_and_rows(exp, cfg):
    N, H = cfg["num_layers"], cfg["num_heads"]
    Ls, Lt = len(exp.src_tokens), len(exp.tgt_tokens)
    assert exp.encoder_self.shape == (N, H, Ls, Ls)
    assert exp.decoder_self.shape == (N, H, Lt, Lt)
    assert exp.cross.shape == (N, H, Lt, Ls)
    assert len(exp.tgt_input_tokens) == Lt and exp.tgt_input_tokens[0] == "<bos>"

    def ones(*shape):
        return torch.ones(shape)

    torch.testing.assert_close(exp.encoder_self.sum(-1), ones(N, H, Ls))
    torch.testing.assert_close(exp.cross.sum(-1), ones(N, H, Lt))
    torch.testing.assert_close(exp.decoder_self.sum(-1), ones(N, H, Lt))
    # Causal: output t never looks at decoder inputs after t.
    future = ~torch.tril(torch.ones(Lt, Lt, dtype=torch.bool))
    if future.any():
        assert exp.decoder_self[..., future].abs().max().item() == 0.0


def test_shapes_tokens_and_rows(translator):
    exp = explain(translator, "i'm home .")
    _check_shapes_and_rows(exp, translator.config["model"])
    assert exp.src_tokens == ["i'm", "home", ".", "<eos>"]
    assert exp.finished and exp.tgt_tokens[-1] == "<eos>"
    assert exp.translation == translator.translate(["i'm home ."])[0]


def test_equals_cached_step_by_step_decoding(translator):
    """Per-step weights recorded while greedy decodes with the KV cache == the one-pass maps."""
    text = "i'm home ."
    exp = explain(translator, text, translator.options(beam=1))
    model, sv, tv = translator.model, translator.src_vocab, translator.tgt_vocab
    src = torch.tensor([sv.encode(text) + [sv.eos]])
    with torch.no_grad(), record_attention(model) as rec:
        (out,) = greedy(model, src, torch.tensor([src.shape[1]]), tv.bos, tv.eos, translator.output_limit(src.shape[1]))
    assert tv.to_tokens(out.tokens) + ["<eos>"] == exp.tgt_tokens and out.finished == exp.finished
    steps = len(rec.weights["decoder.blocks.0.cross_attention"])
    assert steps == len(exp.tgt_tokens) >= 2  # one recorded call per decoding step
    # Step 1 on its own: cached cross (1, H, 1, S) and self (1, H, 1, 2) weights == row 1 of the maps.
    for i in range(translator.config["model"]["num_layers"]):
        torch.testing.assert_close(
            rec.weights[f"decoder.blocks.{i}.cross_attention"][1][0, :, 0], exp.cross[i, :, 1], atol=1e-5, rtol=0
        )
        torch.testing.assert_close(
            rec.weights[f"decoder.blocks.{i}.self_attention"][1][0, :, 0],
            exp.decoder_self[i, :, 1, :2],
            atol=1e-5,
            rtol=0,
        )
    maps = attention_maps(rec)  # every step, stitched along the query axis
    for i in range(translator.config["model"]["num_layers"]):
        torch.testing.assert_close(maps[f"encoder.blocks.{i}.attention"][0], exp.encoder_self[i], atol=1e-5, rtol=0)
        torch.testing.assert_close(maps[f"decoder.blocks.{i}.cross_attention"][0], exp.cross[i], atol=1e-5, rtol=0)
        torch.testing.assert_close(
            maps[f"decoder.blocks.{i}.self_attention"][0], exp.decoder_self[i], atol=1e-5, rtol=0
        )


def test_beam_output_matches_translator(translator):
    exp = explain(translator, "he's calm .", translator.options(beam=3))
    assert exp.translation == translator.translate(["he's calm ."], options=translator.options(beam=3))[0]
    _check_shapes_and_rows(exp, translator.config["model"])


def test_unknown_words_are_unk(translator):
    exp = explain(translator, "zzqx home .")
    assert exp.src_tokens[0] == "<unk>" and exp.src_tokens[-1] == "<eos>"


def test_length_limit_without_eos(translator):
    """A decode cut at the output limit has no <eos> row: one map row per produced token."""
    short = copy.copy(translator)
    short.max_output_len = 1
    exp = explain(short, "i'm home .")
    assert not exp.finished and len(exp.tgt_tokens) == 1 and exp.tgt_input_tokens == ["<bos>"]
    _check_shapes_and_rows(exp, translator.config["model"])


def test_to_dict_rounds(translator):
    d = explain(translator, "go .").to_dict(decimals=4)
    flat = [w for layer in d["attention"]["cross"] for head in layer for row in head for w in row]
    assert all(round(w, 4) == w for w in flat)
    assert set(d["attention"]) == {"encoder_self", "decoder_self", "cross"}


@pytest.mark.parametrize(
    "text, error",
    [
        ("", InputError),
        ("   \n", InputError),
        ("a" * 501, TextTooLong),
        ("go " * 40, InputError),
        (None, InputError),
    ],
)
def test_bad_text(translator, text, error):
    with pytest.raises(error):
        explain(translator, text)


def test_bad_beam(translator):
    with pytest.raises(ValueError, match="beam"):
        explain(translator, "go .", translator.options(beam=0))


def test_bahdanau_has_only_cross_attention(translator):
    """An RNN decoder records one call per step; explain stitches them into one (1, 1, Lt, Ls) map."""
    from attnlab.decoding.translator import Translator
    from attnlab.models import build_model

    torch.manual_seed(0)
    model = build_model(
        "bahdanau",
        {
            "src_vocab_size": len(translator.src_vocab),
            "embed_size": 8,
            "tgt_vocab_size": len(translator.tgt_vocab),
            "num_hiddens": 8,
            "num_layers": 1,
        },
    )
    rnn = Translator(
        model, translator.src_vocab, translator.tgt_vocab, {"model_type": "bahdanau"}, max_len=9, max_output_len=6
    )
    exp = explain(rnn, "i'm home .")
    assert exp.encoder_self.numel() == 0 and exp.decoder_self.numel() == 0
    assert exp.cross.shape == (1, 1, len(exp.tgt_tokens), len(exp.src_tokens))
    torch.testing.assert_close(exp.cross.sum(-1), torch.ones(1, 1, len(exp.tgt_tokens)))


def test_a_phrase_given_twice_must_appear_twice(translator):
    """constraints_met counts as the search does: a phrase given twice is met by two occurrences, not one
    (counted here by hand over the tokens); through explain, every output holds it twice."""
    from attnlab.analysis.explanation import _entry
    from attnlab.decoding.hypothesis import Hypothesis

    vocab = translator.tgt_vocab
    word = next(t for t in vocab.to_tokens(range(len(vocab))) if t.isalpha())
    (w,) = vocab.encode(word)
    x = w + 1  # another token
    once, twice = Hypothesis([w, x, x], -1.0, True), Hypothesis([w, x, w], -1.0, True)
    for h in (once, twice):
        assert _entry(vocab, h, [[w], [w]])["constraints_met"] is (h.tokens.count(w) >= 2)
        assert _entry(vocab, h, [[w]])["constraints_met"] is True
    exp = explain(translator, "i'm home .", translator.options(beam=3, n_best=2, constraints=(word, word)))
    assert exp.nbest and all(vocab.encode(h["text"]).count(w) >= 2 and h["constraints_met"] for h in exp.nbest)
